//! Launching the ordering kernels: one unit each, on the calling thread's CubeCL stream.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::kernel;
use crate::checks::{self, LaunchError};

/// Buffers one spin kernel binds; a longer list takes several spins on the same counter
/// (the first waits, the others find it reached).
pub const BOUND_PER_SPIN: usize = 4;

/// Enqueues the store of `value` into `flag` (one `u32`) on `client`'s stream.
///
/// # Errors
/// [`LaunchError`] when `flag` holds no `u32` or is misaligned; nothing is launched then.
pub fn signal<R: Runtime>(
    client: &ComputeClient<R>,
    flag: &Handle,
    value: u32,
) -> Result<(), LaunchError> {
    checks::buffer("flag", flag, 1, 4)?;
    // SAFETY: checked above: `flag` holds a u32; one unit writes element 0.
    unsafe {
        kernel::signal_kernel::launch_unchecked::<R>(
            client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(1),
            ArrayArg::from_raw_parts(flag.clone(), 1),
            value,
        );
    }
    Ok(())
}

/// Enqueues a one-thread kernel on `client`'s stream that returns once `done` (one `u32`,
/// written by another stream) has reached `value`, binding every buffer of `bound` (read
/// as `u32` words, not read at all in fact).
///
/// # Errors
/// [`LaunchError`] when `done` holds no `u32` or is misaligned; nothing is launched then.
pub fn spin<R: Runtime>(
    client: &ComputeClient<R>,
    done: &Handle,
    value: u32,
    bound: &[Handle],
) -> Result<(), LaunchError> {
    checks::buffer("done", done, 1, 4)?;
    let chunks: Vec<&[Handle]> = if bound.is_empty() {
        vec![&[]]
    } else {
        bound.chunks(BOUND_PER_SPIN).collect()
    };
    for chunk in chunks {
        let slot = |i: usize| {
            let handle = chunk.get(i).unwrap_or(done).clone();
            let words = (handle.size_in_used() / 4).max(1) as usize;
            // SAFETY: the buffer is passed with at most its own length in words, and the
            // kernel never indexes it.
            unsafe { ArrayArg::from_raw_parts(handle, words) }
        };
        // SAFETY: checked above: `done` holds a u32, read by one unit; the bound buffers
        // are passed with their own lengths and never indexed.
        unsafe {
            kernel::spin_kernel::launch_unchecked::<R>(
                client,
                CubeCount::Static(1, 1, 1),
                CubeDim::new_1d(1),
                ArrayArg::from_raw_parts(done.clone(), 1),
                value,
                slot(0),
                slot(1),
                slot(2),
                slot(3),
            );
        }
    }
    Ok(())
}
