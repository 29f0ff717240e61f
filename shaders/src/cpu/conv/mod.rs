//! A 2-d convolution (one group) as a product: `im2col` lays each output position's
//! receptive field out as a column, so the convolution is `weight [out, patch] x cols
//! [patch, positions]` on the [`gemm`](super::gemm) kernels, which round the operands to
//! the compute format while packing; `col2im` is its adjoint, which sums a column gradient
//! back into the input's. The input gradient is also a product per phase of the stride
//! ([`ConvShape::grad_phases`], [`store_phases`]): `dy`'s columns at stride 1 times the
//! phase's kernel taps, without a column gradient to sum. A 1-d convolution is the 2-d one
//! with a height of 1. A depthwise convolution (a group a channel) runs directly instead
//! ([`depthwise`] and its gradients). Max pooling shares the geometry ([`max_pool`]); a
//! global average pool sums each plane ([`global_avg_pool`]).
//!
//! The columns of several samples sit side by side (`cols[k, n * positions + p]`), so one
//! product covers a chunk of the batch; a caller bounds the chunk to keep `cols` small.
//!
//! ```
//! use burn_amp_kernels::cpu::{Isa, conv::{self, ConvShape}};
//!
//! // One 1-channel 3x3 image, a 2x2 kernel: 4 positions, patches of 4 values.
//! let shape = ConvShape::new(1, 1, [3, 3], [2, 2]);
//! let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
//! let mut cols = vec![0f32; shape.patch() * shape.positions()];
//! conv::im2col(Isa::detect(), &shape, &x, 0..1, &mut cols)?;
//! assert_eq!(cols[..4], [1.0, 2.0, 4.0, 5.0]); // the top-left value of each patch
//! # Ok::<(), conv::ConvError>(())
//! ```

use core::ops::Range;

use super::Isa;
use super::cast::{self, CpuFloat};
use super::erased::{Floats, FloatsMut, typed, typed_mut};
use super::parallel;

mod average;
mod depthwise;
mod input_grad;
mod phases;
mod pool;
pub use average::{global_avg_pool, global_avg_pool_backward};
pub use depthwise::{depthwise, depthwise_input_grad, depthwise_weight_grad};
pub use input_grad::{GradPhase, store_phases};
use phases::Phases;
pub use pool::{NO_POSITION, max_pool, max_pool_backward};

/// Values one job of `im2col` or `col2im` copies at least: rows (or planes) go to rayon's
/// threads in groups this large. A convolution split over the batch calls these from each
/// thread's own run of samples, where splitting again row by row only moves rows between
/// busy threads: on 16 cores, grouping them took a small CNN's step from 16.6 to 11.7 ms.
const JOB_VALUES: usize = 1 << 17;

/// Rows of `per_row` values each that one job takes, for at least [`JOB_VALUES`] values.
fn rows_per_job(per_row: usize) -> usize {
    JOB_VALUES.div_ceil(per_row.max(1))
}

/// Why a convolution was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConvError {
    /// The kernel (dilated) does not fit in the padded input, or a stride or dilation is 0.
    #[error(
        "a {kernel:?} kernel (dilation {dilation:?}, stride {stride:?}) on a {size:?} input padded by {padding:?}"
    )]
    Geometry {
        /// Kernel size.
        kernel: [usize; 2],
        /// Dilation.
        dilation: [usize; 2],
        /// Stride.
        stride: [usize; 2],
        /// Input size.
        size: [usize; 2],
        /// Padding.
        padding: [usize; 2],
    },
    /// A size the shape implies overflows the address space.
    #[error("{what}: the shape implies more values than can be addressed")]
    TooLarge {
        /// Which size.
        what: &'static str,
    },
    /// The phases given are not the shape's [`ConvShape::grad_phases`].
    #[error("the input gradient's phases are not those of the convolution's shape")]
    Phases,
    /// A slice does not hold what the shape and the samples imply.
    #[error("{what}: {expected} values expected, {got} given")]
    Length {
        /// Which slice.
        what: &'static str,
        /// What the shape implies.
        expected: usize,
        /// What it holds.
        got: usize,
    },
}

/// The geometry of a convolution: input `[batch, channels, height, width]`, weight
/// `[out_channels, channels, kh, kw]`, one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvShape {
    /// Samples.
    pub batch: usize,
    /// Input channels.
    pub channels: usize,
    /// Input height and width.
    pub size: [usize; 2],
    /// Kernel height and width.
    pub kernel: [usize; 2],
    /// Stride (non-zero).
    pub stride: [usize; 2],
    /// Zero padding on each side.
    pub padding: [usize; 2],
    /// Dilation (non-zero).
    pub dilation: [usize; 2],
}

impl ConvShape {
    /// Stride 1, no padding, no dilation.
    pub fn new(batch: usize, channels: usize, size: [usize; 2], kernel: [usize; 2]) -> Self {
        Self {
            batch,
            channels,
            size,
            kernel,
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
        }
    }

    /// Output height and width, or `None` when the kernel does not fit.
    pub fn out_size(&self) -> Option<[usize; 2]> {
        let along = |d: usize| {
            if self.stride[d] == 0 || self.dilation[d] == 0 || self.kernel[d] == 0 {
                return None;
            }
            let span = self.dilation[d]
                .checked_mul(self.kernel[d] - 1)?
                .checked_add(1)?;
            let padded = self.padding[d].checked_mul(2)?.checked_add(self.size[d])?;
            (padded >= span).then(|| (padded - span) / self.stride[d] + 1)
        };
        Some([along(0)?, along(1)?])
    }

    /// Output positions of one sample.
    pub fn positions(&self) -> usize {
        self.out_size().map_or(0, |[h, w]| h * w)
    }

    /// Whether the convolution is pointwise: a 1x1 kernel at stride 1 without padding,
    /// whose columns are the input sample itself (`[channels, positions]`).
    pub fn is_pointwise(&self) -> bool {
        self.kernel == [1, 1] && self.stride == [1, 1] && self.padding == [0, 0]
    }

    /// Values of one patch (a column): `channels * kh * kw`.
    pub fn patch(&self) -> usize {
        self.channels * self.kernel[0] * self.kernel[1]
    }

    /// Values of one input sample.
    pub fn sample(&self) -> usize {
        self.channels * self.size[0] * self.size[1]
    }

    /// Values of one sample, of one patch, and output positions, each checked against
    /// overflow.
    fn sizes(&self, [oh, ow]: [usize; 2]) -> Result<(usize, usize, usize), ConvError> {
        Ok((
            product("input sample", &[self.channels, self.size[0], self.size[1]])?,
            product("patch", &[self.channels, self.kernel[0], self.kernel[1]])?,
            product("output positions", &[oh, ow])?,
        ))
    }

    fn check(&self) -> Result<[usize; 2], ConvError> {
        self.out_size().ok_or(ConvError::Geometry {
            kernel: self.kernel,
            dilation: self.dilation,
            stride: self.stride,
            size: self.size,
            padding: self.padding,
        })
    }

    /// The input coordinate of output coordinate `o` and kernel offset `k` along `d`, if it
    /// is inside the input (else it is in the padding).
    #[inline(always)]
    fn input_at(&self, d: usize, o: usize, k: usize) -> Option<usize> {
        let at = (o * self.stride[d] + k * self.dilation[d]).checked_sub(self.padding[d])?;
        (at < self.size[d]).then_some(at)
    }

    /// The output coordinates along `d` (of `outs`) whose input coordinate for kernel offset
    /// `k` is inside the input: a range, and the input coordinate of its first.
    fn valid(&self, d: usize, k: usize, outs: usize) -> (core::ops::Range<usize>, usize) {
        let (s, shift) = (self.stride[d], k * self.dilation[d]);
        let p = self.padding[d];
        // o * s + shift >= p, and o * s + shift - p < size.
        let lo = p.saturating_sub(shift).div_ceil(s);
        let hi = if self.size[d] + p > shift {
            ((self.size[d] + p - shift - 1) / s + 1).min(outs)
        } else {
            0
        };
        let lo = lo.min(hi);
        // An empty range reads nothing: its first input coordinate is 0, not one past the
        // input (a stride past the input's size would put it there).
        let first = if lo < hi { lo * s + shift - p } else { 0 };
        (lo..hi, first)
    }
}

fn check_len(what: &'static str, expected: usize, got: usize) -> Result<(), ConvError> {
    if expected == got {
        Ok(())
    } else {
        Err(ConvError::Length {
            what,
            expected,
            got,
        })
    }
}

/// The product of `sizes`, or [`ConvError::TooLarge`] naming `what` where it overflows
/// `isize` (the largest slice length).
fn product(what: &'static str, sizes: &[usize]) -> Result<usize, ConvError> {
    sizes
        .iter()
        .try_fold(1usize, |acc, &v| acc.checked_mul(v))
        .filter(|v| *v <= isize::MAX as usize)
        .ok_or(ConvError::TooLarge { what })
}

/// The columns of samples `samples` of `x` (the whole batch, `[batch, channels, h, w]`)
/// into `cols` (`[patch, samples * positions]`), zero where a patch lies in the padding,
/// each value rounded to `D`.
///
/// # Errors
/// [`ConvError::Geometry`] when the kernel does not fit, [`ConvError::Length`] when `x` or
/// `cols` does not hold what the shape implies.
pub fn im2col<S: CpuFloat, D: CpuFloat>(
    isa: Isa,
    shape: &ConvShape,
    x: &[S],
    samples: Range<usize>,
    cols: &mut [D],
) -> Result<(), ConvError> {
    im2col_erased(isa, shape, S::floats(x), samples, D::floats_mut(cols))
}

/// [`im2col`] for any types: not generic, so compiled here (`erased`).
fn im2col_erased(
    isa: Isa,
    shape: &ConvShape,
    x: Floats<'_>,
    samples: Range<usize>,
    cols: FloatsMut<'_>,
) -> Result<(), ConvError> {
    typed!(x, |x| typed_mut!(cols, |cols| im2col_typed(
        isa, shape, x, samples, cols
    )))
}

fn im2col_typed<S: CpuFloat, D: CpuFloat>(
    isa: Isa,
    shape: &ConvShape,
    x: &[S],
    samples: Range<usize>,
    cols: &mut [D],
) -> Result<(), ConvError> {
    let [oh, ow] = shape.check()?;
    let count = samples.len();
    let (sample, patch, positions) = shape.sizes([oh, ow])?;
    check_len("input", product("input", &[shape.batch, sample])?, x.len())?;
    check_len(
        "columns",
        product("columns", &[patch, count, positions])?,
        cols.len(),
    )?;
    if samples.end > shape.batch {
        return Err(ConvError::Length {
            what: "samples",
            expected: shape.batch,
            got: samples.end,
        });
    }
    let width = count * positions;
    if width == 0 {
        return Ok(());
    }
    if let Some(phases) = Phases::of(shape, [oh, ow]) {
        let planes = phases.split(isa, shape, x, samples);
        parallel::rows(cols, width, rows_per_job(width), |k, row| {
            phases.row(isa, shape, &planes, k, row)
        });
        return Ok(());
    }
    parallel::rows(cols, width, rows_per_job(width), |k, row| {
        im2col_row(isa, shape, x, samples.clone(), k, row)
    });
    Ok(())
}

/// Row `k` of the columns (patch entry `(c, i, j)`) of the samples `samples`.
#[inline(never)]
fn im2col_row<S: CpuFloat, D: CpuFloat>(
    isa: Isa,
    shape: &ConvShape,
    x: &[S],
    samples: Range<usize>,
    k: usize,
    row: &mut [D],
) {
    let [oh, ow] = shape.out_size().expect("checked by the caller");
    let [kh, kw] = shape.kernel;
    let [h, w] = shape.size;
    let width = row.len();
    let sx = shape.stride[1];
    let (c, i, j) = (k / (kh * kw), k / kw % kh, k % kw);
    let (xs, x0) = shape.valid(1, j, ow);
    if shape.stride == [1, 1] && ow == w && !xs.is_empty() {
        same_row(isa, shape, x, samples, (c, i), (xs, x0), row);
        return;
    }
    if S::FORMAT == D::FORMAT {
        // SAFETY: one format is one type (f32, bf16 or f16): S is D.
        let x: &[D] = unsafe { core::slice::from_raw_parts(x.as_ptr().cast(), x.len()) };
        let zero = D::from_f32(0.0);
        // The output rows whose input row is inside the image, and the first's input row:
        // the rows above and below are zeros, and the loop over the others has no test.
        let (ys, y0) = shape.valid(0, i, oh);
        let sy = shape.stride[0];
        for (s, out) in samples.zip(row.chunks_mut(oh * ow)) {
            let plane = &x[(s * shape.channels + c) * h * w..][..h * w];
            let inside = inside_rows(out, &ys, ow, zero);
            for (n, seg) in inside.chunks_exact_mut(ow).enumerate() {
                let line = &plane[(y0 + n * sy) * w..][..w];
                strided_copy(&mut seg[xs.clone()], &line[x0..], sx, |v| *v);
            }
            clear_padding(inside, ow, &xs, zero);
        }
        return;
    }
    // Another format: the row in f32 a block at a time, converted to D once a block.
    let mut buf = vec![0f32; STAGE.max(ow).min(width)];
    let mut filled = 0;
    let mut written = 0;
    for s in samples.clone() {
        let plane = &x[(s * shape.channels + c) * h * w..][..h * w];
        for y in 0..oh {
            let seg = &mut buf[filled..filled + ow];
            match shape.input_at(0, y, i) {
                None => seg.fill(0.0),
                Some(iy) => {
                    let line = &plane[iy * w..][..w];
                    clear_padding(seg, ow, &xs, 0.0);
                    strided_copy(&mut seg[xs.clone()], &line[x0..], sx, |v| v.to_f32());
                }
            }
            filled += ow;
            if filled + ow > buf.len() {
                cast::convert_block(isa, &buf[..filled], &mut row[written..written + filled]);
                written += filled;
                filled = 0;
            }
        }
    }
    cast::convert_block(isa, &buf[..filled], &mut row[written..written + filled]);
}

/// [`im2col_row`] of a "same" convolution's row (stride 1, the output as wide as the
/// input) whose kernel column `xs` reads inside the image, from input column `x0` on.
fn same_row<S: CpuFloat, D: CpuFloat>(
    isa: Isa,
    shape: &ConvShape,
    x: &[S],
    samples: Range<usize>,
    (c, i): (usize, usize),
    (xs, x0): (Range<usize>, usize),
    row: &mut [D],
) {
    let [h, w] = shape.size;
    let [oh, _] = shape.out_size().expect("checked by the caller");
    let (ys, y0) = shape.valid(0, i, oh);
    for (s, out) in samples.zip(row.chunks_mut(oh * w)) {
        let plane = &x[(s * shape.channels + c) * h * w..][..h * w];
        shifted_run(isa, plane, w, (ys.clone(), y0), (xs.clone(), x0), out);
    }
}

/// One sample's share `out` of a row of the columns, from `plane`, both in lines of `w`
/// values: output `(y, x)` reads plane value `(y0 + y - ys.start, x0 + x - xs.start)` for
/// `y` in `ys` and `x` in `xs`, and is zero elsewhere. With as many values on both sides of
/// a line, the values read are one run of the plane, converted whole; the padding columns,
/// which the run fills with the neighbouring lines' values, are cleared after.
fn shifted_run<S: CpuFloat, D: CpuFloat>(
    isa: Isa,
    plane: &[S],
    w: usize,
    (ys, y0): (Range<usize>, usize),
    (xs, x0): (Range<usize>, usize),
    out: &mut [D],
) {
    let zero = D::from_f32(0.0);
    let inside = inside_rows(out, &ys, w, zero);
    if !ys.is_empty() && !xs.is_empty() {
        // Output (n, xs.start + t) reads (y0 + n, x0 + t): their flat offsets advance
        // together. The run ends inside the plane (x0 + xs.len() <= w on its last line,
        // y0 + ys.len() <= the plane's lines).
        let len = (ys.len() - 1) * w + xs.len();
        cast::convert_block(
            isa,
            &plane[y0 * w + x0..][..len],
            &mut inside[xs.start..][..len],
        );
    }
    clear_padding(inside, w, &xs, zero);
}

/// Sets the values of `lines` (lines of `w` values) outside the columns `inside` to `zero`:
/// the padding columns. One or two of them, as a 3x3 kernel's are, are set a column at a
/// time, a store a line: per line they are too short for a fill, whose call to `memset` would
/// cost more than the store. Wider padding is filled a line at a time.
fn clear_padding<D: Copy>(lines: &mut [D], w: usize, inside: &Range<usize>, zero: D) {
    let columns = w - inside.len();
    if lines.is_empty() || columns == 0 {
        return;
    }
    if columns <= 2 {
        for col in (0..inside.start).chain(inside.end..w) {
            lines[col..].iter_mut().step_by(w).for_each(|v| *v = zero);
        }
    } else {
        for line in lines.chunks_exact_mut(w) {
            line[..inside.start].fill(zero);
            line[inside.end..].fill(zero);
        }
    }
}

/// The output rows `ys` of one sample's share of a row of the columns (rows of `ow`
/// values), the rows above and below them set to `zero`.
fn inside_rows<'a, D: Copy>(
    out: &'a mut [D],
    ys: &Range<usize>,
    ow: usize,
    zero: D,
) -> &'a mut [D] {
    let (above, rest) = out.split_at_mut(ys.start * ow);
    let (inside, below) = rest.split_at_mut(ys.len() * ow);
    above.fill(zero);
    below.fill(zero);
    inside
}

/// `dst[t] = f(&src[t * stride])` for every `t`: a copy at stride 1, a deinterleave at
/// stride 2 (pairs, so that it vectorizes), a gather otherwise. `src` holds the values read.
#[inline(always)]
fn strided_copy<S: Copy, D>(dst: &mut [D], src: &[S], stride: usize, f: impl Fn(&S) -> D) {
    match stride {
        1 => dst.iter_mut().zip(src).for_each(|(d, v)| *d = f(v)),
        2 => {
            let pairs = src.chunks_exact(2);
            let last = pairs.remainder().first();
            let mut out = dst.iter_mut();
            // The pairs first: `zip` then stops without taking an output it cannot fill.
            pairs
                .zip(out.by_ref())
                .for_each(|(pair, d)| *d = f(&pair[0]));
            // A source of odd length ends on a value read without its pair.
            if let (Some(d), Some(v)) = (out.next(), last) {
                *d = f(v);
            }
        }
        _ => dst
            .iter_mut()
            .enumerate()
            .for_each(|(t, d)| *d = f(&src[t * stride])),
    }
}

/// `dst[t * stride] += src[t]` for every `t`: the adjoint of [`strided_copy`], by pairs at
/// stride 2 likewise. `dst` holds the values written.
#[inline(always)]
fn strided_add(dst: &mut [f32], src: &[f32], stride: usize) {
    match stride {
        1 => dst.iter_mut().zip(src).for_each(|(d, v)| *d += v),
        2 => {
            let mut pairs = dst.chunks_exact_mut(2);
            let mut values = src.iter();
            // The values first: `zip` then stops without taking a value it cannot add.
            values
                .by_ref()
                .zip(pairs.by_ref())
                .for_each(|(v, pair)| pair[0] += v);
            if let (Some(d), Some(v)) = (pairs.into_remainder().first_mut(), values.next()) {
                *d += v;
            }
        }
        _ => src
            .iter()
            .enumerate()
            .for_each(|(t, v)| dst[t * stride] += v),
    }
}

/// Values `im2col` stages in f32 before converting them, at least a row of the output.
const STAGE: usize = 4096;

/// The adjoint of [`im2col`]: adds each column gradient of `dcols` (`[patch, samples *
/// positions]`, f32) into `dx` (`[samples, channels, h, w]` for the samples `samples`,
/// f32), where the patch read it.
///
/// # Errors
/// As [`im2col`].
pub fn col2im(
    shape: &ConvShape,
    dcols: &[f32],
    samples: Range<usize>,
    dx: &mut [f32],
) -> Result<(), ConvError> {
    let [oh, ow] = shape.check()?;
    let count = samples.len();
    let (sample, patch, positions) = shape.sizes([oh, ow])?;
    check_len(
        "column gradients",
        product("column gradients", &[patch, count, positions])?,
        dcols.len(),
    )?;
    check_len(
        "input gradient",
        product("input gradient", &[count, sample])?,
        dx.len(),
    )?;
    let [h, w] = shape.size;
    let width = count * positions;
    if h * w == 0 {
        return Ok(());
    }
    parallel::rows(dx, h * w, rows_per_job(h * w), |p, plane| {
        col2im_plane(shape, dcols, width, p, plane)
    });
    Ok(())
}

/// Plane `p` (sample and channel) of the input gradient, from the column gradients.
#[inline(never)]
fn col2im_plane(shape: &ConvShape, dcols: &[f32], width: usize, p: usize, plane: &mut [f32]) {
    let [oh, ow] = shape.out_size().expect("checked by the caller");
    let positions = oh * ow;
    let [kh, kw] = shape.kernel;
    let w = shape.size[1];
    let sx = shape.stride[1];
    let (s, c) = (p / shape.channels, p % shape.channels);
    let sy = shape.stride[0];
    for i in 0..kh {
        // The output rows that read an input row for this kernel row (see `im2col_row`).
        let (ys, y0) = shape.valid(0, i, oh);
        for j in 0..kw {
            let k = (c * kh + i) * kw + j;
            let row = &dcols[k * width + s * positions..][..positions];
            let (xs, x0) = shape.valid(1, j, ow);
            for (n, y) in ys.clone().enumerate() {
                let line = &mut plane[(y0 + n * sy) * w..][..w];
                let src = &row[y * ow..][xs.clone()];
                strided_add(&mut line[x0..], src, sx);
            }
        }
    }
}
