//! FP8 tensors on any backend: [`Fp8Tensor::quantize`] with a scaling [`Fp8Recipe`],
//! [`Fp8Tensor::dequantize`], and [`DelayedScaling`] for amax-history scaling; FP8
//! training through the decorator in [`training`].
//!
//! The formats, rounding and overflow rules are those of `burn_amp_kernels::fp8` (OCP E4M3
//! and E5M2, any exponent bias in 0..=63, round-to-nearest-even or stochastic rounding,
//! saturating or OCP non-saturating overflow). CubeCL backends (wgpu, CUDA) run the CubeCL
//! kernels; other backends run the CPU reference; both give the same bytes.

pub(crate) mod backend;
mod delayed;
mod error;
mod recipe;
mod tensor;
pub mod training;

pub use backend::Fp8Backend;
/// The bit layout under an [`Fp8Format`] (which adds the exponent bias): build formats with
/// [`Fp8Format::E4M3`], [`Fp8Format::E5M2`] and [`Fp8Format::with_bias`] instead.
#[doc(hidden)]
pub use burn_amp_kernels::fp8::Fp8Layout;
pub use burn_amp_kernels::fp8::launch::BlockLayout;
pub use burn_amp_kernels::fp8::scale::ScaleRule;
pub use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, Overflow, Rounding};
#[doc(hidden)]
pub use delayed::DelayedScalingItem;
pub use delayed::{AmaxCompute, DelayedScaling};
pub use error::Fp8Error;
pub use recipe::Fp8Recipe;
pub use tensor::Fp8Tensor;
pub use training::{
    AUTO_FORMAT_TOLERANCE, DelayedRecipe, ExponentBiasRecipe, Fp8Formats, Fp8History,
    Fp8HistoryRecord, Fp8Numerics, Fp8Role, Fp8Scaling, GradientCompression, LaneRecord,
    RoleRecord, SiteRecord, aps_scale, choose_format,
};
