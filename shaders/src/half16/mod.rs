//! Tesla's CFloat16 storage formats, SHP and UHP: 16-bit floats with the precision of f16
//! (10 mantissa bits) and a much wider range, for gradients and other stored values.
//!
//! | format | sign | exponent | mantissa | bias | subnormals | inf / NaN | overflow |
//! |--------|------|----------|----------|------|------------|-----------|----------|
//! | SHP | 1 bit | 5 bits | 10 bits | 0..=63, chosen per tensor | kept | none: every code is a number | clamps to ±max (NaN to +max) |
//! | UHP | none | 6 bits | 10 bits | 31 | flushed to zero | exponent 63 (inf, NaN) | +inf |
//!
//! Both round to nearest even. UHP holds magnitudes: negative inputs become zero.
//!
//! - [`format`](mod@format): the two formats and their ranges;
//! - [`reference`](mod@reference): the CPU reference, integer bit work;
//! - [`kernel`]: the CubeCL kernels, the same steps;
//! - [`launch`]: launching them over raw CubeCL buffers (two codes per `u32`).

pub mod format;
pub mod kernel;
pub mod launch;
pub mod reference;

pub use format::Half16;
