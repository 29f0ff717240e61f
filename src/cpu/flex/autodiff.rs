//! The Flex kernels as differentiable ops of `Autodiff<Flex, C>`: a cast whose gradient is
//! cast back with the same kernels, and a matmul and a linear layer whose operands are
//! rounded while packed and whose gradients come out in each operand's own dtype. They
//! keep the operands themselves for the backward pass (an f32 weight that lives anyway),
//! not rounded copies.

use burn::backend::Autodiff;
use burn::backend::Flex;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind, binary, unary};
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::cast::Format;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{DType, FloatDType, Shape, TensorMetadata};

use super::super::{Linear, Routed};
use super::cast::cast as flex_cast;
use super::matmul::{Plan, linear as flex_linear, linear_grads, takes_linear};

type Tensor<C> = FloatTensor<Autodiff<Flex, C>>;

#[derive(Debug)]
struct Cast;

impl Backward<Flex, 1> for Cast {
    /// The input's dtype.
    type State = FloatDType;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dtype = ops.state;
        unary::<Flex, _>(ops.parents, ops.node, grads, |grad| flex_cast(grad, dtype));
    }
}

/// `tensor` in `dtype`; its gradient goes back to the input's dtype.
pub(crate) fn cast<C: CheckpointStrategy>(tensor: Tensor<C>, dtype: FloatDType) -> Tensor<C> {
    match Cast
        .prepare::<C>([tensor.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let input = FloatDType::from(tensor.primitive.dtype());
            prep.finish(input, flex_cast(tensor.primitive, dtype))
        }
        OpsKind::UnTracked(prep) => prep.finish(flex_cast(tensor.primitive, dtype)),
    }
}

#[derive(Debug)]
struct Matmul;

/// What the backward pass of a matmul needs.
#[derive(Clone, Debug)]
struct MatmulState {
    lhs: Option<NodeId>,
    rhs: Option<NodeId>,
    plan: Plan,
    format: Format,
    dtypes: [DType; 2],
    shapes: [Shape; 2],
}

impl Backward<Flex, 2> for Matmul {
    type State = MatmulState;

    fn backward(
        self,
        ops: Ops<Self::State, 2>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        let s = ops.state;
        let lhs: Option<FlexTensor> = s.lhs.map(|id| checkpointer.retrieve_node_output(id));
        let rhs: Option<FlexTensor> = s.rhs.map(|id| checkpointer.retrieve_node_output(id));
        let (plan, format) = (&s.plan, s.format);
        binary::<Flex, _, _>(
            ops.parents,
            ops.node,
            grads,
            |grad| {
                let rhs = rhs.as_ref().expect("rhs kept for lhs's gradient");
                plan.grad_lhs(&grad, rhs, &s.shapes[0], format, s.dtypes[0])
            },
            |grad| {
                let lhs = lhs.as_ref().expect("lhs kept for rhs's gradient");
                plan.grad_rhs(lhs, &grad, &s.shapes[1], format, s.dtypes[1])
            },
        );
    }
}

/// `lhs @ rhs` with both rounded to `format`, in `out`; the operands back when the plan
/// does not take them.
pub(crate) fn matmul<C: CheckpointStrategy>(
    lhs: Tensor<C>,
    rhs: Tensor<C>,
    format: Format,
    out: DType,
) -> Routed<Tensor<C>, [Tensor<C>; 2]> {
    let Some(plan) = Plan::of(&lhs.primitive, &rhs.primitive) else {
        return Routed::Declined([lhs, rhs]);
    };
    let forward = |plan: &Plan, l: &FlexTensor, r: &FlexTensor| plan.forward(l, r, format, out);
    let (lhs_tracked, rhs_tracked) = (lhs.is_tracked(), rhs.is_tracked());
    Routed::Ran(
        match Matmul
            .prepare::<C>([lhs.node.clone(), rhs.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(mut prep) => {
                let state = MatmulState {
                    lhs: rhs_tracked.then(|| prep.checkpoint(&lhs)),
                    rhs: lhs_tracked.then(|| prep.checkpoint(&rhs)),
                    format,
                    dtypes: [lhs.primitive.dtype(), rhs.primitive.dtype()],
                    shapes: [lhs.primitive.shape(), rhs.primitive.shape()],
                    plan: plan.clone(),
                };
                let y = forward(&plan, &lhs.primitive, &rhs.primitive);
                prep.finish(state, y)
            }
            OpsKind::UnTracked(prep) => prep.finish(forward(&plan, &lhs.primitive, &rhs.primitive)),
        },
    )
}

#[derive(Debug)]
struct LinearWithBias;

#[derive(Debug)]
struct LinearNoBias;

/// What the backward pass of a linear layer needs.
#[derive(Clone, Debug)]
struct LinearState {
    x: Option<NodeId>,
    weight: Option<NodeId>,
    format: Format,
    /// x, weight, bias.
    dtypes: [DType; 3],
}

fn linear_backward<const N: usize>(
    ops: Ops<LinearState, N>,
    grads: &mut Gradients,
    checkpointer: &mut Checkpointer,
) {
    let s = ops.state;
    let grad: FlexTensor = grads.consume::<Flex>(&ops.node);
    let x: Option<FlexTensor> = s.x.map(|id| checkpointer.retrieve_node_output(id));
    let weight: Option<FlexTensor> = s.weight.map(|id| checkpointer.retrieve_node_output(id));
    let wants = core::array::from_fn(|i| ops.parents.get(i).is_some_and(Option::is_some));
    let out = linear_grads(
        &grad,
        x.as_ref(),
        weight.as_ref(),
        s.dtypes,
        wants,
        s.format,
    );
    for (parent, grad) in ops.parents.iter().zip(out) {
        if let (Some(parent), Some(grad)) = (parent, grad) {
            grads.register::<Flex>(parent.id, grad);
        }
    }
}

impl Backward<Flex, 3> for LinearWithBias {
    type State = LinearState;

    fn backward(
        self,
        ops: Ops<Self::State, 3>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        linear_backward(ops, grads, checkpointer);
    }
}

impl Backward<Flex, 2> for LinearNoBias {
    type State = LinearState;

    fn backward(
        self,
        ops: Ops<Self::State, 2>,
        grads: &mut Gradients,
        checkpointer: &mut Checkpointer,
    ) {
        linear_backward(ops, grads, checkpointer);
    }
}

/// `x @ weight + bias` with `x`, `weight` and `bias` rounded to `format`, in `out`; the
/// operands back when the kernels do not take them.
pub(crate) fn linear<C: CheckpointStrategy>(
    operands: Linear<Autodiff<Flex, C>>,
    format: Format,
    out: DType,
) -> Routed<Tensor<C>, Linear<Autodiff<Flex, C>>> {
    if !takes_linear(
        &operands.0.primitive,
        &operands.1.primitive,
        operands.2.as_ref().map(|b| &b.primitive),
    ) {
        return Routed::Declined(operands);
    }
    let (x, weight, bias) = operands;
    let (x_tracked, w_tracked) = (x.is_tracked(), weight.is_tracked());
    let dtypes = [
        x.primitive.dtype(),
        weight.primitive.dtype(),
        bias.as_ref().map_or(DType::F32, |b| b.primitive.dtype()),
    ];
    let forward =
        |b: Option<&FlexTensor>| flex_linear(&x.primitive, &weight.primitive, b, format, out);
    macro_rules! record {
        ($op:expr, $nodes:expr, $bias:expr) => {
            match $op.prepare::<C>($nodes).compute_bound().stateful() {
                OpsKind::Tracked(mut prep) => {
                    let state = LinearState {
                        x: w_tracked.then(|| prep.checkpoint(&x)),
                        weight: x_tracked.then(|| prep.checkpoint(&weight)),
                        format,
                        dtypes,
                    };
                    prep.finish(state, forward($bias))
                }
                OpsKind::UnTracked(prep) => prep.finish(forward($bias)),
            }
        };
    }
    Routed::Ran(match &bias {
        Some(b) => record!(
            LinearWithBias,
            [x.node.clone(), weight.node.clone(), b.node.clone()],
            Some(&b.primitive)
        ),
        None => record!(LinearNoBias, [x.node.clone(), weight.node.clone()], None),
    })
}
