//! Slices of any of the kernels' element types as one enum, so that the body of a generic
//! entry point is compiled in this crate rather than in its caller's.
//!
//! Rust compiles a generic function where it is instantiated, with that crate's
//! optimization level. A dev build that optimizes its dependencies (a
//! `[profile.dev.package."*"]` override, as burn-amp's workspace has) still compiles the
//! crate under development unoptimized, so `gemm::<bf16, f32, bf16>` called from a model's
//! crate ran its packing unoptimized there, every SIMD intrinsic a function call: such a
//! debug build (and every test suite) trained several times slower than it needed to. Each public generic entry point therefore hands its slices over as
//! [`Floats`] or [`FloatsMut`] to a non-generic function of this crate, which matches the
//! element types ([`typed!`], [`typed_mut!`]) and calls the generic body: every
//! instantiation is made, and optimized, here.

use half::{bf16, f16};

/// A slice of `f32`, `bf16` or `f16`.
#[derive(Clone, Copy)]
pub enum Floats<'a> {
    F32(&'a [f32]),
    Bf16(&'a [bf16]),
    F16(&'a [f16]),
}

/// A mutable slice of `f32`, `bf16` or `f16`.
pub enum FloatsMut<'a> {
    F32(&'a mut [f32]),
    Bf16(&'a mut [bf16]),
    F16(&'a mut [f16]),
}

/// The element types' own side of [`CpuFloat`](super::cast::CpuFloat): what keeps it
/// sealed (this module is not public) and what erases their slices.
pub trait Sealed: Sized {
    /// `s` as the variant of its type.
    fn floats(s: &[Self]) -> Floats<'_>;
    /// `s` as the variant of its type.
    fn floats_mut(s: &mut [Self]) -> FloatsMut<'_>;
}

macro_rules! sealed {
    ($($t:ty => $v:ident),*) => {$(
        impl Sealed for $t {
            #[inline(always)]
            fn floats(s: &[Self]) -> Floats<'_> {
                Floats::$v(s)
            }
            #[inline(always)]
            fn floats_mut(s: &mut [Self]) -> FloatsMut<'_> {
                FloatsMut::$v(s)
            }
        }
    )*};
}
sealed!(f32 => F32, bf16 => Bf16, f16 => F16);

/// `$body` with `$x` bound to the typed slice inside the [`Floats`] `$v`: the body is
/// compiled once per element type, where the macro is used.
macro_rules! typed {
    ($v:expr, |$x:ident| $body:expr) => {
        match $v {
            $crate::cpu::erased::Floats::F32($x) => $body,
            $crate::cpu::erased::Floats::Bf16($x) => $body,
            $crate::cpu::erased::Floats::F16($x) => $body,
        }
    };
}

/// [`typed!`] for a [`FloatsMut`].
macro_rules! typed_mut {
    ($v:expr, |$x:ident| $body:expr) => {
        match $v {
            $crate::cpu::erased::FloatsMut::F32($x) => $body,
            $crate::cpu::erased::FloatsMut::Bf16($x) => $body,
            $crate::cpu::erased::FloatsMut::F16($x) => $body,
        }
    };
}

/// [`typed!`] for a [`Floats`] and a [`FloatsMut`] of one element type (an in and an out
/// slice of one generic type).
macro_rules! typed_same {
    ($v:expr, $w:expr, |$x:ident, $y:ident| $body:expr) => {{
        use $crate::cpu::erased::{Floats, FloatsMut};
        match ($v, $w) {
            (Floats::F32($x), FloatsMut::F32($y)) => $body,
            (Floats::Bf16($x), FloatsMut::Bf16($y)) => $body,
            (Floats::F16($x), FloatsMut::F16($y)) => $body,
            _ => unreachable!("both slices have the one element type of a generic caller"),
        }
    }};
}

pub(crate) use {typed, typed_mut, typed_same};
