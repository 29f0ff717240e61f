//! The process-wide bindings: the global policy, each device's policy, each device's loss
//! scale, the default loss scales, and which policies were already checked against which
//! backend and device. One table behind one lock.

use core::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

use burn_tensor::backend::{DeviceId, DeviceOps};

use crate::fp8::Fp8History;
use crate::policy::{Policy, PolicyError};

/// A device, whatever its backend: its type and its id.
pub(crate) type DeviceKey = (TypeId, DeviceId);

/// The key of `device`.
pub(crate) fn device_key<D: DeviceOps + 'static>(device: &D) -> DeviceKey {
    (TypeId::of::<D>(), device.id())
}

/// A device's loss-scale state, type-erased: the scale and its counters as tensors of the
/// backend that made them (`crate::backend::scale`).
pub(crate) trait DeviceState: Send {
    /// `[scale, good_steps, skipped_steps]`, read back to the host.
    fn read(&self) -> [f32; 3];
    /// Replaces `[scale, good_steps, skipped_steps]` (a loaded record) and clears the
    /// pending non-finite count.
    fn write(&mut self, values: [f32; 3]);
    /// The typed state, for code that knows the backend.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// A device's state behind a lock shared by the binding, the backward pass's gradients
/// and the optimizer.
pub(crate) type DeviceSlot = Arc<Mutex<Option<Box<dyn DeviceState>>>>;

/// What a backward pass asks of the loss scale bound to its device. Implemented by
/// [`crate::loss_scale`]; the context keeps only this view, so it imports nothing from there.
pub(crate) trait ScaleSource: Send + Sync {
    /// Whether the backward pass scales its loss: `needed` says whether the policy computes
    /// in f16 (scaling needed) or not (bf16, f32).
    fn begin_backward(&self, needed: bool) -> bool;

    /// The state of `device`, where the scale a backward pass multiplies by lives.
    fn slot(&self, device: DeviceKey) -> DeviceSlot;

    /// The scale, good steps and skipped steps a device's new state starts from.
    fn initial(&self) -> [f32; 3];

    /// Where stateful FP8 scalings keep their state for the devices this source is bound to.
    fn fp8_history(&self) -> Fp8History;

    /// The concrete source, for the optimizer that takes a device over from it.
    fn as_any(&self) -> &dyn Any;
}

/// A loss-scale binding; it ends when its owner (the optimizer and its clones) is dropped.
pub(crate) type ScaleBinding = Weak<dyn ScaleSource>;

#[derive(Default)]
pub(crate) struct Bindings {
    pub global: Option<Policy>,
    pub device_policies: HashMap<DeviceKey, Policy>,
    /// Policies whose dtypes were checked against a backend (its `TypeId`) and device, with
    /// the result.
    pub checked: HashMap<(TypeId, DeviceKey, Policy), Result<(), PolicyError>>,
    /// Each device's automatic optimizers, the one in force last: a replica's clone that
    /// took the device over is pushed over the optimizer it was cloned from, which takes
    /// the device back when the clone is dropped.
    pub device_scales: HashMap<DeviceKey, Vec<ScaleBinding>>,
    /// Automatic optimizers bound to no device, oldest first.
    pub default_scales: Vec<ScaleBinding>,
}

/// Why a global: Burn's ops receive no user state, devices are process-wide, and a backward
/// pass may run on a worker thread (multi-device training), so a binding must be visible
/// from every thread.
static BINDINGS: LazyLock<RwLock<Bindings>> = LazyLock::new(Default::default);

pub(crate) fn read() -> RwLockReadGuard<'static, Bindings> {
    BINDINGS.read().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn write() -> RwLockWriteGuard<'static, Bindings> {
    BINDINGS.write().unwrap_or_else(|e| e.into_inner())
}

impl Bindings {
    /// The loss scale a backward pass on `device` applies: the device's own binding, else
    /// the most recently bound default one; bindings whose owner is gone do not count.
    pub fn scale_for(&self, device: &DeviceKey) -> Option<Arc<dyn ScaleSource>> {
        if let Some(source) = self
            .device_scales
            .get(device)
            .and_then(|stack| stack.iter().rev().find_map(Weak::upgrade))
        {
            return Some(source);
        }
        self.default_scales.iter().rev().find_map(Weak::upgrade)
    }

    /// Forgets bindings whose owner is gone.
    pub fn prune(&mut self) {
        self.device_scales.retain(|_, stack| {
            stack.retain(|s| s.strong_count() > 0);
            !stack.is_empty()
        });
        self.default_scales.retain(|s| s.strong_count() > 0);
    }
}
