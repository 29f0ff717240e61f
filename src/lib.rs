//! # burn-amp
//!
//! Mixed-precision training for [Burn](https://burn.dev): change one type parameter, pick a
//! Keras-style dtype policy, and an existing model trains with f32 variables, f16 or bf16
//! matmuls and convolutions, and f32 softmax, reductions and losses.
//!
//! ```
//! use burn::backend::{Autodiff, Flex};
//! use burn::tensor::{FloatDType, Tensor};
//! use burn_amp::MixedPrecision;
//!
//! type Backend = MixedPrecision<Autodiff<Flex>>;
//! let device = Default::default();
//! MixedPrecision::<Autodiff<Flex>>::set_policy(&device, "mixed_float16")?;
//!
//! let a = Tensor::<Backend, 2>::ones([4, 4], &device);
//! assert_eq!(a.clone().matmul(a.clone()).dtype(), FloatDType::F16.into());
//! assert_eq!(a.exp().dtype(), FloatDType::F32.into());
//! # MixedPrecision::<Autodiff<Flex>>::clear_policy(&device);
//! # Ok::<(), burn_amp::PolicyError>(())
//! ```
//!
//! - [`MixedPrecision`]: the decorator backend.
//! - [`Policy`], [`set_global_policy`], [`with_policy`]: which dtypes ops run in.
//! - [`LossScaleOptimizer`]: loss scaling for `mixed_float16`, around any Burn optimizer.
//! - [`FusedAdamW`]: Burn's AdamW in one pass per parameter, which skips an overflowed step
//!   on the device (no read back per step under [`LossScaleOptimizer`]).
//! - [`fp8`]: FP8 (E4M3, E5M2) tensors with per-tensor, per-block and MX scaling.
//! - [`accum`]: blocked (chunk-based) accumulation and the block-scaled FP8 matmul.
//! - [`collective`]: data-parallel replicas (processes, machines) agreeing on gradients, the
//!   loss scaler's decisions and FP8 scales ([`LossScaleOptimizer::with_collective`]).
//! - [`cost`]: what a step costs: ops by class and dtype, casts and their bytes, FP8
//!   launches, reads back to the host.
//! - [`probe_backend`]: whether a backend starts here ([`BackendUnavailable`] names what is
//!   missing: the NVIDIA driver, NVRTC, the CUDA headers, a Vulkan driver).
//!
//! The [`guide`] explains all of it in chapters, starting with
//! [getting started](guide::getting_started).
//!
//! ## Features
#![doc = document_features::document_features!()]
#![warn(missing_docs)]

pub mod accum;
mod backend;
pub mod collective;
mod context;
pub mod cost;
mod cpu;
pub mod cublaslt;
mod dtype;
pub mod fp8;
pub mod guide;
mod kernel_impls;
pub mod loss_scale;
pub mod optim;
pub mod policy;
mod probe;
mod registry;

pub use backend::{MixedPrecision, ScaledGradients, cast_to_output, op_classes};
pub use context::{global_policy, set_global_policy, with_policy};
#[cfg(feature = "flex")]
pub use cpu::flex::empty_cache;
pub use loss_scale::{
    LossScale, LossScaleConfig, LossScaleError, LossScaleOptimizer, LossScaleOptimizerRecord,
};
#[cfg(feature = "train")]
pub use loss_scale::{LossScaleMetric, SkippedStepsMetric};
pub use optim::{FusedAdamW, FusedAdamWConfig};
pub use policy::{IntoPolicy, Kernels, Policy, PolicyError};
pub use probe::{BackendUnavailable, probe_backend};
#[doc(hidden)]
pub use registry::BackendKernels;
pub use registry::{KernelBackend, register};
