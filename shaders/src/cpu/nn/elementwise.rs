//! The elementwise arithmetic of activations: a binary op of two tensors of one shape, and
//! an op with a scalar, in f32 on values read in any format. In f32 the result is the
//! IEEE operation on the two values rounded to the output format once, the same as Flex's
//! ops on bf16 and f16 (which widen, operate and round value by value) but a block at a
//! time; the scalar is kept in f32 (Flex rounds it to the tensor's format first).

use crate::cpu::Isa;
use crate::cpu::cast::CpuFloat;
use crate::cpu::multiversion::multiversion;

use super::{NnError, check, map_binary, map_unary};

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
    fn scalar_f32(op: BinaryOp, a: &mut [f32], s: f32) {
        match op {
            BinaryOp::Add => a.iter_mut().for_each(|a| *a += s),
            BinaryOp::Sub => a.iter_mut().for_each(|a| *a -= s),
            BinaryOp::Mul => a.iter_mut().for_each(|a| *a *= s),
            BinaryOp::Div => a.iter_mut().for_each(|a| *a /= s),
        }
    }
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
