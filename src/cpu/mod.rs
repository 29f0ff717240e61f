//! burn-amp's CPU kernels on Burn's backends, and which backends have them.
//!
//! `flex` is the glue of the CPU kernel family (`burn_amp_kernels::cpu`) to Flex tensors
//! and to `Autodiff<Flex>`. This module finds, for a backend type, the ops the decorator
//! hands to burn-amp's kernels instead of the inner backend's: the casts of its casting
//! rules, and compute-class matmuls and linears that read operands of any float dtype and
//! round them while packing. `MixedPrecision<B>` wraps any `B`, and Rust cannot ask in its
//! blanket impls whether `B` is Flex; so the ops are found here by `TypeId`, as plain
//! function pointers, the way FP8 operations are (`crate::fp8::training::registry`).
//! Today: Flex and `Autodiff<Flex>` (both checkpointing strategies); every other backend
//! runs its own ops.

use burn_amp_kernels::cpu::cast::Format;
use burn_amp_kernels::cpu::optim::AdamwStep;
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{DType, FloatDType};

use crate::registry::{Capability, Registry, Table};

#[cfg(feature = "flex")]
mod flex;

/// The operands of a linear layer: `x`, `weight` (`[in, out]`) and the optional bias.
pub(crate) type Linear<B> = (FloatTensor<B>, FloatTensor<B>, Option<FloatTensor<B>>);

/// What a routed op did: ran, or handed its operands back because the kernels do not take
/// their shapes or dtypes (the caller then runs the backend's op).
pub(crate) enum Routed<T, O> {
    Ran(T),
    Declined(O),
}

/// `lhs @ rhs`, operands rounded to the format, the result in the dtype.
pub(crate) type MatmulFn<B> = fn(
    FloatTensor<B>,
    FloatTensor<B>,
    Format,
    DType,
) -> Routed<FloatTensor<B>, [FloatTensor<B>; 2]>;

/// `x @ weight + bias`, operands rounded to the format, the result in the dtype.
pub(crate) type LinearFn<B> = fn(Linear<B>, Format, DType) -> Routed<FloatTensor<B>, Linear<B>>;

/// A parameter's AdamW state: its moments and its step count (a one-value f32 tensor, so
/// that a step skipped on the device does not count).
pub(crate) struct AdamwState<T> {
    pub m: T,
    pub v: T,
    pub time: T,
}

/// One fused AdamW step: `(param, grad, state, scalars, found)`, where `found` (a one-value
/// tensor) holds the step's count of non-finite gradient values under a loss scale: above
/// zero, the step is skipped and everything handed back unchanged. Declined (operands
/// back) when the kernel does not take the dtypes.
pub(crate) type AdamwFn<B> = fn(
    FloatTensor<B>,
    FloatTensor<B>,
    AdamwState<FloatTensor<B>>,
    &AdamwStep,
    Option<&FloatTensor<B>>,
) -> Routed<AdamwOut<B>, AdamwIn<B>>;

/// What an AdamW step gives back: the parameter and its state.
pub(crate) type AdamwOut<B> = (FloatTensor<B>, AdamwState<FloatTensor<B>>);

/// What a declined AdamW step hands back: the parameter, the gradient and the state.
pub(crate) type AdamwIn<B> = (FloatTensor<B>, FloatTensor<B>, AdamwState<FloatTensor<B>>);

/// The loss scaler's unscale of one gradient, in place where it can be: `grad / scale`,
/// `scale` a one-value tensor. Declined when the kernel does not take the dtypes.
pub(crate) type UnscaleFn<B> =
    fn(FloatTensor<B>, &FloatTensor<B>) -> Routed<FloatTensor<B>, FloatTensor<B>>;

/// The loss scaler's finite check of one gradient, one read-only pass: its count of inf
/// and NaN values as a one-value f32 tensor; `None` when the kernel does not take the
/// dtype.
pub(crate) type CountFn<B> = fn(&FloatTensor<B>) -> Option<FloatTensor<B>>;

/// The routed ops of one backend type.
pub(crate) struct RoutedOps<B: Backend> {
    /// `tensor` in `dtype` (differentiable where `B` is).
    pub cast: fn(FloatTensor<B>, FloatDType) -> FloatTensor<B>,
    pub matmul: MatmulFn<B>,
    pub linear: LinearFn<B>,
    /// The loss scaler's unscale and finite check of a gradient (gradients are never
    /// autodiff tensors: `None` for autodiff backends).
    pub unscale: Option<UnscaleFn<B>>,
    pub count_nonfinite: Option<CountFn<B>>,
}

/// The CPU optimizer kernels of Flex, for a backend whose tensors are Flex's (Flex, or a
/// decorator of it such as `MixedPrecision<Flex>`).
#[cfg(feature = "flex")]
pub(crate) fn flex_adamw() -> AdamwFn<burn::backend::Flex> {
    flex::adamw
}

impl<B: Backend> Clone for RoutedOps<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for RoutedOps<B> {}

/// Why a global: as the FP8 registry's, the answer to "is `B` Flex?" must be found by
/// `TypeId` inside blanket impls. Built once, never written after.
/// The capability [`RoutedOps`].
struct Routes;

impl Capability for Routes {
    type Of<B: Backend> = RoutedOps<B>;
}

static ROUTED: Registry<Routes> = Registry::new(|| {
    #[allow(unused_mut)]
    let mut table = Table::<Routes>::default();
    #[cfg(feature = "flex")]
    {
        use self::flex;
        use burn::backend::Autodiff;
        use burn::backend::Flex;
        use burn::backend::autodiff::checkpoint::strategy::{
            BalancedCheckpointing, NoCheckpointing,
        };
        table.insert::<Flex>(flex::ops());
        table.insert::<Autodiff<Flex, NoCheckpointing>>(flex::autodiff_ops());
        table.insert::<Autodiff<Flex, BalancedCheckpointing>>(flex::autodiff_ops());
    }
    table
});

/// `B`'s routed ops, if it has any.
pub(crate) fn routed<B: Backend>() -> Option<RoutedOps<B>> {
    ROUTED.get::<B>()
}
