//! The FP8 numerics report: for every FP8 matmul site of a training step, and for each of
//! its tensors (input, weight, incoming gradient), the amax and the share of values that
//! underflow to zero or saturate in E4M3 and in E5M2 under the policy's scaling, plus a
//! histogram of where the scaled values fall against each format's range.
//!
//! Recording reads every quantized tensor back to the host, so it is meant for a step or
//! two (the MNIST example's `--numerics`), not for every step of a run.

use core::fmt;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use burn_amp_kernels::fp8::reference::{decode, encode_scaled};
use burn_amp_kernels::fp8::scale::{ScaleRule, block_scale};
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, Fp8Layout, Overflow};
use burn_tensor::Shape;
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;

use super::scaling::Fp8Role;
use crate::fp8::Fp8Recipe;
use crate::fp8::backend::{block_amax_bits, host_f32};

thread_local! {
    /// Why a thread-local: [`Fp8Numerics::record`] is a scope around a step, and Burn runs a
    /// step's forward ops on the thread that calls them. Ops read it once, when their FP8
    /// site is resolved, and carry the [`Observer`] with them (into the backward pass too).
    static OBSERVER: RefCell<Option<Observer>> = const { RefCell::new(None) };
}

/// The two FP8 formats, in report order.
pub(crate) const FORMATS: [Fp8Format; 2] = [Fp8Format::E4M3, Fp8Format::E5M2];

/// The lowest exponent bin of [`Fp8Numerics`]' histograms: `floor(log2 |scaled value|)`
/// below it is counted in this bin.
pub(crate) const HISTOGRAM_MIN_EXPONENT: i32 = -32;
/// The highest exponent bin (E5M2's largest value is below `2^16`).
pub(crate) const HISTOGRAM_MAX_EXPONENT: i32 = 16;

#[derive(Default)]
struct Recorder {
    sites: BTreeMap<u32, SiteNumerics>,
    next_site: u32,
    /// A gradient was recorded since the last forward site: the next forward site starts a
    /// new step, numbered from 0 again.
    saw_gradient: bool,
}

/// A numerics report being recorded, as an FP8 site holds it.
#[derive(Clone, Default)]
pub(crate) struct Observer(Arc<Mutex<Recorder>>);

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Observer")
    }
}

/// One FP8 site of a recorded step: where its tensors are reported.
#[derive(Clone, Debug)]
pub(crate) struct SiteTag {
    observer: Observer,
    site: u32,
}

impl Observer {
    /// The observer of the [`Fp8Numerics::record`] open on this thread, if any.
    pub(crate) fn current() -> Option<Self> {
        OBSERVER.with(|o| o.borrow().clone())
    }

    fn lock(&self) -> MutexGuard<'_, Recorder> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Numbers a forward-pass FP8 site (`kind` and operand shapes make its label). Sites are
    /// numbered in call order within a step, so the same layer gets the same number at
    /// every step the report observes.
    pub(crate) fn site(&self, kind: &str, lhs: &Shape, rhs: &Shape) -> SiteTag {
        let mut recorder = self.lock();
        if core::mem::take(&mut recorder.saw_gradient) {
            recorder.next_site = 0;
        }
        let site = recorder.next_site;
        recorder.next_site += 1;
        recorder.sites.entry(site).or_insert_with(|| SiteNumerics {
            site,
            label: format!("{kind} {:?} x {:?}", lhs.as_slice(), rhs.as_slice()),
            roles: BTreeMap::new(),
        });
        SiteTag {
            observer: self.clone(),
            site,
        }
    }
}

/// The two formats a tensor was weighed in: each with its exponent bias and its
/// per-tensor scale (`None`: current scales per block of the recipe), and the one used.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidates {
    pub formats: [Fp8Format; 2],
    pub scales: [Option<f32>; 2],
    pub chosen: usize,
}

impl Candidates {
    /// Current scaling in both standard formats, `layout` used.
    pub fn current(layout: Fp8Layout) -> Self {
        Self {
            formats: FORMATS,
            scales: [None; 2],
            chosen: usize::from(layout == Fp8Layout::E5M2),
        }
    }
}

/// Adds one quantized tensor (flattened, with its original `shape`) to the report.
pub(crate) fn record<I: Backend>(
    tag: &SiteTag,
    role: Fp8Role,
    recipe: Fp8Recipe,
    flat: FloatTensor<I>,
    shape: &Shape,
    candidates: &Candidates,
) {
    let values = host_f32::<I>(flat);
    let Ok(layout) = recipe.layout(shape) else {
        return;
    };
    let rule = recipe.rule().unwrap_or(ScaleRule::Float { margin: 0 });
    let amaxes = block_amax_bits(&values, layout);
    let mut stats = RoleNumerics::new(role);
    for v in &values {
        stats.count += 1;
        if *v == 0.0 {
            stats.zeros += 1;
        } else if v.is_finite() {
            stats.amax = stats.amax.max(v.abs());
        } else {
            stats.non_finite += 1;
        }
    }
    stats.chosen[candidates.chosen] += 1;
    for (f, format) in candidates.formats.iter().enumerate() {
        let cast = Fp8Cast::new(*format).with_overflow(Overflow::NonSaturating);
        let scales: Vec<f32> = match candidates.scales[f] {
            Some(scale) => vec![scale; amaxes.len()],
            None => amaxes
                .iter()
                .map(|a| block_scale(*a, *format, rule).scale)
                .collect(),
        };
        let own = f == candidates.chosen;
        for (i, v) in values.iter().enumerate() {
            if *v == 0.0 || !v.is_finite() {
                continue;
            }
            let scale = scales[layout.block_of(i as u32) as usize];
            // Non-saturating: a value that rounds past the largest one comes back non-finite.
            let rounded = decode(encode_scaled(*v, scale, cast, i as u32), *format);
            if !rounded.is_finite() {
                stats.saturated[f] += 1;
            } else if rounded == 0.0 {
                stats.underflow[f] += 1;
            }
            if own {
                let exponent = (v * scale).abs().log2().floor() as i32;
                let bin = exponent.clamp(HISTOGRAM_MIN_EXPONENT, HISTOGRAM_MAX_EXPONENT)
                    - HISTOGRAM_MIN_EXPONENT;
                stats.histogram[bin as usize] += 1;
            }
        }
    }
    let site = tag.site;
    let mut recorder = tag.observer.lock();
    recorder.saw_gradient |= role == Fp8Role::Gradient;
    {
        let entry = recorder.sites.entry(site).or_insert_with(|| SiteNumerics {
            site,
            label: format!("site {site}"),
            roles: BTreeMap::new(),
        });
        entry
            .roles
            .entry(role)
            .and_modify(|r| r.merge(&stats))
            .or_insert(stats);
    }
}

/// The numerics of one tensor role at one site, summed over the recorded steps.
#[derive(Clone, Debug, PartialEq)]
pub struct RoleNumerics {
    /// What was quantized.
    pub role: Fp8Role,
    /// Values seen.
    pub count: u64,
    /// The largest finite magnitude seen.
    pub amax: f32,
    /// Values that were exactly zero before quantization.
    pub zeros: u64,
    /// Infinities and NaNs (they stay non-finite).
    pub non_finite: u64,
    /// Nonzero finite values that round to zero, in E4M3 and in E5M2 (E4M3 first),
    /// each with that format's scale from the policy's recipe.
    pub underflow: [u64; 2],
    /// Values that round past the format's largest value after scaling (saturate, or
    /// overflow under the OCP rule), in E4M3 and in E5M2.
    pub saturated: [u64; 2],
    /// How many nonzero values have `floor(log2 |x * scale|) = e` in the role's own format,
    /// for `e` from [`Fp8Numerics::HISTOGRAM_MIN_EXPONENT`] to [`Fp8Numerics::HISTOGRAM_MAX_EXPONENT`] (the ends also
    /// count everything beyond them).
    pub histogram: Vec<u64>,
    /// How many of the recorded tensors were rounded to E4M3 and to E5M2 (under
    /// `format=auto` both can count).
    pub chosen: [u64; 2],
}

impl RoleNumerics {
    fn new(role: Fp8Role) -> Self {
        Self {
            role,
            count: 0,
            amax: 0.0,
            zeros: 0,
            non_finite: 0,
            underflow: [0; 2],
            saturated: [0; 2],
            histogram: vec![0; (HISTOGRAM_MAX_EXPONENT - HISTOGRAM_MIN_EXPONENT + 1) as usize],
            chosen: [0; 2],
        }
    }

    fn merge(&mut self, other: &Self) {
        self.count += other.count;
        self.amax = self.amax.max(other.amax);
        self.zeros += other.zeros;
        self.non_finite += other.non_finite;
        for f in 0..2 {
            self.underflow[f] += other.underflow[f];
            self.saturated[f] += other.saturated[f];
            self.chosen[f] += other.chosen[f];
        }
        for (a, b) in self.histogram.iter_mut().zip(&other.histogram) {
            *a += b;
        }
    }

    /// The format this role was quantized to most often (under the hybrid format: E4M3
    /// forward, E5M2 backward).
    pub fn format(&self) -> Fp8Format {
        if self.chosen == [0, 0] {
            self.role.cast().format
        } else if self.chosen[1] > self.chosen[0] {
            Fp8Format::E5M2
        } else {
            Fp8Format::E4M3
        }
    }

    /// The share of all values that underflow to zero in `format` (E4M3 or E5M2).
    pub fn underflow_fraction(&self, format: Fp8Format) -> f64 {
        self.fraction(self.underflow[format_index(format)])
    }

    /// The share of all values that saturate in `format` (E4M3 or E5M2).
    pub fn saturation_fraction(&self, format: Fp8Format) -> f64 {
        self.fraction(self.saturated[format_index(format)])
    }

    /// The share of values that were zero to begin with.
    pub fn zero_fraction(&self) -> f64 {
        self.fraction(self.zeros)
    }

    fn fraction(&self, n: u64) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            n as f64 / self.count as f64
        }
    }
}

fn format_index(format: Fp8Format) -> usize {
    usize::from(format.layout() != Fp8Format::E4M3.layout())
}

/// One FP8 matmul site: a linear, convolution or matmul of the forward pass, numbered in
/// call order.
#[derive(Clone, Debug, PartialEq)]
pub struct SiteNumerics {
    /// The site's number (call order in the forward pass).
    pub site: u32,
    /// The op and its operand shapes, e.g. `linear [128, 784] x [784, 4096]`.
    pub label: String,
    /// What each role of the site looked like.
    pub roles: BTreeMap<Fp8Role, RoleNumerics>,
}

/// The numerics of the FP8 sites seen while recording.
///
/// ```
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::{Linear, LinearConfig};
/// use burn::tensor::Tensor;
/// use burn_amp::fp8::{Fp8Format, Fp8Role, Fp8Numerics};
/// use burn_amp::{MixedPrecision, Policy, with_policy};
///
/// type B = MixedPrecision<Autodiff<Flex>>;
/// let device = Default::default();
/// let layer: Linear<B> = LinearConfig::new(16, 4).init(&device);
/// let x = Tensor::<B, 2>::random([8, 16], burn::tensor::Distribution::Default, &device);
/// let ((), report) = Fp8Numerics::record(|| {
///     with_policy(Policy::float8_from_mixed_bfloat16(), || {
///         let _grads = layer.forward(x).sum().backward();
///     })
/// });
/// let site = &report.sites()[0];
/// assert!(site.label.starts_with("linear"));
/// let grad = &site.roles[&Fp8Role::Gradient];
/// assert_eq!(grad.count, 8 * 4);
/// assert_eq!(grad.saturation_fraction(Fp8Format::E5M2), 0.0);
/// println!("{report}");
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fp8Numerics {
    sites: Vec<SiteNumerics>,
}

impl Fp8Numerics {
    /// The histogram's first bin: `log2 |x * scale|` at or below this exponent.
    pub const HISTOGRAM_MIN_EXPONENT: i32 = HISTOGRAM_MIN_EXPONENT;
    /// The histogram's last bin: `log2 |x * scale|` at or above this exponent.
    pub const HISTOGRAM_MAX_EXPONENT: i32 = HISTOGRAM_MAX_EXPONENT;

    /// Runs `f` (a training step or several) while recording every FP8 site whose forward
    /// op runs on this thread, and returns its result with the report. Its gradient is
    /// recorded too, wherever the backward pass runs. Sites are numbered in call order
    /// within a step (a step ends when a gradient has been recorded), so a layer keeps its
    /// number across steps and its figures are summed. A `record` inside another one
    /// records into the inner report only.
    ///
    /// ```
    /// use burn::backend::{Autodiff, Flex};
    /// use burn::nn::{Linear, LinearConfig};
    /// use burn::tensor::Tensor;
    /// use burn_amp::fp8::{Fp8Numerics, Fp8Role};
    /// use burn_amp::{MixedPrecision, Policy, with_policy};
    ///
    /// type B = MixedPrecision<Autodiff<Flex>>;
    /// let device = Default::default();
    /// let layer: Linear<B> = LinearConfig::new(16, 4).init(&device);
    /// let x = Tensor::<B, 2>::ones([2, 16], &device);
    /// let ((), report) = Fp8Numerics::record(|| {
    ///     with_policy(Policy::float8_from_mixed_bfloat16(), || {
    ///         let _ = layer.forward(x).sum().backward();
    ///     })
    /// });
    /// assert_eq!(report.sites().len(), 1); // the linear
    /// let input = &report.sites()[0].roles[&Fp8Role::Input];
    /// assert_eq!(input.zero_fraction(), 0.0); // ones: nothing is zero
    /// println!("{report}"); // per site and role: amax, underflow and saturation in E4M3/E5M2
    /// ```
    pub fn record<R>(f: impl FnOnce() -> R) -> (R, Self) {
        struct Restore(Option<Observer>);
        impl Drop for Restore {
            fn drop(&mut self) {
                OBSERVER.with(|o| *o.borrow_mut() = self.0.take());
            }
        }
        let observer = Observer::default();
        let restore = Restore(OBSERVER.with(|o| o.borrow_mut().replace(observer.clone())));
        let out = f();
        drop(restore);
        let sites = core::mem::take(&mut observer.lock().sites);
        (
            out,
            Self {
                sites: sites.into_values().collect(),
            },
        )
    }

    /// The sites, in call order.
    pub fn sites(&self) -> &[SiteNumerics] {
        &self.sites
    }

    /// Whether no FP8 site ran while recording (no FP8 policy in force, say).
    pub fn is_empty(&self) -> bool {
        self.sites.is_empty()
    }

    /// The histogram of one role summed over all sites (see [`RoleNumerics::histogram`]).
    pub fn histogram(&self, role: Fp8Role) -> Vec<u64> {
        let mut total = RoleNumerics::new(role);
        for stats in self.sites.iter().filter_map(|s| s.roles.get(&role)) {
            total.merge(stats);
        }
        total.histogram
    }
}

impl fmt::Display for Fp8Numerics {
    /// A table: one line per site and role; underflow (`uf`) and saturation (`sat`) in
    /// percent of all values, for E4M3 and E5M2; `*` marks the format the role used most;
    /// `picked` counts the tensors rounded to E4M3 / E5M2.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<44} {:<6} {:>10} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8}",
            "site",
            "role",
            "amax",
            "zero%",
            "e4m3 uf%",
            "e4m3 sat%",
            "e5m2 uf%",
            "e5m2 sat%",
            "picked"
        )?;
        for site in &self.sites {
            for (role, stats) in &site.roles {
                let mark = |format: Fp8Format| if stats.format() == format { "*" } else { " " };
                writeln!(
                    f,
                    "{:<44} {:<6} {:>10.3e} {:>7.2} {:>8.3}{} {:>9.3} {:>8.3}{} {:>9.3} {:>8}",
                    format!("#{} {}", site.site, site.label),
                    role.name(),
                    stats.amax,
                    100.0 * stats.zero_fraction(),
                    100.0 * stats.underflow_fraction(Fp8Format::E4M3),
                    mark(Fp8Format::E4M3),
                    100.0 * stats.saturation_fraction(Fp8Format::E4M3),
                    100.0 * stats.underflow_fraction(Fp8Format::E5M2),
                    mark(Fp8Format::E5M2),
                    100.0 * stats.saturation_fraction(Fp8Format::E5M2),
                    format!("{}/{}", stats.chosen[0], stats.chosen[1]),
                )?;
            }
        }
        Ok(())
    }
}
