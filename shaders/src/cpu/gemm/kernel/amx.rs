//! The AMX-BF16 microkernel: a 32x32 tile of C as four 16x16 f32 tiles, fed by `tdpbf16ps`
//! (a 16x32 bf16 tile of A times a 32x16 one of B, f32 accumulation, per instruction).
//!
//! A is packed row-major along k in blocks of 32 k (each row of a block: 16 bf16 pairs, the
//! 64 bytes of one tile row); B in the bf16-pair layout of the AVX-512 BF16 kernel (32
//! columns of pairs per k pair), read as two 16-column tiles. k is padded to whole blocks
//! with zeros. AMX instructions are written as assembly (Rust has no stable AMX
//! intrinsics; the assembler knows them), so the CPU and the operating system are asked
//! for them by hand: CPUID, XCR0, and Linux's permission for the tile state
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM)`), in [`crate::cpu::isa`].

use core::arch::asm;

/// Rows and columns of the tile.
pub(crate) const MR: usize = 32;
pub(crate) const NR: usize = 32;
/// Pairs of k per block (one tile of A is 16 rows of 16 pairs).
const PAIRS: usize = super::AMX_PAIRS;

/// The tile configuration (`ldtilecfg`'s 64 bytes): palette 1; tmm0-3 the C tiles (16 rows
/// of 16 f32), tmm4-5 the A tiles (16 rows of 32 bf16), tmm6-7 the B tiles (16 pair rows of
/// 16 columns).
#[repr(C, align(64))]
struct Config {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

const CONFIG: Config = {
    let mut colsb = [0u16; 16];
    let mut rows = [0u8; 16];
    let mut t = 0;
    while t < 8 {
        colsb[t] = 64;
        rows[t] = 16;
        t += 1;
    }
    Config {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb,
        rows,
    }
};

/// Loads the tile configuration on this thread, for the [`amx_bf16_32x32`] calls that
/// follow. `ldtilecfg` waits for every tile instruction before it, so it is loaded once
/// for a panel's tiles, not once a tile: on a 1024 x 2048 x 2048 product, loading it in
/// every tile took a quarter of the kernel's time.
///
/// # Safety
/// The CPU runs AMX-BF16 and the process holds the tile state (the `Isa` proved both).
pub(super) unsafe fn configure() {
    // SAFETY: our caller's; the configuration is 64 readable bytes.
    unsafe { asm!("ldtilecfg [{cfg}]", cfg = in(reg) &CONFIG, options(nostack, readonly)) };
}

/// Returns the tiles to their initial state (what [`configure`] loaded is gone), so that a
/// thread that no longer multiplies saves and restores no tile data on a context switch.
///
/// # Safety
/// As [`configure`].
pub(super) unsafe fn release() {
    // SAFETY: our caller's.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// `C[0..32][0..32] (=|+=) A_panel B_panel` over `steps` pairs of k (a multiple of 16): the
/// C tiles loaded from `c` (or zeroed), the products added to them in the tiles, stored
/// back.
///
/// # Safety
/// The CPU runs AMX-BF16 and the process holds the tile state (the `Isa` proved both), and
/// [`configure`] ran on this thread since the last [`release`]; `a` holds `steps * 32`
/// words in the AMX layout, `b` `steps * 32` in the pair layout, and `c` is valid for 32
/// rows of 32 f32 at a row stride of `ldc`.
pub(super) unsafe fn amx_bf16_32x32(
    steps: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    debug_assert_eq!(steps % PAIRS, 0);
    let (a_stride, b_stride, c_stride) = (PAIRS * 4, NR * 4, ldc * 4);
    let (c00, c01) = (c, c.wrapping_add(16));
    let (c10, c11) = (c.wrapping_add(16 * ldc), c.wrapping_add(16 * ldc + 16));
    // SAFETY: the CPU and OS run AMX and the tiles are configured (our caller's). The C
    // tiles are the tile's four 16x16 quarters (16 rows of 64 bytes at `ldc` floats apart,
    // inside the tile); every tile load of A and B reads 16 rows of 64 bytes inside the
    // panels (block `blk` of A: 32 rows of 16 words from word blk * 512; of B: 16 pair rows
    // of 32 words from word blk * 512); the prefetches ask for the next block's.
    unsafe {
        if accumulate {
            asm!(
                "tileloadd tmm0, [{c00} + {s}*1]",
                "tileloadd tmm1, [{c01} + {s}*1]",
                "tileloadd tmm2, [{c10} + {s}*1]",
                "tileloadd tmm3, [{c11} + {s}*1]",
                c00 = in(reg) c00,
                c01 = in(reg) c01,
                c10 = in(reg) c10,
                c11 = in(reg) c11,
                s = in(reg) c_stride,
                options(nostack, readonly),
            );
        } else {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem),
            );
        }
        let blocks = steps / PAIRS;
        for blk in 0..blocks {
            let a0 = a.add(blk * MR * PAIRS);
            let a1 = a0.add(16 * PAIRS);
            let b0 = b.add(blk * PAIRS * NR);
            let b1 = b0.add(16);
            if blk + 1 < blocks {
                prefetch_block(a0.add(MR * PAIRS));
                prefetch_block(b0.add(PAIRS * NR));
            }
            asm!(
                "tileloadd tmm4, [{a0} + {sa}*1]",
                "tileloadd tmm5, [{a1} + {sa}*1]",
                "tileloadd tmm6, [{b0} + {sb}*1]",
                "tileloadd tmm7, [{b1} + {sb}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                a0 = in(reg) a0,
                a1 = in(reg) a1,
                b0 = in(reg) b0,
                b1 = in(reg) b1,
                sa = in(reg) a_stride,
                sb = in(reg) b_stride,
                options(nostack, readonly),
            );
        }
        asm!(
            "tilestored [{c00} + {s}*1], tmm0",
            "tilestored [{c01} + {s}*1], tmm1",
            "tilestored [{c10} + {s}*1], tmm2",
            "tilestored [{c11} + {s}*1], tmm3",
            c00 = in(reg) c00,
            c01 = in(reg) c01,
            c10 = in(reg) c10,
            c11 = in(reg) c11,
            s = in(reg) c_stride,
            options(nostack),
        );
    }
}

/// Asks for the 2 KiB of a block of A or B (32 rows of 64 bytes, contiguous) in the L1
/// cache, one block ahead of the tile loads that read it. The loads otherwise wait on L2:
/// on a 2-core Xeon with AMX, the kernel stalled on its `tileloadd`s, and prefetching the
/// next block took a 1024 x 4096 x 4096 product from 834 to 1,048 GFLOP/s and a weight
/// gradient of 128 rows (`x^T g`, 4096 x 4096) from 294 to 698.
///
/// # Safety
/// None beyond a valid address computation: a prefetch never faults; `block` is inside the
/// panel (the next block of the one being read).
#[inline(always)]
unsafe fn prefetch_block(block: *const u32) {
    use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
    let block = block.cast::<i8>();
    for line in 0..32 {
        // SAFETY: a prefetch of an address inside the panel (our caller's).
        unsafe { _mm_prefetch::<_MM_HINT_T0>(block.add(line * 64)) };
    }
}

/// Word `s` (a pair of k) of row `i` of an A panel in the AMX layout.
pub(crate) fn a_index(i: usize, s: usize) -> usize {
    (s / PAIRS) * (MR * PAIRS) + i * PAIRS + s % PAIRS
}
