//! burn-amp's matrix products on cuBLASLt (NVIDIA's GEMM library), planned on the host.
//!
//! A product is first a [`GemmPlan`]: Burn's row-major operand views (shapes, strides,
//! offsets, broadcast batch dimensions) turned into one cuBLASLt call's numbers (which
//! operand is cuBLASLt's A, its transpose flag and leading dimension, one batch stride,
//! the output's layout, the compute type, the epilogue, FP8's requirements). Plans are
//! values: the tests build one for every product shape Burn produces and carry it out with
//! a CPU [`reference`](mod@reference) against Burn's own matmul, so a wrong layout fails on
//! any machine.
//! With the `cuda` feature, `CublasLt` runs them (libcublasLt loaded at run time). The
//! handshake that is to order them with CubeCL's stream on the device is described and
//! tested on the host in [`order`]; burn-amp's ops do not call cuBLASLt yet.
//!
//! ```
//! use burn_amp::cublaslt::{GemmDtype, GemmPlan, PlanOptions, View};
//!
//! // x [8, 64] @ w^T, where w is a linear layer's [32, 64] weight read transposed.
//! let x = View::contiguous(&[8, 64], GemmDtype::BF16);
//! let mut w_t = View::contiguous(&[32, 64], GemmDtype::BF16);
//! w_t.shape = vec![64, 32];
//! w_t.strides = vec![1, 64];
//! let plan = GemmPlan::new(&x, &w_t, PlanOptions::new(GemmDtype::F32))?;
//! // cuBLASLt's A is the weight, read transposed in place: no copy.
//! assert!(plan.a.transposed && !plan.b.transposed);
//! assert_eq!((plan.m, plan.n, plan.k), (32, 8, 64));
//! # Ok::<(), burn_amp::cublaslt::PlanError>(())
//! ```

#[cfg(feature = "cuda")]
mod exec;
pub mod order;
#[cfg(feature = "cuda")]
mod ordered;
mod plan;
pub mod reference;

#[cfg(feature = "cuda")]
pub use exec::{Buffers, CublasLt, CublasLtError};
// Not yet part of the documented API: on an H100 (driver 580) the GPU suite's chain of
// ordered products hung with the kernel transport; the suite runs it with `--ordered`.
#[cfg(feature = "cuda")]
#[doc(hidden)]
pub use ordered::{OrderError, OrderedLt, OrderedProduct, Transport};

pub use plan::{
    Compute, Epilogue, Fp8Scales, GemmDtype, GemmPlan, Layout, PlanError, PlanOptions, View,
};
