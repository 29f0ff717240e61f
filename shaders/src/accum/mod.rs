//! Blocked (chunk-based) accumulation: long sums split into chunks summed in a narrow
//! accumulator, the chunk sums then combined in f32 (IBM, 2018), and DeepSeek-V3's
//! block-scaled FP8 matrix product that promotes partial sums to f32 every `N_C` products.
//!
//! Swamping: once a running sum `S` is large, an addend below half of `S`'s ulp is lost. A
//! naive sum of `n` terms in a format of unit roundoff `u` has an error bound of about
//! `n u`; chunks of length `CL` bring it to about `(n / CL + CL) u`.
//!
//! - [`format`](mod@format): accumulators and chunking;
//! - [`reference`](mod@reference): the CPU reference (same operations, same order);
//! - [`kernel`], [`launch`]: the CubeCL kernels.

pub mod format;
pub mod kernel;
pub mod launch;
pub mod reference;

pub use format::{AccumConfig, Accumulator};
pub use reference::Fp8MatmulConfig;
