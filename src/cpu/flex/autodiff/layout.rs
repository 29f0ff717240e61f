//! Layout ops of `Autodiff<Flex, C>` whose gradients stay contiguous: a reshape of a
//! transposed view, in either pass, otherwise copies through Flex's per-value index.

use burn::backend::Autodiff;
use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn_tensor::ops::{FloatTensor, FloatTensorOps};

use burn_amp_kernels::cpu::Isa;

use super::super::layout::contiguous as copy;
use super::register;

type Tensor<C> = FloatTensor<Autodiff<Flex, C>>;

#[derive(Debug)]
struct Contiguous;

impl Backward<Flex, 1> for Contiguous {
    /// The CPU's instruction set.
    type State = Isa;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("contiguous copy (backward)", None);
        register::unary(ops.state, &ops, grads, |grad| grad);
    }
}

/// `x` in row-major order (itself, untracked by a new node, when it already is).
pub(crate) fn contiguous<C: CheckpointStrategy>(isa: Isa, x: Tensor<C>) -> Tensor<C> {
    if x.primitive.is_contiguous() {
        return x;
    }
    let y = copy(&x.primitive);
    match Contiguous
        .prepare::<C>([x.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(isa, y),
        OpsKind::UnTracked(prep) => prep.finish(y),
    }
}

#[derive(Debug)]
struct SwapDims;

impl Backward<Flex, 1> for SwapDims {
    /// The CPU's instruction set, the two dimensions.
    type State = (Isa, usize, usize);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("swap_dims (backward)", None);
        let (isa, d1, d2) = ops.state;
        register::unary(isa, &ops, grads, |grad| {
            let swapped: FlexTensor = Flex::float_swap_dims(grad, d1, d2);
            copy(&swapped)
        });
    }
}

/// `x` with two dimensions swapped (a view); its gradient comes back contiguous.
pub(crate) fn swap_dims<C: CheckpointStrategy>(
    isa: Isa,
    x: Tensor<C>,
    d1: usize,
    d2: usize,
) -> Tensor<C> {
    match SwapDims
        .prepare::<C>([x.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            prep.finish((isa, d1, d2), Flex::float_swap_dims(x.primitive, d1, d2))
        }
        OpsKind::UnTracked(prep) => prep.finish(Flex::float_swap_dims(x.primitive, d1, d2)),
    }
}
