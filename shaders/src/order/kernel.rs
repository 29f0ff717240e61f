//! The two kernels that order another stream's work with CubeCL's: a signal (one store of a
//! counter, after everything before it on the stream) and a spin (one thread polling a
//! counter another stream writes, holding the buffers bound to it until then).

// `#[cube]` expands each function into an undocumented helper module.
#![allow(missing_docs)]

use cubecl::prelude::*;

/// Writes `value` into `flag[0]`: run on the stream that produced a product's inputs, it
/// marks that everything before it there is done.
#[cube(launch_unchecked)]
pub fn signal_kernel(flag: &mut Array<Atomic<u32>>, value: u32) {
    if ABSOLUTE_POS == 0 {
        flag[0].store(value);
    }
}

/// Polls `done[0]` until it reaches `value` (in the wrapping order CUDA's stream
/// wait-value `GEQ` uses: `(i32)(done - value) >= 0`), so nothing after it on this stream
/// runs before the other stream has written it. The `bound` buffers are not read: binding
/// them keeps their memory from being handed out again before this kernel has run.
#[cube(launch_unchecked)]
pub fn spin_kernel(
    done: &Array<Atomic<u32>>,
    value: u32,
    bound_0: &Array<u32>,
    bound_1: &Array<u32>,
    bound_2: &Array<u32>,
    bound_3: &Array<u32>,
) {
    if ABSOLUTE_POS == 0 {
        let mut waiting = true;
        while waiting {
            let seen = done[0].load();
            waiting = i32::cast_from(seen - value) < 0;
        }
    }
    // Read nothing of the bound buffers; the lengths keep them in the kernel's signature.
    let _ = bound_0.len() + bound_1.len() + bound_2.len() + bound_3.len();
}
