//! A strided convolution's columns through phase planes. A convolution of stride `s`
//! reads every `s`-th input value along an axis, so each input plane is first split into
//! `sy x sx` phase planes (phase `(ry, rx)` holds the values whose row is `ry` modulo `sy`
//! and whose column is `rx` modulo `sx`), each `ceil(h / sy) x ceil(w / sx)`, zero past the
//! image. A row of the columns then reads one phase plane at stride 1, shifted by its
//! kernel entry: where the output is as wide as a phase plane, that is one run of the plane
//! per sample, copied as a "same" convolution's row is, in place of a strided gather of
//! each output row (a 3x3 convolution of stride 2 reads its input nine times, the split
//! once).

use core::ops::Range;

use super::{ConvShape, rows_per_job, shifted_run, strided_copy};
use crate::cpu::Isa;
use crate::cpu::cast::{self, CpuFloat, Format};
use crate::cpu::multiversion::multiversion;
use crate::cpu::parallel;

/// The phase planes of a strided convolution whose output is as wide as them.
pub(super) struct Phases {
    stride: [usize; 2],
    /// A phase plane's height and width.
    size: [usize; 2],
}

impl Phases {
    /// The phase planes of `shape` (output `[oh, ow]`), or `None` where a row of the
    /// columns is not one run of them: stride 1 (the input plane serves as it is), or an
    /// output narrower or wider than a phase plane; and where a stride exceeds the input
    /// (the phase planes, `sy x sx` of them, would then outnumber its values).
    pub(super) fn of(shape: &ConvShape, [_, ow]: [usize; 2]) -> Option<Phases> {
        let [sy, sx] = shape.stride;
        let [h, w] = shape.size;
        let size = [h.div_ceil(sy), w.div_ceil(sx)];
        let fits = sy <= h && sx <= w;
        (shape.stride != [1, 1] && fits && size[1] == ow).then_some(Phases {
            stride: shape.stride,
            size,
        })
    }

    /// Values of one phase plane.
    fn plane(&self) -> usize {
        self.size[0] * self.size[1]
    }

    /// Values of one input plane's phase planes.
    fn per_input_plane(&self) -> usize {
        self.stride[0] * self.stride[1] * self.plane()
    }

    /// The phase planes of the samples `samples` of `x` (the whole batch, `[batch,
    /// channels, h, w]`): `[samples, channels, sy, sx, ph, pw]`, in `x`'s type.
    pub(super) fn split<S: CpuFloat>(
        &self,
        isa: Isa,
        shape: &ConvShape,
        x: &[S],
        samples: Range<usize>,
    ) -> Vec<S> {
        let [h, w] = shape.size;
        let per = self.per_input_plane();
        // Zeroed memory: the values past the image are left as they are.
        let mut phases = cast::zeroed::<S>(samples.len() * shape.channels * per);
        let first = samples.start * shape.channels;
        parallel::rows(&mut phases, per, rows_per_job(per), |p, out| {
            self.split_plane(isa, [h, w], &x[(first + p) * h * w..][..h * w], out)
        });
        phases
    }

    /// One input plane `src` (`h x w`) into its phase planes `out`.
    fn split_plane<S: CpuFloat>(&self, isa: Isa, [_, w]: [usize; 2], src: &[S], out: &mut [S]) {
        let [sy, sx] = self.stride;
        if sx == 2 && w > 1 {
            // Both column phases of a line in one pass over its pairs, on the values' bits.
            let size = self.size;
            match S::FORMAT {
                Format::F32 => {
                    split_pairs_32(isa, cast::bits(src), w, sy, size, cast::bits_mut(out))
                }
                _ => split_pairs_16(isa, cast::bits(src), w, sy, size, cast::bits_mut(out)),
            }
            return;
        }
        let [ph, pw] = self.size;
        for (iy, line) in src.chunks_exact(w).enumerate() {
            let (ry, y) = (iy % sy, iy / sy);
            let at = |rx: usize| ((ry * sx + rx) * ph + y) * pw;
            for rx in 0..sx.min(w) {
                let dst = &mut out[at(rx)..][..(w - rx).div_ceil(sx)];
                strided_copy(dst, &line[rx..], sx, |v| *v);
            }
        }
    }

    /// Row `k` of the columns (patch entry `(c, i, j)`) from `phases`, the phase planes of
    /// the row's samples.
    pub(super) fn row<S: CpuFloat, D: CpuFloat>(
        &self,
        isa: Isa,
        shape: &ConvShape,
        phases: &[S],
        k: usize,
        row: &mut [D],
    ) {
        let [oh, ow] = shape.out_size().expect("checked by the caller");
        let [kh, kw] = shape.kernel;
        let (c, i, j) = (k / (kh * kw), k / kw % kh, k % kw);
        let (ry, ys, y0) = self.along(shape, 0, i, oh);
        let (rx, xs, x0) = self.along(shape, 1, j, ow);
        let (plane, per) = (self.plane(), self.per_input_plane());
        let at = (ry * self.stride[1] + rx) * plane;
        for (s, out) in row.chunks_mut(oh * ow).enumerate() {
            let src = &phases[(s * shape.channels + c) * per + at..][..plane];
            shifted_run(isa, src, ow, (ys.clone(), y0), (xs.clone(), x0), out);
        }
    }

    /// Along `d`, for kernel offset `k` and `outs` outputs: the phase the offset reads, the
    /// outputs whose phase coordinate (output `o` reads `o + q`, `q` the offset's whole
    /// strides, negative in the padding) lies inside a phase plane, and the phase
    /// coordinate of the first.
    fn along(
        &self,
        shape: &ConvShape,
        d: usize,
        k: usize,
        outs: usize,
    ) -> (usize, Range<usize>, usize) {
        let (s, len) = (self.stride[d], self.size[d]);
        // Input coordinate o * s + shift - p, shift - p = q * s + r with 0 <= r < s.
        let (shift, p) = (k * shape.dilation[d], shape.padding[d]);
        if shift >= p {
            let q = (shift - p) / s;
            let hi = len.saturating_sub(q).min(outs);
            ((shift - p) % s, 0..hi, q)
        } else {
            // q = -ceil((p - shift) / s): outputs from -q on read the plane, from its start.
            let back = (p - shift).div_ceil(s);
            let hi = len.saturating_add(back).min(outs);
            let lo = back.min(hi);
            (back * s - (p - shift), lo..hi, 0)
        }
    }
}

/// The phase planes of one input plane `src` (lines of `w`, `w >= 2`) at column stride 2
/// and row stride `sy`, phase planes `[ph, pw]`: line `iy`'s even columns to phase
/// `(iy % sy, 0)`, its odd ones to `(iy % sy, 1)`, both at line `iy / sy`.
#[inline(always)]
fn split_pairs<T: Copy>(src: &[T], w: usize, sy: usize, [ph, pw]: [usize; 2], out: &mut [T]) {
    let (mut ry, mut y) = (0, 0);
    for line in src.chunks_exact(w) {
        let at = |rx: usize| ((ry * 2 + rx) * ph + y) * pw;
        let (left, right) = out.split_at_mut(at(1));
        let (even, odd) = (&mut left[at(0)..][..pw], &mut right[..w / 2]);
        let pairs = line.chunks_exact(2);
        if let Some(&v) = pairs.remainder().first() {
            even[pw - 1] = v;
        }
        for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(pairs) {
            *e = pair[0];
            *o = pair[1];
        }
        ry += 1;
        if ry == sy {
            (ry, y) = (0, y + 1);
        }
    }
}

multiversion! {
    /// [`split_pairs`] on 32-bit values.
    fn split_pairs_32(src: &[u32], w: usize, sy: usize, size: [usize; 2], out: &mut [u32]) {
        split_pairs(src, w, sy, size, out)
    }
}

multiversion! {
    /// [`split_pairs`] on 16-bit values.
    fn split_pairs_16(src: &[u16], w: usize, sy: usize, size: [usize; 2], out: &mut [u16]) {
        split_pairs(src, w, sy, size, out)
    }
}
