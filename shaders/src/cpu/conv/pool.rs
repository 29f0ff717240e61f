//! 2-d max pooling on a convolution's geometry ([`ConvShape`]: a window of `kernel`
//! dilated, strided and padded as a convolution's, the padding never chosen): each
//! output the first largest value of its window in row-major order, as Burn's backends
//! pick it (a NaN only where it comes first), with its position in the input plane; the
//! gradient added back at those positions.
//!
//! ```
//! use burn_amp_kernels::cpu::{Isa, conv::{self, ConvShape}};
//!
//! // A 2x2 window of stride 2 on one 2x4 plane.
//! let shape = ConvShape { stride: [2, 2], ..ConvShape::new(1, 1, [2, 4], [2, 2]) };
//! let x = [1.0f32, 5.0, 0.0, -1.0, 3.0, 2.0, -2.0, -3.0];
//! let (mut y, mut at) = ([0f32; 2], [0u32; 2]);
//! conv::max_pool(Isa::detect(), &shape, &x, &mut y, Some(&mut at))?;
//! assert_eq!((y, at), ([5.0, 0.0], [1, 2]));
//! let mut dx = [0f32; 8];
//! conv::max_pool_backward(&shape, &[10.0f32, 20.0], &at, &mut dx)?;
//! assert_eq!(dx, [0.0, 10.0, 20.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
//! # Ok::<(), conv::ConvError>(())
//! ```

use super::{ConvError, ConvShape, check_len, product};
use crate::cpu::cast::{self, CpuFloat};
use crate::cpu::multiversion::multiversion;
use crate::cpu::{Isa, parallel};

/// The position a window with no value inside the input keeps (its output is -inf).
pub const NO_POSITION: u32 = u32::MAX;

/// Output values a task takes at least.
const TASK_VALUES: usize = 1 << 14;

/// The sizes of a pooling: output plane, input plane, planes.
fn sizes(shape: &ConvShape) -> Result<([usize; 2], usize, usize, usize), ConvError> {
    let out = shape.check()?;
    let plane = product("input plane", &shape.size)?;
    if plane > NO_POSITION as usize {
        return Err(ConvError::TooLarge {
            what: "input plane",
        });
    }
    let out_plane = product("output plane", &out)?;
    let planes = product("planes", &[shape.batch, shape.channels])?;
    product("input", &[planes, plane])?;
    product("output", &[planes, out_plane])?;
    Ok((out, plane, out_plane, planes))
}

/// The max pooling of `x` (`[batch, channels, h, w]`) into `out` (`[batch, channels, oh,
/// ow]`, `x`'s type: a maximum is exact), and each output's position in its input plane
/// (`y * w + x`, or [`NO_POSITION`]) into `positions` where given.
///
/// # Errors
/// [`ConvError::Geometry`] when the window does not fit, [`ConvError::Length`] when a
/// slice does not hold what the shape implies, [`ConvError::TooLarge`] for a plane whose
/// positions do not fit `u32`.
pub fn max_pool<T: CpuFloat>(
    isa: Isa,
    shape: &ConvShape,
    x: &[T],
    out: &mut [T],
    positions: Option<&mut [u32]>,
) -> Result<(), ConvError> {
    let ([oh, ow], plane, out_plane, planes) = sizes(shape)?;
    check_len("input", planes * plane, x.len())?;
    check_len("output", planes * out_plane, out.len())?;
    if let Some(p) = positions.as_deref() {
        check_len("positions", planes * out_plane, p.len())?;
    }
    if out_plane == 0 || planes == 0 {
        return Ok(());
    }
    let [kh, kw] = shape.kernel;
    let (w, sx, dx, pw) = (
        shape.size[1],
        shape.stride[1],
        shape.dilation[1],
        shape.padding[1],
    );
    // The output columns whose windows lie inside the input's width: a row of them at a
    // time; the others window by window.
    let lo = pw.div_ceil(sx).min(ow);
    let reach = (kw - 1) * dx;
    let hi = (w + pw)
        .checked_sub(reach)
        .map_or(0, |r| r.div_ceil(sx))
        .clamp(lo, ow);
    // One window: the first largest value of the window in row-major order.
    let window = |wide: &[f32], oy: usize, ox: usize| -> (f32, u32) {
        let (mut best, mut at) = (f32::NEG_INFINITY, NO_POSITION);
        for a in 0..kh {
            let Some(iy) = shape.input_at(0, oy, a) else {
                continue;
            };
            for b in 0..kw {
                let Some(ix) = shape.input_at(1, ox, b) else {
                    continue;
                };
                let i = iy * w + ix;
                if at == NO_POSITION || wide[i] > best {
                    (best, at) = (wide[i], i as u32);
                }
            }
        }
        (best, at)
    };
    let per_task = TASK_VALUES.div_ceil(out_plane);
    // The common 2x2 window of stride 2 (no padding or dilation): two input rows an output
    // row, read where they lie.
    let halving = shape.kernel == [2, 2]
        && shape.stride == [2, 2]
        && shape.padding == [0, 0]
        && shape.dilation == [1, 1];
    let halve = |t: usize, out: &mut [T], mut positions: Option<&mut [u32]>| {
        let (mut rows, mut best, mut at) = (vec![0f32; 2 * w], vec![0f32; ow], vec![0u32; ow]);
        for (i, dst) in out.chunks_mut(out_plane).enumerate() {
            let p = t * per_task + i;
            for oy in 0..oh {
                let top = 2 * oy * w;
                cast::convert_block(isa, &x[p * plane + top..][..2 * w], &mut rows);
                let (upper, lower) = rows.split_at(w);
                pool_2x2(isa, upper, lower, &mut best, &mut at, top as u32);
                cast::convert_block(isa, &best, &mut dst[oy * ow..][..ow]);
                if let Some(positions) = positions.as_deref_mut() {
                    positions[i * out_plane + oy * ow..][..ow].copy_from_slice(&at);
                }
            }
        }
    };
    let pool = |t: usize, out: &mut [T], mut positions: Option<&mut [u32]>| {
        if halving {
            return halve(t, out, positions);
        }
        let mut wide = vec![0f32; plane];
        let (mut best, mut at) = (vec![0f32; ow], vec![0u32; ow]);
        for (i, dst) in out.chunks_mut(out_plane).enumerate() {
            let p = t * per_task + i;
            cast::convert_block(isa, &x[p * plane..][..plane], &mut wide);
            for oy in 0..oh {
                // The inner columns, tap by tap in the window's order: the first tap
                // sets each, a later one replaces it where larger.
                let mut first = true;
                for a in (0..kh).filter(|_| lo < hi) {
                    let Some(iy) = shape.input_at(0, oy, a) else {
                        continue;
                    };
                    let row = &wide[iy * w..][..w];
                    for b in 0..kw {
                        let start = lo * sx + b * dx - pw;
                        let (best, at) = (&mut best[lo..hi], &mut at[lo..hi]);
                        let base = (iy * w) as u32;
                        window_tap(isa, best, at, row, (start, sx, base), first);
                        first = false;
                    }
                }
                if first {
                    // No row of any window inside the input.
                    best[lo..hi].fill(f32::NEG_INFINITY);
                    at[lo..hi].fill(NO_POSITION);
                }
                for ox in (0..lo).chain(hi..ow) {
                    (best[ox], at[ox]) = window(&wide, oy, ox);
                }
                cast::convert_block(isa, &best, &mut dst[oy * ow..][..ow]);
                if let Some(positions) = positions.as_deref_mut() {
                    positions[i * out_plane + oy * ow..][..ow].copy_from_slice(&at);
                }
            }
        }
    };
    let chunk = per_task * out_plane;
    match positions {
        Some(positions) => parallel::chunks2((out, chunk), (positions, chunk), |t, out, p| {
            pool(t, out, Some(p))
        }),
        None => parallel::chunks(out, chunk, |t, out| pool(t, out, None)),
    }
    Ok(())
}

multiversion! {
    /// 2x2 windows of stride 2 over the rows `upper` and `lower` (`upper` at `base` in its
    /// plane): for each, the first largest value in the window's order (upper left, upper
    /// right, lower left, lower right; a later one replaces it only where larger, so a NaN
    /// only where it comes first) and its position in the plane.
    fn pool_2x2(upper: &[f32], lower: &[f32], best: &mut [f32], at: &mut [u32], base: u32) {
        let w = upper.len() as u32;
        for (ox, (best, at)) in best.iter_mut().zip(at.iter_mut()).enumerate() {
            let i = 2 * ox;
            let (mut m, mut p) = (upper[i], base + i as u32);
            if upper[i + 1] > m {
                (m, p) = (upper[i + 1], base + i as u32 + 1);
            }
            if lower[i] > m {
                (m, p) = (lower[i], base + w + i as u32);
            }
            if lower[i + 1] > m {
                (m, p) = (lower[i + 1], base + w + i as u32 + 1);
            }
            (*best, *at) = (m, p);
        }
    }
}

multiversion! {
    /// One tap of a row of windows: `row[start + o * stride]` (position `base` plus its
    /// column) for output column `o`, taken where `first` or where larger than `best[o]`.
    fn window_tap(
        best: &mut [f32],
        at: &mut [u32],
        row: &[f32],
        place: (usize, usize, u32),
        first: bool,
    ) {
        let (start, stride, base) = place;
        for (o, (b, a)) in best.iter_mut().zip(at.iter_mut()).enumerate() {
            let ix = start + o * stride;
            let v = row[ix];
            if first || v > *b {
                *b = v;
                *a = base + ix as u32;
            }
        }
    }
}

/// The gradient of [`max_pool`]: each output's gradient `grad` added (in f32) at its
/// position `positions` of its input plane, into `dx` (`[batch, channels, h, w]`, zero
/// elsewhere), rounded to its type.
///
/// # Errors
/// As [`max_pool`], and [`ConvError::Length`] (naming `positions`) for a position outside
/// its plane.
pub fn max_pool_backward<G: CpuFloat, D: CpuFloat>(
    shape: &ConvShape,
    grad: &[G],
    positions: &[u32],
    dx: &mut [D],
) -> Result<(), ConvError> {
    let (_, plane, out_plane, planes) = sizes(shape)?;
    check_len("output gradient", planes * out_plane, grad.len())?;
    check_len("positions", planes * out_plane, positions.len())?;
    check_len("input gradient", planes * plane, dx.len())?;
    if let Some(&bad) = positions
        .iter()
        .find(|&&p| p != NO_POSITION && p as usize >= plane)
    {
        return Err(ConvError::Length {
            what: "positions",
            expected: plane,
            got: bad as usize,
        });
    }
    if plane == 0 || planes == 0 {
        return Ok(());
    }
    let per_task = TASK_VALUES.div_ceil(plane.max(out_plane));
    parallel::chunks(dx, per_task * plane, |t, dx| {
        let mut sums = vec![0f32; plane];
        for (i, dst) in dx.chunks_mut(plane).enumerate() {
            let p = t * per_task + i;
            sums.fill(0.0);
            let (g, at) = (
                &grad[p * out_plane..][..out_plane],
                &positions[p * out_plane..][..out_plane],
            );
            for (g, &at) in g.iter().zip(at) {
                if at != NO_POSITION {
                    sums[at as usize] += g.to_f32();
                }
            }
            for (d, s) in dst.iter_mut().zip(&sums) {
                *d = D::from_f32(*s);
            }
        }
    });
    Ok(())
}
