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
        // Every part is checked before anything changes: the scale, counters, schedule and
        // FP8 history first, then the inner optimizer's state, loaded into a copy.
        record.validate(self.scale.config())?;
        let inner = load_inner::<O, M, B>(&self.inner, record.inner)?;
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
        self.inner = inner;
        self.scale.set(
            record.scale,
            record.good_steps,
            record.skipped_steps,
            record.total_steps,
        );
        Ok(())
    }
}

/// A copy of `inner` with `record` loaded, `inner` left as it is. A
/// [`FusedAdamW`](crate::FusedAdamW) is loaded through its checked load (a refusal is its
/// [`RecordError`](crate::optim::RecordError)); any other optimizer through Burn's
/// `load_record`, whose panic, where it refuses a record, becomes
/// [`LossScaleError::InvalidRecord`] for the field `inner`.
fn load_inner<O, M, B>(inner: &O, record: O::Record) -> Result<O, LossScaleError>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: Optimizer<M, B>,
{
    let mut copy = inner.clone();
    match crate::optim::fused_record::<O, M, B>(record) {
        Ok(record) => {
            let fused = crate::optim::as_fused::<O, M, B>(&mut copy)
                .expect("a FusedAdamW record belongs to a FusedAdamW");
            fused.try_load_record(record)?;
            Ok(copy)
        }
        Err(record) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            copy.load_record(record)
        }))
        .map_err(|panic| LossScaleError::InvalidRecord {
            field: "inner",
            value: "the inner optimizer's record".into(),
            rule: format!(
                "one the inner optimizer loads; it refused it: {}",
                panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("a panic")
            ),
        }),
    }
}
