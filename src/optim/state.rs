//! One parameter's [`FusedAdamW`](super::FusedAdamW) state, shared by the optimizer and
//! its record conversions.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};
use burn_tensor::FloatDType;
use burn_tensor::ops::FloatTensor;

use crate::cpu::AdamwState;

/// One parameter's state, without its rank (the record gets it back from the tensors).
pub(super) struct ParamState<I: Backend> {
    pub(super) state: AdamwState<FloatTensor<I>>,
}

impl<I: Backend> Clone for ParamState<I> {
    fn clone(&self) -> Self {
        Self {
            state: AdamwState {
                m: self.state.m.clone(),
                v: self.state.v.clone(),
                time: self.state.time.clone(),
            },
        }
    }
}

/// A step count as a one-value f32 tensor, exact up to 2^24 whatever the policy. It goes
/// through an int tensor: a float tensor created in f32 under `float16` or `bfloat16` is
/// created in that dtype (bf16 holds integers exactly only to 256, f16 to 2048), while a
/// conversion to an explicit dtype is kept.
pub(super) fn step_count<I: Backend>(steps: usize, device: &I::Device) -> FloatTensor<I> {
    let steps = Tensor::<I, 1, Int>::from_data(TensorData::from([steps as i64]), device);
    I::int_into_float(steps.into_primitive(), FloatDType::F32)
}
