//! The FP8 fake-quantization of a training step: values rounded to FP8 (through the
//! backend's [`Fp8Backend`] kernels, so exactly the bytes an FP8 GEMM would read) and
//! handed back in the tensor's own dtype, plus the two autodiff steps around it.
//!
//! - Forward, [`Quantize::straight_through`]: `x̂ = dq(q(x))`; the backward pass treats the
//!   rounding as the identity (the straight-through estimator every FP8 recipe uses), so
//!   `∂L/∂x = ∂L/∂x̂`.
//! - Backward, [`Quantize::quantize_grad`]: identity forward; the gradient that flows back
//!   through it is itself fake-quantized (to E5M2), so the op before it — a linear's or a
//!   convolution's backward matmuls — consumes an FP8 gradient, as in HFP8.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{DType, FloatDType, Shape, TensorMetadata};

use super::numerics::{self, SiteTag};
use super::scaling::Fp8Role;
use crate::fp8::{Fp8Backend, Fp8Recipe};

/// `tensor` rounded to FP8 by `role`'s cast with `recipe`'s current scales, back in its own
/// dtype and shape. f64 and empty tensors are handed back untouched (burn-amp never narrows
/// f64). Records the tensor in the numerics report `site` belongs to, if any.
///
/// # Panics
/// When the tensor has more than 2^32 - 1 elements (the FP8 kernels index with 32 bits).
pub(crate) fn fake_quantize<I: Fp8Backend>(
    tensor: FloatTensor<I>,
    role: Fp8Role,
    recipe: Fp8Recipe,
    site: Option<SiteTag>,
) -> FloatTensor<I> {
    let shape = tensor.shape();
    let len = shape.num_elements();
    let dtype = match tensor.dtype() {
        DType::F32 | DType::Flex32 | DType::F16 | DType::BF16 => FloatDType::from(tensor.dtype()),
        _ => return tensor,
    };
    if len == 0 {
        return tensor;
    }
    let layout = recipe
        .layout(&shape)
        .unwrap_or_else(|e| panic!("FP8 training of a tensor of shape {shape:?}: {e}"));
    let flat = I::float_reshape(tensor, Shape::new([len]));
    if let Some(tag) = &site {
        numerics::record::<I>(tag, role, recipe, flat.clone(), &shape);
    }
    let rule = recipe.rule().unwrap_or(ScaleRule::Float { margin: 0 });
    let values = I::fp8_fake_quantize(flat, layout, role.cast(), rule);
    debug_assert_eq!(FloatDType::from(values.dtype()), dtype);
    I::float_reshape(values, shape)
}

/// The two autodiff steps of FP8 training, for `Autodiff<I, C>`.
pub(crate) trait Quantize: Backend {
    /// Fake-quantized forward, straight-through backward.
    fn straight_through(
        tensor: FloatTensor<Self>,
        role: Fp8Role,
        recipe: Fp8Recipe,
        site: Option<SiteTag>,
    ) -> FloatTensor<Self>;

    /// Identity forward, fake-quantized gradient backward.
    fn quantize_grad(
        tensor: FloatTensor<Self>,
        role: Fp8Role,
        recipe: Fp8Recipe,
        site: Option<SiteTag>,
    ) -> FloatTensor<Self>;
}

/// The straight-through estimator: the gradient passes the rounding unchanged.
#[derive(Debug)]
struct StraightThrough;

impl<I: Backend> Backward<I, 1> for StraightThrough {
    type State = ();

    fn backward(self, ops: Ops<(), 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<I>(&ops.node);
        let [parent] = ops.parents;
        if let Some(parent) = parent {
            grads.register::<I>(parent.id, grad);
        }
    }
}

/// The incoming gradient, rounded to FP8 on its way back.
#[derive(Debug)]
struct QuantizeGrad;

impl<I: Fp8Backend> Backward<I, 1> for QuantizeGrad {
    type State = (Fp8Role, Fp8Recipe, Option<SiteTag>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<I>(&ops.node);
        let (role, recipe, site) = ops.state;
        let [parent] = ops.parents;
        if let Some(parent) = parent {
            grads.register::<I>(parent.id, fake_quantize::<I>(grad, role, recipe, site));
        }
    }
}

impl<I: Fp8Backend, C: CheckpointStrategy> Quantize for Autodiff<I, C> {
    fn straight_through(
        tensor: FloatTensor<Self>,
        role: Fp8Role,
        recipe: Fp8Recipe,
        site: Option<SiteTag>,
    ) -> FloatTensor<Self> {
        let values = fake_quantize::<I>(tensor.primitive.clone(), role, recipe, site);
        StraightThrough
            .prepare::<C>([tensor.node.clone()])
            .compute_bound()
            .stateless(values)
    }

    fn quantize_grad(
        tensor: FloatTensor<Self>,
        role: Fp8Role,
        recipe: Fp8Recipe,
        site: Option<SiteTag>,
    ) -> FloatTensor<Self> {
        match QuantizeGrad
            .prepare::<C>([tensor.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((role, recipe, site), tensor.primitive),
            OpsKind::UnTracked(prep) => prep.finish(tensor.primitive),
        }
    }
}
