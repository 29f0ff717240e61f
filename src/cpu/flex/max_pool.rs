//! 2-d max pooling on Flex through burn-amp's kernel (`burn_amp_kernels::cpu::conv::
//! max_pool`): in the input's dtype (a maximum is exact), each output the first largest
//! value of its window as Flex picks it, and the gradient added back at the positions the
//! forward pass kept.

use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::conv::{self, ConvShape};
use burn_tensor::{DType, Shape};

use super::super::MaxPool2dArgs;
use super::layout::contiguous;
use super::tensor::{format, from_vec, to_fill, values};
use crate::dtype::with_float;

/// A max pooling the kernel takes, with its shapes.
#[derive(Clone, Debug)]
pub(crate) struct MaxPoolPlan {
    shape: ConvShape,
    input: Shape,
    out: Shape,
}

impl MaxPoolPlan {
    /// The plan of a 2-d max pooling of `x`, or `None` for what the kernel does not take
    /// (other dtypes or ranks, `ceil_mode`, a window that does not fit).
    pub(crate) fn of(x: &FlexTensor, args: &MaxPool2dArgs) -> Option<MaxPoolPlan> {
        format(x.dtype())?;
        let xs = x.layout().shape();
        if xs.num_dims() != 4 || args.ceil_mode {
            return None;
        }
        let shape = ConvShape {
            batch: xs[0],
            channels: xs[1],
            size: [xs[2], xs[3]],
            kernel: args.kernel,
            stride: args.stride,
            padding: args.padding,
            dilation: args.dilation,
        };
        let [oh, ow] = shape.out_size()?;
        // Positions are u32: a plane beyond that goes to Flex.
        u32::try_from(xs[2].checked_mul(xs[3])?).ok()?;
        Some(MaxPoolPlan {
            shape,
            input: xs.clone(),
            out: Shape::new([xs[0], xs[1], oh, ow]),
        })
    }

    /// The pooled `x`, and each output's position in its input plane where `positions`.
    pub(crate) fn forward(
        &self,
        isa: Isa,
        x: &FlexTensor,
        positions: bool,
    ) -> (FlexTensor, Vec<u32>) {
        let x = contiguous(x);
        let n = self.out.num_elements();
        let mut at = if positions { vec![0u32; n] } else { Vec::new() };
        let y = with_float!(x.dtype(), T => {
            let mut y = to_fill::<T>(n);
            let at = positions.then_some(&mut at[..]);
            conv::max_pool(isa, &self.shape, values::<T>(&x), &mut y, at)
                .expect("shapes checked by the plan");
            from_vec::<T>(y, self.out.clone())
        });
        (y, at)
    }

    /// The input's gradient in `dtype`: `grad` added at `positions`.
    pub(crate) fn backward(
        &self,
        grad: &FlexTensor,
        positions: &[u32],
        dtype: DType,
    ) -> FlexTensor {
        let grad = contiguous(grad);
        with_float!(grad.dtype(), G => with_float!(dtype, D => {
            let mut dx = to_fill::<D>(self.input.num_elements());
            conv::max_pool_backward(&self.shape, values::<G>(&grad), positions, &mut dx)
                .expect("positions of the forward pass");
            from_vec::<D>(dx, self.input.clone())
        }))
    }
}
