//! The optimizer's record: the inner optimizer's record plus the scale and its counters, so
//! a run resumed from a checkpoint continues with the same scale.

use burn::record::{PrecisionSettings, Record};
use burn::tensor::backend::Backend;
use serde::{Deserialize, Serialize};

use super::{LossScaleConfig, LossScaleError, MinScaleStep};
use crate::fp8::Fp8HistoryRecord;

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
    /// The minimum-scale schedule in force (enhanced loss scaling), `(step, minimum)`.
    pub min_scale_schedule: Vec<MinScaleStep>,
    /// The state of delayed and exponent-bias FP8 scaling (empty under other policies).
    pub fp8: Fp8HistoryRecord,
}

impl<R> LossScaleOptimizerRecord<R> {
    /// Checks the record against the settings of the optimizer it is loaded into.
    ///
    /// ```
    /// use burn_amp::{LossScaleConfig, LossScaleOptimizerRecord};
    ///
    /// let record = |scale, good, skipped, total| LossScaleOptimizerRecord {
    ///     inner: (),
    ///     scale,
    ///     good_steps: good,
    ///     skipped_steps: skipped,
    ///     total_steps: total,
    ///     min_scale_schedule: vec![],
    ///     fp8: Default::default(),
    /// };
    /// let config = LossScaleConfig::new();
    /// assert!(record(1024.0, 3, 1, 10).validate(&config).is_ok());
    /// assert!(record(f32::NAN, 0, 0, 0).validate(&config).is_err());
    /// assert!(record(-2.0, 0, 0, 0).validate(&config).is_err());
    /// assert!(record(1024.0, 0, 11, 10).validate(&config).is_err()); // skipped > total
    /// ```
    ///
    /// # Errors
    /// [`LossScaleError::InvalidRecord`] naming the first field that breaks its rule: the
    /// scale must be finite, positive and within `[min_scale, max_scale]`; no more steps
    /// skipped than taken; no more good steps in a row than finite steps; the schedule as
    /// [`LossScaleConfig::validate`] checks it, with the scale at or above its floor; the
    /// FP8 state as [`Fp8HistoryRecord::validate`] checks it.
    pub fn validate(&self, config: &LossScaleConfig) -> Result<(), LossScaleError> {
        let invalid = |field: &'static str, value: String, rule: String| {
            Err(LossScaleError::InvalidRecord { field, value, rule })
        };
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return invalid("scale", self.scale.to_string(), "finite and > 0".into());
        }
        if !(config.min_scale..=config.max_scale).contains(&self.scale) {
            let rule = format!(
                "within [min_scale, max_scale] = [{}, {}]",
                config.min_scale, config.max_scale
            );
            return invalid("scale", self.scale.to_string(), rule);
        }
        if self.skipped_steps > self.total_steps {
            let rule = format!("at most total_steps = {}", self.total_steps);
            return invalid("skipped_steps", self.skipped_steps.to_string(), rule);
        }
        let finite_steps = self.total_steps - self.skipped_steps;
        if self.good_steps > finite_steps {
            let rule = format!("at most total_steps - skipped_steps = {finite_steps}");
            return invalid("good_steps", self.good_steps.to_string(), rule);
        }
        let schedule = config
            .clone()
            .with_min_scale_schedule(self.min_scale_schedule.clone());
        if let Err(LossScaleError::InvalidConfig { value, rule, .. }) = schedule.validate() {
            return invalid("min_scale_schedule", value, rule.to_string());
        }
        let floor = schedule.min_scale_at(self.total_steps);
        if config.dynamic && self.scale < floor {
            let rule = format!(
                "at least the scheduled minimum {floor} at step {}",
                self.total_steps
            );
            return invalid("scale", self.scale.to_string(), rule);
        }
        if let Err(err) = self.fp8.validate() {
            return invalid("fp8", "a bad FP8 history".into(), err.to_string());
        }
        Ok(())
    }
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
    #[serde(default)]
    min_scale_schedule: Vec<MinScaleStep>,
    #[serde(default)]
    fp8: Fp8HistoryRecord,
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
            min_scale_schedule: self.min_scale_schedule,
            fp8: self.fp8,
        }
    }

    fn from_item<S: PrecisionSettings>(item: Self::Item<S>, device: &B::Device) -> Self {
        Self {
            inner: R::from_item(item.inner, device),
            scale: item.scale,
            good_steps: item.good_steps,
            skipped_steps: item.skipped_steps,
            total_steps: item.total_steps,
            min_scale_schedule: item.min_scale_schedule,
            fp8: item.fp8,
        }
    }
}
