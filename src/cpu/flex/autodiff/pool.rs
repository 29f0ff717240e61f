//! 2-d max pooling as an op of `Autodiff<Flex, C>`: the forward pass keeps each output's
//! position in its input plane, and the backward pass adds the gradient back there; and
//! global average pooling, whose backward pass spreads each gradient over its plane.

use burn::backend::Autodiff;
use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn_amp_kernels::cpu::Isa;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{DType, Shape};

use super::super::super::{MaxPool2dArgs, Routed};
use super::super::avg_pool;
use super::super::max_pool::MaxPoolPlan;
use super::register;

type Tensor<C> = FloatTensor<Autodiff<Flex, C>>;

#[derive(Debug)]
struct MaxPool;

impl Backward<Flex, 1> for MaxPool {
    /// The CPU's instruction set, the plan, the positions the outputs came from, the
    /// input's dtype.
    type State = (Isa, MaxPoolPlan, Vec<u32>, DType);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("max_pool2d (backward)", None);
        let (isa, plan, positions, dtype) = &ops.state;
        register::unary(*isa, &ops, grads, |grad| {
            plan.backward(&grad, positions, *dtype)
        });
    }
}

/// 2-d max pooling in `x`'s dtype; `x` back when the kernel does not take it.
pub(crate) fn max_pool2d<C: CheckpointStrategy>(
    isa: Isa,
    x: Tensor<C>,
    args: MaxPool2dArgs,
) -> Routed<Tensor<C>, Tensor<C>> {
    let Some(plan) = MaxPoolPlan::of(&x.primitive, &args) else {
        return Routed::Declined(x);
    };
    Routed::Ran(
        match MaxPool
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (y, positions) = plan.forward(isa, &x.primitive, true);
                prep.finish((isa, plan, positions, x.primitive.dtype()), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(plan.forward(isa, &x.primitive, false).0),
        },
    )
}

#[derive(Debug)]
struct GlobalAvgPool;

impl Backward<Flex, 1> for GlobalAvgPool {
    /// The CPU's instruction set, the input's shape and dtype.
    type State = (Isa, Shape, DType);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("adaptive_avg_pool2d (backward)", None);
        let (isa, shape, dtype) = &ops.state;
        register::unary(*isa, &ops, grads, |grad| {
            avg_pool::backward(&grad, shape, *dtype)
        });
    }
}

/// An adaptive average pool of `x` to `output_size`, in `x`'s dtype, where it is a global
/// one (`[1, 1]`); `x` back otherwise.
pub(crate) fn adaptive_avg_pool2d<C: CheckpointStrategy>(
    isa: Isa,
    x: Tensor<C>,
    output_size: [usize; 2],
) -> Routed<Tensor<C>, Tensor<C>> {
    let Some(shape) = avg_pool::takes(&x.primitive, output_size) else {
        return Routed::Declined(x);
    };
    Routed::Ran(
        match GlobalAvgPool
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let dtype = x.primitive.dtype();
                prep.finish((isa, shape, dtype), avg_pool::forward(&x.primitive))
            }
            OpsKind::UnTracked(prep) => prep.finish(avg_pool::forward(&x.primitive)),
        },
    )
}
