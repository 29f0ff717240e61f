//! The state of one role of one stateful FP8 site, on the device, and the rules of
//! [`rules`](super::rules) restated as tensor ops on it: the step that quantizes a tensor
//! also moves its state, and nothing is read back to decide anything.
//!
//! - Delayed scaling: the history is a fixed-length tensor (oldest first, zeros before the
//!   first amax, which no rule can tell from "no amax"); the scale comes from its largest
//!   finite entry (or newest) through the backend's `fp8_scales`, the current amax when there
//!   is none, as in [`rules::delayed_amax`](super::rules::delayed_amax).
//! - Exponent bias: a bias `b` of a format whose standard bias is `d` rounds exactly as the
//!   standard format does after a scale of `2^(b - d)` (the encoding shifts every exponent
//!   by the same amount), so the bias is kept as that power of two and moved by
//!   [`rules::next_bias`](super::rules::next_bias)'s rule in powers of two, exactly.
//! - `format=auto`: each candidate's lost values are counted on the device and the choice is a
//!   one-element mask; both candidates are rounded and the chosen one kept. Twice the
//!   rounding work, no round trip.

use core::any::Any;
use std::collections::VecDeque;

use burn_amp_kernels::fp8::Fp8Cast;
use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_amp_kernels::fp8::{Fp8Format, Fp8Layout};
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{Bool, FloatDType, Int, Tensor, TensorMetadata, TensorPrimitive};

use super::numerics::FORMATS;
use super::rules::AUTO_FORMAT_TOLERANCE;
use super::scaling::Fp8Role;
use super::state::RoleState;
use crate::cost;
use crate::fp8::AmaxCompute;
use crate::fp8::backend::{Fp8Backend, float_vec};

/// A one-element (or `[n]`) f32 tensor of `I`.
pub(crate) type Vector<I> = Tensor<I, 1>;

/// The numbers of one role on the device (see the module's documentation).
pub(crate) struct OnDevice<I: Backend> {
    /// The amax history, oldest first, `[capacity]`.
    pub history: Vector<I>,
    /// How many amaxes were pushed (the history holds the newest `capacity` of them).
    pub pushed: u64,
    /// The scale the last quantization used, `[1]`.
    pub scale: Vector<I>,
    /// `2^(bias - standard bias)` for E4M3 and E5M2, `[2]`; 0 while no bias was chosen.
    pub bias_scale: Vector<I>,
    /// Picks of E4M3 and E5M2 made on the device (`format=auto`), `[2]`.
    pub auto_chosen: Tensor<I, 1, Int>,
    /// Picks made on the host (a fixed format per role).
    pub host_chosen: [u64; 2],
    /// The last pick: known on the host, or `[1]` (0 E4M3, 1 E5M2) on the device.
    pub last: Last<I>,
    /// Quantizations so far.
    pub steps: u64,
}

/// The format the last quantization of a role used.
pub(crate) enum Last<I: Backend> {
    Host(usize),
    Device(Vector<I>),
}

/// [`OnDevice`] of any backend, as the history stores it.
pub(crate) trait DeviceRole: Send + Sync {
    /// The state as numbers (reads it back: the cost report counts one read).
    fn view(&self) -> RoleState;
    /// For the downcast to [`OnDevice`].
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<I: Backend> DeviceRole for OnDevice<I> {
    fn view(&self) -> RoleState {
        let parts = Tensor::cat(
            vec![
                self.history.clone(),
                self.scale.clone(),
                self.bias_scale.clone(),
                self.auto_chosen.clone().float(),
                match &self.last {
                    Last::Host(f) => Tensor::from_floats([*f as f32], &self.scale.device()),
                    Last::Device(t) => t.clone(),
                },
            ],
            0,
        );
        let data = cost::read(|| parts.into_data()).convert::<f32>();
        let v = data.to_vec::<f32>().expect("f32 state");
        let cap = v.len() - 6;
        let kept = (self.pushed.min(cap as u64)) as usize;
        let history: VecDeque<f32> = v[cap - kept..cap].iter().copied().collect();
        let scale = v[cap];
        let bias = [0, 1].map(|f| bias_of(v[cap + 1 + f], FORMATS[f].layout()));
        let chosen = [0, 1].map(|f| self.host_chosen[f] + v[cap + 3 + f] as u64);
        let last = usize::from(v[cap + 5] != 0.0);
        let layout = FORMATS[last].layout();
        let format = Fp8Format::new(layout, bias[last].unwrap_or(layout.default_bias()))
            .unwrap_or(FORMATS[last]);
        RoleState {
            history,
            scale,
            format,
            bias,
            steps: self.steps,
            chosen,
        }
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// The bias a bias scale stands for (`None` for 0, none chosen yet).
fn bias_of(scale: f32, layout: Fp8Layout) -> Option<i32> {
    (scale > 0.0).then(|| layout.default_bias() + scale.log2().round() as i32)
}

/// The scale a bias stands for.
fn scale_of(bias: i32, layout: Fp8Layout) -> f32 {
    2f32.powi(bias - layout.default_bias())
}

impl<I: Backend> OnDevice<I> {
    /// The newest amax, `[1]`.
    pub fn newest(&self) -> Vector<I> {
        let cap = self.history.dims()[0];
        self.history.clone().slice(cap - 1..cap)
    }

    /// Replaces the newest amax (with the replicas' maximum, say).
    pub fn replace_newest(&mut self, amax: Vector<I>) {
        let cap = self.history.dims()[0];
        let amax = amax.cast(self.history.dtype());
        self.history = if cap == 1 {
            amax
        } else {
            Tensor::cat(vec![self.history.clone().slice(0..cap - 1), amax], 0)
        };
    }
}

impl<I: Fp8Backend> OnDevice<I> {
    /// `state` (fresh, or loaded from a record) put on `device` with a history of
    /// `capacity` (its newest amaxes kept when it holds more).
    pub fn upload(state: &RoleState, capacity: usize, device: &I::Device) -> Self {
        let capacity = capacity.max(1);
        let kept = state.history.len().min(capacity);
        let mut history = vec![0.0f32; capacity - kept];
        history.extend(state.history.iter().skip(state.history.len() - kept));
        let last = usize::from(state.format.layout() == Fp8Layout::E5M2);
        let bias = [0, 1].map(|f| state.bias[f].map_or(0.0, |b| scale_of(b, FORMATS[f].layout())));
        Self {
            history: vector(history, device),
            pushed: kept as u64,
            scale: vector(vec![state.scale], device),
            bias_scale: vector(bias.to_vec(), device),
            auto_chosen: Tensor::zeros([2], device),
            host_chosen: state.chosen,
            last: Last::Host(last),
            steps: state.steps,
        }
    }

    /// The history resized to `capacity` on the device (a policy with another length):
    /// zeros in front when it grows, the newest entries when it shrinks.
    pub fn fit(&mut self, capacity: usize) {
        let capacity = capacity.max(1);
        let now = self.history.dims()[0];
        if now < capacity {
            let zeros = Tensor::zeros([capacity - now], &self.history.device());
            self.history = Tensor::cat(vec![zeros, self.history.clone()], 0);
        } else if now > capacity {
            self.history = self.history.clone().slice(now - capacity..now);
        }
    }

    /// Appends `amax`'s magnitude, dropping the oldest entry.
    pub fn push(&mut self, amax: &Vector<I>) {
        let cap = self.history.dims()[0];
        let newest = amax.clone().abs();
        self.history = if cap == 1 {
            newest
        } else {
            Tensor::cat(vec![self.history.clone().slice(1..cap), newest], 0)
        };
        self.pushed += 1;
    }

    /// The amax delayed scaling follows: the history's largest finite entry (or its newest,
    /// if finite), or `current` where that is zero or missing.
    pub fn delayed_amax(&self, rule: AmaxCompute, current: &Vector<I>) -> Vector<I> {
        let cap = self.history.dims()[0];
        let entries = match rule {
            AmaxCompute::Max => self.history.clone(),
            AmaxCompute::MostRecent => self.history.clone().slice(cap - 1..cap),
        };
        let pick = finite_or_zero(entries).max();
        current
            .clone()
            .mask_where(pick.clone().greater_elem(0.0), pick)
    }

    /// Moves each format's bias by the drift rule from this step's `amax` and returns the
    /// new bias scales `[2]` (also kept).
    pub fn next_bias(&mut self, amax: &Vector<I>, drift: u32) -> Vector<I> {
        let device = amax.device();
        let usable = finite_mask(amax.clone()).bool_and(amax.clone().greater_elem(0.0));
        let ideal: Vec<Vector<I>> = FORMATS
            .iter()
            .map(|format| {
                let layout = format.layout();
                let (scale, _) =
                    fp8_scales::<I>(amax, *format, ScaleRule::PowerOfTwo { margin: 0 });
                scale.clamp(
                    scale_of(Fp8Format::MIN_BIAS, layout),
                    scale_of(Fp8Format::MAX_BIAS, layout),
                )
            })
            .collect();
        let ideal = Tensor::cat(ideal, 0);
        let current = self.bias_scale.clone();
        let has = current.clone().greater_elem(0.0);
        let raise = ideal
            .clone()
            .greater(current.clone().mul_scalar(2f32.powi(drift.min(255) as i32)));
        let take = usable.expand([2]).bool_and(
            has.clone()
                .bool_not()
                .bool_or(current.clone().greater(ideal.clone()))
                .bool_or(raise),
        );
        let kept = Tensor::ones([2], &device).mask_where(has, current);
        self.bias_scale = kept.mask_where(take, ideal);
        self.bias_scale.clone()
    }

    /// Counts a pick made on the host.
    pub fn chose(&mut self, f: usize) {
        self.host_chosen[f] += 1;
        self.last = Last::Host(f);
    }

    /// Counts a pick made on the device (`e5m2`: `[1]` true for E5M2).
    pub fn chose_on_device(&mut self, e5m2: &Tensor<I, 1, Bool>) {
        let pick = e5m2.clone().int();
        let one = Tensor::<I, 1, Int>::ones([1], &pick.device());
        self.auto_chosen =
            self.auto_chosen.clone() + Tensor::cat(vec![one - pick.clone(), pick.clone()], 0);
        self.last = Last::Device(pick.float());
    }
}

/// A new `[n]` f32 tensor on `device`.
pub(crate) fn vector<I: Backend>(values: Vec<f32>, device: &I::Device) -> Vector<I> {
    Tensor::from_primitive(TensorPrimitive::Float(float_vec::<I>(values, device)))
}

/// Where `x` is finite.
pub(crate) fn finite_mask<I: Backend>(x: Vector<I>) -> Tensor<I, 1, Bool> {
    x.clone().is_nan().bool_or(x.is_inf()).bool_not()
}

/// `x` with every non-finite entry replaced by 0.
pub(crate) fn finite_or_zero<I: Backend>(x: Vector<I>) -> Vector<I> {
    let bad = finite_mask(x.clone()).bool_not();
    x.mask_fill(bad, 0.0)
}

/// The backend's per-block scales of `amax` as tensors.
pub(crate) fn fp8_scales<I: Fp8Backend>(
    amax: &Vector<I>,
    format: Fp8Format,
    rule: ScaleRule,
) -> (Vector<I>, Vector<I>) {
    let (s, inv) = I::fp8_scales(amax.clone().into_primitive().tensor(), format, rule);
    let wrap = |t| Tensor::from_primitive(TensorPrimitive::Float(t));
    (wrap(s), wrap(inv))
}

/// A flat tensor rounded to FP8 with one per-tensor scale and its inverse (both `[1]`, on
/// the tensor's device) and decoded again, in its own dtype.
pub(crate) fn round_per_tensor<I: Fp8Backend>(
    flat: FloatTensor<I>,
    scale: &Vector<I>,
    inv: &Vector<I>,
    cast: Fp8Cast,
) -> FloatTensor<I> {
    let dtype = FloatDType::from(flat.dtype());
    let layout = BlockLayout::per_tensor(flat.shape().num_elements() as u32);
    cost::fp8("quantize");
    let codes = I::fp8_quantize(flat, scale.clone().into_primitive().tensor(), layout, cast);
    cost::fp8("dequantize");
    let inv = inv.clone().into_primitive().tensor();
    I::fp8_dequantize(codes, inv, layout, cast.format, dtype)
}

/// `format=auto`'s rule on the device: `[1]` true where E5M2 is picked, from how many of the
/// values of `flat` each candidate (standard format `FORMATS[f]` after scale `scales[f]`)
/// would lose: nonzero values at most half the smallest subnormal, and values past the
/// rounding boundary above the largest.
pub(crate) fn choose_e5m2<I: Backend>(
    flat: &Vector<I>,
    scales: [&Vector<I>; 2],
) -> Tensor<I, 1, Bool> {
    let x = flat.clone().cast(FloatDType::F32).abs();
    let len = x.dims()[0];
    let lost: Vec<Tensor<I, 1, Int>> = FORMATS
        .iter()
        .zip(scales)
        .map(|(format, scale)| {
            let m = format.layout().mantissa_bits() as i32;
            let max = f64::from(format.max());
            let half_ulp = 2f64.powi(max.log2().floor() as i32 - m - 1);
            let low = (f64::from(format.min_subnormal()) / 2.0) as f32;
            let high = (max + half_ulp) as f32;
            let bound = |v: f32| Tensor::<I, 1>::full([1], v, &x.device()).div(scale.clone());
            let lo = bound(low).expand([len]);
            let hi = bound(high).expand([len]);
            let under = x
                .clone()
                .greater_elem(0.0)
                .bool_and(x.clone().lower_equal(lo))
                .int()
                .sum();
            let over = x.clone().greater(hi).int().sum();
            under + over
        })
        .collect();
    let mut lost = lost.into_iter();
    let (e4, e5) = (
        lost.next().expect("E4M3's count"),
        lost.next().expect("E5M2's count"),
    );
    // An integer excess beats the tolerance exactly when it beats its floor.
    let threshold = (AUTO_FORMAT_TOLERANCE * len as f64).floor() as i64;
    (e4 - e5).greater_elem(threshold)
}

/// The role's hybrid format's index (0 E4M3, 1 E5M2).
pub(crate) fn fixed_index(role: Fp8Role) -> usize {
    usize::from(role.cast().format.layout() == Fp8Layout::E5M2)
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use std::collections::VecDeque;

    use burn::backend::Flex;

    use super::super::rules;
    use super::*;

    type I = Flex;

    fn read(t: &Vector<I>) -> Vec<f32> {
        t.clone().into_data().to_vec::<f32>().unwrap()
    }

    /// Amaxes a site may see: ordinary, zero, subnormal, huge, infinite, NaN.
    fn amaxes() -> Vec<f32> {
        let mut seed = 0x2545_f491u32;
        let mut out = vec![
            1.5,
            6.0,
            0.0,
            0.75,
            f32::INFINITY,
            3e-40,
            2.0,
            f32::NAN,
            1e30,
        ];
        for _ in 0..40 {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let exponent = (seed >> 24) as i32 % 40 - 20;
            out.push(2f32.powi(exponent) * (1.0 + (seed & 0xffff) as f32 / 65536.0));
        }
        out
    }

    #[test]
    fn the_delayed_rule_on_the_device_gives_the_hosts_scales_bit_for_bit() {
        let device = Default::default();
        for rule in [AmaxCompute::Max, AmaxCompute::MostRecent] {
            for length in [1usize, 3, 16] {
                let mut state =
                    OnDevice::<I>::upload(&RoleState::new(Fp8Role::Input), length, &device);
                let mut host = VecDeque::new();
                for (step, a) in amaxes().into_iter().enumerate() {
                    let amax = vector::<I>(vec![a], &device);
                    let pick = state.delayed_amax(rule, &amax);
                    for format in FORMATS {
                        let (scale, inv) =
                            fp8_scales::<I>(&pick, format, ScaleRule::Float { margin: 1 });
                        let want = rules::float_scale(
                            rules::delayed_amax(&host, rule).unwrap_or(a),
                            format,
                            1,
                        );
                        assert_eq!(
                            read(&scale)[0].to_bits(),
                            want.scale.to_bits(),
                            "step {step}"
                        );
                        assert_eq!(read(&inv)[0].to_bits(), want.scale_inv.to_bits());
                    }
                    state.push(&amax);
                    rules::push_amax(&mut host, a, length as u32);
                    let view = state.view().history;
                    assert_eq!(view.len(), host.len());
                    for (d, h) in view.iter().zip(&host) {
                        assert!(d.to_bits() == h.to_bits() || (d.is_nan() && h.is_nan()));
                    }
                }
            }
        }
    }

    #[test]
    fn the_bias_rule_on_the_device_moves_as_the_hosts() {
        let device = Default::default();
        for drift in [0u32, 2, 5] {
            let mut state = OnDevice::<I>::upload(&RoleState::new(Fp8Role::Gradient), 16, &device);
            let mut host: [Option<i32>; 2] = [None, None];
            for (step, a) in amaxes().into_iter().enumerate() {
                let amax = vector::<I>(vec![a], &device);
                let scales = read(&state.next_bias(&amax, drift));
                for (f, format) in FORMATS.iter().enumerate() {
                    let layout = format.layout();
                    let ideal = rules::ideal_bias(a, layout);
                    host[f] = Some(rules::next_bias(host[f], ideal, drift, layout));
                    assert_eq!(bias_of(scales[f], layout), host[f], "step {step} amax {a}");
                }
            }
            assert_eq!(state.view().bias, host);
        }
    }

    #[test]
    fn auto_format_on_the_device_picks_as_choose_format() {
        let device = Default::default();
        // Half the values 2^-20 below the amax: E4M3 flushes them, E5M2 keeps them.
        let mut wide = vec![1.0f32; 64];
        for v in wide.iter_mut().skip(32) {
            *v = 2f32.powi(-20);
        }
        let cases = [(wide, true), (vec![1.0, 0.5, -0.25, 3.0], false)];
        for (values, e5m2) in cases {
            let x = vector::<I>(values, &device);
            let amax = x.clone().abs().max();
            let scales = [0, 1]
                .map(|f| fp8_scales::<I>(&amax, FORMATS[f], ScaleRule::Float { margin: 0 }).0);
            let pick = choose_e5m2(&x, [&scales[0], &scales[1]]);
            assert_eq!(pick.into_data().to_vec::<bool>().unwrap(), vec![e5m2]);
        }
    }
}
