//! Depthwise convolutions: as many groups as channels, one output channel a group, each
//! channel convolved with its own kernel (`weight [channels, 1, kh, kw]`). A product per
//! group would be a `1 x kh kw` matrix: these run directly instead, a plane at a time in
//! f32 (the input or output gradient rounded to the compute format first, as the GEMM
//! rounds its operands), a row of outputs summed along the kernel's taps, the sums in f32.
//!
//! ```
//! use burn_amp_kernels::cpu::{Isa, cast::Format, conv::{self, ConvShape}};
//!
//! // Two channels of a 3x3 image, a 2x2 kernel each: channel 1's kernel sums its patch.
//! let shape = ConvShape::new(1, 2, [3, 3], [2, 2]);
//! let x: Vec<f32> = (0..18).map(|v| v as f32).collect();
//! let weight = [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0];
//! let mut y = vec![0f32; 2 * 4];
//! conv::depthwise(Isa::detect(), &shape, Format::F32, &x, &weight, None, &mut y)?;
//! assert_eq!(y, [0.0, 0.0, 0.0, 0.0, 9.0 + 10.0 + 12.0 + 13.0, 48.0, 56.0, 60.0]);
//! # Ok::<(), conv::ConvError>(())
//! ```

use super::{ConvError, ConvShape, check_len, product};
use crate::cpu::Isa;
use crate::cpu::cast::{self, CpuFloat, Format};
use crate::cpu::erased::{typed, typed_mut};
use crate::cpu::multiversion::multiversion;
use crate::cpu::parallel;

/// Values a task takes at least: planes go to the threads in groups this large.
const TASK_VALUES: usize = 1 << 15;

/// The depthwise convolution of `x` (`[batch, channels, h, w]`, rounded to `format`) by
/// `weight` (`[channels, kh, kw]`, f32, already in the compute format) plus `bias` (one
/// value a channel), into `out` (`[batch, channels, oh, ow]`), rounded to its type.
///
/// # Errors
/// [`ConvError::Geometry`] when the kernel does not fit, [`ConvError::Length`] when a slice
/// does not hold what the shape implies.
pub fn depthwise<X: CpuFloat, O: CpuFloat>(
    isa: Isa,
    shape: &ConvShape,
    format: Format,
    x: &[X],
    weight: &[f32],
    bias: Option<&[f32]>,
    out: &mut [O],
) -> Result<(), ConvError> {
    let planes = Planes::of(shape)?;
    planes.check("input", x.len(), planes.input)?;
    planes.check("output", out.len(), planes.output)?;
    check_len("weight", shape.channels * planes.taps, weight.len())?;
    if let Some(bias) = bias {
        check_len("bias", shape.channels, bias.len())?;
    }
    let (x, out) = (X::floats(x), O::floats_mut(out));
    typed!(x, |x| typed_mut!(out, |out| {
        planes.forward(isa, format, x, weight, bias, out)
    }));
    Ok(())
}

/// The input gradient of [`depthwise`]: `dy` (`[batch, channels, oh, ow]`, rounded to
/// `format`) through `weight` (`[channels, kh, kw]`) into `dx` (`[batch, channels, h,
/// w]`), rounded to its type.
///
/// # Errors
/// As [`depthwise`].
pub fn depthwise_input_grad<G: CpuFloat, D: CpuFloat>(
    isa: Isa,
    shape: &ConvShape,
    format: Format,
    dy: &[G],
    weight: &[f32],
    dx: &mut [D],
) -> Result<(), ConvError> {
    let planes = Planes::of(shape)?;
    planes.check("output gradient", dy.len(), planes.output)?;
    planes.check("input gradient", dx.len(), planes.input)?;
    check_len("weight", shape.channels * planes.taps, weight.len())?;
    let (dy, dx) = (G::floats(dy), D::floats_mut(dx));
    typed!(dy, |dy| typed_mut!(dx, |dx| {
        planes.input_grad(isa, format, dy, weight, dx)
    }));
    Ok(())
}

/// The weight gradient of [`depthwise`] (`[channels, kh, kw]`) from `x` and `dy`, both
/// rounded to `format`, and the bias gradient (`dy`'s sum a channel) where `db` is given;
/// summed over the batch in f32, each channel in one order whatever the threads.
///
/// # Errors
/// As [`depthwise`].
pub fn depthwise_weight_grad<X: CpuFloat, G: CpuFloat>(
    isa: Isa,
    shape: &ConvShape,
    format: Format,
    x: &[X],
    dy: &[G],
    dw: &mut [f32],
    db: Option<&mut [f32]>,
) -> Result<(), ConvError> {
    let planes = Planes::of(shape)?;
    planes.check("input", x.len(), planes.input)?;
    planes.check("output gradient", dy.len(), planes.output)?;
    check_len("weight gradient", shape.channels * planes.taps, dw.len())?;
    if let Some(db) = db.as_deref() {
        check_len("bias gradient", shape.channels, db.len())?;
    }
    let (x, dy) = (X::floats(x), G::floats(dy));
    typed!(x, |x| typed!(dy, |dy| {
        planes.weight_grad(isa, format, x, dy, dw, db)
    }));
    Ok(())
}

/// A depthwise convolution's sizes.
struct Planes {
    shape: ConvShape,
    out: [usize; 2],
    /// Values of an input plane, of an output plane, and the kernel's taps.
    plane: usize,
    out_plane: usize,
    taps: usize,
    /// Values of the whole input and output.
    input: usize,
    output: usize,
    /// The padded input plane's height and width.
    padded: [usize; 2],
}

impl Planes {
    fn of(shape: &ConvShape) -> Result<Planes, ConvError> {
        let out = shape.check()?;
        let [h, w] = shape.size;
        let [ph, pw] = shape.padding;
        let too_large = || ConvError::TooLarge {
            what: "padded plane",
        };
        let padded = [
            ph.checked_mul(2)
                .and_then(|p| p.checked_add(h))
                .ok_or_else(too_large)?,
            pw.checked_mul(2)
                .and_then(|p| p.checked_add(w))
                .ok_or_else(too_large)?,
        ];
        product("padded plane", &padded)?;
        let planes = product("planes", &[shape.batch, shape.channels])?;
        Ok(Planes {
            shape: *shape,
            out,
            plane: product("input plane", &shape.size)?,
            out_plane: product("output plane", &out)?,
            taps: product("kernel", &shape.kernel)?,
            input: product("input", &[planes, h, w])?,
            output: product("output", &[planes, out[0], out[1]])?,
            padded,
        })
    }

    fn check(&self, what: &'static str, got: usize, expected: usize) -> Result<(), ConvError> {
        check_len(what, expected, got)
    }

    /// Planes a task takes, of `values` values each.
    fn per_task(values: usize) -> usize {
        TASK_VALUES.div_ceil(values.max(1))
    }

    /// Plane `src` rounded to `format`, in f32, into the inside of `padded` (its border
    /// stays as it is: zeros).
    fn load_padded<S: CpuFloat>(
        &self,
        isa: Isa,
        format: Format,
        src: &[S],
        stage: &mut Stage,
        padded: &mut [f32],
    ) {
        let [ph, pw] = self.shape.padding;
        let w = self.shape.size[1];
        let values = stage.rounded(isa, format, src);
        for (y, row) in values.chunks_exact(w.max(1)).enumerate() {
            padded[(y + ph) * self.padded[1] + pw..][..w].copy_from_slice(row);
        }
    }

    fn forward<X: CpuFloat, O: CpuFloat>(
        &self,
        isa: Isa,
        format: Format,
        x: &[X],
        weight: &[f32],
        bias: Option<&[f32]>,
        out: &mut [O],
    ) {
        let (c, plane, out_plane) = (self.shape.channels, self.plane, self.out_plane);
        let ([kh, kw], [oh, ow]) = (self.shape.kernel, self.out);
        let ([sy, sx], [dy, dx]) = (self.shape.stride, self.shape.dilation);
        let pw = self.padded[1];
        if out_plane == 0 {
            return;
        }
        let per_task = Self::per_task(out_plane.max(plane));
        parallel::chunks(out, per_task * out_plane, |t, planes| {
            let mut padded = vec![0f32; self.padded[0] * pw];
            let (mut stage, mut acc) = (Stage::default(), vec![0f32; ow]);
            for (i, dst) in planes.chunks_mut(out_plane).enumerate() {
                let p = t * per_task + i;
                let ch = p % c;
                self.load_padded(
                    isa,
                    format,
                    &x[p * plane..][..plane],
                    &mut stage,
                    &mut padded,
                );
                let taps = &weight[ch * kh * kw..][..kh * kw];
                let b = bias.map_or(0.0, |b| b[ch]);
                for (oy, row) in dst.chunks_exact_mut(ow).enumerate().take(oh) {
                    acc.fill(b);
                    for (ki, taps) in taps.chunks_exact(kw).enumerate() {
                        let src = &padded[(oy * sy + ki * dy) * pw..][..pw];
                        accumulate_row(isa, &mut acc, src, taps, sx, dx);
                    }
                    cast::convert_block(isa, &acc, row);
                }
            }
        });
    }

    fn input_grad<G: CpuFloat, D: CpuFloat>(
        &self,
        isa: Isa,
        format: Format,
        dy_all: &[G],
        weight: &[f32],
        dx: &mut [D],
    ) {
        let (c, plane, out_plane) = (self.shape.channels, self.plane, self.out_plane);
        let ([kh, kw], [_, ow]) = (self.shape.kernel, self.out);
        let ([sy, sx], [dily, dilx]) = (self.shape.stride, self.shape.dilation);
        let ([ph, ppw], [h, w]) = (self.shape.padding, self.shape.size);
        let pw = self.padded[1];
        if plane == 0 {
            return;
        }
        let per_task = Self::per_task(out_plane.max(plane));
        parallel::chunks(dx, per_task * plane, |t, planes| {
            let mut padded = vec![0f32; self.padded[0] * pw];
            let mut stage = Stage::default();
            for (i, dst) in planes.chunks_mut(plane).enumerate() {
                let p = t * per_task + i;
                let ch = p % c;
                padded.fill(0.0);
                let dy = stage.rounded(isa, format, &dy_all[p * out_plane..][..out_plane]);
                let taps = &weight[ch * kh * kw..][..kh * kw];
                for (oy, g) in dy.chunks_exact(ow.max(1)).enumerate() {
                    for (ki, taps) in taps.chunks_exact(kw).enumerate() {
                        let at = (oy * sy + ki * dily) * pw;
                        scatter_row(isa, &mut padded[at..][..pw], g, taps, sx, dilx);
                    }
                }
                for (y, row) in dst.chunks_exact_mut(w).enumerate().take(h) {
                    cast::convert_block(isa, &padded[(y + ph) * pw + ppw..][..w], row);
                }
            }
        });
    }

    fn weight_grad<X: CpuFloat, G: CpuFloat>(
        &self,
        isa: Isa,
        format: Format,
        x: &[X],
        dy_all: &[G],
        dw: &mut [f32],
        mut db: Option<&mut [f32]>,
    ) {
        let (c, plane, out_plane, taps) =
            (self.shape.channels, self.plane, self.out_plane, self.taps);
        let ([kh, kw], [_, ow]) = (self.shape.kernel, self.out);
        let ([sy, sx], [dily, dilx]) = (self.shape.stride, self.shape.dilation);
        let pw = self.padded[1];
        // Each channel's weight gradient, then its bias gradient: a task takes whole
        // channels, each summed over the batch in order.
        let mut sums = vec![0f32; c * (taps + 1)];
        let per_task = Self::per_task(self.shape.batch * out_plane.max(plane));
        if taps > 0 && out_plane > 0 {
            parallel::chunks(&mut sums, per_task * (taps + 1), |t, sums| {
                let mut padded = vec![0f32; self.padded[0] * pw];
                let (mut xs, mut gs) = (Stage::default(), Stage::default());
                for (i, sums) in sums.chunks_mut(taps + 1).enumerate() {
                    let ch = t * per_task + i;
                    let (dw, db) = sums.split_at_mut(taps);
                    for n in 0..self.shape.batch {
                        let p = n * c + ch;
                        self.load_padded(
                            isa,
                            format,
                            &x[p * plane..][..plane],
                            &mut xs,
                            &mut padded,
                        );
                        let raw = &dy_all[p * out_plane..][..out_plane];
                        db[0] += cast::sum_widened(isa, raw);
                        let g = gs.rounded(isa, format, raw);
                        for ki in 0..kh {
                            for kj in 0..kw {
                                let mut s = 0f32;
                                for (oy, g) in g.chunks_exact(ow).enumerate() {
                                    let row = &padded[(oy * sy + ki * dily) * pw..][..pw];
                                    s += dot_row(isa, g, &row[kj * dilx..], sx);
                                }
                                dw[ki * kw + kj] += s;
                            }
                        }
                    }
                }
            });
        }
        for (ch, sums) in sums.chunks_exact(taps + 1).enumerate() {
            dw[ch * taps..][..taps].copy_from_slice(&sums[..taps]);
            if let Some(db) = db.as_deref_mut() {
                db[ch] = sums[taps];
            }
        }
    }
}

/// A task's buffers for a plane rounded to the compute format and widened back.
#[derive(Default)]
struct Stage {
    wide: Vec<f32>,
    narrow: Vec<u16>,
}

impl Stage {
    /// `src` rounded to `format` (exactly as converting it would), in f32.
    fn rounded<S: CpuFloat>(&mut self, isa: Isa, format: Format, src: &[S]) -> &[f32] {
        self.wide.resize(src.len(), 0.0);
        match format {
            Format::Bf16 if S::FORMAT != Format::Bf16 => {
                let narrow = narrowed::<S, half::bf16>(isa, src, &mut self.narrow);
                cast::convert_block(isa, narrow, &mut self.wide);
            }
            Format::F16 if S::FORMAT != Format::F16 => {
                let narrow = narrowed::<S, half::f16>(isa, src, &mut self.narrow);
                cast::convert_block(isa, narrow, &mut self.wide);
            }
            _ => cast::convert_block(isa, src, &mut self.wide),
        }
        &self.wide
    }
}

/// `src` in the 16-bit format `N`, in `buf`.
fn narrowed<'a, S: CpuFloat, N: CpuFloat + bytemuck::Pod>(
    isa: Isa,
    src: &[S],
    buf: &'a mut Vec<u16>,
) -> &'a [N] {
    buf.resize(src.len(), 0);
    let narrow: &mut [N] = bytemuck::cast_slice_mut(&mut buf[..]);
    cast::convert_block(isa, src, narrow);
    narrow
}

multiversion! {
    /// `acc[o] += taps[j] * src[o * stride + j * dilation]` for each tap `j` in order.
    fn accumulate_row(acc: &mut [f32], src: &[f32], taps: &[f32], stride: usize, dilation: usize) {
        let n = acc.len();
        for (j, &t) in taps.iter().enumerate() {
            let at = j * dilation;
            if stride == 1 {
                for (a, v) in acc.iter_mut().zip(&src[at..at + n]) {
                    *a += t * *v;
                }
            } else {
                for (o, a) in acc.iter_mut().enumerate() {
                    *a += t * src[at + o * stride];
                }
            }
        }
    }
}

multiversion! {
    /// `dst[o * stride + j * dilation] += taps[j] * g[o]` for each tap `j` in order.
    fn scatter_row(dst: &mut [f32], g: &[f32], taps: &[f32], stride: usize, dilation: usize) {
        let n = g.len();
        for (j, &t) in taps.iter().enumerate() {
            let at = j * dilation;
            if stride == 1 {
                for (d, v) in dst[at..at + n].iter_mut().zip(g) {
                    *d += t * *v;
                }
            } else {
                for (o, v) in g.iter().enumerate() {
                    dst[at + o * stride] += t * *v;
                }
            }
        }
    }
}

multiversion! {
    /// The sum of `g[o] * src[o * stride]` (16 running sums at stride 1).
    fn dot_row(g: &[f32], src: &[f32], stride: usize) -> f32 {
        if stride == 1 {
            crate::cpu::nn::dot16(g, &src[..g.len()])
        } else {
            g.iter().enumerate().map(|(o, v)| v * src[o * stride]).sum()
        }
    }
}
