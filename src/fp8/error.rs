//! What can go wrong when quantizing to FP8.

use burn_tensor::DType;

/// Why a tensor could not be quantized, or a recipe built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Fp8Error {
    /// FP8 kernels index with 32 bits.
    #[error("tensor has {0} elements; FP8 quantization handles at most 2^32 - 1")]
    TooLarge(usize),
    /// Only f32, f16 and bf16 tensors are quantized.
    #[error("cannot quantize a {0:?} tensor to FP8: use f32, f16 or bf16")]
    UnsupportedDType(DType),
    /// A block dimension of zero.
    #[error("invalid FP8 recipe: {0}")]
    InvalidRecipe(String),
    /// A scale FP8 quantization cannot use: zero, negative, subnormal, infinite or NaN, or so
    /// large that its inverse is subnormal. Valid scales lie in `[2^-126, 2^126]`.
    #[error(
        "invalid FP8 scale {scale} for block {block}: scales must be finite and within \
         [2^-126, 2^126] (the normal f32 range, so that 1/scale is finite too)"
    )]
    InvalidScale {
        /// The first block whose scale is invalid.
        block: usize,
        /// Its scale.
        scale: f32,
    },
    /// An exponent bias out of range.
    #[error(transparent)]
    InvalidBias(#[from] burn_amp_kernels::fp8::InvalidBias),
    /// A checkpoint of FP8 scaling state that cannot be used.
    #[error("invalid FP8 scaling record: {0}")]
    InvalidRecord(String),
}
