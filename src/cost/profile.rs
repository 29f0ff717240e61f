//! Where a step's time goes, op by op: [`profile`] times every op the decorator runs, and
//! each backward pass burn-amp registers for its own kernels, by self time (an op's time
//! less that of the ops it runs inside it), under its phase.
//!
//! Burn's `Autodiff` runs the backward passes of the ops it records itself, out of the
//! decorator's sight: their time is one entry, `Burn's Autodiff steps`, the time of the
//! backward pass outside burn-amp's own backward ops. The model's code between ops (Burn's
//! tensor API, shape checks) is `between ops`.
//!
//! ```
//! use burn::backend::{Autodiff, Flex};
//! use burn::nn::{Linear, LinearConfig};
//! use burn::tensor::{Tensor, activation::gelu};
//! use burn_amp::{MixedPrecision, Policy, cost, with_policy};
//!
//! type B = MixedPrecision<Autodiff<Flex>>;
//! let device = Default::default();
//! let layer: Linear<B> = LinearConfig::new(64, 64).init(&device);
//! let (_, profile) = cost::profile(|| {
//!     with_policy(Policy::mixed_bfloat16(), || {
//!         let y = gelu(layer.forward(Tensor::<B, 2>::ones([32, 64], &device)));
//!         let _ = y.sum().backward();
//!     })
//! });
//! assert!(profile.entries().any(|e| e.op == "gelu" && e.calls == 1));
//! println!("{profile}"); // Markdown: phase, op, dtype, calls, ms, share
//! ```

use core::cell::RefCell;
use core::fmt;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use burn_tensor::DType;

use super::Dt;

/// The part of a training step an op ran in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Phase {
    /// Before the backward pass: the forward pass and the loss.
    Forward,
    /// Inside `backward()`.
    Backward,
    /// After the backward pass: reading gradients, the optimizer step.
    Optimizer,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "after backward",
        }
    }
}

/// One row of a [`Profile`].
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileEntry {
    /// The phase it ran in.
    pub phase: Phase,
    /// The op's name (Burn's, as `float_add`; a backward pass of burn-amp's as
    /// `softmax (backward)`).
    pub op: &'static str,
    /// The dtype it ran in, where its class fixes one.
    pub dtype: Option<DType>,
    /// Times it ran.
    pub calls: u64,
    /// Its self time, summed.
    pub time: Duration,
}

/// What [`profile`] measured.
#[derive(Clone, Debug, Default)]
pub struct Profile {
    entries: BTreeMap<(Phase, &'static str, Option<Dt>), (u64, Duration)>,
    total: Duration,
}

impl Profile {
    /// Every entry, by phase, then by time (longest first).
    pub fn entries(&self) -> impl Iterator<Item = ProfileEntry> + '_ {
        let mut all: Vec<ProfileEntry> = self
            .entries
            .iter()
            .map(|((phase, op, dtype), (calls, time))| ProfileEntry {
                phase: *phase,
                op,
                dtype: dtype.map(|d| d.0),
                calls: *calls,
                time: *time,
            })
            .collect();
        all.sort_by(|a, b| a.phase.cmp(&b.phase).then(b.time.cmp(&a.time)));
        all.into_iter()
    }

    /// The whole time profiled.
    pub fn total(&self) -> Duration {
        self.total
    }

    /// The time of one phase.
    pub fn phase_time(&self, phase: Phase) -> Duration {
        self.entries
            .iter()
            .filter(|((p, _, _), _)| *p == phase)
            .map(|(_, (_, t))| *t)
            .sum()
    }

    /// Adds another profile's entries (several steps of one configuration).
    pub fn absorb(&mut self, other: &Profile) {
        for (k, (n, t)) in &other.entries {
            let e = self.entries.entry(*k).or_default();
            e.0 += n;
            e.1 += *t;
        }
        self.total += other.total;
    }

    /// The entries that take at least `share` of the whole, the rest summed per phase as
    /// `other ops`, as a Markdown table with times divided by `runs` (steps profiled).
    pub fn table(&self, runs: u32, share: f64) -> String {
        let total = self.total.as_secs_f64().max(1e-12);
        let mut out = String::from("| Phase | Op | Dtype | Calls / step | ms / step | Share |\n");
        out.push_str("|---|---|---|---|---|---|\n");
        let mut rest: BTreeMap<Phase, (u64, Duration)> = BTreeMap::new();
        for e in self.entries() {
            let s = e.time.as_secs_f64() / total;
            if s < share {
                let r = rest.entry(e.phase).or_default();
                r.0 += e.calls;
                r.1 += e.time;
                continue;
            }
            let dtype = e.dtype.map_or("-".into(), super::dtype_name);
            out.push_str(&format!(
                "| {} | {} | {dtype} | {} | {:.2} | {:.1}% |\n",
                e.phase.name(),
                e.op,
                e.calls / u64::from(runs.max(1)),
                e.time.as_secs_f64() * 1e3 / f64::from(runs.max(1)),
                s * 100.0
            ));
        }
        for (phase, (calls, time)) in rest {
            if time.is_zero() {
                continue;
            }
            out.push_str(&format!(
                "| {} | other ops | - | {} | {:.2} | {:.1}% |\n",
                phase.name(),
                calls / u64::from(runs.max(1)),
                time.as_secs_f64() * 1e3 / f64::from(runs.max(1)),
                time.as_secs_f64() / total * 100.0
            ));
        }
        out
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table(1, 0.0))
    }
}

/// A key of the profile.
type Key = (Phase, &'static str, Option<Dt>);

/// The profile being recorded: the stack of ops running, and since when the top one runs.
struct Recording {
    profile: Profile,
    phase: Phase,
    stack: Vec<Key>,
    since: Instant,
    start: Instant,
    /// Waits for the device's queued work ([`profile_synced`]), if given.
    sync: Option<Rc<dyn Fn()>>,
}

impl Recording {
    /// Charges the time since the last change to the op on top of the stack.
    fn charge(&mut self, now: Instant) {
        let key = *self
            .stack
            .last()
            .unwrap_or(&(self.phase, "between ops", None));
        let e = self.profile.entries.entry(key).or_default();
        e.1 += now - self.since;
        self.since = now;
    }
}

thread_local! {
    /// Why a thread-local: as the cost report's, the profile belongs to the thread that
    /// asked for it and ends with its `profile` call.
    static PROFILING: RefCell<Option<Recording>> = const { RefCell::new(None) };
}

/// The time now; when the profile being recorded syncs, after the device's queued work has
/// finished. `None` when nothing is being profiled.
fn settled_now() -> Option<Instant> {
    // Taken out while it runs: ops the sync itself runs are not synced again.
    let sync = PROFILING.with(|p| p.borrow_mut().as_mut().map(|r| r.sync.take()))?;
    if let Some(sync) = sync {
        sync();
        PROFILING.with(|p| {
            if let Some(r) = p.borrow_mut().as_mut() {
                r.sync = Some(sync);
            }
        });
    }
    Some(Instant::now())
}

/// Runs `f` and measures where its time goes (see the module's documentation). It starts in
/// the forward phase and moves on at `backward()`: profile one step a call, and add steps
/// up with [`Profile::absorb`]. Profiles do not nest: an inner call measures nothing and
/// returns an empty profile.
///
/// On a backend that runs ops asynchronously (CUDA, wgpu), an op's time here is the time to
/// queue it: use [`profile_synced`] there.
pub fn profile<R>(f: impl FnOnce() -> R) -> (R, Profile) {
    recorded(None, f)
}

/// [`profile`] on an asynchronous backend: `sync` (the backend's `sync` of the device, as
/// `|| { let _ = B::sync(&device); }`) runs before and after every op, so that each op is
/// charged the device time of its own work. Ops then run one by one: a backend that fuses
/// ops (Burn's `Fusion`) fuses nothing, so the profile shows where time goes op by op, and
/// its total is more than an unsynced step's.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::tensor::{Tensor, backend::Backend};
/// use burn_amp::{MixedPrecision, cost};
///
/// type B = MixedPrecision<Autodiff<Flex>>;
/// let device = Default::default();
/// let x = Tensor::<B, 2>::ones([8, 8], &device);
/// let sync = move || { let _ = B::sync(&Default::default()); };
/// let (_, profile) = cost::profile_synced(sync, || x.clone().matmul(x).exp());
/// assert!(profile.entries().any(|e| e.op == "float_exp"));
/// ```
pub fn profile_synced<R>(sync: impl Fn() + 'static, f: impl FnOnce() -> R) -> (R, Profile) {
    recorded(Some(Rc::new(sync)), f)
}

fn recorded<R>(sync: Option<Rc<dyn Fn()>>, f: impl FnOnce() -> R) -> (R, Profile) {
    if let Some(sync) = &sync {
        sync();
    }
    let now = Instant::now();
    let started = PROFILING.with(|p| {
        let mut p = p.borrow_mut();
        if p.is_some() {
            return false;
        }
        *p = Some(Recording {
            profile: Profile::default(),
            phase: Phase::Forward,
            stack: Vec::new(),
            since: now,
            start: now,
            sync,
        });
        true
    });
    /// Ends the recording even if `f` panics.
    struct End(bool);
    impl Drop for End {
        fn drop(&mut self) {
            if self.0 {
                PROFILING.with(|p| p.borrow_mut().take());
            }
        }
    }
    let end = End(started);
    let out = f();
    let profile = if started {
        let now = settled_now().expect("recording");
        PROFILING.with(|p| {
            let mut p = p.borrow_mut();
            let r = p.as_mut().expect("recording");
            r.charge(now);
            r.profile.total = now - r.start;
            r.profile.clone()
        })
    } else {
        Profile::default()
    };
    drop(end);
    (out, profile)
}

/// An op being timed: its self time is charged when it ends (when this is dropped).
#[must_use = "an op is timed until its guard drops"]
pub(crate) struct Timed(bool);

impl Timed {
    /// A guard that times nothing (a query, not an op).
    pub(crate) fn none() -> Timed {
        Timed(false)
    }
}

impl Drop for Timed {
    fn drop(&mut self) {
        if self.0
            && let Some(now) = settled_now()
        {
            PROFILING.with(|p| {
                if let Some(r) = p.borrow_mut().as_mut() {
                    r.charge(now);
                    r.stack.pop();
                }
            });
        }
    }
}

/// Starts timing `name` (in `dtype`) until the guard drops.
pub(crate) fn start(name: &'static str, dtype: Option<DType>) -> Timed {
    // Not profiling: one look at the thread-local, nothing else.
    let Some(now) = settled_now() else {
        return Timed(false);
    };
    Timed(PROFILING.with(|p| match p.borrow_mut().as_mut() {
        Some(r) => {
            r.charge(now);
            let key = (r.phase, name, dtype.map(Dt));
            r.profile.entries.entry(key).or_default().0 += 1;
            r.stack.push(key);
            true
        }
        None => false,
    }))
}

/// The backward pass, while this lives: ops run in [`Phase::Backward`], the time outside
/// burn-amp's own backward ops charged to `Burn's Autodiff steps`; after it, in
/// [`Phase::Optimizer`].
pub(crate) struct BackwardPhase(Option<Timed>);

/// Starts the backward pass (see [`BackwardPhase`]).
pub(crate) fn backward() -> BackwardPhase {
    if let Some(now) = settled_now() {
        PROFILING.with(|p| {
            if let Some(r) = p.borrow_mut().as_mut() {
                r.charge(now);
                r.phase = Phase::Backward;
            }
        });
    }
    BackwardPhase(Some(start("Burn's Autodiff steps", None)))
}

impl Drop for BackwardPhase {
    fn drop(&mut self) {
        drop(self.0.take());
        if let Some(now) = settled_now() {
            PROFILING.with(|p| {
                if let Some(r) = p.borrow_mut().as_mut() {
                    r.charge(now);
                    r.phase = Phase::Optimizer;
                }
            });
        }
    }
}
