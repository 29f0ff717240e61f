//! The CPU kernel family on Burn's Flex backend: the kernels of `burn_amp_kernels::cpu` on
//! Flex tensors (`tensor`: views of their buffers): casts, the mixed-precision GEMM for
//! matmuls and linears (`matmul`) and convolutions plain or transposed (`conv`), direct
//! depthwise convolutions (`depthwise`; `convolution` picks the kernel), max pooling
//! (`max_pool`) and global average pooling (`avg_pool`), the ops around them (`nn`,
//! `arithmetic`, `mean`), FP8 fake quantization (`fp8`), copies of views
//! (`layout`), as plain ops of `Flex` and as differentiable ops of `Autodiff<Flex>`
//! (`autodiff`). The decorator reaches them through the table of `crate::cpu`.

#[macro_use]
mod tensor;

mod arithmetic;
mod autodiff;
mod avg_pool;
mod cast;
mod conv;
mod convolution;
mod depthwise;
pub(crate) mod fp8;
mod layout;
mod matmul;
mod max_pool;
mod mean;
mod nn;
mod optim;
mod pool;

pub use pool::empty_cache;

use burn::backend::Autodiff;
use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::cast::Format;
use burn_amp_kernels::cpu::gemm::Kernel;
use burn_amp_kernels::cpu::nn::BinaryOp;
use burn_tensor::{DType, Shape};

use super::{ConvArgs, LayerNormArgs, Linear, MaxPool2dArgs, Routed, RoutedOps};

pub(crate) use optim::adamw;
use optim::{count_nonfinite, unscale};

/// `lhs @ rhs` on plain Flex tensors, or the operands back.
fn matmul(
    isa: Isa,
    lhs: FlexTensor,
    rhs: FlexTensor,
    format: Format,
    out: DType,
) -> Routed<FlexTensor, [FlexTensor; 2]> {
    match matmul::Plan::of(&lhs, &rhs) {
        Some(plan) => Routed::Ran(plan.forward(Kernel::select(isa, format), &lhs, &rhs, out)),
        None => Routed::Declined([lhs, rhs]),
    }
}

fn linear(
    isa: Isa,
    operands: Linear<Flex>,
    format: Format,
    out: DType,
) -> Routed<FlexTensor, Linear<Flex>> {
    let (x, weight, bias) = &operands;
    if !matmul::takes_linear(x, weight, bias.as_ref()) {
        return Routed::Declined(operands);
    }
    let kernel = Kernel::select(isa, format);
    Routed::Ran(matmul::linear(kernel, x, weight, bias.as_ref(), out))
}

fn conv(
    isa: Isa,
    args: ConvArgs<Flex>,
    format: Format,
    out: DType,
) -> Routed<FlexTensor, ConvArgs<Flex>> {
    let (x, weight, bias, geometry) = &args;
    match convolution::Convolution::of(x, weight, bias.as_ref(), geometry) {
        Some(plan) => {
            let kernel = Kernel::select(isa, format);
            Routed::Ran(plan.forward(kernel, x, weight, bias.as_ref(), out))
        }
        None => Routed::Declined(args),
    }
}

fn max_pool2d(isa: Isa, x: FlexTensor, args: MaxPool2dArgs) -> Routed<FlexTensor, FlexTensor> {
    match max_pool::MaxPoolPlan::of(&x, &args) {
        Some(plan) => Routed::Ran(plan.forward(isa, &x, false).0),
        None => Routed::Declined(x),
    }
}

fn softmax(isa: Isa, x: FlexTensor, log: bool) -> Routed<FlexTensor, FlexTensor> {
    if !nn::takes_rows(&x) {
        return Routed::Declined(x);
    }
    Routed::Ran(nn::softmax(isa, &x, log))
}

fn layer_norm(isa: Isa, args: LayerNormArgs<Flex>) -> Routed<FlexTensor, LayerNormArgs<Flex>> {
    let (x, gamma, beta, epsilon) = &args;
    if !nn::takes_layer_norm(x, gamma, beta.as_ref()) {
        return Routed::Declined(args);
    }
    Routed::Ran(nn::layer_norm(isa, x, gamma, beta.as_ref(), *epsilon).0)
}

fn gelu(isa: Isa, x: FlexTensor) -> Routed<FlexTensor, FlexTensor> {
    if !nn::takes(&x) {
        return Routed::Declined(x);
    }
    Routed::Ran(nn::gelu(isa, &x))
}

fn relu(isa: Isa, x: FlexTensor) -> Routed<FlexTensor, FlexTensor> {
    if !nn::takes(&x) {
        return Routed::Declined(x);
    }
    Routed::Ran(nn::relu(isa, &x))
}

fn binary(
    isa: Isa,
    op: BinaryOp,
    lhs: FlexTensor,
    rhs: FlexTensor,
) -> Routed<FlexTensor, [FlexTensor; 2]> {
    if !arithmetic::takes_binary(&lhs, &rhs) || lhs.dtype() != rhs.dtype() {
        return Routed::Declined([lhs, rhs]);
    }
    Routed::Ran(arithmetic::binary(isa, op, &lhs, &rhs, lhs.dtype()))
}

fn scalar(isa: Isa, op: BinaryOp, x: FlexTensor, s: f32) -> Routed<FlexTensor, FlexTensor> {
    if !nn::takes(&x) {
        return Routed::Declined(x);
    }
    Routed::Ran(arithmetic::scalar(isa, op, &x, s, x.dtype()))
}

fn adaptive_avg_pool2d(
    _: Isa,
    x: FlexTensor,
    output_size: [usize; 2],
) -> Routed<FlexTensor, FlexTensor> {
    match avg_pool::takes(&x, output_size) {
        Some(_) => Routed::Ran(avg_pool::forward(&x)),
        None => Routed::Declined(x),
    }
}

fn square(isa: Isa, x: FlexTensor) -> Routed<FlexTensor, FlexTensor> {
    match arithmetic::takes_f32(&x) {
        true => Routed::Ran(arithmetic::square(isa, &x)),
        false => Routed::Declined(x),
    }
}

fn mask_fill(
    _: Isa,
    x: FlexTensor,
    mask: FlexTensor,
    value: f64,
) -> Routed<FlexTensor, (FlexTensor, FlexTensor)> {
    if !nn::takes_mask(&x, &mask) {
        return Routed::Declined((x, mask));
    }
    Routed::Ran(nn::mask_fill(&x, &mask, value))
}

fn autodiff_bernoulli<C: CheckpointStrategy>(
    isa: Isa,
    shape: Shape,
    p: f64,
    dtype: DType,
) -> burn_tensor::ops::FloatTensor<Autodiff<Flex, C>> {
    // A new leaf (not `AutodiffBackend::from_inner`: with Burn's `distributed` feature
    // `Autodiff<Flex>` is no `AutodiffBackend`).
    <burn_tensor::ops::FloatTensor<Autodiff<Flex, C>>>::new(nn::bernoulli(isa, shape, p, dtype))
}

/// The routed ops of `Flex`, on a CPU with `isa`.
pub(crate) fn ops(isa: Isa) -> RoutedOps<Flex> {
    RoutedOps {
        isa,
        cast: cast::cast,
        matmul,
        linear,
        conv,
        max_pool2d,
        adaptive_avg_pool2d,
        unscale: Some(unscale),
        count_nonfinite: Some(count_nonfinite),
        softmax,
        layer_norm,
        gelu,
        relu,
        binary,
        scalar,
        square,
        mean_dim: |_, x, _| Routed::Declined(x),
        mask_fill,
        bernoulli: nn::bernoulli,
        contiguous: |_, x| layout::contiguous(&x),
        swap_dims: |_, x, d1, d2| {
            <Flex as burn_tensor::ops::FloatTensorOps<Flex>>::float_swap_dims(x, d1, d2)
        },
    }
}

/// The routed ops of `Autodiff<Flex, C>`, on a CPU with `isa`.
pub(crate) fn autodiff_ops<C: CheckpointStrategy>(isa: Isa) -> RoutedOps<Autodiff<Flex, C>> {
    RoutedOps {
        isa,
        cast: autodiff::cast::<C>,
        matmul: autodiff::matmul::<C>,
        linear: autodiff::linear::<C>,
        conv: autodiff::conv::<C>,
        max_pool2d: autodiff::max_pool2d::<C>,
        adaptive_avg_pool2d: autodiff::adaptive_avg_pool2d::<C>,
        unscale: None,
        count_nonfinite: None,
        softmax: autodiff::softmax::<C>,
        layer_norm: autodiff::layer_norm::<C>,
        gelu: autodiff::gelu::<C>,
        relu: autodiff::relu::<C>,
        binary: autodiff::binary::<C>,
        scalar: autodiff::scalar::<C>,
        square: autodiff::square::<C>,
        mean_dim: autodiff::mean_dim::<C>,
        mask_fill: autodiff::mask_fill::<C>,
        bernoulli: autodiff_bernoulli::<C>,
        contiguous: autodiff::contiguous::<C>,
        swap_dims: autodiff::swap_dims::<C>,
    }
}
