//! Loss scaling for f16 training: [`LossScaleOptimizer`] wraps any Burn optimizer.
//!
//! How the scale reaches the backward pass (automatic mode): the optimizer publishes its
//! [`LossScale`]; [`MixedPrecision`](crate::MixedPrecision)'s `backward` multiplies the f32
//! loss by it, and the decorator's `Gradients` divide each gradient by the same number
//! when it is read, in f32. So every gradient a user, an optimizer or Burn's `Learner` sees
//! is the true one, and gradient clipping, accumulation and logging need no change.

mod config;
mod grads;
#[cfg(feature = "train")]
mod metric;
mod optimizer;
mod record;
mod state;

pub use config::LossScaleConfig;
#[cfg(feature = "train")]
pub use metric::{LossScaleMetric, SkippedStepsMetric};
pub use optimizer::LossScaleOptimizer;
pub use record::{LossScaleOptimizerItem, LossScaleOptimizerRecord};
pub use state::LossScale;
pub(crate) use state::active;

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
}
