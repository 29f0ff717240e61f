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
        if out_plane == 0 {
            return;
        }
        let per_task = Self::per_task(out_plane.max(plane));
        let window = self.window();
        parallel::chunks(out, per_task * out_plane, |t, planes| {
            let mut padded = vec![0f32; self.padded[0] * self.padded[1]];
            let (mut stage, mut acc) = (Stage::default(), vec![0f32; out_plane]);
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
                let taps = &weight[ch * self.taps..][..self.taps];
                let b = bias.map_or(0.0, |b| b[ch]);
                forward_plane(isa, &mut acc, &padded, taps, b, window);
                cast::convert_block(isa, &acc, dst);
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
        let ([ph, ppw], [h, w], [oh, ow]) = (self.shape.padding, self.shape.size, self.out);
        let pw = self.padded[1];
        if plane == 0 {
            return;
        }
        let per_task = Self::per_task(out_plane.max(plane));
        let window = self.window();
        parallel::chunks(dx, per_task * plane, |t, planes| {
            let mut padded = vec![0f32; self.padded[0] * pw];
            let (mut stage, mut acc, mut widened) = (Stage::default(), Vec::new(), Vec::new());
            for (i, dst) in planes.chunks_mut(plane).enumerate() {
                let p = t * per_task + i;
                let ch = p % c;
                let dy = stage.rounded(isa, format, &dy_all[p * out_plane..][..out_plane]);
                let taps = &weight[ch * self.taps..][..self.taps];
                if window.stride == [1, 1] && ow > 0 && taps.iter().all(|t| t.is_finite()) {
                    // Each input's sum gathered in a register, in the order the scatter
                    // below adds: `dy`'s rows read with zeros on each side.
                    let wide = (window.kernel[1] - 1) * window.dilation[1];
                    let row_len = ow + 2 * wide;
                    widened.resize(oh * row_len, 0.0);
                    for (src, dst) in dy.chunks_exact(ow).zip(widened.chunks_exact_mut(row_len)) {
                        dst[wide..wide + ow].copy_from_slice(src);
                    }
                    acc.resize(plane, 0.0);
                    input_grad_gather(isa, &mut acc, &widened, taps, window, [ph, ppw], [h, w]);
                    cast::convert_block(isa, &acc, dst);
                    continue;
                }
                padded.fill(0.0);
                input_grad_plane(isa, &mut padded, dy, taps, window);
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
        let ([kh, kw], [dily, dilx]) = (self.shape.kernel, self.shape.dilation);
        let pw = self.padded[1];
        let window = self.window();
        // Each channel's weight gradient, then its bias gradient: a task takes whole
        // channels, each summed over the batch in order (a tap's sum over a plane in the
        // running sums of `plane_dot`): one order whatever the threads.
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
                                let src = &padded[ki * dily * pw + kj * dilx..];
                                dw[ki * kw + kj] += plane_dot(isa, g, src, window);
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

/// Where a plane's taps read: the kernel, stride and dilation, the padded plane's row
/// width, the output plane's size.
#[derive(Clone, Copy)]
struct Window {
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    padded_width: usize,
    out: [usize; 2],
}

impl Planes {
    fn window(&self) -> Window {
        Window {
            kernel: self.shape.kernel,
            stride: self.shape.stride,
            dilation: self.shape.dilation,
            padded_width: self.padded[1],
            out: self.out,
        }
    }
}

/// Output columns a register holds while the taps add into them.
const COLUMNS: usize = 16;

multiversion! {
    /// One output plane from its padded input plane: each output `bias`, then
    /// `taps[ki][kj] * padded[(oy * sy + ki * dy) * pw + o * sx + kj * dx]` added tap by tap
    /// in order; sixteen outputs at a time, held while every tap adds into them.
    fn forward_plane(out: &mut [f32], padded: &[f32], taps: &[f32], bias: f32, window: Window) {
        let Window { kernel: [kh, kw], stride: [sy, sx], dilation: [dy, dx], .. } = window;
        let (pw, ow) = (window.padded_width, window.out[1]);
        for (oy, row) in out.chunks_exact_mut(ow).enumerate() {
            let top = oy * sy * pw;
            for (c, out) in row.chunks_mut(COLUMNS).enumerate() {
                let first = top + c * COLUMNS * sx;
                let mut acc = [bias; COLUMNS];
                for ki in 0..kh {
                    for kj in 0..kw {
                        let t = taps[ki * kw + kj];
                        let at = first + ki * dy * pw + kj * dx;
                        match (sx, out.len()) {
                            (1, COLUMNS) => {
                                let src: &[f32; COLUMNS] =
                                    padded[at..at + COLUMNS].try_into().expect("16 values");
                                for (a, v) in acc.iter_mut().zip(src) {
                                    *a += t * *v;
                                }
                            }
                            (_, n) => {
                                for (o, a) in acc[..n].iter_mut().enumerate() {
                                    *a += t * padded[at + o * sx];
                                }
                            }
                        }
                    }
                }
                out.copy_from_slice(&acc[..out.len()]);
            }
        }
    }
}

multiversion! {
    /// One output gradient plane `dy` through the taps into the padded input gradient
    /// plane: `padded[(oy * sy + ki * dy) * pw + o * sx + kj * dx] += taps[ki][kj] * g[oy][o]`
    /// for each output row, then each tap, in order.
    fn input_grad_plane(padded: &mut [f32], g: &[f32], taps: &[f32], window: Window) {
        let Window { kernel: [_, kw], stride: [sy, sx], dilation: [dy, dx], .. } = window;
        let (pw, ow) = (window.padded_width, window.out[1]);
        for (oy, g) in g.chunks_exact(ow).enumerate() {
            for (ki, taps) in taps.chunks_exact(kw).enumerate() {
                let dst = &mut padded[(oy * sy + ki * dy) * pw..][..pw];
                for (j, &t) in taps.iter().enumerate() {
                    let at = j * dx;
                    if sx == 1 {
                        for (d, v) in dst[at..at + ow].iter_mut().zip(g) {
                            *d += t * *v;
                        }
                    } else {
                        for (o, v) in g.iter().enumerate() {
                            dst[at + o * sx] += t * *v;
                        }
                    }
                }
            }
        }
    }
}

multiversion! {
    /// [`input_grad_plane`] at stride 1, gathered: each input's gradient (`dx`, the plane
    /// without its padding) summed from zero, sixteen at a time in a register, over the
    /// output rows that reach it in order (the kernel's rows backwards), then the kernel's
    /// columns in order: the scatter's order, so its bits. `g`'s rows are read with `wide`
    /// zeros on each side (`(kw - 1) * dilation`), so every column takes every tap: a zero
    /// product added to a sum from zero leaves its bits as they are (finite taps only).
    fn input_grad_gather(
        dx: &mut [f32],
        g: &[f32],
        taps: &[f32],
        window: Window,
        padding: [usize; 2],
        size: [usize; 2],
    ) {
        let Window { kernel: [kh, kw], dilation: [dy, dx_], out: [oh, ow], .. } = window;
        let ([ph, pw], [_, w]) = (padding, size);
        let wide = (kw - 1) * dx_;
        let row_len = ow + 2 * wide;
        for (y, row) in dx.chunks_exact_mut(w).enumerate() {
            // The output rows that reach this row, in the order the scatter adds them.
            let rows = (0..kh).rev().filter_map(|ki| {
                let oy = (y + ph).checked_sub(ki * dy).filter(|oy| *oy < oh)?;
                Some((ki, &g[oy * row_len..][..row_len]))
            });
            // Blocks of sixteen, the last one ending at the row's end (overlapping the one
            // before: the same sums, written twice); a row under sixteen lane by lane.
            let n = w.min(COLUMNS);
            let last = w - n;
            for x0 in (0..last).step_by(COLUMNS).chain([last]) {
                let mut acc = [0f32; COLUMNS];
                for (ki, g) in rows.clone() {
                    for kj in 0..kw {
                        let t = taps[ki * kw + kj];
                        // Output column `x + pw - kj * dx`, `wide` places into the row read.
                        let at = x0 + pw + wide - kj * dx_;
                        if n == COLUMNS {
                            let g: &[f32; COLUMNS] = g[at..at + COLUMNS].try_into().expect("16 values");
                            for (a, v) in acc.iter_mut().zip(g) {
                                *a += t * *v;
                            }
                        } else {
                            for (a, v) in acc[..n].iter_mut().zip(&g[at..]) {
                                *a += t * *v;
                            }
                        }
                    }
                }
                row[x0..x0 + n].copy_from_slice(&acc[..n]);
            }
        }
    }
}

/// Running sums of [`plane_dot`]: two AVX-512 registers' worth.
const LANES: usize = 32;

multiversion! {
    /// The sum of `g[oy][o] * src[oy * sy * pw + o * sx]` over an output plane (`src` the
    /// padded plane from one tap's first value): output column `o` into running sum
    /// `o % 32`, rows in order, then the running sums in order. The same operations in the
    /// same order on every instruction set.
    fn plane_dot(g: &[f32], src: &[f32], window: Window) -> f32 {
        let Window { stride: [sy, sx], .. } = window;
        let (pw, ow) = (window.padded_width, window.out[1]);
        let mut lanes = [0f32; LANES];
        for (oy, g) in g.chunks_exact(ow).enumerate() {
            let src = &src[oy * sy * pw..];
            if sx == 1 {
                let src = &src[..ow];
                let (mut gs, mut ss) = (g.chunks_exact(LANES), src.chunks_exact(LANES));
                for (g, s) in (&mut gs).zip(&mut ss) {
                    for ((l, g), s) in lanes.iter_mut().zip(g).zip(s) {
                        *l += *g * *s;
                    }
                }
                for ((l, g), s) in lanes.iter_mut().zip(gs.remainder()).zip(ss.remainder()) {
                    *l += *g * *s;
                }
            } else {
                for (o, g) in g.iter().enumerate() {
                    lanes[o % LANES] += *g * src[o * sx];
                }
            }
        }
        lanes.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values with every sign, many magnitudes, and zeros.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2_654_435_761).max(1);
        (0..n)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                match i % 11 {
                    0 => 0.0,
                    _ => (state as f32 / u32::MAX as f32 - 0.5) * (1 << (i % 7)) as f32,
                }
            })
            .collect()
    }

    #[test]
    fn the_gathered_input_gradient_has_the_scatters_bits_and_the_forward_its_order() {
        for (size, kernel, padding, dilation) in [
            ([5, 5], [3, 3], [1, 1], [1, 1]),
            ([16, 16], [3, 3], [1, 1], [1, 1]),
            ([9, 17], [3, 3], [0, 1], [1, 1]),
            ([7, 40], [5, 5], [2, 2], [1, 1]),
            ([8, 33], [3, 3], [2, 2], [2, 2]),
            ([6, 21], [1, 1], [0, 0], [1, 1]),
            ([4, 19], [2, 3], [1, 0], [1, 3]),
        ] {
            let shape = ConvShape {
                padding,
                dilation,
                ..ConvShape::new(1, 1, size, kernel)
            };
            let planes = Planes::of(&shape).unwrap();
            let window = planes.window();
            let [oh, ow] = planes.out;
            let taps = values(planes.taps, 3);
            let g = values(oh * ow, 4);
            for isa in Isa::available() {
                let what = format!("{size:?} {kernel:?} {padding:?} {dilation:?} on {isa}");
                // The input gradient: scattered into the padded plane, and gathered.
                let mut padded = vec![0f32; planes.padded[0] * planes.padded[1]];
                input_grad_plane(isa, &mut padded, &g, &taps, window);
                let pw = planes.padded[1];
                let want: Vec<u32> = (0..size[0])
                    .flat_map(|y| {
                        let row = &padded[(y + padding[0]) * pw + padding[1]..][..size[1]];
                        row.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                    })
                    .collect();
                let wide = (kernel[1] - 1) * dilation[1];
                let mut widened = vec![0f32; oh * (ow + 2 * wide)];
                for (src, dst) in g
                    .chunks_exact(ow)
                    .zip(widened.chunks_exact_mut(ow + 2 * wide))
                {
                    dst[wide..wide + ow].copy_from_slice(src);
                }
                let mut got = vec![f32::NAN; planes.plane];
                input_grad_gather(isa, &mut got, &widened, &taps, window, padding, size);
                let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                assert_eq!(got, want, "{what}: the input gradient");
                // The forward plane: the bias, then each tap in order, value by value.
                let x = values(planes.padded[0] * pw, 5);
                let mut got = vec![0f32; oh * ow];
                forward_plane(isa, &mut got, &x, &taps, 0.25, window);
                for (i, got) in got.iter().enumerate() {
                    let (oy, o) = (i / ow, i % ow);
                    let mut want = 0.25f32;
                    for ki in 0..kernel[0] {
                        for kj in 0..kernel[1] {
                            let at = (oy + ki * dilation[0]) * pw + o + kj * dilation[1];
                            want += taps[ki * kernel[1] + kj] * x[at];
                        }
                    }
                    assert_eq!(got.to_bits(), want.to_bits(), "{what}: output {i}");
                }
            }
        }
    }
}
