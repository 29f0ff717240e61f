//! The CPU backends take the reference path: the default methods of the kernel traits.

use crate::accum::AccumBackend;
use crate::fp8::Fp8Backend;

#[cfg(feature = "flex")]
impl Fp8Backend for burn::backend::Flex {
    const HOST_MEMORY: bool = true;
}
#[cfg(feature = "flex")]
impl AccumBackend for burn::backend::Flex {}

#[cfg(feature = "ndarray")]
impl Fp8Backend for burn::backend::NdArray {
    const HOST_MEMORY: bool = true;
}
#[cfg(feature = "ndarray")]
impl AccumBackend for burn::backend::NdArray {}
