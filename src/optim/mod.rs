//! Optimizers made for mixed precision.
//!
//! [`FusedAdamW`] is Burn's `AdamW` (the same update, the same defaults, the same record)
//! with each parameter's update done in one pass: the parameter, its gradient and both
//! moments read once, the parameter and the moments written once, in place where nothing
//! else holds them, with no temporaries the size of a parameter. Inside a
//! [`LossScaleOptimizer`](crate::LossScaleOptimizer) it skips an overflowed step on the
//! device, so a step needs no read back to the host.
//!
//! Each backend runs it as its kernels allow (`dispatch`): Flex on burn-amp's CPU kernel
//! (SIMD, threaded), Burn's wgpu and CUDA backends (fused or not) on its CubeCL kernel, every
//! other backend through Burn tensor ops with the same arithmetic.

mod adamw;
mod dispatch;
#[cfg(any(feature = "cubecl-backends", feature = "fusion"))]
pub(crate) use dispatch::kernel_takes;
mod paths;
mod record;
mod state;

pub use adamw::{FusedAdamW, FusedAdamWConfig};
pub(crate) use adamw::{as_fused, fused_record};
pub use record::RecordError;
