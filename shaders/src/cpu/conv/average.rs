//! Global average pooling (an adaptive average pool to one value a plane, the head of
//! most image classifiers): each plane's values summed in f32 in order, from the first,
//! and divided by their count, as Burn's Flex backend does for f32 and bf16; the gradient
//! each output's share (`g / count`) written over its plane.
//!
//! ```
//! use burn_amp_kernels::cpu::conv;
//!
//! // Two planes of four values.
//! let x = [1.0f32, 2.0, 3.0, 4.0, -1.0, 0.0, 1.0, 8.0];
//! let mut y = [0f32; 2];
//! conv::global_avg_pool(&x, 4, &mut y)?;
//! assert_eq!(y, [2.5, 2.0]);
//! let mut dx = [0f32; 8];
//! conv::global_avg_pool_backward(&[4.0f32, -2.0], 4, &mut dx)?;
//! assert_eq!(dx, [1.0, 1.0, 1.0, 1.0, -0.5, -0.5, -0.5, -0.5]);
//! # Ok::<(), conv::ConvError>(())
//! ```

use super::{ConvError, check_len, product};
use crate::cpu::cast::CpuFloat;
use crate::cpu::parallel;

/// Values a task takes at least.
const TASK_VALUES: usize = 1 << 15;

/// Planes summed side by side: independent chains of additions, each in its plane's order.
const LANES: usize = 8;

/// The mean of each `plane` values of `x` into `out` (one a plane), rounded to its type:
/// summed in f32 in order from the first value, then divided by `plane`. For f32 and bf16
/// these are Flex's bits; Flex sums f16 planes in f16, here they are summed in f32. Planes
/// of no values average to 0.
///
/// # Errors
/// [`ConvError::Length`] when `x` is not `out.len()` planes of `plane` values,
/// [`ConvError::TooLarge`] when that size overflows.
pub fn global_avg_pool<T: CpuFloat, O: CpuFloat>(
    x: &[T],
    plane: usize,
    out: &mut [O],
) -> Result<(), ConvError> {
    check_len("input", product("input", &[out.len(), plane])?, x.len())?;
    if plane == 0 {
        // No values: Flex divides the empty sum by a count of at least one.
        out.fill(O::from_f32(0.0));
        return Ok(());
    }
    let count = plane as f32;
    let per_task = TASK_VALUES.div_ceil(plane).next_multiple_of(LANES);
    parallel::chunks(out, per_task, |t, out| {
        let x = &x[t * per_task * plane..][..out.len() * plane];
        for (out, x) in out.chunks_mut(LANES).zip(x.chunks(LANES * plane)) {
            let mut sums = [0f32; LANES];
            let sums = &mut sums[..out.len()];
            for i in 0..plane {
                for (k, sum) in sums.iter_mut().enumerate() {
                    *sum += x[k * plane + i].to_f32();
                }
            }
            for (o, sum) in out.iter_mut().zip(sums.iter()) {
                *o = O::from_f32(sum / count);
            }
        }
    });
    Ok(())
}

/// The gradient of [`global_avg_pool`]: each plane of `dx` (`grad.len()` planes of
/// `plane` values) filled with its output's gradient divided by `plane`, in f32, rounded to
/// `dx`'s type (Flex's bits, a zero of either sign written as `+0`).
///
/// # Errors
/// [`ConvError::Length`] when `dx` is not `grad.len()` planes of `plane` values,
/// [`ConvError::TooLarge`] when that size overflows.
pub fn global_avg_pool_backward<G: CpuFloat, D: CpuFloat>(
    grad: &[G],
    plane: usize,
    dx: &mut [D],
) -> Result<(), ConvError> {
    check_len(
        "input gradient",
        product("input gradient", &[grad.len(), plane])?,
        dx.len(),
    )?;
    if dx.is_empty() {
        return Ok(());
    }
    let count = plane as f32;
    let per_task = TASK_VALUES.div_ceil(plane);
    parallel::chunks(dx, per_task * plane, |t, dx| {
        for (i, dst) in dx.chunks_mut(plane).enumerate() {
            // Flex adds each share to a zero.
            let share = 0.0 + grad[t * per_task + i].to_f32() / count;
            dst.fill(D::from_f32(share));
        }
    });
    Ok(())
}
