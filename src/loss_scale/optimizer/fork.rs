//! Clones for data-parallel replicas: each owns its scale, counters and FP8 state, and
//! takes over the device its module is on at its first step.

use std::sync::Arc;

use burn::tensor::backend::Backend;

use super::LossScaleOptimizer;
use crate::context::{self, ScaleSource};
use crate::loss_scale::state::Binding;

impl<O: Clone> Clone for LossScaleOptimizer<O> {
    /// A replica's copy, with state of its own (see [clones](Self#clones-one-per-data-parallel-replica)).
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::Linear;
    /// use burn::optim::AdamConfig;
    /// use burn_amp::{LossScaleConfig, MixedPrecision};
    ///
    /// type B = MixedPrecision<Autodiff<Flex>>;
    /// let optim = LossScaleConfig::new().init(AdamConfig::new().init::<B, Linear<B>>())?;
    /// let replica = optim.clone();
    /// assert_eq!(replica.loss_scale(), optim.loss_scale());
    /// # Ok::<(), burn_amp::LossScaleError>(())
    /// ```
    fn clone(&self) -> Self {
        let scale = self.scale.fork();
        let binding = self.binding.as_ref().map(|_| {
            let binding: Arc<dyn ScaleSource> = Arc::new(Binding(scale.clone()));
            binding
        });
        if let Some(binding) = &binding
            && self.default_bound
        {
            context::bind_default_scale(binding);
        }
        Self {
            inner: self.inner.clone(),
            scale,
            claims_device: binding.is_some(),
            binding,
            default_bound: self.default_bound,
            unscaled: self.unscaled,
            warned: false,
            replicas: self.replicas.clone(),
        }
    }
}

impl<O> LossScaleOptimizer<O> {
    /// A clone's first step: binds the device `module` is on to this clone, taking over the
    /// state the backward passes there made through the scale that served them.
    pub(super) fn take_over_device<B: Backend, M: burn::module::Module<B>>(&mut self, module: &M)
    where
        B::Device: 'static,
    {
        self.claims_device = false;
        let (Some(binding), Some(device)) = (&self.binding, module.devices().into_iter().next())
        else {
            return;
        };
        if let Some(previous) = context::take_over_device(binding, &device)
            && let Some(previous) = previous.as_any().downcast_ref::<Binding>()
        {
            previous
                .0
                .hand_over(context::device_key(&device), &self.scale);
        }
    }
}
