//! The ops of a transformer block and a CNN around their products, for tensors in f32, bf16
//! or f16: softmax and log-softmax over rows, layer norm, GELU and ReLU, the elementwise
//! arithmetic of activations, the random masks of dropout, and `mask_fill` (an attention
//! mask read through its broadcast strides). Each reads its operands in their own format
//! and computes in f32 a block at a time (a block of each operand converted on the stack with
//! the [`cast`] kernels, so a bf16 or f16 tensor costs one pass, not a
//! conversion per value), sums in f32, and writes its result in the format asked for; each
//! has its backward pass here too. Long tensors are split over the thread pool
//! ([`parallel`]).
//!
//! The f32 arithmetic is written once and compiled for AVX-512F, for AVX2 + FMA and for no
//! extension (`multiversion`); the portable copy is the reference, and the tests hold the
//! others to it bit for bit. Where an op has a closed form in IEEE arithmetic (add, mul, the
//! backward of a softmax) it is that; where it needs `exp` or `erf`, those are this module's
//! branch-free approximations (`math`), within 2 ulp and 4e-7.
//!
//! ```
//! use burn_amp_kernels::cpu::{Isa, nn};
//! use half::bf16;
//!
//! let x = [1.0f32, 2.0, 3.0, -1.0, 0.0, 1.0].map(bf16::from_f32);
//! let mut y = [0f32; 6];
//! nn::softmax(Isa::detect(), &x, &mut y, 3)?; // two rows of three, summed in f32
//! assert!((y[..3].iter().sum::<f32>() - 1.0).abs() < 1e-6);
//! # Ok::<(), nn::NnError>(())
//! ```

mod activation;
mod elementwise;
mod layer_norm;
mod mask;
pub(crate) mod math;
mod random;
mod repeated;
mod softmax;

pub use activation::{gelu, gelu_backward, relu, relu_backward};
pub use elementwise::{
    BinaryOp, Broadcast, binary, binary_broadcast, rounded_sum, scalar, scaled_product,
};
pub use layer_norm::{LayerNormStats, layer_norm, layer_norm_backward};
pub use mask::{MaskLayout, mask_fill};
pub use random::{bernoulli, philox4x32_10, uniform};
pub use repeated::scaled_and_dots;
pub use softmax::{log_softmax, log_softmax_backward, softmax, softmax_backward};

use super::Isa;
use super::cast::{self, CpuFloat};
use super::erased::{Floats, FloatsMut, typed, typed_mut};

use super::multiversion::multiversion;
use super::parallel;

/// Why an `nn` kernel was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NnError {
    /// Operands that must have as many values as each other do not.
    #[error("{what}: {expected} values expected, {got} given")]
    Length {
        /// Which operand.
        what: &'static str,
        /// What the other operands imply.
        expected: usize,
        /// What it has.
        got: usize,
    },
    /// A mask layout that does not name one stride per dimension of the masked tensor, or
    /// that reaches outside the mask's bytes.
    #[error(
        "a mask of {len} bytes read at offset {offset} with strides {strides:?} does not fit \
         a tensor of shape {shape:?}"
    )]
    Mask {
        /// Bytes in the mask.
        len: usize,
        /// The masked tensor's shape.
        shape: Vec<usize>,
        /// The mask's strides.
        strides: Vec<isize>,
        /// The mask's first byte.
        offset: usize,
    },
    /// A row length of zero, or a length that is not a whole number of rows.
    #[error("{len} values are not rows of {row}")]
    Rows {
        /// Values given.
        len: usize,
        /// The row length.
        row: usize,
    },
}

pub(crate) fn check(what: &'static str, expected: usize, got: usize) -> Result<(), NnError> {
    if expected == got {
        Ok(())
    } else {
        Err(NnError::Length {
            what,
            expected,
            got,
        })
    }
}

pub(crate) fn check_rows(len: usize, row: usize) -> Result<(), NnError> {
    if row == 0 || !len.is_multiple_of(row) {
        Err(NnError::Rows { len, row })
    } else {
        Ok(())
    }
}

/// Values a task works on: large enough to outlast its scheduling, small enough that two
/// cores share a 2M-value activation evenly.
pub(crate) const CHUNK: usize = 1 << 14;

/// Values converted to f32 at a time, on the stack (2 KiB an operand).
pub(crate) const BLOCK: usize = 512;

/// `out = f(x)` a block at a time: `f` gets an f32 copy of a block of `x` and leaves the
/// block of the result in it.
pub(crate) fn map_unary<I: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[I],
    out: &mut [O],
    f: impl Fn(&mut [f32]) + Sync,
) {
    map_unary_at(isa, x, out, |_, block| f(block))
}

/// [`map_unary`] where `f` is also told where its block starts in `x`.
pub(crate) fn map_unary_at<I: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[I],
    out: &mut [O],
    f: impl Fn(usize, &mut [f32]) + Sync,
) {
    map_unary_erased(isa, I::floats(x), O::floats_mut(out), &f)
}

/// [`map_unary_at`] for any types: not generic, so compiled here (`erased`).
fn map_unary_erased(
    isa: Isa,
    x: Floats<'_>,
    out: FloatsMut<'_>,
    f: &(dyn Fn(usize, &mut [f32]) + Sync),
) {
    let out = match (&x, out) {
        (Floats::F32(x), FloatsMut::F32(out)) => {
            // f32 both ways: `f` works on the output's block itself (the block copied
            // once, not into a buffer and back).
            debug_assert_eq!(x.len(), out.len());
            parallel::chunks(out, CHUNK, |c, out| {
                let x = parallel::chunk(x, CHUNK, c);
                for (j, (x, out)) in x.chunks(BLOCK).zip(out.chunks_mut(BLOCK)).enumerate() {
                    out.copy_from_slice(x);
                    f(c * CHUNK + j * BLOCK, out);
                }
            });
            return;
        }
        (_, out) => out,
    };
    typed!(x, |x| typed_mut!(out, |out| map_unary_typed(
        isa, x, out, f
    )))
}

fn map_unary_typed<I: CpuFloat, O: CpuFloat>(
    isa: Isa,
    x: &[I],
    out: &mut [O],
    f: &(dyn Fn(usize, &mut [f32]) + Sync),
) {
    debug_assert_eq!(x.len(), out.len());
    parallel::chunks(out, CHUNK, |c, out| {
        let x = parallel::chunk(x, CHUNK, c);
        let mut buf = [0f32; BLOCK];
        for (j, (x, out)) in x.chunks(BLOCK).zip(out.chunks_mut(BLOCK)).enumerate() {
            let buf = &mut buf[..x.len()];
            cast::convert_block(isa, x, buf);
            f(c * CHUNK + j * BLOCK, buf);
            cast::convert_block(isa, &*buf, out);
        }
    });
}

/// `out = f(a, b)` a block at a time: `f` gets f32 copies of a block of each and leaves the
/// block of the result in the second.
pub(crate) fn map_binary<A: CpuFloat, B: CpuFloat, O: CpuFloat>(
    isa: Isa,
    a: &[A],
    b: &[B],
    out: &mut [O],
    f: impl Fn(&[f32], &mut [f32]) + Sync,
) {
    let (a, b) = (A::floats(a), B::floats(b));
    map_binary_erased(isa, a, b, O::floats_mut(out), &f)
}

/// [`map_binary`] for any types: not generic, so compiled here (`erased`).
fn map_binary_erased(
    isa: Isa,
    a: Floats<'_>,
    b: Floats<'_>,
    out: FloatsMut<'_>,
    f: &(dyn Fn(&[f32], &mut [f32]) + Sync),
) {
    let out = match (&a, &b, out) {
        (Floats::F32(a), Floats::F32(b), FloatsMut::F32(out)) => {
            // f32 throughout: `f` reads `a` where it lies and works on the output's block
            // (`b` copied once, not both operands into buffers and the result back).
            debug_assert!(a.len() == out.len() && b.len() == out.len());
            parallel::chunks(out, CHUNK, |c, out| {
                let (a, b) = (parallel::chunk(a, CHUNK, c), parallel::chunk(b, CHUNK, c));
                let blocks = a.chunks(BLOCK).zip(b.chunks(BLOCK));
                for ((a, b), out) in blocks.zip(out.chunks_mut(BLOCK)) {
                    out.copy_from_slice(b);
                    f(a, out);
                }
            });
            return;
        }
        (.., out) => out,
    };
    typed!(a, |a| typed!(b, |b| typed_mut!(out, |out| {
        map_binary_typed(isa, a, b, out, f)
    })))
}

fn map_binary_typed<A: CpuFloat, B: CpuFloat, O: CpuFloat>(
    isa: Isa,
    a: &[A],
    b: &[B],
    out: &mut [O],
    f: &(dyn Fn(&[f32], &mut [f32]) + Sync),
) {
    debug_assert!(a.len() == out.len() && b.len() == out.len());
    parallel::chunks(out, CHUNK, |c, out| {
        let (a, b) = (parallel::chunk(a, CHUNK, c), parallel::chunk(b, CHUNK, c));
        let (mut wa, mut wb) = ([0f32; BLOCK], [0f32; BLOCK]);
        for ((a, b), out) in a
            .chunks(BLOCK)
            .zip(b.chunks(BLOCK))
            .zip(out.chunks_mut(BLOCK))
        {
            let (wa, wb) = (&mut wa[..a.len()], &mut wb[..a.len()]);
            cast::convert_block(isa, a, wa);
            cast::convert_block(isa, b, wb);
            f(wa, wb);
            cast::convert_block(isa, &*wb, out);
        }
    });
}

/// Rows a task works on, for rows of `row` values: about `CHUNK` values a task.
pub(crate) fn rows_per_task(row: usize) -> usize {
    (CHUNK / row.max(1)).max(1)
}

multiversion! {
    /// The sum of `x` ([`sum16`]).
    pub(crate) fn sum(x: &[f32]) -> f32 {
        sum16(x)
    }
}

multiversion! {
    /// The sum of `a[i] * b[i]` ([`dot16`]).
    pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
        dot16(a, b)
    }
}

/// The sum of `x`, in 16 running sums (the same order in every copy), folded pairwise.
#[inline(always)]
pub(crate) fn sum16(x: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let chunks = x.chunks_exact(16);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..16 {
            acc[i] += c[i];
        }
    }
    for (i, v) in tail.iter().enumerate() {
        acc[i] += v;
    }
    fold(acc)
}

/// The sum of `a[i] * b[i]` (fused), in 16 running sums, folded pairwise.
#[inline(always)]
pub(crate) fn dot16(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let n = a.len().min(b.len());
    let whole = n - n % 16;
    for (a, b) in a[..whole].chunks_exact(16).zip(b[..whole].chunks_exact(16)) {
        for i in 0..16 {
            acc[i] = a[i].mul_add(b[i], acc[i]);
        }
    }
    for (i, (a, b)) in a[whole..n].iter().zip(&b[whole..n]).enumerate() {
        acc[i] = a.mul_add(*b, acc[i]);
    }
    fold(acc)
}

/// 16 running sums folded pairwise.
#[inline(always)]
pub(crate) fn fold(mut acc: [f32; 16]) -> f32 {
    let mut width = 8;
    while width > 0 {
        for i in 0..width {
            acc[i] += acc[i + width];
        }
        width /= 2;
    }
    acc[0]
}
