//! x86-64 microkernels: AVX2 + FMA and AVX-512F on f32 packing, AVX-512 BF16 on bf16-pair
//! packing. The accumulators live in registers for the whole panel (12 of 16 ymm, 24 of 32
//! zmm).

use core::arch::x86_64::*;

/// Fetches the `rows x cols` f32 tile of C at `c` (row stride `ldc`) into the cache: a
/// kernel that accumulates reads it after its k loop, and the adds then need not wait on
/// memory.
#[inline(always)]
fn prefetch_tile(c: *mut f32, ldc: usize, rows: usize, cols: usize) {
    for i in 0..rows {
        let row = c.wrapping_add(i * ldc);
        // SAFETY: a prefetch never faults, whatever the address.
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(row.cast());
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add(cols - 1).cast());
        }
    }
}

const MR2: usize = 6;
const NR2: usize = 16;

/// 6x16 f32 tile: per k, two 8-lane loads of B and six broadcasts of A, twelve FMAs.
///
/// # Safety
/// AVX2 and FMA, and [`Kernel::tile`](super::Kernel::tile)'s contract.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn avx2_6x16(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    if accumulate {
        prefetch_tile(c, ldc, MR2, NR2);
    }
    let mut acc = [[_mm256_setzero_ps(); 2]; MR2];
    let (mut a, mut b) = (a, b);
    for _ in 0..kc {
        // SAFETY: one k step of each packed panel.
        unsafe {
            let b0 = _mm256_loadu_ps(b);
            let b1 = _mm256_loadu_ps(b.add(8));
            for (i, row) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*a.add(i));
                row[0] = _mm256_fmadd_ps(av, b0, row[0]);
                row[1] = _mm256_fmadd_ps(av, b1, row[1]);
            }
            a = a.add(MR2);
            b = b.add(NR2);
        }
    }
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: row i of the tile holds NR2 f32.
        unsafe {
            let out = c.add(i * ldc);
            for (h, v) in row.iter().enumerate() {
                let p = out.add(8 * h);
                let v = if accumulate {
                    _mm256_add_ps(_mm256_loadu_ps(p), *v)
                } else {
                    *v
                };
                _mm256_storeu_ps(p, v);
            }
        }
    }
}

const MR3: usize = 12;
const NR3: usize = 32;

/// 12x32 f32 tile: per k, two 16-lane loads of B and twelve broadcasts of A, 24 FMAs (24
/// accumulators: the FMAs' latency hidden on two ports with loads to spare; an 8-row tile
/// ran about 10% slower on an Emerald Rapids core).
///
/// # Safety
/// AVX-512F, and [`Kernel::tile`](super::Kernel::tile)'s contract.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn avx512_12x32(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    if accumulate {
        prefetch_tile(c, ldc, MR3, NR3);
    }
    let mut acc = [[_mm512_setzero_ps(); 2]; MR3];
    let (mut a, mut b) = (a, b);
    for _ in 0..kc {
        // SAFETY: one k step of each packed panel.
        unsafe {
            let b0 = _mm512_loadu_ps(b);
            let b1 = _mm512_loadu_ps(b.add(16));
            for (i, row) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*a.add(i));
                row[0] = _mm512_fmadd_ps(av, b0, row[0]);
                row[1] = _mm512_fmadd_ps(av, b1, row[1]);
            }
            a = a.add(MR3);
            b = b.add(NR3);
        }
    }
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: row i of the tile holds NR3 f32.
        unsafe {
            let out = c.add(i * ldc);
            for (h, v) in row.iter().enumerate() {
                let p = out.add(16 * h);
                let v = if accumulate {
                    _mm512_add_ps(_mm512_loadu_ps(p), *v)
                } else {
                    *v
                };
                _mm512_storeu_ps(p, v);
            }
        }
    }
}

const MR5: usize = 12;
const NR5: usize = 32;

/// 12x32 tile on bf16 pairs: per pair of k, two 16-lane loads of B (32 columns) and twelve
/// broadcasts of an A pair, 24 `vdpbf16ps` (two products per lane each).
///
/// # Safety
/// AVX-512F and AVX-512 BF16, and [`Kernel::tile`](super::Kernel::tile)'s contract
/// (`steps` pairs).
#[target_feature(enable = "avx512f,avx512bf16")]
pub(super) unsafe fn avx512_bf16_12x32(
    steps: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    if accumulate {
        prefetch_tile(c, ldc, MR5, NR5);
    }
    let mut acc = [[_mm512_setzero_ps(); 2]; MR5];
    let (mut a, mut b) = (a, b);
    for _ in 0..steps {
        // SAFETY: one pair step of each packed panel; __m512i and __m512bh are both 64
        // bytes of plain data.
        unsafe {
            let b0: __m512bh = core::mem::transmute(_mm512_loadu_si512(b.cast()));
            let b1: __m512bh = core::mem::transmute(_mm512_loadu_si512(b.add(16).cast()));
            for (i, row) in acc.iter_mut().enumerate() {
                let av: __m512bh = core::mem::transmute(_mm512_set1_epi32(*a.add(i) as i32));
                row[0] = _mm512_dpbf16_ps(row[0], av, b0);
                row[1] = _mm512_dpbf16_ps(row[1], av, b1);
            }
            a = a.add(MR5);
            b = b.add(NR5);
        }
    }
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: row i of the tile holds NR5 f32.
        unsafe {
            let out = c.add(i * ldc);
            for (h, v) in row.iter().enumerate() {
                let p = out.add(16 * h);
                let v = if accumulate {
                    _mm512_add_ps(_mm512_loadu_ps(p), *v)
                } else {
                    *v
                };
                _mm512_storeu_ps(p, v);
            }
        }
    }
}
