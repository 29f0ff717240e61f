//! cuBLASLt products on CubeCL's CUDA buffers, ordered with CubeCL's stream on the device by
//! the [handshake](super::order) (feature `cuda`): the signal and spin kernels of
//! `burn-amp-kernels` on CubeCL's stream; on burn-amp's stream the wait, the products and
//! the write. No host synchronisation per product.
//!
//! The wait and the write on burn-amp's stream take one of two forms, chosen once by a call
//! ([`Transport`]): the driver's stream memory operations (`cuStreamWaitValue32_v2`,
//! `cuStreamWriteValue32_v2`) where it accepts them on CubeCL's buffers, else a one-thread
//! wait kernel (compiled by NVRTC at first use) and a 4-byte `cuMemsetD32Async`. CubeCL
//! allocates from the driver's stream-ordered pools (`cuMemAllocAsync`), on which an H100
//! with driver 580 refuses the memory operations (`CUDA_ERROR_INVALID_VALUE`).
//!
//! Status: on that H100 the GPU suite's chain of ordered products (`--ordered`) did not
//! finish with the kernel transport (stopped after 240 s), so nothing of burn-amp uses this
//! yet. Suspects, to settle on a GPU: a false dependency between the two streams' spinning
//! kernels in one of the device's hardware queues, or CubeCL holding launches back.

use std::sync::Arc;
use std::thread::ThreadId;

use burn_amp_kernels::LaunchError;
use burn_amp_kernels::order::launch as order_launch;
use cubecl::cuda::CudaRuntime;
use cubecl::prelude::ComputeClient;
use cubecl::server::Handle;
use cudarc::driver::sys as driver;
use cudarc::driver::{CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg};

use super::exec::{Buffers, CublasLt, CublasLtError};
use super::order::{BufferId, ProductIo, Protocol, Step};
use super::plan::{GemmPlan, Layout};

/// Why an ordered group did not run (or ran and failed).
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    /// The cuBLASLt call failed, or libcublasLt is missing.
    #[error(transparent)]
    Lt(#[from] CublasLtError),
    /// burn-amp's stream could not wait for or write a counter: products stay on CubeCL.
    #[error(
        "ordering burn-amp's stream with CubeCL's failed: {0}; products stay on CubeCL's matmul"
    )]
    MemOps(String),
    /// A CUDA driver call failed.
    #[error("CUDA: {0}")]
    Driver(String),
    /// A signal or spin launch was refused.
    #[error("ordering kernel: {0}")]
    Launch(#[from] LaunchError),
    /// A buffer is smaller than its plan reads or writes.
    #[error("buffer `{buffer}` holds {got} bytes; the plan needs {needed}")]
    TooShort {
        /// Which operand.
        buffer: &'static str,
        /// Bytes the plan reaches.
        needed: u64,
        /// Bytes the handle holds.
        got: u64,
    },
    /// Called from another thread than the one it orders with.
    #[error("an OrderedLt orders with the CubeCL stream of the thread that made it")]
    WrongThread,
}

/// One product of a group: its plan and the CubeCL buffers it reads and writes.
#[derive(Clone, Copy, Debug)]
pub struct OrderedProduct<'a> {
    /// The call.
    pub plan: &'a GemmPlan,
    /// cuBLASLt's A (Burn's right-hand side).
    pub a: &'a Handle,
    /// cuBLASLt's B (Burn's left-hand side).
    pub b: &'a Handle,
    /// The output.
    pub d: &'a Handle,
    /// The bias, for the bias epilogue.
    pub bias: Option<&'a Handle>,
    /// FP8: the operands' scale inverses (one f32 each).
    pub scale_invs: Option<(&'a Handle, &'a Handle)>,
}

/// How burn-amp's stream waits for the flag and writes the done counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// `cuStreamWaitValue32_v2` and `cuStreamWriteValue32_v2`.
    MemOps,
    /// A one-thread wait kernel and `cuMemsetD32Async`.
    Kernel,
}

/// The wait kernel of [`Transport::Kernel`]: polls `flag` until it reaches `value` in the
/// wrapping order of the handshake.
const WAIT_KERNEL: &str = r#"
extern "C" __global__ void burn_amp_wait(const unsigned int* flag, unsigned int value) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    while ((int)(*(volatile const unsigned int*)flag - value) < 0) {
    }
    __threadfence();
}
"#;

/// burn-amp's cuBLASLt stream on one CUDA device, ordered with the CubeCL stream of the
/// thread that made it.
pub struct OrderedLt {
    client: ComputeClient<CudaRuntime>,
    lt: CublasLt,
    stream: Arc<CudaStream>,
    protocol: Protocol,
    flag: Handle,
    done: Handle,
    flag_ptr: u64,
    done_ptr: u64,
    thread: ThreadId,
    transport: Transport,
    /// The wait kernel, for [`Transport::Kernel`].
    wait: Option<CudaFunction>,
}

impl OrderedLt {
    /// A stream of its own on CUDA device `index` (the primary context CubeCL runs in, so
    /// the two share addresses), its cuBLASLt handle, and the two counters as CubeCL
    /// buffers. The stream memory operations are tried once here, by a call.
    ///
    /// # Errors
    /// [`OrderError::MemOps`] where the driver lacks them; [`CublasLtError::Missing`]
    /// without libcublasLt; a driver error.
    pub fn new(client: ComputeClient<CudaRuntime>, index: usize) -> Result<Self, OrderError> {
        let ctx = CudaContext::new(index).map_err(|e| OrderError::Driver(format!("{e:?}")))?;
        let stream = ctx
            .new_stream()
            .map_err(|e| OrderError::Driver(format!("{e:?}")))?;
        let lt = CublasLt::new(stream.clone())?;
        let zero = 0u32.to_le_bytes();
        let (flag, done) = (
            client.create_from_slice(&zero),
            client.create_from_slice(&zero),
        );
        let flag_ptr = device_ptr(&client, &flag)?;
        let done_ptr = device_ptr(&client, &done)?;
        let mut ordered = Self {
            client,
            lt,
            stream,
            protocol: Protocol::new(),
            flag,
            done,
            flag_ptr,
            done_ptr,
            thread: std::thread::current().id(),
            transport: Transport::MemOps,
            wait: None,
        };
        // The memory operations, tried by a call (a write of 0, the counter's value anyway):
        // a driver without the entry points panics inside cudarc's loader (caught), one that
        // refuses them on CubeCL's buffers says so.
        let probe = std::panic::catch_unwind(|| {
            // SAFETY: `done_ptr` is a live u32 device buffer of this context.
            unsafe { write_value(&ordered.stream, ordered.done_ptr, 0) }
        });
        let memops = matches!(probe, Ok(Ok(()))) && ordered.stream.synchronize().is_ok();
        if !memops {
            // NVRTC's default architecture: the kernel needs nothing newer, and each CUDA
            // version drops old ones (13 refuses compute_70).
            let ptx = cudarc::nvrtc::compile_ptx(WAIT_KERNEL).map_err(|e| {
                OrderError::MemOps(format!("no memory operations, and NVRTC: {e:?}"))
            })?;
            let module = ctx
                .load_module(ptx)
                .map_err(|e| OrderError::Driver(format!("{e:?}")))?;
            let wait = module
                .load_function("burn_amp_wait")
                .map_err(|e| OrderError::Driver(format!("{e:?}")))?;
            ordered.transport = Transport::Kernel;
            ordered.wait = Some(wait);
        }
        Ok(ordered)
    }

    /// How burn-amp's stream waits and writes here.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// Enqueues on burn-amp's stream the wait for the flag to reach `value`.
    fn wait_for(&self, value: u32) -> Result<(), String> {
        match &self.wait {
            // SAFETY: `flag_ptr` is a live u32 device buffer of this context.
            None => unsafe { wait_value(&self.stream, self.flag_ptr, value) },
            Some(wait) => {
                let config = LaunchConfig {
                    grid_dim: (1, 1, 1),
                    block_dim: (1, 1, 1),
                    shared_mem_bytes: 0,
                };
                let mut launch = self.stream.launch_builder(wait);
                launch.arg(&self.flag_ptr).arg(&value);
                // SAFETY: the kernel's parameters are a pointer to a live u32 of this
                // context (passed as its address) and a u32; it reads the one word.
                unsafe { launch.launch(config) }
                    .map(|_| ())
                    .map_err(|e| format!("{e:?}"))
            }
        }
    }

    /// Enqueues on burn-amp's stream the write of `value` into the done counter.
    fn write_done(&self, value: u32) -> Result<(), String> {
        match self.transport {
            // SAFETY: `done_ptr` is a live u32 device buffer of this context.
            Transport::MemOps => unsafe { write_value(&self.stream, self.done_ptr, value) },
            // SAFETY: as above; one u32 is set.
            Transport::Kernel => result(unsafe {
                driver::cuMemsetD32Async(self.done_ptr, value, 1, self.stream.cu_stream())
            }),
        }
    }

    /// The counter of the last handshake.
    pub fn handshakes(&self) -> u32 {
        self.protocol.last()
    }

    /// The cuBLASLt executor (its version, say).
    pub fn executor(&self) -> &CublasLt {
        &self.lt
    }

    /// Runs `group` as one handshake: after every CubeCL kernel this thread enqueued
    /// before, before every one it enqueues after, with every buffer of the group bound
    /// until the products are done.
    ///
    /// # Errors
    /// Before anything is enqueued: [`OrderError::WrongThread`], [`OrderError::TooShort`],
    /// [`CublasLtError::Buffers`]. After: the first product's error (the handshake is
    /// still completed, so CubeCL's stream goes on), or the driver's.
    pub fn run(&mut self, group: &[OrderedProduct<'_>]) -> Result<(), OrderError> {
        if std::thread::current().id() != self.thread {
            return Err(OrderError::WrongThread);
        }
        let mut calls = Vec::with_capacity(group.len());
        let mut ios = Vec::with_capacity(group.len());
        // Every buffer by its address, to bind it to the spin.
        let mut owned: Vec<(BufferId, Handle)> = Vec::new();
        for p in group {
            let batch = p.plan.batch;
            check_len("a", p.a, &p.plan.a, batch)?;
            check_len("b", p.b, &p.plan.b, batch)?;
            check_len("d", p.d, &p.plan.d, batch)?;
            let mut take = |h: &Handle| -> Result<u64, OrderError> {
                let ptr = device_ptr(&self.client, h)?;
                owned.push((ptr, h.clone()));
                Ok(ptr)
            };
            let buffers = Buffers {
                a: take(p.a)?,
                b: take(p.b)?,
                d: take(p.d)?,
                bias: p.bias.map(&mut take).transpose()?,
                scale_invs: match p.scale_invs {
                    Some((a, b)) => Some((take(a)?, take(b)?)),
                    None => None,
                },
            };
            // Refused before the handshake begins, not inside it.
            buffers.check(p.plan)?;
            let mut io = ProductIo {
                reads: vec![buffers.a, buffers.b],
                writes: vec![buffers.d],
            };
            io.reads.extend(buffers.bias);
            if let Some((a, b)) = buffers.scale_invs {
                io.reads.extend([a, b]);
            }
            calls.push((p.plan, buffers));
            ios.push(io);
        }
        let steps = self.protocol.handshake(&ios);
        let by_id = |id: BufferId| owned.iter().find(|(i, _)| *i == id).map(|(_, h)| h.clone());
        let mut failed: Option<OrderError> = None;
        for step in steps {
            match step {
                Step::Signal { value } => {
                    order_launch::signal(&self.client, &self.flag, value)?;
                }
                Step::Wait { value } => {
                    self.wait_for(value).map_err(OrderError::MemOps)?;
                }
                Step::Product { index } => {
                    let (plan, buffers) = &calls[index];
                    // SAFETY: the buffers are CubeCL's live buffers of this device, each
                    // checked above to hold what the plan reaches; they stay bound to the
                    // handshake's spin, so none is freed or reused before the call is done.
                    if let Err(e) = unsafe { self.lt.run(plan, buffers) } {
                        failed.get_or_insert(e.into());
                    }
                }
                Step::Write { value } => {
                    if let Err(e) = self.write_done(value) {
                        // No spin may wait for a write that never comes: wait on the host.
                        let _ = self.stream.synchronize();
                        return Err(OrderError::MemOps(e));
                    }
                }
                Step::Spin { value, bound } => {
                    let bound: Vec<Handle> = bound.iter().filter_map(|id| by_id(*id)).collect();
                    order_launch::spin(&self.client, &self.done, value, &bound)?;
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }
}

/// Bytes `layout` reaches from its buffer's start.
fn reach(layout: &Layout, batch: usize) -> u64 {
    let last = layout.offset
        + (batch.max(1) - 1) * layout.batch_stride
        + layout.cols.saturating_sub(1) * layout.ld
        + layout.rows;
    (last * layout.dtype.size()) as u64
}

fn check_len(
    buffer: &'static str,
    handle: &Handle,
    layout: &Layout,
    batch: usize,
) -> Result<(), OrderError> {
    let needed = reach(layout, batch);
    let got = handle.size_in_used();
    if got < needed {
        return Err(OrderError::TooShort {
            buffer,
            needed,
            got,
        });
    }
    Ok(())
}

/// The device address of a CubeCL buffer (its offset applied).
fn device_ptr(client: &ComputeClient<CudaRuntime>, handle: &Handle) -> Result<u64, OrderError> {
    let resource = client
        .get_resource(handle.clone())
        .map_err(|e| OrderError::Driver(format!("{e:?}")))?;
    Ok(resource.resource().ptr)
}

/// Enqueues on `stream` a wait until the u32 at `addr` reaches `value` (wrapping `GEQ`).
///
/// # Safety
/// `addr` is a live u32 device buffer of the stream's context.
unsafe fn wait_value(stream: &CudaStream, addr: u64, value: u32) -> Result<(), String> {
    // SAFETY: our caller's.
    let status = unsafe {
        driver::cuStreamWaitValue32_v2(
            stream.cu_stream(),
            addr,
            value,
            driver::CUstreamWaitValue_flags_enum::CU_STREAM_WAIT_VALUE_GEQ as u32,
        )
    };
    result(status)
}

/// Enqueues on `stream` the write of `value` into the u32 at `addr`.
///
/// # Safety
/// `addr` is a live u32 device buffer of the stream's context.
unsafe fn write_value(stream: &CudaStream, addr: u64, value: u32) -> Result<(), String> {
    // SAFETY: our caller's.
    let status = unsafe {
        driver::cuStreamWriteValue32_v2(
            stream.cu_stream(),
            addr,
            value,
            driver::CUstreamWriteValue_flags_enum::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
        )
    };
    result(status)
}

fn result(status: driver::CUresult) -> Result<(), String> {
    if status == driver::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{status:?}"))
    }
}
