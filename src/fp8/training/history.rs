//! The state of the stateful FP8 scalings (delayed, exponent bias): per device, per matmul
//! site, per role, the amax history, the scale or bias in force and the format chosen.
//!
//! Sites are numbered in call order within a step: the first FP8 site of a forward pass
//! after a backward pass began is site 0 again. A model that calls the same layers in the
//! same order at every step (every Burn model with a fixed architecture) thus gives each
//! layer the same number at every step. Forward passes without gradients (validation,
//! inference) use current scaling and leave the history alone.

use core::fmt;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use burn::record::{PrecisionSettings, Record};
use burn_amp_kernels::fp8::scale::is_valid_scale;
use burn_amp_kernels::fp8::{Fp8Format, Fp8Layout};
use burn_tensor::Tensor;
use burn_tensor::backend::{Backend, DeviceOps};
use serde::{Deserialize, Serialize};

use super::device::{DeviceRole, OnDevice};
use super::scaling::Fp8Role;
use super::state::{RoleState, SiteState};
use crate::collective::{Collective, CollectiveError};
use crate::fp8::{Fp8Backend, Fp8Error};

/// A device's lane of the history: its `DeviceId` as `(type, index)`.
pub(crate) type Lane = (u16, u16);

/// The lane of `device`.
pub(crate) fn lane_of<D: DeviceOps>(device: &D) -> Lane {
    let id = device.id();
    (id.type_id, id.index_id)
}

/// One role's state as the history keeps it.
enum RoleSlot {
    /// Not on a device yet: fresh, or loaded from a record (uploaded at its first step).
    Host(RoleState),
    /// On the device of the backend that quantized it, moved by device ops.
    Device(Box<dyn DeviceRole>),
}

impl RoleSlot {
    /// The numbers (a read back when they are on a device).
    fn view(&self) -> RoleState {
        match self {
            RoleSlot::Host(state) => state.clone(),
            RoleSlot::Device(state) => state.view(),
        }
    }
}

/// One site as the history keeps it.
struct SiteSlot {
    site: u32,
    label: String,
    roles: BTreeMap<Fp8Role, RoleSlot>,
}

impl SiteSlot {
    fn view(&self) -> SiteState {
        SiteState {
            site: self.site,
            label: self.label.clone(),
            roles: self.roles.iter().map(|(r, s)| (*r, s.view())).collect(),
        }
    }
}

#[derive(Default)]
struct LaneState {
    sites: Vec<SiteSlot>,
    next: u32,
}

/// The state of delayed and exponent-bias FP8 scaling: per device, per matmul site and per
/// role (input, weight, gradient), the amax history, the scale or bias in force and the
/// format used.
///
/// The numbers live on the device that quantized the tensors, in tensors moved by device
/// ops in the step that quantizes (nothing of a step is read back to decide anything); the
/// accessors that show them ([`sites`](Self::sites), [`to_record`](Self::to_record),
/// `Display`) read them back when called.
///
/// A [`LossScaleOptimizer`](crate::LossScaleOptimizer) owns one: it is bound to the
/// optimizer's devices with its loss scale, saved in its record and restored (validated)
/// from it, so a resumed run continues with the same scales. Sites are numbered in call
/// order within a step (a backward pass ends a step), which a model calling the same layers
/// in the same order keeps stable. Forward passes without gradients use current scaling and
/// leave it alone.
///
/// `Display` prints one line per site and role: format, scale or bias, the history's length
/// and maximum, and its newest amaxes.
#[derive(Clone, Default)]
pub struct Fp8History {
    lanes: Arc<Mutex<BTreeMap<Lane, LaneState>>>,
}

impl fmt::Debug for Fp8History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lanes = self.lock();
        f.debug_struct("Fp8History")
            .field("devices", &lanes.len())
            .field(
                "sites",
                &lanes.values().map(|l| l.sites.len()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Where one quantization keeps its state: the history, the device's lane and the site.
#[derive(Clone, Debug)]
pub(crate) struct Slot {
    pub history: Fp8History,
    pub lane: Lane,
    pub site: u32,
}

impl Fp8History {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<Lane, LaneState>> {
        self.lanes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Numbers the next forward site of `lane`'s step, labelling it when first seen.
    pub(crate) fn open_site(&self, lane: Lane, label: impl FnOnce() -> String) -> Slot {
        let mut lanes = self.lock();
        let state = lanes.entry(lane).or_default();
        let site = state.next;
        state.next += 1;
        if state.sites.len() <= site as usize {
            state.sites.push(SiteSlot {
                site,
                label: label(),
                roles: BTreeMap::new(),
            });
        }
        Slot {
            history: self.clone(),
            lane,
            site,
        }
    }

    /// A backward pass began on `lane`: its next forward site is site 0 again.
    pub(crate) fn end_step(&self, lane: Lane) {
        if let Some(state) = self.lock().get_mut(&lane) {
            state.next = 0;
        }
    }

    /// Runs `f` on the device state of `slot`'s `role` (created when first seen, uploaded
    /// to `device` from a loaded record, its history fitted to `capacity`).
    pub(crate) fn with_device<I: Fp8Backend, R>(
        &self,
        slot: &Slot,
        role: Fp8Role,
        capacity: usize,
        device: &I::Device,
        f: impl FnOnce(&mut OnDevice<I>) -> R,
    ) -> R {
        let mut lanes = self.lock();
        let lane = lanes.entry(slot.lane).or_default();
        while lane.sites.len() <= slot.site as usize {
            let site = lane.sites.len() as u32;
            lane.sites.push(SiteSlot {
                site,
                label: format!("site {site}"),
                roles: BTreeMap::new(),
            });
        }
        let site = &mut lane.sites[slot.site as usize];
        let entry = site
            .roles
            .entry(role)
            .or_insert_with(|| RoleSlot::Host(RoleState::new(role)));
        let on_device = match entry {
            RoleSlot::Device(state) => state.as_any_mut().is::<OnDevice<I>>(),
            RoleSlot::Host(_) => false,
        };
        if !on_device {
            // First step, a loaded record, or another backend's state: put on this device.
            let state = entry.view();
            *entry = RoleSlot::Device(Box::new(OnDevice::<I>::upload(&state, capacity, device)));
        }
        let RoleSlot::Device(state) = entry else {
            unreachable!("put on the device above")
        };
        let state = state
            .as_any_mut()
            .downcast_mut::<OnDevice<I>>()
            .expect("checked above");
        state.fit(capacity);
        f(state)
    }

    /// Makes every replica's history hold, for this step, the maximum over the replicas of
    /// the amax each saw (Transformer Engine's `reduce_amax`): the newest entry of every
    /// role on the device is gathered into one vector, reduced with MAX through
    /// `collective` (one call a step) and written back. Delayed scaling then gives every
    /// replica the same scales from the next step on. Exponent-bias and `format=auto`
    /// decisions are taken from the tensor being quantized, so they stay per replica (the
    /// gradients are reduced anyway, and the parameters stay identical).
    ///
    /// Roles still on the host (not quantized in this run yet) are left alone.
    ///
    /// # Errors
    /// The collective's; [`CollectiveError::Mismatch`] when a role's state belongs to
    /// another backend than `I`.
    pub fn all_reduce_amax<I: Backend>(
        &self,
        collective: &dyn Collective<I>,
    ) -> Result<(), CollectiveError> {
        let mut lanes = self.lock();
        let mut states: Vec<&mut OnDevice<I>> = Vec::new();
        for (lane, state) in lanes.iter_mut() {
            for site in &mut state.sites {
                for (role, slot) in &mut site.roles {
                    let RoleSlot::Device(on_device) = slot else {
                        continue;
                    };
                    let Some(on_device) = on_device.as_any_mut().downcast_mut::<OnDevice<I>>()
                    else {
                        return Err(CollectiveError::Mismatch(format!(
                            "FP8 state of device {}:{} site {} role {} is on another backend \
                             than the collective's",
                            lane.0,
                            lane.1,
                            site.site,
                            role.name()
                        )));
                    };
                    if on_device.pushed > 0 {
                        states.push(on_device);
                    }
                }
            }
        }
        if states.is_empty() || collective.world_size() == 1 {
            return Ok(());
        }
        let newest: Vec<Tensor<I, 1>> = states.iter().map(|s| s.newest()).collect();
        let reduced = collective.all_reduce_max(Tensor::cat(newest, 0))?;
        for (i, state) in states.into_iter().enumerate() {
            state.replace_newest(reduced.clone().slice(i..i + 1));
        }
        Ok(())
    }

    /// The sites of `device`, in call order.
    pub fn sites<D: DeviceOps>(&self, device: &D) -> Vec<SiteState> {
        self.lock()
            .get(&lane_of(device))
            .map(|l| l.sites.iter().map(SiteSlot::view).collect())
            .unwrap_or_default()
    }

    /// Whether no stateful FP8 site ran yet (or the state was cleared).
    pub fn is_empty(&self) -> bool {
        self.lock().values().all(|l| l.sites.is_empty())
    }

    /// Forgets every site (a new model, say).
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The state as a record (see [`Fp8HistoryRecord`]).
    pub fn to_record(&self) -> Fp8HistoryRecord {
        let lanes = self.lock();
        Fp8HistoryRecord {
            devices: lanes
                .iter()
                .map(|(lane, state)| LaneRecord {
                    device_type: lane.0,
                    device_index: lane.1,
                    sites: state
                        .sites
                        .iter()
                        .map(|s| SiteRecord::from(&s.view()))
                        .collect(),
                })
                .collect(),
        }
    }

    /// Replaces the state with `record`'s, after checking it; on error nothing changes.
    /// Every device's next forward site is site 0.
    ///
    /// # Errors
    /// [`Fp8Error::InvalidRecord`] as [`Fp8HistoryRecord::validate`] finds it.
    pub fn load_record(&self, record: Fp8HistoryRecord) -> Result<(), Fp8Error> {
        record.validate()?;
        let mut lanes = BTreeMap::new();
        for device in record.devices {
            let sites = device
                .sites
                .into_iter()
                .enumerate()
                .map(|(i, s)| {
                    let state = s.into_state(i as u32);
                    SiteSlot {
                        site: state.site,
                        label: state.label,
                        roles: state
                            .roles
                            .into_iter()
                            .map(|(role, r)| (role, RoleSlot::Host(r)))
                            .collect(),
                    }
                })
                .collect();
            lanes.insert(
                (device.device_type, device.device_index),
                LaneState { sites, next: 0 },
            );
        }
        *self.lock() = lanes;
        Ok(())
    }
}

impl fmt::Display for Fp8History {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lanes = self.lock();
        writeln!(
            f,
            "{:<44} {:<6} {:<6} {:>10} {:>5} {:>6} {:>10}  newest amaxes",
            "site", "role", "format", "scale", "bias", "steps", "hist max"
        )?;
        for (lane, state) in lanes.iter() {
            if lanes.len() > 1 {
                writeln!(f, "device {}:{}", lane.0, lane.1)?;
            }
            for site in state.sites.iter().map(SiteSlot::view) {
                for (role, r) in &site.roles {
                    let max = r.history.iter().copied().filter(|a| a.is_finite());
                    let max = max.fold(0.0f32, f32::max);
                    let newest: Vec<String> = r
                        .history
                        .iter()
                        .rev()
                        .take(4)
                        .map(|a| format!("{a:.3e}"))
                        .collect();
                    writeln!(
                        f,
                        "{:<44} {:<6} {:<6} {:>10.4e} {:>5} {:>6} {:>10.3e}  {}{}",
                        format!("#{} {}", site.site, site.label),
                        role.name(),
                        format_name(r.format),
                        r.scale,
                        r.format.bias(),
                        r.steps,
                        max,
                        newest.join(" "),
                        if r.history.len() > 4 {
                            format!(" ... ({} in all)", r.history.len())
                        } else {
                            String::new()
                        },
                    )?;
                }
            }
        }
        Ok(())
    }
}

fn format_name(format: Fp8Format) -> &'static str {
    match format.layout() {
        Fp8Layout::E4M3 => "e4m3",
        Fp8Layout::E5M2 => "e5m2",
    }
}

/// An amax as a record keeps it: a non-finite one (an overflowing step's, skipped by the
/// loss scale) as 0, "no observation", which delayed scaling reads the same way (it follows
/// the largest *finite* amax of the history, zero where there is none), so a run loaded from
/// the record scales as the run never saved does, and every recorder, JSON's included
/// (which has no infinity or NaN), can write it.
fn observed(amax: f32) -> f32 {
    if amax.is_finite() { amax } else { 0.0 }
}

/// The largest history a record may hold (a guard against a corrupted length).
const MAX_RECORD_HISTORY: usize = 1 << 20;

/// [`Fp8History`]'s serialized form (inside
/// [`LossScaleOptimizerRecord`](crate::LossScaleOptimizerRecord)).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Fp8HistoryRecord {
    /// One entry per device that ran stateful FP8 sites.
    pub devices: Vec<LaneRecord>,
}

/// One device's sites in a record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LaneRecord {
    /// The device's `DeviceId::type_id`.
    pub device_type: u16,
    /// The device's `DeviceId::index_id`.
    pub device_index: u16,
    /// Its sites, in call order.
    pub sites: Vec<SiteRecord>,
}

/// One site in a record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SiteRecord {
    /// The site's label.
    pub label: String,
    /// Its roles.
    pub roles: Vec<RoleRecord>,
}

/// One role of a site in a record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RoleRecord {
    /// 0 input, 1 weight, 2 gradient.
    pub role: u8,
    /// The amax history, oldest first; the non-finite amaxes of overflowing steps are kept
    /// as 0 (no observation), as delayed scaling reads them.
    pub history: Vec<f32>,
    /// The scale last used.
    pub scale: f32,
    /// 0 E4M3, 1 E5M2.
    pub layout: u8,
    /// The exponent bias of the format last used.
    pub format_bias: i32,
    /// The exponent biases in force for E4M3 and E5M2 (exponent-bias scaling).
    pub bias: [Option<i32>; 2],
    /// Quantizations so far.
    pub steps: u64,
    /// Of those, how many used E4M3 and E5M2.
    pub chosen: [u64; 2],
}

impl From<&SiteState> for SiteRecord {
    fn from(site: &SiteState) -> Self {
        Self {
            label: site.label.clone(),
            roles: site
                .roles
                .iter()
                .map(|(role, r)| RoleRecord {
                    role: role.index(),
                    history: r.history.iter().copied().map(observed).collect(),
                    scale: r.scale,
                    layout: u8::from(r.format.layout() == Fp8Layout::E5M2),
                    format_bias: r.format.bias(),
                    bias: r.bias,
                    steps: r.steps,
                    chosen: r.chosen,
                })
                .collect(),
        }
    }
}

impl SiteRecord {
    fn into_state(self, site: u32) -> SiteState {
        let roles = self
            .roles
            .into_iter()
            .filter_map(|r| {
                let role = Fp8Role::from_index(r.role)?;
                let layout = if r.layout == 0 {
                    Fp8Layout::E4M3
                } else {
                    Fp8Layout::E5M2
                };
                let format = Fp8Format::new(layout, r.format_bias).ok()?;
                Some((
                    role,
                    RoleState {
                        history: r.history.into_iter().map(observed).collect(),
                        scale: r.scale,
                        format,
                        bias: r.bias,
                        steps: r.steps,
                        chosen: r.chosen,
                    },
                ))
            })
            .collect();
        SiteState {
            site,
            label: self.label,
            roles,
        }
    }
}

impl Fp8HistoryRecord {
    /// Checks every number a resumed run would use.
    ///
    /// ```
    /// use burn_amp::fp8::{Fp8HistoryRecord, LaneRecord, RoleRecord, SiteRecord};
    ///
    /// let role = RoleRecord {
    ///     role: 0,
    ///     history: vec![3.5, 7.0],
    ///     scale: 64.0,
    ///     layout: 0,
    ///     format_bias: 7,
    ///     bias: [None, None],
    ///     steps: 2,
    ///     chosen: [2, 0],
    /// };
    /// let record = |role: RoleRecord| Fp8HistoryRecord {
    ///     devices: vec![LaneRecord {
    ///         device_type: 0,
    ///         device_index: 0,
    ///         sites: vec![SiteRecord { label: "linear".into(), roles: vec![role] }],
    ///     }],
    /// };
    /// assert!(record(role.clone()).validate().is_ok());
    /// assert!(record(RoleRecord { scale: f32::NAN, ..role.clone() }).validate().is_err());
    /// assert!(record(RoleRecord { history: vec![-1.0], ..role.clone() }).validate().is_err());
    /// assert!(record(RoleRecord { role: 7, ..role.clone() }).validate().is_err());
    /// assert!(record(RoleRecord { bias: [Some(99), None], ..role }).validate().is_err());
    /// ```
    ///
    /// # Errors
    /// [`Fp8Error::InvalidRecord`] naming the first bad field: a role number, layout or
    /// bias out of range, a scale that is not a valid FP8 scale, a negative amax, a
    /// history longer than 2^20, or choice counts that exceed the steps.
    pub fn validate(&self) -> Result<(), Fp8Error> {
        let bad = |what: String| Err(Fp8Error::InvalidRecord(what));
        for device in &self.devices {
            for (i, site) in device.sites.iter().enumerate() {
                let at = |field: &str| {
                    format!(
                        "device {}:{} site {i} {field}",
                        device.device_type, device.device_index
                    )
                };
                for r in &site.roles {
                    if Fp8Role::from_index(r.role).is_none() {
                        return bad(format!("{} = {}: must be 0, 1 or 2", at("role"), r.role));
                    }
                    if r.layout > 1 {
                        return bad(format!(
                            "{} = {}: must be 0 (E4M3) or 1 (E5M2)",
                            at("layout"),
                            r.layout
                        ));
                    }
                    let bias_ok = |b: i32| (Fp8Format::MIN_BIAS..=Fp8Format::MAX_BIAS).contains(&b);
                    if !bias_ok(r.format_bias) || r.bias.iter().flatten().any(|b| !bias_ok(*b)) {
                        return bad(format!("{}: a bias outside 0..=63", at("bias")));
                    }
                    if !is_valid_scale(r.scale) {
                        return bad(format!(
                            "{} = {}: must be finite, in [2^-126, 2^126]",
                            at("scale"),
                            r.scale
                        ));
                    }
                    if r.history.len() > MAX_RECORD_HISTORY {
                        return bad(format!(
                            "{}: {} amaxes, more than 2^20",
                            at("history"),
                            r.history.len()
                        ));
                    }
                    if let Some(a) = r.history.iter().find(|a| **a < 0.0) {
                        return bad(format!("{}: amax {a} is negative", at("history")));
                    }
                    if r.chosen[0].saturating_add(r.chosen[1]) > r.steps {
                        return bad(format!(
                            "{}: more format choices than steps ({})",
                            at("chosen"),
                            r.steps
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

impl<B: Backend> Record<B> for Fp8History {
    type Item<S: PrecisionSettings> = Fp8HistoryRecord;

    fn into_item<S: PrecisionSettings>(self) -> Self::Item<S> {
        self.to_record()
    }

    /// Loads without checking: use [`Fp8History::load_record`] for a checked load.
    fn from_item<S: PrecisionSettings>(item: Self::Item<S>, _device: &B::Device) -> Self {
        let history = Self::default();
        if let Err(err) = history.load_record(item) {
            panic!("{err}");
        }
        history
    }
}
