//! The loss-scale step, all of it: one worker's gradients (`try_step`, with the replicas'
//! reduction first when there is a collective) or several devices' (`step_multi`) are
//! unscaled, checked, applied, skipped or passed through by what the backward passes did;
//! the scale moves (on the host in manual mode, on the devices in automatic mode) and the
//! step is counted, once, at the end of [`LossScaleOptimizer::finish_step`].

use burn::module::AutodiffModule;
use burn::optim::adaptor::GradAdaptor;
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorPrimitive};
use burn_tensor::ops::{FloatTensor, FloatTensorOps};

use super::{Inner, LossScaleOptimizer};
use crate::MixedPrecision;
use crate::backend::scale;
use crate::context::{self, DeviceSlot};
use crate::cost;
use crate::fp8::GradientCompression;
use crate::loss_scale::LossScaleError;
use crate::loss_scale::compress::compress;
use crate::loss_scale::grads::{all_finite, nonfinite_count, unscale};
use crate::loss_scale::replicas;
use crate::loss_scale::state::Pending;
use crate::optim::as_fused;

/// The gradients of one step: one worker's, or one per device (Burn's MultiDevice strategy).
pub(super) enum StepGrads {
    One(GradientsParams),
    Many(MultiGradientsParams),
}

impl StepGrads {
    fn all_finite<B: AutodiffBackend, M: AutodiffModule<MixedPrecision<B>>>(
        &self,
        module: &M,
    ) -> bool {
        match self {
            Self::One(grads) => all_finite::<B, M>(grads, module),
            Self::Many(grads) => grads
                .grads
                .iter()
                .all(|(g, _)| all_finite::<B, M>(g, module)),
        }
    }

    /// The count of non-finite values over every gradient, on the first device; `None`
    /// when there is no gradient.
    fn nonfinite_count<B: AutodiffBackend, M: AutodiffModule<MixedPrecision<B>>>(
        &self,
        module: &M,
    ) -> Option<FloatTensor<Inner<B>>> {
        match self {
            Self::One(grads) => nonfinite_count::<B, M>(grads, module),
            Self::Many(grads) => grads
                .grads
                .iter()
                .filter_map(|(g, _)| nonfinite_count::<B, M>(g, module))
                .reduce(|a, b| {
                    let device = Inner::<B>::float_device(&a);
                    Inner::<B>::float_add(a, Inner::<B>::float_to_device(b, &device))
                }),
        }
    }

    /// Compressed as the policy says (`grads=aps`), all workers with the same scales.
    fn compressed<B: AutodiffBackend, M: AutodiffModule<MixedPrecision<B>>>(
        self,
        module: &M,
    ) -> Self {
        let how = compression(module);
        match self {
            Self::One(grads) => {
                let mut workers = [grads];
                compress::<B, M>(&mut workers, module, how);
                let [grads] = workers;
                Self::One(grads)
            }
            Self::Many(grads) => {
                let (mut workers, devices): (Vec<_>, Vec<_>) = grads.grads.into_iter().unzip();
                compress::<B, M>(&mut workers, module, how);
                Self::Many(MultiGradientsParams {
                    grads: workers.into_iter().zip(devices).collect(),
                })
            }
        }
    }

    /// The inner optimizer's step on these gradients.
    fn step<B, M, O>(self, inner: &mut O, lr: LearningRate, module: M) -> M
    where
        B: AutodiffBackend,
        M: AutodiffModule<MixedPrecision<B>>,
        O: Optimizer<M, MixedPrecision<B>>,
    {
        match self {
            Self::One(grads) => inner.step(lr, module, grads),
            Self::Many(grads) => inner.step_multi(lr, module, grads),
        }
    }
}

impl From<StepGrads> for GradAdaptor {
    fn from(grads: StepGrads) -> Self {
        match grads {
            StepGrads::One(grads) => grads.into(),
            StepGrads::Many(grads) => grads.into(),
        }
    }
}

impl<O> LossScaleOptimizer<O> {
    /// [`step`](Optimizer::step), returning a failed collective's error instead of
    /// panicking (see [`with_collective`](Self::with_collective)). The module is then lost
    /// with the step: the replicas cannot agree on it any more, so end the run (and resume
    /// every replica from the last checkpoint).
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::{GradientsParams, SgdConfig};
    /// use burn::tensor::Tensor;
    /// use burn_amp::{LossScaleConfig, MixedPrecision};
    ///
    /// type B = MixedPrecision<Autodiff<Flex>>;
    /// let device = Default::default();
    /// let model: Linear<B> = LinearConfig::new(4, 2).init(&device);
    /// let mut optim = LossScaleConfig::new().init_manual(SgdConfig::new().init())?;
    /// let loss = model.forward(Tensor::<B, 2>::ones([3, 4], &device)).mean();
    /// let grads = GradientsParams::from_grads(optim.scale_loss(loss).backward(), &model);
    /// let grads = optim.unscale_grads(grads, &model);
    /// let model = optim.try_step(0.1, model, grads)?;
    /// assert_eq!(optim.total_steps(), 1);
    /// # let _ = model;
    /// # Ok::<(), burn_amp::LossScaleError>(())
    /// ```
    ///
    /// # Errors
    /// [`LossScaleError::Collective`] with the collective's error;
    /// [`LossScaleError::Record`] when a loaded [`FusedAdamW`](crate::FusedAdamW) record is
    /// not this model's.
    pub fn try_step<B, M>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradientsParams,
    ) -> Result<M, LossScaleError>
    where
        B: AutodiffBackend,
        M: AutodiffModule<MixedPrecision<B>>,
        O: Optimizer<M, MixedPrecision<B>>,
    {
        if self.claims_device {
            self.take_over_device::<MixedPrecision<B>, M>(&module);
        }
        let mut grads = self.unscale_grads::<MixedPrecision<B>, M>(grads, &module);
        // Across replicas the gradients arrive compressed and averaged.
        let mut compress = true;
        if let Some(replicas) = &self.replicas {
            let step = self.scale.total_steps() + 1;
            let failed = |source| LossScaleError::Collective { step, source };
            let collective = replicas.get::<Inner<B>>().map_err(failed)?;
            if replicas.gradients {
                grads =
                    replicas::reduce::<B, M>(grads, &module, compression(&module), &**collective)
                        .map_err(failed)?;
                compress = false;
            }
            self.scale
                .fp8_history()
                .all_reduce_amax::<Inner<B>>(&**collective)
                .map_err(failed)?;
        }
        self.finish_step::<B, M>(lr, module, StepGrads::One(grads), compress)
    }

    pub(super) fn step_multi_local<B, M>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: MultiGradientsParams,
    ) -> M
    where
        B: AutodiffBackend,
        M: AutodiffModule<MixedPrecision<B>>,
        O: Optimizer<M, MixedPrecision<B>>,
    {
        let mut grads = grads;
        if self.is_manual() && !self.unscaled {
            let scale = self.scale.scale();
            for (g, _) in grads.grads.iter_mut() {
                *g = unscale::<MixedPrecision<B>, M>(core::mem::take(g), &module, scale);
            }
        }
        self.finish_step::<B, M>(lr, module, StepGrads::Many(grads), true)
            .unwrap_or_else(|err| panic!("burn-amp: {err}"))
    }

    /// The step once the gradients are unscaled (and, across replicas, reduced): under a
    /// policy that needs no scaling they go straight to the inner optimizer; in manual mode
    /// the host checks them and moves its scale; in automatic mode the devices' scales move
    /// by the step's non-finite count, and the skip is decided on the device (FusedAdamW)
    /// or from that count read back. `compress`: whether the gradients still need
    /// compressing (`grads=aps`; the replica path compressed them before reducing). The
    /// step is counted at the end, here only.
    fn finish_step<B, M>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: StepGrads,
        compress: bool,
    ) -> Result<M, LossScaleError>
    where
        B: AutodiffBackend,
        M: AutodiffModule<MixedPrecision<B>>,
        O: Optimizer<M, MixedPrecision<B>>,
    {
        let compressed = |grads: StepGrads, module: &M| {
            if compress {
                grads.compressed::<B, M>(module)
            } else {
                grads
            }
        };
        let (module, checked) = match self.pending() {
            Pending::NotNeeded => (
                compressed(grads, &module).step(&mut self.inner, lr, module),
                None,
            ),
            _ if self.is_manual() => {
                let finite = grads.all_finite::<B, M>(&module);
                let module = if finite {
                    compressed(grads, &module).step(&mut self.inner, lr, module)
                } else {
                    module
                };
                (module, Some(finite))
            }
            _ => {
                let slots = self.slots();
                match grads.nonfinite_count::<B, M>(&module) {
                    // No gradient to apply.
                    None => (grads.step(&mut self.inner, lr, module), None),
                    Some(found) => {
                        let grads = compressed(grads, &module);
                        let module = match as_fused::<O, M, MixedPrecision<B>>(&mut self.inner) {
                            // The skip is decided on the device: nothing is read back.
                            Some(fused) => {
                                fused.run(lr, module, grads.into(), Some(found.clone()))?
                            }
                            None => {
                                if self.finite_on_host::<Inner<B>>(&found, &slots) {
                                    grads.step(&mut self.inner, lr, module)
                                } else {
                                    module
                                }
                            }
                        };
                        self.move_scales::<Inner<B>>(&found, &slots);
                        (module, None)
                    }
                }
            }
        };
        self.count_step(checked);
        Ok(module)
    }

    /// What the step must do, from what backward passes did since the last one.
    fn pending(&mut self) -> Pending {
        self.unscaled = false;
        let pending = if self.is_manual() {
            Pending::Scaled
        } else {
            self.scale.take_pending()
        };
        if pending == Pending::None && !self.is_manual() && !self.warned {
            self.warned = true;
            log::warn!(
                "burn-amp: no backward pass applied this LossScaleOptimizer's scale since its \
                 last step: another automatic optimizer is bound to the device (init_on) or a \
                 newer default one is alive. Gradients are still correct, but this \
                 optimizer's overflow checks and scale do not follow them; bind each \
                 optimizer to its own device, or use manual mode"
            );
        }
        pending
    }

    /// Counts the step, the one place steps are counted; `checked`: the finiteness the host
    /// checked in manual mode, by which the host's scale then moves (in automatic mode the
    /// devices' scales moved already).
    fn count_step(&mut self, checked: Option<bool>) {
        let config = &self.scale.shared.config;
        let schedule = self.scale.min_scale_schedule();
        let mut state = self.scale.lock();
        let Some(finite) = checked else {
            state.count_step();
            return;
        };
        let at_floor = state.scale <= config.min_scale;
        state.update(finite, config, &schedule);
        if !finite && at_floor {
            warn_at_floor(config.min_scale, state.skipped_steps);
        }
    }

    /// The devices' states.
    fn slots(&self) -> Vec<DeviceSlot> {
        self.scale.slots().into_iter().map(|(_, s)| s).collect()
    }

    /// Moves every device's scale by the rule, from the step's count (on the device).
    fn move_scales<I: Backend>(&self, found: &FloatTensor<I>, slots: &[DeviceSlot]) {
        let rule = self.scale.rule();
        for slot in slots {
            scale::existing::<I, _>(slot, |s| {
                let device = I::float_device(&s.state);
                let found = I::float_to_device(found.clone(), &device);
                s.state = scale::step_rule::<I>(s.state.clone(), found, &rule);
            });
        }
    }

    /// Whether the step's gradients were finite: the count and the first device's state
    /// read back together (the step's one read), for the warning when the scale can fall
    /// no further.
    fn finite_on_host<I: Backend>(&self, found: &FloatTensor<I>, slots: &[DeviceSlot]) -> bool {
        let state = slots
            .first()
            .and_then(|slot| scale::existing::<I, _>(slot, |s| s.state.clone()));
        let mut parts = vec![found.clone()];
        if let Some(state) = state {
            let device = I::float_device(found);
            parts.push(I::float_to_device(state, &device));
        }
        let values = cost::read(|| {
            Tensor::<I, 1>::from_primitive(TensorPrimitive::Float(I::float_cat(parts, 0)))
                .into_data()
                .convert::<f32>()
                .to_vec::<f32>()
                .expect("f32 values")
        });
        let finite = values[0] == 0.0;
        let min = self.scale.config().min_scale;
        if let [_, scale, _, skipped] = values[..]
            && !finite
            && scale <= min
        {
            warn_at_floor(min, skipped as u64 + 1);
        }
        finite
    }
}

fn warn_at_floor(min_scale: f32, skipped: u64) {
    log::warn!(
        "burn-amp: gradients are not finite at the minimum loss scale {min_scale} ({skipped} \
         steps skipped so far): the model itself produces inf or NaN"
    );
}

/// The gradient compression of the policy in force on `module`'s first device.
fn compression<B: AutodiffBackend, M: AutodiffModule<B>>(module: &M) -> GradientCompression {
    module
        .devices()
        .first()
        .map_or(GradientCompression::None, |d| {
            context::current(d).gradient_compression()
        })
}
