//! Which instruction set a CPU kernel runs with. An [`Isa`] can only be made for a CPU that
//! has it (by [`Isa::detect`] or [`Isa::new`]), so a kernel handed one may use its
//! instructions: the check happens once, where the value is made, and the value is passed
//! down to every kernel that needs it.

use core::fmt;

use super::caches::CacheSizes;

/// The instruction-set levels the CPU kernels are written for, from the portable reference
/// up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IsaLevel {
    /// Plain Rust on any CPU: the reference every fast path is tested against.
    Portable,
    /// x86-64 with AVX2, FMA and F16C: 8-lane f32 FMA microkernels, F16C conversions.
    Avx2,
    /// x86-64 with AVX-512F and AVX-512 BF16 as well: bf16 products by `vdpbf16ps`.
    Avx512Bf16,
    /// x86-64 with AMX-BF16 as well, its tile state granted by the operating system: bf16
    /// products by `tdpbf16ps` tiles.
    AmxBf16,
}

impl IsaLevel {
    /// Every level, portable first.
    pub const ALL: [IsaLevel; 4] = [
        IsaLevel::Portable,
        IsaLevel::Avx2,
        IsaLevel::Avx512Bf16,
        IsaLevel::AmxBf16,
    ];

    /// The level's name, as CPU flags spell it.
    pub fn name(self) -> &'static str {
        match self {
            IsaLevel::Portable => "portable",
            IsaLevel::Avx2 => "avx2+fma+f16c",
            IsaLevel::Avx512Bf16 => "avx512f+avx512_bf16",
            IsaLevel::AmxBf16 => "amx_bf16+avx512_bf16",
        }
    }

    fn available(self) -> bool {
        match self {
            IsaLevel::Portable => true,
            #[cfg(target_arch = "x86_64")]
            IsaLevel::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            IsaLevel::Avx512Bf16 => {
                IsaLevel::Avx2.available()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bf16")
            }
            #[cfg(target_arch = "x86_64")]
            IsaLevel::AmxBf16 => {
                IsaLevel::Avx512Bf16.available() && amx_status() == AmxStatus::Granted
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// A proof that this CPU runs an [`IsaLevel`]: the kernels take one and use its
/// instructions. Levels are cumulative (an `Avx512Bf16` CPU runs the AVX2 kernels too).
///
/// ```
/// use burn_amp_kernels::cpu::{Isa, isa::IsaLevel};
///
/// let best = Isa::detect();
/// assert_eq!(Isa::new(best.level()), Some(best));
/// assert!(Isa::new(IsaLevel::Portable).is_some()); // every CPU
/// println!("CPU kernels run with {best}");
/// ```
///
/// It also carries the CPU's cache sizes ([`CacheSizes`]), read with it, which the GEMM
/// sizes its blocks from, and the rate of its bf16 dot product ([`Bf16Dot`]), which decides
/// the kernel of bf16 products.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Isa {
    level: IsaLevel,
    caches: CacheSizes,
    bf16_dot: Bf16Dot,
}

/// How fast a CPU's AVX-512 BF16 dot product (`vdpbf16ps`) runs against its f32 FMAs: what
/// decides whether bf16 products are packed as bf16 pairs for it or widened to f32 for FMAs
/// (the same products of the same bf16 values, summed in f32 either way).
///
/// ```
/// use burn_amp_kernels::cpu::{Isa, isa::Bf16Dot};
///
/// let isa = Isa::detect().with_bf16_dot(Bf16Dot::HalfRate);
/// assert_eq!(isa.bf16_dot(), Bf16Dot::HalfRate);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bf16Dot {
    /// Two bf16 products per lane for each f32 FMA's one at least: the pair kernel does
    /// more products per cycle (AMD's cores, and where the vendor is unknown).
    FullRate,
    /// One `vdpbf16ps` every two cycles against two FMAs a cycle, so FMAs on values widened
    /// to f32 do twice its products (Intel's cores: measured on an Emerald Rapids core,
    /// 1.6 G `vdpbf16ps` against 6.5 G `vfmadd231ps` a second on 512-bit registers).
    HalfRate,
}

impl Bf16Dot {
    /// This CPU's, from its vendor (CPUID leaf 0).
    fn detect() -> Bf16Dot {
        #[cfg(target_arch = "x86_64")]
        {
            let leaf0 = core::arch::x86_64::__cpuid(0);
            // "GenuineIntel", in EBX, EDX, ECX.
            if (leaf0.ebx, leaf0.edx, leaf0.ecx) == (0x756e_6547, 0x4965_6e69, 0x6c65_746e) {
                return Bf16Dot::HalfRate;
            }
        }
        Bf16Dot::FullRate
    }
}

impl Isa {
    /// The portable reference, on any CPU (with typical cache sizes).
    pub const PORTABLE: Isa = Isa {
        level: IsaLevel::Portable,
        caches: CacheSizes::TYPICAL,
        bf16_dot: Bf16Dot::FullRate,
    };

    /// The best level this CPU runs.
    pub fn detect() -> Isa {
        let level = IsaLevel::ALL
            .into_iter()
            .rev()
            .find(|l| l.available())
            .unwrap_or(IsaLevel::Portable);
        Isa {
            level,
            caches: CacheSizes::detect(),
            bf16_dot: Bf16Dot::detect(),
        }
    }

    /// `level`, if this CPU runs it.
    pub fn new(level: IsaLevel) -> Option<Isa> {
        level.available().then(|| Isa {
            level,
            caches: CacheSizes::detect(),
            bf16_dot: Bf16Dot::detect(),
        })
    }

    /// The same instruction set, with blocks sized for `caches` (what tests use to hold
    /// other blockings to the reference).
    pub fn with_caches(self, caches: CacheSizes) -> Isa {
        Isa { caches, ..self }
    }

    /// The same instruction set, choosing kernels as for a CPU whose bf16 dot product runs
    /// at `rate` (what tests use to run both choices on one CPU).
    pub fn with_bf16_dot(self, rate: Bf16Dot) -> Isa {
        Isa {
            bf16_dot: rate,
            ..self
        }
    }

    /// The rate of this CPU's bf16 dot product against its f32 FMAs.
    pub fn bf16_dot(self) -> Bf16Dot {
        self.bf16_dot
    }

    /// The cache sizes the kernels size their blocks from.
    pub fn caches(self) -> CacheSizes {
        self.caches
    }

    /// Every level this CPU runs, portable first: what tests hold to the reference.
    pub fn available() -> Vec<Isa> {
        IsaLevel::ALL.into_iter().filter_map(Isa::new).collect()
    }

    /// The level.
    pub fn level(self) -> IsaLevel {
        self.level
    }

    /// Whether the AVX2 / FMA / F16C kernels may run.
    pub(crate) fn has_avx2(self) -> bool {
        self.level >= IsaLevel::Avx2
    }

    /// Whether the AVX-512 BF16 kernels may run.
    pub(crate) fn has_avx512_bf16(self) -> bool {
        self.level >= IsaLevel::Avx512Bf16
    }

    /// Whether the AMX-BF16 kernel may run (the tile state is granted).
    pub(crate) fn has_amx_bf16(self) -> bool {
        self.level >= IsaLevel::AmxBf16
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.level.name())
    }
}

/// Whether this CPU has AMX-BF16 and may use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmxStatus {
    /// The CPU has no AMX-BF16 (or the operating system does not save its state).
    Absent,
    /// AMX-BF16 runs: the operating system granted this process the tile state.
    Granted,
    /// The CPU has AMX-BF16 but the operating system refused this process the tile state
    /// (Linux's `arch_prctl(ARCH_REQ_XCOMP_PERM)`): the AVX-512 BF16 kernel runs instead.
    Refused,
}

/// Whether AMX-BF16 is there and granted: CPUID's AMX-TILE and AMX-BF16 bits, the XTILECFG
/// and XTILEDATA state enabled in XCR0, and on Linux the permission for the tile data,
/// asked for here (asking again is harmless: the answer stays).
///
/// ```
/// use burn_amp_kernels::cpu::isa::{AmxStatus, amx_status};
///
/// match amx_status() {
///     AmxStatus::Granted => println!("bf16 products on AMX tiles"),
///     AmxStatus::Refused => println!("AMX present, tile state refused: AVX-512 BF16"),
///     AmxStatus::Absent => println!("no AMX here"),
/// }
/// ```
pub fn amx_status() -> AmxStatus {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::__cpuid_count;
        let (leaf1, leaf7) = (__cpuid_count(1, 0), __cpuid_count(7, 0));
        let osxsave = leaf1.ecx & (1 << 27) != 0;
        let (amx_bf16, amx_tile) = (leaf7.edx & (1 << 22) != 0, leaf7.edx & (1 << 24) != 0);
        if !(osxsave && amx_bf16 && amx_tile) {
            return AmxStatus::Absent;
        }
        // XCR0 bits 17 (XTILECFG) and 18 (XTILEDATA): the OS saves the tile state.
        // SAFETY: OSXSAVE is set, so XGETBV runs.
        let xcr0 = unsafe { xgetbv0() };
        if xcr0 & (0b11 << 17) != 0b11 << 17 {
            return AmxStatus::Absent;
        }
        if request_tile_data() {
            AmxStatus::Granted
        } else {
            AmxStatus::Refused
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    AmxStatus::Absent
}

/// XCR0, by `xgetbv` with ECX = 0.
///
/// # Safety
/// CPUID reported OSXSAVE.
#[cfg(target_arch = "x86_64")]
unsafe fn xgetbv0() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: our caller's: XGETBV is enabled.
    unsafe {
        core::arch::asm!("xgetbv", in("ecx") 0, out("eax") lo, out("edx") hi, options(nomem, nostack));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Linux: asks for permission to use the tile data state (`arch_prctl(ARCH_REQ_XCOMP_PERM,
/// XFEATURE_XTILEDATA)`, needed since Linux 5.16 before the first AMX instruction); `true`
/// when granted. Other systems: `true` (XCR0 said the state is saved).
#[cfg(target_arch = "x86_64")]
fn request_tile_data() -> bool {
    #[cfg(target_os = "linux")]
    {
        const SYS_ARCH_PRCTL: usize = 158;
        const ARCH_REQ_XCOMP_PERM: usize = 0x1023;
        const XFEATURE_XTILEDATA: usize = 18;
        let ret: isize;
        // SAFETY: the arch_prctl system call with two integer arguments; it writes no
        // memory of ours. `syscall` clobbers rcx and r11.
        unsafe {
            core::arch::asm!(
                "syscall",
                inlateout("rax") SYS_ARCH_PRCTL => ret,
                in("rdi") ARCH_REQ_XCOMP_PERM,
                in("rsi") XFEATURE_XTILEDATA,
                lateout("rcx") _,
                lateout("r11") _,
                options(nostack),
            );
        }
        ret == 0
    }
    #[cfg(not(target_os = "linux"))]
    true
}
