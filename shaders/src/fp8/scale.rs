//! Scales from an amax, per block: how the values of a block are brought into FP8's range.
//!
//! A block's values are multiplied by `scale` before rounding to FP8, and the FP8 values by
//! `scale_inv` after decoding. Three rules:
//!
//! - [`ScaleRule::Float`]: `scale = max / amax / 2^margin` (Transformer Engine's rule, and
//!   DeepSeek-V3's per-block `amax / 448`), `scale_inv = 1 / scale`, both f32 divisions.
//! - [`ScaleRule::PowerOfTwo`]: the largest power of two not above the float rule's scale,
//!   found from the exponent bits (no division), so scaling adds no rounding at all.
//! - [`ScaleRule::E8M0`]: OCP MX. `scale_inv = 2^(floor(log2 amax) - emax)` with `emax` the
//!   element format's largest exponent (8 for E4M3, 15 for E5M2), stored as an E8M0 byte
//!   (`2^(code - 127)`, 0xFF = NaN). Values above the element maximum then saturate, as the
//!   MX specification has it.
//!
//! Every finite scale lies in `[2^-126, 2^126]` ([`MIN_SCALE`], [`MAX_SCALE`]), the normal f32
//! range whose inverse is normal too: a float scale past either end (a huge `margin`, a
//! tiny or huge amax) is clamped there, so `scale_inv` is always finite and nonzero and no
//! finite input turns into NaN. The power-of-two and E8M0 rules stay inside it by
//! construction.
//!
//! A block whose amax is zero gets scale 1 (it quantizes to zeros). A block holding an inf
//! or NaN gets scale 1
//! under the float rules (its values then quantize by the overflow rule) and the NaN scale
//! under E8M0.
//!
//! f32 subnormals: GPUs flush them to zero, so the scaled paths do so explicitly, on every
//! runtime: an input below 2^-126 in magnitude is taken as a signed zero before scaling, and
//! a dequantized result below 2^-126 is returned as a signed zero. Unscaled conversions are
//! unaffected (FP8's smallest value is far above 2^-126).

use super::format::Fp8Format;

/// How a block's scale follows from its amax.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleRule {
    /// `max / amax / 2^margin`, an f32 division rounded as IEEE rounds it on every backend
    /// (the kernels divide in integer arithmetic: Vulkan drivers may divide 2.5 ulp off).
    Float {
        /// Headroom in powers of two (Transformer Engine's `margin`).
        margin: u32,
    },
    /// The largest power of two at or below `max / amax / 2^margin`.
    PowerOfTwo {
        /// Headroom in powers of two.
        margin: u32,
    },
    /// OCP MX: a shared power-of-two exponent stored as E8M0.
    E8M0,
}

/// A [`ScaleRule`] without its margin: what the scale kernel is compiled for (the margin is
/// a run-time argument).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleKind {
    /// [`ScaleRule::Float`].
    Float,
    /// [`ScaleRule::PowerOfTwo`].
    PowerOfTwo,
    /// [`ScaleRule::E8M0`].
    E8M0,
}

impl ScaleRule {
    /// The rule without its margin.
    pub const fn kind(self) -> ScaleKind {
        match self {
            Self::Float { .. } => ScaleKind::Float,
            Self::PowerOfTwo { .. } => ScaleKind::PowerOfTwo,
            Self::E8M0 => ScaleKind::E8M0,
        }
    }

    /// The margin (0 for E8M0).
    pub const fn margin(self) -> u32 {
        match self {
            Self::Float { margin } | Self::PowerOfTwo { margin } => margin,
            Self::E8M0 => 0,
        }
    }
}

/// The smallest scale any rule gives: `2^-126`, the smallest normal f32.
pub const MIN_SCALE: f32 = f32::MIN_POSITIVE;
/// The largest scale any rule gives: `2^126`, whose inverse is the smallest normal f32.
pub const MAX_SCALE: f32 = 1.0 / f32::MIN_POSITIVE;

/// Whether `scale` is one FP8 quantization accepts: finite and in `[MIN_SCALE, MAX_SCALE]`
/// (so neither it nor its inverse is zero, subnormal or infinite).
pub fn is_valid_scale(scale: f32) -> bool {
    (MIN_SCALE..=MAX_SCALE).contains(&scale)
}

/// One block's scales.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BlockScale {
    /// What values are multiplied by before rounding to FP8.
    pub scale: f32,
    /// What decoded FP8 values are multiplied by.
    pub scale_inv: f32,
    /// The E8M0 code of `scale_inv` (E8M0 rule), else 127 (1.0).
    pub e8m0: u8,
}

/// `floor(log2(x))` of a positive finite f32 given as bits, and whether its mantissa is at
/// most `other`'s mantissa.
fn exponent_of(bits: u32) -> i32 {
    let biased = (bits >> 23) as i32;
    if biased == 0 {
        // Subnormal: 2^-149 * mantissa.
        let mantissa = bits & 0x7f_ffff;
        -149 + (31 - mantissa.leading_zeros() as i32)
    } else {
        biased - 127
    }
}

fn mantissa_of(bits: u32) -> u32 {
    let biased = bits >> 23;
    if biased == 0 {
        let mantissa = bits & 0x7f_ffff;
        (mantissa << (mantissa.leading_zeros() - 8)) & 0x7f_ffff
    } else {
        bits & 0x7f_ffff
    }
}

/// `2^k` for `k` in `-126..=127`.
pub fn pow2(k: i32) -> f32 {
    f32::from_bits(((k + 127) as u32) << 23)
}

/// The scales of a block with amax `amax` (as f32 bits of `|x|`), for FP8 format `format`.
///
/// ```
/// use burn_amp_kernels::fp8::Fp8Format;
/// use burn_amp_kernels::fp8::scale::{ScaleRule, block_scale};
///
/// let s = block_scale(10f32.to_bits(), Fp8Format::E4M3, ScaleRule::PowerOfTwo { margin: 0 });
/// assert_eq!(s.scale, 32.0); // 10 * 32 = 320 <= 448 < 10 * 64
/// let mx = block_scale(10f32.to_bits(), Fp8Format::E4M3, ScaleRule::E8M0);
/// assert_eq!(mx.scale_inv, 2f32.powi(3 - 8)); // floor(log2 10) - emax(E4M3)
/// ```
pub fn block_scale(amax_bits: u32, format: Fp8Format, rule: ScaleRule) -> BlockScale {
    let one = BlockScale {
        scale: 1.0,
        scale_inv: 1.0,
        e8m0: 127,
    };
    let finite = amax_bits < 0x7f80_0000;
    if amax_bits == 0 || !finite {
        if !finite && rule == ScaleRule::E8M0 {
            return BlockScale {
                scale: f32::NAN,
                scale_inv: f32::NAN,
                e8m0: 0xff,
            };
        }
        return one;
    }
    let max_bits = format.max().to_bits();
    match rule {
        ScaleRule::Float { margin } => {
            let amax = f32::from_bits(amax_bits);
            let mut scale = format.max() / amax;
            if margin > 0 {
                scale *= pow2(-(margin.min(126) as i32));
            }
            // Compared as bits, as the kernel does (a GPU may have flushed a subnormal).
            let bits = scale.to_bits();
            if bits < MIN_SCALE.to_bits() {
                scale = MIN_SCALE;
            } else if bits > MAX_SCALE.to_bits() {
                scale = MAX_SCALE;
            }
            BlockScale {
                scale,
                scale_inv: 1.0 / scale,
                e8m0: 127,
            }
        }
        ScaleRule::PowerOfTwo { margin } => {
            let mut k = exponent_of(max_bits) - exponent_of(amax_bits);
            if mantissa_of(amax_bits) > mantissa_of(max_bits) {
                k -= 1;
            }
            let k = (k - margin as i32).clamp(-126, 126);
            BlockScale {
                scale: pow2(k),
                scale_inv: pow2(-k),
                e8m0: 127,
            }
        }
        ScaleRule::E8M0 => {
            let shared = exponent_of(amax_bits) - exponent_of(max_bits);
            let code = (shared + 127).clamp(1, 254);
            BlockScale {
                scale: pow2(127 - code),
                scale_inv: pow2(code - 127),
                e8m0: code as u8,
            }
        }
    }
}

/// The value of an E8M0 code: `2^(code - 127)`, NaN for 0xFF. Code 0 (2^-127, an f32
/// subnormal) is never produced by [`block_scale`].
pub fn e8m0_value(code: u8) -> f32 {
    match code {
        0xff => f32::NAN,
        0 => f32::from_bits(0x0040_0000),
        c => pow2(i32::from(c) - 127),
    }
}

/// The amax of `values` as f32 bits of `|x|` (an integer maximum: exact, NaN wins).
pub fn amax_bits(values: &[f32]) -> u32 {
    values
        .iter()
        .map(|v| v.to_bits() & 0x7fff_ffff)
        .max()
        .unwrap_or(0)
}

/// Flushes an f32 subnormal to a zero of the same sign.
pub fn flush(x: f32) -> f32 {
    let bits = x.to_bits();
    if bits & 0x7f80_0000 == 0 {
        f32::from_bits(bits & 0x8000_0000)
    } else {
        x
    }
}
