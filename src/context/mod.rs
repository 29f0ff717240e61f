//! One context: where an op of [`MixedPrecision`](crate::MixedPrecision) learns what it runs
//! under. An op asks once, with its device, and gets one value back, an `OpContext`:
//!
//! - its [`Policy`]: a scoped one ([`with_policy`]), else the device's
//!   ([`MixedPrecision::set_policy`](crate::MixedPrecision::set_policy)), else the global
//!   one ([`set_global_policy`]), else `float32`; checked against the backend;
//! - under an FP8 policy, for an op whose row takes FP8, its FP8 site: the backend's
//!   registered FP8 operations, the policy's scaling, and the numerics report being
//!   recorded, if any;
//! - the backend's burn-amp kernels, where it has them and the policy lets them run;
//! - for a backward pass, the loss scale bound to the device: the device's own automatic
//!   [`LossScaleOptimizer`](crate::LossScaleOptimizer), else the default one.
//!
//! The bindings behind these answers live here and nowhere else (`bindings`: process-wide;
//! `scope`: this thread's scopes), so one module answers "where does this dtype or scale
//! come from". The modules whose values are bound (`policy`, `fp8`, `loss_scale`) keep no
//! bindings of their own, except the FP8 numerics report's scope (see its reason).

mod bindings;
mod op;
mod scope;

use core::any::TypeId;
use std::sync::{Arc, Weak};

use burn_tensor::backend::{Backend, DeviceOps};
use burn_tensor::{DType, FloatDType};

pub(crate) use bindings::{DeviceKey, DeviceSlot, DeviceState, ScaleSource, device_key};
pub(crate) use op::{Fp8Use, OpContext};
pub use scope::with_policy;

use std::sync::atomic::{AtomicBool, Ordering};

use crate::fp8::Fp8History;
use crate::fp8::training::{Fp8Site, Observer, lane_of};
use crate::policy::{IntoPolicy, Policy, PolicyError};
use crate::registry;

/// The policy in force for `device` on this thread, checked against `B`.
///
/// # Panics
/// With [`PolicyError::Unsupported`]'s (or `Fp8Unavailable`'s) message when the device cannot
/// run the policy: an op never runs in other dtypes than the policy asks for.
pub(crate) fn policy<B: Backend>(device: &B::Device) -> Policy {
    let policy = current(device);
    if let Err(err) = check::<B>(device, policy) {
        panic!("{err}");
    }
    policy
}

/// What an op on `device` runs under: its policy and, when `fp8` is
/// [`Fp8Use::Site`] and the policy asks for FP8, its FP8 site.
///
/// # Panics
/// As [`policy`].
pub(crate) fn resolve<B: Backend>(device: &B::Device, fp8: Fp8Use) -> OpContext<B> {
    let policy = self::policy::<B>(device);
    let site = policy
        .fp8_scaling()
        .filter(|_| fp8 == Fp8Use::Site)
        .map(|scaling| {
            // `check` refuses an FP8 policy on an unregistered backend, so this finds it.
            let ops = registry::fp8::<B>().expect("FP8 operations checked by the policy check");
            let history = scaling
                .is_stateful()
                .then(|| fp8_history(device))
                .flatten()
                .map(|h| (h, lane_of(device)));
            Fp8Site {
                ops,
                scaling,
                formats: policy.fp8_formats(),
                compute: policy.compute_dtype(),
                history,
                observer: Observer::current(),
            }
        });
    OpContext::with_fp8(policy, site)
}

/// What an op on `tensor`'s device runs under, without FP8 (see [`resolve`]).
pub(crate) fn of<B: Backend>(tensor: &burn_tensor::ops::FloatTensor<B>) -> OpContext<B> {
    resolve::<B>(&B::float_device(tensor), Fp8Use::Never)
}

/// The FP8 history of the loss scale bound to `device`. Without one, stateful scalings
/// run as current scaling, with a warning (once per process).
fn fp8_history<D: DeviceOps + 'static>(device: &D) -> Option<Fp8History> {
    /// Why a global: the warning is about the process's setup, given once, not per op.
    static WARNED: AtomicBool = AtomicBool::new(false);
    let history = bindings::read()
        .scale_for(&device_key(device))
        .map(|s| s.fp8_history());
    if history.is_none() && !WARNED.swap(true, Ordering::Relaxed) {
        log::warn!(
            "burn-amp: an FP8 policy with delayed or exponent-bias scaling runs on a device \
             with no automatic LossScaleOptimizer bound: its history has nowhere to live, so \
             current scaling is used. Wrap the optimizer in a LossScaleOptimizer (new, init \
             or init_on); it keeps the FP8 history and saves it in its record"
        );
    }
    history
}

/// The loss scale a backward pass applies: the device state, and where it comes from.
pub(crate) type BackwardScale = (DeviceSlot, Arc<dyn ScaleSource>);

/// What a backward pass on `device` runs under: its context, and the loss scale it applies
/// (the bound one, under a policy that needs one): its device state, and its source (for
/// the values a new state starts from). The pass ends the device's FP8 step: its next
/// forward site is site 0 again.
pub(crate) fn backward<B: Backend>(device: &B::Device) -> (OpContext<B>, Option<BackwardScale>) {
    let policy = self::policy::<B>(device);
    let key = device_key(device);
    let source = bindings::read().scale_for(&key);
    let scale = source.and_then(|s| {
        s.fp8_history().end_step(lane_of(device));
        s.begin_backward(policy.needs_loss_scaling())
            .then(|| (s.slot(key), s))
    });
    (OpContext::new(policy), scale)
}

/// The policy in force for `device` on this thread, unchecked.
pub(crate) fn current<D: DeviceOps + 'static>(device: &D) -> Policy {
    if let Some(policy) = scope::innermost() {
        return policy;
    }
    let bindings = bindings::read();
    if !bindings.device_policies.is_empty()
        && let Some(policy) = bindings.device_policies.get(&device_key(device))
    {
        return *policy;
    }
    bindings.global.unwrap_or_default()
}

/// Sets the policy for every device that has no policy of its own, like Keras'
/// `set_global_policy`.
///
/// The name is checked here; whether a device can run the policy is checked by
/// [`MixedPrecision::policy`](crate::MixedPrecision::policy), or at the first op on that
/// device, which panics with [`PolicyError::Unsupported`] rather than run other dtypes
/// than the ones asked for.
///
/// ```
/// burn_amp::set_global_policy("mixed_bfloat16")?;
/// assert_eq!(burn_amp::global_policy().name(), "mixed_bfloat16");
/// assert!(burn_amp::set_global_policy("mixed_float8").is_err());
/// # burn_amp::set_global_policy("float32")?;
/// # Ok::<(), burn_amp::PolicyError>(())
/// ```
///
/// # Errors
/// [`PolicyError::UnknownName`] or [`PolicyError::InvalidSpec`] for a string that is not a
/// policy; the global policy is then left as it was.
pub fn set_global_policy(policy: impl IntoPolicy) -> Result<(), PolicyError> {
    let policy = policy.into_policy()?;
    bindings::write().global = Some(policy);
    Ok(())
}

/// The global policy: the one last set with [`set_global_policy`], else `float32`.
pub fn global_policy() -> Policy {
    bindings::read().global.unwrap_or_default()
}

pub(crate) fn set_device_policy<D: DeviceOps + 'static>(device: &D, policy: Policy) {
    bindings::write()
        .device_policies
        .insert(device_key(device), policy);
}

pub(crate) fn clear_device_policy<D: DeviceOps + 'static>(device: &D) {
    bindings::write()
        .device_policies
        .remove(&device_key(device));
}

/// Checks that backend `B` runs every dtype of `policy` on `device`, and has FP8
/// operations registered when the policy asks for FP8 (looked up each time: a backend may
/// be registered later).
pub(crate) fn check<B: Backend>(device: &B::Device, policy: Policy) -> Result<(), PolicyError> {
    if !policy.is_reduced_precision() {
        return Ok(());
    }
    check_dtypes::<B>(device, policy)?;
    if policy.fp8_scaling().is_some() && registry::fp8::<B>().is_none() {
        return Err(PolicyError::Fp8Unavailable {
            backend: B::name(device),
            policy,
            suggestion: policy.without_fp8(),
        });
    }
    Ok(())
}

/// Whether `B` supports every dtype of `policy` on `device`; the answer is cached.
fn check_dtypes<B: Backend>(device: &B::Device, policy: Policy) -> Result<(), PolicyError> {
    let key = (TypeId::of::<B>(), device_key(device), policy);
    if let Some(result) = bindings::read().checked.get(&key) {
        return result.clone();
    }
    let result = match policy
        .required_dtypes()
        .into_iter()
        .find(|d| !B::supports_dtype(device, DType::from(*d)))
    {
        None => Ok(()),
        Some(dtype) => Err(PolicyError::Unsupported {
            backend: B::name(device),
            device: format!("{device:?}"),
            policy,
            dtype,
            suggestion: suggestion::<B>(device, policy),
        }),
    };
    bindings::write().checked.insert(key, result.clone());
    result
}

/// The nearest policy `B` runs on `device`: the other 16-bit format with the same layout
/// (mixed or pure), else `float32`.
fn suggestion<B: Backend>(device: &B::Device, policy: Policy) -> Policy {
    let alternative = policy.with_16_bit_formats_swapped();
    let runs = alternative
        .required_dtypes()
        .into_iter()
        .all(|d| B::supports_dtype(device, DType::from(d)));
    if runs { alternative } else { Policy::float32() }
}

/// Why a loss scale could not be bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeviceTaken(pub String);

/// Binds `source` to each of `devices` (all or none): backward passes on them apply it.
///
/// # Errors
/// [`DeviceTaken`] naming the first device another live binding holds.
pub(crate) fn bind_scale_to_devices<D: DeviceOps + 'static>(
    source: &Arc<dyn ScaleSource>,
    devices: &[D],
) -> Result<(), DeviceTaken> {
    let mut bindings = bindings::write();
    bindings.prune();
    if let Some(taken) = devices
        .iter()
        .find(|d| bindings.device_scales.contains_key(&device_key(*d)))
    {
        return Err(DeviceTaken(format!("{taken:?}")));
    }
    for device in devices {
        bindings
            .device_scales
            .insert(device_key(device), vec![Arc::downgrade(source)]);
    }
    Ok(())
}

/// Binds `device` to `source`, replacing whatever bound it (a data-parallel replica's clone
/// taking its device over from the optimizer it was cloned from); returns the source that
/// backward passes on `device` applied until now, if another.
pub(crate) fn take_over_device<D: DeviceOps + 'static>(
    source: &Arc<dyn ScaleSource>,
    device: &D,
) -> Option<Arc<dyn ScaleSource>> {
    let mut bindings = bindings::write();
    bindings.prune();
    let key = device_key(device);
    let previous = bindings.scale_for(&key);
    bindings
        .device_scales
        .entry(key)
        .or_default()
        .push(Arc::downgrade(source));
    previous.filter(|p| !Arc::ptr_eq(p, source))
}

/// Binds `source` as the default loss scale: backward passes on devices without a scale of
/// their own apply the most recently bound default that is still alive.
pub(crate) fn bind_default_scale(source: &Arc<dyn ScaleSource>) {
    let mut bindings = bindings::write();
    bindings.prune();
    let weak: Weak<dyn ScaleSource> = Arc::downgrade(source);
    bindings.default_scales.push(weak);
}

/// The dtype a backward pass starts from: the policy's output dtype (f64 stays f64).
pub(crate) fn loss_dtype(policy: Policy, dtype: FloatDType) -> FloatDType {
    match dtype {
        FloatDType::F64 => dtype,
        _ => policy.output_dtype(),
    }
}
