//! Loss scaling for f16 training: [`LossScaleOptimizer`] wraps any Burn optimizer.
//!
//! How the scale reaches the backward pass (automatic mode): the optimizer binds its
//! [`LossScale`] to devices ([`LossScaleConfig::init_on`]) or as the default
//! ([`LossScaleOptimizer::new`]); [`MixedPrecision`](crate::MixedPrecision)'s `backward`
//! looks up the binding of its loss's device and multiplies the f32 loss by it, and the decorator's `Gradients` divide each gradient by the same number
//! when it is read, in f32. So every gradient a user, an optimizer or Burn's `Learner` sees
//! is the true one, and gradient clipping, accumulation and logging need no change.

mod compress;
mod config;
mod grads;
#[cfg(feature = "train")]
mod metric;
mod optimizer;
mod record;
mod replicas;
mod state;

pub use config::{LossScaleConfig, MinScaleStep};
#[cfg(feature = "train")]
pub use metric::{LossScaleMetric, SkippedStepsMetric};
pub use optimizer::LossScaleOptimizer;
#[doc(hidden)]
pub use record::LossScaleOptimizerItem;
pub use record::LossScaleOptimizerRecord;
pub use state::LossScale;

/// Why a loss-scale setting was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum LossScaleError {
    /// A setting out of its range.
    #[error("invalid loss-scale setting {field} = {value}: it must be {rule}")]
    InvalidConfig {
        /// The setting.
        field: &'static str,
        /// Its value.
        value: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// A record (a checkpoint) that cannot be loaded: training on from it would skip every
    /// step, scale by a negative number, or report impossible counts.
    #[error("invalid loss-scale record: {field} = {value}, but it must be {rule}")]
    InvalidRecord {
        /// The field.
        field: &'static str,
        /// Its value in the record.
        value: String,
        /// The rule it breaks.
        rule: String,
    },
    /// An automatic optimizer asked for a device another live one is bound to.
    #[error(
        "device {device} already has an automatic LossScaleOptimizer bound to it: drop that \
         one first, bind this one to another device, or use manual mode (init_manual)"
    )]
    DeviceTaken {
        /// The device, as `Debug` prints it.
        device: String,
    },
    /// The inner [`FusedAdamW`](crate::FusedAdamW)'s loaded record does not fit the model.
    #[error("optimizer record: {0}")]
    Record(#[from] crate::optim::RecordError),
    /// A data-parallel step's collective failed (a peer gone or too slow, replicas whose
    /// state differs).
    #[error("data-parallel step {step} failed: {source}")]
    Collective {
        /// The step that failed, counted from 1 (the optimizer's `total_steps() + 1`).
        step: u64,
        /// What the collective said.
        source: crate::collective::CollectiveError,
    },
}
