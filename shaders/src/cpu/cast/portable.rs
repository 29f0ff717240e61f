//! The reference: `half`'s conversions, one value at a time.

use half::{bf16, f16};

pub(super) fn f32_to_bf16(src: &[u32], dst: &mut [u16]) {
    for (s, d) in src.iter().zip(dst) {
        *d = bf16::from_f32(f32::from_bits(*s)).to_bits();
    }
}

pub(super) fn bf16_to_f32(src: &[u16], dst: &mut [u32]) {
    for (s, d) in src.iter().zip(dst) {
        *d = bf16::from_bits(*s).to_f32().to_bits();
    }
}

pub(super) fn f32_to_f16(src: &[u32], dst: &mut [u16]) {
    for (s, d) in src.iter().zip(dst) {
        *d = f16::from_f32(f32::from_bits(*s)).to_bits();
    }
}

pub(super) fn f16_to_f32(src: &[u16], dst: &mut [u32]) {
    for (s, d) in src.iter().zip(dst) {
        *d = f16::from_bits(*s).to_f32().to_bits();
    }
}
