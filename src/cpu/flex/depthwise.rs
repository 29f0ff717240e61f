//! Depthwise convolutions (a group a channel, one output channel a group) on Flex through
//! burn-amp's direct kernels (`burn_amp_kernels::cpu::conv::depthwise` and its gradients):
//! the input and output gradient rounded to the compute format plane by plane, the weight
//! rounded once, every sum in f32; the weight and bias gradients in their own dtypes.

use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::cast::Format;
use burn_amp_kernels::cpu::conv::{self, ConvShape};
use burn_amp_kernels::cpu::gemm::Kernel;
use burn_tensor::{DType, Shape};

use super::super::ConvGeometry;
use super::conv::Operands;
use super::layout::contiguous;
use super::tensor::{converted, from_vec, to_fill, values, values_f32};
use crate::dtype::with_float;

/// A depthwise convolution the kernels take, with its shapes.
#[derive(Clone, Debug)]
pub(crate) struct DepthwisePlan {
    shape: ConvShape,
    /// The output's shape (rank 3 for a 1-d convolution, 4 for a 2-d one).
    out: Shape,
}

impl DepthwisePlan {
    /// The plan of a depthwise convolution (`groups` = channels > 1, a weight of `[channels,
    /// 1, kernel..]`), or `None` for any other.
    pub(crate) fn of(
        x: &FlexTensor,
        weight: &FlexTensor,
        bias: Option<&FlexTensor>,
        g: &ConvGeometry,
    ) -> Option<DepthwisePlan> {
        let ops = Operands::of(x, weight, bias)?;
        let (xs, ws) = (ops.x, ops.weight);
        let c = xs[1];
        if g.transposed.is_some() || c < 2 || g.groups != c || ws[0] != c || ws[1] != 1 {
            return None;
        }
        if bias.is_some_and(|b| b.layout().num_elements() != c) {
            return None;
        }
        let shape = ops.conv_shape(c, ops.spatial(xs), g);
        let out = ops.shape(c, shape.out_size()?);
        Some(DepthwisePlan { shape, out })
    }

    /// The weight in f32, rounded to `format` (once per call: every plane reads it).
    fn weight(&self, kernel: Kernel, weight: &FlexTensor) -> Vec<f32> {
        let format = kernel.format();
        let mut w = values_f32(kernel.isa(), weight);
        if format != Format::F32 {
            w.iter_mut().for_each(|v| *v = format.round(*v));
        }
        w
    }

    /// The convolution of `x` by `weight` plus `bias`, operands rounded to `kernel`'s
    /// format, in `out`.
    pub(crate) fn forward(
        &self,
        kernel: Kernel,
        x: &FlexTensor,
        weight: &FlexTensor,
        bias: Option<&FlexTensor>,
        out: DType,
    ) -> FlexTensor {
        let (isa, format) = (kernel.isa(), kernel.format());
        let x = contiguous(x);
        let w = self.weight(kernel, weight);
        let bias = bias.map(|b| values_f32(isa, b));
        with_float!(x.dtype(), X => with_float!(out, O => {
            let mut y = to_fill::<O>(self.out.num_elements());
            conv::depthwise(isa, &self.shape, format, values::<X>(&x), &w, bias.as_deref(), &mut y)
                .expect("shapes checked by the plan");
            from_vec::<O>(y, self.out.clone())
        }))
    }

    /// The gradients of `x`, `weight` and the bias (those `wants` asks for) from the
    /// output's gradient `dy`, each in its dtype of `dtypes`.
    pub(crate) fn backward(
        &self,
        kernel: Kernel,
        x: &FlexTensor,
        weight: &FlexTensor,
        dy: &FlexTensor,
        wants: [bool; 3],
        dtypes: [DType; 3],
    ) -> [Option<FlexTensor>; 3] {
        let (isa, format) = (kernel.isa(), kernel.format());
        let dy = contiguous(dy);
        let shape = &self.shape;
        let dx = wants[0].then(|| {
            let w = self.weight(kernel, weight);
            let dims = x.layout().shape().clone();
            with_float!(dy.dtype(), G => with_float!(dtypes[0], D => {
                let mut dx = to_fill::<D>(dims.num_elements());
                conv::depthwise_input_grad(isa, shape, format, values::<G>(&dy), &w, &mut dx)
                    .expect("shapes checked by the plan");
                from_vec::<D>(dx, dims)
            }))
        });
        let [dw, db] = if wants[1] || wants[2] {
            let x = contiguous(x);
            let mut dw = vec![0f32; weight.layout().num_elements()];
            let mut db = vec![0f32; shape.channels];
            with_float!(x.dtype(), X => with_float!(dy.dtype(), G => {
                let (x, g) = (values::<X>(&x), values::<G>(&dy));
                conv::depthwise_weight_grad(isa, shape, format, x, g, &mut dw, Some(&mut db))
                    .expect("shapes checked by the plan")
            }));
            let to = |v: Vec<f32>, dtype: DType, dims: Shape| with_float!(dtype, D => from_vec::<D>(converted::<f32, D>(isa, &v), dims));
            [
                wants[1].then(|| to(dw, dtypes[1], weight.layout().shape().clone())),
                wants[2].then(|| to(db, dtypes[2], Shape::new([shape.channels]))),
            ]
        } else {
            [None, None]
        };
        [dx, dw, db]
    }
}
