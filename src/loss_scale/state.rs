//! The loss scale's state and its update rule, and the binding through which a backward
//! pass applies it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::LossScaleConfig;
use super::config::{MinScaleStep, floor_at};
use crate::backend::scale::Rule;
use crate::context::{DeviceKey, DeviceSlot, ScaleSource};
use crate::fp8::Fp8History;

/// What backward passes did since the last optimizer step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum Pending {
    /// No backward pass went through this scale.
    #[default]
    None,
    /// A backward pass multiplied its loss by the scale.
    Scaled,
    /// A backward pass ran under a policy that needs no scaling (bf16, f32).
    NotNeeded,
}

/// The numbers that move: the scale and its counters. In manual mode these are the scale;
/// in automatic mode the devices' states are (see [`crate::backend::scale`]), and these are
/// what a device's state starts from (the config's, or a loaded record's), with the step
/// count, which only the host keeps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ScaleState {
    pub scale: f32,
    /// Finite steps in a row since the scale last changed or overflowed.
    pub good_steps: u64,
    pub skipped_steps: u64,
    pub total_steps: u64,
    pub pending: Pending,
}

impl ScaleState {
    pub fn new(config: &LossScaleConfig) -> Self {
        Self {
            scale: config.initial_scale,
            good_steps: 0,
            skipped_steps: 0,
            total_steps: 0,
            pending: Pending::None,
        }
    }

    /// Counts one optimizer step: the one place steps are counted.
    pub fn count_step(&mut self) {
        self.total_steps += 1;
    }

    /// One optimizer step checked on the host: `finite` says whether all gradients were
    /// finite. The step is counted, and the scale then keeps to the schedule's floor for the
    /// next step.
    pub fn update(&mut self, finite: bool, config: &LossScaleConfig, schedule: &[MinScaleStep]) {
        self.count_step();
        let floor = floor_at(config.min_scale, schedule, self.total_steps);
        if finite {
            if config.dynamic {
                self.good_steps += 1;
                if self.good_steps >= config.growth_interval {
                    self.scale = (self.scale * config.growth_factor).min(config.max_scale);
                    self.good_steps = 0;
                }
            }
        } else {
            self.skipped_steps += 1;
            self.good_steps = 0;
            if config.dynamic {
                self.scale = (self.scale * config.backoff_factor).max(config.min_scale);
            }
        }
        if config.dynamic && self.scale < floor {
            self.scale = floor;
        }
    }
}

/// The device form of [`ScaleState::update`] for step `step` (counted from 1): the same
/// numbers, with the schedule's floor of that step.
fn rule_at(config: &LossScaleConfig, schedule: &[MinScaleStep], step: u64) -> Rule {
    Rule {
        dynamic: config.dynamic,
        growth_interval: config.growth_interval as f32,
        growth_factor: config.growth_factor,
        backoff_factor: config.backoff_factor,
        min_scale: config.min_scale,
        max_scale: config.max_scale,
        floor: floor_at(config.min_scale, schedule, step),
    }
}

pub(crate) struct Shared {
    pub config: LossScaleConfig,
    pub state: Mutex<ScaleState>,
    /// Each device's state in automatic mode, made by its first scaled backward pass.
    pub slots: Mutex<HashMap<DeviceKey, DeviceSlot>>,
    /// The minimum-scale schedule in force: the config's, or a loaded record's.
    pub schedule: Mutex<Vec<MinScaleStep>>,
    /// The state of stateful FP8 scalings on the bound devices.
    pub fp8: Fp8History,
    /// The first live clone made of this scale's optimizer (a data-parallel replica), which
    /// a [`LossScale::following`] handle reports instead.
    pub replica: Mutex<Weak<Shared>>,
}

/// A handle on a [`LossScaleOptimizer`](super::LossScaleOptimizer)'s scale and counters,
/// shared with it (for metrics, logging, or a look from another thread).
#[derive(Clone)]
pub struct LossScale {
    pub(crate) shared: Arc<Shared>,
    /// A user's handle: reports the optimizer's first live replica once there is one (under
    /// Burn's DDP the original optimizer never steps; its clones do).
    follows_replica: bool,
}

impl core::fmt::Debug for LossScale {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // What the public readers report (a following handle: its replica's), all from one.
        let reported = self.reported();
        let [scale, good, skipped] = reported.current();
        f.debug_struct("LossScale")
            .field("scale", &scale)
            .field("good_steps", &(good as u64))
            .field("skipped_steps", &(skipped as u64))
            .field("total_steps", &reported.lock().total_steps)
            .finish()
    }
}

impl LossScale {
    pub(crate) fn new(config: LossScaleConfig) -> Self {
        let state = Mutex::new(ScaleState::new(&config));
        Self {
            shared: Arc::new(Shared {
                schedule: Mutex::new(config.min_scale_schedule.clone()),
                config,
                state,
                slots: Mutex::new(HashMap::new()),
                fp8: Fp8History::default(),
                replica: Mutex::new(Weak::new()),
            }),
            follows_replica: false,
        }
    }

    /// A handle for users (metrics, logs): it follows the first live replica made by
    /// cloning the optimizer, whose state moves when the original's does not.
    pub(crate) fn following(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            follows_replica: true,
        }
    }

    /// What this handle reports on: the replica's scale for a following handle whose
    /// optimizer has a live replica, else this one.
    fn reported(&self) -> Self {
        if !self.follows_replica {
            return self.clone();
        }
        let replica = self
            .shared
            .replica
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .upgrade();
        match replica {
            Some(shared) => Self {
                shared,
                follows_replica: true,
            }
            .reported(),
            None => self.clone(),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, ScaleState> {
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The devices' states, in the order they were made.
    pub(crate) fn slots(&self) -> Vec<(DeviceKey, DeviceSlot)> {
        let slots = self.shared.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut slots: Vec<_> = slots.iter().map(|(k, s)| (*k, s.clone())).collect();
        slots.sort_by_key(|(k, _)| (k.1.type_id, k.1.index_id));
        slots
    }

    /// `[scale, good_steps, skipped_steps]`: read back from the first device's state when
    /// there is one (automatic mode), else the host's.
    fn current(&self) -> [f32; 3] {
        let first = self.slots().into_iter().find_map(|(_, slot)| {
            let guard = slot.lock().unwrap_or_else(|e| e.into_inner());
            guard.as_ref().map(|s| s.read())
        });
        first.unwrap_or_else(|| {
            let s = self.lock();
            [s.scale, s.good_steps as f32, s.skipped_steps as f32]
        })
    }

    /// The current scale (what the next backward pass multiplies the loss by). In automatic
    /// mode it lives on the device: asking reads it back.
    pub fn scale(&self) -> f32 {
        self.reported().current()[0]
    }

    /// Steps skipped because their gradients were not finite (read back, as `scale`).
    pub fn skipped_steps(&self) -> u64 {
        self.reported().current()[2] as u64
    }

    /// Steps taken or skipped so far.
    pub fn total_steps(&self) -> u64 {
        self.reported().lock().total_steps
    }

    /// Finite steps in a row since the scale last changed or overflowed (read back, as
    /// `scale`).
    pub fn good_steps(&self) -> u64 {
        self.reported().current()[1] as u64
    }

    /// Sets the scale and its counters (a loaded record): on the host, and on every
    /// device's state.
    pub(crate) fn set(&self, scale: f32, good: u64, skipped: u64, total: u64) {
        let mut state = self.lock();
        state.scale = scale;
        state.good_steps = good;
        state.skipped_steps = skipped;
        state.total_steps = total;
        state.pending = Pending::None;
        drop(state);
        for (_, slot) in self.slots() {
            let mut guard = slot.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = guard.as_mut() {
                s.write([scale, good as f32, skipped as f32]);
            }
        }
    }

    /// The rule of the coming step (its floor from the host's step count).
    pub(crate) fn rule(&self) -> Rule {
        let total = self.lock().total_steps + 1;
        rule_at(&self.shared.config, &self.min_scale_schedule(), total)
    }

    /// The FP8 scaling state (amax histories, biases) of delayed and exponent-bias FP8
    /// policies on the devices this scale is bound to.
    pub fn fp8_history(&self) -> &Fp8History {
        &self.shared.fp8
    }

    /// The minimum-scale schedule in force (the config's, or the one a loaded record held).
    pub fn min_scale_schedule(&self) -> Vec<MinScaleStep> {
        self.shared
            .schedule
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The settings.
    pub fn config(&self) -> &LossScaleConfig {
        &self.shared.config
    }

    /// Called by the decorator's backward: whether it scales its loss.
    pub(crate) fn begin_backward(&self, needed: bool) -> bool {
        let mut state = self.lock();
        if needed {
            state.pending = Pending::Scaled;
        } else if state.pending == Pending::None {
            state.pending = Pending::NotNeeded;
        }
        needed
    }

    /// `device`'s state slot, made empty on first use (the backward pass fills it).
    pub(crate) fn slot(&self, device: DeviceKey) -> DeviceSlot {
        let mut slots = self.shared.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.entry(device).or_default().clone()
    }

    /// What a new device state starts from: another device's state (read back, once per
    /// device) when there is one, else the host's values (the config's, or a loaded
    /// record's).
    pub(crate) fn initial(&self) -> [f32; 3] {
        self.current()
    }

    /// An independent copy for a data-parallel replica: the scale and counters as they are
    /// now (read back from a device), the schedule and the FP8 state; no device state yet.
    pub(crate) fn fork(&self) -> Self {
        let [scale, good, skipped] = self.current();
        let forked = Self::new(self.shared.config.clone());
        let mut replica = self
            .shared
            .replica
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if replica.strong_count() == 0 {
            *replica = Arc::downgrade(&forked.shared);
        }
        drop(replica);
        {
            let mut state = forked.lock();
            state.scale = scale;
            state.good_steps = good as u64;
            state.skipped_steps = skipped as u64;
            state.total_steps = self.total_steps();
        }
        *forked
            .shared
            .schedule
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = self.min_scale_schedule();
        // A record of the state just read is valid by construction.
        let _ = forked.shared.fp8.load_record(self.shared.fp8.to_record());
        forked
    }

    /// Gives `device`'s state, and what backward passes through this scale did, to `heir`:
    /// the replica that takes the device over after they ran through this one.
    pub(crate) fn hand_over(&self, device: DeviceKey, heir: &LossScale) {
        let slot = self
            .shared
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&device);
        if let Some(slot) = slot {
            heir.shared
                .slots
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(device, slot);
        }
        let pending = self.lock().pending;
        let mut heirs = heir.lock();
        if heirs.pending == Pending::None {
            heirs.pending = pending;
        }
    }

    pub(crate) fn take_pending(&self) -> Pending {
        core::mem::take(&mut self.lock().pending)
    }
}

/// An automatic optimizer's binding: backward passes apply its scale while it lives. The
/// optimizer and its clones hold it; a [`LossScale`] handle does not, so a metric that
/// outlives its optimizer keeps no binding alive.
pub(crate) struct Binding(pub LossScale);

impl ScaleSource for Binding {
    fn begin_backward(&self, needed: bool) -> bool {
        self.0.begin_backward(needed)
    }

    fn slot(&self, device: DeviceKey) -> DeviceSlot {
        self.0.slot(device)
    }

    fn initial(&self) -> [f32; 3] {
        self.0.initial()
    }

    fn fp8_history(&self) -> Fp8History {
        self.0.shared.fp8.clone()
    }

    fn as_any(&self) -> &dyn core::any::Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_after_exactly_the_interval_and_halves_on_overflow() {
        let config = LossScaleConfig::new().with_growth_interval(3);
        let mut state = ScaleState::new(&config);
        for _ in 0..2 {
            state.update(true, &config, &[]);
        }
        assert_eq!(state.scale, 32768.0);
        state.update(true, &config, &[]);
        assert_eq!(state.scale, 65536.0);
        state.update(false, &config, &[]);
        assert_eq!(state.scale, 32768.0);
        assert_eq!(
            (state.skipped_steps, state.total_steps, state.good_steps),
            (1, 4, 0)
        );
    }

    #[test]
    fn fixed_scale_never_moves_but_still_counts_skips() {
        let config = LossScaleConfig::fixed(128.0);
        let mut state = ScaleState::new(&config);
        for i in 0..5000 {
            state.update(i % 7 != 0, &config, &[]);
        }
        assert_eq!(state.scale, 128.0);
        assert_eq!(state.skipped_steps, 715);
    }
}

#[cfg(all(test, feature = "flex"))]
mod host_and_device {
    use burn::backend::Flex;
    use burn::tensor::{Tensor, TensorPrimitive};

    use super::*;
    use crate::backend::scale::step_rule;

    /// One step of the device rule on `[scale, good, skipped]`.
    fn on_device(state: [f32; 3], finite: bool, rule: &Rule) -> [f32; 3] {
        let device = Default::default();
        let state = Tensor::<Flex, 1>::from_floats(state, &device);
        let found = Tensor::<Flex, 1>::from_floats([if finite { 0.0 } else { 2.0 }], &device);
        let next = step_rule::<Flex>(
            state.into_primitive().tensor(),
            found.into_primitive().tensor(),
            rule,
        );
        let next = Tensor::<Flex, 1>::from_primitive(TensorPrimitive::Float(next));
        let values = next.into_data().to_vec::<f32>().expect("f32");
        values.try_into().expect("three values")
    }

    /// The scale rule is written twice, on the host (manual mode, records) and on the device
    /// (automatic mode, no read back): both must move alike, bit for bit, through growth,
    /// backoff, both bounds, a fixed scale and a minimum-scale schedule.
    #[test]
    fn the_host_and_device_forms_of_the_scale_rule_agree_step_by_step() {
        let schedule = vec![
            MinScaleStep {
                step: 9,
                min_scale: 16.0,
            },
            MinScaleStep {
                step: 20,
                min_scale: 2.0,
            },
        ];
        let configs = [
            (LossScaleConfig::new().with_growth_interval(3), vec![]),
            (
                LossScaleConfig::new()
                    .with_initial_scale(8.0)
                    .with_growth_interval(2)
                    .with_growth_factor(4.0)
                    .with_backoff_factor(0.25)
                    .with_min_scale(1.0)
                    .with_max_scale(64.0),
                vec![],
            ),
            (
                LossScaleConfig::new()
                    .with_initial_scale(4.0)
                    .with_growth_interval(4),
                schedule,
            ),
            (LossScaleConfig::fixed(128.0), vec![]),
        ];
        let mut lcg = 0x2545_f491_4f6c_dd1du64;
        for (config, schedule) in configs {
            let mut host = ScaleState::new(&config);
            let mut device = [host.scale, 0.0, 0.0];
            let (mut grew, mut backed) = (false, false);
            for step in 1..=60u64 {
                lcg = lcg.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let finite = (lcg >> 33) % 10 >= 3;
                let rule = rule_at(&config, &schedule, step);
                let before = host.scale;
                host.update(finite, &config, &schedule);
                device = on_device(device, finite, &rule);
                let expected = [
                    host.scale,
                    host.good_steps as f32,
                    host.skipped_steps as f32,
                ];
                assert_eq!(
                    device, expected,
                    "{config:?}, step {step} (finite: {finite}): device {device:?}, host {expected:?}"
                );
                grew |= host.scale > before;
                backed |= host.scale < before;
            }
            assert!(
                !config.dynamic || (grew && backed),
                "{config:?}: the sequence should both grow and back the scale off"
            );
        }
    }
}
