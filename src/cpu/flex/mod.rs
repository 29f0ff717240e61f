//! The CPU kernel family on Burn's Flex backend: casts and the mixed-precision GEMM of
//! `burn_amp_kernels::cpu` on Flex tensors (`tensor`: views of their buffers), as plain ops
//! (`cast`, `matmul`) and as differentiable ops of `Autodiff<Flex>` (`autodiff`). The
//! decorator reaches them through the table of `crate::cpu`.

mod autodiff;
mod cast;
mod matmul;
mod optim;
#[macro_use]
mod tensor;

use burn::backend::Autodiff;
use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::cast::Format;
use burn_tensor::DType;

use super::{Linear, Routed, RoutedOps};

pub(super) use optim::{adamw, count_nonfinite, unscale};

/// `lhs @ rhs` on plain Flex tensors, or the operands back.
fn matmul(
    lhs: FlexTensor,
    rhs: FlexTensor,
    format: Format,
    out: DType,
) -> Routed<FlexTensor, [FlexTensor; 2]> {
    match matmul::Plan::of(&lhs, &rhs) {
        Some(plan) => Routed::Ran(plan.forward(&lhs, &rhs, format, out)),
        None => Routed::Declined([lhs, rhs]),
    }
}

fn linear(operands: Linear<Flex>, format: Format, out: DType) -> Routed<FlexTensor, Linear<Flex>> {
    let (x, weight, bias) = &operands;
    if !matmul::takes_linear(x, weight, bias.as_ref()) {
        return Routed::Declined(operands);
    }
    Routed::Ran(matmul::linear(x, weight, bias.as_ref(), format, out))
}

/// The routed ops of `Flex`.
pub(super) fn ops() -> RoutedOps<Flex> {
    RoutedOps {
        cast: cast::cast,
        matmul,
        linear,
        unscale: Some(unscale),
        count_nonfinite: Some(count_nonfinite),
    }
}

/// The routed ops of `Autodiff<Flex, C>`.
pub(super) fn autodiff_ops<C: CheckpointStrategy>() -> RoutedOps<Autodiff<Flex, C>> {
    RoutedOps {
        cast: autodiff::cast::<C>,
        matmul: autodiff::matmul::<C>,
        linear: autodiff::linear::<C>,
        unscale: None,
        count_nonfinite: None,
    }
}
