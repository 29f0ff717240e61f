//! The rules of the stateful and automatic options, as plain functions of numbers: the
//! delayed scale, the exponent bias and its drift, the automatic format choice, and APS's
//! per-layer gradient scale. Training runs them on the device (`super::device`); the host
//! statements of the delayed and bias rules are kept for the tests that hold the device's
//! to them.

#[cfg(test)]
use std::collections::VecDeque;

#[cfg(test)]
use burn_amp_kernels::fp8::Fp8Format;
use burn_amp_kernels::fp8::Fp8Layout;
#[cfg(test)]
use burn_amp_kernels::fp8::scale::{BlockScale, ScaleRule, block_scale};

#[cfg(test)]
use crate::fp8::AmaxCompute;

/// How much larger a share of its values E4M3 may lose (to underflow or saturation) than
/// E5M2 would before `format=auto` picks E5M2: 0.1% of the tensor.
pub const AUTO_FORMAT_TOLERANCE: f64 = 1e-3;

/// `format=auto`'s rule: of `count` values, E4M3 would lose `lost_e4m3` (nonzero values that
/// round to zero plus values past its largest, after its scaling) and E5M2 `lost_e5m2`.
/// E4M3 (one more mantissa bit) is kept unless it loses more than
/// [`AUTO_FORMAT_TOLERANCE`] of the values beyond what E5M2 loses; then E5M2 (16 more
/// binades of range) is chosen.
///
/// ```
/// use burn_amp::fp8::{Fp8Layout, choose_format};
///
/// assert_eq!(choose_format(10_000, 5, 0), Fp8Layout::E4M3); // 0.05%: within tolerance
/// assert_eq!(choose_format(10_000, 200, 3), Fp8Layout::E5M2); // 2% lost to underflow
/// ```
pub fn choose_format(count: u64, lost_e4m3: u64, lost_e5m2: u64) -> Fp8Layout {
    let excess = lost_e4m3 as f64 - lost_e5m2 as f64;
    if excess > AUTO_FORMAT_TOLERANCE * count as f64 {
        Fp8Layout::E5M2
    } else {
        Fp8Layout::E4M3
    }
}

#[cfg(test)] // The host statement of the rule: the device's is tested against it.
/// The amax the delayed scale follows: the history's largest finite one (`Max`) or its
/// newest if finite (`MostRecent`); `None` when there is none (a site's first step, or
/// only zero or non-finite amaxes so far).
pub(crate) fn delayed_amax(history: &VecDeque<f32>, rule: AmaxCompute) -> Option<f32> {
    let pick = match rule {
        AmaxCompute::Max => history
            .iter()
            .copied()
            .filter(|a| a.is_finite())
            .fold(0.0f32, f32::max),
        AmaxCompute::MostRecent => history.back().copied().unwrap_or(0.0),
    };
    (pick.is_finite() && pick > 0.0).then_some(pick)
}

#[cfg(test)] // The host statement of the rule: the device's is tested against it.
/// Appends `amax` to `history`, dropping the oldest past `length`.
pub(crate) fn push_amax(history: &mut VecDeque<f32>, amax: f32, length: u32) {
    history.push_back(amax.abs());
    while history.len() > length as usize {
        history.pop_front();
    }
}

#[cfg(test)] // The host statement of the rule: the device's is tested against it.
/// The scale `max / amax / 2^margin` (Transformer Engine's float scale).
pub(crate) fn float_scale(amax: f32, format: Fp8Format, margin: u32) -> BlockScale {
    block_scale(amax.to_bits(), format, ScaleRule::Float { margin })
}

#[cfg(test)] // The host statement of the rule: the device's is tested against it.
/// The largest exponent bias whose largest value still holds `amax` (the most precision
/// without overflow), within 0..=63; `None` for a zero or non-finite amax.
pub(crate) fn ideal_bias(amax: f32, layout: Fp8Layout) -> Option<i32> {
    if !(amax.is_finite() && amax > 0.0) {
        return None;
    }
    let standard = Fp8Format::new(layout, layout.default_bias()).ok()?;
    let shift = block_scale(
        amax.to_bits(),
        standard,
        ScaleRule::PowerOfTwo { margin: 0 },
    );
    let k = shift.scale.log2().round() as i32;
    Some((layout.default_bias() + k).clamp(Fp8Format::MIN_BIAS, Fp8Format::MAX_BIAS))
}

#[cfg(test)] // The host statement of the rule: the device's is tested against it.
/// CFloat8's bias update: the first bias is the ideal one; then it is lowered at once when
/// the tensor would overflow it, raised when the tensor has drifted more than `drift`
/// binades below its range, and left alone otherwise.
pub(crate) fn next_bias(
    current: Option<i32>,
    ideal: Option<i32>,
    drift: u32,
    layout: Fp8Layout,
) -> i32 {
    match (current, ideal) {
        (None, None) => layout.default_bias(),
        (None, Some(ideal)) => ideal,
        (Some(current), None) => current,
        (Some(current), Some(ideal)) => {
            if current > ideal || ideal - current > drift as i32 {
                ideal
            } else {
                current
            }
        }
    }
}

/// APS's scale for one layer: the largest power of two `s` with
/// `workers * amax * s <= max`, so that the sum of every worker's scaled gradient cannot
/// overflow a format whose largest value is `max` (overflow avoided first), and no larger
/// power would do (underflow minimised second). `amax` is the maximum over the workers of
/// the layer's gradient amax: one scalar per layer, which is all that crosses devices. A zero
/// or non-finite amax gives 1.
///
/// ```
/// use burn_amp::fp8::aps_scale;
///
/// assert_eq!(aps_scale(3.0, 1, 57344.0), 16384.0); // 3 * 16384 = 49152 <= 57344
/// assert_eq!(aps_scale(3.0, 4, 57344.0), 4096.0); // room for the sum of 4 workers
/// assert_eq!(aps_scale(f32::INFINITY, 4, 57344.0), 1.0);
/// ```
pub fn aps_scale(amax: f32, workers: usize, max: f32) -> f32 {
    if !(amax.is_finite() && amax > 0.0) || workers == 0 {
        return 1.0;
    }
    let total = f64::from(amax) * workers as f64;
    let mut k = (f64::from(max) / total).log2().floor() as i32;
    // log2 of a ratio can land an ulp off: step until the power of two is exactly right.
    while k > -126 && total * 2f64.powi(k) > f64::from(max) {
        k -= 1;
    }
    while k < 126 && total * 2f64.powi(k + 1) <= f64::from(max) {
        k += 1;
    }
    2f32.powi(k.clamp(-126, 126))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bias_moves_only_on_overflow_or_past_the_drift() {
        let l = Fp8Layout::E4M3;
        // amax 448 fits bias 7 exactly; 1.0 fits bias 7 + 8.
        assert_eq!(ideal_bias(448.0, l), Some(7));
        assert_eq!(ideal_bias(1.0, l), Some(15));
        assert_eq!(next_bias(None, Some(15), 2, l), 15);
        assert_eq!(next_bias(Some(15), Some(16), 2, l), 15); // 1 binade of slack: kept
        assert_eq!(next_bias(Some(15), Some(17), 2, l), 15); // 2: kept
        assert_eq!(next_bias(Some(15), Some(18), 2, l), 18); // 3: raised
        assert_eq!(next_bias(Some(15), Some(14), 2, l), 14); // would overflow: lowered
        assert_eq!(next_bias(Some(15), None, 2, l), 15); // all-zero step: kept
    }

    #[test]
    fn the_delayed_amax_skips_non_finite_steps() {
        let h: VecDeque<f32> = [1.0, f32::INFINITY, 3.0, 2.0].into();
        assert_eq!(delayed_amax(&h, AmaxCompute::Max), Some(3.0));
        assert_eq!(delayed_amax(&h, AmaxCompute::MostRecent), Some(2.0));
        let bad: VecDeque<f32> = [f32::NAN].into();
        assert_eq!(delayed_amax(&bad, AmaxCompute::MostRecent), None);
        let mut h = VecDeque::new();
        for a in [1.0, 2.0, 3.0, 4.0] {
            push_amax(&mut h, a, 3);
        }
        assert_eq!(h, VecDeque::from([2.0, 3.0, 4.0]));
    }

    #[test]
    fn aps_leaves_room_for_every_worker() {
        for workers in 1..9 {
            for amax in [1e-9f32, 0.37, 3.0, 448.0, 7e4] {
                let s = aps_scale(amax, workers, 57344.0);
                let total = f64::from(amax) * workers as f64;
                assert!(total * f64::from(s) <= 57344.0);
                assert!(total * f64::from(s) * 2.0 > 57344.0);
            }
        }
    }
}
