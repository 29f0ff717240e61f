//! The `nn` kernels (`burn_amp_kernels::cpu::nn`) on Flex tensors: softmax, layer norm,
//! GELU and ReLU, dropout masks and `mask_fill`, forward and backward (the arithmetic is
//! `arithmetic`'s), each
//! reading its operands in their own dtype (a view is made contiguous first) and writing a
//! new contiguous tensor. `takes_*` say which tensors they take; the rest go to Flex.

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::nn::{self, LayerNormStats};
use burn_tensor::ops::IntTensorOps;
use burn_tensor::{BoolStore, DType, Distribution, ElementConversion, IntDType, Shape};

use super::layout::contiguous;
use super::tensor::{converted, format, from_vec, to_fill, values, values_f32};
use crate::dtype::with_float;

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
