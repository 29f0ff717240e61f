//! Softmax and log-softmax over rows (the last dimension of a contiguous tensor), with the
//! maximum subtracted first and the sum of exponentials in f32, and their backward passes.
//!
//! A row holding NaN gives NaN throughout; a row of only `-inf` (fully masked) gives NaN,
//! as Burn's and PyTorch's softmax do.

use crate::cpu::Isa;
use crate::cpu::cast::{self, CpuFloat};
use crate::cpu::erased::{Floats, FloatsMut, typed, typed_mut};
use crate::cpu::multiversion::multiversion;
use crate::cpu::parallel;

use super::math::exp;
use super::{NnError, check, check_rows, dot, fold, rows_per_task, sum};

multiversion! {
    /// The largest value of `x` (NaN are passed over: they reach the result through the
    /// exponentials), `-inf` for an empty row.
    fn row_max(x: &[f32]) -> f32 {
        let mut acc = [f32::NEG_INFINITY; 16];
        let chunks = x.chunks_exact(16);
        let tail = chunks.remainder();
        for c in chunks {
            for i in 0..16 {
                acc[i] = acc[i].max(c[i]);
            }
        }
        for (i, v) in tail.iter().enumerate() {
            acc[i] = acc[i].max(*v);
        }
        acc.into_iter().fold(f32::NEG_INFINITY, f32::max)
    }
}

multiversion! {
    /// `x = exp(x - shift)`, returning the sum of the results.
    fn exp_shifted(x: &mut [f32], shift: f32) -> f32 {
        let mut acc = [0f32; 16];
        let n = x.len() - x.len() % 16;
        let (body, tail) = x.split_at_mut(n);
        for c in body.chunks_exact_mut(16) {
            for i in 0..16 {
                c[i] = exp(c[i] - shift);
                acc[i] += c[i];
            }
        }
        for (i, v) in tail.iter_mut().enumerate() {
            *v = exp(*v - shift);
            acc[i] += *v;
        }
        fold(acc)
    }
}

multiversion! {
    /// `x = x / d`.
    fn divide(x: &mut [f32], d: f32) {
        x.iter_mut().for_each(|v| *v /= d);
    }
}

multiversion! {
    /// `x = x - a - b`, in that order.
    fn subtract_twice(x: &mut [f32], a: f32, b: f32) {
        x.iter_mut().for_each(|v| *v = *v - a - b);
    }
}

multiversion! {
    /// `x = exp(x)`.
    fn exp_all(x: &mut [f32]) {
        x.iter_mut().for_each(|v| *v = exp(*v));
    }
}

multiversion! {
    /// `g = y * (g - s)`: a softmax row's input gradient from its output `y` and output
    /// gradient `g`, `s` being `dot(g, y)`.
    fn softmax_grad(y: &[f32], g: &mut [f32], s: f32) {
        y.iter().zip(g.iter_mut()).for_each(|(y, g)| *g = y * (*g - s));
    }
}

multiversion! {
    /// `g = g - e * s`: a log-softmax row's input gradient, `e` the exponential of its output,
    /// `s` the sum of its output gradient.
    fn log_softmax_grad(e: &[f32], g: &mut [f32], s: f32) {
        e.iter().zip(g.iter_mut()).for_each(|(e, g)| *g = (-e).mul_add(s, *g));
    }
}

/// Runs `f` on f32 copies of each row of `x` and writes the row it leaves into `y`.
fn rows<I: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[I],
    y: &mut [O],
    row: usize,
    f: impl Fn(&mut [f32]) + Sync,
) {
    rows_erased(isa, I::floats(x), O::floats_mut(y), row, &f)
}

/// [`rows`] for any types: not generic, so compiled here (`erased`).
fn rows_erased(
    isa: Isa,
    x: Floats<'_>,
    y: FloatsMut<'_>,
    row: usize,
    f: &(dyn Fn(&mut [f32]) + Sync),
) {
    typed!(x, |x| typed_mut!(y, |y| rows_typed(isa, x, y, row, f)))
}

fn rows_typed<I: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[I],
    y: &mut [O],
    row: usize,
    f: &(dyn Fn(&mut [f32]) + Sync),
) {
    let task = rows_per_task(row) * row;
    parallel::chunks(y, task, |t, y| {
        let x = parallel::chunk(x, task, t);
        let mut buf = vec![0f32; row];
        for (x, y) in x.chunks(row).zip(y.chunks_mut(row)) {
            cast::convert_block(isa, x, &mut buf);
            f(&mut buf);
            cast::convert_block(isa, &buf, y);
        }
    });
}

/// Runs `f` on f32 copies of each row of `a` and `b` and writes the row it leaves in the
/// second into `out`.
fn rows2<A: CpuFloat, B: CpuFloat, O: CpuFloat>(
    isa: Isa,
    a: &[A],
    b: &[B],
    out: &mut [O],
    row: usize,
    f: impl Fn(&mut [f32], &mut [f32]) + Sync,
) {
    let (a, b) = (A::floats(a), B::floats(b));
    rows2_erased(isa, a, b, O::floats_mut(out), row, &f)
}

/// [`rows2`] for any types: not generic, so compiled here (`erased`).
fn rows2_erased(
    isa: Isa,
    a: Floats<'_>,
    b: Floats<'_>,
    out: FloatsMut<'_>,
    row: usize,
    f: &(dyn Fn(&mut [f32], &mut [f32]) + Sync),
) {
    typed!(a, |a| typed!(b, |b| typed_mut!(out, |out| rows2_typed(
        isa, a, b, out, row, f
    ))))
}

fn rows2_typed<A: CpuFloat, B: CpuFloat, O: CpuFloat>(
    isa: Isa,
    a: &[A],
    b: &[B],
    out: &mut [O],
    row: usize,
    f: &(dyn Fn(&mut [f32], &mut [f32]) + Sync),
) {
    let task = rows_per_task(row) * row;
    parallel::chunks(out, task, |t, out| {
        let (a, b) = (parallel::chunk(a, task, t), parallel::chunk(b, task, t));
        let (mut wa, mut wb) = (vec![0f32; row], vec![0f32; row]);
        for ((a, b), out) in a.chunks(row).zip(b.chunks(row)).zip(out.chunks_mut(row)) {
            cast::convert_block(isa, a, &mut wa);
            cast::convert_block(isa, b, &mut wb);
            f(&mut wa, &mut wb);
            cast::convert_block(isa, &wb, out);
        }
    });
}

fn check_all(len: usize, row: usize, others: &[(&'static str, usize)]) -> Result<(), NnError> {
    check_rows(len, row)?;
    others.iter().try_for_each(|(what, n)| check(what, len, *n))
}

/// `y = softmax(x)` over rows of `row` values.
///
/// # Errors
/// [`NnError::Rows`] when `x` is not whole rows, [`NnError::Length`] when `y` differs in
/// length.
pub fn softmax<I: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[I],
    y: &mut [O],
    row: usize,
) -> Result<(), NnError> {
    forward(isa, x, y, row, false)
}

/// `y = log_softmax(x) = (x - max) - ln(sum(exp(x - max)))` over rows of `row` values.
///
/// # Errors
/// As [`softmax`].
pub fn log_softmax<I: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[I],
    y: &mut [O],
    row: usize,
) -> Result<(), NnError> {
    forward(isa, x, y, row, true)
}

fn forward<I: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[I],
    y: &mut [O],
    row: usize,
    log: bool,
) -> Result<(), NnError> {
    check_all(x.len(), row, &[("output", y.len())])?;
    rows(isa, x, y, row, |r| {
        let m = row_max(isa, r);
        if log {
            let mut e = r.to_vec();
            let s = exp_shifted(isa, &mut e, m);
            subtract_twice(isa, r, m, s.ln());
        } else {
            let s = exp_shifted(isa, r, m);
            divide(isa, r, s);
        }
    });
    Ok(())
}

/// `dx = y * (dy - sum(dy * y))` over rows: the gradient of softmax's input from its
/// output `y` and the output's gradient `dy`.
///
/// # Errors
/// As [`softmax`], for `dy` and `dx` against `y`.
pub fn softmax_backward<Y: CpuFloat, G: CpuFloat, O: CpuFloat>(
    isa: Isa,
    y: &[Y],
    dy: &[G],
    dx: &mut [O],
    row: usize,
) -> Result<(), NnError> {
    backward(isa, y, dy, dx, row, false)
}

/// `dx = dy - exp(y) * sum(dy)` over rows: the gradient of log-softmax's input from its
/// output `y` and the output's gradient `dy`.
///
/// # Errors
/// As [`softmax_backward`].
pub fn log_softmax_backward<Y: CpuFloat, G: CpuFloat, O: CpuFloat>(
    isa: Isa,
    y: &[Y],
    dy: &[G],
    dx: &mut [O],
    row: usize,
) -> Result<(), NnError> {
    backward(isa, y, dy, dx, row, true)
}

fn backward<Y: CpuFloat, G: CpuFloat, O: CpuFloat>(
    isa: Isa,
    y: &[Y],
    dy: &[G],
    dx: &mut [O],
    row: usize,
    log: bool,
) -> Result<(), NnError> {
    let lengths = [("output gradient", dy.len()), ("input gradient", dx.len())];
    check_all(y.len(), row, &lengths)?;
    rows2(isa, y, dy, dx, row, |y, g| {
        if log {
            let s = sum(isa, g);
            exp_all(isa, y);
            log_softmax_grad(isa, y, g, s);
        } else {
            let s = dot(isa, g, y);
            softmax_grad(isa, y, g, s);
        }
    });
    Ok(())
}
