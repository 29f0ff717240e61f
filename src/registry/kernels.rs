//! [`KernelBackend`]: what a backend brings to burn-amp's kernels, the trait
//! [`register`](crate::register) reads.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_amp_kernels::cpu::Isa;
use burn_tensor::backend::Backend;

use crate::accum::AccumBackend;
use crate::cpu::{AdamwFn, RoutedOps};
use crate::fp8::Fp8Backend;

/// A backend burn-amp's kernels run on: its FP8 and blocked-accumulation operations
/// ([`Fp8Backend`], [`AccumBackend`]) and the kernels burn-amp has for its tensors (the
/// CPU ops `MixedPrecision` hands to its own kernels on Flex, [`FusedAdamW`]'s fused step
/// on Flex and Burn's CubeCL backends).
///
/// Implemented for Flex, NdArray, Burn's CubeCL backends (any runtime and element types,
/// fused or not), `Autodiff<B>` and [`MixedPrecision<B>`](crate::MixedPrecision). A custom
/// backend takes the portable paths with three empty impls (`impl Fp8Backend for MyBackend
/// {}`, the same for `AccumBackend` and `KernelBackend`), then one
/// [`register`](crate::register) call.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn_amp::{KernelBackend, MixedPrecision, PolicyError};
///
/// /// FP8 training on `MixedPrecision<Autodiff<B>>`, for any backend with burn-amp's kernels.
/// fn train_in_fp8<B: KernelBackend>(device: &B::Device) -> Result<(), PolicyError> {
///     burn_amp::register::<B>();
///     MixedPrecision::<Autodiff<B>>::set_policy(device, "float8_from_mixed_bfloat16")
/// }
///
/// // A decorated backend inside another: not one burn-amp registers by itself.
/// train_in_fp8::<MixedPrecision<Flex>>(&Default::default())?;
/// # MixedPrecision::<Autodiff<MixedPrecision<Flex>>>::clear_policy(&Default::default());
/// # Ok::<(), PolicyError>(())
/// ```
///
/// [`FusedAdamW`]: crate::FusedAdamW
pub trait KernelBackend: Fp8Backend + AccumBackend {
    /// burn-amp's kernels on this backend's tensors, on a CPU with `isa`: none unless
    /// burn-amp has some.
    #[doc(hidden)]
    fn kernels(isa: Isa) -> BackendKernels<Self> {
        let _ = isa;
        BackendKernels::default()
    }

    /// burn-amp's kernels on `Autodiff<Self, C>`'s tensors (ops with their own backward
    /// pass), on a CPU with `isa`: none unless burn-amp has some.
    #[doc(hidden)]
    fn autodiff_kernels<C: CheckpointStrategy>(isa: Isa) -> BackendKernels<Autodiff<Self, C>> {
        let _ = isa;
        BackendKernels::default()
    }
}

/// The kernels burn-amp has for one backend type's tensors (what
/// [`KernelBackend`] gives the registry; opaque outside burn-amp).
#[doc(hidden)]
pub struct BackendKernels<B: Backend> {
    /// The ops `MixedPrecision<B>` hands to burn-amp's CPU kernels.
    pub(crate) routed: Option<RoutedOps<B>>,
    /// `FusedAdamW`'s step.
    pub(crate) adamw: Option<AdamwFn<B>>,
}

impl<B: Backend> Default for BackendKernels<B> {
    fn default() -> Self {
        Self {
            routed: None,
            adamw: None,
        }
    }
}
