//! Where the policy in force comes from: a scoped override, a per-device policy, the global
//! policy, or the `float32` default — in that order.
//!
//! Global and per-device policies are process-wide. Scoped policies belong to the thread
//! that set them, since Burn records each op on the thread that calls it.

use core::any::TypeId;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, RwLock};

use burn_tensor::backend::{Backend, DeviceId, DeviceOps};
use burn_tensor::{DType, FloatDType};

use super::{IntoPolicy, Policy, PolicyError};

type DeviceKey = (TypeId, DeviceId);
/// A policy checked against one backend and device.
type CheckKey = (TypeId, DeviceId, Policy);

static GLOBAL: RwLock<Option<Policy>> = RwLock::new(None);
static DEVICES: LazyLock<RwLock<HashMap<DeviceKey, Policy>>> = LazyLock::new(Default::default);
/// Set once a per-device policy exists, so that ops skip the map while none does.
static ANY_DEVICE_POLICY: AtomicBool = AtomicBool::new(false);

thread_local! {
    static SCOPED: RefCell<Vec<Policy>> = const { RefCell::new(Vec::new()) };
    /// Policies already checked against a backend and device, with the result.
    static CHECKED: RefCell<HashMap<CheckKey, Result<(), PolicyError>>> =
        RefCell::new(HashMap::new());
}

fn device_key<D: DeviceOps + 'static>(device: &D) -> DeviceKey {
    (TypeId::of::<D>(), device.id())
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
    *GLOBAL.write().unwrap_or_else(|e| e.into_inner()) = Some(policy);
    Ok(())
}

/// The global policy: the one last set with [`set_global_policy`], else `float32`.
pub fn global_policy() -> Policy {
    GLOBAL
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or_default()
}

/// Runs `f` with `policy` in force on this thread, whatever the global and per-device
/// policies say, then restores what was in force before (also when `f` panics).
///
/// This is how the Keras guide's advice "keep the model's last layer in float32" reads:
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{FloatDType, Tensor, activation::softmax};
/// use burn_amp::{MixedPrecision, Policy, with_policy};
///
/// type B = MixedPrecision<Flex>;
/// let device = Default::default();
/// MixedPrecision::<Flex>::set_policy(&device, "mixed_float16")?;
///
/// let x = Tensor::<B, 2>::ones([2, 4], &device);
/// let w = Tensor::<B, 2>::ones([4, 3], &device);
/// assert_eq!(x.clone().matmul(w.clone()).dtype(), FloatDType::F16.into());
/// let head = with_policy(Policy::float32(), || x.matmul(w));
/// assert_eq!(head.dtype(), FloatDType::F32.into());
/// # MixedPrecision::<Flex>::clear_policy(&device);
/// # Ok::<(), burn_amp::PolicyError>(())
/// ```
pub fn with_policy<R>(policy: Policy, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            SCOPED.with(|s| s.borrow_mut().pop());
        }
    }
    SCOPED.with(|s| s.borrow_mut().push(policy));
    let _pop = Pop;
    f()
}

pub(crate) fn set_device_policy<D: DeviceOps + 'static>(device: &D, policy: Policy) {
    DEVICES
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(device_key(device), policy);
    ANY_DEVICE_POLICY.store(true, Ordering::Release);
}

pub(crate) fn clear_device_policy<D: DeviceOps + 'static>(device: &D) {
    DEVICES
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&device_key(device));
}

/// The policy in force for `device` on this thread, unchecked.
pub(crate) fn current<D: DeviceOps + 'static>(device: &D) -> Policy {
    if let Some(policy) = SCOPED.with(|s| s.borrow().last().copied()) {
        return policy;
    }
    if ANY_DEVICE_POLICY.load(Ordering::Acquire) {
        let devices = DEVICES.read().unwrap_or_else(|e| e.into_inner());
        if let Some(policy) = devices.get(&device_key(device)) {
            return *policy;
        }
    }
    global_policy()
}

/// Checks that backend `B` runs every dtype of `policy` on `device`, and has FP8
/// operations registered when the policy asks for FP8.
pub(crate) fn check<B: Backend>(device: &B::Device, policy: Policy) -> Result<(), PolicyError> {
    if !policy.is_reduced_precision() {
        return Ok(());
    }
    check_dtypes::<B>(device, policy)?;
    if policy.fp8_scaling().is_some() && crate::fp8::training::registry::lookup::<B>().is_none() {
        return Err(PolicyError::Fp8Unavailable {
            backend: B::name(device),
            policy,
            suggestion: policy.without_fp8(),
        });
    }
    Ok(())
}

fn check_dtypes<B: Backend>(device: &B::Device, policy: Policy) -> Result<(), PolicyError> {
    let key = (TypeId::of::<B>(), device.id(), policy);
    if let Some(result) = CHECKED.with(|c| c.borrow().get(&key).cloned()) {
        return result;
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
    CHECKED.with(|c| c.borrow_mut().insert(key, result.clone()));
    result
}

/// The nearest policy `B` runs on `device`: the other 16-bit format with the same layout
/// (mixed or pure), else `float32`.
fn suggestion<B: Backend>(device: &B::Device, policy: Policy) -> Policy {
    let swap = |d: FloatDType| match d {
        FloatDType::F16 => FloatDType::BF16,
        FloatDType::BF16 => FloatDType::F16,
        other => other,
    };
    let mut alternative = Policy::from_dtypes(
        swap(policy.variable),
        swap(policy.compute),
        swap(policy.output),
    );
    alternative.fp8 = policy.fp8;
    let runs = alternative
        .required_dtypes()
        .into_iter()
        .all(|d| B::supports_dtype(device, DType::from(d)));
    if runs { alternative } else { Policy::float32() }
}

/// The policy in force for `device`, checked against `B`.
///
/// # Panics
/// With [`PolicyError::Unsupported`]'s message when the device cannot run the policy: an op
/// never runs in other dtypes than the policy asks for.
pub(crate) fn resolve<B: Backend>(device: &B::Device) -> Policy {
    let policy = current(device);
    if let Err(err) = check::<B>(device, policy) {
        panic!("{err}");
    }
    policy
}
