//! The launch grid shared by every kernel: one unit per work item, 256 units per cube, the
//! cubes spread over X, Y and Z so that no axis passes the runtime's limit (65535 cubes per
//! axis on WebGPU and Vulkan). The kernels index with `ABSOLUTE_POS` and check it against
//! their output length, so the spare units a spread grid adds do nothing.

use cubecl::prelude::*;

/// Units in one cube.
pub(crate) const UNITS_PER_CUBE: u32 = 256;

/// Cube count and cube dim for `units` work items (at least one cube, so that a launch on
/// an empty input is still a valid dispatch).
pub(crate) fn elementwise<R: Runtime>(
    client: &ComputeClient<R>,
    units: u32,
) -> (CubeCount, CubeDim) {
    let dim = CubeDim::new_1d(UNITS_PER_CUBE);
    let count = cubecl::calculate_cube_count_elemwise(client, units.max(1) as usize, dim);
    (count, dim)
}
