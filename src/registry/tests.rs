//! What the registry finds for the built-in backends, and for one registered at run time.

use burn::backend::{Autodiff, Flex, NdArray, Wgpu};
use burn_cubecl::CubeBackend;
use cubecl::wgpu::WgpuRuntime;

use super::{adamw, fp8, register, routed};

/// Burn's wgpu backend without fusion, with f16 as its default float: not built in.
type WgpuF16 = CubeBackend<WgpuRuntime, half::f16, i32, u32>;

#[test]
fn the_built_in_backends_have_their_kernels() {
    // Flex: the routed CPU ops (plain and autodiff), the fused AdamW step, FP8.
    assert!(routed::<Flex>().is_some_and(|ops| ops.unscale.is_some()));
    assert!(routed::<Autodiff<Flex>>().is_some_and(|ops| ops.unscale.is_none()));
    assert!(adamw::<Flex>().is_some());
    assert!(fp8::<Flex>().is_some_and(|ops| ops.quantize_grad.is_none() && ops.aps.is_some()));
    assert!(fp8::<Autodiff<Flex>>().is_some_and(|ops| ops.quantize_grad.is_some()));
    // wgpu (fused): the CubeCL AdamW step and FP8, no CPU ops.
    assert!(adamw::<Wgpu>().is_some());
    assert!(fp8::<Autodiff<Wgpu>>().is_some());
    assert!(routed::<Wgpu>().is_none());
    // NdArray: FP8 on the portable path, nothing else.
    assert!(fp8::<NdArray>().is_some());
    assert!(adamw::<NdArray>().is_none() && routed::<NdArray>().is_none());
}

#[test]
fn a_backend_registered_at_run_time_gets_fp8_and_shares_the_kernels_of_its_tensors() {
    // Its tensors are the built-in plain wgpu backend's: the AdamW kernel is found already.
    assert!(adamw::<WgpuF16>().is_some());
    assert!(fp8::<WgpuF16>().is_none() && fp8::<Autodiff<WgpuF16>>().is_none());
    register::<WgpuF16>();
    assert!(fp8::<WgpuF16>().is_some());
    assert!(fp8::<Autodiff<WgpuF16>>().is_some_and(|ops| ops.quantize_grad.is_some()));
    // Registering again changes nothing, and what was built in stays.
    register::<WgpuF16>();
    register::<Flex>();
    assert!(fp8::<WgpuF16>().is_some() && routed::<Flex>().is_some());
}
