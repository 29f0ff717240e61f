//! The SHP and UHP kernels in CubeCL: the steps of [`super::reference`] as integer bit work
//! (no runtime has these types), so every runtime gives the reference's codes.
//!
//! Codes are stored two to a `u32` (value `2k + j` in bits `16j..16j+16` of word `k`), which
//! is byte for byte a little-endian `u16` array.

// `#[cube]` expands each function into an undocumented helper module.
#![allow(missing_docs)]

use cubecl::prelude::*;

use crate::fp8::kernel::shift_round;

/// `value >> shift`, rounded to nearest even: the FP8 kernels' rounding.
#[cube]
pub fn round_shift(value: u32, shift: u32) -> u32 {
    shift_round(value, shift, 0u32, 0u32, false)
}

/// One f32 (as bits) to a SHP (`uhp` false, exponent bias `bias`) or UHP code
/// ([`super::reference::encode`]).
#[cube]
pub fn encode(bits: u32, bias: i32, #[comptime] uhp: bool) -> u32 {
    let max_field = comptime!(if uhp { 62i32 } else { 31i32 }).runtime();
    let max_code = (u32::cast_from(max_field) << 10) | 0x3ffu32;
    let negative = (bits >> 31) == 1;
    let abs = bits & 0x7fff_ffffu32;
    let mut code = 0u32;
    let mut overflow = false;
    if abs != 0 && abs < 0x7f80_0000u32 {
        let biased = i32::cast_from(abs >> 23);
        let mut exponent = biased - 127;
        let mut mantissa = (abs & 0x7f_ffffu32) | 0x80_0000u32;
        if biased == 0 {
            exponent = -126;
            mantissa = abs & 0x7f_ffffu32;
        }
        let field = exponent + bias;
        if field > max_field {
            overflow = true;
        } else if field >= 1 {
            let full = (u32::cast_from(field) << 23) | (mantissa & 0x7f_ffffu32);
            code = round_shift(full, 13);
        } else if comptime!(!uhp) {
            code = round_shift(mantissa, 13 + u32::cast_from(1 - field));
        }
        if code > max_code {
            overflow = true;
        }
    }
    let mut out = code;
    if comptime!(uhp) {
        if abs > 0x7f80_0000u32 {
            out = 0xfe00u32;
        } else if negative || abs == 0 {
            out = 0u32;
        } else if abs == 0x7f80_0000u32 || overflow {
            out = 0xfc00u32;
        }
    } else {
        if abs >= 0x7f80_0000u32 || overflow {
            out = max_code;
        }
        if negative && abs <= 0x7f80_0000u32 {
            out |= 0x8000u32;
        }
    }
    out
}

/// One SHP or UHP code to f32 bits ([`super::reference::decode`]).
#[cube]
pub fn decode(code: u32, bias: i32, #[comptime] uhp: bool) -> u32 {
    let mut sign = 0u32;
    let mut magnitude = code;
    if comptime!(!uhp) {
        sign = (code & 0x8000u32) << 16;
        magnitude = code & 0x7fffu32;
    }
    let field = i32::cast_from(magnitude >> 10);
    let mut mantissa = magnitude & 0x3ffu32;
    let mut out = sign;
    if comptime!(uhp) && field == 63 {
        out = 0x7f80_0000u32;
        if mantissa != 0 {
            out = 0x7fc0_0000u32;
        }
    } else if field != 0 {
        out = sign | (u32::cast_from(field - bias + 127) << 23) | (mantissa << 13);
    } else if comptime!(!uhp) && mantissa != 0 {
        // Subnormal: normalise (the value is a normal f32: its exponent is at least -72).
        let mut exponent = 1 - bias;
        #[unroll]
        for _ in 0..10u32 {
            if (mantissa & 0x400u32) == 0 {
                mantissa <<= 1;
                exponent -= 1;
            }
        }
        mantissa &= 0x3ffu32;
        out = sign | (u32::cast_from(exponent + 127) << 23) | (mantissa << 13);
    }
    out
}

/// Unit `w` encodes values `2w` and `2w + 1` of `input` into word `w` of `output`.
#[cube(launch_unchecked)]
pub fn encode_kernel(
    input: &Array<f32>,
    output: &mut Array<u32>,
    len: u32,
    bias: i32,
    #[comptime] uhp: bool,
) {
    let w = ABSOLUTE_POS;
    if w >= output.len() {
        terminate!();
    }
    let i = u32::cast_from(w) * 2;
    let mut word = encode(u32::reinterpret(input[i as usize]), bias, uhp);
    if i + 1 < len {
        word |= encode(u32::reinterpret(input[(i + 1) as usize]), bias, uhp) << 16;
    }
    output[w] = word;
}

/// Unit `w` decodes word `w` of `codes` into values `2w` and `2w + 1` of `output`.
#[cube(launch_unchecked)]
pub fn decode_kernel(
    codes: &Array<u32>,
    output: &mut Array<f32>,
    len: u32,
    bias: i32,
    #[comptime] uhp: bool,
) {
    let w = ABSOLUTE_POS;
    if w >= codes.len() {
        terminate!();
    }
    let word = codes[w];
    let i = u32::cast_from(w) * 2;
    output[i as usize] = f32::reinterpret(decode(word & 0xffffu32, bias, uhp));
    if i + 1 < len {
        output[(i + 1) as usize] = f32::reinterpret(decode(word >> 16, bias, uhp));
    }
}
