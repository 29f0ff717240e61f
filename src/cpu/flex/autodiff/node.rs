//! One node of `Autodiff<Flex>` for an op of two operands and an optional third (a linear
//! layer's or a convolution's bias, a layer norm's beta): recorded with two or three
//! parents, its backward pass asks the op for the gradients of the parents it has and
//! registers them. Linear, convolution and layer norm are each their state and their
//! gradients; the node is written once, here.

use core::marker::PhantomData;

use burn::backend::Autodiff;
use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_tensor::ops::FloatTensor;

use super::register::register;

type Tensor<C> = FloatTensor<Autodiff<Flex, C>>;

/// What an op keeps for its backward pass, and how it makes its operands' gradients.
pub(super) trait Grads: Clone + Send + core::fmt::Debug + 'static {
    /// The name the step profile times the backward pass under.
    const NAME: &'static str;

    /// The CPU's instruction set the gradients run on.
    fn isa(&self) -> Isa;

    /// The gradients of the operands `wants` asks for, from the output's gradient, each in
    /// its operand's dtype.
    fn grads(&self, grad: &FlexTensor, wants: [bool; 3]) -> [Option<FlexTensor>; 3];
}

/// The node with two parents.
#[derive(Debug)]
struct Two<S>(PhantomData<S>);

/// The node with three parents.
#[derive(Debug)]
struct Three<S>(PhantomData<S>);

fn backward<S: Grads, const N: usize>(ops: Ops<S, N>, grads: &mut Gradients) {
    let _time = crate::cost::timed(S::NAME, None);
    let grad: FlexTensor = grads.consume::<Flex>(&ops.node);
    let wants = core::array::from_fn(|i| ops.parents.get(i).is_some_and(Option::is_some));
    let out = ops.state.grads(&grad, wants);
    let isa = ops.state.isa();
    for (i, grad) in out.into_iter().enumerate().take(N) {
        if let Some(grad) = grad {
            register(isa, grads, &ops, i, grad);
        }
    }
}

impl<S: Grads> Backward<Flex, 2> for Two<S> {
    type State = S;

    fn backward(self, ops: Ops<S, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        backward(ops, grads);
    }
}

impl<S: Grads> Backward<Flex, 3> for Three<S> {
    type State = S;

    fn backward(self, ops: Ops<S, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        backward(ops, grads);
    }
}

/// `forward()` as one node with parents `a`, `b` and `c` (when there is one), keeping
/// `state()` for the backward pass when a parent is tracked.
pub(super) fn record<C: CheckpointStrategy, S: Grads>(
    (a, b, c): (&Tensor<C>, &Tensor<C>, Option<&Tensor<C>>),
    state: impl FnOnce() -> S,
    forward: impl FnOnce() -> FlexTensor,
) -> Tensor<C> {
    match c {
        Some(c) => match Three::<S>(PhantomData)
            .prepare::<C>([a.node.clone(), b.node.clone(), c.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(state(), forward()),
            OpsKind::UnTracked(prep) => prep.finish(forward()),
        },
        None => match Two::<S>(PhantomData)
            .prepare::<C>([a.node.clone(), b.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(state(), forward()),
            OpsKind::UnTracked(prep) => prep.finish(forward()),
        },
    }
}
