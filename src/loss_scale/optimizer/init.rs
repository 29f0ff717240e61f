//! `LossScaleConfig::init*`: a config made into an optimizer, in each mode.

use burn_tensor::backend::DeviceOps;

use super::LossScaleOptimizer;
use crate::context;
use crate::loss_scale::{LossScaleConfig, LossScaleError};

impl LossScaleConfig {
    /// Wraps `inner` with these settings, in automatic mode, bound as the default loss
    /// scale (see [`LossScaleOptimizer`]).
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::Linear;
    /// use burn::optim::AdamConfig;
    /// use burn_amp::{LossScaleConfig, LossScaleError, MixedPrecision};
    ///
    /// type B = MixedPrecision<Autodiff<Flex>>;
    /// let adam = || AdamConfig::new().init::<B, Linear<B>>();
    /// let optim = LossScaleConfig::new().with_initial_scale(1024.0).init(adam())?;
    /// assert_eq!(optim.loss_scale(), 1024.0);
    /// // A growth factor below 1 would shrink the scale when it should grow: refused.
    /// let err = LossScaleConfig::new().with_growth_factor(0.5).init(adam()).err().unwrap();
    /// assert!(matches!(err, LossScaleError::InvalidConfig { .. }));
    /// # Ok::<(), LossScaleError>(())
    /// ```
    ///
    /// # Errors
    /// [`LossScaleError::InvalidConfig`] when a number is out of range.
    pub fn init<O>(self, inner: O) -> Result<LossScaleOptimizer<O>, LossScaleError> {
        self.validate()?;
        let mut optim = LossScaleOptimizer::build(inner, self, false);
        if let Some(binding) = &optim.binding {
            context::bind_default_scale(binding);
            optim.default_bound = true;
        }
        Ok(optim)
    }

    /// Wraps `inner` with these settings, in automatic mode, bound to `devices`: backward
    /// passes on them apply this optimizer's scale for as long as it (or a clone) lives.
    /// Give every device the model trains on (Burn's multi-device training runs a backward
    /// pass on each).
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::Linear;
    /// use burn::optim::AdamConfig;
    /// use burn_amp::{LossScaleConfig, LossScaleError, MixedPrecision};
    ///
    /// type B = MixedPrecision<Autodiff<Flex>>;
    /// let device = burn::backend::flex::FlexDevice::default();
    /// let adam = || AdamConfig::new().init::<B, Linear<B>>();
    /// let optim = LossScaleConfig::new().init_on(adam(), &[device])?;
    /// // The device is taken while `optim` lives:
    /// let second = LossScaleConfig::new().init_on(adam(), &[device]);
    /// assert!(matches!(second, Err(LossScaleError::DeviceTaken { .. })));
    /// drop(optim);
    /// assert!(LossScaleConfig::new().init_on(adam(), &[device]).is_ok());
    /// # Ok::<(), LossScaleError>(())
    /// ```
    ///
    /// # Errors
    /// [`LossScaleError::InvalidConfig`] when a number is out of range,
    /// [`LossScaleError::DeviceTaken`] when a live automatic optimizer is bound to one of
    /// the devices; nothing is bound then.
    pub fn init_on<O, D: DeviceOps + 'static>(
        self,
        inner: O,
        devices: &[D],
    ) -> Result<LossScaleOptimizer<O>, LossScaleError> {
        self.validate()?;
        let optim = LossScaleOptimizer::build(inner, self, false);
        if let Some(binding) = &optim.binding {
            context::bind_scale_to_devices(binding, devices)
                .map_err(|taken| LossScaleError::DeviceTaken { device: taken.0 })?;
        }
        Ok(optim)
    }

    /// Wraps `inner` with these settings, in manual mode: call
    /// [`scale_loss`](LossScaleOptimizer::scale_loss) before `backward`.
    ///
    /// # Errors
    /// [`LossScaleError::InvalidConfig`] when a number is out of range.
    pub fn init_manual<O>(self, inner: O) -> Result<LossScaleOptimizer<O>, LossScaleError> {
        self.validate()?;
        Ok(LossScaleOptimizer::build(inner, self, true))
    }
}
