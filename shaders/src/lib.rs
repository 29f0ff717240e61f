//! # burn-amp-kernels
//!
//! The kernels of [burn-amp](https://crates.io/crates/burn-amp), with their references:
//! CubeCL kernels, written once for wgpu (Vulkan, Metal, DX12) and CUDA, and CPU kernels
//! for Burn's Flex backend. This crate knows CubeCL and slices only; the glue to Burn's
//! tensors is in `burn-amp`.
//!
//! - [`fp8`]: FP8 quantize / dequantize with scaling;
//! - [`half16`]: Tesla's 16-bit SHP and UHP storage formats;
//! - [`accum`]: blocked (chunk-based) accumulation and the block-scaled FP8 matmul;
//! - [`optim`]: the fused AdamW step;
//! - [`cpu`]: fast f32/bf16/f16 casts, a mixed-precision GEMM and AdamW for the CPU;
//! - `cuda_check` (feature `cuda-check`): every CubeCL kernel compiled to PTX by NVRTC for
//!   the GPU architectures users have, without a GPU.
//!
//! Every public launch entry of the CubeCL kernels checks the buffers it is handed against
//! the layout it is given (sizes, alignment, 32-bit indexing) and returns a [`LaunchError`]
//! rather than launch a kernel that would read or write past a buffer.
#![warn(missing_docs)]

pub mod accum;
mod checks;
pub mod cpu;
#[cfg(feature = "cuda-check")]
pub mod cuda_check;
pub mod fp8;
mod grid;
pub mod half16;
pub mod optim;
pub mod order;

pub use checks::LaunchError;
