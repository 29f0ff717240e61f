//! The decorator's gradients: the inner backend's, plus the loss scale the backward pass
//! multiplied the loss by (its device state). Reading a gradient divides it by that scale
//! again and counts its non-finite values for the optimizer step, on the device, so no
//! scaled gradient leaves the decorator and no read is needed.

use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;

use super::scale;
use crate::context::DeviceSlot;

/// Gradients of a [`MixedPrecision`](crate::MixedPrecision) backward pass.
///
/// Every gradient read from it (`tensor.grad(&grads)`, `GradientsParams::from_grads`) is the
/// true gradient: when the loss was scaled for the backward pass
/// ([`LossScaleOptimizer`](crate::LossScaleOptimizer)), the read divides the scale out.
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

/// Divides a gradient read from the inner backend by the loss scale, if there is one.
pub(crate) fn unscale<B: Backend>(
    grad: FloatTensor<B>,
    scale: &Option<DeviceSlot>,
) -> FloatTensor<B> {
    match scale {
        Some(slot) => scale::unscale::<B>(grad, slot),
        None => grad,
    }
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
