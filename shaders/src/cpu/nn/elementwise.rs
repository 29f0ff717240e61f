//! The elementwise arithmetic of activations: a binary op of two tensors of one shape, and
//! an op with a scalar, in f32 on values read in any format. In f32 the result is the
//! IEEE operation on the two values rounded to the output format once, the same as Flex's
//! ops on bf16 and f16 (which widen, operate and round value by value) but a block at a
//! time; the scalar is kept in f32 (Flex rounds it to the tensor's format first). An
//! operand repeated along the other's leading and trailing dimensions (a batch norm's
//! `[1, C, 1, 1]` statistic, a bias's `[1, 1, W]`) is read where it lies, not expanded.

use crate::cpu::Isa;
use crate::cpu::cast::{self, CpuFloat};
use crate::cpu::multiversion::multiversion;

use super::{BLOCK, NnError, check, map_binary, map_unary, map_unary_at};

/// An arithmetic op.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
}

multiversion! {
    /// `b = a op b`.
    fn binary_f32(op: BinaryOp, a: &[f32], b: &mut [f32]) {
        let pairs = a.iter().zip(b.iter_mut());
        match op {
            BinaryOp::Add => pairs.for_each(|(a, b)| *b += a),
            BinaryOp::Sub => pairs.for_each(|(a, b)| *b = a - *b),
            BinaryOp::Mul => pairs.for_each(|(a, b)| *b *= a),
            BinaryOp::Div => pairs.for_each(|(a, b)| *b = a / *b),
        }
    }
}

multiversion! {
    /// `a = a op s`.
    pub(super) fn scalar_f32(op: BinaryOp, a: &mut [f32], s: f32) {
        match op {
            BinaryOp::Add => a.iter_mut().for_each(|a| *a += s),
            BinaryOp::Sub => a.iter_mut().for_each(|a| *a -= s),
            BinaryOp::Mul => a.iter_mut().for_each(|a| *a *= s),
            BinaryOp::Div => a.iter_mut().for_each(|a| *a /= s),
        }
    }
}

multiversion! {
    /// `x = x op y`.
    fn binary_into_f32(op: BinaryOp, x: &mut [f32], y: &[f32]) {
        let pairs = x.iter_mut().zip(y);
        match op {
            BinaryOp::Add => pairs.for_each(|(x, y)| *x += y),
            BinaryOp::Sub => pairs.for_each(|(x, y)| *x -= y),
            BinaryOp::Mul => pairs.for_each(|(x, y)| *x *= y),
            BinaryOp::Div => pairs.for_each(|(x, y)| *x /= y),
        }
    }
}

multiversion! {
    /// `a = s op a` (`+` and `*` as `binary_f32` orders them, the right operand first).
    fn scalar_left_f32(op: BinaryOp, a: &mut [f32], s: f32) {
        match op {
            BinaryOp::Add => a.iter_mut().for_each(|a| *a += s),
            BinaryOp::Sub => a.iter_mut().for_each(|a| *a = s - *a),
            BinaryOp::Mul => a.iter_mut().for_each(|a| *a *= s),
            BinaryOp::Div => a.iter_mut().for_each(|a| *a = s / *a),
        }
    }
}

/// Which side of [`binary_broadcast`]'s op the repeated operand is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Broadcast {
    /// `out = b op a`.
    Left,
    /// `out = a op b`.
    Right,
}

/// `out = a op b` (or `b op a`, see [`Broadcast`]) value by value in f32, where `a` and
/// `out` are `[outer, kept, inner]` and `b` is `[kept]`, repeated along `outer` and
/// `inner` (a batch norm's `[1, C, 1, 1]` statistic against `[N, C, H, W]` is `[N, C, H *
/// W]`; a bias's `[1, 1, W]` against `[B, T, W]` is `[B * T, W, 1]`). The values of
/// [`binary`] on `b` expanded, without expanding it.
///
/// ```
/// use burn_amp_kernels::cpu::{Isa, nn};
///
/// // Two rows of three, minus each row's own value.
/// let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
/// let mut y = [0f32; 6];
/// let (op, side) = (nn::BinaryOp::Sub, nn::Broadcast::Right);
/// nn::binary_broadcast(Isa::detect(), op, &x, &[1.0f32, 4.0], [1, 2, 3], side, &mut y)?;
/// assert_eq!(y, [0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
/// # Ok::<(), nn::NnError>(())
/// ```
///
/// # Errors
/// [`NnError::Length`] when `a` or `out` does not have `outer * kept * inner` values or `b`
/// does not have `kept`.
pub fn binary_broadcast<A: CpuFloat, B: CpuFloat, O: CpuFloat>(
    isa: Isa,
    op: BinaryOp,
    a: &[A],
    b: &[B],
    [outer, kept, inner]: [usize; 3],
    side: Broadcast,
    out: &mut [O],
) -> Result<(), NnError> {
    let len = outer.saturating_mul(kept).saturating_mul(inner);
    check("left operand", len, a.len())?;
    check("right operand", kept, b.len())?;
    check("output", len, out.len())?;
    if len == 0 {
        return Ok(());
    }
    let b: Vec<f32> = crate::cpu::cast::to_vec(isa, b);
    map_unary_at(isa, a, out, |start, block| {
        // The block in runs over which `b`'s place is fixed (inner > 1) or its values are
        // consecutive (inner = 1).
        let mut done = 0;
        while done < block.len() {
            let i = start + done;
            let k = (i / inner) % kept;
            let run = if inner > 1 {
                inner - i % inner
            } else {
                kept - k
            };
            let end = (done + run).min(block.len());
            let run = &mut block[done..end];
            match (inner > 1, side) {
                (true, Broadcast::Right) => scalar_f32(isa, op, run, b[k]),
                (true, Broadcast::Left) => scalar_left_f32(isa, op, run, b[k]),
                (false, Broadcast::Right) => binary_into_f32(isa, op, run, &b[k..]),
                (false, Broadcast::Left) => binary_f32(isa, op, &b[k..], run),
            }
            done += run.len();
        }
    });
    Ok(())
}

/// `out = a op b`, value by value, in f32.
///
/// # Errors
/// [`NnError::Length`] when the three lengths differ.
pub fn binary<A: CpuFloat, B: CpuFloat, O: CpuFloat>(
    isa: Isa,
    op: BinaryOp,
    a: &[A],
    b: &[B],
    out: &mut [O],
) -> Result<(), NnError> {
    check("right operand", a.len(), b.len())?;
    check("output", a.len(), out.len())?;
    map_binary(isa, a, b, out, |a, b| binary_f32(isa, op, a, b));
    Ok(())
}

/// `out = round(a) + b`, value by value: `a` rounded to `B`'s format first, then added
/// to `b` in f32 and rounded to `out`'s type once. These are the bits of casting `a` to
/// `b`'s dtype and adding the two there (a cast's gradient added to the gradient its
/// input already has), in one pass that writes the rounded `a` nowhere.
///
/// ```
/// use burn_amp_kernels::cpu::{Isa, nn};
/// use half::bf16;
///
/// let a = [1.0f32 + 1.0 / 512.0, -2.0];
/// let b = [bf16::from_f32(1.0), bf16::from_f32(0.5)];
/// let mut out = [bf16::ZERO; 2];
/// nn::rounded_sum(Isa::detect(), &a, &b, &mut out)?;
/// // 1 + 2^-9 rounds to 1 in bf16 first: 1 + 1, not 2 + 2^-9 rounded.
/// assert_eq!(out.map(bf16::to_f32), [2.0, -1.5]);
/// # Ok::<(), nn::NnError>(())
/// ```
///
/// # Errors
/// [`NnError::Length`] when the three lengths differ.
pub fn rounded_sum<A: CpuFloat, B: CpuFloat, O: CpuFloat>(
    isa: Isa,
    a: &[A],
    b: &[B],
    out: &mut [O],
) -> Result<(), NnError> {
    check("right operand", a.len(), b.len())?;
    check("output", a.len(), out.len())?;
    let format = B::FORMAT;
    map_binary(isa, a, b, out, |a, b| {
        let mut rounded = [0f32; BLOCK];
        let rounded = &mut rounded[..a.len()];
        cast::round_block(isa, format, a, rounded);
        binary_f32(isa, BinaryOp::Add, rounded, b);
    });
    Ok(())
}

/// `out = (a * b) * s`, value by value, in f32: the product rounded to f32, then scaled.
/// With `s` a power of two the scaling is exact, so `(g * x) * 2` has the bits of
/// `g * x + g * x` (the gradient of `x * x`, summed from its two operands), in one pass.
///
/// # Errors
/// [`NnError::Length`] when the three lengths differ.
pub fn scaled_product<A: CpuFloat, B: CpuFloat, O: CpuFloat>(
    isa: Isa,
    a: &[A],
    b: &[B],
    s: f32,
    out: &mut [O],
) -> Result<(), NnError> {
    check("right operand", a.len(), b.len())?;
    check("output", a.len(), out.len())?;
    map_binary(isa, a, b, out, |a, b| {
        binary_f32(isa, BinaryOp::Mul, a, b);
        scalar_f32(isa, BinaryOp::Mul, b, s);
    });
    Ok(())
}

/// `out = a op s`, value by value, in f32.
///
/// # Errors
/// [`NnError::Length`] when `out` is not as long as `a`.
pub fn scalar<A: CpuFloat, O: CpuFloat>(
    isa: Isa,
    op: BinaryOp,
    a: &[A],
    s: f32,
    out: &mut [O],
) -> Result<(), NnError> {
    check("output", a.len(), out.len())?;
    map_unary(isa, a, out, |a| scalar_f32(isa, op, a, s));
    Ok(())
}
