//! The CPU backends take the portable path: the default methods of [`super::Fp8Backend`].

#[cfg(feature = "flex")]
impl super::Fp8Backend for burn::backend::Flex {}

#[cfg(feature = "ndarray")]
impl super::Fp8Backend for burn::backend::NdArray {}
