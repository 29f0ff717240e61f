//! `LossScaleOptimizer`: the public type, how it is made and what it reports, and Burn's
//! `Optimizer` for it. The step itself (unscale, check, apply or skip, move the scale, count)
//! is in `step.rs`.

use burn::module::AutodiffModule;
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Tensor};

use std::sync::Arc;

use super::grads::unscale;
use super::replicas::Replicas;
use super::state::{Binding, LossScale};
use super::{LossScaleConfig, LossScaleOptimizerRecord};
use crate::MixedPrecision;
use crate::collective::Collective;
use crate::context::{self, ScaleSource};

mod fork;
mod init;
mod load;
mod step;

/// Wraps a Burn optimizer with loss scaling, for training under `mixed_float16`.
///
/// f16 gradients below 2^-24 flush to zero. The loss is multiplied by a large scale before
/// the backward pass so that they do not, and the gradients are divided by it again, in
/// f32, before the update. A step whose gradients hold an inf or NaN is skipped — the
/// parameters and the inner optimizer's state are left untouched — and the scale is
/// halved; after `growth_interval` finite steps in a row it is doubled.
///
/// **Automatic mode** ([`LossScaleOptimizer::new`], [`LossScaleConfig::init`]): nothing
/// else changes in the training code. `loss.backward()` on a
/// [`MixedPrecision`] backend multiplies the loss by the current scale, the gradients come
/// out of `Gradients` already divided by it, and [`step`](Optimizer::step) checks them and
/// moves the scale. This is what Burn's `Learner` needs, since its `TrainStep` calls
/// `loss.backward()` itself. Under a policy that needs no scaling (`mixed_bfloat16`,
/// `float32`) the backward pass is not scaled and `step` hands the gradients straight to
/// the inner optimizer, without a check.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::{AdamConfig, GradientsParams, Optimizer};
/// use burn::tensor::Tensor;
/// use burn_amp::{LossScaleOptimizer, MixedPrecision, Policy, with_policy};
///
/// type B = MixedPrecision<Autodiff<Flex>>;
/// let device = Default::default();
/// with_policy(Policy::mixed_float16(), || {
///     let mut model: Linear<B> = LinearConfig::new(4, 2).init(&device);
///     let mut optim = LossScaleOptimizer::new(AdamConfig::new().init());
///
///     let x = Tensor::<B, 2>::ones([3, 4], &device);
///     let loss = model.forward(x).mean();
///     let grads = GradientsParams::from_grads(loss.backward(), &model); // true gradients
///     model = optim.step(1e-3, model, grads);
///     assert_eq!(optim.loss_scale(), 32768.0);
///     assert_eq!((optim.total_steps(), optim.skipped_steps()), (1, 0));
/// });
/// ```
///
/// **Manual mode** ([`LossScaleConfig::init_manual`]), Keras' custom-loop style: the
/// backward pass is left alone, [`scale_loss`](Self::scale_loss) scales the loss, and
/// [`step`](Optimizer::step) divides the gradients by the scale (unless
/// [`unscale_grads`](Self::unscale_grads) did so already, for clipping, say).
///
/// # Which backward passes an automatic optimizer scales
///
/// Binding is explicit, like policies, and lasts as long as the optimizer (or a clone):
///
/// - [`LossScaleConfig::init_on`] binds it to the devices given: backward passes on them
///   apply its scale. A device holds one such binding: a second live optimizer asking for
///   it gets [`LossScaleError::DeviceTaken`](crate::LossScaleError::DeviceTaken). Use it
///   with several models, or with Burn's multi-device training (pass every device the
///   model trains on).
/// - [`LossScaleOptimizer::new`] and [`LossScaleConfig::init`] bind it as a *default*:
///   backward passes on devices with no binding of their own apply the most recently
///   created default that is still alive. Creating or dropping a manual optimizer, a
///   device-bound one, or an older default never changes which scale they apply; dropping
///   the newest default hands them back to the one created before it.
///
/// Under a policy that needs no scaling the bound optimizer is asked nothing and the loss is
/// not scaled. Manual mode binds nothing.
///
/// # Clones: one per data-parallel replica
///
/// A clone owns its scale, counters and FP8 state (copied from the original's at the time):
/// Burn's DDP strategy clones the optimizer once per device, and each replica must move its
/// own scale once per step. An automatic clone of a default-bound optimizer is bound as a
/// default too; at its first step, a clone takes over the binding of the device its module
/// is on (with the state the backward passes on that device made so far), so from then on
/// backward passes there apply the clone's scale. A [`handle`](Self::handle) taken from
/// the original keeps following the original.
pub struct LossScaleOptimizer<O> {
    inner: O,
    scale: LossScale,
    /// The binding backward passes find this optimizer's scale through; `None` in manual
    /// mode. It ends when the optimizer is dropped.
    binding: Option<Arc<dyn ScaleSource>>,
    /// Bound as a default (`new`, `LossScaleConfig::init`), not to devices.
    default_bound: bool,
    /// A clone that has not yet taken over its module's device.
    claims_device: bool,
    unscaled: bool,
    /// Whether the "scale not applied" warning was given (once per optimizer).
    warned: bool,
    /// The data-parallel replicas this optimizer reduces each step's gradients over.
    replicas: Option<Replicas>,
}

impl<O> LossScaleOptimizer<O> {
    /// Wraps `inner` with dynamic loss scaling (Keras' defaults), in automatic mode, bound
    /// as the default loss scale (see [which backward passes it
    /// scales](Self#which-backward-passes-an-automatic-optimizer-scales)).
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::Linear;
    /// use burn::optim::AdamConfig;
    /// use burn_amp::{LossScaleOptimizer, MixedPrecision};
    ///
    /// type B = MixedPrecision<Autodiff<Flex>>;
    /// let optim = LossScaleOptimizer::new(AdamConfig::new().init::<B, Linear<B>>());
    /// assert_eq!(optim.loss_scale(), 32768.0); // 2^15, Keras' initial scale
    /// assert_eq!((optim.skipped_steps(), optim.total_steps()), (0, 0));
    /// assert!(!optim.is_manual());
    /// ```
    pub fn new(inner: O) -> Self {
        let mut optim = Self::build(inner, LossScaleConfig::new(), false);
        if let Some(binding) = &optim.binding {
            context::bind_default_scale(binding);
            optim.default_bound = true;
        }
        optim
    }

    pub(super) fn build(inner: O, config: LossScaleConfig, manual: bool) -> Self {
        let scale = LossScale::new(config);
        let binding = (!manual).then(|| {
            let binding: Arc<dyn ScaleSource> = Arc::new(Binding(scale.clone()));
            binding
        });
        Self {
            inner,
            scale,
            binding,
            default_bound: false,
            claims_device: false,
            unscaled: false,
            warned: false,
            replicas: None,
        }
    }

    /// Makes each [`step`](Optimizer::step) a data-parallel one over `collective`'s
    /// replicas (each a process, say, with its own copy of the model and optimizer): the
    /// step compresses its gradients (`grads=aps`, each layer's scale from the amax reduced
    /// over the replicas), averages them over the replicas in one call, then checks the
    /// averages for an overflow; it also reduces the FP8 amax histories with MAX. Every
    /// replica thus skips or applies the same step, moves its scale alike, quantizes with the
    /// same delayed scales, and keeps parameters identical to the others'.
    ///
    /// `R` is the raw backend under the model's (`Flex` for `MixedPrecision<Autodiff<Flex>>`).
    /// A collective that fails (a peer gone, a timeout) makes `step` panic with its
    /// message; [`try_step`](Self::try_step) returns it instead.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::{AdamConfig, GradientsParams};
    /// use burn::tensor::Tensor;
    /// use burn_amp::collective::SingleReplica;
    /// use burn_amp::{LossScaleConfig, MixedPrecision, Policy, with_policy};
    ///
    /// type B = MixedPrecision<Autodiff<Flex>>;
    /// let device = Default::default();
    /// with_policy(Policy::mixed_float16(), || {
    ///     let model: Linear<B> = LinearConfig::new(4, 2).init(&device);
    ///     // MpiCollective::world(timeout) (feature mpi) in a real run, under mpirun.
    ///     let mut optim = LossScaleConfig::new()
    ///         .init_manual(AdamConfig::new().init())?
    ///         .with_collective::<Flex>(Arc::new(SingleReplica));
    ///     let x = Tensor::<B, 2>::ones([3, 4], &device);
    ///     let loss = optim.scale_loss(model.forward(x).mean());
    ///     let grads = GradientsParams::from_grads(loss.backward(), &model);
    ///     let model = optim.try_step(1e-3, model, grads)?;
    ///     assert_eq!(optim.total_steps(), 1);
    ///     # let _ = model;
    ///     Ok::<(), Box<dyn std::error::Error>>(())
    /// })?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_collective<R: Backend>(mut self, collective: Arc<dyn Collective<R>>) -> Self {
        self.replicas = Some(Replicas::new(collective, true));
        self
    }

    /// For replicas whose gradients the engine reduces itself (Burn's DDP strategy, during
    /// `backward`): each step reduces only the FP8 amax histories over `collective` (MAX),
    /// so every replica quantizes with the same delayed scales. Give it a
    /// `DdpCollective` (feature `ddp`) over the devices of `ExecutionStrategy::ddp`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::Linear;
    /// use burn::optim::AdamConfig;
    /// use burn_amp::collective::SingleReplica;
    /// use burn_amp::{LossScaleOptimizer, MixedPrecision};
    ///
    /// type B = MixedPrecision<Autodiff<Flex>>;
    /// let optim = LossScaleOptimizer::new(AdamConfig::new().init::<B, Linear<B>>())
    ///     .with_amax_collective::<Flex>(Arc::new(SingleReplica));
    /// # drop(optim);
    /// ```
    pub fn with_amax_collective<R: Backend>(mut self, collective: Arc<dyn Collective<R>>) -> Self {
        self.replicas = Some(Replicas::new(collective, false));
        self
    }

    /// The current loss scale.
    pub fn loss_scale(&self) -> f32 {
        self.scale.scale()
    }

    /// Steps skipped so far because their gradients were not finite.
    pub fn skipped_steps(&self) -> u64 {
        self.scale.skipped_steps()
    }

    /// Steps taken or skipped so far.
    pub fn total_steps(&self) -> u64 {
        self.scale.total_steps()
    }

    /// The state of delayed and exponent-bias FP8 policies (amax histories, scales, biases)
    /// on the devices this optimizer is bound to; saved in its record. Print it for the
    /// per-site report.
    pub fn fp8_history(&self) -> &crate::fp8::Fp8History {
        self.scale.fp8_history()
    }

    /// A handle on the scale and its counters, e.g. for [`LossScaleMetric`](crate::LossScaleMetric).
    /// Once the optimizer is cloned for data-parallel replicas (Burn's DDP), the handle
    /// reports the first live replica's, since those are the ones that step.
    pub fn handle(&self) -> LossScale {
        self.scale.following()
    }

    /// The wrapped optimizer.
    pub fn inner(&self) -> &O {
        &self.inner
    }

    /// Whether this optimizer is in manual mode.
    pub fn is_manual(&self) -> bool {
        self.binding.is_none()
    }

    /// Multiplies `loss` by the current scale, in f32 (Keras' `scale_loss`). In automatic
    /// mode the backward pass scales the loss itself, so the loss is returned as it is.
    pub fn scale_loss<B: Backend, const D: usize>(&self, loss: Tensor<B, D>) -> Tensor<B, D> {
        if !self.is_manual() {
            return loss;
        }
        let loss = match FloatDType::from(loss.dtype()) {
            FloatDType::F16 | FloatDType::BF16 => loss.cast(FloatDType::F32),
            _ => loss,
        };
        loss.mul_scalar(self.scale.scale())
    }

    /// Divides the gradients by the current scale (Keras' `get_unscaled_gradients`), so
    /// they can be clipped or inspected before [`step`](Optimizer::step), which then does
    /// not divide them again. In automatic mode gradients are already unscaled, and are
    /// returned as they are.
    pub fn unscale_grads<B: AutodiffBackend, M: AutodiffModule<B>>(
        &mut self,
        grads: GradientsParams,
        module: &M,
    ) -> GradientsParams {
        if !self.is_manual() || self.unscaled {
            return grads;
        }
        self.unscaled = true;
        unscale::<B, M>(grads, module, self.scale.scale())
    }
}

/// The raw backend under `MixedPrecision<B>`'s gradients (their primitives are its).
type Inner<B> = <B as AutodiffBackend>::InnerBackend;

impl<O, M, B> Optimizer<M, MixedPrecision<B>> for LossScaleOptimizer<O>
where
    B: AutodiffBackend,
    M: AutodiffModule<MixedPrecision<B>>,
    O: Optimizer<M, MixedPrecision<B>>,
{
    type Record = LossScaleOptimizerRecord<O::Record>;

    /// Under a loss scale: skips a step whose gradients overflowed and moves the scale.
    /// Automatic mode decides on the device: with [`FusedAdamW`](crate::FusedAdamW) inside,
    /// nothing is read back; with any other optimizer, the step's one read (the overflow
    /// count) decides whether it runs.
    ///
    /// # Panics
    /// When the optimizer has a [collective](LossScaleOptimizer::with_collective) and it
    /// fails, with its message ([`try_step`](LossScaleOptimizer::try_step) returns it).
    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        self.try_step(lr, module, grads)
            .unwrap_or_else(|err| panic!("burn-amp: {err}"))
    }

    /// # Panics
    /// When the optimizer has a [collective](LossScaleOptimizer::with_collective): reduce
    /// the workers' gradients into one [`GradientsParams`] and call `step`.
    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        assert!(
            self.replicas.is_none(),
            "burn-amp: a LossScaleOptimizer with a collective steps one replica's gradients \
             (step), not several devices' (step_multi)"
        );
        self.step_multi_local(lr, module, grads)
    }

    fn to_record(&self) -> Self::Record {
        LossScaleOptimizerRecord {
            inner: self.inner.to_record(),
            scale: self.scale.scale(),
            good_steps: self.scale.good_steps(),
            skipped_steps: self.scale.skipped_steps(),
            total_steps: self.scale.total_steps(),
            min_scale_schedule: self.scale.min_scale_schedule(),
            fp8: self.scale.fp8_history().to_record(),
        }
    }

    /// Loads a record after checking it ([`try_load_record`](LossScaleOptimizer::try_load_record)).
    ///
    /// # Panics
    /// When the record is invalid (a non-finite, zero, negative or out-of-range scale,
    /// impossible counters), with the message of
    /// [`LossScaleError::InvalidRecord`](crate::LossScaleError::InvalidRecord): training on
    /// from a poisoned checkpoint would skip every step or scale by a negative number.
    fn load_record(mut self, record: Self::Record) -> Self {
        if let Err(err) = self.try_load_record::<M, MixedPrecision<B>>(record) {
            panic!("{err}");
        }
        self
    }
}
