//! Optimizer kernels on slices: one pass over a parameter does the whole AdamW update, in
//! place; the loss scaler's unscale is one pass in place and its finite check one
//! read-only pass.
//!
//! The arithmetic is Burn's `AdamW`, operation for operation in f32 (no fused multiply-add),
//! so on the same values the results are Burn's bit for bit:
//!
//! ```text
//! g  = grad / scale                                   (under a loss scale)
//! m  = m * b1 + g * (1 - b1)
//! v  = v * b2 + (g * g) * (1 - b2)
//! p  = p * (1 - lr * wd) - ((m / c1) / (sqrt(v / c2) + eps)) * lr
//! ```
//!
//! with `c1 = 1 - b1^t`, `c2 = 1 - b2^t` for the parameter's step count `t` after this step.
//!
//! ```
//! use burn_amp_kernels::cpu::{Isa, optim::{AdamwStep, adamw}};
//!
//! let step = AdamwStep::new(1e-3, 0.9, 0.999, 1e-5, 0.0);
//! let (mut p, mut m, mut v) = (vec![1.0f32; 4], vec![0.0; 4], vec![0.0; 4]);
//! let g = [0.5f32, -0.5, 0.0, 2.0];
//! adamw(Isa::detect(), &mut p, &g, &mut m, &mut v, &step.at(1), None)?;
//! assert!(p[0] < 1.0 && p[1] > 1.0 && p[2] == 1.0);
//! # Ok::<(), burn_amp_kernels::cpu::optim::OptimError>(())
//! ```

mod loops;

use super::Isa;
use super::cast::CpuFloat;
use super::erased::{Floats, typed};
use super::parallel;

/// Why an optimizer kernel was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OptimError {
    /// The parameter, its gradient and its moments differ in length.
    #[error("lengths differ: parameter {param}, gradient {grad}, moments {m} and {v}")]
    LengthMismatch {
        /// Values in the parameter.
        param: usize,
        /// Values in the gradient.
        grad: usize,
        /// Values in the first moment.
        m: usize,
        /// Values in the second moment.
        v: usize,
    },
}

/// The hyper-parameters of an AdamW step, as Burn's `AdamW` turns them into f32 scalars.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamwStep {
    /// The learning rate, as f32.
    pub lr: f32,
    /// `beta_1`.
    pub beta_1: f32,
    /// `beta_2`.
    pub beta_2: f32,
    /// `epsilon`, added to the root of the second moment.
    pub epsilon: f32,
    /// `1 - lr * weight_decay`, computed in f64 and rounded once (as Burn does).
    pub decay: f32,
}

impl AdamwStep {
    /// The scalars of a step at learning rate `lr` (f64, Burn's `LearningRate`).
    pub fn new(lr: f64, beta_1: f32, beta_2: f32, epsilon: f32, weight_decay: f32) -> Self {
        Self {
            lr: lr as f32,
            beta_1,
            beta_2,
            epsilon,
            decay: (1.0 - lr * f64::from(weight_decay)) as f32,
        }
    }

    /// The step of a parameter whose step count becomes `t` (from 1), with its bias
    /// corrections computed as Burn does (`1f32 - beta.powi(t)`).
    pub fn at(&self, t: u32) -> AdamwAt {
        let t = t.min(i32::MAX as u32) as i32;
        AdamwAt {
            step: *self,
            c1: 1.0 - self.beta_1.powi(t),
            c2: 1.0 - self.beta_2.powi(t),
        }
    }
}

/// An [`AdamwStep`] at one step count: with its bias corrections.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamwAt {
    /// The step's scalars.
    pub step: AdamwStep,
    /// `1 - beta_1^t`.
    pub c1: f32,
    /// `1 - beta_2^t`.
    pub c2: f32,
}

/// A step with its corrections: what the element loop reads.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scalars {
    pub lr: f32,
    pub b1: f32,
    pub one_minus_b1: f32,
    pub b2: f32,
    pub one_minus_b2: f32,
    pub eps: f32,
    pub decay: f32,
    pub c1: f32,
    pub c2: f32,
    /// The loss scale the gradient is divided by; 1 when unscaled.
    pub scale: f32,
    pub scaled: bool,
}

/// Values per task: a task outlasts its scheduling, and two cores stay balanced.
const CHUNK: usize = 1 << 15;

/// One AdamW step of a parameter, in place: `param`, `m` and `v` are read and written once,
/// `grad` read once. `scale`: the loss scale `grad` still carries (divided out here).
///
/// # Errors
/// [`OptimError::LengthMismatch`] when the four slices differ in length; nothing is written.
pub fn adamw<G: CpuFloat>(
    isa: Isa,
    param: &mut [f32],
    grad: &[G],
    m: &mut [f32],
    v: &mut [f32],
    at: &AdamwAt,
    scale: Option<f32>,
) -> Result<(), OptimError> {
    adamw_erased(isa, param, G::floats(grad), m, v, at, scale)
}

/// [`adamw`] for any gradient type: not generic, so compiled here (`erased`).
fn adamw_erased(
    isa: Isa,
    param: &mut [f32],
    grad: Floats<'_>,
    m: &mut [f32],
    v: &mut [f32],
    at: &AdamwAt,
    scale: Option<f32>,
) -> Result<(), OptimError> {
    typed!(grad, |grad| adamw_typed(isa, param, grad, m, v, at, scale))
}

/// [`adamw`]'s body.
fn adamw_typed<G: CpuFloat>(
    isa: Isa,
    param: &mut [f32],
    grad: &[G],
    m: &mut [f32],
    v: &mut [f32],
    at: &AdamwAt,
    scale: Option<f32>,
) -> Result<(), OptimError> {
    let n = param.len();
    if grad.len() != n || m.len() != n || v.len() != n {
        return Err(OptimError::LengthMismatch {
            param: n,
            grad: grad.len(),
            m: m.len(),
            v: v.len(),
        });
    }
    let step = &at.step;
    let s = Scalars {
        lr: step.lr,
        b1: step.beta_1,
        one_minus_b1: 1.0 - step.beta_1,
        b2: step.beta_2,
        one_minus_b2: 1.0 - step.beta_2,
        eps: step.epsilon,
        decay: step.decay,
        c1: at.c1,
        c2: at.c2,
        scale: scale.unwrap_or(1.0),
        scaled: scale.is_some(),
    };
    let run =
        |p: &mut [f32], g: &[G], m: &mut [f32], v: &mut [f32]| loops::adamw(isa, p, g, m, v, &s);
    if n <= CHUNK {
        run(param, grad, m, v);
    } else {
        parallel::chunks3((param, CHUNK), (m, CHUNK), (v, CHUNK), |c, p, m, v| {
            run(p, parallel::chunk(grad, CHUNK, c), m, v)
        });
    }
    Ok(())
}

/// How many of `values` are inf or NaN.
pub fn count_nonfinite<T: CpuFloat>(isa: Isa, values: &[T]) -> usize {
    count_nonfinite_erased(isa, T::floats(values))
}

fn count_nonfinite_erased(isa: Isa, values: Floats<'_>) -> usize {
    typed!(values, |values| count_nonfinite_typed(isa, values))
}

fn count_nonfinite_typed<T: CpuFloat>(isa: Isa, values: &[T]) -> usize {
    let run = |chunk: &[T]| loops::count_nonfinite(isa, chunk);
    if values.len() <= CHUNK {
        run(values)
    } else {
        parallel::map(values.len().div_ceil(CHUNK), |c| {
            run(parallel::chunk(values, CHUNK, c))
        })
        .into_iter()
        .sum()
    }
}

/// `values / scale`, in place (the loss scaler's unscale of a gradient).
pub fn unscale(isa: Isa, values: &mut [f32], scale: f32) {
    let run = |chunk: &mut [f32]| loops::unscale(isa, chunk, scale);
    if values.len() <= CHUNK {
        run(values)
    } else {
        parallel::chunks(values, CHUNK, |_, chunk| run(chunk))
    }
}
