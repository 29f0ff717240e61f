//! The elementwise arithmetic of activations on Flex tensors (`burn_amp_kernels::cpu::nn`'s
//! `binary` and `scalar`): operands of one shape, or one repeated along the other's leading
//! and trailing dimensions (a batch norm's `[1, C, 1, 1]` statistic, a bias's `[1, 1, W]`)
//! read where it lies; and the sums a repeated operand's gradient needs, in one pass over
//! the gradient (`unbroadcast`, and `block_dots` for the products of a `mul` or `div`;
//! `scaled_and_dots` where the other operand's gradient is wanted from the same pass).

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::cast::{self, CpuFloat};
use burn_amp_kernels::cpu::nn::{self, BinaryOp, Broadcast};
use burn_tensor::ops::FloatTensorOps;
use burn_tensor::{DType, FloatDType, Shape};

use super::layout::contiguous;
use super::nn::takes;
use super::tensor::{converted, format, from_vec, to_fill, values};
use crate::dtype::with_float;

/// Whether the f32 statistics ops (a square, a mean over a dimension) take `x`: f32, in a
/// layout the elementwise kernels read.
pub(crate) fn takes_f32(x: &FlexTensor) -> bool {
    x.dtype() == DType::F32 && takes(x)
}

/// `x * x` of an f32 tensor (Burn's `powi(2)`): one product on the elementwise kernel.
pub(crate) fn square(isa: Isa, x: &FlexTensor) -> FlexTensor {
    binary(isa, BinaryOp::Mul, x, x, DType::F32)
}

/// Whether the elementwise kernels take `a op b`: dtypes they read, shapes that broadcast.
pub(crate) fn takes_binary(a: &FlexTensor, b: &FlexTensor) -> bool {
    takes(a) && takes(b) && broadcast_shape(a.layout().shape(), b.layout().shape()).is_some()
}

/// The shape `a` and `b` broadcast to: one rank, each dimension equal or 1 on one side.
pub(crate) fn broadcast_shape(a: &Shape, b: &Shape) -> Option<Shape> {
    if a.num_dims() != b.num_dims() {
        return None;
    }
    let dims = a
        .as_slice()
        .iter()
        .zip(b.as_slice())
        .map(|(&x, &y)| match (x, y) {
            _ if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        });
    Some(Shape::from(dims.collect::<Option<Vec<_>>>()?))
}

/// `g`, the gradient of an operand broadcast to `g`'s shape, summed back to the operand's
/// `shape` (in f32, whatever `g`'s dtype) and given in `dtype`.
pub(crate) fn unbroadcast(isa: Isa, g: FlexTensor, shape: &Shape, dtype: DType) -> FlexTensor {
    if g.layout().shape() == shape {
        return g;
    }
    if let Some(blocks) = kept_block(g.layout().shape(), shape)
        && format(g.dtype()).is_some()
    {
        let g = contiguous(&g);
        let sums = with_float!(g.dtype(), G => block_sums(isa, values::<G>(&g), blocks));
        return from_sums(isa, &sums, shape, dtype);
    }
    let mut sum = super::cast::cast(isa, g, FloatDType::F32);
    for (d, &n) in shape.as_slice().iter().enumerate() {
        if n == 1 && sum.layout().shape()[d] != 1 {
            sum = Flex::float_sum_dim(sum, d);
        }
    }
    let dtype = FloatDType::from(dtype);
    super::cast::cast(isa, sum, dtype)
}

/// A tensor of `shape` in `dtype` holding `sums` (f32 sums of a gradient, one a value).
pub(crate) fn from_sums(isa: Isa, sums: &[f32], shape: &Shape, dtype: DType) -> FlexTensor {
    with_float!(dtype, D => from_vec::<D>(converted::<f32, D>(isa, sums), shape.clone()))
}

/// `[outer, kept, inner]`: the sizes of the dimensions before, within and after the one
/// run of dimensions `shape` keeps of `full` (a batch norm's `[1, C, 1, 1]` of `[N, C, H,
/// W]`, a bias's `[1, 1, W]`), where every dimension outside it is 1 in `shape`; `None`
/// for other broadcasts (ranks that differ, kept dimensions apart).
fn kept_block(full: &Shape, shape: &Shape) -> Option<[usize; 3]> {
    let (full, shape) = (full.as_slice(), shape.as_slice());
    if full.len() != shape.len() {
        return None;
    }
    // The first and last dimension `shape` keeps (of a size other than 1 in `full`).
    let kept = |d: &usize| full[*d] != 1 && shape[*d] != 1;
    // None kept (a sum of everything): one run of all the values.
    let first = (0..full.len()).find(kept).unwrap_or(0);
    let last = (0..full.len()).rev().find(kept).map_or(first, |d| d + 1);
    let within = (first..last).all(|d| shape[d] == full[d]);
    let outside = (0..first).chain(last..full.len()).all(|d| shape[d] == 1);
    let size = |r: core::ops::Range<usize>| full[r].iter().product::<usize>();
    (within && outside).then(|| [size(0..first), size(first..last), size(last..full.len())])
}

/// The sums over `outer` and `inner` of `values` (`[outer, kept, inner]`, see
/// [`kept_block`]), one per kept position, in f32: each in the same order whatever the
/// threads (each thread takes its own kept positions over the whole tensor). A
/// convolution's bias gradient is the `[batch, channels, plane]` case.
pub(super) fn block_sums<G: CpuFloat>(
    isa: Isa,
    values: &[G],
    blocks @ [_, _, inner]: [usize; 3],
) -> Vec<f32> {
    block_tasks(values, blocks, |row, _, sums| {
        if inner == 1 {
            // Each value its own place: the row added into the sums.
            cast::add_widened(isa, row, sums).expect("equal lengths")
        } else {
            for (sum, run) in sums.iter_mut().zip(row.chunks_exact(inner)) {
                *sum += cast::sum_widened(isa, run);
            }
        }
    })
}

/// For `values` `[outer, kept, inner]`, one f32 sum a place of `kept`, threaded over the
/// places (about 2^15 values a task) so that each is summed in one order whatever the
/// threads: for each `a` of `outer` in turn, `add(row, at, sums)` with a task's `sums`, the
/// `sums.len() * inner` values of `(a, its places)` and where they start in `values`.
fn block_tasks<G: Sync>(
    values: &[G],
    [outer, kept, inner]: [usize; 3],
    add: impl Fn(&[G], usize, &mut [f32]) + Sync,
) -> Vec<f32> {
    use rayon::prelude::*;
    let mut sums = vec![0f32; kept];
    if values.is_empty() {
        return sums;
    }
    let per_task = (1usize << 15).div_ceil(outer * inner).max(1);
    sums.par_chunks_mut(per_task)
        .enumerate()
        .for_each(|(t, sums)| {
            let k0 = t * per_task;
            for a in 0..outer {
                let at = (a * kept + k0) * inner;
                add(&values[at..][..sums.len() * inner], at, sums);
            }
        });
    sums
}

/// `a op b` (shapes that broadcast, see [`takes_binary`]), in `dtype`: an operand of 1
/// along a dimension the other has is read as repeated along it.
pub(crate) fn binary(
    isa: Isa,
    op: BinaryOp,
    a: &FlexTensor,
    b: &FlexTensor,
    dtype: DType,
) -> FlexTensor {
    let shape = broadcast_shape(a.layout().shape(), b.layout().shape())
        .expect("shapes that broadcast (takes_binary)");
    let full = |t: &FlexTensor| t.layout().shape() == &shape;
    // One operand whole, the other repeated along its leading and trailing dimensions:
    // that one read where it lies.
    let repeated = match (full(a), full(b)) {
        (true, false) => {
            kept_block(&shape, b.layout().shape()).map(|k| (a, b, k, Broadcast::Right))
        }
        (false, true) => kept_block(&shape, a.layout().shape()).map(|k| (b, a, k, Broadcast::Left)),
        _ => None,
    };
    if let Some((x, s, blocks, side)) = repeated {
        let (x, s) = (contiguous(x), contiguous(s));
        return new_tensor!(shape, dtype, y => with_float!(x.dtype(), X => with_float!(s.dtype(), S => {
            nn::binary_broadcast(isa, op, values::<X>(&x), values::<S>(&s), blocks, side, y)
                .expect("a kept block of the output's shape")
        })));
    }
    // Otherwise expanded as views (stride 0 along the repeated dimensions), then made
    // contiguous.
    let expand = |t: &FlexTensor| match full(t) {
        true => contiguous(t),
        false => contiguous(&Flex::float_expand(t.clone(), shape.clone())),
    };
    let (a, b) = (expand(a), expand(b));
    new_tensor!(shape, dtype, y => with_float!(a.dtype(), A => with_float!(b.dtype(), B => {
        nn::binary(isa, op, values::<A>(&a), values::<B>(&b), y).expect("equal lengths")
    })))
}

/// `a` cast to `b`'s 16-bit dtype and added to `b` there (`nn::rounded_sum`: the bits of
/// the cast, then the sum), in one pass; `None` where the kernel does not take them
/// (shapes that differ, a `b` that is not 16-bit, a dtype it does not read).
pub(crate) fn rounded_sum(isa: Isa, a: &FlexTensor, b: &FlexTensor) -> Option<FlexTensor> {
    let shape = a.layout().shape();
    let taken =
        shape == b.layout().shape() && matches!(b.dtype(), DType::BF16 | DType::F16) && takes(a);
    if !taken {
        return None;
    }
    let (a, b) = (contiguous(a), contiguous(b));
    Some(
        new_tensor!(shape.clone(), b.dtype(), y => with_float!(a.dtype(), A => with_float!(b.dtype(), B => {
            nn::rounded_sum(isa, values::<A>(&a), values::<B>(&b), y).expect("equal lengths")
        }))),
    )
}

/// The `[outer, kept, inner]` blocks over which [`block_dots`] sums `g * x` for an operand
/// of `shape` (see [`kept_block`]); `None` where its kernels do not take the operands (`x`
/// not of `g`'s shape and dtype, a dtype they do not read, or values of `shape` innermost).
/// [`scaled_and_dots`] matches `block_dots`' bits only where both take the same cases, so
/// both ask this.
fn dot_blocks(g: &FlexTensor, x: &FlexTensor, shape: &Shape) -> Option<[usize; 3]> {
    let full = g.layout().shape();
    let blocks = kept_block(full, shape)?;
    let taken = x.layout().shape() == full && g.dtype() == x.dtype() && format(g.dtype()).is_some();
    (taken && blocks[2] != 1).then_some(blocks)
}

/// The gradient of an operand of `shape` repeated to `g`'s shape in `g * x` (for `x` the
/// other operand, of `g`'s shape and dtype): `sum(g * x)` over the places each of its
/// values was repeated to, in f32, one pass over `g` and `x` without writing their
/// products. `None` where the kernels do not take it (other shapes, dtypes, or a repeated
/// operand whose values lie innermost).
pub(crate) fn block_dots(
    isa: Isa,
    g: &FlexTensor,
    x: &FlexTensor,
    shape: &Shape,
) -> Option<Vec<f32>> {
    let blocks = dot_blocks(g, x, shape)?;
    let (g, x) = (contiguous(g), contiguous(x));
    Some(with_float!(g.dtype(), G => {
        let xs = values::<G>(&x);
        let inner = blocks[2];
        block_tasks(values::<G>(&g), blocks, |row, at, sums| {
            for (j, (sum, run)) in sums.iter_mut().zip(row.chunks_exact(inner)).enumerate() {
                let x = &xs[at + j * inner..][..inner];
                *sum += cast::dot_widened(isa, run, x).expect("equal lengths");
            }
        })
    }))
}

/// `g op r` in `dtype` (`r` repeated over `g`'s shape, see [`kept_block`]) and, one per
/// place of `r`, the sum over it of `g * x` (`x` of `g`'s shape), in one pass over `g`
/// (`nn::scaled_and_dots`): the gradients of both operands of `x * r` or `x / r` at once.
/// The bits of [`binary`] and of [`block_dots`]' sums; `None` where `block_dots` does not
/// take the operands.
pub(crate) fn scaled_and_dots(
    isa: Isa,
    op: BinaryOp,
    g: &FlexTensor,
    x: &FlexTensor,
    r: &FlexTensor,
    dtype: DType,
) -> Option<(FlexTensor, Vec<f32>)> {
    let full = g.layout().shape();
    let blocks @ [outer, kept, _] = dot_blocks(g, x, r.layout().shape())?;
    format(r.dtype())?;
    let (g, x, r) = (contiguous(g), contiguous(x), contiguous(r));
    let mut dots = vec![0f32; outer * kept];
    let scaled = new_tensor!(full.clone(), dtype, y => with_float!(g.dtype(), G => {
        with_float!(r.dtype(), R => {
            let (g, x, r) = (values::<G>(&g), values::<G>(&x), values::<R>(&r));
            nn::scaled_and_dots(isa, op, g, x, r, blocks, y, &mut dots)
                .expect("a kept block of the gradient's shape")
        })
    }));
    // Summed over the leading dimensions in order, as `block_dots` sums.
    let mut sums = vec![0f32; kept];
    for run in dots.chunks_exact(kept) {
        sums.iter_mut().zip(run).for_each(|(sum, dot)| *sum += dot);
    }
    Some((scaled, sums))
}

/// `a op s`, in `dtype`.
pub(crate) fn scalar(isa: Isa, op: BinaryOp, a: &FlexTensor, s: f32, dtype: DType) -> FlexTensor {
    let a = contiguous(a);
    new_tensor!(a.layout().shape().clone(), dtype, y => with_float!(a.dtype(), A => {
        nn::scalar(isa, op, values::<A>(&a), s, y).expect("equal lengths")
    }))
}

/// `(a * b) * s` (operands of one shape), in `dtype`: the gradient of a square is
/// `(g * x) * 2`, one pass.
pub(crate) fn scaled_product(
    isa: Isa,
    a: &FlexTensor,
    b: &FlexTensor,
    s: f32,
    dtype: DType,
) -> FlexTensor {
    let (a, b) = (contiguous(a), contiguous(b));
    new_tensor!(a.layout().shape().clone(), dtype, y => with_float!(a.dtype(), A => with_float!(b.dtype(), B => {
        nn::scaled_product(isa, values::<A>(&a), values::<B>(&b), s, y).expect("operands of one shape")
    })))
}
