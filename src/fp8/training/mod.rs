//! FP8 training through [`MixedPrecision`](crate::MixedPrecision): set an FP8 policy and an
//! unchanged model trains with FP8 matmuls.
//!
//! Under `float8_from_mixed_bfloat16` or `float8_from_mixed_float16` (or any policy with
//! [`Policy::with_fp8_scaling`](crate::Policy::with_fp8_scaling)), every matmul, linear and
//! convolution of the compute class
//!
//! 1. casts its inputs to the compute dtype, as the mixed policy does;
//! 2. rounds both operands to E4M3 with the policy's scaling ([`Fp8Scaling`]: current,
//!    blockwise, delayed or exponent bias; `format=auto` may pick E5M2 per tensor): the
//!    values the op then multiplies are exactly FP8 values times their block's scale, what
//!    an FP8 GEMM reads; the rounding is differentiated as the identity (straight-through
//!    estimator);
//! 3. runs the op in the compute dtype;
//! 4. in the backward pass, rounds the gradient arriving at its output to E5M2 before the
//!    op's own backward matmuls use it (HFP8: E4M3 forward, E5M2 backward).
//!
//! Delayed and exponent-bias scaling keep per-site state in an [`Fp8History`], owned by the
//! [`LossScaleOptimizer`](crate::LossScaleOptimizer) bound to the device and saved in its
//! record.
//!
//! Biases, attention's score and value products, and everything outside the compute class
//! stay as the mixed policy has them. Variables stay f32 and the optimizer updates them in
//! f32 (master weights).
//!
//! This is *simulated* FP8 (fake quantization): the numerics of FP8 training, measured on any
//! backend, with the rounding done by burn-amp's FP8 kernels; the matmul itself runs in the
//! compute dtype. [`Fp8Numerics`] reports per site how much each format underflows or
//! saturates.
//!
//! ```
//! use burn::backend::{Autodiff, Flex};
//! use burn::nn::{Linear, LinearConfig};
//! use burn::tensor::{FloatDType, Tensor};
//! use burn_amp::MixedPrecision;
//!
//! type B = MixedPrecision<Autodiff<Flex>>;
//! let device = Default::default();
//! MixedPrecision::<Autodiff<Flex>>::set_policy(&device, "float8_from_mixed_bfloat16")?;
//!
//! let layer: Linear<B> = LinearConfig::new(4, 2).init(&device);
//! let x = Tensor::<B, 2>::from_floats([[0.1, 0.2, 0.3, 0.4]], &device);
//! let y = layer.forward(x);
//! assert_eq!(y.dtype(), FloatDType::BF16.into());
//! let grads = y.sum().backward();
//! assert_eq!(layer.weight.grad(&grads).unwrap().dtype(), FloatDType::F32.into());
//! # MixedPrecision::<Autodiff<Flex>>::clear_policy(&device);
//! # Ok::<(), burn_amp::PolicyError>(())
//! ```
//!
//! [`Fp8Scaling`]: crate::fp8::Fp8Scaling
//! [`Fp8Numerics`]: crate::fp8::Fp8Numerics

mod aps;
mod device;
mod history;
mod numerics;
pub(crate) mod ops;
mod quant;
mod rules;
mod scaling;
mod site;
mod state;

pub(crate) use device::finite_or_zero;
pub(crate) use history::lane_of;
pub use history::{Fp8History, Fp8HistoryRecord, LaneRecord, RoleRecord, SiteRecord};
pub(crate) use numerics::Observer;
pub use numerics::{Fp8Numerics, RoleNumerics, SiteNumerics};
pub use rules::{AUTO_FORMAT_TOLERANCE, aps_scale, choose_format};
pub use scaling::{
    DelayedRecipe, ExponentBiasRecipe, Fp8Formats, Fp8Role, Fp8Scaling, GradientCompression,
};
pub(crate) use site::Fp8Site;
pub use state::{RoleState, SiteState};
