//! The `nn` kernels (`burn_amp_kernels::cpu::nn`) on Flex tensors: softmax, layer norm,
//! GELU, elementwise arithmetic, dropout masks and `mask_fill`, forward and backward, each
//! reading its operands in their own dtype (a view is made contiguous first) and writing a
//! new contiguous tensor. `takes_*` say which tensors they take; the rest go to Flex.

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::cast::{self, CpuFloat};
use burn_amp_kernels::cpu::nn::{self, BinaryOp, LayerNormStats};
use burn_tensor::ops::{FloatTensorOps, IntTensorOps};
use burn_tensor::{BoolStore, DType, Distribution, ElementConversion, FloatDType, IntDType, Shape};

use super::layout::contiguous;
use super::tensor::{converted, format, from_vec, to_fill, values, values_f32};
use crate::dtype::with_float;

/// A new contiguous tensor of `$shape` in `$dtype`, its values written by `$body` into `$y`
/// (a zeroed slice of the dtype's element type).
macro_rules! new_tensor {
    ($shape:expr, $dtype:expr, $y:ident => $body:expr) => {{
        let shape: Shape = $shape;
        with_float!($dtype, O => {
            let mut out = to_fill::<O>(shape.num_elements());
            {
                let $y: &mut [O] = &mut out;
                $body;
            }
            from_vec::<O>(out, shape)
        })
    }};
}

/// Whether the row kernels (softmax, layer norm) take `t`: a float dtype they read, at
/// least one dimension, a non-empty last one.
pub(crate) fn takes_rows(t: &FlexTensor) -> bool {
    let shape = t.layout().shape();
    format(t.dtype()).is_some() && shape.num_dims() >= 1 && shape[shape.num_dims() - 1] > 0
}

/// Whether the elementwise kernels take `t`.
pub(crate) fn takes(t: &FlexTensor) -> bool {
    format(t.dtype()).is_some()
}

fn row_len(t: &FlexTensor) -> usize {
    let shape = t.layout().shape();
    shape[shape.num_dims() - 1]
}

/// Softmax (`log`: log-softmax) over the last dimension, in f32.
pub(crate) fn softmax(isa: Isa, x: &FlexTensor, log: bool) -> FlexTensor {
    let x = contiguous(x);
    let row = row_len(&x);
    new_tensor!(x.layout().shape().clone(), DType::F32, y => with_float!(x.dtype(), I => {
        let x = values::<I>(&x);
        if log {
            nn::log_softmax(isa, x, y, row)
        } else {
            nn::softmax(isa, x, y, row)
        }
        .expect("whole rows, equal lengths")
    }))
}

/// The gradient of a softmax's input (in `dtype`) from its output `y` and the output's
/// gradient `dy`.
pub(crate) fn softmax_backward(
    isa: Isa,
    y: &FlexTensor,
    dy: &FlexTensor,
    log: bool,
    dtype: DType,
) -> FlexTensor {
    let (y, dy) = (contiguous(y), contiguous(dy));
    let row = row_len(&y);
    new_tensor!(y.layout().shape().clone(), dtype, dx => with_float!(y.dtype(), Y => with_float!(dy.dtype(), G => {
        let (y, dy) = (values::<Y>(&y), values::<G>(&dy));
        if log {
            nn::log_softmax_backward(isa, y, dy, dx, row)
        } else {
            nn::softmax_backward(isa, y, dy, dx, row)
        }
        .expect("whole rows, equal lengths")
    })))
}

/// Whether the layer norm kernel takes these operands: rows it reads, `gamma` and `beta`
/// of one row's length.
pub(crate) fn takes_layer_norm(
    x: &FlexTensor,
    gamma: &FlexTensor,
    beta: Option<&FlexTensor>,
) -> bool {
    let row = |t: &FlexTensor| takes(t) && t.layout().num_elements() == row_len(x);
    takes_rows(x) && row(gamma) && beta.is_none_or(row)
}

/// Layer norm over the last dimension, in f32, with its statistics.
pub(crate) fn layer_norm(
    isa: Isa,
    x: &FlexTensor,
    gamma: &FlexTensor,
    beta: Option<&FlexTensor>,
    epsilon: f64,
) -> (FlexTensor, LayerNormStats) {
    let x = contiguous(x);
    let row = row_len(&x);
    let (gamma, beta) = (values_f32(isa, gamma), beta.map(|b| values_f32(isa, b)));
    let stats: LayerNormStats;
    let y = new_tensor!(x.layout().shape().clone(), DType::F32, y => with_float!(x.dtype(), I => {
        let s = nn::layer_norm(isa, values::<I>(&x), &gamma, beta.as_deref(), epsilon as f32, y, row)
            .expect("operands checked by takes_layer_norm");
        stats = s;
    }));
    (y, stats)
}

/// The gradients of a layer norm: the input's (in `dtypes[0]`), gamma's and beta's (in
/// `dtypes[1]`, `dtypes[2]`), from the output's gradient `dy`.
pub(crate) fn layer_norm_backward(
    isa: Isa,
    x: &FlexTensor,
    dy: &FlexTensor,
    gamma: &FlexTensor,
    stats: &LayerNormStats,
    dtypes: [DType; 3],
) -> [FlexTensor; 3] {
    let (x, dy) = (contiguous(x), contiguous(dy));
    let row = row_len(&x);
    let gamma_f32 = values_f32(isa, gamma);
    let sums: (Vec<f32>, Vec<f32>);
    let dx = new_tensor!(x.layout().shape().clone(), dtypes[0], dx => with_float!(x.dtype(), X => with_float!(dy.dtype(), G => {
        let s = nn::layer_norm_backward(isa, values::<X>(&x), values::<G>(&dy), &gamma_f32, stats, dx, row)
            .expect("operands checked by takes_layer_norm");
        sums = s;
    })));
    let (dgamma, dbeta) = sums;
    let vector = |v: Vec<f32>, dtype: DType| {
        with_float!(dtype, D => from_vec::<D>(
            converted::<f32, D>(isa, &v),
            Shape::new([row]),
        ))
    };
    [dx, vector(dgamma, dtypes[1]), vector(dbeta, dtypes[2])]
}

/// GELU, in `x`'s dtype.
pub(crate) fn gelu(isa: Isa, x: &FlexTensor) -> FlexTensor {
    let x = contiguous(x);
    new_tensor!(x.layout().shape().clone(), x.dtype(), y => with_float!(x.dtype(), I => {
        nn::gelu(isa, values::<I>(&x), y).expect("equal lengths")
    }))
}

/// The gradient of GELU's input, in `x`'s dtype.
pub(crate) fn gelu_backward(isa: Isa, x: &FlexTensor, dy: &FlexTensor) -> FlexTensor {
    let (x, dy) = (contiguous(x), contiguous(dy));
    new_tensor!(x.layout().shape().clone(), x.dtype(), dx => with_float!(x.dtype(), X => with_float!(dy.dtype(), G => {
        nn::gelu_backward(isa, values::<X>(&x), values::<G>(&dy), dx).expect("equal lengths")
    })))
}

/// ReLU, in `x`'s dtype.
pub(crate) fn relu(isa: Isa, x: &FlexTensor) -> FlexTensor {
    let x = contiguous(x);
    new_tensor!(x.layout().shape().clone(), x.dtype(), y => with_float!(x.dtype(), I => {
        nn::relu(isa, values::<I>(&x), y).expect("equal lengths")
    }))
}

/// The gradient of ReLU's input from its output `y`, in `dtype`.
pub(crate) fn relu_backward(isa: Isa, y: &FlexTensor, dy: &FlexTensor, dtype: DType) -> FlexTensor {
    let (y, dy) = (contiguous(y), contiguous(dy));
    new_tensor!(y.layout().shape().clone(), dtype, dx => with_float!(y.dtype(), Y => with_float!(dy.dtype(), G => {
        nn::relu_backward(isa, values::<Y>(&y), values::<G>(&dy), dx).expect("equal lengths")
    })))
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
        return with_float!(dtype, D => from_vec::<D>(converted::<f32, D>(isa, &sums), shape.clone()));
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
    [outer, kept, inner]: [usize; 3],
) -> Vec<f32> {
    use rayon::prelude::*;
    let mut sums = vec![0f32; kept];
    if values.is_empty() {
        return sums;
    }
    // About this many values a task.
    let per_task = (1usize << 15).div_ceil(outer * inner).max(1);
    sums.par_chunks_mut(per_task)
        .enumerate()
        .for_each(|(t, sums)| {
            let k0 = t * per_task;
            for a in 0..outer {
                let row = &values[(a * kept + k0) * inner..][..sums.len() * inner];
                if inner == 1 {
                    cast::add_widened(isa, row, sums).expect("equal lengths");
                } else {
                    for (sum, run) in sums.iter_mut().zip(row.chunks_exact(inner)) {
                        *sum += cast::sum_widened(isa, run);
                    }
                }
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
    // Expanded as views (stride 0 along the repeated dimensions), then made contiguous.
    let expand = |t: &FlexTensor| match t.layout().shape() == &shape {
        true => contiguous(t),
        false => contiguous(&Flex::float_expand(t.clone(), shape.clone())),
    };
    let (a, b) = (expand(a), expand(b));
    new_tensor!(shape, dtype, y => with_float!(a.dtype(), A => with_float!(b.dtype(), B => {
        nn::binary(isa, op, values::<A>(&a), values::<B>(&b), y).expect("equal lengths")
    })))
}

/// `a op s`, in `dtype`.
pub(crate) fn scalar(isa: Isa, op: BinaryOp, a: &FlexTensor, s: f32, dtype: DType) -> FlexTensor {
    let a = contiguous(a);
    new_tensor!(a.layout().shape().clone(), dtype, y => with_float!(a.dtype(), A => {
        nn::scalar(isa, op, values::<A>(&a), s, y).expect("equal lengths")
    }))
}

/// A key for one random tensor, drawn from Flex's own generator (so `Flex::seed` makes the
/// masks repeatable).
fn key() -> [u32; 2] {
    let draw = Flex::int_random(
        Shape::new([2]),
        Distribution::Uniform(0.0, 4_294_967_296.0),
        &Default::default(),
        IntDType::I64,
    );
    let words = draw.as_slice::<i64>().expect("a new contiguous i64 tensor");
    [words[0] as u32, words[1] as u32]
}

/// A tensor of Bernoulli(`p`) draws (`p` in `[0, 1]`) in `dtype`.
pub(crate) fn bernoulli(isa: Isa, shape: Shape, p: f64, dtype: DType) -> FlexTensor {
    let key = key();
    new_tensor!(shape, dtype, y => nn::bernoulli(isa, key, p, y))
}

/// Whether the mask kernel takes `x` masked by `mask`: a float dtype it reads, a mask of one
/// byte a value (`Bool(Native)` or `Bool(U8)`) and of `x`'s rank, each dimension `x`'s or 1.
pub(crate) fn takes_mask(x: &FlexTensor, mask: &FlexTensor) -> bool {
    let (xs, ms) = (x.layout().shape(), mask.layout().shape());
    format(x.dtype()).is_some()
        && matches!(mask.dtype(), DType::Bool(BoolStore::Native | BoolStore::U8))
        && xs.num_dims() == ms.num_dims()
        && xs
            .as_slice()
            .iter()
            .zip(ms.as_slice())
            .all(|(x, m)| m == x || *m == 1)
}

/// `x` with `value` where `mask` is set, in `x`'s dtype (`value` rounded to it as Flex
/// rounds it): the mask read through its strides, broadcast along its dimensions of 1.
pub(crate) fn mask_fill(x: &FlexTensor, mask: &FlexTensor, value: f64) -> FlexTensor {
    let x = contiguous(x);
    let shape = x.layout().shape().clone();
    let layout = mask.layout();
    // A dimension of 1 is read at index 0 whatever the tensor's index: stride 0.
    let strides: Vec<isize> = layout
        .shape()
        .as_slice()
        .iter()
        .zip(layout.strides())
        .map(|(d, s)| if *d == 1 { 0 } else { *s })
        .collect();
    let mask_layout = nn::MaskLayout {
        shape: shape.as_slice(),
        strides: &strides,
        offset: layout.start_offset(),
    };
    with_float!(x.dtype(), T => {
        let mut out = to_fill::<T>(shape.num_elements());
        nn::mask_fill(values::<T>(&x), mask.bytes(), mask_layout, value.elem::<T>(), &mut out)
            .expect("a mask of x's rank (`takes_mask`), inside its own bytes");
        from_vec::<T>(out, shape)
    })
}
