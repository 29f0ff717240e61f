//! # burn-amp-kernels
//!
//! The CubeCL kernels of [burn-amp](https://crates.io/crates/burn-amp), with their CPU
//! references. Written once in CubeCL, they run on wgpu (Vulkan, Metal, DX12) and CUDA.
//! This crate knows CubeCL only; the glue to Burn's tensors is in `burn-amp`.
//!
//! - [`fp8`]: FP8 quantize / dequantize with scaling;
//! - [`half16`]: Tesla's 16-bit SHP and UHP storage formats;
//! - [`accum`]: blocked (chunk-based) accumulation and the block-scaled FP8 matmul.
#![warn(missing_docs)]

pub mod accum;
pub mod fp8;
mod grid;
pub mod half16;
