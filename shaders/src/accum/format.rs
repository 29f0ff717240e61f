//! The accumulator formats and the chunking configuration.

/// The format a running sum is kept in. Narrow formats are emulated: each addition is done
/// in f32 and the result rounded to the format (integer bit work, identical on every
/// runtime). By the double-rounding theorem (f32's 24 bits >= 2p + 2 for f16's p = 11 and
/// bf16's p = 8) that is exactly the native f16 or bf16 addition. f32 subnormals are flushed
/// to zero, as GPUs do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Accumulator {
    /// IEEE f32.
    F32,
    /// IEEE f16 (max 65504; sums past it become inf).
    F16,
    /// bfloat16 (f32's range, 8 bits of precision).
    BF16,
    /// f32's range with 13 stored mantissa bits (14 of precision): how Hopper's FP8 tensor
    /// cores accumulate products, as DeepSeek-V3 measured it; the window accumulator of
    /// the block-scaled FP8 matmul.
    E8M13,
}

impl Accumulator {
    /// The number the kernels use: 0 f32, 1 f16, 2 bf16, 3 E8M13.
    pub const fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::BF16 => 2,
            Self::E8M13 => 3,
        }
    }

    /// The unit roundoff, `2^-p`.
    pub fn unit_roundoff(self) -> f64 {
        match self {
            Self::F32 => 2f64.powi(-24),
            Self::F16 => 2f64.powi(-11),
            Self::BF16 => 2f64.powi(-8),
            Self::E8M13 => 2f64.powi(-14),
        }
    }
}

/// How a long sum is split: into chunks of `chunk` terms summed in `accumulator`, whose
/// results are then summed in `combine` (IBM's chunk-based accumulation; `chunk = 0` is the
/// naive running sum).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AccumConfig {
    /// The format of the running sums.
    pub accumulator: Accumulator,
    /// Terms per chunk; 0 means one chunk (the naive running sum).
    pub chunk: u32,
    /// The format the chunk sums are combined in: f32, or the accumulator itself.
    pub combine: Accumulator,
    /// Stochastic rounding of the accumulator (IBM's second technique), with this seed.
    pub stochastic: Option<u32>,
}

impl AccumConfig {
    /// The naive running sum in `accumulator`.
    pub const fn naive(accumulator: Accumulator) -> Self {
        Self {
            accumulator,
            chunk: 0,
            combine: accumulator,
            stochastic: None,
        }
    }

    /// Chunks of `chunk` terms in `accumulator`, chunk sums combined in f32.
    pub const fn chunked(accumulator: Accumulator, chunk: u32) -> Self {
        Self {
            accumulator,
            chunk,
            combine: Accumulator::F32,
            stochastic: None,
        }
    }

    /// With the chunk sums combined in `combine`.
    pub const fn with_combine(mut self, combine: Accumulator) -> Self {
        self.combine = combine;
        self
    }

    /// With stochastic rounding of the accumulator.
    pub const fn with_stochastic(mut self, seed: u32) -> Self {
        self.stochastic = Some(seed);
        self
    }

    /// The chunk length for a sum of `len` terms.
    pub fn chunk_len(&self, len: u32) -> u32 {
        if self.chunk == 0 {
            len.max(1)
        } else {
            self.chunk
        }
    }
}
