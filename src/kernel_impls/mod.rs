//! The glue between burn-amp's kernel traits ([`Fp8Backend`](crate::fp8::Fp8Backend),
//! [`AccumBackend`](crate::accum::AccumBackend), [`KernelBackend`](crate::KernelBackend))
//! and each family of Burn backend: CubeCL backends launch the kernels (`cube.rs`), fused
//! backends register them as custom operations (`fusion.rs`), decorators hand the work to
//! their inner backend (`wrappers.rs`), CPU backends take the reference path
//! (`portable.rs`). The fused backends and the decorators implement the traits from one
//! table of the kernel ops (`table.rs`), one line per op.

#[cfg(feature = "cubecl-backends")]
mod cube;
#[cfg(feature = "fusion")]
mod fusion;
mod portable;
mod table;
mod wrappers;
