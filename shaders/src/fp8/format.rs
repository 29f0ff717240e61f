//! The FP8 formats: their bit layouts, exponent bias, and the rules for rounding and
//! overflow. Stated once here; the CPU reference ([`super::reference`]) and the CubeCL
//! kernels ([`super::kernel`]) both follow them bit for bit.

use core::fmt;

/// An FP8 bit layout: one sign bit, then exponent and mantissa bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fp8Layout {
    /// OCP `E4M3FN`: 4 exponent bits, 3 mantissa bits, no infinities. The exponent field
    /// 1111 holds normal numbers except for mantissa 111, which is NaN (`S.1111.111`).
    /// With bias 7: largest value 448, smallest normal 2^-6, smallest subnormal 2^-9.
    E4M3,
    /// OCP `E5M2`, IEEE-754-like: 5 exponent bits, 2 mantissa bits; exponent 11111 is inf
    /// (mantissa 00) or NaN. With bias 15: largest value 57344, smallest normal 2^-14,
    /// smallest subnormal 2^-16.
    E5M2,
}

impl Fp8Layout {
    /// Mantissa bits: 3 or 2.
    pub const fn mantissa_bits(self) -> u32 {
        match self {
            Self::E4M3 => 3,
            Self::E5M2 => 2,
        }
    }

    /// Exponent bits: 4 or 5.
    pub const fn exponent_bits(self) -> u32 {
        7 - self.mantissa_bits()
    }

    /// The OCP bias: 7 for E4M3, 15 for E5M2.
    pub const fn default_bias(self) -> i32 {
        match self {
            Self::E4M3 => 7,
            Self::E5M2 => 15,
        }
    }

    /// The largest finite code without its sign: `0.1111.110` (0x7E) or `0.11110.11` (0x7B).
    pub const fn max_finite_code(self) -> u8 {
        match self {
            Self::E4M3 => 0x7E,
            Self::E5M2 => 0x7B,
        }
    }

    /// The NaN code without its sign: `0.1111.111` (0x7F) or `0.11111.10` (0x7E, quiet). A NaN
    /// encodes with its sign where the backend hands it over (the CPU, lavapipe); NVIDIA's
    /// f16/f32 conversions return the positive canonical NaN, so there a NaN's code may be
    /// the positive one.
    pub const fn nan_code(self) -> u8 {
        match self {
            Self::E4M3 => 0x7F,
            Self::E5M2 => 0x7E,
        }
    }

    /// What an overflow becomes under [`Overflow::NonSaturating`], without its sign: NaN for
    /// E4M3 (it has no inf), inf (`0.11111.00`, 0x7C) for E5M2.
    pub const fn overflow_code(self) -> u8 {
        match self {
            Self::E4M3 => 0x7F,
            Self::E5M2 => 0x7C,
        }
    }
}

/// Why an FP8 format cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidBias {
    /// The bias asked for.
    pub bias: i32,
}

impl fmt::Display for InvalidBias {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "FP8 exponent bias {} is out of range: it must be within {}..={}",
            self.bias,
            Fp8Format::MIN_BIAS,
            Fp8Format::MAX_BIAS
        )
    }
}

impl std::error::Error for InvalidBias {}

/// An FP8 format: a layout and an exponent bias.
///
/// A code with exponent field `e` and mantissa `m` (of `M` bits) is worth
/// `(1 + m / 2^M) * 2^(e - bias)` when `e > 0`, and `m / 2^M * 2^(1 - bias)` (a subnormal)
/// when `e = 0`. The OCP formats use bias 7 (E4M3) and 15 (E5M2); IBM's HFP8 and Tesla's
/// CFloat8 move the bias to trade range for precision — every value scales by
/// `2^(default_bias - bias)`:
///
/// | format | bias | largest | smallest normal | smallest subnormal |
/// |--------|------|---------|-----------------|--------------------|
/// | E4M3   | 7    | 448     | 2^-6            | 2^-9               |
/// | E4M3   | b    | 448 * 2^(7-b) | 2^(1-b)   | 2^(-2-b)           |
/// | E5M2   | 15   | 57344   | 2^-14           | 2^-16              |
/// | E5M2   | b    | 57344 * 2^(15-b) | 2^(1-b) | 2^(-1-b)          |
///
/// The bias is limited to `0..=63` (CFloat8's 6-bit bias), which keeps every FP8 value a
/// normal f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fp8Format {
    layout: Fp8Layout,
    bias: i32,
}

impl Fp8Format {
    /// OCP E4M3FN (bias 7, max 448).
    pub const E4M3: Self = Self {
        layout: Fp8Layout::E4M3,
        bias: 7,
    };
    /// OCP E5M2 (bias 15, max 57344).
    pub const E5M2: Self = Self {
        layout: Fp8Layout::E5M2,
        bias: 15,
    };
    /// The smallest bias accepted.
    pub const MIN_BIAS: i32 = 0;
    /// The largest bias accepted.
    pub const MAX_BIAS: i32 = 63;

    /// `layout` with exponent bias `bias`.
    ///
    /// # Errors
    /// [`InvalidBias`] outside `0..=63`.
    pub fn new(layout: Fp8Layout, bias: i32) -> Result<Self, InvalidBias> {
        if (Self::MIN_BIAS..=Self::MAX_BIAS).contains(&bias) {
            Ok(Self { layout, bias })
        } else {
            Err(InvalidBias { bias })
        }
    }

    /// The same bit layout with exponent bias `bias` (HFP8, Tesla CFloat8).
    ///
    /// ```
    /// use burn_amp_kernels::fp8::Fp8Format;
    ///
    /// let wide = Fp8Format::E4M3.with_bias(3).unwrap();
    /// assert_eq!(wide.max(), 448.0 * 16.0); // 448 * 2^(7 - 3)
    /// assert!(Fp8Format::E5M2.with_bias(64).is_err());
    /// ```
    ///
    /// # Errors
    /// [`InvalidBias`] outside `0..=63`.
    pub fn with_bias(self, bias: i32) -> Result<Self, InvalidBias> {
        Self::new(self.layout, bias)
    }

    /// The bit layout.
    pub const fn layout(self) -> Fp8Layout {
        self.layout
    }

    /// The exponent bias.
    pub const fn bias(self) -> i32 {
        self.bias
    }

    /// The largest finite value.
    pub fn max(self) -> f32 {
        self.value_of(self.layout.max_finite_code())
    }

    /// The smallest positive normal value, `2^(1 - bias)`.
    pub fn min_normal(self) -> f32 {
        self.value_of(1 << self.layout.mantissa_bits())
    }

    /// The smallest positive subnormal value, `2^(1 - bias - M)`.
    pub fn min_subnormal(self) -> f32 {
        self.value_of(1)
    }

    /// The value of a positive finite code, from the layout's definition (exact: every FP8
    /// value is an f64, and an f32 for biases in `0..=63`).
    fn value_of(self, code: u8) -> f32 {
        let m = self.layout.mantissa_bits();
        let field = i32::from(code >> m);
        let fraction = f64::from(code & ((1 << m) - 1)) / f64::from(1u32 << m);
        let value = if field == 0 {
            fraction * 2f64.powi(1 - self.bias)
        } else {
            (1.0 + fraction) * 2f64.powi(field - self.bias)
        };
        value as f32
    }
}

impl fmt::Display for Fp8Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.layout {
            Fp8Layout::E4M3 => "e4m3",
            Fp8Layout::E5M2 => "e5m2",
        };
        if self.bias == self.layout.default_bias() {
            f.write_str(name)
        } else {
            write!(f, "{name}(bias {})", self.bias)
        }
    }
}

/// How a value between two FP8 neighbours is rounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Rounding {
    /// To the nearest FP8 value; ties to the one with an even mantissa (IEEE's default).
    #[default]
    NearestEven,
    /// Up with probability equal to the distance from the value below (in units of the
    /// gap), so the expected result is the input: unbiased, as IBM's 8-bit training uses.
    /// The random bits come from a hash of `seed` and the element's index, so a run is
    /// reproducible and the CPU and the kernels agree bit for bit.
    Stochastic {
        /// The seed.
        seed: u32,
    },
}

/// What a finite value beyond the largest FP8 value, or an infinity, becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Overflow {
    /// Clamp to ±max, infinities included: what Transformer Engine and Keras do for
    /// training (clip, then cast).
    #[default]
    Saturate,
    /// The OCP conversion rule: overflow becomes NaN in E4M3 (no inf there) and ±inf in
    /// E5M2; infinities stay infinite in E5M2 and become NaN in E4M3.
    NonSaturating,
    /// Finite values past the range clamp to ±max, as under [`Saturate`](Self::Saturate);
    /// infinities stay non-finite, as under [`NonSaturating`](Self::NonSaturating). What a
    /// scale that may lag its tensor (delayed scaling) needs: an outlier saturates, an
    /// overflow upstream still reaches the loss scaler, with no read of the amax first.
    SaturateFinite,
}

impl Overflow {
    /// Whether a finite value past the range clamps to ±max.
    pub const fn clamps_finite(self) -> bool {
        matches!(self, Self::Saturate | Self::SaturateFinite)
    }

    /// Whether an infinity clamps to ±max.
    pub const fn clamps_infinite(self) -> bool {
        matches!(self, Self::Saturate)
    }
}

/// A conversion: format, rounding and overflow rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fp8Cast {
    /// The FP8 format.
    pub format: Fp8Format,
    /// The rounding rule.
    pub rounding: Rounding,
    /// The overflow rule.
    pub overflow: Overflow,
}

impl Fp8Cast {
    /// Round to nearest even, saturating: the usual choice for training.
    pub const fn new(format: Fp8Format) -> Self {
        Self {
            format,
            rounding: Rounding::NearestEven,
            overflow: Overflow::Saturate,
        }
    }

    /// With another rounding rule.
    pub const fn with_rounding(mut self, rounding: Rounding) -> Self {
        self.rounding = rounding;
        self
    }

    /// With another overflow rule.
    pub const fn with_overflow(mut self, overflow: Overflow) -> Self {
        self.overflow = overflow;
        self
    }
}
