//! Loading a record into a `LossScaleOptimizer`, checked first.

use burn::module::AutodiffModule;
use burn::optim::Optimizer;
use burn::tensor::backend::AutodiffBackend;

use super::LossScaleOptimizer;
use crate::loss_scale::{LossScaleError, LossScaleOptimizerRecord};

impl<O> LossScaleOptimizer<O> {
    /// Loads a record (the inner optimizer's state, the scale and its counters) after
    /// checking it against this optimizer's settings; on error nothing is changed.
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::Linear;
    /// use burn::optim::{Optimizer, SgdConfig};
    /// use burn_amp::{LossScaleConfig, LossScaleError, MixedPrecision};
    ///
    /// type B = MixedPrecision<Autodiff<Flex>>;
    /// let sgd = SgdConfig::new().init::<B, Linear<B>>();
    /// let mut optim = LossScaleConfig::new().init_manual(sgd)?;
    /// let mut record = Optimizer::<Linear<B>, B>::to_record(&optim);
    /// record.scale = f32::INFINITY; // a poisoned checkpoint
    /// let err = optim.try_load_record::<Linear<B>, B>(record).unwrap_err();
    /// assert!(matches!(err, LossScaleError::InvalidRecord { field: "scale", .. }));
    /// assert_eq!(optim.loss_scale(), 32768.0); // left as it was
    /// # Ok::<(), LossScaleError>(())
    /// ```
    ///
    /// # Errors
    /// [`LossScaleError::InvalidRecord`] as [`LossScaleOptimizerRecord::validate`] finds it.
    pub fn try_load_record<M, B>(
        &mut self,
        record: LossScaleOptimizerRecord<O::Record>,
    ) -> Result<(), LossScaleError>
    where
        B: AutodiffBackend,
        M: AutodiffModule<B>,
        O: Optimizer<M, B>,
    {
        record.validate(self.scale.config())?;
        self.scale
            .fp8_history()
            .load_record(record.fp8)
            .map_err(|err| LossScaleError::InvalidRecord {
                field: "fp8",
                value: "a bad FP8 history".into(),
                rule: err.to_string(),
            })?;
        *self
            .scale
            .shared
            .schedule
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = record.min_scale_schedule;
        self.inner = self.inner.clone().load_record(record.inner);
        self.scale.set(
            record.scale,
            record.good_steps,
            record.skipped_steps,
            record.total_steps,
        );
        Ok(())
    }
}
