//! `QTensorOps`: Burn's own quantized tensors are left to the inner backend.

use burn_tensor::backend::{Backend, ExecutionError};
use burn_tensor::ops::{BoolTensor, Device, FloatTensor, IntTensor, QTensorOps, QuantizedTensor};
use burn_tensor::quantization::{QuantScheme, QuantizationParametersPrimitive};
use burn_tensor::{
    BoolDType, FloatDType, IntDType, Scalar, Shape, Slice, TensorData, TensorPrimitive,
};

use crate::MixedPrecision;
use crate::cost::{Counted, OpClass, OpRow};

/// Re-tags an inner backend's tensor primitive as the decorator's (same payload).
fn retag<B: Backend>(tensor: TensorPrimitive<B>) -> TensorPrimitive<MixedPrecision<B>> {
    match tensor {
        TensorPrimitive::Float(t) => TensorPrimitive::Float(t),
        TensorPrimitive::QFloat(t) => TensorPrimitive::QFloat(t),
    }
}

/// The inverse of [`retag`].
fn untag<B: Backend>(tensor: TensorPrimitive<MixedPrecision<B>>) -> TensorPrimitive<B> {
    match tensor {
        TensorPrimitive::Float(t) => TensorPrimitive::Float(t),
        TensorPrimitive::QFloat(t) => TensorPrimitive::QFloat(t),
    }
}

/// The ops of `QTensorOps` handed to the inner backend as they are.
macro_rules! q_forwarded {
    ($then:ident) => {
        $then! { B;
            fn q_from_data(data: TensorData, device: &Device<Self>) -> QuantizedTensor<Self>;
            fn quantize_dynamic(tensor: FloatTensor<Self>, scheme: &QuantScheme) -> QuantizedTensor<Self>;
            fn dequantize(tensor: QuantizedTensor<Self>, dtype: FloatDType) -> FloatTensor<Self>;
            #[query] fn q_device(tensor: &QuantizedTensor<Self>) -> Device<Self>;
            fn q_to_device(tensor: QuantizedTensor<Self>, device: &Device<Self>) -> QuantizedTensor<Self>;
            fn q_reshape(tensor: QuantizedTensor<Self>, shape: Shape) -> QuantizedTensor<Self>;
            #[read] fn q_into_data(tensor: QuantizedTensor<Self>) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send;
            fn q_detach(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self>;
            fn q_set_require_grad(tensor: QuantizedTensor<Self>, _require_grad: bool) -> QuantizedTensor<Self>;
            #[query] fn q_is_require_grad(_tensor: &QuantizedTensor<Self>) -> bool;
            fn q_expand(tensor: QuantizedTensor<Self>, shape: Shape) -> QuantizedTensor<Self>;
            fn q_transpose(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self>;
            fn q_swap_dims(tensor: QuantizedTensor<Self>, dim1: usize, dim2: usize) -> QuantizedTensor<Self>;
            fn q_permute(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self>;
            fn q_flip(tensor: QuantizedTensor<Self>, axes: &[usize]) -> QuantizedTensor<Self>;
            fn q_select(tensor: QuantizedTensor<Self>, dim: usize, indices: IntTensor<Self>) -> QuantizedTensor<Self>;
            fn q_slice(tensor: QuantizedTensor<Self>, slices: &[Slice]) -> QuantizedTensor<Self>;
            fn q_gather(dim: usize, tensor: QuantizedTensor<Self>, indices: IntTensor<Self>) -> QuantizedTensor<Self>;
            fn q_repeat_dim(tensor: QuantizedTensor<Self>, dim: usize, times: usize) -> QuantizedTensor<Self>;
            fn q_add(lhs: QuantizedTensor<Self>, rhs: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_add_scalar(lhs: QuantizedTensor<Self>, rhs: Scalar) -> TensorPrimitive<Self> => retag;
            fn q_clamp_min(tensor: QuantizedTensor<Self>, min: Scalar) -> TensorPrimitive<Self> => retag;
            fn q_clamp_max(tensor: QuantizedTensor<Self>, max: Scalar) -> TensorPrimitive<Self> => retag;
            fn q_clamp(tensor: QuantizedTensor<Self>, min: Scalar, max: Scalar) -> TensorPrimitive<Self> => retag;
            fn q_sub(lhs: QuantizedTensor<Self>, rhs: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_sub_scalar(lhs: QuantizedTensor<Self>, rhs: Scalar) -> TensorPrimitive<Self> => retag;
            fn q_mul(lhs: QuantizedTensor<Self>, rhs: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_mul_scalar(lhs: QuantizedTensor<Self>, rhs: Scalar) -> TensorPrimitive<Self> => retag;
            fn q_div(lhs: QuantizedTensor<Self>, rhs: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_div_scalar(lhs: QuantizedTensor<Self>, rhs: Scalar) -> TensorPrimitive<Self> => retag;
            fn q_neg(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_recip(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_sum(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_sum_dim(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => retag;
            fn q_prod(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_prod_dim(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => retag;
            fn q_mean(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_mean_dim(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => retag;
            fn q_cumsum(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => retag;
            fn q_cumprod(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => retag;
            fn q_cummin(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => retag;
            fn q_cummax(tensor: QuantizedTensor<Self>, dim: usize) -> TensorPrimitive<Self> => retag;
            fn q_exp(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_log(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_log1p(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_powf(lhs: QuantizedTensor<Self>, rhs: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_powi(lhs: QuantizedTensor<Self>, rhs: IntTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_powi_scalar(lhs: QuantizedTensor<Self>, rhs: Scalar) -> TensorPrimitive<Self> => retag;
            fn q_powf_scalar(tensor: QuantizedTensor<Self>, value: Scalar) -> TensorPrimitive<Self> => retag;
            fn q_sqrt(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_abs(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self>;
            fn q_cos(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_sin(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_tan(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_cosh(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_sinh(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_tanh(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_erf(tensor: QuantizedTensor<Self>) -> TensorPrimitive<Self> => retag;
            fn q_cat(tensors: Vec<QuantizedTensor<Self>>, dim: usize) -> QuantizedTensor<Self>;
            fn q_argmax(tensor: QuantizedTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self>;
            fn q_argtopk(tensor: QuantizedTensor<Self>, dim: usize, k: usize, out_dtype: IntDType) -> IntTensor<Self>;
            fn q_topk(tensor: QuantizedTensor<Self>, dim: usize, k: usize) -> QuantizedTensor<Self>;
            fn q_argmin(tensor: QuantizedTensor<Self>, dim: usize, out_dtype: IntDType) -> IntTensor<Self>;
            fn q_max(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self>;
            fn q_max_dim(tensor: QuantizedTensor<Self>, dim: usize) -> QuantizedTensor<Self>;
            fn q_max_dim_with_indices(tensor: QuantizedTensor<Self>, dim: usize, out_dtype: IntDType) -> (QuantizedTensor<Self>, IntTensor<Self>);
            fn q_min(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self>;
            fn q_min_dim(tensor: QuantizedTensor<Self>, dim: usize) -> QuantizedTensor<Self>;
            fn q_min_dim_with_indices(tensor: QuantizedTensor<Self>, dim: usize, out_dtype: IntDType) -> (QuantizedTensor<Self>, IntTensor<Self>);
            fn q_max_abs(tensor: QuantizedTensor<Self>) -> QuantizedTensor<Self>;
            fn q_max_abs_dim(tensor: QuantizedTensor<Self>, dim: usize) -> QuantizedTensor<Self>;
            fn q_any(tensor: QuantizedTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn q_any_dim(tensor: QuantizedTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn q_all(tensor: QuantizedTensor<Self>, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn q_all_dim(tensor: QuantizedTensor<Self>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self>;
            fn q_sort(tensor: QuantizedTensor<Self>, dim: usize, descending: bool) -> QuantizedTensor<Self>;
            fn q_sort_with_indices(tensor: QuantizedTensor<Self>, dim: usize, descending: bool, out_dtype: IntDType) -> (QuantizedTensor<Self>, IntTensor<Self>);
            fn q_argsort(tensor: QuantizedTensor<Self>, dim: usize, descending: bool, out_dtype: IntDType) -> IntTensor<Self>;
        }
    };
}

// The ops of `QTensorOps` written out below: forwarded, as Burn's quantized tensors are.
const QUANTIZE: OpRow = OpRow::new("quantize", OpClass::Forwarded);
const Q_MATMUL: OpRow = OpRow::new("q_matmul", OpClass::Forwarded);

impl<B: Backend> QTensorOps<Self> for MixedPrecision<B> {
    fn quantize(
        tensor: FloatTensor<Self>,
        scheme: &QuantScheme,
        qparams: QuantizationParametersPrimitive<Self>,
    ) -> QuantizedTensor<Self> {
        let _op = QUANTIZE.record(None);
        B::quantize(
            tensor,
            scheme,
            QuantizationParametersPrimitive {
                scales: qparams.scales,
            },
        )
    }

    fn q_matmul(lhs: TensorPrimitive<Self>, rhs: TensorPrimitive<Self>) -> TensorPrimitive<Self> {
        let _op = Q_MATMUL.record(None);
        retag(B::q_matmul(untag(lhs), untag(rhs)))
    }

    q_forwarded!(forward);
}

/// The class table's rows of `QTensorOps`: Burn's quantized tensors are forwarded.
pub(super) fn classes() -> Vec<(&'static str, Counted)> {
    super::rows(&[QUANTIZE, Q_MATMUL], q_forwarded!(forward_classes))
}
