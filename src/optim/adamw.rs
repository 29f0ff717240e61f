//! [`FusedAdamW`]: Burn's AdamW, one pass per parameter.

use core::marker::PhantomData;
use hashbrown::HashMap;

use burn::config::Config;
use burn::module::{AutodiffModule, ModuleMapper, Param, ParamId};
use burn::optim::adaptor::GradAdaptor;
use burn::optim::grad_clipping::{GradientClipping, GradientClippingConfig};
use burn::optim::record::AdaptorRecord;
use burn::optim::{AdamW, GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorPrimitive};
use burn_amp_kernels::cpu::optim::AdamwStep;
use burn_tensor::ops::{FloatTensor, FloatTensorOps};
use burn_tensor::{FloatDType, TensorMetadata};

use super::dispatch;
use super::paths;
use super::record::{self, RecordError};
use super::state::{ParamState, step_count};
use crate::cpu::AdamwState;

/// [`FusedAdamW`]'s configuration: Burn's `AdamWConfig` settings and defaults (`beta_1`
/// 0.9, `beta_2` 0.999, `epsilon` 1e-5, `weight_decay` 1e-4, gradient clipping as Burn's,
/// applied before the fused update in passes of its own; AMSGrad and cautious weight decay
/// are not offered). `weight_decay` 0 is Adam (Burn's `Adam` folds its bias corrections
/// differently: the same values within f32 rounding).
#[derive(Config, Debug)]
pub struct FusedAdamWConfig {
    /// The first moment's decay.
    #[config(default = 0.9)]
    beta_1: f32,
    /// The second moment's decay.
    #[config(default = 0.999)]
    beta_2: f32,
    /// Added to the root of the second moment, for numerical stability.
    #[config(default = 1e-5)]
    epsilon: f32,
    /// Decoupled weight decay, applied as `p * (1 - lr * weight_decay)`.
    #[config(default = 1e-4)]
    weight_decay: f32,
    /// Each gradient clipped as Burn's optimizers clip it, before the update.
    grad_clipping: Option<GradientClippingConfig>,
}

impl FusedAdamWConfig {
    /// The optimizer, for module `M` on backend `B`.
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::optim::{GradientsParams, Optimizer};
    /// use burn::tensor::Tensor;
    /// use burn_amp::FusedAdamWConfig;
    ///
    /// type B = Autodiff<Flex>;
    /// let device = Default::default();
    /// let mut model: Linear<B> = LinearConfig::new(4, 2).init(&device);
    /// let mut optim = FusedAdamWConfig::new().init(); // as AdamWConfig::new().init()
    /// let loss = model.forward(Tensor::<B, 2>::ones([3, 4], &device)).mean();
    /// let grads = GradientsParams::from_grads(loss.backward(), &model);
    /// model = optim.step(1e-3, model, grads);
    /// ```
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(&self) -> FusedAdamW<M, B> {
        FusedAdamW {
            config: self.clone(),
            states: HashMap::new(),
            loaded: false,
            _module: PhantomData,
        }
    }

    /// Adam: these settings without weight decay.
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::Linear;
    /// use burn_amp::FusedAdamWConfig;
    ///
    /// type B = Autodiff<Flex>;
    /// let config = FusedAdamWConfig::adam().with_epsilon(1e-8);
    /// assert!(format!("{config:?}").contains("weight_decay: 0.0"));
    /// let adam = config.init::<B, Linear<B>>();
    /// ```
    pub fn adam() -> Self {
        Self::new().with_weight_decay(0.0)
    }

    fn step(&self, lr: LearningRate) -> AdamwStep {
        AdamwStep::new(
            lr,
            self.beta_1,
            self.beta_2,
            self.epsilon,
            self.weight_decay,
        )
    }
}

/// Burn's AdamW with each parameter's update fused into one pass (see [`crate::optim`]).
///
/// Its record is Burn's `AdamW` record, so checkpoints move between the two both ways:
/// `optim.load_record(adamw.to_record())`.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
/// use burn::tensor::Tensor;
/// use burn_amp::FusedAdamWConfig;
///
/// type B = Autodiff<Flex>;
/// let device = Default::default();
/// let mut model: Linear<B> = LinearConfig::new(4, 2).init(&device);
/// let mut burns = AdamWConfig::new().init::<B, Linear<B>>();
/// let loss = model.forward(Tensor::<B, 2>::ones([3, 4], &device)).mean();
/// model = burns.step(1e-3, model.clone(), GradientsParams::from_grads(loss.backward(), &model));
/// // Continue with the fused one, from Burn's moments and step counts.
/// let mut fused = FusedAdamWConfig::new().init::<B, Linear<B>>();
/// fused = fused.load_record(burns.to_record());
/// let loss = model.forward(Tensor::<B, 2>::ones([3, 4], &device)).mean();
/// model = fused.step(1e-3, model.clone(), GradientsParams::from_grads(loss.backward(), &model));
/// ```
pub struct FusedAdamW<M, B: AutodiffBackend> {
    config: FusedAdamWConfig,
    pub(super) states: HashMap<ParamId, ParamState<B::InnerBackend>>,
    /// States loaded from a record and not yet checked against the module's parameters
    /// (the first step after loading does it, since loading does not see the module).
    loaded: bool,
    _module: PhantomData<M>,
}

impl<M, B: AutodiffBackend> Clone for FusedAdamW<M, B> {
    fn clone(&self) -> Self {
        Self {
            config: self.config.clone(),
            states: self.states.clone(),
            loaded: self.loaded,
            _module: PhantomData,
        }
    }
}

impl<M, B: AutodiffBackend> FusedAdamW<M, B> {
    /// The settings.
    pub fn config(&self) -> &FusedAdamWConfig {
        &self.config
    }
}

impl<M: AutodiffModule<B>, B: AutodiffBackend> FusedAdamW<M, B> {
    /// One step over every parameter that has a gradient; with `found` (a one-value
    /// tensor: the step's count of non-finite gradient values, on the first device), a
    /// step with `found > 0` leaves every parameter and moment as it was, decided on the
    /// device.
    ///
    /// # Errors
    /// [`RecordError::NotThisModel`] at the first step after a record was loaded whose
    /// moments do not have their parameter's shape (nothing is changed then).
    pub(crate) fn run(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: GradAdaptor,
        found: Option<FloatTensor<B::InnerBackend>>,
    ) -> Result<M, RecordError> {
        if self.loaded {
            self.check_loaded(&module)?;
        }
        let step = self.config.step(lr);
        let mut mapper = Mapper::<B> {
            states: &mut self.states,
            grads,
            step,
            found,
            clipping: self.config.grad_clipping.as_ref().map(|c| c.init()),
        };
        Ok(module.map(&mut mapper))
    }

    /// The loaded states against `module`'s parameters: each moment of its parameter's shape.
    fn check_loaded(&mut self, module: &M) -> Result<(), RecordError> {
        // States keyed to no parameter of this module stay unused, as Burn's do.
        for (id, place) in paths::param_places::<M, B>(module) {
            let Some(state) = self.states.get(&id) else {
                continue;
            };
            let found = state.state.m.shape().as_slice().to_vec();
            if found != place.shape {
                return Err(RecordError::NotThisModel {
                    param: place.path,
                    id: id.to_string(),
                    expected: place.shape,
                    found,
                });
            }
        }
        self.loaded = false;
        Ok(())
    }

    /// Loads a record after checking it: every state's step count at least 1, moments of
    /// one shape, no AMSGrad moment (not fused); on error nothing is changed.
    ///
    /// # Errors
    /// [`RecordError`] naming the parameter and what is wrong.
    pub fn try_load_record(
        &mut self,
        record: HashMap<ParamId, AdaptorRecord<AdamW, B>>,
    ) -> Result<(), RecordError> {
        let mut states = HashMap::new();
        for (id, rec) in record {
            states.insert(id, record::from_burn::<B>(id, rec)?);
        }
        self.states = states;
        self.loaded = true;
        Ok(())
    }
}

struct Mapper<'a, B: AutodiffBackend> {
    states: &'a mut HashMap<ParamId, ParamState<B::InnerBackend>>,
    grads: GradAdaptor,
    step: AdamwStep,
    found: Option<FloatTensor<B::InnerBackend>>,
    clipping: Option<GradientClipping>,
}

impl<B: AutodiffBackend> ModuleMapper<B> for Mapper<'_, B> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        type I<B> = <B as AutodiffBackend>::InnerBackend;
        let (id, tensor, mapper) = param.consume();
        let Some((grad, device)) = self.grads.remove::<I<B>, D>(id) else {
            return Param::from_mapped_value(id, tensor, mapper);
        };
        let grad = match &self.clipping {
            Some(clipping) => clipping.clip_gradient(grad),
            None => grad,
        };
        let require_grad = tensor.is_require_grad();
        let tensor = if tensor.device() != device {
            tensor.to_device(&device)
        } else {
            tensor
        };
        let param = tensor.inner().into_primitive().tensor();
        let grad = grad.into_primitive().tensor();
        let state = match self.states.remove(&id) {
            Some(s) => move_to::<I<B>>(s.state, &device),
            None => fresh::<I<B>>(&param, &grad, &device),
        };
        let found = self.found.as_ref().map(|f| {
            if I::<B>::float_device(f) == device {
                f.clone()
            } else {
                I::<B>::float_to_device(f.clone(), &device)
            }
        });
        let (param, state) =
            dispatch::adamw::<I<B>>((param, grad, state), &self.step, found.as_ref());
        self.states.insert(id, ParamState { state });
        let mut tensor =
            Tensor::<B, D>::from_inner(Tensor::from_primitive(TensorPrimitive::Float(param)));
        if require_grad {
            tensor = tensor.require_grad();
        }
        Param::from_mapped_value(id, tensor, mapper)
    }
}

/// A new parameter's state: zero moments in the gradient's dtype (as Burn's), step 0 in
/// f32 whatever the policy.
fn fresh<I: Backend>(
    param: &FloatTensor<I>,
    grad: &FloatTensor<I>,
    device: &I::Device,
) -> AdamwState<FloatTensor<I>> {
    let dtype = FloatDType::from(grad.dtype());
    AdamwState {
        m: I::float_zeros(param.shape(), device, dtype),
        v: I::float_zeros(param.shape(), device, dtype),
        time: step_count::<I>(0, device),
    }
}

fn move_to<I: Backend>(
    s: AdamwState<FloatTensor<I>>,
    device: &I::Device,
) -> AdamwState<FloatTensor<I>> {
    if I::float_device(&s.m) == *device {
        return s;
    }
    AdamwState {
        m: I::float_to_device(s.m, device),
        v: I::float_to_device(s.v, device),
        time: I::float_to_device(s.time, device),
    }
}

impl<M, B> Optimizer<M, B> for FusedAdamW<M, B>
where
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    type Record = HashMap<ParamId, AdaptorRecord<AdamW, B>>;

    /// # Panics
    /// With [`RecordError::NotThisModel`]'s message at the first step after loading a
    /// record that is not this model's.
    fn step(&mut self, lr: LearningRate, module: M, grads: GradientsParams) -> M {
        self.run(lr, module, grads.into(), None)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    fn step_multi(&mut self, lr: LearningRate, module: M, grads: MultiGradientsParams) -> M {
        self.run(lr, module, grads.into(), None)
            .unwrap_or_else(|err| panic!("{err}"))
    }

    /// Burn's `AdamW` record (reads each parameter's step count back from its device).
    fn to_record(&self) -> Self::Record {
        self.states
            .iter()
            .map(|(id, s)| (*id, record::to_burn::<B>(&s.state)))
            .collect()
    }

    /// Loads Burn's `AdamW` record (one of [`FusedAdamW`]'s own, or of Burn's `AdamW`).
    ///
    /// # Panics
    /// With [`RecordError`]'s message when the record does not check out
    /// ([`try_load_record`](FusedAdamW::try_load_record) returns it instead).
    fn load_record(mut self, record: Self::Record) -> Self {
        if let Err(err) = self.try_load_record(record) {
            panic!("{err}");
        }
        self
    }
}

/// `record`, an optimizer `O`'s, as [`FusedAdamW`]'s record type when `O` is a `FusedAdamW`
/// of `M` on `B` (compared as in [`as_fused`]); `Err(record)` otherwise.
#[allow(clippy::type_complexity)]
pub(crate) fn fused_record<O, M, B>(
    record: O::Record,
) -> Result<HashMap<ParamId, AdaptorRecord<AdamW, B>>, O::Record>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: Optimizer<M, B>,
{
    if typeid::of::<O>() != typeid::of::<FusedAdamW<M, B>>() {
        return Err(record);
    }
    let record = core::mem::ManuallyDrop::new(record);
    // SAFETY: `O` is `FusedAdamW<M, B>` up to lifetimes, so `O::Record` is its record type,
    // `HashMap<ParamId, AdaptorRecord<AdamW, B>>` (no lifetime in it: Burn's backends are
    // `'static`); the value is read once and not dropped as `O::Record`.
    Ok(unsafe {
        core::ptr::read(
            (&*record as *const O::Record).cast::<HashMap<ParamId, AdaptorRecord<AdamW, B>>>(),
        )
    })
}

/// `optim` as a [`FusedAdamW`] of `M` on `B`, if it is one: how
/// [`LossScaleOptimizer`](crate::LossScaleOptimizer) finds the optimizer that can skip a
/// step on the device. Optimizers need not be `'static` (Burn asks only `Send + Clone`), so
/// the types are compared by `typeid`, which erases lifetimes.
pub(crate) fn as_fused<O, M, B: AutodiffBackend>(optim: &mut O) -> Option<&mut FusedAdamW<M, B>> {
    if typeid::of::<O>() != typeid::of::<FusedAdamW<M, B>>() {
        return None;
    }
    // SAFETY: `O` is `FusedAdamW<M, B>` up to lifetimes (equal lifetime-erased type ids).
    // `FusedAdamW` holds `M` only as `PhantomData` and `B`'s tensors (Burn backends are
    // `'static`), so the cast changes no borrow's lifetime, and the layout is the same.
    Some(unsafe { &mut *(optim as *mut O).cast::<FusedAdamW<M, B>>() })
}
