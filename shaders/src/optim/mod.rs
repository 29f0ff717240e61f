//! The fused AdamW step as a CubeCL kernel (wgpu, CUDA): one pass over a parameter reads
//! the parameter, its gradient and both moments once and writes the three results once; the
//! step count, its bias corrections and a skip decided by a non-finite count all stay on the
//! device. The arithmetic is [`crate::cpu::optim`]'s (Burn's `AdamW`, operation for
//! operation, the bias corrections included), which is this kernel's reference; a GPU
//! compiler may contract a multiply and an add into one rounding, and a GPU's square root
//! and division need not round correctly, so results agree within a few f32 roundings.

pub mod kernel;
pub mod launch;

pub use launch::{AdamwBuffers, AdamwOutputs, adamw, adamw_into};
