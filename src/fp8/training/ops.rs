//! The FP8 operations of one backend type, as the registry of backend capabilities
//! (`crate::registry`) keeps them: plain function pointers, found by `TypeId` where
//! [`MixedPrecision<B>`](crate::MixedPrecision) runs an FP8 site on its inner `B`.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;

use super::quant::{self, Plan, Quantize};
use crate::fp8::Fp8Backend;

/// Quantizes a tensor for one role of one site as its [`Plan`] says.
pub(crate) type QuantFn<B> = fn(FloatTensor<B>, Plan) -> FloatTensor<B>;

/// APS (`grads=aps`) of one layer: every worker's gradient of it rounded to E5M2 with the
/// layer's scale, on the device; optionally with the layer's amax already reduced over the
/// replicas of a data-parallel run, and their worker count.
pub(crate) type ApsFn<B> =
    fn(Vec<FloatTensor<B>>, Option<(FloatTensor<B>, usize)>) -> Vec<FloatTensor<B>>;

/// The FP8 operations of one backend type.
pub(crate) struct Fp8Ops<B: Backend> {
    /// Forward: the tensor fake-quantized (FP8 values, in the tensor's dtype), with a
    /// straight-through gradient when `B` is an autodiff backend.
    pub quantize: QuantFn<B>,
    /// Backward: identity forward; the gradient flowing back through it is fake-quantized.
    /// `None` when `B` records no gradients.
    pub quantize_grad: Option<QuantFn<B>>,
    /// APS gradient compression, for `B` without autodiff (the gradients' backend).
    pub aps: Option<ApsFn<B>>,
}

impl<B: Backend> Clone for Fp8Ops<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for Fp8Ops<B> {}

/// The FP8 operations of a backend without autodiff: fake quantization and APS on its own
/// FP8 kernels.
pub(crate) fn plain<I: Fp8Backend>() -> Fp8Ops<I> {
    Fp8Ops {
        quantize: quant::fake_quantize::<I>,
        quantize_grad: None,
        aps: Some(super::aps::aps_e5m2::<I>),
    }
}

/// The FP8 operations of `Autodiff<I, C>`: the rounding differentiated as the identity, and
/// the gradient's rounding in the backward pass.
pub(crate) fn autodiff<I: Fp8Backend, C: CheckpointStrategy>() -> Fp8Ops<Autodiff<I, C>> {
    Fp8Ops {
        quantize: <Autodiff<I, C> as Quantize>::straight_through,
        quantize_grad: Some(<Autodiff<I, C> as Quantize>::quantize_grad),
        aps: None,
    }
}
