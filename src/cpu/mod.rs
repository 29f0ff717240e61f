//! burn-amp's CPU kernels on Burn's backends, and which backends have them.
//!
//! `flex` is the glue of the CPU kernel family (`burn_amp_kernels::cpu`) to Flex tensors
//! and to `Autodiff<Flex>`. This module states the ops the decorator
//! hands to burn-amp's kernels instead of the inner backend's: the casts of its casting
//! rules; compute-class matmuls, linears and convolutions that read operands of any float
//! dtype and round them while packing; and under a mixed policy the ops around them
//! (softmax, layer norm, GELU, ReLU, arithmetic, `mask_fill`, reshapes of views, dropout
//! masks), each one op with its own backward pass. The ops are plain function pointers ([`RoutedOps`]),
//! which the registry of backend capabilities (`crate::registry`) records for Flex and
//! `Autodiff<Flex>` (both checkpointing strategies); every other backend runs its own ops.
//! The CPU's instruction set ([`Isa`]) is detected once, by the registry, kept in the
//! table, and handed to every op, which passes it down to the kernels.

use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::cast::Format;
use burn_amp_kernels::cpu::nn::BinaryOp;
use burn_amp_kernels::cpu::optim::AdamwStep;
use burn_tensor::backend::Backend;
use burn_tensor::ops::{BoolTensor, FloatTensor};
use burn_tensor::{DType, FloatDType, Shape};

#[cfg(feature = "flex")]
pub(crate) mod flex;

/// The operands of a linear layer: `x`, `weight` (`[in, out]`) and the optional bias.
pub(crate) type Linear<B> = (FloatTensor<B>, FloatTensor<B>, Option<FloatTensor<B>>);

/// What a routed op did: ran, or handed its operands back because the kernels do not take
/// their shapes or dtypes (the caller then runs the backend's op).
pub(crate) enum Routed<T, O> {
    Ran(T),
    Declined(O),
}

/// `lhs @ rhs`, operands rounded to the format, the result in the dtype.
pub(crate) type MatmulFn<B> = fn(
    Isa,
    FloatTensor<B>,
    FloatTensor<B>,
    Format,
    DType,
) -> Routed<FloatTensor<B>, [FloatTensor<B>; 2]>;

/// `x @ weight + bias`, operands rounded to the format, the result in the dtype.
pub(crate) type LinearFn<B> =
    fn(Isa, Linear<B>, Format, DType) -> Routed<FloatTensor<B>, Linear<B>>;

/// The operands of a layer norm: `x`, `gamma`, the optional `beta`, epsilon.
pub(crate) type LayerNormArgs<B> = (FloatTensor<B>, FloatTensor<B>, Option<FloatTensor<B>>, f64);

/// A convolution's geometry as a 2-d one (a 1-d convolution has height 1): stride,
/// padding, dilation, groups, and for a transposed convolution its output padding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConvGeometry {
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
    /// `Some(padding_out)`: a transposed convolution (weight `[in, out, kernel..]`), the
    /// input gradient of the convolution with this geometry.
    pub transposed: Option<[usize; 2]>,
}

impl From<burn_tensor::ops::ConvOptions<2>> for ConvGeometry {
    fn from(o: burn_tensor::ops::ConvOptions<2>) -> Self {
        Self {
            stride: o.stride,
            padding: o.padding,
            dilation: o.dilation,
            groups: o.groups,
            transposed: None,
        }
    }
}

impl From<burn_tensor::ops::ConvOptions<1>> for ConvGeometry {
    fn from(o: burn_tensor::ops::ConvOptions<1>) -> Self {
        Self {
            stride: [1, o.stride[0]],
            padding: [0, o.padding[0]],
            dilation: [1, o.dilation[0]],
            groups: o.groups,
            transposed: None,
        }
    }
}

impl From<burn_tensor::ops::ConvTransposeOptions<2>> for ConvGeometry {
    fn from(o: burn_tensor::ops::ConvTransposeOptions<2>) -> Self {
        Self {
            stride: o.stride,
            padding: o.padding,
            dilation: o.dilation,
            groups: o.groups,
            transposed: Some(o.padding_out),
        }
    }
}

impl From<burn_tensor::ops::ConvTransposeOptions<1>> for ConvGeometry {
    fn from(o: burn_tensor::ops::ConvTransposeOptions<1>) -> Self {
        Self {
            stride: [1, o.stride[0]],
            padding: [0, o.padding[0]],
            dilation: [1, o.dilation[0]],
            groups: o.groups,
            transposed: Some([0, o.padding_out[0]]),
        }
    }
}

/// The operands of a convolution: `x`, `weight`, the optional bias, the geometry.
pub(crate) type ConvArgs<B> = (
    FloatTensor<B>,
    FloatTensor<B>,
    Option<FloatTensor<B>>,
    ConvGeometry,
);

/// What a routed op gives: its output, or its operands `O` back.
pub(crate) type Tried<B, O> = Routed<FloatTensor<B>, O>;

/// An op on one tensor, or the tensor back.
pub(crate) type UnaryFn<B> = fn(Isa, FloatTensor<B>) -> Tried<B, FloatTensor<B>>;

/// A convolution, operands rounded to the format, in the dtype.
pub(crate) type ConvFn<B> = fn(Isa, ConvArgs<B>, Format, DType) -> Tried<B, ConvArgs<B>>;

/// A 2-d max pooling's window: kernel, stride, padding, dilation, and whether the output
/// size rounds up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MaxPool2dArgs {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub ceil_mode: bool,
}

/// A 2-d max pooling, in the input's dtype; the input back when the kernel does not take it.
pub(crate) type MaxPoolFn<B> = fn(Isa, FloatTensor<B>, MaxPool2dArgs) -> Tried<B, FloatTensor<B>>;

/// Softmax (`true`: log-softmax).
pub(crate) type SoftmaxFn<B> = fn(Isa, FloatTensor<B>, bool) -> Tried<B, FloatTensor<B>>;

/// Layer norm.
pub(crate) type LayerNormFn<B> = fn(Isa, LayerNormArgs<B>) -> Tried<B, LayerNormArgs<B>>;

/// `lhs op rhs`.
pub(crate) type BinaryFn<B> =
    fn(Isa, BinaryOp, FloatTensor<B>, FloatTensor<B>) -> Tried<B, [FloatTensor<B>; 2]>;

/// An adaptive average pooling of `x` to an output size.
pub(crate) type AvgPoolFn<B> = fn(Isa, FloatTensor<B>, [usize; 2]) -> Tried<B, FloatTensor<B>>;

/// The mean of `x` over a dimension.
pub(crate) type MeanDimFn<B> = fn(Isa, FloatTensor<B>, usize) -> Tried<B, FloatTensor<B>>;

/// `x op s`.
pub(crate) type ScalarFn<B> = fn(Isa, BinaryOp, FloatTensor<B>, f32) -> Tried<B, FloatTensor<B>>;

/// `tensor` with `value` where `mask` is set, or both back.
pub(crate) type MaskFillFn<B> =
    fn(Isa, FloatTensor<B>, BoolTensor<B>, f64) -> Tried<B, (FloatTensor<B>, BoolTensor<B>)>;

/// A parameter's AdamW state: its moments and its step count (a one-value f32 tensor, so
/// that a step skipped on the device does not count).
pub(crate) struct AdamwState<T> {
    pub m: T,
    pub v: T,
    pub time: T,
}

/// One fused AdamW step: `(isa, (param, grad, state), scalars, found)`, where `found` (a
/// one-value tensor) holds the step's count of non-finite gradient values under a loss
/// scale: above zero, the step is skipped and everything handed back unchanged. Declined
/// (operands back) when the kernel does not take the dtypes. `isa`: the CPU's instruction
/// set, for a kernel that runs on the host.
pub(crate) type AdamwFn<B> =
    fn(Isa, AdamwIn<B>, &AdamwStep, Option<&FloatTensor<B>>) -> AdamwRouted<B>;

/// What an AdamW step did: ran (the parameter and its state), or handed its operands back.
pub(crate) type AdamwRouted<B> = Routed<AdamwOut<B>, AdamwIn<B>>;

/// What an AdamW step gives back: the parameter and its state.
pub(crate) type AdamwOut<B> = (FloatTensor<B>, AdamwState<FloatTensor<B>>);

/// What a declined AdamW step hands back: the parameter, the gradient and the state.
pub(crate) type AdamwIn<B> = (FloatTensor<B>, FloatTensor<B>, AdamwState<FloatTensor<B>>);

/// The loss scaler's unscale of one gradient, in place where it can be: `grad / scale`,
/// `scale` a one-value tensor. Declined when the kernel does not take the dtypes.
pub(crate) type UnscaleFn<B> =
    fn(Isa, FloatTensor<B>, &FloatTensor<B>) -> Routed<FloatTensor<B>, FloatTensor<B>>;

/// The loss scaler's finite check of one gradient, one read-only pass: its count of inf
/// and NaN values as a one-value f32 tensor; `None` when the kernel does not take the
/// dtype.
pub(crate) type CountFn<B> = fn(Isa, &FloatTensor<B>) -> Option<FloatTensor<B>>;

/// The routed ops of one backend type.
pub(crate) struct RoutedOps<B: Backend> {
    /// The CPU's instruction set, detected once by the registry; every op below takes it.
    pub isa: Isa,
    /// `tensor` in `dtype` (differentiable where `B` is).
    pub cast: fn(Isa, FloatTensor<B>, FloatDType) -> FloatTensor<B>,
    pub matmul: MatmulFn<B>,
    pub linear: LinearFn<B>,
    /// A 1-d or 2-d convolution, plain or transposed (one group), operands rounded to the
    /// format, the result in the dtype.
    pub conv: ConvFn<B>,
    /// A 2-d max pooling (its input's dtype; no indices: the autodiff op keeps its own).
    pub max_pool2d: MaxPoolFn<B>,
    /// A 2-d adaptive average pooling where it is a global one (to `[1, 1]`), in its
    /// input's dtype.
    pub adaptive_avg_pool2d: AvgPoolFn<B>,
    /// The loss scaler's unscale and finite check of a gradient (gradients are never
    /// autodiff tensors: `None` for autodiff backends).
    pub unscale: Option<UnscaleFn<B>>,
    pub count_nonfinite: Option<CountFn<B>>,
    /// Softmax (`true`: log-softmax) over the last dimension, read in any float dtype,
    /// summed and written in f32.
    pub softmax: SoftmaxFn<B>,
    /// Layer norm over the last dimension, statistics and output in f32.
    pub layer_norm: LayerNormFn<B>,
    /// GELU, in the input's dtype.
    pub gelu: UnaryFn<B>,
    /// ReLU, in the input's dtype (NaN stays NaN).
    pub relu: UnaryFn<B>,
    /// `lhs op rhs` for operands of one shape and dtype, in that dtype.
    pub binary: BinaryFn<B>,
    /// `x op s`, in `x`'s dtype.
    pub scalar: ScalarFn<B>,
    /// `x * x` of an f32 tensor (`powi` of 2), its gradient `(g * x) * 2` in one pass.
    pub square: UnaryFn<B>,
    /// The mean over a dimension of an f32 tensor, its gradient written once.
    pub mean_dim: MeanDimFn<B>,
    /// `mask_fill`, in the tensor's dtype, the mask read through its broadcast strides.
    pub mask_fill: MaskFillFn<B>,
    /// A tensor of Bernoulli(`p`) draws, `p` in `[0, 1]`, in the dtype: dropout's mask.
    pub bernoulli: fn(Isa, Shape, f64, DType) -> FloatTensor<B>,
    /// The tensor in row-major order (itself when it is): before a reshape that would
    /// otherwise copy value by value.
    pub contiguous: fn(Isa, FloatTensor<B>) -> FloatTensor<B>,
    /// Two dimensions swapped, as a view whose gradient comes back contiguous.
    pub swap_dims: fn(Isa, FloatTensor<B>, usize, usize) -> FloatTensor<B>,
}

impl<B: Backend> Clone for RoutedOps<B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for RoutedOps<B> {}
