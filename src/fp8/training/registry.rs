//! Which backends FP8 training runs on. [`MixedPrecision<B>`](crate::MixedPrecision) wraps
//! *any* `B`, and Rust cannot ask "does `B` implement `Fp8Backend`?" inside a blanket impl;
//! so the FP8 operations of each backend are looked up here by `TypeId`, as plain function
//! pointers registered by [`register`]. The backends burn-amp is built with are registered
//! on first use.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::{
    BalancedCheckpointing, CheckpointStrategy, NoCheckpointing,
};
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;

use super::quant::{self, Plan, Quantize};
use crate::fp8::Fp8Backend;
use crate::registry::{Capability, Registry, Table};

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

/// Why a global: `MixedPrecision<B>` wraps any `B`, and Rust cannot ask inside its blanket
/// impls whether `B: Fp8Backend`; registration by `TypeId` is how the answer is found.
/// The capability [`Fp8Ops`].
struct Fp8;

impl Capability for Fp8 {
    type Of<B: Backend> = Fp8Ops<B>;
}

static FP8_OPS: Registry<Fp8> = Registry::new(|| {
    let mut table = Table::default();
    register_builtin(&mut table);
    table
});

fn insert_autodiff<I: Fp8Backend, C: CheckpointStrategy>(table: &mut Table<Fp8>) {
    table.insert::<Autodiff<I, C>>(Fp8Ops {
        quantize: <Autodiff<I, C> as Quantize>::straight_through,
        quantize_grad: Some(<Autodiff<I, C> as Quantize>::quantize_grad),
        aps: None,
    });
}

fn insert_all<I: Fp8Backend>(table: &mut Table<Fp8>) {
    table.insert::<I>(Fp8Ops {
        quantize: quant::fake_quantize::<I>,
        quantize_grad: None,
        aps: Some(super::aps::aps_e5m2::<I>),
    });
    insert_autodiff::<I, NoCheckpointing>(table);
    insert_autodiff::<I, BalancedCheckpointing>(table);
}

#[allow(unused_variables)]
fn register_builtin(table: &mut Table<Fp8>) {
    #[cfg(feature = "flex")]
    insert_all::<burn::backend::Flex>(table);
    #[cfg(feature = "ndarray")]
    insert_all::<burn::backend::NdArray>(table);
    #[cfg(feature = "wgpu")]
    insert_all::<burn::backend::Wgpu>(table);
    #[cfg(feature = "cuda")]
    insert_all::<burn::backend::Cuda>(table);
}

/// Lets FP8 policies run on `MixedPrecision<I>` and `MixedPrecision<Autodiff<I>>` (both
/// checkpointing strategies). Flex, NdArray, Wgpu and Cuda (as burn-amp's features enable
/// them) are registered already; call this once for another backend, or for one with other
/// type parameters (`Wgpu<half::f16>`, say).
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn_amp::MixedPrecision;
///
/// burn_amp::fp8::training::register::<Flex>(); // already there: a no-op
/// MixedPrecision::<Autodiff<Flex>>::set_policy(&Default::default(), "float8_from_mixed_bfloat16")?;
/// # MixedPrecision::<Autodiff<Flex>>::clear_policy(&Default::default());
/// # Ok::<(), burn_amp::PolicyError>(())
/// ```
pub fn register<I: Fp8Backend>() {
    FP8_OPS.register(insert_all::<I>);
}

/// The FP8 operations of `B`, if registered.
pub(crate) fn lookup<B: Backend>() -> Option<Fp8Ops<B>> {
    FP8_OPS.get::<B>()
}
