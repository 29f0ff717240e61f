//! The Flex kernels as differentiable ops of `Autodiff<Flex, C>`: a cast whose gradient is
//! cast back with the same kernels, and a matmul and a linear layer whose operands are
//! rounded while packed and whose gradients come out in each operand's own dtype. They
//! keep the operands themselves for the backward pass (an f32 weight that lives anyway),
//! not rounded copies; only a linear layer's f32 input is kept as its compute-format copy,
//! the one its forward product read.

use burn::backend::Autodiff;
use burn::backend::Flex;
use burn::backend::autodiff::NodeId;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::cast::Format;
use burn_amp_kernels::cpu::gemm::Kernel;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{DType, FloatDType, Shape, TensorMetadata};

use super::super::super::{Linear, Routed};
use super::super::arithmetic as flex_ops;
use super::super::cast::cast as flex_cast;
use super::super::matmul::{Plan, linear as flex_linear, linear_grads, takes_linear};
use super::node::{Grads, record};
use super::register::{binary, register, taken};

type Tensor<C> = FloatTensor<Autodiff<Flex, C>>;

#[derive(Debug)]
struct Cast;

impl Backward<Flex, 1> for Cast {
    /// The CPU's instruction set, the input's dtype.
    type State = (Isa, FloatDType);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("cast (backward)", None);
        let (isa, dtype) = ops.state;
        let grad: FlexTensor = grads.consume::<Flex>(&ops.node);
        let Some(parent) = &ops.parents[0] else {
            return;
        };
        // An input that already has a gradient in `dtype` (a 16-bit activation read by
        // several f32 ops): this one rounded to it and added there in one pass, the bits
        // of the cast and then the sum.
        let (grad, old) = taken(grads, &ops, 0, grad);
        if let Some(old) = old {
            let fused = (old.dtype() == DType::from(dtype))
                .then(|| flex_ops::rounded_sum(isa, &grad, &old))
                .flatten();
            if let Some(sum) = fused {
                grads.register::<Flex>(parent.id, sum);
                return;
            }
            grads.register::<Flex>(parent.id, old);
        }
        register(isa, grads, &ops, 0, flex_cast(isa, grad, dtype));
    }
}

/// `tensor` in `dtype`; its gradient goes back to the input's dtype.
pub(crate) fn cast<C: CheckpointStrategy>(
    isa: Isa,
    tensor: Tensor<C>,
    dtype: FloatDType,
) -> Tensor<C> {
    cast_node::<C>(isa, tensor, |t| flex_cast(isa, t, dtype))
}

/// A 16-bit `tensor` standing for its cast to f32 in an op that widens its values as it
/// reads them: the same tensor, not a copy, under a cast's node (at the depth the cast's
/// would have, so gradients are summed in the same order), its f32 gradient going back
/// rounded to the input's dtype as a cast's does. Only such an op may take it.
pub(crate) fn widened<C: CheckpointStrategy>(isa: Isa, tensor: Tensor<C>) -> Tensor<C> {
    cast_node::<C>(isa, tensor, |t| t)
}

/// A cast's node over `tensor`, its output `output(tensor)`.
fn cast_node<C: CheckpointStrategy>(
    isa: Isa,
    tensor: Tensor<C>,
    output: impl FnOnce(FlexTensor) -> FlexTensor,
) -> Tensor<C> {
    match Cast
        .prepare::<C>([tensor.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let input = FloatDType::from(tensor.primitive.dtype());
            prep.finish((isa, input), output(tensor.primitive))
        }
        OpsKind::UnTracked(prep) => prep.finish(output(tensor.primitive)),
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
    kernel: Kernel,
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
        let _time = crate::cost::timed("matmul (backward)", None);
        let s = &ops.state;
        let lhs: Option<FlexTensor> = s.lhs.map(|id| checkpointer.retrieve_node_output(id));
        let rhs: Option<FlexTensor> = s.rhs.map(|id| checkpointer.retrieve_node_output(id));
        let (plan, kernel) = (&s.plan, s.kernel);
        binary(
            kernel.isa(),
            &ops,
            grads,
            |grad| {
                let rhs = rhs.as_ref().expect("rhs kept for lhs's gradient");
                plan.grad_lhs(kernel, grad, rhs, &s.shapes[0], s.dtypes[0])
            },
            |grad| {
                let lhs = lhs.as_ref().expect("lhs kept for rhs's gradient");
                plan.grad_rhs(kernel, lhs, grad, &s.shapes[1], s.dtypes[1])
            },
        );
    }
}

/// `lhs @ rhs` with both rounded to `format`, in `out`; the operands back when the plan
/// does not take them.
pub(crate) fn matmul<C: CheckpointStrategy>(
    isa: Isa,
    lhs: Tensor<C>,
    rhs: Tensor<C>,
    format: Format,
    out: DType,
) -> Routed<Tensor<C>, [Tensor<C>; 2]> {
    let Some(plan) = Plan::of(&lhs.primitive, &rhs.primitive) else {
        return Routed::Declined([lhs, rhs]);
    };
    let kernel = Kernel::select(isa, format);
    let forward = |plan: &Plan, l: &FlexTensor, r: &FlexTensor| plan.forward(kernel, l, r, out);
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
                    kernel,
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

/// What the backward pass of a linear layer needs: the operands (`x` where the weight needs
/// a gradient, the weight where `x` does), not rounded copies, except an f32 `x` under a
/// 16-bit compute format: its rounded copy, which is what the products read.
#[derive(Clone, Debug)]
struct LinearState {
    x: Option<FlexTensor>,
    weight: Option<FlexTensor>,
    kernel: Kernel,
    /// x, weight, bias.
    dtypes: [DType; 3],
}

impl Grads for LinearState {
    const NAME: &'static str = "linear (backward)";

    fn isa(&self) -> Isa {
        self.kernel.isa()
    }

    fn grads(&self, grad: &FlexTensor, wants: [bool; 3]) -> [Option<FlexTensor>; 3] {
        linear_grads(
            self.kernel,
            grad,
            self.x.as_ref(),
            self.weight.as_ref(),
            self.dtypes,
            wants,
        )
    }
}

/// `x @ weight + bias` with `x`, `weight` and `bias` rounded to `format`, in `out`; the
/// operands back when the kernels do not take them.
pub(crate) fn linear<C: CheckpointStrategy>(
    isa: Isa,
    operands: Linear<Autodiff<Flex, C>>,
    format: Format,
    out: DType,
) -> Routed<Tensor<C>, Linear<Autodiff<Flex, C>>> {
    let (x, weight, bias) = &operands;
    if !takes_linear(
        &x.primitive,
        &weight.primitive,
        bias.as_ref().map(|b| &b.primitive),
    ) {
        return Routed::Declined(operands);
    }
    let kernel = Kernel::select(isa, format);
    // An f32 input (a model's first layer, a layer after an f32 norm) rounded to the compute
    // format once, here, and that copy multiplied and kept for the weight's gradient: the
    // packs of the forward product and of `x^T g` would each round it again (once per task
    // that reads it; about 5% of a linear stack's step), and the copy kept is half the size.
    // The same values either way: the packs round as the cast does.
    let narrow = match format {
        Format::Bf16 => Some(FloatDType::BF16),
        Format::F16 => Some(FloatDType::F16),
        Format::F32 => None,
    };
    let x_narrow = narrow
        .filter(|_| x.primitive.dtype() == DType::F32)
        .map(|dtype| flex_cast(isa, x.primitive.clone(), dtype));
    let x_in = x_narrow.as_ref().unwrap_or(&x.primitive);
    let state = || LinearState {
        x: weight.is_tracked().then(|| x_in.clone()),
        weight: x.is_tracked().then(|| weight.primitive.clone()),
        kernel,
        dtypes: [
            x.primitive.dtype(),
            weight.primitive.dtype(),
            bias.as_ref().map_or(DType::F32, |b| b.primitive.dtype()),
        ],
    };
    let forward = || {
        let b = bias.as_ref().map(|b| &b.primitive);
        flex_linear(kernel, x_in, &weight.primitive, b, out)
    };
    Routed::Ran(record::<C, _>((x, weight, bias.as_ref()), state, forward))
}
