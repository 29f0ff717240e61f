//! One parameter's [`FusedAdamW`](super::FusedAdamW) state, shared by the optimizer and
//! its record conversions.

use burn::tensor::backend::Backend;
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
