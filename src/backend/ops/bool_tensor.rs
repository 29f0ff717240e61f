//! `BoolTensorOps`: booleans have no policy; every op goes to the inner backend as it is.

use burn_tensor::backend::{Backend, ExecutionError};
use burn_tensor::ops::{BoolTensor, BoolTensorOps, Device, FloatTensor, IntTensor};
use burn_tensor::{BoolDType, FloatDType, IntDType, Scalar, Shape, Slice, TensorData};

use crate::MixedPrecision;
use crate::cost::Counted;

/// Every op of `BoolTensorOps`, forwarded.
macro_rules! bool_forwarded {
    ($then:ident) => {
        $then! { B;
            fn bool_empty(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self>;
            fn bool_zeros(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self>;
            fn bool_ones(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> BoolTensor<Self>;
            #[read] fn bool_into_data(tensor: BoolTensor<Self>) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send;
            fn bool_from_data(data: TensorData, device: &Device<Self>) -> BoolTensor<Self>;
            fn bool_into_int(tensor: BoolTensor<Self>, out_dtype: IntDType) -> IntTensor<Self>;
            fn bool_into_float(tensor: BoolTensor<Self>, out_dtype: FloatDType) -> FloatTensor<Self>;
            #[query] fn bool_device(tensor: &BoolTensor<Self>) -> Device<Self>;
            fn bool_to_device(tensor: BoolTensor<Self>, device: &Device<Self>) -> BoolTensor<Self>;
            fn bool_reshape(tensor: BoolTensor<Self>, shape: Shape) -> BoolTensor<Self>;
            fn bool_slice(tensor: BoolTensor<Self>, slices: &[Slice]) -> BoolTensor<Self>;
            fn bool_slice_assign(tensor: BoolTensor<Self>, slices: &[Slice], value: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_mask_where(tensor: BoolTensor<Self>, mask: BoolTensor<Self>, value: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_mask_fill(tensor: BoolTensor<Self>, mask: BoolTensor<Self>, value: Scalar) -> BoolTensor<Self>;
            fn bool_gather(dim: usize, tensor: BoolTensor<Self>, indices: IntTensor<Self>) -> BoolTensor<Self>;
            fn bool_scatter_or(dim: usize, tensor: BoolTensor<Self>, indices: IntTensor<Self>, value: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_select(tensor: BoolTensor<Self>, dim: usize, indices: IntTensor<Self>) -> BoolTensor<Self>;
            fn bool_select_or(tensor: BoolTensor<Self>, dim: usize, indices: IntTensor<Self>, value: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_repeat_dim(tensor: BoolTensor<Self>, dim: usize, times: usize) -> BoolTensor<Self>;
            fn bool_cat(tensors: Vec<BoolTensor<Self>>, dim: usize) -> BoolTensor<Self>;
            fn bool_equal(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_not_equal(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_equal_elem(lhs: BoolTensor<Self>, rhs: Scalar) -> BoolTensor<Self>;
            fn bool_not_equal_elem(lhs: BoolTensor<Self>, rhs: Scalar) -> BoolTensor<Self>;
            fn bool_not(tensor: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_and(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_or(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_xor(lhs: BoolTensor<Self>, rhs: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_transpose(tensor: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_swap_dims(tensor: BoolTensor<Self>, dim1: usize, dim2: usize) -> BoolTensor<Self>;
            fn bool_permute(tensor: BoolTensor<Self>, axes: &[usize]) -> BoolTensor<Self>;
            fn bool_flip(tensor: BoolTensor<Self>, axes: &[usize]) -> BoolTensor<Self>;
            fn bool_any(tensor: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_any_dim(tensor: BoolTensor<Self>, dim: usize) -> BoolTensor<Self>;
            fn bool_all(tensor: BoolTensor<Self>) -> BoolTensor<Self>;
            fn bool_all_dim(tensor: BoolTensor<Self>, dim: usize) -> BoolTensor<Self>;
            fn bool_argwhere(tensor: BoolTensor<Self>, out_dtype: IntDType) -> impl Future<Output = IntTensor<Self>> + 'static + Send;
            fn bool_expand(tensor: BoolTensor<Self>, shape: Shape) -> BoolTensor<Self>;
            fn bool_unfold(tensor: BoolTensor<Self>, dim: usize, size: usize, step: usize) -> BoolTensor<Self>;
        }
    };
}

impl<B: Backend> BoolTensorOps<Self> for MixedPrecision<B> {
    bool_forwarded!(forward);
}

/// The class table's rows of `BoolTensorOps`.
pub(super) fn classes() -> Vec<(&'static str, Counted)> {
    bool_forwarded!(forward_classes).to_vec()
}
