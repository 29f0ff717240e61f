//! The backends burn-amp is built with, registered on first use.

use burn_amp_kernels::cpu::Isa;

use super::Tables;

/// The tables of the backends burn-amp's features enable, with their default type
/// parameters (and, for Burn's CubeCL backends, both with and without fusion), for a CPU
/// with `isa`.
pub(super) fn tables(isa: Isa) -> Tables {
    #[allow(unused_mut)]
    let mut tables = Tables::new(isa);
    #[cfg(feature = "flex")]
    tables.insert::<burn::backend::Flex>();
    #[cfg(feature = "ndarray")]
    tables.insert::<burn::backend::NdArray>();
    #[cfg(feature = "wgpu")]
    insert_cube::<cubecl::wgpu::WgpuRuntime, u32>(&mut tables);
    #[cfg(feature = "cuda")]
    insert_cube::<cubecl::cuda::CudaRuntime, u8>(&mut tables);
    tables
}

/// Burn's CubeCL backend on runtime `R` with its default elements (f32, i32, booleans as
/// `BT`), plain and fused.
#[cfg(feature = "cubecl-backends")]
fn insert_cube<R: burn_cubecl::CubeRuntime, BT: burn_cubecl::BoolElement>(tables: &mut Tables) {
    type Cube<R, BT> = burn_cubecl::CubeBackend<R, f32, i32, BT>;
    tables.insert::<Cube<R, BT>>();
    #[cfg(feature = "fusion")]
    tables.insert::<burn_fusion::Fusion<Cube<R, BT>>>();
}
