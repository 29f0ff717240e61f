//! The microkernels: each multiplies a packed `MR x kc` panel of A by a packed `kc x NR`
//! panel of B into an `MR x NR` tile of f32 C, written or added to. [`Kernel`] names one
//! and carries the proof that the CPU runs it.

#[cfg(target_arch = "x86_64")]
pub(crate) mod amx;
mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;

use core::fmt;

use crate::cpu::Isa;
use crate::cpu::cast::Format;
#[cfg(target_arch = "x86_64")]
use crate::cpu::isa::Bf16Dot;

/// Pairs of k in one AMX block (32 k: a tile row of A, 16 pair rows of a tile of B).
pub(crate) const AMX_PAIRS: usize = 16;

/// How a kernel wants its operands packed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Packing {
    /// f32 values (rounded to the compute format), one k at a time.
    F32,
    /// bf16 pairs along k in one 32-bit word (low half: the even k), as `vdpbf16ps` reads.
    Bf16Pairs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    PortableF32,
    #[cfg(target_arch = "x86_64")]
    Avx2F32,
    /// f32 packing, 12x32 tiles of AVX-512 FMA: f16 (and f32) products where the CPU has
    /// AVX-512 but no f16 arithmetic, and bf16 products where `vdpbf16ps` runs at half
    /// the FMAs' rate ([`Bf16Dot::HalfRate`]).
    #[cfg(target_arch = "x86_64")]
    Avx512F32,
    PortablePairs,
    /// The AVX-512 BF16 path's packing (AVX2) with the portable pair microkernel: what
    /// tests run of that path on CPUs without AVX-512 BF16.
    #[cfg(target_arch = "x86_64")]
    Avx2PackedPairs,
    #[cfg(target_arch = "x86_64")]
    Avx512Pairs,
    /// AMX-BF16 tiles (`tdpbf16ps`), 32x32: A packed row-major along k in blocks of 32 k,
    /// B in bf16 pairs, k padded to whole blocks.
    #[cfg(target_arch = "x86_64")]
    AmxBf16,
}

/// A GEMM microkernel with its compute format, runnable on this CPU.
///
/// ```
/// use burn_amp_kernels::cpu::{Isa, cast::Format, gemm::Kernel};
///
/// let kernel = Kernel::select(Isa::detect(), Format::Bf16);
/// println!("bf16 products run on the {kernel} kernel");
/// assert!(Kernel::all(Isa::detect(), Format::Bf16).contains(&kernel));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    kind: Kind,
    format: Format,
    isa: Isa,
}

impl Kernel {
    /// The fastest kernel `isa` runs for operands rounded to `format`: AMX tiles for bf16
    /// where the CPU has them, else `vdpbf16ps` or f32 FMAs as [`Isa::bf16_dot`] says.
    pub fn select(isa: Isa, format: Format) -> Kernel {
        *Self::all(isa, format)
            .last()
            .expect("the portable kernel always runs")
    }

    /// Every kernel `isa` runs for `format`, the portable reference first, the fastest last.
    pub fn all(isa: Isa, format: Format) -> Vec<Kernel> {
        let mut kinds = vec![Kind::PortableF32];
        if format == Format::Bf16 {
            kinds.push(Kind::PortablePairs);
        }
        #[cfg(target_arch = "x86_64")]
        {
            if isa.has_avx2() {
                if format == Format::Bf16 {
                    kinds.push(Kind::Avx2PackedPairs);
                }
                kinds.push(Kind::Avx2F32);
            }
            if isa.has_avx512_bf16() {
                match (format, isa.bf16_dot()) {
                    (Format::Bf16, Bf16Dot::FullRate) => {
                        kinds.extend([Kind::Avx512F32, Kind::Avx512Pairs])
                    }
                    (Format::Bf16, Bf16Dot::HalfRate) => {
                        kinds.extend([Kind::Avx512Pairs, Kind::Avx512F32])
                    }
                    _ => kinds.push(Kind::Avx512F32),
                }
            }
            if isa.has_amx_bf16() && format == Format::Bf16 {
                kinds.push(Kind::AmxBf16);
            }
        }
        kinds
            .into_iter()
            .map(|kind| Kernel { kind, format, isa })
            .collect()
    }

    /// The instruction set the packing and the output conversion may use.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// The format operands are rounded to before their products.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The kernel's name: its instructions and tile.
    pub fn name(&self) -> &'static str {
        match self.kind {
            Kind::PortableF32 => "portable f32 6x16",
            #[cfg(target_arch = "x86_64")]
            Kind::Avx2F32 => "avx2+fma f32 6x16",
            #[cfg(target_arch = "x86_64")]
            Kind::Avx512F32 => "avx512f f32 12x32",
            Kind::PortablePairs => "portable bf16-pair 12x32",
            #[cfg(target_arch = "x86_64")]
            Kind::Avx2PackedPairs => "avx2-packed bf16-pair 12x32 (portable microkernel)",
            #[cfg(target_arch = "x86_64")]
            Kind::Avx512Pairs => "avx512_bf16 vdpbf16ps 12x32",
            #[cfg(target_arch = "x86_64")]
            Kind::AmxBf16 => "amx_bf16 tdpbf16ps 32x32",
        }
    }

    /// Whether B's micro-panel may fill the whole L1 data cache rather than half of it:
    /// the `vdpbf16ps` kernel reads 128 bytes of B per 24 instructions, which L2 feeds as
    /// fast as the kernel runs, so a deeper k step halves the passes over C (the
    /// driver's blocking).
    pub(crate) fn b_panel_fills_l1(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.kind == Kind::Avx512Pairs {
            return true;
        }
        false
    }

    /// Whether A is packed in the AMX layout (row-major along k, blocks of 32 k).
    pub(crate) fn amx_a(&self) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.kind == Kind::AmxBf16 {
            return true;
        }
        false
    }

    /// Whether the kernel runs on AVX2 (its packing may use AVX2 too).
    pub(crate) fn avx2_packing(&self) -> bool {
        match self.kind {
            Kind::PortableF32 | Kind::PortablePairs => false,
            #[cfg(target_arch = "x86_64")]
            Kind::Avx2F32
            | Kind::Avx512F32
            | Kind::Avx2PackedPairs
            | Kind::Avx512Pairs
            | Kind::AmxBf16 => true,
        }
    }

    pub(crate) fn packing(&self) -> Packing {
        match self.kind {
            Kind::PortablePairs => Packing::Bf16Pairs,
            #[cfg(target_arch = "x86_64")]
            Kind::Avx2PackedPairs | Kind::Avx512Pairs | Kind::AmxBf16 => Packing::Bf16Pairs,
            _ => Packing::F32,
        }
    }

    /// Rows of a tile (at most 16: the AVX2 packing of A writes groups of 8 rows, each
    /// store's spill overwritten by the next).
    pub(crate) fn mr(&self) -> usize {
        match (self.kind, self.packing()) {
            #[cfg(target_arch = "x86_64")]
            (Kind::AmxBf16, _) => amx::MR,
            #[cfg(target_arch = "x86_64")]
            (Kind::Avx512F32, _) => 12,
            (_, Packing::F32) => 6,
            (_, Packing::Bf16Pairs) => 12,
        }
    }

    /// Columns of a tile (a multiple of 8).
    pub(crate) fn nr(&self) -> usize {
        match (self.kind, self.packing()) {
            #[cfg(target_arch = "x86_64")]
            (Kind::AmxBf16, _) => amx::NR,
            #[cfg(target_arch = "x86_64")]
            (Kind::Avx512F32, _) => 32,
            (_, Packing::F32) => 16,
            (_, Packing::Bf16Pairs) => 32,
        }
    }

    /// Packed words per k step of an A panel (`mr`) or a B panel (`nr`): one per value for
    /// f32 packing, one per pair (two k) for bf16 pairs.
    pub(crate) fn k_steps(&self, kc: usize) -> usize {
        match self.packing() {
            Packing::F32 => kc,
            Packing::Bf16Pairs if self.amx_a() => kc.div_ceil(2 * AMX_PAIRS) * AMX_PAIRS,
            Packing::Bf16Pairs => kc.div_ceil(2),
        }
    }

    /// Runs `body`, which calls [`Kernel::tile`], with the kernel's tile state ready on this
    /// thread: the AMX kernel's tile configuration loaded before it and released after
    /// (other kernels keep no state).
    pub(crate) fn with_tiles<R>(&self, body: impl FnOnce() -> R) -> R {
        #[cfg(target_arch = "x86_64")]
        if self.kind == Kind::AmxBf16 {
            // SAFETY: the kind exists only where the Isa proved AMX-BF16 and the tile state.
            unsafe { amx::configure() };
            let out = body();
            // SAFETY: as above.
            unsafe { amx::release() };
            return out;
        }
        body()
    }

    /// `C[0..mr][0..nr] (=|+=) A_panel B_panel` over `kc` values of k.
    ///
    /// # Safety
    /// Called inside [`Kernel::with_tiles`] of this kernel on this thread; `a` holds
    /// `k_steps(kc) * mr` packed words, `b` holds `k_steps(kc) * nr`, and `c` is valid for
    /// `mr` rows of `nr` f32 at a row stride of `ldc`.
    #[inline]
    pub(crate) unsafe fn tile(
        &self,
        kc: usize,
        a: *const u32,
        b: *const u32,
        c: *mut f32,
        ldc: usize,
        accumulate: bool,
    ) {
        let steps = self.k_steps(kc);
        // SAFETY: forwarded contract (the AMX tiles configured by `with_tiles`); the x86
        // kinds exist only when the Isa proved them.
        unsafe {
            match self.kind {
                Kind::PortableF32 => {
                    portable::f32_tile::<6, 16>(steps, a.cast(), b.cast(), c, ldc, accumulate)
                }
                Kind::PortablePairs => {
                    portable::pairs_tile::<12, 32>(steps, a, b, c, ldc, accumulate)
                }
                #[cfg(target_arch = "x86_64")]
                Kind::Avx2PackedPairs => {
                    portable::pairs_tile::<12, 32>(steps, a, b, c, ldc, accumulate)
                }
                #[cfg(target_arch = "x86_64")]
                Kind::Avx2F32 => x86::avx2_6x16(steps, a.cast(), b.cast(), c, ldc, accumulate),
                #[cfg(target_arch = "x86_64")]
                Kind::Avx512F32 => x86::avx512_12x32(steps, a.cast(), b.cast(), c, ldc, accumulate),
                #[cfg(target_arch = "x86_64")]
                Kind::Avx512Pairs => x86::avx512_bf16_12x32(steps, a, b, c, ldc, accumulate),
                #[cfg(target_arch = "x86_64")]
                Kind::AmxBf16 => amx::amx_bf16_32x32(steps, a, b, c, ldc, accumulate),
            }
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?} operands)", self.name(), self.format)
    }
}
