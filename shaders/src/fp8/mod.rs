//! FP8 (E4M3, E5M2, with a configurable exponent bias) quantization and dequantization.
//!
//! - [`format`](mod@format): the formats and the rounding and overflow rules;
//! - [`reference`](mod@reference): the CPU reference, integer bit work from the layout;
//! - [`scale`]: per-tensor, per-block and MX (E8M0) scales from an amax;
//! - [`kernel`]: the CubeCL kernels, the same steps on any CubeCL runtime;
//! - [`launch`]: launching them over raw CubeCL buffers.

pub mod format;
pub mod kernel;
pub mod launch;
pub mod reference;
pub mod scale;

pub use format::{Fp8Cast, Fp8Format, Fp8Layout, InvalidBias, Overflow, Rounding};
pub use scale::ScaleRule;
