//! The optimizer's record: the inner optimizer's record plus the scale and its counters, so
//! a run resumed from a checkpoint continues with the same scale.

use burn::record::{PrecisionSettings, Record};
use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

/// The record of a [`LossScaleOptimizer`](super::LossScaleOptimizer).
#[derive(Clone, Debug, PartialEq)]
pub struct LossScaleOptimizerRecord<R> {
    /// The wrapped optimizer's record (its moments, step counts, ...).
    pub inner: R,
    /// The loss scale at the time of the record.
    pub scale: f32,
    /// Finite steps in a row since the scale last changed or overflowed.
    pub good_steps: u64,
    /// Steps skipped so far.
    pub skipped_steps: u64,
    /// Steps taken or skipped so far.
    pub total_steps: u64,
}

/// The serialized form of [`LossScaleOptimizerRecord`].
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(bound = "I: Serialize + serde::de::DeserializeOwned")]
pub struct LossScaleOptimizerItem<I> {
    inner: I,
    scale: f32,
    good_steps: u64,
    skipped_steps: u64,
    total_steps: u64,
}

impl<B: Backend, R: Record<B>> Record<B> for LossScaleOptimizerRecord<R> {
    type Item<S: PrecisionSettings> = LossScaleOptimizerItem<R::Item<S>>;

    fn into_item<S: PrecisionSettings>(self) -> Self::Item<S> {
        LossScaleOptimizerItem {
            inner: self.inner.into_item(),
            scale: self.scale,
            good_steps: self.good_steps,
            skipped_steps: self.skipped_steps,
            total_steps: self.total_steps,
        }
    }

    fn from_item<S: PrecisionSettings>(item: Self::Item<S>, device: &B::Device) -> Self {
        Self {
            inner: R::from_item(item.inner, device),
            scale: item.scale,
            good_steps: item.good_steps,
            skipped_steps: item.skipped_steps,
            total_steps: item.total_steps,
        }
    }
}
