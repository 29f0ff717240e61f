//! A convolution's input gradient as convolutions of the output gradient, one per phase
//! of the stride (see [`GradPhase`]).

use core::ops::Range;

use super::{
    ConvError, ConvShape, check_len, clear_padding, inside_rows, product, rows_per_job, shifted_run,
};
use crate::cpu::Isa;
use crate::cpu::cast::{self, CpuFloat};
use crate::cpu::erased::{Floats, FloatsMut, typed, typed_mut};
use crate::cpu::multiversion::multiversion;
use crate::cpu::parallel;

/// One kernel entry along an axis that a phase's input positions receive from: output
/// coordinate `t + offset` for phase coordinate `t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tap {
    /// The kernel coordinate.
    kernel: usize,
    /// The output coordinate's offset from the phase coordinate.
    offset: isize,
}

/// One phase of a convolution's input gradient: the input positions of one residue modulo
/// the stride (rows `ry + sy * t`, columns `rx + sx * u`), whose gradient is a stride-1
/// convolution of the output gradient `dy`.
///
/// Input row `iy` receives, from kernel row `i`, the output row `(iy + p - i * d) / s`
/// where that divides. For the rows `iy = ry + s * t` of one residue, the kernel rows that
/// divide are the same for every `t`, and each reads output row `t + e` for an offset `e`
/// of its own: those kernel rows are the phase's taps. With columns too, the input
/// gradient splits into `sy x sx` phases ([`ConvShape::grad_phases`]), each a product
///
/// `dx_phase [channels, positions] = weight_phase [channels, out x taps] x dy_cols [out x
/// taps, positions]`
///
/// ([`GradPhase::weight`], [`GradPhase::columns`]), whose results [`store_phases`] writes
/// at the phases' input positions. The phases cover every input position once, and their
/// taps every kernel entry that reads the input once: the products make the
/// multiplications that `weight^T x dy` followed by [`col2im`](super::col2im) makes, but
/// read the output gradient (at stride 1, in the compute format) where `col2im` reads a
/// column gradient `patch` times as large as the output, in f32, and they write the input
/// gradient once, in its own format, where `col2im` clears it and adds into it `kh x kw`
/// times.
///
/// ```
/// use burn_amp_kernels::cpu::{Isa, conv::ConvShape};
///
/// // A 3x3 convolution of stride 2 and padding 1: four phases (even and odd rows, even
/// // and odd columns); even rows take kernel row 1 alone, odd rows kernel rows 0 and 2.
/// let shape = ConvShape { stride: [2, 2], padding: [1, 1], ..ConvShape::new(1, 1, [8, 8], [3, 3]) };
/// let phases = shape.grad_phases()?;
/// assert_eq!(phases.len(), 4);
/// assert_eq!(phases[0].taps(), [1, 1]);
/// assert_eq!(phases[3].taps(), [2, 2]);
/// assert_eq!(phases.iter().map(|p| p.positions()).sum::<usize>(), 64);
/// # Ok::<(), burn_amp_kernels::cpu::conv::ConvError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GradPhase {
    residue: [usize; 2],
    size: [usize; 2],
    taps: [Vec<Tap>; 2],
}

impl ConvShape {
    /// The phases of the input gradient, rows' residues outer: every input position lies in
    /// exactly one, and every kernel entry that adds to the gradient is a tap of exactly one
    /// (an entry that reads only padding adds nothing and is a tap of none). A stride larger than the
    /// input has only as many phases as the input has rows and columns.
    ///
    /// # Errors
    /// [`ConvError::Geometry`] when the kernel does not fit, [`ConvError::TooLarge`] when a
    /// size overflows.
    pub fn grad_phases(&self) -> Result<Vec<GradPhase>, ConvError> {
        let [oh, ow] = self.check()?;
        self.sizes([oh, ow])?;
        let outs = [oh, ow];
        let along = |d: usize, r: usize| -> Result<Vec<Tap>, ConvError> {
            let (s, p) = (self.stride[d] as i128, self.padding[d] as i128);
            // The phase's coordinates, 0..len, reach outputs offset..offset + len.
            let len = self.size[d].saturating_sub(r).div_ceil(self.stride[d]) as i128;
            let mut taps = Vec::new();
            for k in 0..self.kernel[d] {
                // Fits: `check` bounded the dilated kernel by the padded input.
                let at = r as i128 + p - (k as i128) * self.dilation[d] as i128;
                let offset = at.div_euclid(s);
                // A tap whose outputs all lie outside the output adds nothing.
                if at.rem_euclid(s) == 0 && offset + len > 0 && offset < outs[d] as i128 {
                    let offset = isize::try_from(offset)
                        .map_err(|_| ConvError::TooLarge { what: "padding" })?;
                    taps.push(Tap { kernel: k, offset });
                }
            }
            Ok(taps)
        };
        let mut phases = Vec::new();
        for ry in 0..self.stride[0].min(self.size[0]) {
            for rx in 0..self.stride[1].min(self.size[1]) {
                let size = [
                    (self.size[0] - ry).div_ceil(self.stride[0]),
                    (self.size[1] - rx).div_ceil(self.stride[1]),
                ];
                phases.push(GradPhase {
                    residue: [ry, rx],
                    size,
                    taps: [along(0, ry)?, along(1, rx)?],
                });
            }
        }
        Ok(phases)
    }
}

impl GradPhase {
    /// The residues modulo the stride of its input rows and columns.
    pub fn residue(&self) -> [usize; 2] {
        self.residue
    }

    /// Its input rows and columns: `ceil((h - ry) / sy) x ceil((w - rx) / sx)`.
    pub fn size(&self) -> [usize; 2] {
        self.size
    }

    /// Its input positions in one sample.
    pub fn positions(&self) -> usize {
        self.size[0] * self.size[1]
    }

    /// The kernel rows and columns it receives gradient from (kernel entries in the
    /// padding's reach alone are left out: they add nothing here).
    pub fn taps(&self) -> [usize; 2] {
        [self.taps[0].len(), self.taps[1].len()]
    }

    /// The depth of its product for `out_channels` output channels: `out_channels x taps`.
    /// Zero where it receives nothing (a stride larger than the kernel): its gradient is
    /// zero.
    pub fn depth(&self, out_channels: usize) -> usize {
        out_channels * self.taps[0].len() * self.taps[1].len()
    }

    /// Its weight `[channels, depth]` (column `(o, ty, tx)`: `weight[o, c, i, j]` for its
    /// `ty`-th kernel row `i` and `tx`-th kernel column `j`) from the convolution's weight
    /// `[out_channels, channels, kh, kw]`.
    ///
    /// # Errors
    /// [`ConvError::Length`] when `weight` or `dst` does not hold what the shapes imply.
    pub fn weight<T: Copy>(
        &self,
        shape: &ConvShape,
        out_channels: usize,
        weight: &[T],
        dst: &mut [T],
    ) -> Result<(), ConvError> {
        let [kh, kw] = shape.kernel;
        let (c, depth) = (shape.channels, self.depth(out_channels));
        check_len(
            "weight",
            product("weight", &[out_channels, c, kh, kw])?,
            weight.len(),
        )?;
        check_len(
            "phase weight",
            product("phase weight", &[c, depth])?,
            dst.len(),
        )?;
        let mut at = 0;
        for ch in 0..c {
            for o in 0..out_channels {
                for ty in &self.taps[0] {
                    for tx in &self.taps[1] {
                        dst[at] = weight[((o * c + ch) * kh + ty.kernel) * kw + tx.kernel];
                        at += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// Its columns `[depth, samples * positions]` (row `(o, ty, tx)`, column `(n, t, u)`:
    /// `dy[n, o, t + ey, u + ex]` for the taps' offsets, zero outside the output) of the
    /// samples `samples` of the output gradient `dy` (the whole batch, `[batch,
    /// out_channels, oh, ow]`), each value rounded to `D`.
    ///
    /// # Errors
    /// [`ConvError::Geometry`] when the kernel does not fit, [`ConvError::Length`] when `dy`
    /// or `cols` does not hold what the shapes imply.
    pub fn columns<S: CpuFloat, D: CpuFloat>(
        &self,
        isa: Isa,
        shape: &ConvShape,
        out_channels: usize,
        dy: &[S],
        samples: Range<usize>,
        cols: &mut [D],
    ) -> Result<(), ConvError> {
        let (dy, cols) = (S::floats(dy), D::floats_mut(cols));
        self.columns_erased(isa, shape, out_channels, dy, samples, cols)
    }

    /// [`Self::columns`] for any types: not generic, so compiled here (`erased`).
    fn columns_erased(
        &self,
        isa: Isa,
        shape: &ConvShape,
        out_channels: usize,
        dy: Floats<'_>,
        samples: Range<usize>,
        cols: FloatsMut<'_>,
    ) -> Result<(), ConvError> {
        typed!(dy, |dy| typed_mut!(cols, |cols| self.columns_typed(
            isa,
            shape,
            out_channels,
            dy,
            samples,
            cols
        )))
    }

    fn columns_typed<S: CpuFloat, D: CpuFloat>(
        &self,
        isa: Isa,
        shape: &ConvShape,
        out_channels: usize,
        dy: &[S],
        samples: Range<usize>,
        cols: &mut [D],
    ) -> Result<(), ConvError> {
        let [oh, ow] = shape.check()?;
        let plane = product("output plane", &[oh, ow])?;
        check_len(
            "output gradient",
            product("output gradient", &[shape.batch, out_channels, plane])?,
            dy.len(),
        )?;
        if samples.end > shape.batch || samples.start > samples.end {
            return Err(ConvError::Length {
                what: "samples",
                expected: shape.batch,
                got: samples.end,
            });
        }
        let positions = self.positions();
        let width = product("phase columns", &[samples.len(), positions])?;
        let depth = self.depth(out_channels);
        check_len(
            "phase columns",
            product("phase columns", &[depth, width])?,
            cols.len(),
        )?;
        if width == 0 || depth == 0 {
            return Ok(());
        }
        let [ny, nx] = self.taps();
        parallel::rows(cols, width, rows_per_job(width), |k, row| {
            let (o, ty, tx) = (k / (ny * nx), k / nx % ny, k % nx);
            let (ys, y0) = self.reach(0, ty, oh);
            let (xs, x0) = self.reach(1, tx, ow);
            for (n, out) in samples.clone().zip(row.chunks_exact_mut(positions)) {
                let src = &dy[(n * out_channels + o) * plane..][..plane];
                self.shifted(isa, [oh, ow], src, (ys.clone(), y0), (xs.clone(), x0), out);
            }
        });
        Ok(())
    }

    /// Along `d`, for its `t`-th tap and `outs` outputs: the phase coordinates whose output
    /// coordinate lies inside the output, and the output coordinate of the first.
    fn reach(&self, d: usize, t: usize, outs: usize) -> (Range<usize>, usize) {
        let e = self.taps[d][t].offset;
        let len = self.size[d] as isize;
        // 0 <= u + e < outs, 0 <= u < len.
        let lo = (-e).clamp(0, len);
        let hi = (outs as isize - e).clamp(lo, len);
        let first = if lo < hi { (lo + e) as usize } else { 0 };
        (lo as usize..hi as usize, first)
    }

    /// One sample's share `out` (`ph x pw`) of a row of its columns from the output plane
    /// `src` (`oh x ow`): phase `(t, u)` reads `(y0 + t - ys.start, x0 + u - xs.start)` for
    /// `t` in `ys` and `u` in `xs`, zero elsewhere.
    fn shifted<S: CpuFloat, D: CpuFloat>(
        &self,
        isa: Isa,
        [_, ow]: [usize; 2],
        src: &[S],
        (ys, y0): (Range<usize>, usize),
        (xs, x0): (Range<usize>, usize),
        out: &mut [D],
    ) {
        let pw = self.size[1];
        if pw == ow {
            // Lines as wide as the output's: one run of the plane.
            shifted_run(isa, src, ow, (ys, y0), (xs, x0), out);
            return;
        }
        let zero = D::from_f32(0.0);
        let inside = inside_rows(out, &ys, pw, zero);
        for (n, seg) in inside.chunks_exact_mut(pw).enumerate() {
            let line = &src[(y0 + n) * ow..][..ow];
            cast::convert_block(isa, &line[x0..][..xs.len()], &mut seg[xs.clone()]);
        }
        clear_padding(inside, pw, &xs, zero);
    }
}

/// Stores the phases' products at their input positions of `dx` (`[samples, channels, h,
/// w]`, the samples the columns were taken of), rounded to `D`: `phases` are
/// [`ConvShape::grad_phases`] of `shape`, `products[i]` the product `[channels, samples *
/// positions]` (f32) of `phases[i]`. Each line of `dx` is gathered from its phases'
/// lines and written once, whole; a phase of depth 0 stores zeros, whatever its product
/// holds. `bias` (one f32 value per channel of `dx`) is added to every value of its
/// channel before the rounding: a transposed convolution's output is this input gradient
/// plus its bias.
///
/// # Errors
/// [`ConvError::Phases`] when `phases` are not the shape's, [`ConvError::Length`] when a
/// product, the bias or `dx` does not hold what the shapes imply.
pub fn store_phases<D: CpuFloat>(
    isa: Isa,
    shape: &ConvShape,
    out_channels: usize,
    phases: &[GradPhase],
    products: &[&[f32]],
    bias: Option<&[f32]>,
    dx: &mut [D],
) -> Result<(), ConvError> {
    if let Some(bias) = bias {
        check_len("bias", shape.channels, bias.len())?;
    }
    let stored = Stored {
        phases,
        products,
        bias,
    };
    store_erased(isa, shape, out_channels, &stored, D::floats_mut(dx))
}

/// What [`store_phases`] writes: the phases' products and the bias.
struct Stored<'a> {
    phases: &'a [GradPhase],
    products: &'a [&'a [f32]],
    bias: Option<&'a [f32]>,
}

/// [`store_phases`] for any type: not generic, so compiled here (`erased`).
fn store_erased(
    isa: Isa,
    shape: &ConvShape,
    out_channels: usize,
    stored: &Stored<'_>,
    dx: FloatsMut<'_>,
) -> Result<(), ConvError> {
    typed_mut!(dx, |dx| store_typed(isa, shape, out_channels, stored, dx))
}

fn store_typed<D: CpuFloat>(
    isa: Isa,
    shape: &ConvShape,
    out_channels: usize,
    &Stored {
        phases,
        products,
        bias,
    }: &Stored<'_>,
    dx: &mut [D],
) -> Result<(), ConvError> {
    if phases != shape.grad_phases()? {
        return Err(ConvError::Phases);
    }
    let [h, w] = shape.size;
    let (plane, per_sample) = (h * w, shape.sample());
    if per_sample == 0 {
        return check_len("input gradient", 0, dx.len());
    }
    if !dx.len().is_multiple_of(per_sample) {
        return Err(ConvError::Length {
            what: "input gradient",
            expected: dx.len().div_ceil(per_sample) * per_sample,
            got: dx.len(),
        });
    }
    let count = dx.len() / per_sample;
    check_len("phase products", phases.len(), products.len())?;
    for (phase, values) in phases.iter().zip(products) {
        let len = product("phase product", &[shape.channels, count, phase.positions()])?;
        check_len("phase product", len, values.len())?;
    }
    let [sy, sx] = shape.stride;
    let nx = sx.min(w);
    let channels = shape.channels;
    // Lines are gathered in f32 into a stage of whole lines and rounded a stage at a time:
    // a conversion per line of 16-32 values cost more in calls than in values.
    let stage = STAGE.max(w);
    let per_task = rows_per_job(plane);
    parallel::chunks(dx, per_task * plane, |t, planes| {
        let mut buf = vec![0f32; stage.min(plane)];
        for (i, dst) in planes.chunks_mut(plane).enumerate() {
            let p = t * per_task + i;
            let (n, c) = (p / channels, p % channels);
            let line = Lines {
                phases,
                products,
                first: c * count + n,
                out_channels,
            };
            let lines_per_stage = buf.len() / w;
            for (s, out) in dst.chunks_mut(lines_per_stage * w).enumerate() {
                let staged = &mut buf[..out.len()];
                let first = s * lines_per_stage;
                gather_lines(isa, &line, [sy, sx], nx, w, first, staged);
                if let Some(bias) = bias {
                    let b = bias[c];
                    staged.iter_mut().for_each(|v| *v += b);
                }
                cast::convert_block(isa, staged, out);
            }
        }
    });
    Ok(())
}

/// The phases' products' lines of one plane (sample and channel) of the input gradient.
struct Lines<'a> {
    phases: &'a [GradPhase],
    products: &'a [&'a [f32]],
    /// The plane's row of the products: channel x samples + sample.
    first: usize,
    out_channels: usize,
}

impl<'a> Lines<'a> {
    /// Phase `i`'s line `t`, or `None` for a phase that receives nothing (zeros).
    #[inline(always)]
    fn line(&self, i: usize, t: usize) -> Option<&'a [f32]> {
        let phase = &self.phases[i];
        let [_, pw] = phase.size;
        let at = self.first * phase.positions() + t * pw;
        (phase.depth(self.out_channels) > 0).then(|| &self.products[i][at..][..pw])
    }
}

multiversion! {
    /// The input lines `first..` of one plane gathered from its phases' lines into
    /// `staged` (whole lines of `w`), the stride `[sy, sx]`'s phases of a row `nx` apart
    /// (`nx`: the column stride or the width, the smaller).
    fn gather_lines(
        lines: &Lines<'_>,
        stride: [usize; 2],
        nx: usize,
        w: usize,
        first: usize,
        staged: &mut [f32],
    ) {
        let [sy, sx] = stride;
        let (mut t, mut ry) = (first / sy, first % sy);
        for seg in staged.chunks_exact_mut(w) {
            gather_line((sx, nx), t, ry * nx, lines, seg);
            ry += 1;
            if ry == sy {
                (t, ry) = (t + 1, 0);
            }
        }
    }
}

/// Line `t` of the phases `first..first + nx` (one residue of rows, every residue of
/// columns: `nx` is the stride or the width, the smaller) interleaved into `out`, an input
/// line.
#[inline(always)]
fn gather_line(
    (sx, nx): (usize, usize),
    t: usize,
    first: usize,
    lines: &Lines<'_>,
    out: &mut [f32],
) {
    match (nx, lines.line(first, t)) {
        (1, Some(src)) => out.copy_from_slice(src),
        (2, Some(even)) if let Some(odd) = lines.line(first + 1, t) => {
            // At stride 2 (or a width of 2): pairs of the two phases' columns.
            let pairs = out.chunks_exact_mut(2);
            for (pair, (e, o)) in pairs.zip(even.iter().zip(odd)) {
                pair[0] = *e;
                pair[1] = *o;
            }
            if out.len() % 2 == 1 {
                out[out.len() - 1] = even[out.len() / 2];
            }
        }
        _ => {
            // Any stride, a phase of depth 0 among them: value by value.
            for (x, v) in out.iter_mut().enumerate() {
                *v = lines.line(first + x % sx, t).map_or(0.0, |l| l[x / sx]);
            }
        }
    }
}

/// Values the store stages in f32 before rounding them, at least a line.
const STAGE: usize = 4096;
