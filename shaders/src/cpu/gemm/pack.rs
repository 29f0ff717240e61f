//! Packing: panels of A and B copied into the layout the kernel reads, each value rounded
//! to the compute format on the way (the cast of an f32 operand happens here, once per
//! value and panel, instead of in a pass of its own). Partial panels are padded with zeros.
//!
//! On AVX2 the two layouts B comes in most (rows contiguous, or columns contiguous: a
//! transposed weight) are read 8 lanes at a time, the transposed one through 8x8 register
//! transposes; on AVX-512F, B's panels of bf16 pairs 16 lanes at a time, the transposed
//! one through 16x16 transposes of the pair words. A has its own paths (AVX2 panels, AMX
//! tile rows from either layout); every other case goes value by value.

use super::MatRef;
use super::kernel::{Kernel, Packing};
use crate::cpu::cast::{CpuFloat, Format};

/// Whether values of `S` change when rounded to `format`.
fn rounds<S: CpuFloat>(format: Format) -> bool {
    match (S::FORMAT, format) {
        (_, Format::F32) => false,
        (s, f) => s != f,
    }
}

/// Element `(i, j)` of `m`, rounded to `format`.
#[inline(always)]
fn value<S: CpuFloat>(m: &MatRef<'_, S>, i: usize, j: usize, format: Format) -> f32 {
    let x = m.get(i, j);
    if rounds::<S>(format) {
        format.round(x)
    } else {
        x
    }
}

/// The bf16 bits of a value already rounded to bf16.
#[inline(always)]
fn bf16_bits(x: f32) -> u32 {
    u32::from(half::bf16::from_f32(x).to_bits())
}

/// Words of slack the packing buffers keep past their last panel: the AVX2 packing of A
/// writes whole vectors that may run past a panel's end (the next panel, written after,
/// overwrites them).
pub(super) const SLACK: usize = 16;

/// Packs rows `i0..i0 + mc`, k `k0..k0 + kc` of A into `kernel`'s A panels.
pub(super) fn pack_a<S: CpuFloat>(
    kernel: Kernel,
    a: &MatRef<'_, S>,
    (i0, mc): (usize, usize),
    (k0, kc): (usize, usize),
    out: &mut [u32],
) {
    let (mr, steps) = (kernel.mr(), kernel.k_steps(kc));
    let panels = mc.div_ceil(mr);
    debug_assert!(out.len() >= panels * steps * mr + SLACK);
    #[cfg(target_arch = "x86_64")]
    if kernel.amx_a() {
        for p in 0..panels {
            let rows = mr.min(mc - p * mr);
            let panel = &mut out[p * steps * mr..(p + 1) * steps * mr];
            let i = i0 + p * mr;
            if a.col_stride() == 1 {
                pack_amx_a_rows(kernel, a, (i, rows), (k0, kc), panel);
            } else if a.row_stride() == 1 {
                pack_amx_a_cols(kernel, a, (i, rows), (k0, kc), panel);
            } else {
                let at = |ii: usize, k: usize| value(a, i + ii, k0 + k, kernel.format());
                pack_amx_a(at, rows, kc, panel);
            }
        }
        return;
    }
    // A with a unit stride along its columns (a transposed view: the weight gradient's
    // `x^T`): the whole panels k by k, each k's rows read in one stretch.
    #[allow(unused_mut)]
    let mut first = 0;
    #[cfg(target_arch = "x86_64")]
    if kernel.avx2_packing() && kc > 0 {
        let whole = mc / mr;
        // SAFETY: the kernel runs on AVX2; the whole panels' rows and k lie inside the
        // checked view, and `out` holds every panel plus SLACK words.
        if unsafe { x86::pack_a_panels_by_k(kernel, a, (i0, whole), (k0, kc), out) } {
            first = whole;
        }
    }
    for p in first..panels {
        let rows = mr.min(mc - p * mr);
        #[cfg(target_arch = "x86_64")]
        if kernel.avx2_packing() && kc > 0 {
            // SAFETY: the kernel runs on AVX2; rows and k lie inside the checked view, and
            // `out` holds every panel plus SLACK words.
            let done =
                unsafe { x86::pack_a_panel(kernel, a, (i0 + p * mr, rows), (k0, kc), out, p) };
            if done {
                continue;
            }
        }
        let panel = &mut out[p * steps * mr..(p + 1) * steps * mr];
        let row = |ii: usize| i0 + p * mr + ii;
        pack_panel_scalar(
            kernel,
            |ii, k| value(a, row(ii), k0 + k, kernel.format()),
            rows,
            kc,
            panel,
        );
    }
}

/// Packs k `k0..k0 + kc`, columns `j0..j0 + nc` of B into `kernel`'s B panels.
pub(super) fn pack_b<S: CpuFloat>(
    kernel: Kernel,
    b: &MatRef<'_, S>,
    (k0, kc): (usize, usize),
    (j0, nc): (usize, usize),
    out: &mut [u32],
) {
    let (nr, steps) = (kernel.nr(), kernel.k_steps(kc));
    let panels = nc.div_ceil(nr);
    let mut first_scalar = 0;
    #[cfg(target_arch = "x86_64")]
    if kernel.avx2_packing() && kc > 0 {
        let whole = nc / nr;
        let pairs_512 = kernel.packing() == Packing::Bf16Pairs && kernel.isa().has_avx512_bf16();
        // SAFETY: the kernel runs on AVX2, and on AVX-512F where `pairs_512` (its Isa says
        // so), packing pairs with `nr` 32; the whole panels lie inside the checked view and
        // in `out`.
        let packed = unsafe {
            (pairs_512 && x86::pack_b_pairs_avx512(kernel, b, (k0, kc), j0, whole, out))
                || x86::pack_b_panels(kernel, b, (k0, kc), j0, whole, out)
        };
        if packed {
            first_scalar = whole;
        }
    }
    for p in first_scalar..panels {
        let cols = nr.min(nc - p * nr);
        let j = j0 + p * nr;
        let panel = &mut out[p * steps * nr..(p + 1) * steps * nr];
        pack_panel_scalar(
            kernel,
            |jj, k| value(b, k0 + k, j + jj, kernel.format()),
            cols,
            kc,
            panel,
        );
    }
    // The AMX kernel reads k in whole blocks of 32: the pairs past k are zeros.
    if kernel.amx_a() {
        let written = kc.div_ceil(2) * nr;
        for p in 0..panels {
            out[p * steps * nr + written..(p + 1) * steps * nr].fill(0);
        }
    }
}

/// An A panel in the AMX layout from rows contiguous along k: a bf16 row's blocks of 32
/// copied as they are; any other row converted to bf16 in one vectorised cast (`half`'s
/// rounding, as `value` rounds) of up to [`ROW_CHUNK`] values, then laid out 32 values
/// (one 64-byte tile row) at a time; zeros past `rows` rows and past `kc`. One cast a row, not one per block of 32: on the small products of
/// a transformer's step (k of 128), the casts' dispatch took longer than the copies.
#[cfg(target_arch = "x86_64")]
fn pack_amx_a_rows<S: CpuFloat>(
    kernel: Kernel,
    a: &MatRef<'_, S>,
    (i0, rows): (usize, usize),
    (k0, kc): (usize, usize),
    panel: &mut [u32],
) {
    use super::kernel::amx::{MR, a_index};
    let blocks = panel.len() / MR / 16;
    if S::FORMAT == Format::Bf16 {
        // Already bf16: each block of 32 copied straight into its tile row (a staging copy
        // through the cast was 7% of a linear stack's step).
        let words: &mut [u16] = bytemuck::cast_slice_mut(panel);
        for i in 0..MR {
            let row = if i < rows {
                let start = a.index(i0 + i, k0);
                crate::cpu::cast::bits::<S, u16>(&a.data[start..start + kc])
            } else {
                &[]
            };
            for blk in 0..blocks {
                let at = 2 * a_index(i, blk * 16);
                let dst: &mut [u16; 32] = (&mut words[at..at + 32]).try_into().expect("a tile row");
                match row.get(blk * 32..blk * 32 + 32) {
                    Some(src) => *dst = src.try_into().expect("32 values"),
                    None => {
                        let src = row.get(blk * 32..).unwrap_or(&[]);
                        dst[..src.len()].copy_from_slice(src);
                        dst[src.len()..].fill(0);
                    }
                }
            }
        }
        return;
    }
    let values: &mut [half::bf16] = bytemuck::cast_slice_mut(panel);
    let mut row = [half::bf16::ZERO; ROW_CHUNK];
    for i in 0..MR {
        for chunk in (0..blocks * 32).step_by(ROW_CHUNK) {
            let width = ROW_CHUNK.min(blocks * 32 - chunk);
            let len = if i < rows {
                kc.saturating_sub(chunk).min(width)
            } else {
                0
            };
            if len > 0 {
                let start = a.index(i0 + i, k0 + chunk);
                crate::cpu::cast::convert(
                    kernel.isa(),
                    &a.data[start..start + len],
                    &mut row[..len],
                )
                .expect("equal lengths");
            }
            row[len..width].fill(half::bf16::ZERO);
            for (blk, src) in row[..width].chunks_exact(32).enumerate() {
                // The row's block: 16 words, 32 bf16 (the low half of a word: the even k).
                let at = 2 * a_index(i, (chunk / 32 + blk) * 16);
                values[at..at + 32].copy_from_slice(src);
            }
        }
    }
}

/// Values of a row [`pack_amx_a_rows`] converts at once (a multiple of 32; 2 KiB of bf16
/// on the stack).
#[cfg(target_arch = "x86_64")]
const ROW_CHUNK: usize = 1024;

/// An A panel in the AMX layout from columns contiguous along the rows (a transposed
/// operand: a weight gradient's `x^T`), a block of 32 k at a time: each k's values of the
/// panel's rows read in place when they are 32 bf16 values, else staged as bf16 (rounded in
/// one vectorised cast), then the block transposed into its 32 tile rows of 16 pairs
/// ([`x86::pair_columns`]). Staging a k's 32 values through a cast call, then writing each
/// row's word alone (a store every 64 bytes), took a sixth of a linear stack's step; with
/// the words paired one by one, packing x^T still took 12% of the samples of a 512 x 1024 x
/// 1024 bf16 weight gradient on a 2-core Xeon with AMX, 7% now.
#[cfg(target_arch = "x86_64")]
fn pack_amx_a_cols<S: CpuFloat>(
    kernel: Kernel,
    a: &MatRef<'_, S>,
    (i0, rows): (usize, usize),
    (k0, kc): (usize, usize),
    panel: &mut [u32],
) {
    use super::kernel::amx::{MR, a_index};
    const BLOCK_K: usize = 32;
    let blocks = panel.len() / MR / (BLOCK_K / 2);
    // A whole bf16 column of the panel's rows is read where it lies; any other (another
    // dtype, past `rows` or `kc`) is staged in `block[k]` as bf16 bits, zeros past `rows`
    // and `kc`. (Staging every column, a copy of `rows` values called `memmove` once per k,
    // took as long as the pairing.)
    let in_place = |k: usize| S::FORMAT == crate::cpu::cast::Format::Bf16 && rows == MR && k < kc;
    let mut block = [[0u16; MR]; BLOCK_K];
    for blk in 0..blocks {
        for (kk, column) in block.iter_mut().enumerate() {
            let k = blk * BLOCK_K + kk;
            if in_place(k) {
                continue;
            }
            if k >= kc || rows == 0 {
                column.fill(0);
                continue;
            }
            let start = a.index(i0, k0 + k);
            let values = &a.data[start..start + rows];
            if S::FORMAT == crate::cpu::cast::Format::Bf16 {
                column[..rows].copy_from_slice(crate::cpu::cast::bits::<S, u16>(values));
            } else {
                let out: &mut [half::bf16] = bytemuck::cast_slice_mut(&mut column[..rows]);
                crate::cpu::cast::convert(kernel.isa(), values, out).expect("equal lengths");
            }
            column[rows..].fill(0);
        }
        let columns: [&[u16; MR]; BLOCK_K] = core::array::from_fn(|kk| {
            let k = blk * BLOCK_K + kk;
            if in_place(k) {
                let start = a.index(i0, k0 + k);
                crate::cpu::cast::bits::<S, u16>(&a.data[start..start + MR])
                    .try_into()
                    .expect("a whole column")
            } else {
                &block[kk]
            }
        });
        // The block's 32 tile rows lie one after the other.
        let at = a_index(0, blk * BLOCK_K / 2);
        let tile: &mut [u32; MR * BLOCK_K / 2] = (&mut panel[at..at + MR * BLOCK_K / 2])
            .try_into()
            .expect("a block of tile rows");
        // SAFETY: an AMX kernel's CPU runs AVX-512F (its `Isa` level includes it).
        unsafe { x86::pair_columns(&columns, tile) };
    }
}

/// Tile rows from a block's columns, k by k: row `i`'s word `s` holds the pair of k `2s` and
/// `2s + 1` of row `i`, `block[2s][i] | block[2s + 1][i] << 16` (a 32 x 32 transpose of the
/// 16-bit values). The portable form of [`x86::pair_columns`], its tests' reference.
#[cfg(all(test, target_arch = "x86_64"))]
fn pair_columns_portable(block: &[&[u16; 32]; 32], tile: &mut [u32; 512]) {
    for (i, row) in tile.chunks_exact_mut(16).enumerate() {
        for (s, word) in row.iter_mut().enumerate() {
            *word = u32::from(block[2 * s][i]) | u32::from(block[2 * s + 1][i]) << 16;
        }
    }
}

/// An A panel in the AMX layout, value by value: row `i`'s pairs along k, 16 to a block (a
/// tile row), the blocks one after the other; zeros past `rows` rows and past `kc`.
#[cfg(target_arch = "x86_64")]
fn pack_amx_a(at: impl Fn(usize, usize) -> f32, rows: usize, kc: usize, panel: &mut [u32]) {
    let steps = panel.len() / super::kernel::amx::MR;
    for i in 0..super::kernel::amx::MR {
        for s in 0..steps {
            let k = 2 * s;
            let word = if i < rows && k < kc {
                let lo = bf16_bits(at(i, k));
                let hi = if k + 1 < kc {
                    bf16_bits(at(i, k + 1))
                } else {
                    0
                };
                lo | hi << 16
            } else {
                0
            };
            panel[super::kernel::amx::a_index(i, s)] = word;
        }
    }
}

/// One panel, value by value: `at(lane, k)` for lanes `0..lanes` (rows of A or columns of
/// B), zeros in the lanes past them (and in a pair's missing odd k).
fn pack_panel_scalar(
    kernel: Kernel,
    at: impl Fn(usize, usize) -> f32,
    lanes: usize,
    kc: usize,
    panel: &mut [u32],
) {
    let width = panel.len() / kernel.k_steps(kc).max(1);
    match kernel.packing() {
        Packing::F32 => {
            for l in 0..width {
                for k in 0..kc {
                    panel[k * width + l] = if l < lanes { at(l, k).to_bits() } else { 0 };
                }
            }
        }
        Packing::Bf16Pairs => {
            for l in 0..width {
                for s in 0..kc.div_ceil(2) {
                    panel[s * width + l] = if l < lanes {
                        let lo = bf16_bits(at(l, 2 * s));
                        let hi = if 2 * s + 1 < kc {
                            bf16_bits(at(l, 2 * s + 1))
                        } else {
                            0
                        };
                        lo | hi << 16
                    } else {
                        0
                    };
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use core::arch::x86_64::*;

    use super::{Kernel, MatRef, Packing, rounds};
    use crate::cpu::cast::x86::{bf16_bits, bf16_lanes_avx512, load_bf16, load_f16, round_to_f16};
    use crate::cpu::cast::{CpuFloat, Format};

    /// [`super::pair_columns_portable`] on AVX-512F: each pair of columns (k) widened into
    /// words (16 rows a register), then two 16 x 16 transposes of the words in four
    /// exchange steps (`vpermt2d`), one register per tile row.
    ///
    /// # Safety
    /// The CPU runs AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn pair_columns(block: &[&[u16; 32]; 32], tile: &mut [u32; 512]) {
        let zero = _mm512_setzero_si512();
        // words[h][s]: the words of rows 16h..16h + 16 for pair s.
        let mut words = [[zero; 16]; 2];
        for s in 0..16 {
            // SAFETY: each column is 64 readable bytes.
            let (lo, hi) = unsafe {
                (
                    _mm512_loadu_si512(block[2 * s].as_ptr().cast()),
                    _mm512_loadu_si512(block[2 * s + 1].as_ptr().cast()),
                )
            };
            let pair = |lo: __m256i, hi: __m256i| {
                let hi = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(hi));
                _mm512_or_si512(_mm512_cvtepu16_epi32(lo), hi)
            };
            words[0][s] = pair(_mm512_castsi512_si256(lo), _mm512_castsi512_si256(hi));
            words[1][s] = pair(
                _mm512_extracti64x4_epi64::<1>(lo),
                _mm512_extracti64x4_epi64::<1>(hi),
            );
        }
        for (h, regs) in words.iter_mut().enumerate() {
            transpose16(regs);
            for (i, reg) in regs.iter().enumerate() {
                let row = &mut tile[(16 * h + i) * 16..(16 * h + i + 1) * 16];
                // SAFETY: a tile row is 16 writable words.
                unsafe { _mm512_storeu_si512(row.as_mut_ptr().cast(), *reg) };
            }
        }
    }

    /// Transposes 16 registers of 16 words in place: register r's lane j ends in register
    /// j's lane r. The off-diagonal d x d blocks of every 2d x 2d block are exchanged, for
    /// d = 8, 4, 2, 1 (`vpermt2d`).
    #[inline]
    #[target_feature(enable = "avx512f")]
    fn transpose16(regs: &mut [__m512i; 16]) {
        for (d, take) in &EXCHANGES {
            // SAFETY: 16 readable words each.
            let (take_a, take_b) = unsafe {
                (
                    _mm512_loadu_si512(take[0].as_ptr().cast()),
                    _mm512_loadu_si512(take[1].as_ptr().cast()),
                )
            };
            for r in (0..16).filter(|r| r & d == 0) {
                let (a, b) = (regs[r], regs[r + d]);
                regs[r] = _mm512_permutex2var_epi32(a, take_a, b);
                regs[r + d] = _mm512_permutex2var_epi32(a, take_b, b);
            }
        }
    }

    /// The lane indices of one exchange step at distance `d` (`vpermt2d`'s: 16 + j is the
    /// second register's lane j): the first register keeps its lanes with bit `d` clear
    /// and takes the second's lanes below them; the second takes the first's above.
    const fn exchange_indices(d: usize) -> [[i32; 16]; 2] {
        let mut take = [[0i32; 16]; 2];
        let mut j = 0;
        while j < 16 {
            let (jd, dd) = (j as i32, d as i32);
            take[0][j] = if j & d == 0 { jd } else { 16 + jd - dd };
            take[1][j] = if j & d == 0 { jd + dd } else { 16 + jd };
            j += 1;
        }
        take
    }

    /// The exchange steps of a 16 x 16 transpose: each distance and its lane indices.
    const EXCHANGES: [(usize, [[i32; 16]; 2]); 4] = [
        (8, exchange_indices(8)),
        (4, exchange_indices(4)),
        (2, exchange_indices(2)),
        (1, exchange_indices(1)),
    ];

    /// 8 f32 lanes rounded to bf16 and widened again, for the products only: a NaN stays a
    /// NaN (of any payload), every other value is `half`'s rounding.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn round_to_bf16_for_product(x: __m256) -> __m256 {
        let bits = _mm256_castps_si256(x);
        let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(bits), _mm256_set1_epi32(1));
        let up = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
        let rounded = _mm256_and_si256(up, _mm256_set1_epi32(0xFFFF_0000u32 as i32));
        let nan = _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x);
        _mm256_blendv_ps(_mm256_castsi256_ps(rounded), x, nan)
    }

    /// 8 consecutive values of `S` at `p` (stride 1) as f32, rounded to `format`.
    ///
    /// # Safety
    /// AVX2 + F16C; 8 values readable at `p`.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8<S: CpuFloat>(p: *const S, format: Format) -> __m256 {
        // SAFETY: 8 readable values, by the caller's contract.
        let x = unsafe {
            match S::FORMAT {
                Format::F32 => _mm256_loadu_ps(p.cast()),
                Format::Bf16 => load_bf16(p.cast()),
                Format::F16 => load_f16(p.cast()),
            }
        };
        match (rounds::<S>(format), format) {
            (true, Format::Bf16) => round_to_bf16_for_product(x),
            (true, Format::F16) => round_to_f16(x),
            _ => x,
        }
    }

    /// 8 values as bf16 bits in the low half of each 32-bit lane.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load8_bf16_bits<S: CpuFloat>(p: *const S) -> __m256i {
        // SAFETY: forwarded contract.
        bf16_bits(_mm256_castps_si256(unsafe { load8(p, Format::F32) }))
    }

    /// 16 values (k, k + 1, ...) as 8 words of bf16 pairs (low half: the even one).
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn load16_pairs<S: CpuFloat>(p: *const S) -> __m256i {
        // SAFETY: 16 readable values, by the caller's contract.
        let (x0, x1) = unsafe { (load8_bf16_bits(p), load8_bf16_bits(p.add(8))) };
        _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(x0, x1))
    }

    /// The words of bf16 pairs from two rows of 8 lanes (the even k, the odd k).
    #[inline]
    #[target_feature(enable = "avx2")]
    fn pair_words(lo: __m256i, hi: __m256i) -> __m256i {
        _mm256_or_si256(lo, _mm256_slli_epi32::<16>(hi))
    }

    /// Transposes 8 rows of 8 lanes in place.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn transpose8(r: &mut [__m256; 8]) {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0b01_00_01_00>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0b11_10_11_10>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0b01_00_01_00>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0b11_10_11_10>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0b01_00_01_00>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0b11_10_11_10>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0b01_00_01_00>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0b11_10_11_10>(t5, t7);
        r[0] = _mm256_permute2f128_ps::<0x20>(u0, u4);
        r[1] = _mm256_permute2f128_ps::<0x20>(u1, u5);
        r[2] = _mm256_permute2f128_ps::<0x20>(u2, u6);
        r[3] = _mm256_permute2f128_ps::<0x20>(u3, u7);
        r[4] = _mm256_permute2f128_ps::<0x31>(u0, u4);
        r[5] = _mm256_permute2f128_ps::<0x31>(u1, u5);
        r[6] = _mm256_permute2f128_ps::<0x31>(u2, u6);
        r[7] = _mm256_permute2f128_ps::<0x31>(u3, u7);
    }

    /// An 8x8 block of the source, one vector per lane (row of A or column of B) along k:
    /// `rows[l]` holds the values at k, k + 1, ... of lane `l` (zeros past `lanes`), as the
    /// loader gives them; then transposed, so that `rows[t]` holds lane 0..8 at one k (or
    /// one pair).
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn block8(lanes: usize, load: impl Fn(usize) -> __m256) -> [__m256; 8] {
        let mut r = [_mm256_setzero_ps(); 8];
        for (l, v) in r.iter_mut().enumerate().take(lanes) {
            *v = load(l);
        }
        transpose8(&mut r);
        r
    }

    /// [`block8`] of f32 lanes read straight from memory: lane `l` (of `lanes`, zeros past
    /// them) is the 8 values from `p + l * stride` on, as [`load8`] gives them; then
    /// transposed. No loader closure: the packings' inner loops call this once per 8 x 8
    /// block, and a closure the compiler did not inline cost a call and a trip through
    /// memory for every 8 values.
    ///
    /// # Safety
    /// AVX2 + F16C; 8 values readable from `p + l * stride` for every `l < lanes`.
    #[inline]
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn rows8<S: CpuFloat>(
        p: *const S,
        stride: isize,
        lanes: usize,
        format: Format,
    ) -> [__m256; 8] {
        let mut r = [_mm256_setzero_ps(); 8];
        for (l, v) in r.iter_mut().enumerate().take(lanes) {
            // SAFETY: lane l < lanes is readable, by the caller's contract.
            *v = unsafe { load8(p.offset(l as isize * stride), format) };
        }
        transpose8(&mut r);
        r
    }

    /// 16 values at `p` (stride 1) as the bits of f32 lanes (exact: bf16 and f16 widen
    /// without rounding).
    ///
    /// # Safety
    /// AVX-512F; 16 values readable at `p`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn load16_f32_bits<S: CpuFloat>(p: *const S) -> __m512i {
        // SAFETY: 16 readable values, by the caller's contract.
        unsafe {
            match S::FORMAT {
                Format::F32 => _mm512_loadu_si512(p.cast()),
                Format::Bf16 => {
                    _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast())))
                }
                Format::F16 => _mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))),
            }
        }
    }

    /// Packs `panels` whole B panels of bf16 pairs from column `j0` when B has a unit stride
    /// along its rows or its columns, 16 columns a vector; `false` (nothing written)
    /// otherwise. Rows contiguous (a weight `x W` reads, a gradient `x^T g` reads): each
    /// pair's two rows rounded to bf16 as [`super::value`] and [`super::bf16_bits`] round
    /// them ([`bf16_lanes_avx512`]) and joined into words in the registers. Columns
    /// contiguous (a transposed weight: `g W^T` reads W^T), 32 k of 16 columns at a time:
    /// each column's 32 values rounded to bf16 are its 16 pair words as they lie, and one
    /// [`transpose16`] puts each pair's 16 columns together; the pairs past the last whole
    /// block of 32 go value by value. With the AVX2 body (8 lanes), packing B took 10% of a
    /// linear stack's samples on a 2-core Xeon with AMX; with this one, 6%.
    ///
    /// # Safety
    /// AVX-512F (the kernel's Isa); the kernel packs bf16 pairs with `nr` a multiple of 16;
    /// columns `j0..j0 + panels * nr` and rows `k0..k0 + kc` inside the view (kc > 0);
    /// `out` holds the panels.
    #[target_feature(enable = "avx512f,avx2,f16c")]
    pub(super) unsafe fn pack_b_pairs_avx512<S: CpuFloat>(
        kernel: Kernel,
        b: &MatRef<'_, S>,
        (k0, kc): (usize, usize),
        j0: usize,
        panels: usize,
        out: &mut [u32],
    ) -> bool {
        let (nr, steps) = (kernel.nr(), kernel.k_steps(kc));
        debug_assert!(nr % 16 == 0 && kernel.packing() == Packing::Bf16Pairs);
        let size = steps * nr;
        // Pairs holding values of k (the AMX kernel's panels run on, zeros to a whole block).
        let written = kc.div_ceil(2).min(steps);
        assert!(out.len() >= panels * size);
        let out = out.as_mut_ptr();
        if b.col_stride() == 1 {
            // 4 pairs (8 rows of B) at a time across all panels: the rows are read in order.
            for sb in (0..written).step_by(4) {
                for p in 0..panels {
                    for s in sb..written.min(sb + 4) {
                        let k = k0 + 2 * s;
                        let lo = b.ptr(k, j0 + p * nr);
                        let hi = (2 * s + 1 < kc).then(|| b.ptr(k + 1, j0 + p * nr));
                        for g in (0..nr).step_by(16) {
                            // SAFETY: 16 values of rows k and k + 1 from column j0 + p nr + g,
                            // inside the view (our contract); the store lands in panel p at
                            // pair s < steps, columns g..g + 16 <= nr.
                            unsafe {
                                let lo = bf16_lanes_avx512(load16_f32_bits(lo.add(g)));
                                let hi = match hi {
                                    Some(hi) => bf16_lanes_avx512(load16_f32_bits(hi.add(g))),
                                    None => _mm512_setzero_si512(),
                                };
                                let words = _mm512_or_si512(lo, _mm512_slli_epi32::<16>(hi));
                                _mm512_storeu_si512(out.add(p * size + s * nr + g).cast(), words);
                            }
                        }
                    }
                }
            }
            return true;
        }
        if b.row_stride() != 1 {
            return false;
        }
        let full = kc - kc % 32;
        for p in 0..panels {
            for g in (0..nr).step_by(16) {
                let j = j0 + p * nr + g;
                for kb in (0..full).step_by(32) {
                    let mut regs = [_mm512_setzero_si512(); 16];
                    for (c, reg) in regs.iter_mut().enumerate() {
                        let src = b.ptr(k0 + kb, j + c);
                        // SAFETY: 32 values of column j + c from row k0 + kb, inside the view
                        // (our contract).
                        let (lo, hi) =
                            unsafe { (load16_f32_bits(src), load16_f32_bits(src.add(16))) };
                        let (lo, hi) = (bf16_lanes_avx512(lo), bf16_lanes_avx512(hi));
                        // The 32 bf16 values in order: word s is the pair (2s, 2s + 1).
                        *reg = _mm512_inserti64x4::<1>(
                            _mm512_castsi256_si512(_mm512_cvtepi32_epi16(lo)),
                            _mm512_cvtepi32_epi16(hi),
                        );
                    }
                    transpose16(&mut regs);
                    for (t, reg) in regs.iter().enumerate() {
                        let s = kb / 2 + t;
                        // SAFETY: panel p at pair s < steps, columns g..g + 16 <= nr.
                        unsafe { _mm512_storeu_si512(out.add(p * size + s * nr + g).cast(), *reg) };
                    }
                }
                // B^T's rows are B's columns: a pair of column j + jj is row j + jj's pair.
                let bt = b.transpose();
                for s in full / 2..written {
                    for jj in 0..16 {
                        // SAFETY: panel p at pair s < steps, column g + jj < nr.
                        unsafe {
                            *out.add(p * size + s * nr + g + jj) = pair_at(&bt, j + jj, k0, kc, s)
                        };
                    }
                }
            }
        }
        true
    }

    /// Packs `panels` whole B panels from column `j0` when B has a unit stride along its
    /// rows or its columns; `false` (nothing written) otherwise.
    ///
    /// # Safety
    /// AVX2 + F16C (the kernel's Isa); columns `j0..j0 + panels * nr` and rows
    /// `k0..k0 + kc` inside the view (kc > 0); `out` holds the panels.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn pack_b_panels<S: CpuFloat>(
        kernel: Kernel,
        b: &MatRef<'_, S>,
        (k0, kc): (usize, usize),
        j0: usize,
        panels: usize,
        out: &mut [u32],
    ) -> bool {
        let (nr, steps, format) = (kernel.nr(), kernel.k_steps(kc), kernel.format());
        let size = steps * nr;
        // Pairs holding values of k (the AMX kernel's panels run on, zeros to a whole block).
        let written = kc.div_ceil(2).min(steps);
        assert!(out.len() >= panels * size);
        let out = out.as_mut_ptr();
        // SAFETY: for all the blocks below, every pointer read is an element of the view with 8 or
        // 16 lanes along a unit stride inside it; every store lands in panel p (< panels) at
        // a k or pair index < steps and a column < nr.
        unsafe {
            match (kernel.packing(), b.col_stride(), b.row_stride()) {
                (Packing::F32, 1, _) => {
                    // 8 k at a time across all panels: the rows are read in order, each
                    // panel written 8 rows at a time.
                    for kb in (0..kc).step_by(8) {
                        for p in 0..panels {
                            for k in kb..kc.min(kb + 8) {
                                let src = b.ptr(k0 + k, j0 + p * nr);
                                let dst = out.add(p * size + k * nr);
                                for g in (0..nr).step_by(8) {
                                    _mm256_storeu_ps(dst.add(g).cast(), load8(src.add(g), format));
                                }
                            }
                        }
                    }
                }
                (Packing::F32, _, 1) => {
                    let full = kc - kc % 8;
                    for p in 0..panels {
                        let j = j0 + p * nr;
                        for g in (0..nr).step_by(8) {
                            for kb in (0..full).step_by(8) {
                                let r = rows8(b.ptr(k0 + kb, j + g), b.col_stride(), 8, format);
                                for (t, v) in r.iter().enumerate() {
                                    _mm256_storeu_ps(
                                        out.add(p * size + (kb + t) * nr + g).cast(),
                                        *v,
                                    );
                                }
                            }
                        }
                        for k in full..kc {
                            for jj in 0..nr {
                                *out.add(p * size + k * nr + jj) =
                                    super::value(b, k0 + k, j + jj, format).to_bits();
                            }
                        }
                    }
                }
                (Packing::Bf16Pairs, 1, _) => {
                    for sb in (0..written).step_by(4) {
                        for p in 0..panels {
                            for s in sb..written.min(sb + 4) {
                                let k = k0 + 2 * s;
                                let lo = b.ptr(k, j0 + p * nr);
                                let hi = (2 * s + 1 < kc).then(|| b.ptr(k + 1, j0 + p * nr));
                                for g in (0..nr).step_by(8) {
                                    let lo = load8_bf16_bits(lo.add(g));
                                    let hi = match hi {
                                        Some(hi) => load8_bf16_bits(hi.add(g)),
                                        None => _mm256_setzero_si256(),
                                    };
                                    let dst = out.add(p * size + s * nr + g);
                                    _mm256_storeu_si256(dst.cast(), pair_words(lo, hi));
                                }
                            }
                        }
                    }
                }
                (Packing::Bf16Pairs, _, 1) => {
                    // 16 k (8 pairs) of 8 columns at a time: each column's 16 values become
                    // 8 words, then a transpose puts each pair's 8 columns together.
                    let full = kc - kc % 16;
                    for p in 0..panels {
                        let j = j0 + p * nr;
                        for g in (0..nr).step_by(8) {
                            for kb in (0..full).step_by(16) {
                                let r = block8(8, |c| {
                                    _mm256_castsi256_ps(load16_pairs(b.ptr(k0 + kb, j + g + c)))
                                });
                                for (t, v) in r.iter().enumerate() {
                                    let s = kb / 2 + t;
                                    _mm256_storeu_ps(out.add(p * size + s * nr + g).cast(), *v);
                                }
                            }
                        }
                        for s in full / 2..written {
                            for jj in 0..nr {
                                let k = k0 + 2 * s;
                                let lo = super::bf16_bits(super::value(b, k, j + jj, Format::Bf16));
                                let hi = if 2 * s + 1 < kc {
                                    super::bf16_bits(super::value(b, k + 1, j + jj, Format::Bf16))
                                } else {
                                    0
                                };
                                *out.add(p * size + s * nr + jj) = lo | hi << 16;
                            }
                        }
                    }
                }
                _ => return false,
            }
        }
        true
    }

    /// Packs `panels` whole A panels from row `i0` when A has a unit stride along its
    /// columns and the kernel packs f32: k by k (8 at a time), every panel's rows at a k
    /// read from one stretch of memory, where panel by panel each of A's lines was read
    /// once per panel it feeds (on a small transformer's step, where the weight gradients'
    /// `x^T` has k = 2400, packing A took a tenth of the time, most of it waiting for
    /// those reads); `false` (nothing written) otherwise.
    ///
    /// # Safety
    /// AVX2 + F16C (the kernel's Isa); rows `i0..i0 + panels * mr` and k `k0..k0 + kc`
    /// inside the view (kc > 0); `out` holds the panels.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn pack_a_panels_by_k<S: CpuFloat>(
        kernel: Kernel,
        a: &MatRef<'_, S>,
        (i0, panels): (usize, usize),
        (k0, kc): (usize, usize),
        out: &mut [u32],
    ) -> bool {
        let (mr, steps, format) = (kernel.mr(), kernel.k_steps(kc), kernel.format());
        if kernel.packing() != Packing::F32 || a.row_stride() != 1 || panels == 0 {
            return false;
        }
        let size = steps * mr;
        assert!(out.len() >= panels * size);
        let out = out.as_mut_ptr();
        for kb in (0..kc).step_by(8) {
            for p in 0..panels {
                let i = i0 + p * mr;
                for k in kb..kc.min(kb + 8) {
                    for g in (0..mr).step_by(8) {
                        let lanes = (mr - g).min(8);
                        // SAFETY: rows i + g.. of the view at k (8 of them where the view
                        // has them, else the lanes one by one); the stores land in panel p
                        // at k, rows g..g + lanes.
                        unsafe {
                            let dst = out.add(p * size + k * mr + g);
                            let v = if i + g + 8 <= a.rows() {
                                load8(a.ptr(i + g, k0 + k), format)
                            } else {
                                let mut v = [0f32; 8];
                                for (l, x) in v.iter_mut().enumerate().take(lanes) {
                                    *x = super::value(a, i + g + l, k0 + k, format);
                                }
                                _mm256_loadu_ps(v.as_ptr())
                            };
                            store_lanes(dst.cast(), v, lanes);
                        }
                    }
                }
            }
        }
        true
    }

    /// Stores the first `lanes` (at most 8) of `v` at `dst`, nothing past them: a vector,
    /// then halves, pairs and a single value (a copy of a run-time length compiled to a
    /// call to `memmove` for every 6 values).
    ///
    /// # Safety
    /// AVX2; `dst` writable for `lanes` values.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn store_lanes(dst: *mut f32, v: __m256, lanes: usize) {
        debug_assert!(lanes <= 8);
        // SAFETY: every store below writes values at indices below `lanes`.
        unsafe {
            if lanes == 8 {
                return _mm256_storeu_ps(dst, v);
            }
            let (mut part, mut at) = (_mm256_castps256_ps128(v), 0);
            if lanes >= 4 {
                _mm_storeu_ps(dst, part);
                (part, at) = (_mm256_extractf128_ps::<1>(v), 4);
            }
            if lanes - at >= 2 {
                _mm_storel_epi64(dst.add(at).cast(), _mm_castps_si128(part));
                (part, at) = (_mm_movehl_ps(part, part), at + 2);
            }
            if lanes > at {
                _mm_store_ss(dst.add(at), part);
            }
        }
    }

    /// Packs A panel `p` (`rows` rows from `i`) when A has a unit stride along its rows, or
    /// along its columns for bf16 pairs (f32 ones: [`pack_a_panels_by_k`]); `false`
    /// (nothing written) otherwise. Stores are whole vectors of 8 words that may run past
    /// the panel's end into the next panel (packed after this one) or the buffer's slack.
    ///
    /// # Safety
    /// AVX2 + F16C (the kernel's Isa); rows `i..i + rows` and k `k0..k0 + kc` inside the
    /// view (kc > 0); `out` holds panel p and SLACK words past it.
    #[target_feature(enable = "avx2,f16c")]
    pub(super) unsafe fn pack_a_panel<S: CpuFloat>(
        kernel: Kernel,
        a: &MatRef<'_, S>,
        (i, rows): (usize, usize),
        (k0, kc): (usize, usize),
        out: &mut [u32],
        p: usize,
    ) -> bool {
        let (mr, steps, format) = (kernel.mr(), kernel.k_steps(kc), kernel.format());
        let base = p * steps * mr;
        assert!(out.len() >= base + steps * mr + super::SLACK);
        // SAFETY: base is panel p's first word, inside `out` (asserted above).
        let out = unsafe { out.as_mut_ptr().add(base) };
        // SAFETY: for all the blocks below, reads as in pack_b_panels, rows < `rows` only; a store
        // at word w of the panel writes words w..w + 8, and w + 8 <= steps * mr + 8 (the
        // next panel or the slack).
        unsafe {
            match (kernel.packing(), a.col_stride(), a.row_stride()) {
                // Rows contiguous along k: 8 k of up to 8 rows at a time, transposed.
                // Up to two groups of 8 rows (a 12-row panel: 8, then 4 and 4 zeros), stored
                // k by k, group 0 before group 1, so that each store's spill past its k is
                // overwritten by the next k's first store.
                (Packing::F32, 1, _) => {
                    debug_assert!(mr <= 16);
                    let full = kc - kc % 8;
                    let stride = a.row_stride();
                    let (lanes0, lanes1) = (rows.min(8), rows.saturating_sub(8).min(8));
                    for kb in (0..full).step_by(8) {
                        let r0 = rows8(a.ptr(i, k0 + kb), stride, lanes0, format);
                        let r1 = if mr > 8 && lanes1 > 0 {
                            rows8(a.ptr(i + 8, k0 + kb), stride, lanes1, format)
                        } else {
                            [_mm256_setzero_ps(); 8]
                        };
                        for t in 0..8 {
                            _mm256_storeu_ps(out.add((kb + t) * mr).cast(), r0[t]);
                            if mr > 8 {
                                _mm256_storeu_ps(out.add((kb + t) * mr + 8).cast(), r1[t]);
                            }
                        }
                    }
                    tail_f32(a, (i, rows), (k0, kc), full, mr, format, out);
                }
                (Packing::Bf16Pairs, 1, _) => {
                    // Two groups of 8 rows (the second 4 real, 4 zero), 8 pairs at a time;
                    // stored pair by pair, group 0 before group 1, so that each store's
                    // spill past its pair is overwritten by the next pair's first store.
                    let full = kc - kc % 16;
                    let load = |g: usize, kb: usize| {
                        block8(rows.saturating_sub(g).min(8), |l| {
                            _mm256_castsi256_ps(load16_pairs(a.ptr(i + g + l, k0 + kb)))
                        })
                    };
                    for kb in (0..full).step_by(16) {
                        let (r0, r1) = (load(0, kb), load(8, kb));
                        for t in 0..8 {
                            let s = kb / 2 + t;
                            _mm256_storeu_ps(out.add(s * mr).cast(), r0[t]);
                            _mm256_storeu_ps(out.add(s * mr + 8).cast(), r1[t]);
                        }
                    }
                    tail_pairs(a, (i, rows), (k0, kc), full / 2, mr, out);
                }
                (Packing::Bf16Pairs, _, 1) if rows == mr => {
                    for s in 0..steps {
                        let k = k0 + 2 * s;
                        for g in (0..mr).step_by(8) {
                            let words = if i + g + 8 <= a.rows() {
                                let lo = load8_bf16_bits(a.ptr(i + g, k));
                                let hi = if 2 * s + 1 < kc {
                                    load8_bf16_bits(a.ptr(i + g, k + 1))
                                } else {
                                    _mm256_setzero_si256()
                                };
                                pair_words(lo, hi)
                            } else {
                                let mut w = [0u32; 8];
                                for (l, x) in w.iter_mut().enumerate().take(mr - g) {
                                    *x = pair_at(a, i + g + l, k0, kc, s);
                                }
                                _mm256_loadu_si256(w.as_ptr().cast())
                            };
                            _mm256_storeu_si256(out.add(s * mr + g).cast(), words);
                        }
                    }
                }
                _ => return false,
            }
        }
        true
    }

    /// The pair word of row `i` at pair `s` (k `k0 + 2s` and the next, if inside `kc`).
    fn pair_at<S: CpuFloat>(a: &MatRef<'_, S>, i: usize, k0: usize, kc: usize, s: usize) -> u32 {
        let k = k0 + 2 * s;
        let lo = super::bf16_bits(super::value(a, i, k, Format::Bf16));
        let hi = if 2 * s + 1 < kc {
            super::bf16_bits(super::value(a, i, k + 1, Format::Bf16))
        } else {
            0
        };
        lo | hi << 16
    }

    /// The k past the last whole block of 8, value by value (zeros in missing rows).
    ///
    /// # Safety
    /// `out` holds the panel.
    unsafe fn tail_f32<S: CpuFloat>(
        a: &MatRef<'_, S>,
        (i, rows): (usize, usize),
        (k0, kc): (usize, usize),
        from: usize,
        mr: usize,
        format: Format,
        out: *mut u32,
    ) {
        for k in from..kc {
            for ii in 0..mr {
                let v = if ii < rows {
                    super::value(a, i + ii, k0 + k, format).to_bits()
                } else {
                    0
                };
                // SAFETY: k < kc, ii < mr: inside the panel.
                unsafe { *out.add(k * mr + ii) = v };
            }
        }
    }

    /// The pairs past the last whole block of 8, value by value.
    ///
    /// # Safety
    /// `out` holds the panel.
    unsafe fn tail_pairs<S: CpuFloat>(
        a: &MatRef<'_, S>,
        (i, rows): (usize, usize),
        (k0, kc): (usize, usize),
        from: usize,
        mr: usize,
        out: *mut u32,
    ) {
        for s in from..kc.div_ceil(2) {
            for ii in 0..mr {
                let v = if ii < rows {
                    pair_at(a, i + ii, k0, kc, s)
                } else {
                    0
                };
                // SAFETY: s < steps, ii < mr: inside the panel.
                unsafe { *out.add(s * mr + ii) = v };
            }
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Values a pack must round as `half` does: ties to even either way, subnormals, the
    /// largest finite value rounding to infinity, infinities, signed zeros, signalling and
    /// quiet NaNs with payloads, and ordinary values.
    fn awkward(i: usize) -> f32 {
        const SPECIAL: [u32; 14] = [
            0x3F80_8000, // 1 + 2^-8: a tie, rounds down to even
            0x3F81_8000, // a tie, rounds up to even
            0x0000_0001, // the smallest subnormal
            0x0040_8000, // a subnormal tie
            0x807F_FFFF, // the largest negative subnormal
            0x7F7F_FFFF, // f32::MAX: rounds to infinity
            0x7F80_0000,
            0xFF80_0000,
            0x8000_0000,
            0x7F80_0001, // a signalling NaN, payload in the low bits
            0xFFC1_2345, // a quiet NaN with a payload
            0x3F7F_FFFF,
            0x4049_0FDB, // pi
            0xC2F6_E979,
        ];
        match i % 3 {
            0 => f32::from_bits(SPECIAL[(i / 3) % SPECIAL.len()]),
            _ => ((i as f32) * 0.618_034).sin() * 3.0e3 / (1.0 + (i % 97) as f32),
        }
    }

    /// `pack_b` of a B whose rows are contiguous and of one whose columns are (a transposed
    /// weight), on every kernel that packs bf16 pairs and every instruction set here, against
    /// the panels packed value by value: the same words for f32, bf16 and f16 sources (odd
    /// and whole depths, a partial panel, offset views).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn storing_lanes_writes_those_lanes_and_nothing_past_them() {
        assert!(
            crate::cpu::Isa::detect().has_avx2(),
            "this test runs AVX2 stores: it needs an x86-64 CPU with AVX2"
        );
        let values: [f32; 8] = core::array::from_fn(|i| i as f32 + 1.0);
        for lanes in 0..=8 {
            let mut out = [-1f32; 10];
            // SAFETY: AVX2 is present (checked above); `out` holds 10 values.
            unsafe {
                let v = core::arch::x86_64::_mm256_loadu_ps(values.as_ptr());
                x86::store_lanes(out.as_mut_ptr(), v, lanes);
            }
            for (i, &x) in out.iter().enumerate() {
                let want = if i < lanes { values[i] } else { -1.0 };
                assert_eq!(x, want, "{lanes} lanes, index {i}");
            }
        }
    }

    #[test]
    fn packing_b_as_pairs_matches_the_value_by_value_panels() {
        fn check<S: CpuFloat>(transposed: bool) {
            let (rows, cols) = (70, 3 * 32 + 7);
            let data: Vec<S> = (0..80 * 120).map(|i| S::from_f32(awkward(i))).collect();
            let b = match transposed {
                false => MatRef::new(&data, 3, rows, cols, 3 * 32 + 11, 1),
                true => MatRef::new(&data, 3, rows, cols, 1, rows as isize + 5),
            }
            .unwrap();
            for isa in crate::cpu::Isa::available() {
                for kernel in Kernel::all(isa, Format::Bf16) {
                    if kernel.packing() != Packing::Bf16Pairs {
                        continue;
                    }
                    for (k0, kc) in [(0, 64), (1, 37), (5, 1), (0, 70)] {
                        let (nr, steps) = (kernel.nr(), kernel.k_steps(kc));
                        let (j0, nc) = (2, cols - 2);
                        let panels = nc.div_ceil(nr);
                        let mut fast = vec![u32::MAX; panels * steps * nr];
                        pack_b(kernel, &b, (k0, kc), (j0, nc), &mut fast);
                        let mut slow = vec![0u32; panels * steps * nr];
                        for p in 0..panels {
                            let (j, lanes) = (j0 + p * nr, nr.min(nc - p * nr));
                            let panel = &mut slow[p * steps * nr..(p + 1) * steps * nr];
                            let at = |jj: usize, k: usize| value(&b, k0 + k, j + jj, Format::Bf16);
                            pack_panel_scalar(kernel, at, lanes, kc, panel);
                            if kernel.amx_a() {
                                panel[kc.div_ceil(2) * nr..].fill(0);
                            }
                        }
                        let layout = if transposed { "columns" } else { "rows" };
                        let format = S::FORMAT;
                        assert_eq!(
                            fast, slow,
                            "{isa} {kernel:?} {format:?} {layout} k {k0}+{kc}"
                        );
                    }
                }
            }
        }
        for transposed in [false, true] {
            check::<f32>(transposed);
            check::<half::bf16>(transposed);
            check::<half::f16>(transposed);
        }
    }

    #[test]
    fn pairing_columns_is_a_transpose_on_every_instruction_set() {
        let mut block = [[0u16; 32]; 32];
        for (k, column) in block.iter_mut().enumerate() {
            for (i, v) in column.iter_mut().enumerate() {
                // Every value distinct, both bytes varying.
                *v = ((k * 32 + i) as u16).wrapping_mul(0x9E37) ^ 0x5A5A;
            }
        }
        let columns: [&[u16; 32]; 32] = core::array::from_fn(|k| &block[k]);
        let mut portable = [0u32; 512];
        pair_columns_portable(&columns, &mut portable);
        let halves: &[u16] = bytemuck::cast_slice(&portable);
        for (i, row) in halves.chunks_exact(32).enumerate() {
            for (k, v) in row.iter().enumerate() {
                assert_eq!(*v, block[k][i], "row {i}, k {k}");
            }
        }
        for isa in crate::cpu::Isa::available() {
            if isa.has_avx512_bf16() {
                let mut fast = [0u32; 512];
                // SAFETY: the CPU runs AVX-512F (its `Isa` level includes it).
                unsafe { x86::pair_columns(&columns, &mut fast) };
                assert_eq!(fast, portable, "{isa}");
            }
        }
    }
}
