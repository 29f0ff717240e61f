//! One body, compiled for each instruction set: `multiversion!` turns a function over f32
//! slices into three copies of the same Rust code, one built with AVX-512F (+ AVX2, FMA,
//! F16C), one with AVX2 + FMA + F16C, one with nothing, and picks the copy the [`Isa`] value
//! it is handed proves. LLVM vectorises each copy for its instructions; the arithmetic is
//! the same IEEE operations in every copy (Rust never contracts `a * b + c` into an FMA on
//! its own, and `mul_add` is fused in all three), so the copies agree bit for bit and the
//! portable one is the reference the tests hold the others to.
//!
//! [`Isa`]: super::Isa

/// `multiversion! { fn name(args) -> ret { body } }` defines `fn name(isa: Isa, args) -> ret`.
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name(isa: $crate::cpu::Isa, $($arg: $ty),*) $(-> $ret)? {
            #[inline(always)]
            fn body($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma,f16c")]
                unsafe fn avx512($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma,f16c")]
                unsafe fn avx2($($arg: $ty),*) $(-> $ret)? {
                    body($($arg),*)
                }
                if isa.has_avx512_bf16() {
                    // SAFETY: the Isa value proves AVX-512F, AVX2, FMA and F16C.
                    return unsafe { avx512($($arg),*) };
                }
                if isa.has_avx2() {
                    // SAFETY: the Isa value proves AVX2, FMA and F16C.
                    return unsafe { avx2($($arg),*) };
                }
            }
            let _ = isa;
            body($($arg),*)
        }
    };
}

pub(crate) use multiversion;
