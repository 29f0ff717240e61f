//! The element loops, each one body that `multiversion!` compiles for every instruction set
//! (LLVM vectorises each copy, 16 lanes on AVX-512, 8 on AVX2): the same IEEE operations in
//! the same order in every copy, so every copy gives the portable copy's bits, which are
//! Burn's `AdamW`'s.

use super::Scalars;
use crate::cpu::Isa;
use crate::cpu::cast::{self, CpuFloat, Format};
use crate::cpu::multiversion::multiversion;

/// f16 gradient values widened to f32 at a time, on the stack.
const BLOCK: usize = 512;

/// One value's update; `g` is the gradient as f32, the loss scale already divided out.
#[inline(always)]
fn update(p: &mut f32, g: f32, m: &mut f32, v: &mut f32, s: &Scalars) {
    *m = *m * s.b1 + g * s.one_minus_b1;
    *v = *v * s.b2 + (g * g) * s.one_minus_b2;
    let delta = (*m / s.c1) / ((*v / s.c2).sqrt() + s.eps);
    *p = *p * s.decay - delta * s.lr;
}

/// The AdamW loop over gradients read by `widen`; one loop per case of the loss scale, so
/// that neither carries the test.
#[inline(always)]
fn adamw_body<G: Copy>(
    p: &mut [f32],
    g: &[G],
    m: &mut [f32],
    v: &mut [f32],
    s: &Scalars,
    widen: impl Fn(G) -> f32,
) {
    let n = p.len();
    let (g, m, v) = (&g[..n], &mut m[..n], &mut v[..n]);
    if s.scaled {
        for i in 0..n {
            update(&mut p[i], widen(g[i]) / s.scale, &mut m[i], &mut v[i], s);
        }
    } else {
        for i in 0..n {
            update(&mut p[i], widen(g[i]), &mut m[i], &mut v[i], s);
        }
    }
}

multiversion! {
    /// AdamW with f32 gradients.
    fn adamw_f32(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], s: &Scalars) {
        adamw_body(p, g, m, v, s, |g| g)
    }
}

multiversion! {
    /// AdamW with bf16 gradients (their bits), widened in the registers.
    fn adamw_bf16(p: &mut [f32], g: &[u16], m: &mut [f32], v: &mut [f32], s: &Scalars) {
        adamw_body(p, g, m, v, s, cast::bf16_bits_to_f32)
    }
}

/// One AdamW update of equal-length slices, in place. f16 gradients are widened a block at
/// a time on the stack (F16C's conversion), then take the f32 loop.
pub(super) fn adamw<G: CpuFloat>(
    isa: Isa,
    p: &mut [f32],
    g: &[G],
    m: &mut [f32],
    v: &mut [f32],
    s: &Scalars,
) {
    match G::FORMAT {
        Format::F32 => adamw_f32(isa, p, cast::bits::<G, f32>(g), m, v, s),
        Format::Bf16 => adamw_bf16(isa, p, cast::bits::<G, u16>(g), m, v, s),
        Format::F16 => {
            let mut buf = [0f32; BLOCK];
            let parts = p.chunks_mut(BLOCK).zip(m.chunks_mut(BLOCK));
            for ((p, m), (g, v)) in parts.zip(g.chunks(BLOCK).zip(v.chunks_mut(BLOCK))) {
                let buf = &mut buf[..g.len()];
                cast::convert_block(isa, g, buf);
                adamw_f32(isa, p, buf, m, v, s);
            }
        }
    }
}

multiversion! {
    /// How many of `bits` have every bit of `exponent` set: the infinities and NaNs of a
    /// format whose exponent field is `exponent` (32-bit values; at most `u32::MAX`).
    fn count_all_ones_32(bits: &[u32], exponent: u32) -> usize {
        count_all_ones(bits, exponent)
    }
}

multiversion! {
    /// [`count_all_ones_32`] of 16-bit values.
    fn count_all_ones_16(bits: &[u16], exponent: u16) -> usize {
        count_all_ones(bits, exponent)
    }
}

/// How many of `bits` have every bit of `exponent` set: both widths' body.
#[inline(always)]
fn count_all_ones<T: Copy + core::ops::BitAnd<Output = T> + PartialEq>(
    bits: &[T],
    exponent: T,
) -> usize {
    bits.iter()
        .map(|&b| u32::from(b & exponent == exponent))
        .sum::<u32>() as usize
}

/// How many of `values` are inf or NaN, on their bits (at most `u32::MAX` values).
pub(super) fn count_nonfinite<T: CpuFloat>(isa: Isa, values: &[T]) -> usize {
    match T::FORMAT {
        Format::F32 => count_all_ones_32(isa, cast::bits::<T, u32>(values), 0x7F80_0000),
        Format::Bf16 => count_all_ones_16(isa, cast::bits::<T, u16>(values), 0x7F80),
        Format::F16 => count_all_ones_16(isa, cast::bits::<T, u16>(values), 0x7C00),
    }
}

multiversion! {
    /// `values / scale`, in place.
    pub(super) fn unscale(values: &mut [f32], scale: f32) {
        values.iter_mut().for_each(|x| *x /= scale);
    }
}
