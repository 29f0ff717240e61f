//! Which of burn-amp's CPU kernels takes a convolution: the GEMM's (`conv`: one group,
//! plain or transposed) or the direct depthwise one (`depthwise`: a group a channel).

use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::gemm::Kernel;
use burn_tensor::DType;

use super::super::ConvGeometry;
use super::conv::ConvPlan;
use super::depthwise::DepthwisePlan;

/// A convolution the kernels take.
#[derive(Clone, Debug)]
pub(crate) enum Convolution {
    Gemm(ConvPlan),
    Depthwise(DepthwisePlan),
}

impl Convolution {
    /// The plan of the convolution, or `None` for what neither kernel takes.
    pub(crate) fn of(
        x: &FlexTensor,
        weight: &FlexTensor,
        bias: Option<&FlexTensor>,
        g: &ConvGeometry,
    ) -> Option<Convolution> {
        ConvPlan::of(x, weight, bias, g)
            .map(Convolution::Gemm)
            .or_else(|| DepthwisePlan::of(x, weight, bias, g).map(Convolution::Depthwise))
    }

    /// The convolution of `x` by `weight` plus `bias`, operands rounded to `kernel`'s
    /// format, in `out`.
    pub(crate) fn forward(
        &self,
        kernel: Kernel,
        x: &FlexTensor,
        weight: &FlexTensor,
        bias: Option<&FlexTensor>,
        out: DType,
    ) -> FlexTensor {
        match self {
            Convolution::Gemm(plan) => plan.forward(kernel, x, weight, bias, out),
            Convolution::Depthwise(plan) => plan.forward(kernel, x, weight, bias, out),
        }
    }

    /// The gradients of `x`, `weight` and the bias (those `wants` asks for) from the
    /// output's gradient `dy`, each in its dtype of `dtypes`.
    pub(crate) fn backward(
        &self,
        kernel: Kernel,
        x: &FlexTensor,
        weight: &FlexTensor,
        dy: &FlexTensor,
        wants: [bool; 3],
        dtypes: [DType; 3],
    ) -> [Option<FlexTensor>; 3] {
        match self {
            Convolution::Gemm(plan) => plan.backward(kernel, x, weight, dy, wants, dtypes),
            Convolution::Depthwise(plan) => plan.backward(kernel, x, weight, dy, wants, dtypes),
        }
    }
}
