//! 1-d and 2-d convolutions (plain, transposed or depthwise) as ops of `Autodiff<Flex, C>`,
//! on burn-amp's kernels both ways: the operands kept for the backward pass are the inputs
//! themselves (an f32 weight that lives anyway), not columns or rounded copies; the
//! columns are made again for the weight's gradient.

use burn::backend::Autodiff;
use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::cast::Format;
use burn_amp_kernels::cpu::gemm::Kernel;
use burn_tensor::DType;
use burn_tensor::ops::FloatTensor;

use super::super::super::{ConvArgs, Routed};
use super::super::convolution::Convolution;
use super::node::{Grads, record};

type Tensor<C> = FloatTensor<Autodiff<Flex, C>>;

/// What a convolution's backward pass needs.
#[derive(Clone, Debug)]
struct ConvState {
    x: FlexTensor,
    weight: FlexTensor,
    plan: Convolution,
    kernel: Kernel,
    /// x, weight, bias.
    dtypes: [DType; 3],
}

impl Grads for ConvState {
    const NAME: &'static str = "conv (backward)";

    fn isa(&self) -> Isa {
        self.kernel.isa()
    }

    fn grads(&self, grad: &FlexTensor, wants: [bool; 3]) -> [Option<FlexTensor>; 3] {
        self.plan
            .backward(self.kernel, &self.x, &self.weight, grad, wants, self.dtypes)
    }
}

/// The convolution of `x` by `weight` plus the bias, operands rounded to `format`, in
/// `out`; the operands back when the kernels do not take them.
pub(crate) fn conv<C: CheckpointStrategy>(
    isa: Isa,
    args: ConvArgs<Autodiff<Flex, C>>,
    format: Format,
    out: DType,
) -> Routed<Tensor<C>, ConvArgs<Autodiff<Flex, C>>> {
    let (x, weight, bias, geometry) = &args;
    let bias_primitive = bias.as_ref().map(|b| &b.primitive);
    let Some(plan) = Convolution::of(&x.primitive, &weight.primitive, bias_primitive, geometry)
    else {
        return Routed::Declined(args);
    };
    let kernel = Kernel::select(isa, format);
    let state = || ConvState {
        x: x.primitive.clone(),
        weight: weight.primitive.clone(),
        plan: plan.clone(),
        kernel,
        dtypes: [
            x.primitive.dtype(),
            weight.primitive.dtype(),
            bias.as_ref().map_or(DType::F32, |b| b.primitive.dtype()),
        ],
    };
    let forward = || plan.forward(kernel, &x.primitive, &weight.primitive, bias_primitive, out);
    Routed::Ran(record::<C, _>((x, weight, bias.as_ref()), state, forward))
}
