//! [`Collective`] over NCCL (feature `nccl`): the engine of multi-GPU training, on the CUDA
//! backend's own device buffers, through cudarc (the crate and features Burn's CUDA backend
//! already builds).

use core::mem::MaybeUninit;
use core::time::Duration;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use burn_cubecl::CubeBackend;
use burn_cubecl::tensor::CubeTensor;
#[cfg(feature = "fusion")]
use burn_fusion::{Fusion, FusionBackend, NoOp};
#[cfg(feature = "fusion")]
use burn_ir::{InitOperationIr, OperationIr, OperationOutput};
use burn_tensor::backend::Backend;
use burn_tensor::{DType, FloatDType, Tensor, TensorMetadata, TensorPrimitive};
use cubecl::cuda::{CudaDevice, CudaRuntime};
use cudarc::driver::{CudaContext, CudaStream};
use cudarc::nccl::{result as nccl, sys as nccl_sys};

use super::{Collective, CollectiveError};

/// The 128 bytes that let the processes of one run find each other (`ncclUniqueId`): rank 0
/// makes it, the others receive it out of band (`NcclCollective::from_mpi`, feature `mpi`, broadcasts it
/// over MPI; any other rendezvous works).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NcclId(pub [u8; 128]);

impl core::fmt::Debug for NcclId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("NcclId(..)")
    }
}

impl NcclId {
    /// A new id (`ncclGetUniqueId`), on rank 0.
    ///
    /// # Errors
    /// [`CollectiveError::Engine`] when libnccl cannot be loaded or fails.
    pub fn new() -> Result<Self, CollectiveError> {
        check_library()?;
        let id = nccl::get_uniqueid().map_err(|e| engine("ncclGetUniqueId", e))?;
        Ok(Self(id.internal.map(|c| c as u8)))
    }

    fn raw(&self) -> nccl_sys::ncclUniqueId {
        nccl_sys::ncclUniqueId {
            internal: self.0.map(|b| b as core::ffi::c_char),
        }
    }
}

/// Data-parallel replicas as processes that each own one GPU, reducing on the GPU with NCCL:
/// the gradient bucket never leaves device memory.
///
/// Each call runs `ncclAllReduce` on a stream of its own, after the CUDA backend's work on
/// the input is done, and waits for it at most the timeout: a peer that hangs or died gives
/// a [`CollectiveError::Timeout`] (the communicator is then aborted, so end the process).
/// Sum and max are NCCL's own (every rank gets the same bits).
///
/// ```no_run
/// # #[cfg(feature = "mpi")] {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use burn::backend::cuda::CudaDevice;
/// use burn_amp::collective::{MpiCollective, NcclCollective};
///
/// // mpirun -n 2 ./train: one process per GPU, the NCCL id sent over MPI.
/// let timeout = Duration::from_secs(60);
/// let mpi = MpiCollective::world(timeout)?;
/// let device = CudaDevice::new(mpi.rank());
/// let nccl = Arc::new(NcclCollective::from_mpi(&mpi, &device, timeout)?);
/// // LossScaleConfig::new().init(..)?.with_collective::<burn::backend::Cuda>(nccl)
/// # drop(nccl);
/// # }
/// # Ok::<(), burn_amp::collective::CollectiveError>(())
/// ```
pub struct NcclCollective {
    comm: Mutex<Comm>,
    context: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    rank: usize,
    world: usize,
    timeout: Duration,
}

/// The communicator handle, made `Send`: NCCL allows a communicator to be used from any
/// thread, one call at a time, which the mutex around it ensures.
struct Comm(nccl_sys::ncclComm_t);

// SAFETY: see `Comm`: every use goes through `NcclCollective::comm`'s mutex.
unsafe impl Send for Comm {}

impl Drop for NcclCollective {
    fn drop(&mut self) {
        let comm = self.lock();
        // SAFETY: the handle came from `ncclCommInitRank` and is destroyed once, here.
        unsafe {
            let _ = nccl::comm_destroy(comm.0);
        }
    }
}

impl core::fmt::Debug for NcclCollective {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NcclCollective")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .finish()
    }
}

fn engine(call: &'static str, error: impl core::fmt::Debug) -> CollectiveError {
    CollectiveError::Engine {
        engine: "NCCL",
        message: format!("{call}: {error:?}"),
    }
}

fn check_library() -> Result<(), CollectiveError> {
    // SAFETY: only tries to load the library.
    if unsafe { nccl_sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CollectiveError::Engine {
            engine: "NCCL",
            message: "libnccl could not be loaded: install NCCL (e.g. `pip install \
                      nvidia-nccl-cu12`) and put its lib directory on LD_LIBRARY_PATH"
                .into(),
        })
    }
}

impl NcclCollective {
    /// Joins the run as `rank` of `world` on `device`, every rank with the same `id`.
    ///
    /// # Errors
    /// [`CollectiveError::InvalidConfig`] for a rank outside the world;
    /// [`CollectiveError::Engine`] when libnccl or the GPU is missing, or NCCL fails.
    pub fn new(
        rank: usize,
        world: usize,
        id: &NcclId,
        device: &CudaDevice,
        timeout: Duration,
    ) -> Result<Self, CollectiveError> {
        if rank >= world {
            return Err(CollectiveError::InvalidConfig(format!(
                "rank {rank} in a world of {world}"
            )));
        }
        check_library()?;
        let context =
            CudaContext::new(device.index).map_err(|e| engine("cuDevicePrimaryCtx", e))?;
        context
            .bind_to_thread()
            .map_err(|e| engine("cuCtxSetCurrent", e))?;
        let stream = context
            .new_stream()
            .map_err(|e| engine("cuStreamCreate", e))?;
        let mut comm = MaybeUninit::uninit();
        // SAFETY: `comm` is written by NCCL on success, which `assume_init` then relies on.
        let comm = unsafe {
            nccl::comm_init_rank(comm.as_mut_ptr(), world as i32, id.raw(), rank as i32)
                .map_err(|e| engine("ncclCommInitRank", e))?;
            comm.assume_init()
        };
        Ok(Self {
            comm: Mutex::new(Comm(comm)),
            context,
            stream,
            rank,
            world,
            timeout,
        })
    }

    /// Joins the run of `mpi`'s processes, one per GPU: rank 0 makes the NCCL id and MPI
    /// broadcasts it.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    #[cfg(feature = "mpi")]
    pub fn from_mpi(
        mpi: &super::MpiCollective,
        device: &CudaDevice,
        timeout: Duration,
    ) -> Result<Self, CollectiveError> {
        let mut id = [0u8; 128];
        if mpi.rank() == 0 {
            id = NcclId::new()?.0;
        }
        mpi.broadcast(0, &mut id);
        Self::new(mpi.rank(), mpi.world_size(), &NcclId(id), device, timeout)
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The processes in the run.
    pub fn world_size(&self) -> usize {
        self.world
    }

    fn lock(&self) -> MutexGuard<'_, Comm> {
        self.comm.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `ncclAllReduce` of `n` f32 from `src` into `dst` (device addresses), waited for.
    fn all_reduce_raw(
        &self,
        src: u64,
        dst: u64,
        n: usize,
        op: nccl_sys::ncclRedOp_t,
        name: &'static str,
    ) -> Result<(), CollectiveError> {
        let comm = self.lock();
        self.context
            .bind_to_thread()
            .map_err(|e| engine("cuCtxSetCurrent", e))?;
        let stream = self.stream.cu_stream();
        // SAFETY: `src` and `dst` hold `n` f32 each on this context's device (the caller's
        // tensors, kept alive until this returns); the communicator is live.
        unsafe {
            nccl::all_reduce(
                src as *const _,
                dst as *mut _,
                n,
                nccl_sys::ncclDataType_t::ncclFloat32,
                op,
                comm.0,
                stream as _,
            )
            .map_err(|e| engine("ncclAllReduce", e))?;
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            // SAFETY: `stream` is this collective's live stream.
            match unsafe { cudarc::driver::sys::cuStreamQuery(stream) } {
                cudarc::driver::sys::CUresult::CUDA_SUCCESS => return Ok(()),
                cudarc::driver::sys::CUresult::CUDA_ERROR_NOT_READY => {}
                other => return Err(engine("cuStreamQuery", other)),
            }
            let mut failed = nccl_sys::ncclResult_t::ncclSuccess;
            // SAFETY: the communicator is live; NCCL writes its pending error.
            unsafe { nccl_sys::ncclCommGetAsyncError(comm.0, &mut failed) };
            let timed_out = Instant::now() >= deadline;
            if timed_out || failed != nccl_sys::ncclResult_t::ncclSuccess {
                // SAFETY: ends the pending operation; the communicator is not used again
                // for reductions (the process is expected to end).
                unsafe {
                    let _ = nccl::comm_abort(comm.0);
                }
                return Err(if timed_out {
                    CollectiveError::Timeout {
                        op: name,
                        rank: self.rank,
                        world: self.world,
                        after: self.timeout,
                    }
                } else {
                    engine("ncclAllReduce (asynchronous)", failed)
                });
            }
            std::thread::yield_now();
        }
    }

    /// The reduction of a CUDA tensor into a new one, on the device.
    fn reduce_cube(
        &self,
        tensor: Tensor<Cube, 1>,
        op: nccl_sys::ncclRedOp_t,
        name: &'static str,
    ) -> Result<Tensor<Cube, 1>, CollectiveError> {
        let n = tensor.dims()[0];
        let device = tensor.device();
        let tensor = tensor.cast(FloatDType::F32);
        let out = Tensor::<Cube, 1>::empty([n], (&device, DType::F32));
        let src: CubeTensor<CudaRuntime> =
            burn_cubecl::kernel::into_contiguous(tensor.into_primitive().tensor());
        let dst: CubeTensor<CudaRuntime> = out.into_primitive().tensor();
        // NCCL's stream must see the backend's writes of the input.
        Cube::sync(&device).map_err(|e| engine("sync before the reduction", e))?;
        let address = |t: &CubeTensor<CudaRuntime>| -> Result<u64, CollectiveError> {
            let resource = t
                .client
                .get_resource(t.handle.clone())
                .map_err(|e| engine("device buffer", e))?;
            Ok(resource.resource().ptr)
        };
        self.all_reduce_raw(address(&src)?, address(&dst)?, n, op, name)?;
        Ok(Tensor::from_primitive(TensorPrimitive::Float(dst)))
    }
}

/// Burn's CUDA backend without fusion (`burn::backend::Cuda` is the fused one over it).
type Cube = CubeBackend<CudaRuntime, f32, i32, u8>;

impl Collective<Cube> for NcclCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce_sum(&self, tensor: Tensor<Cube, 1>) -> Result<Tensor<Cube, 1>, CollectiveError> {
        self.reduce_cube(tensor, nccl_sys::ncclRedOp_t::ncclSum, "all_reduce_sum")
    }

    fn all_reduce_max(&self, tensor: Tensor<Cube, 1>) -> Result<Tensor<Cube, 1>, CollectiveError> {
        self.reduce_cube(tensor, nccl_sys::ncclRedOp_t::ncclMax, "all_reduce_max")
    }
}

#[cfg(feature = "fusion")]
/// Burn's `Cuda` with its default features: the fused backend over the CubeCL one. The
/// tensor is resolved to the CubeCL backend's, reduced there, and registered back.
impl Collective<Fusion<Cube>> for NcclCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce_sum(
        &self,
        tensor: Tensor<Fusion<Cube>, 1>,
    ) -> Result<Tensor<Fusion<Cube>, 1>, CollectiveError> {
        through_fusion(tensor, |t| {
            self.reduce_cube(t, nccl_sys::ncclRedOp_t::ncclSum, "all_reduce_sum")
        })
    }

    fn all_reduce_max(
        &self,
        tensor: Tensor<Fusion<Cube>, 1>,
    ) -> Result<Tensor<Fusion<Cube>, 1>, CollectiveError> {
        through_fusion(tensor, |t| {
            self.reduce_cube(t, nccl_sys::ncclRedOp_t::ncclMax, "all_reduce_max")
        })
    }
}

/// Runs `f` on the fused backend's tensor as its inner backend's.
#[cfg(feature = "fusion")]
fn through_fusion<B: FusionBackend>(
    tensor: Tensor<Fusion<B>, 1>,
    f: impl FnOnce(Tensor<B, 1>) -> Result<Tensor<B, 1>, CollectiveError>,
) -> Result<Tensor<Fusion<B>, 1>, CollectiveError> {
    let fused = tensor.into_primitive().tensor();
    let client = fused.client.clone();
    let inner = client.resolve_tensor_float::<B>(fused);
    let reduced = f(Tensor::from_primitive(TensorPrimitive::Float(inner)))?;
    let reduced = reduced.into_primitive().tensor();
    let (shape, dtype) = (reduced.shape(), reduced.dtype());
    let handle = B::float_tensor_handle(reduced);
    let desc = InitOperationIr::create(shape, dtype, || client.register_tensor_handle(handle));
    let out = client
        .register(
            burn_fusion::stream::OperationStreams::default(),
            OperationIr::Init(desc),
            NoOp::<B>::new(),
        )
        .output();
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
}
