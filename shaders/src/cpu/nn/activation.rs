//! The activations: GELU, `x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))` (the exact form, as
//! Burn's and PyTorch's default), with its derivative `Phi(x) + x phi(x)`; and ReLU, whose
//! backward pass passes the gradient where the output is positive (Burn's rule). ReLU has
//! no arithmetic: with one 16-bit format in and out, it and its gradient run on the bits
//! (the same values as the f32 path, neither widened nor rounded).

use crate::cpu::Isa;
use crate::cpu::cast::{self, CpuFloat, Format};
use crate::cpu::multiversion::multiversion;
use crate::cpu::parallel;

use super::math::{erf, exp};
use super::{CHUNK, NnError, check, map_binary, map_unary};

const FRAC_1_SQRT_2: f32 = core::f32::consts::FRAC_1_SQRT_2;
/// `1 / sqrt(2 pi)`.
const FRAC_1_SQRT_2PI: f32 = 0.398_942_3;

multiversion! {
    fn gelu_f32(x: &mut [f32]) {
        for v in x {
            let u = *v;
            *v = 0.5 * u * (1.0 + erf(u * FRAC_1_SQRT_2));
        }
    }
}

multiversion! {
    /// `g * gelu'(x)`, into `g`.
    fn gelu_backward_f32(x: &[f32], g: &mut [f32]) {
        for (x, g) in x.iter().zip(g) {
            let cdf = 0.5 * (1.0 + erf(x * FRAC_1_SQRT_2));
            let pdf = FRAC_1_SQRT_2PI * exp(-0.5 * x * x);
            *g *= x.mul_add(pdf, cdf);
        }
    }
}

/// `y = gelu(x)`, computed in f32.
///
/// # Errors
/// [`NnError::Length`] when `y` is not as long as `x`.
pub fn gelu<I: CpuFloat, O: CpuFloat>(isa: Isa, x: &[I], y: &mut [O]) -> Result<(), NnError> {
    check("gelu output", x.len(), y.len())?;
    map_unary(isa, x, y, |b| gelu_f32(isa, b));
    Ok(())
}

/// `dx = grad * gelu'(x)`, computed in f32.
///
/// # Errors
/// [`NnError::Length`] when the three lengths differ.
pub fn gelu_backward<X: CpuFloat, G: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[X],
    grad: &[G],
    dx: &mut [O],
) -> Result<(), NnError> {
    check("gelu gradient", x.len(), grad.len())?;
    check("gelu input gradient", x.len(), dx.len())?;
    map_binary(isa, x, grad, dx, |x, g| gelu_backward_f32(isa, x, g));
    Ok(())
}

multiversion! {
    fn relu_f32(x: &mut [f32]) {
        // NaN stays NaN, as in PyTorch's ReLU (Flex's `x.max(0)` makes it 0): an overflow
        // upstream stays visible.
        x.iter_mut().for_each(|v| *v = if *v < 0.0 { 0.0 } else { *v });
    }
}

multiversion! {
    /// `g` where `y > 0`, else 0, into `g`.
    fn relu_backward_f32(y: &[f32], g: &mut [f32]) {
        y.iter().zip(g).for_each(|(y, g)| *g = if *y > 0.0 { *g } else { 0.0 });
    }
}

/// `y = max(x, 0)` (NaN stays NaN).
///
/// # Errors
/// [`NnError::Length`] when `y` is not as long as `x`.
pub fn relu<I: CpuFloat, O: CpuFloat>(isa: Isa, x: &[I], y: &mut [O]) -> Result<(), NnError> {
    check("relu output", x.len(), y.len())?;
    match half_infinity(I::FORMAT, O::FORMAT) {
        // One 16-bit format in and out: the bits, neither widened nor rounded.
        Some(inf) => {
            let x = cast::bits::<I, u16>(x);
            parallel::chunks(cast::bits_mut::<O, u16>(y), CHUNK, |c, y| {
                relu_bits(isa, parallel::chunk(x, CHUNK, c), y, inf)
            })
        }
        None => map_unary(isa, x, y, |b| relu_f32(isa, b)),
    }
    Ok(())
}

/// `dx = grad` where the output `y` is positive, else 0.
///
/// # Errors
/// [`NnError::Length`] when the three lengths differ.
pub fn relu_backward<Y: CpuFloat, G: CpuFloat, O: CpuFloat>(
    isa: Isa,
    y: &[Y],
    grad: &[G],
    dx: &mut [O],
) -> Result<(), NnError> {
    check("relu gradient", y.len(), grad.len())?;
    check("relu input gradient", y.len(), dx.len())?;
    match half_infinity(Y::FORMAT, G::FORMAT).filter(|_| G::FORMAT == O::FORMAT) {
        // One 16-bit format for all three: the gradient's bits passed or cleared.
        Some(inf) => {
            let (y, g) = (cast::bits::<Y, u16>(y), cast::bits::<G, u16>(grad));
            parallel::chunks(cast::bits_mut::<O, u16>(dx), CHUNK, |c, dx| {
                let (y, g) = (parallel::chunk(y, CHUNK, c), parallel::chunk(g, CHUNK, c));
                relu_backward_bits(isa, y, g, dx, inf)
            })
        }
        None => map_binary(isa, y, grad, dx, |y, g| relu_backward_f32(isa, y, g)),
    }
    Ok(())
}

/// The bits of +infinity where `a` and `b` are one 16-bit format; `None` otherwise (f32, or
/// two formats, take the f32 path).
fn half_infinity(a: Format, b: Format) -> Option<u16> {
    match (a, b) {
        (Format::Bf16, Format::Bf16) => Some(half::bf16::INFINITY.to_bits()),
        (Format::F16, Format::F16) => Some(half::f16::INFINITY.to_bits()),
        _ => None,
    }
}

multiversion! {
    /// [`relu_f32`] on the bits of a 16-bit format whose +infinity is `inf`: a value with
    /// its sign set, neither -0 nor NaN (magnitude in `1..=inf`), becomes +0.
    fn relu_bits(x: &[u16], y: &mut [u16], inf: u16) {
        for (x, y) in x.iter().zip(y) {
            let magnitude = x & 0x7fff;
            let negative = (x & 0x8000 != 0) & (magnitude != 0) & (magnitude <= inf);
            // A mask, not a branch: signs at random mispredict one.
            *y = x & u16::from(negative).wrapping_sub(1);
        }
    }
}

multiversion! {
    /// [`relu_backward_f32`] on the bits of a 16-bit format whose +infinity is `inf`: `g`
    /// where `y` is positive (its sign clear, not 0, not NaN), else +0.
    fn relu_backward_bits(y: &[u16], g: &[u16], dx: &mut [u16], inf: u16) {
        for ((y, g), dx) in y.iter().zip(g).zip(dx) {
            let positive = (*y != 0) & (*y <= inf);
            *dx = g & u16::from(positive).wrapping_neg();
        }
    }
}
