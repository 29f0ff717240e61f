//! AVX2 versions, 8 values a loop, and an AVX-512 AdamW, 16 values a loop: the same
//! operations in the same order (no FMA), so the same bits as the reference.

use core::arch::x86_64::*;

use super::{Scalars, portable};
use crate::cpu::cast::x86::{load_bf16, load_f16};
use crate::cpu::cast::{CpuFloat, Format};

/// # Safety
/// AVX2 + F16C; equal lengths.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn adamw<G: CpuFloat>(
    p: &mut [f32],
    g: &[G],
    m: &mut [f32],
    v: &mut [f32],
    s: &Scalars,
) {
    let n = p.len() - p.len() % 8;
    let splat = _mm256_set1_ps;
    let (b1, omb1, b2, omb2) = (
        splat(s.b1),
        splat(s.one_minus_b1),
        splat(s.b2),
        splat(s.one_minus_b2),
    );
    let (eps, decay, lr, c1, c2, scale) = (
        splat(s.eps),
        splat(s.decay),
        splat(s.lr),
        splat(s.c1),
        splat(s.c2),
        splat(s.scale),
    );
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= len of every slice.
        unsafe {
            let gp = g.as_ptr().add(i);
            let mut gv = match G::FORMAT {
                Format::F32 => _mm256_loadu_ps(gp.cast()),
                Format::Bf16 => load_bf16(gp.cast()),
                Format::F16 => load_f16(gp.cast()),
            };
            if s.scaled {
                gv = _mm256_div_ps(gv, scale);
            }
            let (pp, mp, vp) = (
                p.as_mut_ptr().add(i),
                m.as_mut_ptr().add(i),
                v.as_mut_ptr().add(i),
            );
            let mv = _mm256_add_ps(
                _mm256_mul_ps(_mm256_loadu_ps(mp), b1),
                _mm256_mul_ps(gv, omb1),
            );
            let g2 = _mm256_mul_ps(gv, gv);
            let vv = _mm256_add_ps(
                _mm256_mul_ps(_mm256_loadu_ps(vp), b2),
                _mm256_mul_ps(g2, omb2),
            );
            let den = _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(vv, c2)), eps);
            let delta = _mm256_div_ps(_mm256_div_ps(mv, c1), den);
            let pv = _mm256_sub_ps(
                _mm256_mul_ps(_mm256_loadu_ps(pp), decay),
                _mm256_mul_ps(delta, lr),
            );
            _mm256_storeu_ps(mp, mv);
            _mm256_storeu_ps(vp, vv);
            _mm256_storeu_ps(pp, pv);
        }
    }
    portable::adamw(&mut p[n..], &g[n..], &mut m[n..], &mut v[n..], s);
}

/// 16 gradient values widened to f32.
///
/// # Safety
/// AVX-512F; `g` holds 16 values from `i`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load16<G: CpuFloat>(g: *const G) -> __m512 {
    // SAFETY: 16 values at `g` (the caller's contract).
    unsafe {
        match G::FORMAT {
            Format::F32 => _mm512_loadu_ps(g.cast()),
            Format::Bf16 => {
                let halves = _mm256_loadu_si256(g.cast());
                _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(halves)))
            }
            Format::F16 => _mm512_cvtph_ps(_mm256_loadu_si256(g.cast())),
        }
    }
}

/// [`adamw`] on AVX-512, 16 values a loop (the divisions and the square root, which bound
/// the AVX2 loop, run twice as wide on a CPU with full-width AVX-512 units).
///
/// # Safety
/// AVX-512F; equal lengths.
#[target_feature(enable = "avx512f,avx2,f16c")]
pub(super) unsafe fn adamw_avx512<G: CpuFloat>(
    p: &mut [f32],
    g: &[G],
    m: &mut [f32],
    v: &mut [f32],
    s: &Scalars,
) {
    let n = p.len() - p.len() % 16;
    let splat = _mm512_set1_ps;
    let (b1, omb1, b2, omb2) = (
        splat(s.b1),
        splat(s.one_minus_b1),
        splat(s.b2),
        splat(s.one_minus_b2),
    );
    let (eps, decay, lr, c1, c2, scale) = (
        splat(s.eps),
        splat(s.decay),
        splat(s.lr),
        splat(s.c1),
        splat(s.c2),
        splat(s.scale),
    );
    for i in (0..n).step_by(16) {
        // SAFETY: i + 16 <= n <= len of every slice.
        unsafe {
            let mut gv = load16(g.as_ptr().add(i));
            if s.scaled {
                gv = _mm512_div_ps(gv, scale);
            }
            let (pp, mp, vp) = (
                p.as_mut_ptr().add(i),
                m.as_mut_ptr().add(i),
                v.as_mut_ptr().add(i),
            );
            let mv = _mm512_add_ps(
                _mm512_mul_ps(_mm512_loadu_ps(mp), b1),
                _mm512_mul_ps(gv, omb1),
            );
            let g2 = _mm512_mul_ps(gv, gv);
            let vv = _mm512_add_ps(
                _mm512_mul_ps(_mm512_loadu_ps(vp), b2),
                _mm512_mul_ps(g2, omb2),
            );
            let den = _mm512_add_ps(_mm512_sqrt_ps(_mm512_div_ps(vv, c2)), eps);
            let delta = _mm512_div_ps(_mm512_div_ps(mv, c1), den);
            let pv = _mm512_sub_ps(
                _mm512_mul_ps(_mm512_loadu_ps(pp), decay),
                _mm512_mul_ps(delta, lr),
            );
            _mm512_storeu_ps(mp, mv);
            _mm512_storeu_ps(vp, vv);
            _mm512_storeu_ps(pp, pv);
        }
    }
    // SAFETY: the rest (under 16 values) on the AVX2 loop; this CPU has AVX2 and F16C.
    unsafe { adamw(&mut p[n..], &g[n..], &mut m[n..], &mut v[n..], s) }
}

/// # Safety
/// AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn count_nonfinite_f32(values: &[f32]) -> usize {
    let n = values.len() - values.len() % 8;
    let exp = _mm256_set1_epi32(0x7F80_0000);
    let mut bad = 0usize;
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n.
        let x = unsafe { _mm256_loadu_si256(values.as_ptr().add(i).cast()) };
        let all_ones = _mm256_cmpeq_epi32(_mm256_and_si256(x, exp), exp);
        bad += _mm256_movemask_ps(_mm256_castsi256_ps(all_ones)).count_ones() as usize;
    }
    bad + values[n..].iter().filter(|x| !x.is_finite()).count()
}

/// # Safety
/// AVX2.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn unscale(values: &mut [f32], scale: f32) {
    let n = values.len() - values.len() % 8;
    let s = _mm256_set1_ps(scale);
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n.
        unsafe {
            let ptr = values.as_mut_ptr().add(i);
            _mm256_storeu_ps(ptr, _mm256_div_ps(_mm256_loadu_ps(ptr), s));
        }
    }
    portable::unscale(&mut values[n..], scale);
}
