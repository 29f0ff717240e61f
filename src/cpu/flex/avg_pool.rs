//! Global average pooling on Flex through burn-amp's kernel (`burn_amp_kernels::cpu::
//! conv::global_avg_pool`): an adaptive average pool of a `[batch, channels, h, w]` tensor
//! to `[1, 1]`, in the input's dtype; f32 and bf16 with Flex's bits (each plane summed in
//! f32 in order), f16 summed in f32 where Flex sums in f16. Flex converts a bf16 tensor
//! to f32 and back in each pass and keeps one thread a plane busy with an index per value.

use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::conv;
use burn_tensor::{DType, Shape};

use super::layout::contiguous;
use super::tensor::{format, from_vec, to_fill, values};
use crate::dtype::with_float;

/// The input's shape where the kernel takes an adaptive average pool of `x` to
/// `output_size`: a rank-4 tensor of a dtype it reads, pooled to one value a plane.
pub(crate) fn takes(x: &FlexTensor, output_size: [usize; 2]) -> Option<Shape> {
    format(x.dtype())?;
    let shape = x.layout().shape();
    (shape.num_dims() == 4 && output_size == [1, 1]).then(|| shape.clone())
}

/// The mean of each plane of `x` (`[batch, channels, h, w]`), `[batch, channels, 1, 1]`
/// in `x`'s dtype.
pub(crate) fn forward(x: &FlexTensor) -> FlexTensor {
    let x = contiguous(x);
    let s = x.layout().shape();
    let (out, plane) = (Shape::new([s[0], s[1], 1, 1]), s[2] * s[3]);
    new_tensor!(out, x.dtype(), y => with_float!(x.dtype(), X => {
        conv::global_avg_pool(values::<X>(&x), plane, y).expect("planes of the input's shape")
    }))
}

/// The gradient of [`forward`] for an input of `shape`: each plane its output's gradient
/// `g` divided by the plane's size, in `dtype`.
pub(crate) fn backward(g: &FlexTensor, shape: &Shape, dtype: DType) -> FlexTensor {
    let g = contiguous(g);
    let plane = shape[2] * shape[3];
    new_tensor!(shape.clone(), dtype, dx => with_float!(g.dtype(), G => {
        conv::global_avg_pool_backward(values::<G>(&g), plane, dx)
            .expect("a gradient a plane of the input")
    }))
}
