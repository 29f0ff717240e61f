//! The two ops a batch norm's statistics are made of, as ops of `Autodiff<Flex, C>` on f32
//! tensors: the square of the centred input (`x.powi(2)`), and the mean over a dimension.
//! Burn's defaults write several tensors of the input's size in the backward pass — the
//! square is a product of the tensor with itself, two gradients summed; the mean's gradient
//! is a tensor of ones, scaled, then multiplied by the broadcast gradient. Here each is one
//! pass that writes its result once, with the same IEEE operations, so the same bits. The
//! mean of a 16-bit tensor (a batch norm's input) widens it for Flex's f32 mean and writes
//! its gradient in the input's dtype: the bits of a cast to f32 and the mean, without the
//! cast's f32 gradient the size of the input.

use burn::backend::Autodiff;
use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::nn::BinaryOp;
use burn_tensor::ops::{FloatTensor, FloatTensorOps};
use burn_tensor::{DType, Shape};

use super::super::super::Routed;
use super::super::arithmetic as flex_ops;
use super::super::layout::contiguous;
use super::register::unary;

type Tensor<C> = FloatTensor<Autodiff<Flex, C>>;

#[derive(Debug)]
struct Square;

impl Backward<Flex, 1> for Square {
    /// The CPU's instruction set, the input.
    type State = (Isa, FlexTensor);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("square (backward)", None);
        let (isa, x) = &ops.state;
        // `g * x` from each operand of `x * x`, summed: `(g * x) * 2`, the same bits.
        unary(*isa, &ops, grads, |g| {
            flex_ops::scaled_product(*isa, &g, x, 2.0, g.dtype())
        });
    }
}

/// `x * x` of an f32 tensor; `x` back when the kernels do not take it.
pub(crate) fn square<C: CheckpointStrategy>(
    isa: Isa,
    x: Tensor<C>,
) -> Routed<Tensor<C>, Tensor<C>> {
    if !flex_ops::takes_f32(&x.primitive) {
        return Routed::Declined(x);
    }
    let forward = |x: &FlexTensor| flex_ops::square(isa, x);
    Routed::Ran(
        match Square
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let y = forward(&x.primitive);
                prep.finish((isa, x.primitive), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(forward(&x.primitive)),
        },
    )
}

#[derive(Debug)]
struct MeanDim;

impl Backward<Flex, 1> for MeanDim {
    /// The CPU's instruction set, the input's shape and dtype, the dimension.
    type State = (Isa, Shape, DType, usize);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("mean_dim (backward)", None);
        let (isa, shape, dtype, dim) = &ops.state;
        // Burn's: `(1 / n)` as an f32 times each gradient value, repeated along `dim`;
        // rounded to a 16-bit input's dtype before the repeat (a cast's gradient rounds
        // each repeated value alike).
        let inverse = (1.0 / shape[*dim] as f64) as f32;
        unary(*isa, &ops, grads, |g| {
            let scaled = flex_ops::scalar(*isa, BinaryOp::Mul, &g, inverse, *dtype);
            contiguous(&Flex::float_expand(scaled, shape.clone()))
        });
    }
}

/// The mean over `dim` of an f32 tensor (Flex's), or of a 16-bit one widened to f32 as it
/// is read, in f32, its gradient written in one pass in the input's dtype; `x` back when the
/// kernels do not take it.
pub(crate) fn mean_dim<C: CheckpointStrategy>(
    isa: Isa,
    x: Tensor<C>,
    dim: usize,
) -> Routed<Tensor<C>, Tensor<C>> {
    let dtype = x.primitive.dtype();
    let wide = matches!(dtype, DType::BF16 | DType::F16);
    let takes = wide || flex_ops::takes_f32(&x.primitive);
    if !takes || dim >= x.primitive.layout().shape().num_dims() {
        return Routed::Declined(x);
    }
    let mean = |x: FlexTensor| super::super::mean::mean_dim(isa, x, dim);
    Routed::Ran(
        match MeanDim
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let shape = x.primitive.layout().shape().clone();
                prep.finish((isa, shape, dtype, dim), mean(x.primitive))
            }
            OpsKind::UnTracked(prep) => prep.finish(mean(x.primitive)),
        },
    )
}
