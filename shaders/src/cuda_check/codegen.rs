//! A CubeCL runtime that generates CUDA C++ instead of running kernels: [`CudaCodegen`].
//!
//! Its client is a real `ComputeClient`, so the crate's launch functions run on it unchanged;
//! its server hands out memory that is never backed and, for each kernel launched, runs
//! CubeCL's CUDA compiler (`CudaCompiler`, the one cubecl-cuda uses) with the options of the
//! [`CudaTarget`] the device stands for, and keeps the source. The device id's index is the
//! target's compute capability, so one client per architecture needs no shared state.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use cubecl::backtrace::BackTrace;
use cubecl::bytes::Bytes;
use cubecl::cuda::{CudaCompiler, CudaRuntime};
use cubecl::device::{Device, DeviceId, DeviceService, ServerUtilitiesHandle};
use cubecl::future::DynFut;
use cubecl::ir::TargetProperties;
use cubecl::prelude::*;
use cubecl::profile::ProfileDuration;
use cubecl::server::{
    Binding, ComputeServer, CopyDescriptor, IoError, KernelArguments, ProfileError, ProfilingToken,
    ServerCommunication, ServerError, ServerUtilities,
};
use cubecl::stream_id::StreamId;
use cubecl::zspace::{Shape, Strides};
use cubecl::{CubeTask, MemoryUsage};
use cubecl_runtime::allocator::PitchedMemoryLayoutPolicy;
use cubecl_runtime::logging::ServerLogger;
use cubecl_runtime::memory_management::{ManagedMemoryHandle, MemoryAllocationMode};
use cubecl_runtime::storage::{ComputeStorage, ManagedResource, StorageHandle, StorageId};

use super::target::CudaTarget;

/// The device-type id of [`CodegenDevice`]s (CubeCL keys its servers by type and index).
const DEVICE_TYPE: u16 = 0xC0DE;

/// One kernel as CubeCL's CUDA compiler generated it, or why it could not.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The kernel's Rust type name (module path, kernel and generics).
    pub kernel: &'static str,
    /// The entry point in the CUDA source (`None` when generation failed).
    pub entrypoint: Option<String>,
    /// The CUDA C++ source, or the generator's error.
    pub source: Result<String, String>,
}

/// Where a [`CodegenServer`] leaves what it generated; read through `ComputeClient::info`.
pub type GeneratedSink = Arc<Mutex<Vec<Generated>>>;

/// A CUDA device of a given architecture that is never opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CodegenDevice {
    /// The architecture the code is generated for.
    pub target: Option<CudaTarget>,
}

impl CodegenDevice {
    /// The device of `target`.
    pub fn new(target: CudaTarget) -> Self {
        Self {
            target: Some(target),
        }
    }

    fn target(&self) -> CudaTarget {
        self.target.unwrap_or(CudaTarget::SM90)
    }
}

impl Device for CodegenDevice {
    fn from_id(device_id: DeviceId) -> Self {
        Self::new(CudaTarget {
            sm: device_id.index_id as u32,
        })
    }

    fn to_id(&self) -> DeviceId {
        DeviceId {
            type_id: DEVICE_TYPE,
            index_id: self.target().sm as u16,
        }
    }
}

/// The CubeCL runtime of the check: CUDA's compiler, a server that keeps sources.
#[derive(Clone, Debug)]
pub struct CudaCodegen;

impl Runtime for CudaCodegen {
    type Compiler = CudaCompiler;
    type Server = CodegenServer;
    type Device = CodegenDevice;

    fn client(device: &Self::Device) -> ComputeClient<Self> {
        ComputeClient::load(device)
    }

    fn name(_client: &ComputeClient<Self>) -> &'static str {
        "cuda-codegen"
    }

    fn require_array_lengths() -> bool {
        CudaRuntime::require_array_lengths()
    }

    fn max_cube_count() -> (u32, u32, u32) {
        CudaRuntime::max_cube_count()
    }

    fn can_read_tensor(shape: &Shape, strides: &Strides) -> bool {
        CudaRuntime::can_read_tensor(shape, strides)
    }

    fn target_properties() -> TargetProperties {
        CudaRuntime::target_properties()
    }

    fn enumerate_devices(_type_id: u16, _info: &GeneratedSink) -> Vec<DeviceId> {
        Vec::new()
    }
}

/// Storage that holds nothing: the check's buffers are never read or written.
#[derive(Debug, Default)]
pub struct NoStorage;

impl ComputeStorage for NoStorage {
    type Resource = ();

    fn alignment(&self) -> usize {
        512
    }

    fn get(&mut self, _handle: &StorageHandle) -> Self::Resource {}

    fn alloc(&mut self, _size: u64) -> Result<StorageHandle, IoError> {
        Err(IoError::UnsupportedIoOperation {
            backtrace: BackTrace::capture(),
        })
    }

    fn dealloc(&mut self, _id: StorageId) {}

    fn flush(&mut self) {}
}

/// The server behind a [`CudaCodegen`] client.
#[derive(Debug)]
pub struct CodegenServer {
    target: CudaTarget,
    utilities: Arc<ServerUtilities<Self>>,
    generated: GeneratedSink,
}

impl CodegenServer {
    fn new(target: CudaTarget) -> Self {
        let generated = GeneratedSink::default();
        let utilities = ServerUtilities::new(
            target.device_properties(),
            Arc::new(ServerLogger::default()),
            generated.clone(),
            PitchedMemoryLayoutPolicy::new(512),
        );
        Self {
            target,
            utilities: Arc::new(utilities),
            generated,
        }
    }

    /// CUDA C++ for one kernel, as cubecl-cuda's `compile_kernel` produces it before NVRTC
    /// (including its check of the shared memory the kernel declares).
    fn generate(&self, kernel: &dyn CubeTask<CudaCompiler>, mode: ExecutionMode) -> Generated {
        let options = self.target.compilation_options();
        let compiled = catch_unwind(AssertUnwindSafe(|| {
            kernel.compile(
                &mut Default::default(),
                &options,
                mode,
                kernel.address_type(),
            )
        }));
        let max_shared = self.utilities.properties.hardware.max_shared_memory_size;
        let (entrypoint, source) = match compiled {
            Ok(Ok(compiled)) => {
                let shared = compiled
                    .repr
                    .as_ref()
                    .map_or(0, |repr| repr.shared_memory_size());
                let source = if shared > max_shared {
                    Err(format!(
                        "{shared} bytes of shared memory, {max_shared} available on {}",
                        self.target.label()
                    ))
                } else {
                    Ok(compiled.source)
                };
                (Some(compiled.entrypoint_name), source)
            }
            Ok(Err(err)) => (None, Err(format!("CubeCL's CUDA compiler: {err}"))),
            Err(panic) => (
                None,
                Err(format!("CubeCL panicked: {}", panic_message(&panic))),
            ),
        };
        Generated {
            kernel: kernel.name(),
            entrypoint,
            source,
        }
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

impl DeviceService for CodegenServer {
    fn init(device_id: DeviceId) -> Self {
        Self::new(CodegenDevice::from_id(device_id).target())
    }

    fn utilities(&self) -> ServerUtilitiesHandle {
        self.utilities.clone() as ServerUtilitiesHandle
    }
}

impl ServerCommunication for CodegenServer {
    const SERVER_COMM_ENABLED: bool = false;
}

impl ComputeServer for CodegenServer {
    type Kernel = Box<dyn CubeTask<CudaCompiler>>;
    type Info = GeneratedSink;
    type MemoryLayoutPolicy = PitchedMemoryLayoutPolicy;
    type Storage = NoStorage;

    fn initialize_memory(&mut self, _memory: ManagedMemoryHandle, _size: u64, _stream: StreamId) {}

    fn logger(&self) -> Arc<ServerLogger> {
        self.utilities.logger.clone()
    }

    fn utilities(&self) -> Arc<ServerUtilities<Self>> {
        self.utilities.clone()
    }

    fn read(
        &mut self,
        descriptors: Vec<CopyDescriptor>,
        _stream: StreamId,
    ) -> DynFut<Result<Vec<Bytes>, ServerError>> {
        // Nothing ran: every buffer reads as zeros of its size.
        let bytes = descriptors
            .iter()
            .map(|desc| {
                let len = desc.shape.iter().product::<usize>() * desc.elem_size;
                Bytes::from_bytes_vec(vec![0; len])
            })
            .collect();
        Box::pin(async move { Ok(bytes) })
    }

    fn write(&mut self, _descriptors: Vec<(CopyDescriptor, Bytes)>, _stream: StreamId) {}

    fn sync(&mut self, _stream: StreamId) -> DynFut<Result<(), ServerError>> {
        Box::pin(async { Ok(()) })
    }

    fn get_resource(
        &mut self,
        _binding: Binding,
        _stream: StreamId,
    ) -> Result<ManagedResource<()>, ServerError> {
        Err(ServerError::Generic {
            reason: "the CUDA code generator holds no memory".into(),
            backtrace: BackTrace::capture(),
        })
    }

    unsafe fn launch(
        &mut self,
        kernel: Self::Kernel,
        _count: CubeCount,
        _bindings: KernelArguments,
        mode: ExecutionMode,
        _stream: StreamId,
    ) {
        let generated = self.generate(kernel.as_ref(), mode);
        self.generated
            .lock()
            .expect("the sink of generated kernels is never poisoned")
            .push(generated);
    }

    fn flush(&mut self, _stream: StreamId) -> Result<(), ServerError> {
        Ok(())
    }

    fn memory_usage(&mut self, _stream: StreamId) -> Result<MemoryUsage, ServerError> {
        Ok(MemoryUsage {
            number_allocs: 0,
            bytes_in_use: 0,
            bytes_padding: 0,
            bytes_reserved: 0,
        })
    }

    fn memory_cleanup(&mut self, _stream: StreamId) {}

    fn start_profile(&mut self, _stream: StreamId) -> Result<ProfilingToken, ServerError> {
        Err(ServerError::Generic {
            reason: "the CUDA code generator runs nothing to profile".into(),
            backtrace: BackTrace::capture(),
        })
    }

    fn end_profile(
        &mut self,
        _stream: StreamId,
        _token: ProfilingToken,
    ) -> Result<ProfileDuration, ProfileError> {
        Err(ProfileError::Unknown {
            reason: "the CUDA code generator runs nothing to profile".into(),
            backtrace: BackTrace::capture(),
        })
    }

    fn allocation_mode(&mut self, _mode: MemoryAllocationMode, _stream: StreamId) {}
}

/// The client generating code for `target`.
pub fn client(target: CudaTarget) -> ComputeClient<CudaCodegen> {
    CudaCodegen::client(&CodegenDevice::new(target))
}

/// Takes what the client's server generated since the last call (after the launches
/// before it have reached the server).
pub fn take_generated(client: &ComputeClient<CudaCodegen>) -> Vec<Generated> {
    // The launches travel to the server on its own thread; a sync waits for them.
    let _ = cubecl::future::block_on(client.sync());
    std::mem::take(
        &mut *client
            .info()
            .lock()
            .expect("the sink of generated kernels is never poisoned"),
    )
}
