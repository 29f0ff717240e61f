//! `DistributedBackend` for `MixedPrecision<B>` (feature `ddp`): every method forwarded to
//! `B`, so Burn's `ExecutionStrategy::DistributedDataParallel` compiles and runs over
//! `MixedPrecision<Autodiff<Cuda>>` wherever it does over `Autodiff<Cuda>`.
//!
//! The defaults of the trait key the communication server by `Self`'s type; forwarding every
//! one of them keeps a single server, `B`'s, whichever of the two types the learner and the
//! autodiff graph name. The tensors are `B`'s own (the decorator's primitives are `B`'s), so
//! the gradients Autodiff all-reduces during `backward` are exactly what the loss scaler then
//! checks: every replica takes the same skip decision from the same reduced gradients.

use burn_tensor::backend::DeviceId;
use burn_tensor::backend::distributed::{
    CollectiveTensor, DistributedBackend, DistributedConfig, DistributedParams, ReduceOperation,
    TensorRef,
};
use burn_tensor::ops::FloatTensor;

use crate::MixedPrecision;

impl<B: DistributedBackend> DistributedBackend for MixedPrecision<B> {
    fn start_communication_server(devices: &[B::Device], config: DistributedConfig) {
        B::start_communication_server(devices, config);
    }

    fn close_communication_server(device: &B::Device) {
        B::close_communication_server(device);
    }

    fn register_sync_parameters(device: &B::Device, distributed_params: Vec<DistributedParams>) {
        B::register_sync_parameters(device, distributed_params);
    }

    fn submit_sync_collective(device: &B::Device) {
        B::submit_sync_collective(device);
    }

    fn submit_gradient_sync(tensor: TensorRef<Self>, distributed_params: DistributedParams) {
        B::submit_gradient_sync(TensorRef(tensor.0), distributed_params);
    }

    fn all_reduce(
        tensor: FloatTensor<Self>,
        op: ReduceOperation,
        device_ids: Vec<DeviceId>,
    ) -> CollectiveTensor<Self> {
        let collective = B::all_reduce(tensor, op, device_ids);
        // SAFETY: the handle is only rewrapped, still unresolved, for `Self`'s caller, who
        // resolves it (through `sync_collective`, forwarded below) before using it.
        let handle = unsafe { collective.assume_resolved() };
        CollectiveTensor::new(handle)
    }

    fn sync_collective(device: &B::Device) {
        B::sync_collective(device);
    }

    /// # Safety
    /// As `B::comm_device`: the tensor is not accessed or modified during the call.
    unsafe fn comm_device(tensor: &TensorRef<Self>) -> B::Device {
        // SAFETY: the same tensor, under the same contract, which our caller upholds.
        unsafe { B::comm_device(&TensorRef(tensor.0)) }
    }

    /// # Safety
    /// As `B::float_from_ref`: the tensor is not accessed or modified during the call.
    unsafe fn float_from_ref(tensor: &TensorRef<Self>) -> FloatTensor<Self> {
        // SAFETY: the same tensor, under the same contract, which our caller upholds.
        unsafe { B::float_from_ref(&TensorRef(tensor.0)) }
    }
}
