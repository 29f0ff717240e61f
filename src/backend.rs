//! The [`MixedPrecision`] decorator backend and its `Backend` / `AutodiffBackend` impls.
//! The op families live in `backend/ops/`, one file per Burn trait; the casting rules they
//! apply live in `backend/autocast.rs`, and the policy each op runs under comes from
//! `crate::context`.

#[macro_use]
mod forward;
pub(crate) mod autocast;
#[cfg(feature = "ddp")]
mod distributed;
mod gradients;
mod ops;
pub(crate) mod scale;

pub use gradients::ScaledGradients;
pub use ops::op_classes;

use core::marker::PhantomData;

use burn_tensor::backend::{AutodiffBackend, Backend, BackendTypes, DTypeUsageSet, ExecutionError};
use burn_tensor::ops::{BoolTensor, FloatTensor, IntTensor, QuantizedTensor};
use burn_tensor::{DType, FloatDType, TensorData};

use crate::context;
use crate::cost;
use crate::policy::{IntoPolicy, Policy, PolicyError};

/// A backend decorator that runs any Burn backend `B` under a dtype [`Policy`].
///
/// Change one type parameter and set a policy; the model, the device and the training loop
/// stay as they are:
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::{FloatDType, Tensor, activation::softmax};
/// use burn_amp::MixedPrecision;
///
/// type B = MixedPrecision<Autodiff<Flex>>; // was: Autodiff<Flex>
/// let device = Default::default();
/// MixedPrecision::<Autodiff<Flex>>::set_policy(&device, "mixed_bfloat16")?;
///
/// let layer: Linear<B> = LinearConfig::new(8, 4).init(&device);
/// let x = Tensor::<B, 2>::ones([2, 8], &device);
/// let hidden = layer.forward(x); // computed in bf16
/// let probs = softmax(hidden.clone(), 1); // forced to f32
/// assert_eq!(layer.weight.val().dtype(), FloatDType::F32.into()); // variables stay f32
/// assert_eq!(hidden.dtype(), FloatDType::BF16.into());
/// assert_eq!(probs.dtype(), FloatDType::F32.into());
///
/// let grads = probs.sum().backward();
/// let grad = layer.weight.grad(&grads).unwrap();
/// assert_eq!(grad.dtype(), FloatDType::F32.into()); // gradients of f32 variables are f32
/// # MixedPrecision::<Autodiff<Flex>>::clear_policy(&device);
/// # Ok::<(), burn_amp::PolicyError>(())
/// ```
///
/// `MixedPrecision<B>` uses `B`'s tensor primitives and device, and hands every op to `B`:
/// the ops of the compute class after casting their inputs to the compute dtype, the
/// numerically sensitive ones after casting to f32, the rest as they come (see
/// [`crate::policy`] and the [guide's op table](crate::guide::policies)). Put it *outside* `Autodiff`
/// (`MixedPrecision<Autodiff<B>>`), so the casts are recorded and gradients come back in
/// f32 (the dtype of f32 variables; 16-bit variables' gradients are read in f32 too);
/// `Autodiff<MixedPrecision<B>>` also trains, but autodiff then does not see the casts
/// (see [getting started](crate::guide::getting_started)).
#[derive(Clone, Copy, Debug, Default)]
pub struct MixedPrecision<B> {
    _inner: PhantomData<B>,
}

impl<B: Backend> MixedPrecision<B> {
    /// Sets the policy for one device, after checking that `B` runs its dtypes there.
    ///
    /// ```
    /// use burn::backend::{Flex, NdArray};
    /// use burn_amp::{MixedPrecision, PolicyError};
    ///
    /// MixedPrecision::<Flex>::set_policy(&Default::default(), "mixed_bfloat16")?;
    /// // NdArray has no f16 or bf16: refused, with a policy that works.
    /// let err = MixedPrecision::<NdArray>::set_policy(&Default::default(), "mixed_float16");
    /// assert!(matches!(err, Err(PolicyError::Unsupported { .. })));
    /// # MixedPrecision::<Flex>::clear_policy(&Default::default());
    /// # Ok::<(), PolicyError>(())
    /// ```
    ///
    /// # Errors
    /// A [`PolicyError`] for a string that is not a policy, and
    /// [`PolicyError::Unsupported`] when the device lacks one of its dtypes; the device's
    /// policy is then left as it was.
    pub fn set_policy(device: &B::Device, policy: impl IntoPolicy) -> Result<(), PolicyError> {
        let policy = policy.into_policy()?;
        context::check::<B>(device, policy)?;
        context::set_device_policy(device, policy);
        Ok(())
    }

    /// Removes the device's own policy; the global one applies to it again.
    ///
    /// ```
    /// use burn::backend::NdArray;
    /// use burn_amp::{MixedPrecision, Policy};
    ///
    /// let device = Default::default();
    /// MixedPrecision::<NdArray>::set_policy(&device, "float32")?;
    /// assert_eq!(MixedPrecision::<NdArray>::policy(&device)?, Policy::float32());
    /// // NdArray has no f16: the policy is refused, the device's one left as it was.
    /// assert!(MixedPrecision::<NdArray>::set_policy(&device, "mixed_float16").is_err());
    /// MixedPrecision::<NdArray>::clear_policy(&device);
    /// # Ok::<(), burn_amp::PolicyError>(())
    /// ```
    pub fn clear_policy(device: &B::Device) {
        context::clear_device_policy(device);
    }

    /// The policy ops on `device` run under on this thread, checked against `B`.
    ///
    /// # Errors
    /// [`PolicyError::Unsupported`] when the device cannot run it (a global policy is only
    /// checked when a device uses it). Call this after [`crate::set_global_policy`] to get
    /// the error as a value rather than as a panic at the first op.
    pub fn policy(device: &B::Device) -> Result<Policy, PolicyError> {
        let policy = context::current(device);
        context::check::<B>(device, policy)?;
        Ok(policy)
    }
}

impl<B: Backend> BackendTypes for MixedPrecision<B> {
    type Device = B::Device;

    type FloatTensorPrimitive = B::FloatTensorPrimitive;
    type FloatElem = B::FloatElem;

    type IntTensorPrimitive = B::IntTensorPrimitive;
    type IntElem = B::IntElem;

    type BoolTensorPrimitive = B::BoolTensorPrimitive;
    type BoolElem = B::BoolElem;

    type QuantizedTensorPrimitive = B::QuantizedTensorPrimitive;
}

impl<B: Backend> Backend for MixedPrecision<B> {
    fn ad_enabled(device: &Self::Device) -> bool {
        B::ad_enabled(device)
    }

    fn memory_persistent_allocations<
        Output: Send,
        Input: Send,
        Func: Fn(Input) -> Output + Send,
    >(
        device: &Self::Device,
        input: Input,
        func: Func,
    ) -> Output {
        B::memory_persistent_allocations(device, input, func)
    }

    fn memory_cleanup(device: &Self::Device) {
        B::memory_cleanup(device)
    }

    fn name(device: &Self::Device) -> String {
        format!("mixed_precision<{}>", B::name(device))
    }

    fn seed(device: &Self::Device, seed: u64) {
        B::seed(device, seed)
    }

    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        B::sync(device)
    }

    fn staging<'a, Iter>(data: Iter, device: &Self::Device)
    where
        Iter: Iterator<Item = &'a mut TensorData>,
    {
        B::staging(data, device)
    }

    fn supports_dtype(device: &Self::Device, dtype: DType) -> bool {
        B::supports_dtype(device, dtype)
    }

    fn dtype_usage(device: &Self::Device, dtype: DType) -> DTypeUsageSet {
        B::dtype_usage(device, dtype)
    }

    fn device_count(type_id: u16) -> usize {
        B::device_count(type_id)
    }
}

impl<B: AutodiffBackend> AutodiffBackend for MixedPrecision<B> {
    type InnerBackend = MixedPrecision<B::InnerBackend>;
    type Gradients = ScaledGradients<B::Gradients>;

    /// Runs the backward pass from `tensor` cast to the policy's output dtype (f32 under the
    /// mixed policies). When an automatic [`LossScaleOptimizer`](crate::LossScaleOptimizer)
    /// is bound to the tensor's device (or is the default one) and the policy computes in
    /// f16, the loss is first multiplied by its scale; the returned gradients divide it out
    /// again when read.
    fn backward(tensor: FloatTensor<Self>) -> Self::Gradients {
        let _phase = cost::backward();
        let device = B::float_device(&tensor);
        let (op, scale) = context::backward::<B>(&device);
        let dtype = context::loss_dtype(op.policy, autocast::dtype::<B>(&tensor));
        let loss = autocast::cast::<B>(tensor, dtype, &op);
        let (loss, slot) = match scale {
            Some((slot, source)) => {
                // The scale stays on the device: multiplied in, never read back.
                let initial = || source.initial();
                let factor =
                    scale::with_state::<B::InnerBackend, _>(&slot, &device, initial, |s| s.scale());
                // A 16-bit loss (under `float16`) is scaled in f32, where the product cannot
                // overflow; its gradient goes back through the cast to the loss's dtype.
                let loss = match autocast::dtype::<B>(&loss) {
                    FloatDType::F16 | FloatDType::BF16 => {
                        autocast::cast::<B>(loss, FloatDType::F32, &op)
                    }
                    _ => loss,
                };
                (scale::times::<B>(loss, B::from_inner(factor)), Some(slot))
            }
            None => (loss, None),
        };
        ScaledGradients {
            inner: B::backward(loss),
            scale: slot,
        }
    }

    fn grad(
        tensor: &FloatTensor<Self>,
        grads: &Self::Gradients,
    ) -> Option<FloatTensor<Self::InnerBackend>> {
        B::grad(tensor, &grads.inner).map(|g| gradients::read::<B::InnerBackend>(g, &grads.scale))
    }

    fn grad_remove(
        tensor: &FloatTensor<Self>,
        grads: &mut Self::Gradients,
    ) -> Option<FloatTensor<Self::InnerBackend>> {
        B::grad_remove(tensor, &mut grads.inner)
            .map(|g| gradients::read::<B::InnerBackend>(g, &grads.scale))
    }

    fn grad_replace(
        tensor: &FloatTensor<Self>,
        grads: &mut Self::Gradients,
        grad: FloatTensor<Self::InnerBackend>,
    ) {
        let grad = gradients::rescale::<B::InnerBackend>(grad, &grads.scale);
        B::grad_replace(tensor, &mut grads.inner, grad)
    }

    fn inner(tensor: FloatTensor<Self>) -> FloatTensor<Self::InnerBackend> {
        B::inner(tensor)
    }

    fn int_inner(tensor: IntTensor<Self>) -> IntTensor<Self::InnerBackend> {
        B::int_inner(tensor)
    }

    fn bool_inner(tensor: BoolTensor<Self>) -> BoolTensor<Self::InnerBackend> {
        B::bool_inner(tensor)
    }

    fn q_inner(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self::InnerBackend> {
        B::q_inner(tensor)
    }

    fn from_inner(tensor: FloatTensor<Self::InnerBackend>) -> FloatTensor<Self> {
        B::from_inner(tensor)
    }

    fn int_from_inner(tensor: IntTensor<Self::InnerBackend>) -> IntTensor<Self> {
        B::int_from_inner(tensor)
    }

    fn bool_from_inner(tensor: BoolTensor<Self::InnerBackend>) -> BoolTensor<Self> {
        B::bool_from_inner(tensor)
    }

    fn q_from_inner(tensor: QuantizedTensor<Self::InnerBackend>) -> QuantizedTensor<Self> {
        B::q_from_inner(tensor)
    }

    /// Forwarded: the parameters Burn's DDP strategy marks are `B`'s tensors, whose
    /// gradients `B`'s backward pass all-reduces (the default would silently mark nothing).
    #[cfg(feature = "ddp")]
    fn set_distributed_params(
        tensor: FloatTensor<Self>,
        param_id: burn_tensor::backend::distributed::DistributedParamId,
    ) -> FloatTensor<Self> {
        B::set_distributed_params(tensor, param_id)
    }

    #[cfg(feature = "ddp")]
    fn distributed_params(
        tensor: &FloatTensor<Self>,
    ) -> Option<burn_tensor::backend::distributed::DistributedParams> {
        B::distributed_params(tensor)
    }

    #[cfg(feature = "ddp")]
    fn is_distributed(tensor: &FloatTensor<Self>) -> bool {
        B::is_distributed(tensor)
    }
}

/// Casts a model's output to the policy's output dtype (f32 under the mixed policies), as
/// jmp's `cast_to_output` or a Keras `dtype="float32"` output layer do.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{FloatDType, Tensor};
/// use burn_amp::{MixedPrecision, Policy, cast_to_output, with_policy};
///
/// with_policy(Policy::mixed_float16(), || {
///     let x = Tensor::<MixedPrecision<Flex>, 2>::ones([2, 2], &Default::default());
///     let logits = x.clone().matmul(x); // f16
///     assert_eq!(cast_to_output(logits).dtype(), FloatDType::F32.into());
/// });
/// ```
pub fn cast_to_output<B: Backend, const D: usize>(
    tensor: burn_tensor::Tensor<MixedPrecision<B>, D>,
) -> burn_tensor::Tensor<MixedPrecision<B>, D> {
    let policy = context::policy::<B>(&tensor.device());
    let dtype = FloatDType::from(tensor.dtype());
    if dtype == policy.output_dtype() || dtype == FloatDType::F64 {
        tensor
    } else {
        tensor.cast(policy.output_dtype())
    }
}
