//! Launching the AdamW kernel over raw CubeCL buffers.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::kernel;
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

/// One AdamW step; returns the new parameter, moments and step count, in new buffers.
/// `found`: one f32 holding how many gradient values of this step were inf or NaN (the step
/// is skipped when it is positive), or `None` for a step that always runs.
pub fn adamw<R: Runtime, G: Float + CubeElement>(
    client: &ComputeClient<R>,
    buffers: AdamwBuffers,
    found: Option<Handle>,
    step: &AdamwStep,
) -> AdamwBuffers {
    let len = buffers.len as usize;
    let n = len.max(1);
    let param_out = client.empty(n * 4);
    let m_out = client.empty(n * 4);
    let v_out = client.empty(n * 4);
    let time_out = client.empty(4);
    let skippable = found.is_some();
    // Without a skip flag the kernel never reads `found`; any live buffer stands in.
    let found = found.unwrap_or_else(|| buffers.time.clone());
    let (count, dim) = grid::elementwise(client, buffers.len);
    unsafe {
        kernel::adamw_kernel::launch_unchecked::<G, R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(buffers.param, n),
            ArrayArg::from_raw_parts(buffers.grad.clone(), n),
            ArrayArg::from_raw_parts(buffers.m, n),
            ArrayArg::from_raw_parts(buffers.v, n),
            ArrayArg::from_raw_parts(buffers.time, 1),
            ArrayArg::from_raw_parts(found, 1),
            ArrayArg::from_raw_parts(param_out.clone(), len),
            ArrayArg::from_raw_parts(m_out.clone(), len),
            ArrayArg::from_raw_parts(v_out.clone(), len),
            ArrayArg::from_raw_parts(time_out.clone(), 1),
            kernel::HyperLaunch::new(step.lr, step.beta_1, step.beta_2, step.epsilon, step.decay),
            skippable,
        );
    }
    AdamwBuffers {
        param: param_out,
        grad: buffers.grad,
        m: m_out,
        v: v_out,
        time: time_out,
        len: buffers.len,
    }
}
