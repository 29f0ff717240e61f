//! The two CFloat16 formats.

use crate::fp8::InvalidBias;

/// A CFloat16 format.
///
/// ```
/// use burn_amp_kernels::half16::Half16;
///
/// let shp = Half16::shp(15)?;
/// assert_eq!(shp.max(), 131008.0); // (2 - 2^-10) * 2^(31 - 15): twice f16's range
/// assert_eq!(shp.min_subnormal(), 2f32.powi(-24));
/// assert_eq!(Half16::Uhp.max(), (2.0 - 2f32.powi(-10)) * 2f32.powi(31));
/// assert_eq!(Half16::Uhp.min_normal(), 2f32.powi(-30));
/// assert!(Half16::shp(64).is_err());
/// # Ok::<(), burn_amp_kernels::fp8::InvalidBias>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Half16 {
    /// Signed half precision: 1 sign, 5 exponent and 10 mantissa bits, exponent bias
    /// `bias` in 0..=63; subnormals kept; no inf or NaN codes.
    Shp {
        /// The exponent bias.
        bias: i32,
    },
    /// Unsigned half precision: 6 exponent and 10 mantissa bits, bias 31; subnormals
    /// flushed; exponent 63 encodes +inf (mantissa 0) and NaN.
    Uhp,
}

/// UHP's exponent bias.
pub const UHP_BIAS: i32 = 31;

impl Half16 {
    /// SHP with exponent bias `bias`.
    ///
    /// # Errors
    /// [`InvalidBias`] outside 0..=63 (the 6-bit bias of the CFloat formats).
    pub fn shp(bias: i32) -> Result<Self, InvalidBias> {
        if (0..=63).contains(&bias) {
            Ok(Self::Shp { bias })
        } else {
            Err(InvalidBias { bias })
        }
    }

    /// The exponent bias.
    pub const fn bias(self) -> i32 {
        match self {
            Self::Shp { bias } => bias,
            Self::Uhp => UHP_BIAS,
        }
    }

    /// The largest exponent field of a finite value: 31 (SHP), 62 (UHP).
    pub const fn max_field(self) -> i32 {
        match self {
            Self::Shp { .. } => 31,
            Self::Uhp => 62,
        }
    }

    /// The largest finite value, `(2 - 2^-10) * 2^(max_field - bias)`.
    pub fn max(self) -> f32 {
        (2.0 - 2f32.powi(-10)) * 2f32.powi(self.max_field() - self.bias())
    }

    /// The smallest positive normal value, `2^(1 - bias)`.
    pub fn min_normal(self) -> f32 {
        2f32.powi(1 - self.bias())
    }

    /// The smallest positive value: `2^(1 - bias - 10)` (SHP), the smallest normal (UHP).
    pub fn min_subnormal(self) -> f32 {
        match self {
            Self::Shp { bias } => 2f32.powi(1 - bias - 10),
            Self::Uhp => self.min_normal(),
        }
    }
}
