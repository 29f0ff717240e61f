//! The decorator's gradients: the inner backend's, plus the loss scale the backward pass
//! multiplied the loss by (its device state). Reading a gradient widens it to f32 under a
//! policy whose variables are 16-bit, then divides it by that scale again, on the device,
//! so no scaled gradient leaves the decorator and no read is needed.

use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{FloatDType, TensorMetadata};

use super::{autocast, scale};
use crate::context::{self, DeviceSlot};

/// Gradients of a [`MixedPrecision`](crate::MixedPrecision) backward pass.
///
/// Every gradient read from it (`tensor.grad(&grads)`, `GradientsParams::from_grads`) is the
/// true gradient: when the loss was scaled for the backward pass
/// ([`LossScaleOptimizer`](crate::LossScaleOptimizer)), the read divides the scale out.
/// Under a policy whose variables are 16-bit (`float16`, `bfloat16`) a gradient is read in
/// f32, so the optimizer's state built from it is f32 (and a checkpoint restores it
/// exactly) and the unscale cannot flush small gradients to zero.
pub struct ScaledGradients<G> {
    pub(crate) inner: G,
    /// The device state of the loss scale the loss was multiplied by, if it was.
    pub(crate) scale: Option<DeviceSlot>,
}

impl<G> ScaledGradients<G> {
    /// The factor the loss was multiplied by before the backward pass (1 when unscaled).
    /// The scale lives on the device: asking reads it back.
    pub fn scale(&self) -> f32 {
        let Some(slot) = &self.scale else {
            return 1.0;
        };
        let guard = slot.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map_or(1.0, |state| state.read()[0])
    }
}

/// A gradient read from the inner backend: in f32 under a policy whose variables are
/// 16-bit, divided by the loss scale if there is one.
pub(crate) fn read<B: Backend>(grad: FloatTensor<B>, scale: &Option<DeviceSlot>) -> FloatTensor<B> {
    let grad = widened::<B>(grad);
    match scale {
        Some(slot) => scale::unscale::<B>(grad, slot),
        None => grad,
    }
}

/// `grad` in f32 when it is 16-bit and the policy's variables are 16-bit too (the
/// gradient of a variable); as it is otherwise.
fn widened<B: Backend>(grad: FloatTensor<B>) -> FloatTensor<B> {
    let dtype = FloatDType::from(grad.dtype());
    if !matches!(dtype, FloatDType::F16 | FloatDType::BF16) {
        return grad;
    }
    let op = context::of::<B>(&grad);
    if op.policy.variable_dtype() == FloatDType::F32 {
        return grad;
    }
    autocast::cast::<B>(grad, FloatDType::F32, &op)
}

/// Scales a user-provided gradient before storing it among scaled ones.
pub(crate) fn rescale<B: Backend>(
    grad: FloatTensor<B>,
    scale: &Option<DeviceSlot>,
) -> FloatTensor<B> {
    match scale {
        Some(slot) => scale::existing::<B, _>(slot, |s| scale::times::<B>(grad.clone(), s.scale()))
            .unwrap_or(grad),
        None => grad,
    }
}
