//! The backward pass of `x op s` where `s` is repeated over `x` (a batch norm's `[1, C, 1,
//! 1]` scale or standard deviation): the full operand's gradient `g op s` and the products
//! its repeated operand's gradient sums, in one pass over `g` rather than one each.

use crate::cpu::Isa;
use crate::cpu::cast::{self, CpuFloat};

use super::elementwise::{BinaryOp, scalar_f32};
use super::{BLOCK, CHUNK, NnError, check, parallel};

/// For `g` and `x` laid out as `[outer, kept, inner]` and `s` one value a place of `kept`:
/// `out = g op s[k]` value by value in f32 (the IEEE operation, rounded to `out`'s format
/// once: the values [`binary_broadcast`](super::binary_broadcast) gives), and for each run
/// of `inner` values `(a, k)` the dot product of `g`'s and `x`'s values there in
/// `dots[a * kept + k]` (the sum [`cast::dot_widened`] gives).
///
/// Summed over `a` in order, the dots are the gradient of `s` in `x * s`; `out` is the
/// gradient of `x` in `x * s` (`op` [`BinaryOp::Mul`]) or `x / s` ([`BinaryOp::Div`]).
///
/// ```
/// use burn_amp_kernels::cpu::{Isa, nn};
///
/// // [outer 1, kept 2, inner 2]: g's runs [1, 2] and [3, 4], s = [2, 10].
/// let (g, x) = ([1.0f32, 2.0, 3.0, 4.0], [1.0f32, 1.0, 0.5, 0.5]);
/// let (mut out, mut dots) = ([0f32; 4], [0f32; 2]);
/// nn::scaled_and_dots(Isa::detect(), nn::BinaryOp::Mul, &g, &x, &[2.0f32, 10.0], [1, 2, 2], &mut out, &mut dots)?;
/// assert_eq!(out, [2.0, 4.0, 30.0, 40.0]);
/// assert_eq!(dots, [3.0, 3.5]);
/// # Ok::<(), nn::NnError>(())
/// ```
///
/// # Errors
/// [`NnError::Length`] when `g`, `x` or `out` do not hold `outer * kept * inner` values,
/// `s` `kept` or `dots` `outer * kept`.
#[allow(clippy::too_many_arguments)]
pub fn scaled_and_dots<S: CpuFloat, R: CpuFloat, O: CpuFloat>(
    isa: Isa,
    op: BinaryOp,
    g: &[S],
    x: &[S],
    s: &[R],
    [outer, kept, inner]: [usize; 3],
    out: &mut [O],
    dots: &mut [f32],
) -> Result<(), NnError> {
    let runs = outer.saturating_mul(kept);
    let len = runs.saturating_mul(inner);
    check("gradient", len, g.len())?;
    check("operand", len, x.len())?;
    check("repeated operand", kept, s.len())?;
    check("output", len, out.len())?;
    check("dots", runs, dots.len())?;
    if len == 0 {
        dots.fill(0.0);
        return Ok(());
    }
    let s: Vec<f32> = cast::to_vec(isa, s);
    let per_task = (CHUNK / inner).max(1);
    parallel::chunks2((out, per_task * inner), (dots, per_task), |t, out, dots| {
        let mut wide = [0f32; BLOCK];
        for (j, (out, dot)) in out.chunks_mut(inner).zip(dots).enumerate() {
            let run = t * per_task + j;
            let at = run * inner;
            let (g, x) = (&g[at..at + inner], &x[at..at + inner]);
            *dot = cast::dot_widened(isa, g, x).expect("runs of equal lengths");
            let s = s[run % kept];
            for (g, out) in g.chunks(BLOCK).zip(out.chunks_mut(BLOCK)) {
                let wide = &mut wide[..g.len()];
                cast::convert_block(isa, g, wide);
                scalar_f32(isa, op, wide, s);
                cast::convert_block(isa, &*wide, out);
            }
        }
    });
    Ok(())
}
