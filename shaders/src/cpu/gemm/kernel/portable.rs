//! The portable microkernels: plain loops over the packed layouts, the references.

/// f32 packing: `a` is `kc x MR` (k-major), `b` is `kc x NR`.
///
/// # Safety
/// As [`Kernel::tile`](super::Kernel::tile).
pub(super) unsafe fn f32_tile<const MR: usize, const NR: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    let mut acc = [[0f32; NR]; MR];
    for k in 0..kc {
        // SAFETY: k < kc, within the packed panels.
        let (a, b) = unsafe {
            (
                &*a.add(k * MR).cast::<[f32; MR]>(),
                &*b.add(k * NR).cast::<[f32; NR]>(),
            )
        };
        for i in 0..MR {
            for j in 0..NR {
                acc[i][j] += a[i] * b[j];
            }
        }
    }
    // SAFETY: the tile is valid for MR rows of NR values.
    unsafe { store::<MR, NR>(&acc, c, ldc, accumulate) }
}

/// bf16-pair packing: each word holds two bf16 (low half: even k). Emulates `vdpbf16ps`
/// (the odd product added first, then the even one), without its flushing of subnormals.
///
/// # Safety
/// As [`Kernel::tile`](super::Kernel::tile), with `steps` pairs.
pub(super) unsafe fn pairs_tile<const MR: usize, const NR: usize>(
    steps: usize,
    a: *const u32,
    b: *const u32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    let lo = |w: u32| f32::from_bits(w << 16);
    let hi = |w: u32| f32::from_bits(w & 0xFFFF_0000);
    let mut acc = [[0f32; NR]; MR];
    for s in 0..steps {
        // SAFETY: s < steps, within the packed panels.
        let (a, b) = unsafe {
            (
                &*a.add(s * MR).cast::<[u32; MR]>(),
                &*b.add(s * NR).cast::<[u32; NR]>(),
            )
        };
        for i in 0..MR {
            for j in 0..NR {
                acc[i][j] += hi(a[i]) * hi(b[j]);
                acc[i][j] += lo(a[i]) * lo(b[j]);
            }
        }
    }
    // SAFETY: the tile is valid for MR rows of NR values.
    unsafe { store::<MR, NR>(&acc, c, ldc, accumulate) }
}

/// # Safety
/// `c` valid for `MR` rows of `NR` f32 at row stride `ldc`.
unsafe fn store<const MR: usize, const NR: usize>(
    acc: &[[f32; NR]; MR],
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    for (i, row) in acc.iter().enumerate() {
        // SAFETY: row i of the tile.
        let out = unsafe { core::slice::from_raw_parts_mut(c.add(i * ldc), NR) };
        if accumulate {
            out.iter_mut().zip(row).for_each(|(o, v)| *o += v);
        } else {
            out.copy_from_slice(row);
        }
    }
}
