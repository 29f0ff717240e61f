//! Which instruction set a CPU kernel runs with. An [`Isa`] can only be made for a CPU that
//! has it (by [`Isa::detect`] or [`Isa::new`]), so a kernel handed one may use its
//! instructions: the check happens once, where the value is made, and the value is passed
//! down to every kernel that needs it.

use core::fmt;

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
}

impl IsaLevel {
    /// Every level, portable first.
    pub const ALL: [IsaLevel; 3] = [IsaLevel::Portable, IsaLevel::Avx2, IsaLevel::Avx512Bf16];

    /// The level's name, as CPU flags spell it.
    pub fn name(self) -> &'static str {
        match self {
            IsaLevel::Portable => "portable",
            IsaLevel::Avx2 => "avx2+fma+f16c",
            IsaLevel::Avx512Bf16 => "avx512f+avx512_bf16",
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Isa {
    level: IsaLevel,
}

impl Isa {
    /// The portable reference, on any CPU.
    pub const PORTABLE: Isa = Isa {
        level: IsaLevel::Portable,
    };

    /// The best level this CPU runs.
    pub fn detect() -> Isa {
        let level = IsaLevel::ALL
            .into_iter()
            .rev()
            .find(|l| l.available())
            .unwrap_or(IsaLevel::Portable);
        Isa { level }
    }

    /// `level`, if this CPU runs it.
    pub fn new(level: IsaLevel) -> Option<Isa> {
        level.available().then_some(Isa { level })
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
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.level.name())
    }
}
