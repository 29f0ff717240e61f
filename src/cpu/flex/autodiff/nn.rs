//! Softmax, layer norm, GELU, ReLU and `mask_fill` as ops of
//! `Autodiff<Flex, C>`: the forward pass on the `nn` kernels, and a backward pass that runs
//! on them too, each gradient in its operand's dtype.

use burn::backend::Autodiff;
use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::nn::LayerNormStats;
use burn_tensor::DType;
use burn_tensor::ops::{FloatTensor, FloatTensorOps};

use super::super::super::{LayerNormArgs, Routed};
use super::super::nn as flex_nn;
use super::node::{Grads, record};
use super::register::unary;

type Tensor<C> = FloatTensor<Autodiff<Flex, C>>;

#[derive(Debug)]
struct Softmax;

impl Backward<Flex, 1> for Softmax {
    /// The CPU's instruction set, the output, whether it is a log-softmax, the input's
    /// dtype.
    type State = (Isa, FlexTensor, bool, DType);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("softmax (backward)", None);
        let (isa, y, log, dtype) = &ops.state;
        unary(*isa, &ops, grads, |grad| {
            flex_nn::softmax_backward(*isa, y, &grad, *log, *dtype)
        });
    }
}

/// Softmax (`log`: log-softmax) over the last dimension, in f32; `x` back when the kernels
/// do not take it.
pub(crate) fn softmax<C: CheckpointStrategy>(
    isa: Isa,
    x: Tensor<C>,
    log: bool,
) -> Routed<Tensor<C>, Tensor<C>> {
    if !flex_nn::takes_rows(&x.primitive) {
        return Routed::Declined(x);
    }
    Routed::Ran(
        match Softmax
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let y = flex_nn::softmax(isa, &x.primitive, log);
                prep.finish((isa, y.clone(), log, x.primitive.dtype()), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(flex_nn::softmax(isa, &x.primitive, log)),
        },
    )
}

/// What a layer norm's backward pass needs.
#[derive(Clone, Debug)]
struct LayerNormState {
    isa: Isa,
    x: FlexTensor,
    gamma: FlexTensor,
    stats: LayerNormStats,
    /// x, gamma, beta.
    dtypes: [DType; 3],
}

impl Grads for LayerNormState {
    const NAME: &'static str = "layer_norm (backward)";

    fn isa(&self) -> Isa {
        self.isa
    }

    fn grads(&self, grad: &FlexTensor, _: [bool; 3]) -> [Option<FlexTensor>; 3] {
        let (x, gamma) = (&self.x, &self.gamma);
        flex_nn::layer_norm_backward(self.isa, x, grad, gamma, &self.stats, self.dtypes).map(Some)
    }
}

/// Layer norm over the last dimension, in f32; the operands back when the kernels do not
/// take them.
pub(crate) fn layer_norm<C: CheckpointStrategy>(
    isa: Isa,
    args: LayerNormArgs<Autodiff<Flex, C>>,
) -> Routed<Tensor<C>, LayerNormArgs<Autodiff<Flex, C>>> {
    let (x, gamma, beta, epsilon) = &args;
    let beta_primitive = beta.as_ref().map(|b| &b.primitive);
    if !flex_nn::takes_layer_norm(&x.primitive, &gamma.primitive, beta_primitive) {
        return Routed::Declined(args);
    }
    // The forward pass makes the statistics the state keeps.
    let (y, stats) = flex_nn::layer_norm(
        isa,
        &x.primitive,
        &gamma.primitive,
        beta_primitive,
        *epsilon,
    );
    let state = || LayerNormState {
        isa,
        x: x.primitive.clone(),
        gamma: gamma.primitive.clone(),
        stats,
        dtypes: [
            x.primitive.dtype(),
            gamma.primitive.dtype(),
            beta.as_ref().map_or(DType::F32, |b| b.primitive.dtype()),
        ],
    };
    Routed::Ran(record::<C, _>((x, gamma, beta.as_ref()), state, || y))
}

#[derive(Debug)]
struct Gelu;

impl Backward<Flex, 1> for Gelu {
    /// The CPU's instruction set, the input.
    type State = (Isa, FlexTensor);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("gelu (backward)", None);
        let (isa, x) = &ops.state;
        unary(*isa, &ops, grads, |grad| {
            flex_nn::gelu_backward(*isa, x, &grad)
        });
    }
}

/// GELU in `x`'s dtype; `x` back when the kernels do not take it.
pub(crate) fn gelu<C: CheckpointStrategy>(isa: Isa, x: Tensor<C>) -> Routed<Tensor<C>, Tensor<C>> {
    if !flex_nn::takes(&x.primitive) {
        return Routed::Declined(x);
    }
    Routed::Ran(
        match Gelu
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let y = flex_nn::gelu(isa, &x.primitive);
                prep.finish((isa, x.primitive), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(flex_nn::gelu(isa, &x.primitive)),
        },
    )
}

#[derive(Debug)]
struct Relu;

impl Backward<Flex, 1> for Relu {
    /// The CPU's instruction set, the output.
    type State = (Isa, FlexTensor);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("relu (backward)", None);
        let (isa, y) = &ops.state;
        unary(*isa, &ops, grads, |grad| {
            let dtype = grad.dtype();
            flex_nn::relu_backward(*isa, y, &grad, dtype)
        });
    }
}

/// ReLU in `x`'s dtype; `x` back when the kernels do not take it.
pub(crate) fn relu<C: CheckpointStrategy>(isa: Isa, x: Tensor<C>) -> Routed<Tensor<C>, Tensor<C>> {
    if !flex_nn::takes(&x.primitive) {
        return Routed::Declined(x);
    }
    Routed::Ran(
        match Relu
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let y = flex_nn::relu(isa, &x.primitive);
                prep.finish((isa, y.clone()), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(flex_nn::relu(isa, &x.primitive)),
        },
    )
}

#[derive(Debug)]
struct MaskFill;

impl Backward<Flex, 1> for MaskFill {
    /// The CPU's instruction set, the mask.
    type State = (Isa, FlexTensor);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("mask_fill (backward)", None);
        let (isa, mask) = &ops.state;
        unary(*isa, &ops, grads, |g| {
            if flex_nn::takes_mask(&g, mask) {
                flex_nn::mask_fill(&g, mask, 0.0)
            } else {
                <Flex as FloatTensorOps<Flex>>::float_mask_fill(g, mask.clone(), 0.0.into())
            }
        });
    }
}

/// `x` with `value` where `mask` is set, in `x`'s dtype; both back when the kernel does not
/// take them. The gradient is the output's with zero where the mask is set.
pub(crate) fn mask_fill<C: CheckpointStrategy>(
    isa: Isa,
    x: Tensor<C>,
    mask: FlexTensor,
    value: f64,
) -> Routed<Tensor<C>, (Tensor<C>, FlexTensor)> {
    if !flex_nn::takes_mask(&x.primitive, &mask) {
        return Routed::Declined((x, mask));
    }
    let forward = || flex_nn::mask_fill(&x.primitive, &mask, value);
    Routed::Ran(
        match MaskFill
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((isa, mask.clone()), forward()),
            OpsKind::UnTracked(prep) => prep.finish(forward()),
        },
    )
}
