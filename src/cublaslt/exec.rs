//! [`GemmPlan`]s carried out by cuBLASLt (feature `cuda`): each distinct plan gets its
//! descriptors (layouts, transposes, epilogue, types) and the heuristic's algorithm once,
//! kept for its next call; the pointers a call reads besides its operands (the bias, FP8's
//! scale inverses) are set on the descriptor at every call, so a cached plan never reads
//! the buffers of an earlier call. One workspace per handle. libcublasLt is loaded at run
//! time; where it is missing, [`CublasLt::new`] says what to install instead of failing
//! later.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

use cudarc::cublaslt::result::{self, CublasError};
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use super::plan::{Compute, Epilogue, GemmDtype, GemmPlan, Layout};

/// Bytes of workspace cuBLASLt may use: what Hopper's kernels ask for (Transformer Engine
/// and PyTorch give 32 MiB).
const WORKSPACE: usize = 32 << 20;

/// Why a call did not run.
#[derive(Debug, thiserror::Error)]
pub enum CublasLtError {
    /// libcublasLt is not on the loader's path.
    #[error(
        "libcublasLt was not found: install the CUDA toolkit (lib64/libcublasLt.so) or the \
         `nvidia-cublas` Python wheel, and put its directory on LD_LIBRARY_PATH"
    )]
    Missing,
    /// cuBLASLt refused the call (no algorithm for these layouts, a bad argument).
    #[error("cuBLASLt: {0:?}")]
    Status(CublasError),
    /// The workspace could not be allocated.
    #[error("workspace: {0}")]
    Workspace(String),
    /// The buffers do not give what the plan needs: an FP8 plan without its scale
    /// inverses or with one off a 16-byte boundary, a bias epilogue without a bias.
    #[error("the call's buffers do not fit its plan: {0}")]
    Buffers(&'static str),
}

impl From<CublasError> for CublasLtError {
    fn from(e: CublasError) -> Self {
        Self::Status(e)
    }
}

/// The device buffers of one call, as device addresses (each at the plan's offsets).
#[derive(Clone, Copy, Debug)]
pub struct Buffers {
    /// cuBLASLt's A: Burn's right-hand side.
    pub a: u64,
    /// cuBLASLt's B: Burn's left-hand side.
    pub b: u64,
    /// The output.
    pub d: u64,
    /// The epilogue's bias.
    pub bias: Option<u64>,
    /// FP8: one f32 each, the operands' scale inverses.
    pub scale_invs: Option<(u64, u64)>,
}

impl Buffers {
    /// Whether these buffers give what `plan` needs: an FP8 plan its scale inverses, each on
    /// a 16-byte boundary (cuBLASLt answers NOT_SUPPORTED for scale pointers off one: two
    /// scales 4 bytes apart in one buffer, say; burn-amp's scales are buffers of their own),
    /// a bias epilogue its bias.
    ///
    /// # Errors
    /// [`CublasLtError::Buffers`] naming what is missing.
    pub(super) fn check(&self, plan: &GemmPlan) -> Result<(), CublasLtError> {
        let fp8 = takes_scales(plan);
        if fp8 && self.scale_invs.is_none() {
            return Err(CublasLtError::Buffers(
                "an FP8 product needs its operands' scale inverses",
            ));
        }
        if plan.epilogue == Epilogue::Bias && self.bias.is_none() {
            return Err(CublasLtError::Buffers("the bias epilogue needs a bias"));
        }
        if fp8
            && let Some((a, b)) = self.scale_invs
            && (a % 16 != 0 || b % 16 != 0)
        {
            return Err(CublasLtError::Buffers(
                "FP8 scale inverses must start on 16-byte boundaries",
            ));
        }
        Ok(())
    }
}

/// Whether `plan` reads FP8 operands, which take per-tensor scale inverses.
fn takes_scales(plan: &GemmPlan) -> bool {
    plan.fp8.is_some() || plan.a.dtype.is_fp8() || plan.b.dtype.is_fp8()
}

/// One plan's descriptors and algorithm.
struct Call {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: [sys::cublasLtMatrixLayout_t; 3],
    algo: sys::cublasLtMatmulAlgo_t,
}

/// A cuBLASLt handle on one stream, its workspace and its planned calls.
pub struct CublasLt {
    handle: sys::cublasLtHandle_t,
    stream: Arc<CudaStream>,
    workspace: CudaSlice<u8>,
    calls: HashMap<GemmPlan, Call>,
}

// SAFETY: the handle and descriptors are used by one thread at a time (`run` takes
// `&mut self`); cuBLASLt's handles may move between threads.
unsafe impl Send for CublasLt {}

impl CublasLt {
    /// A handle whose calls run on `stream`.
    ///
    /// # Errors
    /// [`CublasLtError::Missing`] without libcublasLt; a status or workspace error.
    pub fn new(stream: Arc<CudaStream>) -> Result<Self, CublasLtError> {
        // SAFETY: only looks the library up.
        if !unsafe { sys::is_culib_present() } {
            return Err(CublasLtError::Missing);
        }
        let handle = result::create_handle()?;
        let workspace = stream
            .alloc_zeros::<u8>(WORKSPACE)
            .map_err(|e| CublasLtError::Workspace(format!("{e:?}")))?;
        Ok(Self {
            handle,
            stream,
            workspace,
            calls: HashMap::new(),
        })
    }

    /// Enqueues `plan` on the handle's stream with `buffers`.
    ///
    /// # Safety
    /// The buffers hold what the plan reads and writes (its layouts, batch and offsets) on
    /// this handle's device, and stay alive until the stream has run the call.
    ///
    /// # Errors
    /// [`CublasLtError::Buffers`] for an FP8 plan without scale inverses (it would run
    /// unscaled) or with one off a 16-byte boundary, or a bias epilogue without a bias,
    /// before anything is enqueued; cuBLASLt's status when it refuses the call.
    pub unsafe fn run(&mut self, plan: &GemmPlan, buffers: &Buffers) -> Result<(), CublasLtError> {
        buffers.check(plan)?;
        let fp8 = takes_scales(plan);
        if !self.calls.contains_key(plan) {
            // SAFETY: descriptors made and queried on our handle.
            let call = unsafe { prepare(self.handle, plan)? };
            self.calls.insert(plan.clone(), call);
        }
        let call = &self.calls[plan];
        // This call's pointers, on the plan's descriptor (used by one call at a time: `run`
        // takes `&mut self`, and cuBLASLt reads them when the call is enqueued).
        // SAFETY: attributes of our live descriptor, each a device address (a u64).
        unsafe {
            if let Some(bias) = buffers.bias {
                set_desc(
                    call.desc,
                    sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    &bias,
                )?;
            }
            if let Some((a, b)) = buffers.scale_invs.filter(|_| fp8) {
                set_desc(
                    call.desc,
                    sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                    &a,
                )?;
                set_desc(
                    call.desc,
                    sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                    &b,
                )?;
            }
        }
        let (alpha, beta) = (1f32, 0f32);
        let at = |base: u64, layout: &Layout| {
            (base + (layout.offset * element_size(layout.dtype)) as u64) as *const c_void
        };
        let (workspace, _guard) = self.workspace.device_ptr(&self.stream);
        // SAFETY: our caller's: the buffers match the plan's layouts; C is D (beta 0).
        unsafe {
            result::matmul(
                self.handle,
                call.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                at(buffers.a, &plan.a),
                call.layouts[0],
                at(buffers.b, &plan.b),
                call.layouts[1],
                at(buffers.d, &plan.d),
                call.layouts[2],
                at(buffers.d, &plan.d) as *mut c_void,
                call.layouts[2],
                &call.algo,
                workspace as *mut c_void,
                WORKSPACE,
                self.stream.cu_stream() as sys::cudaStream_t,
            )?;
        }
        Ok(())
    }

    /// The version of the libcublasLt loaded (`major * 10000 + minor * 100 + patch`).
    pub fn version(&self) -> usize {
        // SAFETY: a query of the loaded library, no arguments.
        unsafe { sys::cublasLtGetVersion() }
    }
}

/// The descriptors of `plan` and the heuristic's best algorithm for them. No pointer is set
/// here: `run` sets the bias and scale pointers of each call.
///
/// # Safety
/// The handle is alive.
unsafe fn prepare(handle: sys::cublasLtHandle_t, plan: &GemmPlan) -> Result<Call, CublasLtError> {
    let compute = match plan.compute {
        Compute::F32 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        Compute::Tf32 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
    };
    let desc = result::create_matmul_desc(compute, sys::cudaDataType::CUDA_R_32F)?;
    // cublasOperation_t as its i32: CUBLAS_OP_N = 0, CUBLAS_OP_T = 1.
    let op = |t: bool| i32::from(t);
    // SAFETY: attributes of our descriptor, each the size its type has.
    unsafe {
        set_desc(
            desc,
            sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
            &op(plan.a.transposed),
        )?;
        set_desc(
            desc,
            sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
            &op(plan.b.transposed),
        )?;
        if plan.epilogue == Epilogue::Bias {
            set_desc(
                desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_EPILOGUE,
                &sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
            )?;
            // The bias is in the output's type (cuBLASLt's default but for FP8 operands,
            // where it must be named).
            set_desc(
                desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                &data_type(plan.d.dtype),
            )?;
        }
        if let Some(fp8) = plan.fp8 {
            let fast = i8::from(fp8.fast_accum);
            set_desc(
                desc,
                sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                &fast,
            )?;
        }
    }
    let layouts = [
        layout(&plan.a, plan.batch)?,
        layout(&plan.b, plan.batch)?,
        layout(&plan.d, plan.batch)?,
    ];
    let pref = result::create_matmul_pref()?;
    let workspace = WORKSPACE as u64;
    // SAFETY: our preference descriptor; the attribute is a u64.
    unsafe {
        result::set_matmul_pref_attribute(
            pref,
            sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
            (&workspace as *const u64).cast(),
            size_of::<u64>(),
        )?;
    }
    // SAFETY: every descriptor is ours and alive.
    let heuristic = unsafe {
        result::get_matmul_algo_heuristic(
            handle, desc, layouts[0], layouts[1], layouts[2], layouts[2], pref,
        )
    };
    // SAFETY: made above, not used again.
    unsafe { result::destroy_matmul_pref(pref)? };
    match heuristic {
        Ok(h) => Ok(Call {
            desc,
            layouts,
            algo: h.algo,
        }),
        Err(e) => {
            // SAFETY: made above, not kept.
            unsafe { destroy(desc, layouts) };
            Err(e.into())
        }
    }
}

/// Destroys a plan's descriptors.
///
/// # Safety
/// Made by `prepare`, destroyed once.
unsafe fn destroy(desc: sys::cublasLtMatmulDesc_t, layouts: [sys::cublasLtMatrixLayout_t; 3]) {
    // SAFETY: our caller's.
    unsafe {
        let _ = result::destroy_matmul_desc(desc);
        for layout in layouts {
            let _ = result::destroy_matrix_layout(layout);
        }
    }
}

impl Drop for CublasLt {
    fn drop(&mut self) {
        for (_, call) in self.calls.drain() {
            // SAFETY: each descriptor was made by `prepare` and is dropped once, here.
            unsafe { destroy(call.desc, call.layouts) };
        }
        // SAFETY: the handle was made by `new` and is dropped once, here.
        unsafe {
            let _ = result::destroy_handle(self.handle);
        }
    }
}

/// Sets one attribute of a matmul descriptor to `value`.
///
/// # Safety
/// `desc` is alive and `T` is the attribute's type.
unsafe fn set_desc<T>(
    desc: sys::cublasLtMatmulDesc_t,
    attr: sys::cublasLtMatmulDescAttributes_t,
    value: &T,
) -> Result<(), CublasError> {
    // SAFETY: our caller's.
    unsafe {
        result::set_matmul_desc_attribute(desc, attr, (value as *const T).cast(), size_of::<T>())
    }
}

/// A matrix layout descriptor: column-major, the plan's rows, columns and `ld`, `batch`
/// entries `batch_stride` apart.
fn layout(l: &Layout, batch: usize) -> Result<sys::cublasLtMatrixLayout_t, CublasError> {
    let layout = result::create_matrix_layout(
        data_type(l.dtype),
        l.rows as u64,
        l.cols as u64,
        l.ld as i64,
    )?;
    if batch > 1 {
        let (count, stride) = (batch as i32, l.batch_stride as i64);
        // SAFETY: our layout descriptor; the attributes are an i32 and an i64.
        unsafe {
            result::set_matrix_layout_attribute(
                layout,
                sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                (&count as *const i32).cast(),
                size_of::<i32>(),
            )?;
            result::set_matrix_layout_attribute(
                layout,
                sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                (&stride as *const i64).cast(),
                size_of::<i64>(),
            )?;
        }
    }
    Ok(layout)
}

fn data_type(dtype: GemmDtype) -> sys::cudaDataType {
    match dtype {
        GemmDtype::F32 => sys::cudaDataType::CUDA_R_32F,
        GemmDtype::F16 => sys::cudaDataType::CUDA_R_16F,
        GemmDtype::BF16 => sys::cudaDataType::CUDA_R_16BF,
        GemmDtype::E4M3 => sys::cudaDataType::CUDA_R_8F_E4M3,
        GemmDtype::E5M2 => sys::cudaDataType::CUDA_R_8F_E5M2,
    }
}

fn element_size(dtype: GemmDtype) -> usize {
    dtype.size()
}
