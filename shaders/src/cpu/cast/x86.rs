//! x86-64 fast paths (AVX2 and F16C), 8 lanes at a time, and an AVX-512 rounding to bf16,
//! 16 at a time. The lane helpers are shared with the GEMM's packing, which rounds operands
//! with them.
//!
//! Each function is `unsafe` only for its target features: the caller holds an
//! [`Isa`](crate::cpu::Isa) proving them. Tails shorter than a vector take the portable path.

use core::arch::x86_64::*;

use super::portable;

/// bf16 bits (in the low half of each 32-bit lane) of 8 f32 lanes, rounded to nearest even
/// as `half::bf16::from_f32` does: a NaN keeps its top bits and gets the quiet bit.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn bf16_bits(x: __m256i) -> __m256i {
    let abs = _mm256_and_si256(x, _mm256_set1_epi32(0x7FFF_FFFF));
    let nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F80_0000));
    let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(x), _mm256_set1_epi32(1));
    let bias = _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb);
    let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(x, bias));
    let quiet = _mm256_or_si256(_mm256_srli_epi32::<16>(x), _mm256_set1_epi32(0x40));
    _mm256_blendv_epi8(rounded, quiet, nan)
}

/// 8 f32 lanes from bf16 bits in the low half of each 32-bit lane, as
/// `half::bf16::to_f32` widens them (a NaN gets the quiet bit).
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) fn bf16_lanes_to_f32(bits: __m256i) -> __m256 {
    let abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFF));
    let nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F80));
    let quiet = _mm256_and_si256(nan, _mm256_set1_epi32(0x40));
    _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_or_si256(bits, quiet)))
}

/// 8 f32 lanes rounded to f16 (F16C, to nearest even) and widened again.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) fn round_to_f16(x: __m256) -> __m256 {
    _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x))
}

/// 8 bf16 values from memory, widened to f32.
///
/// # Safety
/// `src` must be valid for reading 8 `u16`.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn load_bf16(src: *const u16) -> __m256 {
    // SAFETY: 16 readable bytes, by the caller's contract.
    let half = unsafe { _mm_loadu_si128(src.cast()) };
    bf16_lanes_to_f32(_mm256_cvtepu16_epi32(half))
}

/// 8 f16 values from memory, widened to f32.
///
/// # Safety
/// `src` must be valid for reading 8 `u16`.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn load_f16(src: *const u16) -> __m256 {
    // SAFETY: 16 readable bytes, by the caller's contract.
    _mm256_cvtph_ps(unsafe { _mm_loadu_si128(src.cast()) })
}

/// # Safety
/// AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn f32_to_bf16(src: &[u32], dst: &mut [u16]) {
    let n = src.len() - src.len() % 16;
    for i in (0..n).step_by(16) {
        // SAFETY: i + 16 <= n <= len on both slices.
        unsafe {
            let a = bf16_bits(_mm256_loadu_si256(src.as_ptr().add(i).cast()));
            let b = bf16_bits(_mm256_loadu_si256(src.as_ptr().add(i + 8).cast()));
            // packus interleaves 128-bit lanes: a0-3 b0-3 a4-7 b4-7; put them back in order.
            let packed = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(a, b));
            _mm256_storeu_si256(dst.as_mut_ptr().add(i).cast(), packed);
        }
    }
    portable::f32_to_bf16(&src[n..], &mut dst[n..]);
}

/// [`f32_to_bf16`] of `rows` rows of `cols` values, `src_ld` and `dst_ld` apart.
///
/// # Safety
/// AVX2; `src + r * src_ld` readable and `dst + r * dst_ld` writable for `cols` values
/// for every `r < rows`.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn f32_to_bf16_rows(
    src: *const u32,
    src_ld: usize,
    dst: *mut u16,
    dst_ld: usize,
    rows: usize,
    cols: usize,
) {
    for r in 0..rows {
        // SAFETY: row r of each, by the caller's contract.
        unsafe {
            let s = core::slice::from_raw_parts(src.add(r * src_ld), cols);
            let d = core::slice::from_raw_parts_mut(dst.add(r * dst_ld), cols);
            f32_to_bf16(s, d);
        }
    }
}

/// [`f32_to_bf16`] 32 lanes at a time by `vcvtne2ps2bf16`, which rounds to nearest even
/// and quiets a NaN exactly as `half` does but flushes subnormal inputs to zero: a vector
/// holding one takes the integer rounding instead. The GEMM rounds every 32 x 32 tile of a
/// bf16 output with it, where the integer rounding of a tile took a third as long as the
/// tile's 256 k of AMX products.
///
/// # Safety
/// AVX-512F and AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(super) unsafe fn f32_to_bf16_avx512(src: &[u32], dst: &mut [u16]) {
    let n = src.len() - src.len() % 32;
    for i in (0..n).step_by(32) {
        // SAFETY: i + 32 <= n <= len on both slices.
        unsafe {
            let lo = _mm512_loadu_si512(src.as_ptr().add(i).cast());
            let hi = _mm512_loadu_si512(src.as_ptr().add(i + 16).cast());
            let out = dst.as_mut_ptr().add(i);
            if subnormal_lanes(lo) | subnormal_lanes(hi) == 0 {
                let bits = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(hi), _mm512_castsi512_ps(lo));
                _mm512_storeu_si512(out.cast(), core::mem::transmute::<__m512bh, __m512i>(bits));
            } else {
                _mm256_storeu_si256(out.cast(), bf16_bits_avx512(lo));
                _mm256_storeu_si256(out.add(16).cast(), bf16_bits_avx512(hi));
            }
        }
    }
    // SAFETY: AVX-512F implies AVX2.
    unsafe { f32_to_bf16(&src[n..], &mut dst[n..]) }
}

/// The lanes of `x` that hold a subnormal f32 (exponent 0, mantissa not 0).
#[inline]
#[target_feature(enable = "avx512f")]
fn subnormal_lanes(x: __m512i) -> __mmask16 {
    let abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7FFF_FFFF));
    // abs - 1 < 0x007F_FFFF (unsigned) exactly when 0 < abs <= 0x007F_FFFF.
    _mm512_cmplt_epu32_mask(
        _mm512_sub_epi32(abs, _mm512_set1_epi32(1)),
        _mm512_set1_epi32(0x007F_FFFF),
    )
}

/// The bf16 bits of 16 f32 lanes by integer rounding ([`bf16_lanes_avx512`] narrowed).
#[inline]
#[target_feature(enable = "avx512f")]
fn bf16_bits_avx512(x: __m512i) -> __m256i {
    _mm512_cvtepi32_epi16(bf16_lanes_avx512(x))
}

/// The bf16 bits of 16 f32 lanes in the low half of each 32-bit lane (the high half zero):
/// [`bf16_bits`] 16 lanes wide, the NaN lanes picked by a mask register.
#[inline]
#[target_feature(enable = "avx512f")]
pub(crate) fn bf16_lanes_avx512(x: __m512i) -> __m512i {
    let abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7FFF_FFFF));
    let nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7F80_0000));
    let high = _mm512_srli_epi32::<16>(x);
    let lsb = _mm512_and_si512(high, _mm512_set1_epi32(1));
    let bias = _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb);
    let rounded = _mm512_srli_epi32::<16>(_mm512_add_epi32(x, bias));
    let quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
    _mm512_mask_blend_epi32(nan, rounded, quiet)
}

/// # Safety
/// AVX2 and F16C (the widening is shared with f16's).
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn bf16_to_f32(src: &[u16], dst: &mut [u32], stream: bool) {
    // SAFETY: forwarded contract.
    unsafe { widen::<false>(src, dst, stream) }
}

/// `src` (bf16, or f16 where `F16`) widened into `dst`, 8 values a loop. With `stream`, the
/// aligned body is written with non-temporal stores: an output larger than the caches is
/// not read into them before it is written (a plain store reads each line first, which
/// costs a widening cast, whose output is twice its input, a third of its traffic).
///
/// # Safety
/// AVX2 and F16C; equal lengths.
#[target_feature(enable = "avx2,f16c")]
unsafe fn widen<const F16: bool>(src: &[u16], dst: &mut [u32], stream: bool) {
    let tail = |s: &[u16], d: &mut [u32]| {
        if F16 {
            portable::f16_to_f32(s, d)
        } else {
            portable::bf16_to_f32(s, d)
        }
    };
    let len = dst.len();
    let mut i = 0;
    if stream {
        let head = dst.as_ptr().align_offset(32).min(len);
        tail(&src[..head], &mut dst[..head]);
        i = head;
        let body = i + (len - i) / 8 * 8;
        while i < body {
            // SAFETY: i + 8 <= body <= len on both slices; dst + i is 32-byte aligned.
            unsafe {
                let p = src.as_ptr().add(i);
                let x = if F16 { load_f16(p) } else { load_bf16(p) };
                _mm256_stream_ps(dst.as_mut_ptr().add(i).cast(), x);
            }
            i += 8;
        }
        // The streamed stores are ordered before whatever the caller does next.
        _mm_sfence();
    }
    let body = i + (len - i) / 8 * 8;
    while i < body {
        // SAFETY: i + 8 <= body <= len on both slices.
        unsafe {
            let p = src.as_ptr().add(i);
            let x = if F16 { load_f16(p) } else { load_bf16(p) };
            _mm256_storeu_ps(dst.as_mut_ptr().add(i).cast(), x);
        }
        i += 8;
    }
    tail(&src[i..], &mut dst[i..]);
}

/// # Safety
/// AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn f32_to_f16(src: &[u32], dst: &mut [u16]) {
    let n = src.len() - src.len() % 8;
    for i in (0..n).step_by(8) {
        // SAFETY: i + 8 <= n <= len on both slices.
        unsafe {
            let x = _mm256_loadu_ps(src.as_ptr().add(i).cast());
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
            _mm_storeu_si128(dst.as_mut_ptr().add(i).cast(), h);
        }
    }
    portable::f32_to_f16(&src[n..], &mut dst[n..]);
}

/// # Safety
/// AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn f16_to_f32(src: &[u16], dst: &mut [u32], stream: bool) {
    // SAFETY: forwarded contract.
    unsafe { widen::<true>(src, dst, stream) }
}
