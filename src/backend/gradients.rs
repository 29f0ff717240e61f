//! The decorator's gradients: the inner backend's, plus the loss scale the backward pass
//! multiplied the loss by. Reading a gradient divides it by that scale again, so no
//! scaled gradient leaves the decorator.

use burn_tensor::Scalar;
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;

/// Gradients of a [`MixedPrecision`](crate::MixedPrecision) backward pass.
///
/// Every gradient read from it (`tensor.grad(&grads)`, `GradientsParams::from_grads`) is the
/// true gradient: when the loss was scaled for the backward pass
/// ([`LossScaleOptimizer`](crate::LossScaleOptimizer)), the read divides the scale out.
pub struct ScaledGradients<G> {
    pub(crate) inner: G,
    pub(crate) scale: f32,
}

impl<G> ScaledGradients<G> {
    /// The factor the loss was multiplied by before the backward pass (1 when unscaled).
    pub fn scale(&self) -> f32 {
        self.scale
    }
}

/// Divides a gradient read from the inner backend by the loss scale.
pub(crate) fn unscale<B: Backend>(grad: FloatTensor<B>, scale: f32) -> FloatTensor<B> {
    if scale == 1.0 {
        grad
    } else {
        B::float_div_scalar(grad, Scalar::from(scale))
    }
}

/// Scales a user-provided gradient before storing it among scaled ones.
pub(crate) fn rescale<B: Backend>(grad: FloatTensor<B>, scale: f32) -> FloatTensor<B> {
    if scale == 1.0 {
        grad
    } else {
        B::float_mul_scalar(grad, Scalar::from(scale))
    }
}
