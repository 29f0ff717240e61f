//! Layer norm over rows: `y = (x - mean) / sqrt(var + eps) * gamma + beta` with the mean and
//! the (biased) variance of each row computed in f32 in two passes, and its backward pass,
//! which gives the input's gradient and sums the gradients of `gamma` and `beta` over the
//! rows in f32.

use crate::cpu::Isa;
use crate::cpu::cast::{self, CpuFloat};
use crate::cpu::erased::{Floats, FloatsMut, typed, typed_mut};
use crate::cpu::multiversion::multiversion;
use crate::cpu::parallel;

use super::{NnError, check, check_rows, dot16, rows_per_task, sum16};

/// What a layer norm keeps for its backward pass: each row's mean and `1 / sqrt(var + eps)`.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNormStats {
    /// The mean of each row.
    pub mean: Vec<f32>,
    /// The reciprocal of each row's standard deviation (with `eps`).
    pub rstd: Vec<f32>,
}

multiversion! {
    /// One row normalised in place; its mean and reciprocal standard deviation.
    fn forward_row(x: &mut [f32], gamma: &[f32], beta: Option<&[f32]>, eps: f32) -> (f32, f32) {
        let n = x.len() as f32;
        let mean = sum16(x) / n;
        x.iter_mut().for_each(|v| *v -= mean);
        let var = dot16(x, x) / n;
        let rstd = 1.0 / (var + eps).sqrt();
        match beta {
            Some(beta) => x
                .iter_mut()
                .zip(gamma)
                .zip(beta)
                .for_each(|((v, g), b)| *v = (*v * rstd).mul_add(*g, *b)),
            None => x.iter_mut().zip(gamma).for_each(|(v, g)| *v = *v * rstd * g),
        }
        (mean, rstd)
    }
}

multiversion! {
    /// One row's backward pass: `g` holds the output's gradient and is left holding the
    /// input's; the row's terms are added to `dgamma` and `dbeta`.
    fn backward_row(
        x: &mut [f32],
        g: &mut [f32],
        gamma: &[f32],
        stats: (f32, f32),
        dgamma: &mut [f32],
        dbeta: &mut [f32],
    ) {
        let (mean, rstd) = stats;
        let n = x.len() as f32;
        // x becomes x-hat; dbeta and dgamma take the row; g becomes g * gamma.
        for ((((x, g), gamma), dg), db) in x
            .iter_mut()
            .zip(g.iter_mut())
            .zip(gamma)
            .zip(dgamma.iter_mut())
            .zip(dbeta.iter_mut())
        {
            *x = (*x - mean) * rstd;
            *db += *g;
            *dg = g.mul_add(*x, *dg);
            *g *= gamma;
        }
        let a = sum16(g) / n;
        let b = dot16(g, x) / n;
        x.iter().zip(g.iter_mut()).for_each(|(x, g)| *g = rstd * ((-x).mul_add(b, *g) - a));
    }
}

/// `y = layer_norm(x)` over rows of `row` values (`gamma`, `beta`: `row` values each);
/// returns each row's statistics for the backward pass.
///
/// # Errors
/// [`NnError::Rows`] when `x` is not whole rows, [`NnError::Length`] when `y`, `gamma` or
/// `beta` does not fit.
pub fn layer_norm<I: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[I],
    gamma: &[f32],
    beta: Option<&[f32]>,
    eps: f32,
    y: &mut [O],
    row: usize,
) -> Result<LayerNormStats, NnError> {
    let (x, y) = (I::floats(x), O::floats_mut(y));
    forward_erased(isa, x, gamma, beta, eps, y, row)
}

/// [`layer_norm`] for any types: not generic, so compiled here (`erased`).
fn forward_erased(
    isa: Isa,
    x: Floats<'_>,
    gamma: &[f32],
    beta: Option<&[f32]>,
    eps: f32,
    y: FloatsMut<'_>,
    row: usize,
) -> Result<LayerNormStats, NnError> {
    typed!(x, |x| typed_mut!(y, |y| forward_typed(
        isa, x, gamma, beta, eps, y, row
    )))
}

fn forward_typed<I: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[I],
    gamma: &[f32],
    beta: Option<&[f32]>,
    eps: f32,
    y: &mut [O],
    row: usize,
) -> Result<LayerNormStats, NnError> {
    check_rows(x.len(), row)?;
    check("layer norm output", x.len(), y.len())?;
    check("gamma", row, gamma.len())?;
    if let Some(beta) = beta {
        check("beta", row, beta.len())?;
    }
    let n = x.len() / row;
    let mut stats = LayerNormStats {
        mean: vec![0.0; n],
        rstd: vec![0.0; n],
    };
    let task = rows_per_task(row);
    parallel::chunks3(
        (y, task * row),
        (&mut stats.mean, task),
        (&mut stats.rstd, task),
        |t, y, mean, rstd| {
            let x = parallel::chunk(x, task * row, t);
            let mut buf = vec![0f32; row];
            for (i, (x, y)) in x.chunks(row).zip(y.chunks_mut(row)).enumerate() {
                cast::convert_block(isa, x, &mut buf);
                (mean[i], rstd[i]) = forward_row(isa, &mut buf, gamma, beta, eps);
                cast::convert_block(isa, &buf, y);
            }
        },
    );
    Ok(stats)
}

/// The gradients of a layer norm from its output's gradient `dy`: the input's into `dx`,
/// and `(dgamma, dbeta)` returned, summed over the rows in f32.
///
/// # Errors
/// As [`layer_norm`], and [`NnError::Length`] when `stats` is not one entry a row.
pub fn layer_norm_backward<X: CpuFloat, G: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[X],
    dy: &[G],
    gamma: &[f32],
    stats: &LayerNormStats,
    dx: &mut [O],
    row: usize,
) -> Result<(Vec<f32>, Vec<f32>), NnError> {
    let (x, dy, dx) = (X::floats(x), G::floats(dy), O::floats_mut(dx));
    backward_erased(isa, x, dy, gamma, stats, dx, row)
}

/// [`layer_norm_backward`] for any types: not generic, so compiled here (`erased`).
fn backward_erased(
    isa: Isa,
    x: Floats<'_>,
    dy: Floats<'_>,
    gamma: &[f32],
    stats: &LayerNormStats,
    dx: FloatsMut<'_>,
    row: usize,
) -> Result<(Vec<f32>, Vec<f32>), NnError> {
    typed!(x, |x| typed!(dy, |dy| typed_mut!(dx, |dx| {
        backward_typed(isa, x, dy, gamma, stats, dx, row)
    })))
}

fn backward_typed<X: CpuFloat, G: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[X],
    dy: &[G],
    gamma: &[f32],
    stats: &LayerNormStats,
    dx: &mut [O],
    row: usize,
) -> Result<(Vec<f32>, Vec<f32>), NnError> {
    check_rows(x.len(), row)?;
    check("output gradient", x.len(), dy.len())?;
    check("input gradient", x.len(), dx.len())?;
    check("gamma", row, gamma.len())?;
    let n = x.len() / row;
    check("means", n, stats.mean.len())?;
    check("deviations", n, stats.rstd.len())?;
    let task = rows_per_task(row);
    // Each task sums its rows' terms into its own slot; the slots are added in order, so
    // the result does not depend on which thread ran which task.
    let mut partials = vec![(Vec::new(), Vec::new()); n.div_ceil(task)];
    parallel::chunks2((dx, task * row), (&mut partials, 1), |t, dx, partial| {
        let (x, dy) = (
            parallel::chunk(x, task * row, t),
            parallel::chunk(dy, task * row, t),
        );
        let (mean, rstd) = (
            parallel::chunk(&stats.mean, task, t),
            parallel::chunk(&stats.rstd, task, t),
        );
        let (mut dgamma, mut dbeta) = (vec![0f32; row], vec![0f32; row]);
        let (mut wx, mut wg) = (vec![0f32; row], vec![0f32; row]);
        let rows = x.chunks(row).zip(dy.chunks(row)).zip(dx.chunks_mut(row));
        for (i, ((x, dy), dx)) in rows.enumerate() {
            cast::convert_block(isa, x, &mut wx);
            cast::convert_block(isa, dy, &mut wg);
            backward_row(
                isa,
                &mut wx,
                &mut wg,
                gamma,
                (mean[i], rstd[i]),
                &mut dgamma,
                &mut dbeta,
            );
            cast::convert_block(isa, &wg, dx);
        }
        partial[0] = (dgamma, dbeta);
    });
    let (mut dgamma, mut dbeta) = (vec![0f32; row], vec![0f32; row]);
    for (g, b) in &partials {
        dgamma.iter_mut().zip(g).for_each(|(a, g)| *a += g);
        dbeta.iter_mut().zip(b).for_each(|(a, b)| *a += b);
    }
    Ok((dgamma, dbeta))
}
