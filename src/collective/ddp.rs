//! [`Collective`] over Burn's own distributed backend (feature `ddp`): the all-reduce Burn's
//! DDP strategy runs on (NCCL inside Burn's CUDA backend), for the few values burn-amp's
//! replicas must agree on beyond the gradients Burn already reduces.

use burn_tensor::backend::distributed::{DistributedBackend, ReduceOperation};
use burn_tensor::backend::{DeviceId, DeviceOps};
use burn_tensor::{FloatDType, Tensor, TensorPrimitive};

use super::{Collective, CollectiveError, max_by_gather};

/// The replicas of Burn's DDP strategy (`ExecutionStrategy::ddp`), one per device, in one
/// process. Give it to the `LossScaleOptimizer` before handing that to the Learner: every
/// replica's clone then MAX-reduces its FP8 amax histories (and APS amaxes) with the others.
///
/// Sums are Burn's `DistributedBackend::all_reduce`. Burn's engine has no maximum, so the
/// maximum is the exact gather over the sum (see [`Collective::all_reduce_max`]), each
/// replica's row being its tensor's device's position among `devices`. A replica is known by
/// the device of the tensor it reduces: [`rank`](Collective::rank) is the first device's.
///
/// ```no_run
/// # #[cfg(feature = "cuda")] {
/// use std::sync::Arc;
/// use burn::backend::Cuda;
/// use burn::backend::cuda::CudaDevice;
/// use burn_amp::collective::DdpCollective;
///
/// let devices = vec![CudaDevice::new(0), CudaDevice::new(1)];
/// let collective = Arc::new(DdpCollective::new(&devices));
/// // LossScaleConfig::new().init(..)?.with_collective::<Cuda>(collective)
/// # let _: Arc<dyn burn_amp::collective::Collective<Cuda>> = collective;
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct DdpCollective {
    /// The devices' ids in the order Burn's engine ranks them.
    devices: Vec<DeviceId>,
}

impl DdpCollective {
    /// The replicas on `devices`, the devices given to `ExecutionStrategy::ddp`.
    pub fn new<D: DeviceOps>(devices: &[D]) -> Self {
        let mut devices: Vec<DeviceId> = devices.iter().map(DeviceOps::id).collect();
        devices.sort();
        Self { devices }
    }

    fn rank_of(&self, device: DeviceId) -> Result<usize, CollectiveError> {
        self.devices
            .iter()
            .position(|d| *d == device)
            .ok_or_else(|| {
                CollectiveError::InvalidConfig(format!(
                    "device {device:?} is not one of the DDP devices {:?}",
                    self.devices
                ))
            })
    }
}

impl<B: DistributedBackend> Collective<B> for DdpCollective {
    fn rank(&self) -> usize {
        0
    }

    fn world_size(&self) -> usize {
        self.devices.len()
    }

    fn all_reduce_sum(&self, tensor: Tensor<B, 1>) -> Result<Tensor<B, 1>, CollectiveError> {
        let world = Collective::<B>::world_size(self);
        if world == 1 {
            return Ok(tensor);
        }
        self.rank_of(tensor.device().id())?;
        let tensor = tensor.cast(FloatDType::F32).into_primitive().tensor();
        let reduced = B::all_reduce(tensor, ReduceOperation::Sum, self.devices.clone()).resolve();
        Ok(Tensor::from_primitive(TensorPrimitive::Float(reduced)))
    }

    fn all_reduce_max(&self, tensor: Tensor<B, 1>) -> Result<Tensor<B, 1>, CollectiveError> {
        let rank = self.rank_of(tensor.device().id())?;
        let world = Collective::<B>::world_size(self);
        max_by_gather(tensor, rank, world, |t| self.all_reduce_sum(t))
    }
}
