//! The glue between burn-amp's kernel traits ([`Fp8Backend`](crate::fp8::Fp8Backend),
//! [`AccumBackend`](crate::accum::AccumBackend)) and each family of Burn backend: CubeCL
//! backends launch the kernels, fused backends register them as custom operations,
//! decorators hand the work to their inner backend, CPU backends take the reference path.

#[cfg(feature = "cubecl-backends")]
mod cube;
#[cfg(feature = "fusion")]
mod fusion;
mod portable;
mod wrappers;
