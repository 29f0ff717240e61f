//! The CPU reference: f32 to FP8 and back, written from the bit layout with integer
//! operations only. The CubeCL kernels run the same steps; tests hold them to these
//! results byte for byte.

use super::format::{Fp8Cast, Fp8Format, Rounding};
use super::launch::BlockLayout;
use super::scale::{BlockScale, ScaleRule, block_scale, flush};

const F32_MANTISSA: u32 = 23;
const F32_BIAS: i32 = 127;

/// A 32-bit integer hash (Wellons' `lowbias32`), the stochastic-rounding noise source.
pub const fn hash32(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^= x >> 16;
    x
}

/// The 32 random bits stochastic rounding uses for element `index` under `seed`.
pub const fn noise(seed: u32, index: u32) -> u32 {
    hash32(hash32(seed ^ 0x9e37_79b9) ^ index)
}

/// `value >> shift` rounded by `rounding`; `shift` may exceed 31 (then the result is 0 or 1).
pub(crate) fn shift_round(value: u32, shift: u32, rounding: Rounding, index: u32) -> u32 {
    if shift == 0 {
        return value;
    }
    match rounding {
        Rounding::NearestEven => {
            if shift > 32 {
                return 0;
            }
            let q = if shift == 32 { 0 } else { value >> shift };
            let rem = if shift == 32 {
                value
            } else {
                value & ((1 << shift) - 1)
            };
            let half = 1u32 << (shift - 1);
            if rem > half || (rem == half && q & 1 == 1) {
                q + 1
            } else {
                q
            }
        }
        Rounding::Stochastic { seed } => {
            let r = noise(seed, index);
            if shift >= 32 {
                // Round up with probability value / 2^shift, from 32 random bits.
                let threshold = if shift - 32 >= 32 {
                    0
                } else {
                    value >> (shift - 32)
                };
                return u32::from(r < threshold);
            }
            let q = value >> shift;
            let rem = value & ((1 << shift) - 1);
            // `r >> (32 - shift)` is uniform on [0, 2^shift): up with probability rem / 2^shift.
            q + u32::from((r >> (32 - shift)) < rem)
        }
    }
}

/// [`shift_round`], for the accumulation reference.
pub(crate) fn shift_round_pub(value: u32, shift: u32, rounding: Rounding, index: u32) -> u32 {
    shift_round(value, shift, rounding, index)
}

/// Converts one f32 to an FP8 code. `index` is the element's position, used only by
/// stochastic rounding.
///
/// ```
/// use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, Overflow, reference::encode};
///
/// let e4m3 = Fp8Cast::new(Fp8Format::E4M3);
/// assert_eq!(encode(448.0, e4m3, 0), 0x7E); // the largest E4M3 value
/// assert_eq!(encode(464.0, e4m3, 0), 0x7E); // a tie with 480: to even, 448
/// assert_eq!(encode(1e6, e4m3, 0), 0x7E); // saturates
/// assert_eq!(encode(1e6, e4m3.with_overflow(Overflow::NonSaturating), 0), 0x7F); // NaN
/// assert_eq!(encode(-0.0, e4m3, 0), 0x80);
/// ```
pub fn encode(x: f32, cast: Fp8Cast, index: u32) -> u8 {
    let bits = x.to_bits();
    let sign = ((bits >> 24) & 0x80) as u8;
    let abs = bits & 0x7fff_ffff;
    let layout = cast.format.layout();
    let m = layout.mantissa_bits();
    let clamp = |yes: bool| {
        if yes {
            layout.max_finite_code()
        } else {
            layout.overflow_code()
        }
    };
    let overflow = clamp(cast.overflow.clamps_finite());
    if abs > 0x7f80_0000 {
        return sign | layout.nan_code();
    }
    if abs == 0x7f80_0000 {
        return sign | clamp(cast.overflow.clamps_infinite());
    }
    // |x| = mantissa * 2^(exponent - 23), with the implicit bit made explicit.
    let biased = (abs >> F32_MANTISSA) as i32;
    let (exponent, mantissa) = if biased == 0 {
        (1 - F32_BIAS, abs & 0x7f_ffff)
    } else {
        (biased - F32_BIAS, (abs & 0x7f_ffff) | 0x80_0000)
    };
    // The FP8 exponent field this value would have, if normal.
    let field = exponent + cast.format.bias();
    let code = if field >= 1 {
        // Normal: keep `m` mantissa bits of `field.mantissa`; a carry rolls into the field.
        if field > 31 {
            return sign | overflow;
        }
        let full = ((field as u32) << F32_MANTISSA) | (mantissa & 0x7f_ffff);
        shift_round(full, F32_MANTISSA - m, cast.rounding, index)
    } else {
        // Subnormal: the implicit bit shifts into the mantissa; rounding up to 2^m lands on
        // the smallest normal, whose code is exactly 2^m.
        let shift = F32_MANTISSA - m + (1 - field) as u32;
        shift_round(mantissa, shift, cast.rounding, index)
    };
    if code > u32::from(layout.max_finite_code()) {
        sign | overflow
    } else {
        sign | code as u8
    }
}

/// Converts an FP8 code to the f32 it stands for (exactly: every FP8 value is an f32).
///
/// ```
/// use burn_amp_kernels::fp8::{Fp8Format, reference::decode};
///
/// assert_eq!(decode(0x7E, Fp8Format::E4M3), 448.0);
/// assert_eq!(decode(0x7B, Fp8Format::E5M2), 57344.0);
/// assert_eq!(decode(0x01, Fp8Format::E4M3), 2f32.powi(-9));
/// assert!(decode(0xFF, Fp8Format::E4M3).is_nan());
/// assert_eq!(decode(0xFC, Fp8Format::E5M2), f32::NEG_INFINITY);
/// ```
pub fn decode(code: u8, format: Fp8Format) -> f32 {
    f32::from_bits(decode_bits(code, format))
}

/// [`decode`], as f32 bits.
pub fn decode_bits(code: u8, format: Fp8Format) -> u32 {
    let layout = format.layout();
    let m = layout.mantissa_bits();
    let sign = u32::from(code & 0x80) << 24;
    let magnitude = code & 0x7f;
    if magnitude == layout.nan_code() || (magnitude > layout.overflow_code() && m == 2) {
        return sign | 0x7fc0_0000;
    }
    if m == 2 && magnitude == layout.overflow_code() {
        return sign | 0x7f80_0000;
    }
    let field = i32::from(magnitude >> m);
    let mut mantissa = u32::from(magnitude) & ((1 << m) - 1);
    if field == 0 && mantissa == 0 {
        return sign;
    }
    let mut exponent = field - format.bias();
    if field == 0 {
        // Subnormal: normalise (m is at most 3, so at most 3 steps).
        exponent = 1 - format.bias();
        while mantissa & (1 << m) == 0 {
            mantissa <<= 1;
            exponent -= 1;
        }
        mantissa &= (1 << m) - 1;
    }
    sign | (((exponent + F32_BIAS) as u32) << F32_MANTISSA) | (mantissa << (F32_MANTISSA - m))
}

/// Scales one value and encodes it: `x` is multiplied by `scale` in f32 (skipped for a scale
/// of exactly 1), with f32 subnormals flushed to signed zero before and after (see
/// [`super::scale`]).
pub fn encode_scaled(x: f32, scale: f32, cast: Fp8Cast, index: u32) -> u8 {
    encode(scaled(x, scale), cast, index)
}

/// `x * scale` as the scaled paths compute it: `x` for a scale of exactly 1, the canonical
/// (positive, quiet) NaN for a NaN scale, whatever `x` is (so no host's NaN-sign rules leak
/// in), else the product with f32 subnormals flushed before and after.
pub fn scaled(x: f32, scale: f32) -> f32 {
    if scale.to_bits() == 1f32.to_bits() {
        x
    } else if scale.is_nan() {
        f32::from_bits(0x7fc0_0000)
    } else {
        flush(flush(x) * scale)
    }
}

/// Decodes one code and multiplies it by `scale_inv` in f32 (skipped for exactly 1),
/// flushing an f32-subnormal result to signed zero.
pub fn decode_scaled(code: u8, format: Fp8Format, scale_inv: f32) -> f32 {
    scaled(decode(code, format), scale_inv)
}

/// Quantizes a row-major tensor to FP8 block by block, as the kernels do: each block of
/// `layout` gets its scales from its amax by `rule` (`None`: unscaled), then every element
/// is encoded with its block's scale. Returns the codes and the blocks' scales.
///
/// ```
/// use burn_amp_kernels::fp8::launch::BlockLayout;
/// use burn_amp_kernels::fp8::reference::{decode_scaled, quantize_blocks};
/// use burn_amp_kernels::fp8::scale::ScaleRule;
/// use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
///
/// let values = [0.5f32, -2.0, 7.0, 0.25];
/// let layout = BlockLayout::per_tensor(4); // one block
/// let cast = Fp8Cast::new(Fp8Format::E4M3);
/// let (codes, scales) = quantize_blocks(&values, layout, cast, Some(ScaleRule::Float { margin: 0 }));
/// assert_eq!(scales[0].scale, 448.0 / 7.0);
/// assert_eq!(decode_scaled(codes[2], cast.format, scales[0].scale_inv), 7.0);
/// ```
pub fn quantize_blocks(
    values: &[f32],
    layout: BlockLayout,
    cast: Fp8Cast,
    rule: Option<ScaleRule>,
) -> (Vec<u8>, Vec<BlockScale>) {
    let mut amax = vec![0u32; layout.num_blocks() as usize];
    for (i, v) in values.iter().enumerate() {
        let block = &mut amax[layout.block_of(i as u32) as usize];
        *block = (*block).max(v.to_bits() & 0x7fff_ffff);
    }
    let unscaled = BlockScale {
        scale: 1.0,
        scale_inv: 1.0,
        e8m0: 127,
    };
    let scales: Vec<BlockScale> = amax
        .iter()
        .map(|a| rule.map_or(unscaled, |r| block_scale(*a, cast.format, r)))
        .collect();
    let codes = values
        .iter()
        .enumerate()
        .map(|(i, &x)| {
            let scale = scales[layout.block_of(i as u32) as usize].scale;
            encode_scaled(x, scale, cast, i as u32)
        })
        .collect();
    (codes, scales)
}
