//! Launching the AdamW kernel over raw CubeCL buffers. The entries check every buffer
//! against the parameter's length and return a [`LaunchError`] instead of launching when
//! one is too short or misaligned.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::kernel;
use crate::checks::{self, LaunchError};
use crate::cpu::optim::AdamwStep;
use crate::grid;

/// The buffers of one parameter's step: `len` f32 values in `param`, `m` and `v`, `len`
/// values of the gradient's float type in `grad`, one f32 step count in `time`.
pub struct AdamwBuffers {
    /// The parameter.
    pub param: Handle,
    /// Its gradient (already unscaled).
    pub grad: Handle,
    /// The first moment.
    pub m: Handle,
    /// The second moment.
    pub v: Handle,
    /// The step count so far, one f32.
    pub time: Handle,
    /// Values in the parameter.
    pub len: u32,
}

/// Where [`adamw_into`] writes a step's results: `len` f32 in `param`, `m` and `v`, one f32
/// in `time`.
pub struct AdamwOutputs {
    /// The new parameter.
    pub param: Handle,
    /// The new first moment.
    pub m: Handle,
    /// The new second moment.
    pub v: Handle,
    /// The new step count.
    pub time: Handle,
}

impl AdamwOutputs {
    /// New buffers for a parameter of `len` values.
    pub fn new<R: Runtime>(client: &ComputeClient<R>, len: u32) -> Self {
        let n = len.max(1) as usize;
        Self {
            param: client.empty(n * 4),
            m: client.empty(n * 4),
            v: client.empty(n * 4),
            time: client.empty(4),
        }
    }
}

/// One AdamW step; returns the new parameter, moments and step count, in new buffers.
/// `found`: one f32 holding how many gradient values of this step were inf or NaN (the step
/// is skipped when it is positive), or `None` for a step that always runs.
///
/// # Errors
/// [`LaunchError`] when a buffer is too short or misaligned for `buffers.len`; nothing is
/// launched then.
pub fn adamw<R: Runtime, G: Float + CubeElement>(
    client: &ComputeClient<R>,
    buffers: AdamwBuffers,
    found: Option<Handle>,
    step: &AdamwStep,
) -> Result<AdamwBuffers, LaunchError> {
    let outputs = AdamwOutputs::new(client, buffers.len);
    let (grad, len) = (buffers.grad.clone(), buffers.len);
    adamw_into::<R, G>(client, buffers, found, &outputs, step)?;
    Ok(AdamwBuffers {
        param: outputs.param,
        grad,
        m: outputs.m,
        v: outputs.v,
        time: outputs.time,
        len,
    })
}

/// [`adamw`] into `outputs`.
///
/// # Errors
/// As [`adamw`], and when an output buffer is too short or misaligned.
pub fn adamw_into<R: Runtime, G: Float + CubeElement>(
    client: &ComputeClient<R>,
    buffers: AdamwBuffers,
    found: Option<Handle>,
    outputs: &AdamwOutputs,
    step: &AdamwStep,
) -> Result<(), LaunchError> {
    let len = buffers.len;
    for (name, handle) in [
        ("param", &buffers.param),
        ("m", &buffers.m),
        ("v", &buffers.v),
        ("param_out", &outputs.param),
        ("m_out", &outputs.m),
        ("v_out", &outputs.v),
    ] {
        checks::buffer(name, handle, len.into(), 4)?;
    }
    checks::buffer("grad", &buffers.grad, len.into(), size_of::<G>())?;
    checks::buffer("time", &buffers.time, 1, 4)?;
    checks::buffer("time_out", &outputs.time, 1, 4)?;
    if let Some(found) = &found {
        checks::buffer("found", found, 1, 4)?;
    }
    let n = (len as usize).max(1);
    let skippable = found.is_some();
    // Without a skip flag the kernel never reads `found`; any live buffer stands in.
    let found = found.unwrap_or_else(|| buffers.time.clone());
    let (count, dim) = grid::elementwise(client, len);
    // SAFETY: checked above: the parameter, moments and their outputs hold `len` f32, the
    // gradient `len` values of `G`, the step counts (and `found`, read only when given) one
    // f32; unit `i` reads and writes index `i < len` only, unit 0 also the step count.
    unsafe {
        kernel::adamw_kernel::launch_unchecked::<G, R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(buffers.param, n),
            ArrayArg::from_raw_parts(buffers.grad, n),
            ArrayArg::from_raw_parts(buffers.m, n),
            ArrayArg::from_raw_parts(buffers.v, n),
            ArrayArg::from_raw_parts(buffers.time, 1),
            ArrayArg::from_raw_parts(found, 1),
            ArrayArg::from_raw_parts(outputs.param.clone(), len as usize),
            ArrayArg::from_raw_parts(outputs.m.clone(), len as usize),
            ArrayArg::from_raw_parts(outputs.v.clone(), len as usize),
            ArrayArg::from_raw_parts(outputs.time.clone(), 1),
            kernel::HyperLaunch::new(step.lr, step.beta_1, step.beta_2, step.epsilon, step.decay),
            skippable,
        );
    }
    Ok(())
}
