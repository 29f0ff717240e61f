//! CPU kernels for Burn's Flex backend, on plain slices: what the CubeCL kernels are to
//! wgpu and CUDA, these are to the CPU. Each has a portable path that is the reference and
//! x86 fast paths chosen at run time; tests hold the fast paths to the portable one.
//!
//! - [`cast`]: f32 <-> bf16 and f32 <-> f16 conversions, vectorised and multi-threaded,
//!   bit for bit `half`'s conversions;
//! - [`gemm`]: a matrix product over f32, bf16 and f16 operands that rounds them to the
//!   compute format while packing and accumulates in f32 (AMX tiles, `vdpbf16ps` or f32
//!   FMAs: whichever the CPU runs fastest);
//! - [`conv`]: a convolution's columns and their adjoint, so that it runs on the GEMM;
//! - [`fp8`]: FP8 rounding and back (fake quantization) and per-block amaxes, byte for
//!   byte the FP8 reference;
//! - [`layout`]: strided views copied into row-major order;
//! - [`nn`]: softmax, layer norm, GELU, elementwise arithmetic and dropout masks, each with
//!   its backward pass, reading and writing any of the three formats and computing in f32;
//! - [`optim`]: one-pass AdamW and the loss scaler's unscale-and-check, in place;
//! - [`parallel`]: the loops every kernel above splits its work with, in which a caller
//!   from outside rayon's pool works alongside the pool's threads;
//! - [`Isa`]: which instruction set a kernel runs with, and the cache sizes its blocks are
//!   sized from ([`caches`]), detected once and passed down.
//!
//! Every generic entry point (over the element types) hands its slices to a function of
//! this crate that is not generic, so its body is compiled here, with this crate's
//! optimization level, and not in the caller's: a debug build that optimizes its
//! dependencies (`[profile.dev.package."*"] opt-level = 3`) runs these kernels at full
//! speed however unoptimized the model's own crate is.

pub mod caches;
pub mod cast;
pub mod conv;
mod erased;
pub mod fp8;
pub mod gemm;
pub mod isa;
pub mod layout;
mod multiversion;
pub mod nn;
pub mod optim;
pub mod pages;
pub mod parallel;

pub use isa::Isa;
