//! `FloatTensorOps`: creation in the variable dtype, matmul in the compute dtype, the
//! sensitive math in f32, mixed inputs promoted, everything else forwarded.

use burn_tensor::backend::{Backend, ExecutionError};
use burn_tensor::ops::{
    BoolTensor, Device, FloatTensor, FloatTensorOps, GridSampleOptions, IntTensor,
};
use burn_tensor::{
    BoolDType, DType, Distribution, FloatDType, IndexingUpdateOp, IntDType, Scalar, Shape, Slice,
    TensorData, TensorMetadata,
};

use burn_amp_kernels::cpu::nn::BinaryOp;

use super::ComputeOp;
use crate::MixedPrecision;
use crate::backend::autocast;
use crate::context::{self, Fp8Use, OpContext};
use crate::cost::{Counted, OpClass, OpRow};
use crate::cpu::Routed;

/// Under a policy whose variables are not f32 (`float16`, `bfloat16`), a float tensor
/// created in f32 by a creation op (`zeros`, `ones`, `full`, `empty`, `random`: what
/// initializers and dropout masks are made with) is created in the variable dtype instead;
/// explicit other dtypes are kept.
fn creation_dtype<B: Backend>(device: &B::Device, requested: FloatDType) -> FloatDType {
    match requested {
        FloatDType::F32 => context::policy::<B>(device).variable_dtype(),
        other => other,
    }
}

/// The compute-class op of `FloatTensorOps` written out below.
const MATMUL: ComputeOp = ComputeOp::fp8("float_matmul");

// The other ops of `FloatTensorOps` written out below, each with its class.
const CAST: OpRow = OpRow::new("float_cast", OpClass::Forwarded);
const SET_REQUIRE_GRAD: OpRow = OpRow::new("float_set_require_grad", OpClass::Forwarded);
const FROM_DATA: OpRow = OpRow::new("float_from_data", OpClass::Create);
const ADD: OpRow = OpRow::new("float_add", autocast::class::to_widest);
const SUB: OpRow = OpRow::new("float_sub", autocast::class::to_widest);
const MUL: OpRow = OpRow::new("float_mul", autocast::class::to_widest);
const DIV: OpRow = OpRow::new("float_div", autocast::class::to_widest);
const ADD_SCALAR: OpRow = OpRow::new("float_add_scalar", OpClass::Forwarded);
const SUB_SCALAR: OpRow = OpRow::new("float_sub_scalar", OpClass::Forwarded);
const MUL_SCALAR: OpRow = OpRow::new("float_mul_scalar", OpClass::Forwarded);
const DIV_SCALAR: OpRow = OpRow::new("float_div_scalar", OpClass::Forwarded);
const MASK_FILL: OpRow = OpRow::new("float_mask_fill", OpClass::Forwarded);
const RANDOM: OpRow = OpRow::new("float_random", OpClass::Create);
const RESHAPE: OpRow = OpRow::new("float_reshape", OpClass::Forwarded);
const SWAP_DIMS: OpRow = OpRow::new("float_swap_dims", OpClass::Forwarded);
const ZEROS: OpRow = OpRow::new("float_zeros", OpClass::Create);
const ONES: OpRow = OpRow::new("float_ones", OpClass::Create);
const FULL: OpRow = OpRow::new("float_full", OpClass::Create);
const EMPTY: OpRow = OpRow::new("float_empty", OpClass::Create);
const CAT: OpRow = OpRow::new("float_cat", autocast::class::to_widest);
const MASK_WHERE: OpRow = OpRow::new("float_mask_where", autocast::class::to_widest);
const SLICE_ASSIGN: OpRow = OpRow::new("float_slice_assign", autocast::class::to_dtype_of_first);
const SCATTER_ADD: OpRow = OpRow::new("float_scatter_add", autocast::class::to_dtype_of_first);
const SELECT_ADD: OpRow = OpRow::new("float_select_add", autocast::class::to_dtype_of_first);
const POWI_SCALAR: OpRow = OpRow::new("float_powi_scalar", autocast::class::to_f32);
const MEAN_DIM: OpRow = OpRow::new("float_mean_dim", autocast::class::to_f32);
const SCATTER_ND: OpRow = OpRow::new("float_scatter_nd", autocast::class::to_dtype_of_first);

/// Every op of `FloatTensorOps` written out below: the class table's rows for them.
const WRITTEN: [OpRow; 28] = [
    MATMUL.row,
    CAST,
    SET_REQUIRE_GRAD,
    FROM_DATA,
    ADD,
    SUB,
    MUL,
    DIV,
    ADD_SCALAR,
    SUB_SCALAR,
    MUL_SCALAR,
    DIV_SCALAR,
    MASK_FILL,
    RANDOM,
    RESHAPE,
    SWAP_DIMS,
    ZEROS,
    ONES,
    FULL,
    EMPTY,
    CAT,
    MASK_WHERE,
    SLICE_ASSIGN,
    SCATTER_ADD,
    SELECT_ADD,
    SCATTER_ND,
    POWI_SCALAR,
    MEAN_DIM,
];

/// The ops of `FloatTensorOps` that apply one casting rule.
macro_rules! float_autocast {
    ($then:ident) => {
        $then! { B;

            // Float32 class: exp/log/pow, the trigonometry PyTorch lists as f32, reductions.
            to_f32 fn float_exp(tensor) -> FloatTensor<Self>;
            to_f32 fn float_log(tensor) -> FloatTensor<Self>;
            to_f32 fn float_log1p(tensor) -> FloatTensor<Self>;
            to_f32 fn float_recip(tensor) -> FloatTensor<Self>;
            to_f32 fn float_powf(lhs, rhs) -> FloatTensor<Self>;
            to_f32 fn float_powi(lhs; rhs: IntTensor<Self>) -> FloatTensor<Self>;
            to_f32 fn float_powf_scalar(tensor; value: Scalar) -> FloatTensor<Self>;
            to_f32 fn float_tan(tensor) -> FloatTensor<Self>;
            to_f32 fn float_cosh(tensor) -> FloatTensor<Self>;
            to_f32 fn float_sinh(tensor) -> FloatTensor<Self>;
            to_f32 fn float_acos(tensor) -> FloatTensor<Self>;
            to_f32 fn float_asin(tensor) -> FloatTensor<Self>;
            to_f32 fn float_sum(tensor) -> FloatTensor<Self>;
            to_f32 fn float_sum_dim(tensor; dim: usize) -> FloatTensor<Self>;
            to_f32 fn float_prod(tensor) -> FloatTensor<Self>;
            to_f32 fn float_prod_dim(tensor; dim: usize) -> FloatTensor<Self>;
            to_f32 fn float_mean(tensor) -> FloatTensor<Self>;
            to_f32 fn float_cumsum(tensor; dim: usize) -> FloatTensor<Self>;
            to_f32 fn float_cumprod(tensor; dim: usize) -> FloatTensor<Self>;

            // Promote class: several float inputs meet in the widest dtype.
            to_widest fn float_remainder(lhs, rhs) -> FloatTensor<Self>;
            to_widest fn float_atan2(lhs, rhs) -> FloatTensor<Self>;
            to_widest fn float_cross(lhs, rhs; dim: usize) -> FloatTensor<Self>;
            to_widest fn float_grid_sample_2d(tensor, grid; options: GridSampleOptions) -> FloatTensor<Self>;
            to_widest fn float_equal(lhs, rhs; out_dtype: BoolDType) -> BoolTensor<Self>;
            to_widest fn float_not_equal(lhs, rhs; out_dtype: BoolDType) -> BoolTensor<Self>;
            to_widest fn float_greater(lhs, rhs; out_dtype: BoolDType) -> BoolTensor<Self>;
            to_widest fn float_greater_equal(lhs, rhs; out_dtype: BoolDType) -> BoolTensor<Self>;
            to_widest fn float_lower(lhs, rhs; out_dtype: BoolDType) -> BoolTensor<Self>;
            to_widest fn float_lower_equal(lhs, rhs; out_dtype: BoolDType) -> BoolTensor<Self>;
        }
    };
}

/// The ops of `FloatTensorOps` handed to the inner backend as they are.
macro_rules! float_forwarded {
    ($then:ident) => {
        $then! { B;
            #[read] fn float_into_data(tensor: FloatTensor<Self>) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send;
            #[query] fn float_device(tensor: &FloatTensor<Self>) -> Device<Self>;
            fn float_to_device(tensor: FloatTensor<Self>, device: &Device<Self>) -> FloatTensor<Self>;
            fn float_into_int(tensor: FloatTensor<Self>, out_dtype: IntDType) -> IntTensor<Self>;
            fn float_repeat_dim(tensor: FloatTensor<Self>, dim: usize, times: usize) -> FloatTensor<Self>;
            fn float_clamp_min(tensor: FloatTensor<Self>, min: Scalar) -> FloatTensor<Self>;
            fn float_clamp_max(tensor: FloatTensor<Self>, max: Scalar) -> FloatTensor<Self>;
            fn float_clamp(tensor: FloatTensor<Self>, min: Scalar, max: Scalar) -> FloatTensor<Self>;
            fn float_remainder_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
            fn float_neg(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_transpose(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_permute(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self>;
            fn float_flip(tensor: FloatTensor<Self>, axes: &[usize]) -> FloatTensor<Self>;
            fn float_gather(dim: usize, tensor: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self>;
            fn float_gather_nd(_data: FloatTensor<Self>, _indices: IntTensor<Self>) -> FloatTensor<Self>;
            fn float_select(tensor: FloatTensor<Self>, dim: usize, indices: IntTensor<Self>) -> FloatTensor<Self>;
            fn float_slice(tensor: FloatTensor<Self>, slices: &[Slice]) -> FloatTensor<Self>;
            fn float_equal_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn float_not_equal_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn float_greater_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn float_greater_equal_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn float_lower_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn float_lower_equal_elem(lhs: FloatTensor<Self>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn float_detach(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            #[query] fn float_is_require_grad(_tensor: &FloatTensor<Self>) -> bool;
            fn float_cummin(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
            fn float_cummax(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
            fn float_powi_scalar_impl(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self>;
            fn float_powf_scalar_impl(tensor: FloatTensor<Self>, value: Scalar) -> FloatTensor<Self>;
            fn float_sqrt(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_cos(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_sin(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_tanh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_acosh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_asinh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_atan(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_atanh(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_round(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_floor(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_ceil(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_trunc(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_erf(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_argmax(tensor: FloatTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self>;
            fn float_argtopk(tensor: FloatTensor<Self>, dim: usize, k: usize, out_dtype: IntDType) -> IntTensor<Self>;
            fn float_topk(tensor: FloatTensor<Self>, dim: usize, k: usize) -> FloatTensor<Self>;
            fn float_argmin(tensor: FloatTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self>;
            fn float_max(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_max_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
            fn float_max_dim_with_indices(tensor: FloatTensor<Self>, dim: usize, indices_dtype: IntDType) -> (FloatTensor<Self>, IntTensor<Self>);
            fn float_min(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_min_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
            fn float_min_dim_with_indices(tensor: FloatTensor<Self>, dim: usize, indices_dtype: IntDType) -> (FloatTensor<Self>, IntTensor<Self>);
            fn float_max_abs(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_max_abs_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self>;
            fn float_any(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn float_any_dim(tensor: FloatTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn float_all(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn float_all_dim(tensor: FloatTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn float_sign(tensor: FloatTensor<Self>) -> FloatTensor<Self>;
            fn float_expand(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self>;
            fn float_sort(tensor: FloatTensor<Self>, dim: usize, descending: bool) -> FloatTensor<Self>;
            fn float_sort_with_indices(tensor: FloatTensor<Self>, dim: usize, descending: bool, indices_dtype: IntDType) -> (FloatTensor<Self>, IntTensor<Self>);
            fn float_argsort(tensor: FloatTensor<Self>, dim: usize, descending: bool, out_dtype: IntDType) -> IntTensor<Self>;
            fn float_unfold(tensor: FloatTensor<Self>, dim: usize, size: usize, step: usize) -> FloatTensor<Self>;
            fn float_is_nan(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn float_is_inf(tensor: FloatTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
        }
    };
}

impl<B: Backend> FloatTensorOps<Self> for MixedPrecision<B> {
    /// Compute class; under an FP8 policy both operands are rounded to E4M3 first. On
    /// burn-amp's kernels (Flex) the operands are not cast: they are rounded while packed
    /// (under FP8, f32 operands rounded to E4M3 through the compute dtype, in f32).
    fn float_matmul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        let op = MATMUL.resolve::<B>(&B::float_device(&lhs));
        let target = op.policy.compute_dtype();
        let _op = MATMUL.record(Some(target.into()));
        let routed = op
            .routed()
            .filter(|_| !autocast::any_f64::<B>(&[Some(&lhs), Some(&rhs)]));
        if routed.is_some() && op.fp8.is_none() {
            return autocast::matmul::<B>(routed, lhs, rhs, &op);
        }
        let [lhs, rhs] = [lhs, rhs].map(|t| match routed {
            Some(_) => autocast::to_fp8_operand::<B>(t, &op),
            None => autocast::to_target::<B>(t, target, &op),
        });
        op.compute("matmul", lhs, rhs, |lhs, rhs| {
            autocast::matmul::<B>(routed, lhs, rhs, &op)
        })
    }

    /// On burn-amp's vectorised casts where the backend has them (Flex).
    fn float_cast(tensor: FloatTensor<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        let _op = CAST.record(Some(dtype.into()));
        // Only the policy's kernels are asked (unchecked): a cast the user asks for is not one
        // of the policy's and runs on any backend.
        let op = OpContext::<B>::new(context::current(&B::float_device(&tensor)));
        autocast::convert::<B>(tensor, dtype, op.kernels())
    }

    /// A tensor made a variable (a `Param`, or an optimizer's updated parameter) in f32
    /// under a policy whose variables are not f32 (`float16`, `bfloat16`) takes the
    /// variable dtype, as a tensor created in f32 does: an optimizer whose update math ran
    /// in f32 (Burn's Adam squares the gradient, a float32-class op) leaves the variables
    /// in their dtype.
    fn float_set_require_grad(tensor: FloatTensor<Self>, require_grad: bool) -> FloatTensor<Self> {
        let _op = SET_REQUIRE_GRAD.record(None);
        let tensor = if require_grad && autocast::dtype::<B>(&tensor) == FloatDType::F32 {
            let op = context::of::<B>(&tensor);
            autocast::cast::<B>(tensor, op.policy.variable_dtype(), &op)
        } else {
            tensor
        };
        B::float_set_require_grad(tensor, require_grad)
    }

    /// Creation class: a tensor made from data keeps the data's dtype under every policy,
    /// so a checkpoint's tensors (an optimizer's f32 state, saved by Burn's recorders in
    /// the precision they were made with) come back as they were saved. Variables are
    /// narrowed where they become variables ([`float_set_require_grad`](Self::float_set_require_grad)).
    fn float_from_data(data: TensorData, device: &Device<Self>) -> FloatTensor<Self> {
        let _op = FROM_DATA.record(None);
        B::float_from_data(data, device)
    }

    /// Promote class; 16-bit operands, and f32 ones that broadcast, on burn-amp's kernels
    /// where the policy routes, which read a 16-bit operand beside an f32 one widened (the
    /// bits of its cast to f32, without the copy).
    fn float_add(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        autocast::arithmetic::<B>(BinaryOp::Add, ADD, lhs, rhs, B::float_add)
    }

    fn float_sub(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        autocast::arithmetic::<B>(BinaryOp::Sub, SUB, lhs, rhs, B::float_sub)
    }

    fn float_mul(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        autocast::arithmetic::<B>(BinaryOp::Mul, MUL, lhs, rhs, B::float_mul)
    }

    fn float_div(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self> {
        autocast::arithmetic::<B>(BinaryOp::Div, DIV, lhs, rhs, B::float_div)
    }

    /// Float32 class; a square (`powi` of 2, what `Tensor::square` asks for) on burn-amp's
    /// kernels where the policy routes: one pass each way, where the backend's default is
    /// the product of the tensor with itself, two gradients and their sum.
    fn float_powi_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        let op = context::of::<B>(&lhs);
        let [lhs] = autocast::to_f32::<B, 1>([lhs], &op);
        let _op = POWI_SCALAR.record(Some(lhs.dtype()));
        let lhs = match op.routed_ops() {
            Some(ops) if rhs.elem::<i64>() == 2 && rhs.elem::<f64>() == 2.0 => {
                match (ops.square)(ops.isa, lhs) {
                    Routed::Ran(out) => return out,
                    Routed::Declined(lhs) => lhs,
                }
            }
            _ => lhs,
        };
        B::float_powi_scalar(lhs, rhs)
    }

    /// Float32 class; on burn-amp's kernels where the policy routes, its gradient written
    /// in one pass (the backend's default makes a tensor of ones, scales it and multiplies
    /// it by the broadcast gradient). There a 16-bit input is widened as the mean reads it,
    /// and its gradient comes back in its dtype: the bits of the cast and the f32 mean,
    /// without the cast's f32 gradient the size of the input.
    fn float_mean_dim(tensor: FloatTensor<Self>, dim: usize) -> FloatTensor<Self> {
        let op = context::of::<B>(&tensor);
        // The routed op takes the tensor as it is: a 16-bit one it widens itself, counted
        // as the cast it stands for.
        let (tensor, timed) = match op.routed_ops() {
            Some(ops) => {
                let widened = autocast::is_reduced(autocast::dtype::<B>(&tensor))
                    .then(|| (tensor.dtype(), tensor.shape().num_elements()));
                let runs_in = widened.map_or(tensor.dtype(), |_| DType::F32);
                let timed = MEAN_DIM.record(Some(runs_in));
                match (ops.mean_dim)(ops.isa, tensor, dim) {
                    Routed::Ran(out) => {
                        if let Some((from, n)) = widened {
                            crate::cost::cast(from, DType::F32, n);
                        }
                        return out;
                    }
                    Routed::Declined(tensor) => (tensor, Some(timed)),
                }
            }
            None => (tensor, None),
        };
        let [tensor] = autocast::to_f32::<B, 1>([tensor], &op);
        let _op = timed.unwrap_or_else(|| MEAN_DIM.record(Some(tensor.dtype())));
        B::float_mean_dim(tensor, dim)
    }

    /// Forwarded; a 16-bit tensor on burn-amp's kernels where the policy routes.
    fn float_add_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        autocast::arithmetic_scalar::<B>(BinaryOp::Add, ADD_SCALAR, lhs, rhs, B::float_add_scalar)
    }

    fn float_sub_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        autocast::arithmetic_scalar::<B>(BinaryOp::Sub, SUB_SCALAR, lhs, rhs, B::float_sub_scalar)
    }

    fn float_mul_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        autocast::arithmetic_scalar::<B>(BinaryOp::Mul, MUL_SCALAR, lhs, rhs, B::float_mul_scalar)
    }

    fn float_div_scalar(lhs: FloatTensor<Self>, rhs: Scalar) -> FloatTensor<Self> {
        autocast::arithmetic_scalar::<B>(BinaryOp::Div, DIV_SCALAR, lhs, rhs, B::float_div_scalar)
    }

    fn float_mask_fill(
        tensor: FloatTensor<Self>,
        mask: BoolTensor<Self>,
        value: Scalar,
    ) -> FloatTensor<Self> {
        autocast::mask_fill::<B>(MASK_FILL, tensor, mask, value, B::float_mask_fill)
    }

    /// Creation class. Under a mixed policy whose backend has burn-amp's kernels, a
    /// Bernoulli tensor (dropout's mask) comes from burn-amp's counter-based generator,
    /// keyed from the backend's own (so `Backend::seed` still makes it repeatable).
    fn float_random(
        shape: Shape,
        distribution: Distribution,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        let _op = RANDOM.record(None);
        let dtype = creation_dtype::<B>(device, dtype);
        if let Distribution::Bernoulli(p) = distribution
            && (0.0..=1.0).contains(&p)
            && dtype != FloatDType::F64
            && let Some(ops) = context::resolve::<B>(device, Fp8Use::Never).routed_ops()
        {
            return (ops.bernoulli)(ops.isa, shape, p, dtype.into());
        }
        B::float_random(shape, distribution, device, dtype)
    }

    /// Forwarded; where the policy routes, a view the reshape would copy is made contiguous
    /// first on burn-amp's layout kernel (with its own backward pass).
    fn float_reshape(tensor: FloatTensor<Self>, shape: Shape) -> FloatTensor<Self> {
        let _op = RESHAPE.record(None);
        let tensor = match context::of::<B>(&tensor).routed_ops() {
            Some(ops) => (ops.contiguous)(ops.isa, tensor),
            None => tensor,
        };
        B::float_reshape(tensor, shape)
    }

    /// Forwarded (a view); where the policy routes, its gradient comes back contiguous.
    fn float_swap_dims(tensor: FloatTensor<Self>, dim1: usize, dim2: usize) -> FloatTensor<Self> {
        let _op = SWAP_DIMS.record(None);
        match context::of::<B>(&tensor).routed_ops() {
            Some(ops) => (ops.swap_dims)(ops.isa, tensor, dim1, dim2),
            None => B::float_swap_dims(tensor, dim1, dim2),
        }
    }

    fn float_zeros(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        let _op = ZEROS.record(None);
        B::float_zeros(shape, device, creation_dtype::<B>(device, dtype))
    }

    fn float_ones(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        let _op = ONES.record(None);
        B::float_ones(shape, device, creation_dtype::<B>(device, dtype))
    }

    fn float_full(
        shape: Shape,
        fill_value: Scalar,
        device: &Device<Self>,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        let _op = FULL.record(None);
        B::float_full(
            shape,
            fill_value,
            device,
            creation_dtype::<B>(device, dtype),
        )
    }

    fn float_empty(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> FloatTensor<Self> {
        let _op = EMPTY.record(None);
        B::float_empty(shape, device, creation_dtype::<B>(device, dtype))
    }

    fn float_cat(tensors: Vec<FloatTensor<Self>>, dim: usize) -> FloatTensor<Self> {
        let _op = CAT.record(None);
        let Some(first) = tensors.first() else {
            return B::float_cat(tensors, dim);
        };
        let op = context::of::<B>(first);
        B::float_cat(autocast::vec_to_widest::<B>(tensors, &op), dim)
    }

    fn float_mask_where(
        tensor: FloatTensor<Self>,
        mask: BoolTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let op = context::of::<B>(&tensor);
        let [tensor, value] = autocast::to_widest::<B, 2>([tensor, value], &op);
        let _op = MASK_WHERE.record(Some(tensor.dtype()));
        B::float_mask_where(tensor, mask, value)
    }

    fn float_slice_assign(
        tensor: FloatTensor<Self>,
        slices: &[Slice],
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let op = context::of::<B>(&tensor);
        let [tensor, value] = autocast::to_dtype_of_first::<B, 2>([tensor, value], &op);
        let _op = SLICE_ASSIGN.record(None);
        B::float_slice_assign(tensor, slices, value)
    }

    fn float_scatter_add(
        dim: usize,
        tensor: FloatTensor<Self>,
        indices: IntTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let op = context::of::<B>(&tensor);
        let [tensor, value] = autocast::to_dtype_of_first::<B, 2>([tensor, value], &op);
        let _op = SCATTER_ADD.record(None);
        B::float_scatter_add(dim, tensor, indices, value)
    }

    fn float_select_add(
        tensor: FloatTensor<Self>,
        dim: usize,
        indices: IntTensor<Self>,
        value: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let op = context::of::<B>(&tensor);
        let [tensor, value] = autocast::to_dtype_of_first::<B, 2>([tensor, value], &op);
        let _op = SELECT_ADD.record(None);
        B::float_select_add(tensor, dim, indices, value)
    }

    fn float_scatter_nd(
        data: FloatTensor<Self>,
        indices: IntTensor<Self>,
        values: FloatTensor<Self>,
        reduction: IndexingUpdateOp,
    ) -> FloatTensor<Self> {
        let op = context::of::<B>(&data);
        let [data, values] = autocast::to_dtype_of_first::<B, 2>([data, values], &op);
        let _op = SCATTER_ND.record(None);
        B::float_scatter_nd(data, indices, values, reduction)
    }

    float_autocast!(autocast);

    float_forwarded!(forward);
}

/// The class table's rows of `FloatTensorOps`: the ops written out above, then the tables.
pub(super) fn classes() -> Vec<(&'static str, Counted)> {
    let tables = float_autocast!(autocast_classes)
        .into_iter()
        .chain(float_forwarded!(forward_classes));
    super::rows(&WRITTEN, tables)
}
