//! NCCL on this machine's first GPU (feature `nccl`): a world of one still initialises a
//! communicator and runs NCCL's all-reduce kernels, so the sum and the max of a vector must
//! come back bit for bit, on the fused `Cuda` backend and on the CubeCL one under it. (A step
//! through it needs two GPUs: with one replica the optimizer reduces nothing.)

use std::time::Duration;

use burn::backend::Cuda;
use burn::backend::cuda::CudaDevice;
use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorData};
use burn_amp::collective::{Collective, NcclCollective, NcclId};

use crate::checks::Checks;

fn bits<B: Backend>(t: Tensor<B, 1>) -> Vec<u32> {
    t.into_data()
        .to_vec::<f32>()
        .expect("f32")
        .into_iter()
        .map(f32::to_bits)
        .collect()
}

fn round_trip<B: Backend>(nccl: &dyn Collective<B>, device: &B::Device) -> Result<String, String> {
    let values = [1.5f32, -2.0, 0.0, -0.0, 3.25e-8, f32::MAX, 65504.0, -1e30];
    let x = Tensor::<B, 1>::from_data(TensorData::from(values), device);
    let expected = bits(x.clone());
    let sum = nccl.all_reduce_sum(x.clone()).map_err(|e| e.to_string())?;
    let max = nccl.all_reduce_max(x).map_err(|e| e.to_string())?;
    let (sum, max) = (bits(sum), bits(max));
    if sum != expected || max != expected {
        return Err(format!(
            "sum {sum:x?}, max {max:x?}, expected {expected:x?}"
        ));
    }
    Ok(format!(
        "sum and max of {} values bit-identical",
        values.len()
    ))
}

pub fn check(checks: &mut Checks) {
    let device = CudaDevice::new(0);
    let nccl = NcclId::new()
        .and_then(|id| NcclCollective::new(0, 1, &id, &device, Duration::from_secs(30)));
    let nccl = match nccl {
        Ok(nccl) => nccl,
        Err(e) => {
            checks.run("NCCL communicator (world of one)", || Err(e.to_string()));
            return;
        }
    };
    checks.run("NCCL all-reduce on Cuda (fused)", || {
        round_trip::<Cuda>(&nccl, &device)
    });
    type Cube = burn_cubecl::CubeBackend<cubecl::cuda::CudaRuntime, f32, i32, u8>;
    checks.run("NCCL all-reduce on the CubeCL backend", || {
        round_trip::<Cube>(&nccl, &device)
    });
}
