//! The casting rules, in one place. Every intercepted op of
//! [`MixedPrecision`](crate::MixedPrecision) asks `crate::context` once for what it runs
//! under (an `OpContext`: its policy, FP8 site and the backend's kernels) and hands that
//! value to one of these rules on its float inputs, then calls the inner backend: no rule
//! or cast looks the policy up again.
//!
//! - [`to_compute`]: matmul, linear, convolutions, attention — inputs go to the policy's
//!   compute dtype.
//! - [`to_f32`]: softmax, exp/log, pow, reductions, layer norm, losses — f16 and bf16 inputs
//!   go to f32, and the result stays f32.
//! - [`to_widest`]: every other op with several float inputs — they meet in the widest
//!   dtype among them (f64 > f32 > f16, bf16; f16 with bf16 meet in f32), as PyTorch's type
//!   promotion does.
//! - [`to_dtype_of_first`]: writes into an existing tensor (slice assign, scatter) keep that
//!   tensor's dtype.
//!
//! f64 tensors are never narrowed, as in PyTorch's autocast. A tensor already in the target
//! dtype is not cast, so under `float32` f32 tensors run exactly as on the bare backend.
//!
//! Where the inner backend has burn-amp kernels ([`crate::cpu`]: Flex) and the policy's
//! kernels are `auto`, casts run on them, and `OpContext::routed` hands compute-class
//! matmuls, linears and convolutions their operands uncast: the kernels round them while
//! packing. Under a 16-bit compute dtype the same kernels take the ops around the products
//! (`OpContext::routed_ops`): softmax and layer norm read their input in its dtype and
//! write f32 as their rule says, activations and the arithmetic of 16-bit tensors keep their
//! dtype.

use burn_amp_kernels::cpu::cast::Format;
use burn_amp_kernels::cpu::nn::BinaryOp;
use burn_tensor::backend::Backend;
use burn_tensor::ops::{BoolTensor, FloatTensor};
use burn_tensor::{DType, FloatDType, Scalar, TensorMetadata};

use crate::context::{self, OpContext};
use crate::cost::{self, OpRow};
use crate::cpu::{ConvArgs, Routed, RoutedOps};

/// The float dtype of a tensor primitive.
pub(crate) fn dtype<B: Backend>(tensor: &FloatTensor<B>) -> FloatDType {
    tensor.dtype().into()
}

/// The class each casting rule puts its op in (for the cost report), by the rule's name:
/// the op tables name a rule, and a rule without a class here does not compile.
#[allow(non_upper_case_globals)]
pub(crate) mod class {
    use crate::cost::OpClass;

    pub(crate) const to_compute: OpClass = OpClass::Compute;
    pub(crate) const to_f32: OpClass = OpClass::Float32;
    pub(crate) const to_widest: OpClass = OpClass::Promote;
    pub(crate) const to_dtype_of_first: OpClass = OpClass::Assign;
}

/// Casts `tensor` to `dtype`, or hands it back untouched when it is already there: a cast
/// the decorator inserts (counted as one in the cost report), on the op's kernels.
pub(crate) fn cast<B: Backend>(
    tensor: FloatTensor<B>,
    dtype: FloatDType,
    op: &OpContext<B>,
) -> FloatTensor<B> {
    let from = tensor.dtype();
    if FloatDType::from(from) == dtype {
        return tensor;
    }
    cost::cast(from, DType::from(dtype), tensor.shape().num_elements());
    convert::<B>(tensor, dtype, op.kernels())
}

/// Casts `tensor` to `dtype` (a cast anyone asks for), on burn-amp's `kernels` where the
/// op's context has them.
pub(crate) fn convert<B: Backend>(
    tensor: FloatTensor<B>,
    dtype: FloatDType,
    kernels: Option<RoutedOps<B>>,
) -> FloatTensor<B> {
    if self::dtype::<B>(&tensor) == dtype {
        return tensor;
    }
    match kernels {
        Some(ops) => (ops.cast)(ops.isa, tensor, dtype),
        None => B::float_cast(tensor, dtype),
    }
}

/// A promote-class arithmetic op (`float_add`, ...): the operands meet in the widest dtype;
/// 16-bit operands, and f32 operands of two shapes that broadcast, then run on burn-amp's
/// elementwise kernels where the policy routes (one pass, where Flex converts or indexes
/// value by value), anything else on `inner` (the backend's op). There an `add` or `sub`
/// of a 16-bit and an f32 operand reads the 16-bit one widened, without casting it first.
pub(crate) fn arithmetic<B: Backend>(
    op: BinaryOp,
    row: OpRow,
    lhs: FloatTensor<B>,
    rhs: FloatTensor<B>,
    inner: fn(FloatTensor<B>, FloatTensor<B>) -> FloatTensor<B>,
) -> FloatTensor<B> {
    let context = context::of::<B>(&lhs);
    let routed = context.routed_ops();
    // A 16-bit operand added to or subtracted from an f32 one (a batch norm's `x - mean`):
    // the routed op reads it widened where it lies, its gradient going back through a
    // cast's node, in place of an f32 copy (counted as the cast it stands for).
    let narrow = widened_operand(op, [dtype::<B>(&lhs), dtype::<B>(&rhs)]);
    let (lhs, rhs, timed) = match (narrow, routed) {
        (Some(narrow), Some(ops)) => {
            let timed = row.record(Some(DType::F32));
            let from = [&lhs, &rhs][narrow];
            let (from, n) = (from.dtype(), from.shape().num_elements());
            match (ops.binary)(ops.isa, op, lhs, rhs) {
                Routed::Ran(out) => {
                    cost::cast(from, DType::F32, n);
                    return out;
                }
                Routed::Declined([lhs, rhs]) => (lhs, rhs, Some(timed)),
            }
        }
        _ => (lhs, rhs, None),
    };
    let [lhs, rhs] = to_widest::<B, 2>([lhs, rhs], &context);
    let runs_in = lhs.dtype();
    let _op = timed.unwrap_or_else(|| row.record(Some(runs_in)));
    // f32 operands of two shapes too (a batch norm's `x - mean`): the backend's broadcast
    // path runs value by value. The IEEE operation gives the same bits either way.
    let broadcast = lhs.shape() != rhs.shape();
    if (is_reduced(runs_in.into()) || (broadcast && runs_in == DType::F32))
        && let Some(ops) = routed
    {
        return match (ops.binary)(ops.isa, op, lhs, rhs) {
            Routed::Ran(out) => out,
            Routed::Declined([lhs, rhs]) => inner(lhs, rhs),
        };
    }
    inner(lhs, rhs)
}

/// Which operand of an `add` or `sub` of a 16-bit and an f32 tensor is the 16-bit one
/// (0 or 1); `None` for other ops and dtypes.
fn widened_operand(op: BinaryOp, [lhs, rhs]: [FloatDType; 2]) -> Option<usize> {
    if !matches!(op, BinaryOp::Add | BinaryOp::Sub) {
        return None;
    }
    match (is_reduced(lhs), is_reduced(rhs)) {
        (true, false) if rhs == FloatDType::F32 => Some(0),
        (false, true) if lhs == FloatDType::F32 => Some(1),
        _ => None,
    }
}

/// An arithmetic op with a scalar (`float_mul_scalar`, ...): forwarded, except that a 16-bit
/// tensor runs on burn-amp's elementwise kernels where the policy routes (the scalar kept in
/// f32; Flex rounds it to the tensor's dtype first).
pub(crate) fn arithmetic_scalar<B: Backend>(
    op: BinaryOp,
    row: OpRow,
    x: FloatTensor<B>,
    s: Scalar,
    inner: fn(FloatTensor<B>, Scalar) -> FloatTensor<B>,
) -> FloatTensor<B> {
    let _op = row.record(None);
    if is_reduced(dtype::<B>(&x))
        && let Some(ops) = context::of::<B>(&x).routed_ops()
    {
        return match (ops.scalar)(ops.isa, op, x, s.elem::<f32>()) {
            Routed::Ran(out) => out,
            Routed::Declined(x) => inner(x, s),
        };
    }
    inner(x, s)
}

/// `mask_fill`: forwarded, except that a 16-bit tensor runs on burn-amp's select kernel
/// where the policy routes (the mask read through its broadcast strides rather than
/// expanded, with the op's own backward pass).
pub(crate) fn mask_fill<B: Backend>(
    row: OpRow,
    x: FloatTensor<B>,
    mask: BoolTensor<B>,
    value: Scalar,
    inner: fn(FloatTensor<B>, BoolTensor<B>, Scalar) -> FloatTensor<B>,
) -> FloatTensor<B> {
    let _op = row.record(Some(x.dtype()));
    if is_reduced(dtype::<B>(&x))
        && let Some(ops) = context::of::<B>(&x).routed_ops()
    {
        return match (ops.mask_fill)(ops.isa, x, mask, value.elem::<f64>()) {
            Routed::Ran(out) => out,
            Routed::Declined((x, mask)) => inner(x, mask, value),
        };
    }
    inner(x, mask, value)
}

/// Whether any of the tensors is f64 (never narrowed: the op goes to the backend as is).
pub(crate) fn any_f64<B: Backend>(tensors: &[Option<&FloatTensor<B>>]) -> bool {
    tensors
        .iter()
        .flatten()
        .any(|t| dtype::<B>(t) == FloatDType::F64)
}

/// `lhs @ rhs` in `target` (the compute dtype): on the routed kernels, which round the
/// operands while packing, or cast and on `B`.
pub(crate) fn matmul<B: Backend>(
    routed: Option<(RoutedOps<B>, Format)>,
    lhs: FloatTensor<B>,
    rhs: FloatTensor<B>,
    op: &OpContext<B>,
) -> FloatTensor<B> {
    let target = op.policy.compute_dtype();
    let [lhs, rhs] = match routed {
        Some((ops, format)) => {
            let shapes = [&lhs, &rhs].map(|t| (t.dtype(), t.shape().num_elements()));
            match (ops.matmul)(ops.isa, lhs, rhs, format, DType::from(target)) {
                Routed::Ran(out) => {
                    for (d, n) in shapes {
                        cost::rounded(d, DType::from(target), n);
                    }
                    return out;
                }
                Routed::Declined(operands) => operands,
            }
        }
        None => [lhs, rhs],
    };
    let [lhs, rhs] = [lhs, rhs].map(|t| to_target::<B>(t, target, op));
    B::float_matmul(lhs, rhs)
}

/// `x @ weight + bias` in `target`: on the routed kernels, or cast and on `B`.
pub(crate) fn linear<B: Backend>(
    routed: Option<(RoutedOps<B>, Format)>,
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: Option<FloatTensor<B>>,
    op: &OpContext<B>,
) -> FloatTensor<B> {
    let target = op.policy.compute_dtype();
    let (x, weight, bias) = match routed {
        Some((ops, format)) => {
            let shapes: Vec<_> = [Some(&x), Some(&weight), bias.as_ref()]
                .into_iter()
                .flatten()
                .map(|t| (t.dtype(), t.shape().num_elements()))
                .collect();
            match (ops.linear)(ops.isa, (x, weight, bias), format, DType::from(target)) {
                Routed::Ran(out) => {
                    for (d, n) in shapes {
                        cost::rounded(d, DType::from(target), n);
                    }
                    return out;
                }
                Routed::Declined(operands) => operands,
            }
        }
        None => (x, weight, bias),
    };
    let [x, weight] = [x, weight].map(|t| to_target::<B>(t, target, op));
    let bias = bias.map(|b| to_target::<B>(b, target, op));
    B::linear(x, weight, bias)
}

/// A convolution on the routed kernels, which round the operands as they lay them out or
/// pack them; the operands back when the kernels decline it.
pub(crate) fn conv<B: Backend>(
    ops: RoutedOps<B>,
    format: Format,
    args: ConvArgs<B>,
    op: &OpContext<B>,
) -> Result<FloatTensor<B>, ConvArgs<B>> {
    let target = DType::from(op.policy.compute_dtype());
    let shapes: Vec<_> = [Some(&args.0), Some(&args.1), args.2.as_ref()]
        .into_iter()
        .flatten()
        .map(|t| (t.dtype(), t.shape().num_elements()))
        .collect();
    match (ops.conv)(ops.isa, args, format, target) {
        Routed::Ran(out) => {
            for (d, n) in shapes {
                cost::rounded(d, target, n);
            }
            Ok(out)
        }
        Routed::Declined(args) => Err(args),
    }
}

pub(crate) fn is_reduced(dtype: FloatDType) -> bool {
    matches!(dtype, FloatDType::F16 | FloatDType::BF16)
}

/// Casts an input of a compute-class op to `target`; f64 is left alone.
pub(crate) fn to_target<B: Backend>(
    tensor: FloatTensor<B>,
    target: FloatDType,
    op: &OpContext<B>,
) -> FloatTensor<B> {
    if dtype::<B>(&tensor) == FloatDType::F64 {
        tensor
    } else {
        cast::<B>(tensor, target, op)
    }
}

/// An operand of an FP8 site whose product runs on burn-amp's kernels: f32 stays f32 (the
/// site rounds it to FP8 through the compute dtype, and the product reads it in that dtype,
/// so its gradient comes back in f32 without a cast); any other dtype goes to the compute
/// dtype, as for any compute-class op.
pub(crate) fn to_fp8_operand<B: Backend>(
    tensor: FloatTensor<B>,
    op: &OpContext<B>,
) -> FloatTensor<B> {
    if dtype::<B>(&tensor) == FloatDType::F32 {
        tensor
    } else {
        to_target::<B>(tensor, op.policy.compute_dtype(), op)
    }
}

/// Compute class: all inputs to the policy's compute dtype.
pub(crate) fn to_compute<B: Backend, const N: usize>(
    tensors: [FloatTensor<B>; N],
    op: &OpContext<B>,
) -> [FloatTensor<B>; N] {
    let target = op.policy.compute_dtype();
    tensors.map(|t| to_target::<B>(t, target, op))
}

/// Float32 class: f16 and bf16 inputs to f32.
pub(crate) fn to_f32<B: Backend, const N: usize>(
    tensors: [FloatTensor<B>; N],
    op: &OpContext<B>,
) -> [FloatTensor<B>; N] {
    tensors.map(|t| {
        if is_reduced(dtype::<B>(&t)) {
            cast::<B>(t, FloatDType::F32, op)
        } else {
            t
        }
    })
}

/// The dtype several float inputs meet in.
pub(crate) fn widest(dtypes: impl IntoIterator<Item = FloatDType>) -> Option<FloatDType> {
    let rank = |d: FloatDType| match d {
        FloatDType::F64 => 3,
        FloatDType::F32 | FloatDType::Flex32 => 2,
        FloatDType::F16 | FloatDType::BF16 => 1,
    };
    dtypes.into_iter().reduce(|a, b| {
        if a == b {
            a
        } else if rank(a) != rank(b) {
            if rank(a) > rank(b) { a } else { b }
        } else if rank(a) == 3 {
            a
        } else {
            // f16 with bf16, or f32 with flex32.
            FloatDType::F32
        }
    })
}

/// Promote class: inputs of different dtypes meet in the widest one.
pub(crate) fn to_widest<B: Backend, const N: usize>(
    tensors: [FloatTensor<B>; N],
    op: &OpContext<B>,
) -> [FloatTensor<B>; N] {
    match widest(tensors.iter().map(dtype::<B>)) {
        Some(target) => tensors.map(|t| cast::<B>(t, target, op)),
        None => tensors,
    }
}

/// Several inputs of a list (concatenation) meet in the widest dtype.
pub(crate) fn vec_to_widest<B: Backend>(
    tensors: Vec<FloatTensor<B>>,
    op: &OpContext<B>,
) -> Vec<FloatTensor<B>> {
    match widest(tensors.iter().map(dtype::<B>)) {
        Some(target) => tensors
            .into_iter()
            .map(|t| cast::<B>(t, target, op))
            .collect(),
        None => tensors,
    }
}

/// Assignment class: the written value takes the dtype of the tensor written into.
pub(crate) fn to_dtype_of_first<B: Backend, const N: usize>(
    tensors: [FloatTensor<B>; N],
    op: &OpContext<B>,
) -> [FloatTensor<B>; N] {
    let target = dtype::<B>(&tensors[0]);
    tensors.map(|t| cast::<B>(t, target, op))
}

#[cfg(test)]
mod tests {
    use super::*;
    use FloatDType::*;

    #[test]
    fn widest_follows_type_promotion() {
        assert_eq!(widest([F16, F16]), Some(F16));
        assert_eq!(widest([F16, F32]), Some(F32));
        assert_eq!(widest([BF16, F32, F16]), Some(F32));
        assert_eq!(widest([F16, BF16]), Some(F32));
        assert_eq!(widest([F32, F64, F16]), Some(F64));
        assert_eq!(widest([BF16]), Some(BF16));
        assert_eq!(widest([]), None);
    }
}
