//! The CPU reference of SHP and UHP: f32 to a 16-bit code and back, by integer bit work.

use super::format::Half16;
use crate::fp8::Rounding;
use crate::fp8::reference::shift_round;

/// Mantissa bits of both formats.
pub const MANTISSA_BITS: u32 = 10;
/// UHP's canonical NaN (exponent 63, top mantissa bit).
pub const UHP_NAN: u16 = 0xfe00;
/// UHP's +inf (exponent 63, mantissa 0).
pub const UHP_INF: u16 = 0xfc00;

/// `value >> shift`, rounded to nearest, ties to even (the FP8 reference's rounding).
fn round_shift(value: u32, shift: u32) -> u32 {
    shift_round(value, shift, Rounding::NearestEven, 0)
}

/// The code of a nonzero finite magnitude (f32 bits without sign), or `None` on overflow.
fn magnitude_code(abs: u32, format: Half16) -> Option<u32> {
    let biased = (abs >> 23) as i32;
    let (exponent, mantissa) = if biased == 0 {
        (-126, abs & 0x7f_ffff)
    } else {
        (biased - 127, (abs & 0x7f_ffff) | 0x80_0000)
    };
    let field = exponent + format.bias();
    let code = if field >= 1 {
        if field > format.max_field() {
            return None;
        }
        let full = ((field as u32) << 23) | (mantissa & 0x7f_ffff);
        round_shift(full, 23 - MANTISSA_BITS)
    } else if matches!(format, Half16::Uhp) {
        // Below the smallest normal: flushed, before rounding.
        0
    } else {
        round_shift(mantissa, 23 - MANTISSA_BITS + (1 - field) as u32)
    };
    let max_code = ((format.max_field() as u32) << MANTISSA_BITS) | 0x3ff;
    (code <= max_code).then_some(code)
}

/// f32 to SHP or UHP, rounding to nearest even.
///
/// SHP: overflow and infinities clamp to ±max, NaN to +max, signed zeros kept. UHP:
/// negative numbers (and -inf) become +0, values below the smallest normal flush to +0,
/// overflow and +inf become +inf, NaN stays NaN.
///
/// ```
/// use burn_amp_kernels::half16::{Half16, reference::{decode, encode}};
///
/// let shp = Half16::shp(15).unwrap(); // f16's bias: the same codes as f16 below 2^16
/// assert_eq!(encode(1.0, shp), 0x3c00);
/// assert_eq!(encode(f32::INFINITY, shp), 0x7fff); // no inf: clamped to max
/// assert_eq!(decode(0x7c00, shp), 65536.0); // f16's inf code is a number here
/// assert_eq!(encode(2f32.powi(-31), Half16::Uhp), 0); // subnormal range: flushed
/// assert_eq!(encode(-3.0, Half16::Uhp), 0);
/// assert!(decode(encode(f32::NAN, Half16::Uhp), Half16::Uhp).is_nan());
/// ```
pub fn encode(x: f32, format: Half16) -> u16 {
    let bits = x.to_bits();
    let negative = bits >> 31 == 1;
    let abs = bits & 0x7fff_ffff;
    match format {
        Half16::Shp { .. } => {
            let max = ((format.max_field() as u32) << MANTISSA_BITS) | 0x3ff;
            let sign = if negative && abs <= 0x7f80_0000 {
                0x8000
            } else {
                0
            };
            let code = if abs >= 0x7f80_0000 {
                max
            } else if abs == 0 {
                0
            } else {
                magnitude_code(abs, format).unwrap_or(max)
            };
            (sign | code) as u16
        }
        Half16::Uhp => {
            if abs > 0x7f80_0000 {
                UHP_NAN
            } else if negative || abs == 0 {
                0
            } else if abs == 0x7f80_0000 {
                UHP_INF
            } else {
                magnitude_code(abs, format).map_or(UHP_INF, |c| c as u16)
            }
        }
    }
}

/// A SHP or UHP code to the f32 it stands for (exactly: every value of both formats is an
/// f32). UHP's subnormal codes (exponent 0, mantissa not 0) decode to zero.
pub fn decode(code: u16, format: Half16) -> f32 {
    let code = u32::from(code);
    let (sign, magnitude) = match format {
        Half16::Shp { .. } => (code >> 15, code & 0x7fff),
        Half16::Uhp => (0, code),
    };
    let field = (magnitude >> MANTISSA_BITS) as i32;
    let mantissa = magnitude & 0x3ff;
    let value = match format {
        Half16::Uhp if field == 63 => {
            if mantissa == 0 {
                f32::INFINITY
            } else {
                f32::NAN
            }
        }
        Half16::Uhp if field == 0 => 0.0,
        _ if field == 0 => mantissa as f32 * 2f32.powi(1 - format.bias() - 10),
        _ => (1024 + mantissa) as f32 * 2f32.powi(field - format.bias() - 10),
    };
    if sign == 1 { -value } else { value }
}
