//! The loss scale on a device, used without reading it back: the backward pass multiplies
//! the loss by it, reading a gradient divides by it (one pass, in place where it can be),
//! the optimizer step counts the non-finite values of the gradients it applies (one
//! read-only pass each) and moves the scale by the loss-scale rule, all as tensor
//! operations on the device.
//!
//! A device's state is a `DeviceScale<I>` of the inner (non-autodiff) backend that made it,
//! type-erased in the binding's slot: `[scale, good_steps, skipped_steps]` (f32 counts:
//! exact up to 2^24).

use core::any::Any;

use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{Shape, Slice, Tensor, TensorData, TensorMetadata, TensorPrimitive};

use crate::context::{DeviceSlot, DeviceState};
use crate::cost;
use crate::cpu::Routed;
use crate::registry;

/// One device's loss-scale state.
pub(crate) struct DeviceScale<I: Backend> {
    /// `[scale, good_steps, skipped_steps]`, f32.
    pub state: FloatTensor<I>,
}

impl<I: Backend> DeviceScale<I> {
    fn new(values: [f32; 3], device: &I::Device) -> Self {
        Self {
            state: I::float_from_data(TensorData::new(values.to_vec(), [3]), device),
        }
    }

    /// The scale, `[1]`.
    pub fn scale(&self) -> FloatTensor<I> {
        I::float_slice(self.state.clone(), &[Slice::new(0, Some(1), 1)])
    }
}

impl<I: Backend> DeviceState for DeviceScale<I> {
    fn read(&self) -> [f32; 3] {
        let values = cost::read(|| {
            flat::<I>(self.state.clone())
                .into_data()
                .convert::<f32>()
                .to_vec::<f32>()
                .expect("f32 values")
        });
        [values[0], values[1], values[2]]
    }

    fn write(&mut self, values: [f32; 3]) {
        let device = I::float_device(&self.state);
        *self = Self::new(values, &device);
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// Runs `f` on `slot`'s state of backend `I` on `device`, made from `initial()` when the
/// slot holds none (or one of another backend type, which is then replaced).
pub(crate) fn with_state<I: Backend, R>(
    slot: &DeviceSlot,
    device: &I::Device,
    initial: impl FnOnce() -> [f32; 3],
    f: impl FnOnce(&mut DeviceScale<I>) -> R,
) -> R {
    let mut guard = slot.lock().unwrap_or_else(|e| e.into_inner());
    let fits = guard
        .as_mut()
        .is_some_and(|b| b.as_any_mut().is::<DeviceScale<I>>());
    if !fits {
        // `initial` may read another device's state: not under this slot's lock.
        drop(guard);
        let values = initial();
        guard = slot.lock().unwrap_or_else(|e| e.into_inner());
        *guard = Some(Box::new(DeviceScale::<I>::new(values, device)));
    }
    let state = guard
        .as_mut()
        .and_then(|b| b.as_any_mut().downcast_mut::<DeviceScale<I>>())
        .expect("made above");
    f(state)
}

/// `slot`'s state of backend `I`, if it holds one.
pub(crate) fn existing<I: Backend, R>(
    slot: &DeviceSlot,
    f: impl FnOnce(&mut DeviceScale<I>) -> R,
) -> Option<R> {
    let mut guard = slot.lock().unwrap_or_else(|e| e.into_inner());
    guard
        .as_mut()
        .and_then(|b| b.as_any_mut().downcast_mut::<DeviceScale<I>>())
        .map(f)
}

/// `t` reshaped to rank `rank` (ones in front): a one-value tensor that broadcasts.
fn ones_rank<I: Backend>(t: FloatTensor<I>, rank: usize) -> FloatTensor<I> {
    let n = t.shape().num_elements();
    let mut dims = vec![1; rank.max(1)];
    *dims.last_mut().expect("rank >= 1") = n;
    I::float_reshape(t, Shape::from(dims))
}

/// `scale` (f32) in `like`'s dtype, to multiply or divide it (a power of two under the
/// default rule: exact in f16 and bf16 up to their range).
fn scale_as<I: Backend>(scale: FloatTensor<I>, like: &FloatTensor<I>) -> FloatTensor<I> {
    let rank = like.shape().num_dims();
    let scale = ones_rank::<I>(scale, rank);
    if scale.dtype() == like.dtype() {
        scale
    } else {
        I::float_cast(scale, like.dtype().into())
    }
}

/// `tensor * scale` for a one-value `scale`, broadcast, in `tensor`'s dtype.
pub(crate) fn times<I: Backend>(tensor: FloatTensor<I>, scale: FloatTensor<I>) -> FloatTensor<I> {
    let scale = scale_as::<I>(scale, &tensor);
    I::float_mul(tensor, scale)
}

/// A gradient read from a scaled backward pass, divided by the scale (one pass, in place
/// on burn-amp's kernels, a tensor op elsewhere).
pub(crate) fn unscale<I: Backend>(grad: FloatTensor<I>, slot: &DeviceSlot) -> FloatTensor<I> {
    let scale = existing::<I, _>(slot, |s| s.scale())
        .unwrap_or_else(|| panic!("a scaled backward pass left its device state"));
    let routed = registry::routed::<I>();
    let grad = match routed.and_then(|ops| ops.unscale.map(|f| (f, ops.isa))) {
        Some((unscale, isa)) => match unscale(isa, grad, &scale) {
            Routed::Ran(grad) => return grad,
            Routed::Declined(grad) => grad,
        },
        None => grad,
    };
    let scale = scale_as::<I>(scale, &grad);
    I::float_div(grad, scale)
}

/// How many values of `grad` are inf or NaN, as a one-value f32 tensor on its device.
pub(crate) fn count_nonfinite<I: Backend>(grad: &FloatTensor<I>) -> FloatTensor<I> {
    if let Some(count) = registry::routed::<I>()
        .and_then(|ops| ops.count_nonfinite.and_then(|count| count(ops.isa, grad)))
    {
        return count;
    }
    flat::<I>(grad.clone())
        .is_finite()
        .bool_not()
        .float()
        .sum()
        .into_primitive()
        .tensor()
}

fn flat<I: Backend>(t: FloatTensor<I>) -> Tensor<I, 1> {
    let n = t.shape().num_elements();
    Tensor::from_primitive(TensorPrimitive::Float(I::float_reshape(t, Shape::new([n]))))
}

/// The loss-scale rule, its numbers fixed for one step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rule {
    pub dynamic: bool,
    pub growth_interval: f32,
    pub growth_factor: f32,
    pub backoff_factor: f32,
    pub min_scale: f32,
    pub max_scale: f32,
    /// The minimum-scale schedule's floor after this step.
    pub floor: f32,
}

/// One optimizer step of the rule on `state`, with `found` (the step's non-finite count,
/// on `state`'s device): an overflow skips, counts, resets the good steps and backs the
/// scale off; `growth_interval` good steps in a row grow it. The selections multiply by
/// exact 0s and 1s of finite values, so the result is the host rule's, bit for bit.
pub(crate) fn step_rule<I: Backend>(
    state: FloatTensor<I>,
    found: FloatTensor<I>,
    rule: &Rule,
) -> FloatTensor<I> {
    let state = flat::<I>(state);
    let part = |i: usize| state.clone().slice(i..i + 1);
    let (scale, good, skipped) = (part(0), part(1), part(2));
    let bad = flat::<I>(found).greater_elem(0.0).float();
    let ok = bad.clone().neg().add_scalar(1.0);
    let skipped = skipped + bad.clone();
    let (scale, good) = if rule.dynamic {
        let good = good.add_scalar(1.0) * ok.clone();
        let grow = good
            .clone()
            .greater_equal_elem(rule.growth_interval)
            .float();
        let keep = grow.clone().neg().add_scalar(1.0);
        let grown = scale
            .clone()
            .mul_scalar(rule.growth_factor)
            .clamp_max(rule.max_scale);
        let backed = scale
            .clone()
            .mul_scalar(rule.backoff_factor)
            .clamp_min(rule.min_scale);
        let kept_or_grown = grown * grow + scale * keep.clone();
        let scale = (backed * bad + kept_or_grown * ok).clamp_min(rule.floor);
        (scale, good * keep)
    } else {
        // A fixed scale never moves; good steps are not counted (as the host rule).
        (scale, good.mul_scalar(0.0))
    };
    Tensor::cat(vec![scale, good, skipped], 0)
        .into_primitive()
        .tensor()
}
