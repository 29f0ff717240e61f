//! What a training step costs under a policy: which ops [`MixedPrecision`](crate::MixedPrecision)
//! ran in which class and dtype, the casts it inserted and the bytes they moved, the
//! operands burn-amp's kernels rounded while packing instead of casting, the FP8
//! quantize/dequantize launches, and the reads back to the host: burn-amp's own, and the
//! ones the user's code made through the decorator (a logged loss), counted apart.
//!
//! [`profile`] times the same ops, by phase (see its module).
//!
//! Turn it on around a step with [`record`]; it counts what the recording thread runs (the
//! forward pass, the backward pass and the optimizer step of a plain training loop), exactly:
//!
//! ```
//! use burn::backend::{Autodiff, Flex};
//! use burn::nn::{Linear, LinearConfig};
//! use burn::tensor::Tensor;
//! use burn_amp::{MixedPrecision, Policy, cost, with_policy};
//!
//! type B = MixedPrecision<Autodiff<Flex>>;
//! let device = Default::default();
//! let layer: Linear<B> = LinearConfig::new(8, 4).init(&device);
//! let (_, cost) = cost::record(|| {
//!     with_policy(Policy::mixed_bfloat16(), || {
//!         let y = layer.forward(Tensor::<B, 2>::ones([2, 8], &device));
//!         let _ = y.sum().backward();
//!     })
//! });
//! assert_eq!(cost.reads().burn_amp, 0); // nothing read back
//! println!("{cost}");
//! ```

mod profile;

use core::cell::{Cell, RefCell};
use core::fmt;
use std::collections::BTreeMap;

use burn_tensor::DType;

pub use profile::{Phase, Profile, ProfileEntry, profile, profile_synced};
pub(crate) use profile::{Timed, backward, start as timed};

/// The class of an op, as the casting rules sort them (`crate::backend::autocast`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpClass {
    /// Matmul, linear, convolutions, attention: in the compute dtype.
    Compute,
    /// Softmax, exp, log, reductions, norms, losses: forced to f32.
    Float32,
    /// Several float inputs meeting in the widest dtype.
    Promote,
    /// Writes into an existing tensor: the destination's dtype.
    Assign,
    /// Tensors made from nothing: the variable dtype.
    Create,
    /// Everything else: handed to the inner backend as it comes.
    Forwarded,
}

impl OpClass {
    fn name(self) -> &'static str {
        match self {
            OpClass::Compute => "compute",
            OpClass::Float32 => "float32",
            OpClass::Promote => "promote",
            OpClass::Assign => "assign",
            OpClass::Create => "create",
            OpClass::Forwarded => "forwarded",
        }
    }
}

/// How the cost report counts an op of Burn's backend traits: one row of the class table
/// ([`crate::op_classes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counted {
    /// As an op of this class (in [`StepCost::ops`]).
    Op(OpClass),
    /// As a read back to the host the user's code made (in [`Reads::user`]).
    UserRead,
    /// Not at all: it touches no values (a tensor's device, a flag).
    Query,
}

/// An op written out by hand (not made by a `forward!`/`autocast!` table): its name and the
/// class the cost report counts it in, stated once, beside the op. The op records itself
/// through it and its file's list of written ops gives it to the class table
/// ([`crate::op_classes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OpRow {
    pub name: &'static str,
    pub class: OpClass,
}

impl OpRow {
    /// The row of op `name`, counted as `class`.
    pub const fn new(name: &'static str, class: OpClass) -> Self {
        Self { name, class }
    }

    /// Counts the op (and times it), running in `dtype`.
    pub fn record(self, dtype: Option<DType>) -> Timed {
        op(self.class, self.name, dtype)
    }

    /// Its row of the class table.
    pub fn row(self) -> (&'static str, Counted) {
        (self.name, Counted::Op(self.class))
    }
}

/// Reads back to the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reads {
    /// burn-amp's own: the loss scaler's overflow check, FP8 scaling state, records.
    pub burn_amp: u64,
    /// The user's, through the decorator (`into_data`, `into_scalar` of a loss, ...).
    pub user: u64,
}

/// What [`record`] counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepCost {
    ops: BTreeMap<(OpClass, &'static str, Option<Dt>), u64>,
    casts: BTreeMap<(Dt, Dt), (u64, u64)>,
    rounded: BTreeMap<(Dt, Dt), (u64, u64)>,
    fp8: BTreeMap<&'static str, u64>,
    reads: Reads,
}

impl StepCost {
    /// How many ops ran in `class` (any name, any dtype).
    pub fn ops_in(&self, class: OpClass) -> u64 {
        self.ops
            .iter()
            .filter(|((c, _, _), _)| *c == class)
            .map(|(_, n)| n)
            .sum()
    }

    /// Every op counted: `(class, name, dtype it ran in where the class fixes one, count)`.
    pub fn ops(&self) -> impl Iterator<Item = (OpClass, &'static str, Option<DType>, u64)> + '_ {
        self.ops
            .iter()
            .map(|((c, n, d), k)| (*c, *n, d.map(|d| d.0), *k))
    }

    /// The casts the decorator inserted: `(from, to, count, bytes read and written)`.
    pub fn casts(&self) -> impl Iterator<Item = (DType, DType, u64, u64)> + '_ {
        self.casts.iter().map(|((f, t), (n, b))| (f.0, t.0, *n, *b))
    }

    /// All casts: how many, and the bytes they moved.
    pub fn cast_total(&self) -> (u64, u64) {
        self.casts
            .values()
            .fold((0, 0), |(n, b), (k, c)| (n + k, b + c))
    }

    /// Operands burn-amp's GEMM rounded while packing instead of casting them:
    /// `(from, to, count, bytes a cast would have moved)`.
    pub fn rounded_in_kernel(&self) -> impl Iterator<Item = (DType, DType, u64, u64)> + '_ {
        self.rounded
            .iter()
            .map(|((f, t), (n, b))| (f.0, t.0, *n, *b))
    }

    /// FP8 launches by operation (`amax`, `scales`, `quantize`, `dequantize`, `fake_quantize`).
    pub fn fp8_launches(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.fp8.iter().map(|(k, n)| (*k, *n))
    }

    /// All FP8 launches.
    pub fn fp8_total(&self) -> u64 {
        self.fp8.values().sum()
    }

    /// The reads back to the host.
    pub fn reads(&self) -> Reads {
        self.reads
    }
}

/// A dtype as a map key (Burn's `DType` has no order): ordered by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Dt(DType);

impl Ord for Dt {
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        dtype_name(self.0).cmp(&dtype_name(other.0))
    }
}

impl PartialOrd for Dt {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

fn dtype_name(d: DType) -> String {
    format!("{d:?}").to_lowercase()
}

impl fmt::Display for StepCost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "| ops | class | dtype | count |")?;
        writeln!(f, "|---|---|---|---|")?;
        // (class, dtype) -> (ops, the op names seen)
        type ByClass<'a> = BTreeMap<(OpClass, Option<Dt>), (u64, Vec<&'a str>)>;
        let mut by_class = ByClass::new();
        for ((class, name, dtype), n) in &self.ops {
            let entry = by_class.entry((*class, *dtype)).or_default();
            entry.0 += n;
            if !entry.1.contains(name) {
                entry.1.push(name);
            }
        }
        for ((class, dtype), (n, names)) in &by_class {
            let dtype = dtype.map_or("as input".to_string(), |d| dtype_name(d.0));
            let mut names = names.join(", ");
            if names.len() > 60 {
                names.truncate(57);
                names.push_str("...");
            }
            writeln!(f, "| {names} | {} | {dtype} | {n} |", class.name())?;
        }
        let (casts, bytes) = self.cast_total();
        writeln!(f, "\n| casts inserted | count | bytes moved |")?;
        writeln!(f, "|---|---|---|")?;
        for ((from, to), (n, b)) in &self.casts {
            writeln!(
                f,
                "| {} -> {} | {n} | {b} |",
                dtype_name(from.0),
                dtype_name(to.0)
            )?;
        }
        writeln!(f, "| all | {casts} | {bytes} |")?;
        if !self.rounded.is_empty() {
            writeln!(
                f,
                "\n| rounded while packed (no cast) | count | bytes a cast would move |"
            )?;
            writeln!(f, "|---|---|---|")?;
            for ((from, to), (n, b)) in &self.rounded {
                writeln!(
                    f,
                    "| {} -> {} | {n} | {b} |",
                    dtype_name(from.0),
                    dtype_name(to.0)
                )?;
            }
        }
        writeln!(f, "\n| FP8 launches | count |")?;
        writeln!(f, "|---|---|")?;
        for (op, n) in &self.fp8 {
            writeln!(f, "| {op} | {n} |")?;
        }
        writeln!(f, "| all | {} |", self.fp8_total())?;
        writeln!(f, "\n| reads back to the host | count |")?;
        writeln!(f, "|---|---|")?;
        writeln!(f, "| burn-amp's | {} |", self.reads.burn_amp)?;
        write!(
            f,
            "| the user's, through the decorator | {} |",
            self.reads.user
        )
    }
}

thread_local! {
    /// Why a thread-local: Burn's ops receive no user state; the recording belongs to the
    /// thread that asked for it, and ends with its `record` call.
    static RECORDING: RefCell<Option<StepCost>> = const { RefCell::new(None) };
    /// Why a thread-local: marks a read burn-amp makes through the decorator, so the
    /// decorator does not count it as the user's too.
    static OWN_READ: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` and counts what it costs (see the module's documentation). Recordings nest:
/// the inner one counts its part, the outer one all of it.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{DType, Tensor};
/// use burn_amp::cost::{self, OpClass};
/// use burn_amp::{MixedPrecision, Policy, with_policy};
///
/// type B = MixedPrecision<Flex>;
/// let x = Tensor::<B, 2>::ones([8, 8], &Default::default());
/// let (y, cost) = cost::record(|| with_policy(Policy::mixed_bfloat16(), || x.clone().matmul(x)));
/// assert_eq!(y.dtype(), DType::BF16);
/// assert_eq!(cost.ops_in(OpClass::Compute), 1);
/// println!("{cost}"); // Markdown tables: ops, casts, FP8 launches, reads
/// ```
pub fn record<R>(f: impl FnOnce() -> R) -> (R, StepCost) {
    /// Puts the outer recording back (with this one's counts added) even if `f` panics.
    struct Restore(Option<StepCost>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let inner = RECORDING.with(|r| r.borrow_mut().take());
            let outer = self.0.take().map(|mut outer| {
                if let Some(inner) = &inner {
                    outer.absorb(inner);
                }
                outer
            });
            RECORDING.with(|r| *r.borrow_mut() = outer);
        }
    }
    let restore = Restore(RECORDING.with(|r| r.replace(Some(StepCost::default()))));
    let out = f();
    let cost = RECORDING.with(|r| r.borrow().clone()).unwrap_or_default();
    drop(restore);
    (out, cost)
}

impl StepCost {
    fn absorb(&mut self, other: &StepCost) {
        for (k, n) in &other.ops {
            *self.ops.entry(*k).or_default() += n;
        }
        for (k, (n, b)) in &other.casts {
            let e = self.casts.entry(*k).or_default();
            e.0 += n;
            e.1 += b;
        }
        for (k, (n, b)) in &other.rounded {
            let e = self.rounded.entry(*k).or_default();
            e.0 += n;
            e.1 += b;
        }
        for (k, n) in &other.fp8 {
            *self.fp8.entry(k).or_default() += n;
        }
        self.reads.burn_amp += other.reads.burn_amp;
        self.reads.user += other.reads.user;
    }
}

fn with(f: impl FnOnce(&mut StepCost)) {
    RECORDING.with(|r| {
        if let Some(cost) = r.borrow_mut().as_mut() {
            f(cost);
        }
    });
}

/// An op of `class` named `name`, running in `dtype` where the class fixes one: counted,
/// and timed by [`profile`] until the guard drops.
pub(crate) fn op(class: OpClass, name: &'static str, dtype: Option<DType>) -> Timed {
    with(|c| *c.ops.entry((class, name, dtype.map(Dt))).or_default() += 1);
    timed(name, dtype)
}

/// A cast the decorator inserted, of `elements` values.
pub(crate) fn cast(from: DType, to: DType, elements: usize) {
    let bytes = (elements * (from.size() + to.size())) as u64;
    with(|c| {
        let e = c.casts.entry((Dt(from), Dt(to))).or_default();
        e.0 += 1;
        e.1 += bytes;
    });
}

/// An operand of `elements` values that a kernel rounded from `from` to `to` while packing.
pub(crate) fn rounded(from: DType, to: DType, elements: usize) {
    if from == to {
        return;
    }
    let bytes = (elements * (from.size() + to.size())) as u64;
    with(|c| {
        let e = c.rounded.entry((Dt(from), Dt(to))).or_default();
        e.0 += 1;
        e.1 += bytes;
    });
}

/// An op counted as its row of the class table says ([`crate::op_classes`]); timed by
/// [`profile`] until the guard drops, except a query.
pub(crate) fn counted(name: &'static str, how: Counted) -> Timed {
    match how {
        Counted::Op(class) => op(class, name, None),
        Counted::UserRead => {
            user_read();
            timed(name, None)
        }
        Counted::Query => Timed::none(),
    }
}

/// An FP8 kernel launch.
pub(crate) fn fp8(op: &'static str) {
    with(|c| *c.fp8.entry(op).or_default() += 1);
}

/// Runs `read`, a read back to the host burn-amp makes, and counts it once (reads the
/// decorator sees inside it are burn-amp's, not the user's).
pub(crate) fn read<T>(read: impl FnOnce() -> T) -> T {
    with(|c| c.reads.burn_amp += 1);
    let was = OWN_READ.with(|o| o.replace(true));
    let out = read();
    OWN_READ.with(|o| o.set(was));
    out
}

/// Runs `f`, whose reads are copies within host memory (a CPU backend's tensors), and
/// counts none of them.
pub(crate) fn uncounted<T>(f: impl FnOnce() -> T) -> T {
    let saved = RECORDING.with(|r| r.borrow_mut().take());
    let was = OWN_READ.with(|o| o.replace(true));
    let out = f();
    OWN_READ.with(|o| o.set(was));
    RECORDING.with(|r| *r.borrow_mut() = saved);
    out
}

/// A read the decorator saw (`*_into_data`): the user's, unless burn-amp is reading.
pub(crate) fn user_read() {
    if !OWN_READ.with(Cell::get) {
        with(|c| c.reads.user += 1);
    }
}
