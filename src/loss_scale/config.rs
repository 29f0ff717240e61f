//! The loss-scale settings: Keras' defaults, every number configurable, and their checks.

use burn::config::Config;

use super::LossScaleError;

/// How the loss scale starts and moves. The defaults are Keras':
/// start at 2^15, double after 2000 finite steps, halve on overflow.
///
/// ```
/// use burn_amp::LossScaleConfig;
///
/// let config = LossScaleConfig::new().with_growth_interval(1000);
/// assert_eq!(config.initial_scale, 32768.0);
/// assert!(config.validate().is_ok());
/// assert!(LossScaleConfig::new().with_backoff_factor(1.5).validate().is_err());
/// ```
#[derive(Config, Debug, PartialEq)]
pub struct LossScaleConfig {
    /// The scale the first step uses.
    #[config(default = 32768.0)]
    pub initial_scale: f32,
    /// What the scale is multiplied by after `growth_interval` finite steps in a row.
    #[config(default = 2.0)]
    pub growth_factor: f32,
    /// What the scale is multiplied by when a step's gradients are not finite.
    #[config(default = 0.5)]
    pub backoff_factor: f32,
    /// How many finite steps in a row make the scale grow.
    #[config(default = 2000)]
    pub growth_interval: u64,
    /// The scale never falls below this (so it cannot collapse to 0).
    #[config(default = 1.0)]
    pub min_scale: f32,
    /// The scale never rises above this (so it cannot climb to inf). 2^24 by default.
    #[config(default = 16777216.0)]
    pub max_scale: f32,
    /// Dynamic scaling (the default); `false` keeps `initial_scale` for good, still
    /// skipping steps whose gradients are not finite.
    #[config(default = true)]
    pub dynamic: bool,
    /// Enhanced loss scaling (Mellempudi et al., 2019): from each entry's `step` on, the
    /// scale never falls below its `min_scale` (and is raised to it). Steps strictly
    /// increasing; empty by default.
    #[config(default = "Vec::new()")]
    pub min_scale_schedule: Vec<MinScaleStep>,
}

/// One entry of [`LossScaleConfig::min_scale_schedule`]: from optimizer step `step` on
/// (counting taken and skipped steps), the loss scale's floor is `min_scale`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MinScaleStep {
    /// The step the floor starts at.
    pub step: u64,
    /// The floor.
    pub min_scale: f32,
}

impl LossScaleConfig {
    /// A fixed scale: never grows or shrinks; steps with non-finite gradients are skipped.
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::Linear;
    /// use burn::optim::AdamConfig;
    /// use burn_amp::{LossScaleConfig, MixedPrecision};
    ///
    /// type B = MixedPrecision<Autodiff<Flex>>;
    /// let optim = LossScaleConfig::fixed(128.0).init(AdamConfig::new().init::<B, Linear<B>>())?;
    /// assert_eq!(optim.loss_scale(), 128.0);
    /// # Ok::<(), burn_amp::LossScaleError>(())
    /// ```
    pub fn fixed(scale: f32) -> Self {
        Self::new()
            .with_initial_scale(scale)
            .with_min_scale(scale.min(1.0))
            .with_max_scale(scale.max(1.0))
            .with_dynamic(false)
    }

    /// The scale's floor at optimizer step `step`: `min_scale`, or the latest schedule entry
    /// at or before `step` if it is higher.
    ///
    /// ```
    /// use burn_amp::LossScaleConfig;
    /// use burn_amp::loss_scale::MinScaleStep;
    ///
    /// // Intel's ResNet-50 schedule: 8k from 40k iterations, 32k from 150k.
    /// let config = LossScaleConfig::new().with_min_scale_schedule(vec![
    ///     MinScaleStep { step: 40_000, min_scale: 8192.0 },
    ///     MinScaleStep { step: 150_000, min_scale: 32768.0 },
    /// ]);
    /// assert!(config.validate().is_ok());
    /// assert_eq!(config.min_scale_at(39_999), 1.0);
    /// assert_eq!(config.min_scale_at(40_000), 8192.0);
    /// assert_eq!(config.min_scale_at(1_000_000), 32768.0);
    /// ```
    pub fn min_scale_at(&self, step: u64) -> f32 {
        floor_at(self.min_scale, &self.min_scale_schedule, step)
    }

    /// Checks the numbers.
    ///
    /// # Errors
    /// [`LossScaleError::InvalidConfig`] naming the field, its value and the rule it breaks.
    pub fn validate(&self) -> Result<(), LossScaleError> {
        let invalid = |field: &'static str, value: String, rule: &'static str| {
            Err(LossScaleError::InvalidConfig { field, value, rule })
        };
        let finite_positive = |x: f32| x.is_finite() && x > 0.0;
        if !finite_positive(self.min_scale) {
            return invalid("min_scale", self.min_scale.to_string(), "finite and > 0");
        }
        if !finite_positive(self.max_scale) || self.max_scale < self.min_scale {
            return invalid(
                "max_scale",
                self.max_scale.to_string(),
                "finite and >= min_scale",
            );
        }
        if !(self.min_scale..=self.max_scale).contains(&self.initial_scale) {
            let rule = "within [min_scale, max_scale]";
            return invalid("initial_scale", self.initial_scale.to_string(), rule);
        }
        if !(self.growth_factor.is_finite() && self.growth_factor > 1.0) {
            return invalid(
                "growth_factor",
                self.growth_factor.to_string(),
                "finite and > 1",
            );
        }
        if !(self.backoff_factor > 0.0 && self.backoff_factor < 1.0) {
            return invalid(
                "backoff_factor",
                self.backoff_factor.to_string(),
                "in (0, 1)",
            );
        }
        if self.growth_interval == 0 {
            return invalid("growth_interval", "0".into(), ">= 1");
        }
        let mut previous = None;
        for entry in &self.min_scale_schedule {
            let value = format!("{{step: {}, min_scale: {}}}", entry.step, entry.min_scale);
            if previous.is_some_and(|p| entry.step <= p) {
                return invalid("min_scale_schedule", value, "steps strictly increasing");
            }
            if !finite_positive(entry.min_scale) || entry.min_scale > self.max_scale {
                return invalid(
                    "min_scale_schedule",
                    value,
                    "minima finite, > 0 and <= max_scale",
                );
            }
            previous = Some(entry.step);
        }
        Ok(())
    }
}

/// The floor at `step` of a `schedule` (sorted by step) over the constant `min_scale`.
pub(crate) fn floor_at(min_scale: f32, schedule: &[MinScaleStep], step: u64) -> f32 {
    schedule
        .iter()
        .take_while(|entry| entry.step <= step)
        .last()
        .map_or(min_scale, |entry| entry.min_scale.max(min_scale))
}
