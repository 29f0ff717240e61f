//! The AdamW kernel in CubeCL.

// `#[cube]` expands each function into an undocumented helper module.
#![allow(missing_docs)]

use cubecl::prelude::*;

/// `beta^t` for a whole `t` by square-and-multiply, the order of compiler-rt's `__powisf2`
/// (what Rust's `f32::powi` calls for a run-time exponent): the bias corrections Burn's
/// `AdamW` computes on the host, bit for bit, where a GPU's `powf` may be a few ulps off.
#[cube]
pub fn powi(beta: f32, t: u32) -> f32 {
    let mut result = 1.0f32;
    let mut base = beta;
    let mut rest = t;
    #[unroll]
    for _ in 0..32u32 {
        if (rest & 1u32) == 1u32 {
            result *= base;
        }
        rest >>= 1u32;
        base *= base;
    }
    result
}

/// One step's hyperparameters, one kernel argument (the device form of
/// [`crate::cpu::optim::AdamwStep`]); `decay` is `1 - lr * weight_decay`.
#[derive(CubeLaunch, CubeType, Clone, Copy)]
pub struct Hyper {
    pub lr: f32,
    pub beta_1: f32,
    pub beta_2: f32,
    pub epsilon: f32,
    pub decay: f32,
}

/// Unit `i` updates element `i`: with `t = time[0] + 1` (or `time[0]` on a skipped step,
/// `found[0] > 0` when `skippable`),
///
/// ```text
/// m' = m * b1 + g * (1 - b1)
/// v' = v * b2 + (g * g) * (1 - b2)
/// p' = p * decay - ((m' / c1) / (sqrt(v' / c2) + eps)) * lr,  c = 1 - b^t (see [`powi`])
/// ```
///
/// On a skipped step every output is its input, bit for bit. Unit 0 writes `t` to
/// `time_out[0]`.
#[cube(launch_unchecked)]
// The ten buffers of one fused update (four streams in, four out, a step count in and out,
// the skip flag): CubeCL kernels take their buffers as arguments.
#[allow(clippy::too_many_arguments)]
pub fn adamw_kernel<G: Float>(
    param: &Array<f32>,
    grad: &Array<G>,
    m: &Array<f32>,
    v: &Array<f32>,
    time: &Array<f32>,
    found: &Array<f32>,
    param_out: &mut Array<f32>,
    m_out: &mut Array<f32>,
    v_out: &mut Array<f32>,
    time_out: &mut Array<f32>,
    hyper: Hyper,
    #[comptime] skippable: bool,
) {
    let (lr, beta_1, beta_2) = (hyper.lr, hyper.beta_1, hyper.beta_2);
    let (epsilon, decay) = (hyper.epsilon, hyper.decay);
    let i = ABSOLUTE_POS;
    let mut skip = false;
    if comptime!(skippable) {
        skip = found[0] > 0.0;
    }
    let mut t = time[0];
    if !skip {
        t += 1.0;
    }
    // Before the bounds check: a parameter with no values still counts its step.
    if i == 0 {
        time_out[0] = t;
    }
    if i >= param_out.len() {
        terminate!();
    }
    let p = param[i];
    let m0 = m[i];
    let v0 = v[i];
    if skip {
        param_out[i] = p;
        m_out[i] = m0;
        v_out[i] = v0;
    } else {
        let g = f32::cast_from(grad[i]);
        let whole = u32::cast_from(t);
        let c1 = 1.0 - powi(beta_1, whole);
        let c2 = 1.0 - powi(beta_2, whole);
        let m1 = m0 * beta_1 + g * (1.0 - beta_1);
        let v1 = v0 * beta_2 + (g * g) * (1.0 - beta_2);
        let delta = (m1 / c1) / (f32::sqrt(v1 / c2) + epsilon);
        param_out[i] = p * decay - delta * lr;
        m_out[i] = m1;
        v_out[i] = v1;
    }
}
