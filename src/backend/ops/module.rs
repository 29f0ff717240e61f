//! `ModuleOps`: linear, convolutions, attention and embedding outputs in the compute dtype;
//! layer norm, CTC loss and FFTs in f32; pooling, interpolation and unfolding forwarded.

use burn_tensor::TensorMetadata;
use burn_tensor::backend::Backend;
use burn_tensor::ops::BoolTensor;
use burn_tensor::ops::attention::attention_fallback;
use burn_tensor::ops::{
    AttentionModuleOptions, ConvOptions, ConvTransposeOptions, DeformConv2dBackward,
    DeformConvOptions, FloatTensor, IntTensor, InterpolateOptions, MaxPool1dBackward,
    MaxPool1dWithIndices, MaxPool2dBackward, MaxPool2dWithIndices, ModuleOps, UnfoldOptions,
};

use super::ComputeOp;
use crate::MixedPrecision;
use crate::backend::autocast;
use crate::context::{self, with_policy};
use crate::cost::{Counted, OpClass, OpRow};
use crate::cpu::{ConvGeometry, MaxPool2dArgs, Routed};

/// The compute-class ops of `ModuleOps` written out below, and whether each takes FP8:
/// products of linear layers and convolutions do; attention's products stay in 16 bits (as
/// in Transformer Engine's default recipes), an embedding is a lookup, and no FP8 recipe
/// covers deformable convolutions.
const LINEAR: ComputeOp = ComputeOp::fp8("linear");
const CONV1D: ComputeOp = ComputeOp::fp8("conv1d");
const CONV2D: ComputeOp = ComputeOp::fp8("conv2d");
const CONV3D: ComputeOp = ComputeOp::fp8("conv3d");
const CONV_TRANSPOSE1D: ComputeOp = ComputeOp::fp8("conv_transpose1d");
const CONV_TRANSPOSE2D: ComputeOp = ComputeOp::fp8("conv_transpose2d");
const CONV_TRANSPOSE3D: ComputeOp = ComputeOp::fp8("conv_transpose3d");
const DEFORM_CONV2D: ComputeOp = ComputeOp::no_fp8("deform_conv2d");
const DEFORM_CONV2D_BACKWARD: ComputeOp = ComputeOp::no_fp8("deform_conv2d_backward");
const ATTENTION: ComputeOp = ComputeOp::no_fp8("attention");
const EMBEDDING: ComputeOp = ComputeOp::no_fp8("embedding");

// The other ops of `ModuleOps` written out below, each with its class.
const LAYER_NORM: OpRow = OpRow::new("layer_norm", OpClass::Float32);
const CTC_LOSS: OpRow = OpRow::new("ctc_loss", OpClass::Float32);
const CTC_LOSS_BACKWARD: OpRow = OpRow::new("ctc_loss_backward", OpClass::Float32);
const RFFT: OpRow = OpRow::new("rfft", OpClass::Float32);
const IRFFT: OpRow = OpRow::new("irfft", OpClass::Float32);
const MAX_POOL1D_WITH_INDICES: OpRow = OpRow::new("max_pool1d_with_indices", OpClass::Forwarded);
const MAX_POOL1D_WITH_INDICES_BACKWARD: OpRow = OpRow::new(
    "max_pool1d_with_indices_backward",
    autocast::class::to_widest,
);
const MAX_POOL2D: OpRow = OpRow::new("max_pool2d", OpClass::Forwarded);
const ADAPTIVE_AVG_POOL2D: OpRow = OpRow::new("adaptive_avg_pool2d", OpClass::Forwarded);
const MAX_POOL2D_WITH_INDICES: OpRow = OpRow::new("max_pool2d_with_indices", OpClass::Forwarded);
const MAX_POOL2D_WITH_INDICES_BACKWARD: OpRow = OpRow::new(
    "max_pool2d_with_indices_backward",
    autocast::class::to_widest,
);

/// Every op of `ModuleOps` written out below: the class table's rows for them.
const WRITTEN: [OpRow; 22] = [
    LINEAR.row,
    CONV1D.row,
    CONV2D.row,
    CONV3D.row,
    CONV_TRANSPOSE1D.row,
    CONV_TRANSPOSE2D.row,
    CONV_TRANSPOSE3D.row,
    DEFORM_CONV2D.row,
    DEFORM_CONV2D_BACKWARD.row,
    ATTENTION.row,
    EMBEDDING.row,
    LAYER_NORM,
    CTC_LOSS,
    CTC_LOSS_BACKWARD,
    RFFT,
    IRFFT,
    MAX_POOL1D_WITH_INDICES,
    MAX_POOL1D_WITH_INDICES_BACKWARD,
    MAX_POOL2D,
    MAX_POOL2D_WITH_INDICES,
    MAX_POOL2D_WITH_INDICES_BACKWARD,
    ADAPTIVE_AVG_POOL2D,
];

/// Casts the inputs of a compute-class module op to the compute dtype of `$op` (its
/// context, resolved once).
macro_rules! compute_inputs {
    ($op:expr; $x:ident $(, $t:ident)* $(; $($opt:ident),+)?) => {
        let op = &$op;
        let target = op.policy.compute_dtype();
        let $x = autocast::to_target::<B>($x, target, op);
        $( let $t = autocast::to_target::<B>($t, target, op); )*
        $($( let $opt = $opt.map(|t| autocast::to_target::<B>(t, target, op)); )+)?
    };
}

/// Convolutions: `x`, `weight` and `bias` to the compute dtype.
macro_rules! conv_ops {
    ($( fn $name:ident(x, weight, bias; options: $options:ty) = $row:ident; )*) => {
        $(
            fn $name(
                x: FloatTensor<Self>,
                weight: FloatTensor<Self>,
                bias: Option<FloatTensor<Self>>,
                options: $options,
            ) -> FloatTensor<Self> {
                let op = $row.resolve::<B>(&B::float_device(&x));
                let _op = $row.record(Some(op.policy.compute_dtype().into()));
                compute_inputs!(op; x, weight; bias);
                op.compute($row.name(), x, weight, |x, weight| {
                    B::$name(x, weight, bias, options)
                })
            }
        )*
    };
}

/// A backend's convolution op, with its options `O` (`ConvOptions`, `ConvTransposeOptions`).
type ConvOp<B, O> = fn(FloatTensor<B>, FloatTensor<B>, Option<FloatTensor<B>>, O) -> FloatTensor<B>;

/// A 1-d or 2-d convolution, plain or transposed, in the compute dtype: on burn-amp's
/// kernels where the policy routes and they take it (no FP8 site), else its inputs cast and
/// the backend's op (or the FP8 site's).
fn convolution<B: Backend, O: Clone>(
    row: ComputeOp,
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: Option<FloatTensor<B>>,
    options: O,
    inner: ConvOp<B, O>,
) -> FloatTensor<B>
where
    ConvGeometry: From<O>,
{
    let op = row.resolve::<B>(&B::float_device(&x));
    let target = op.policy.compute_dtype();
    let _op = row.record(Some(target.into()));
    let routed = op
        .routed()
        .filter(|_| op.fp8.is_none())
        .filter(|_| !autocast::any_f64::<B>(&[Some(&x), Some(&weight), bias.as_ref()]));
    let (x, weight, bias) = match routed {
        Some((ops, format)) => {
            let args = (x, weight, bias, ConvGeometry::from(options.clone()));
            match autocast::conv::<B>(ops, format, args, &op) {
                Ok(out) => return out,
                Err((x, weight, bias, _)) => (x, weight, bias),
            }
        }
        None => (x, weight, bias),
    };
    compute_inputs!(op; x, weight; bias);
    op.compute(row.name(), x, weight, |x, weight| {
        inner(x, weight, bias, options)
    })
}

/// The backward helpers of `ModuleOps` that apply one casting rule (see the impl).
macro_rules! module_autocast {
    ($then:ident) => {
        $then! { B;
            to_compute fn linear_x_backward(weight, output_grad) -> FloatTensor<Self>;
            to_compute fn linear_weight_backward(x, output_grad) -> FloatTensor<Self>;
            to_compute fn conv1d_x_backward(x, weight, output_grad; options: ConvOptions<1>) -> FloatTensor<Self>;
            to_compute fn conv1d_weight_backward(x, weight, output_grad; options: ConvOptions<1>) -> FloatTensor<Self>;
            to_compute fn conv1d_bias_backward(x, bias, output_grad) -> FloatTensor<Self>;
            to_compute fn conv2d_x_backward(x, weight, output_grad; options: ConvOptions<2>) -> FloatTensor<Self>;
            to_compute fn conv2d_weight_backward(x, weight, output_grad; options: ConvOptions<2>) -> FloatTensor<Self>;
            to_compute fn conv2d_bias_backward(x, bias, output_grad) -> FloatTensor<Self>;
            to_compute fn conv3d_x_backward(x, weight, output_grad; options: ConvOptions<3>) -> FloatTensor<Self>;
            to_compute fn conv3d_weight_backward(x, weight, output_grad; options: ConvOptions<3>) -> FloatTensor<Self>;
            to_compute fn conv3d_bias_backward(x, bias, output_grad) -> FloatTensor<Self>;
            to_compute fn conv_transpose1d_x_backward(weight, output_grad; options: ConvTransposeOptions<1>) -> FloatTensor<Self>;
            to_compute fn conv_transpose1d_weight_backward(x, weight, output_grad; options: ConvTransposeOptions<1>) -> FloatTensor<Self>;
            to_compute fn conv_transpose1d_bias_backward(x, bias, output_grad) -> FloatTensor<Self>;
            to_compute fn conv_transpose2d_x_backward(weight, output_grad; options: ConvTransposeOptions<2>) -> FloatTensor<Self>;
            to_compute fn conv_transpose2d_weight_backward(x, weight, output_grad; options: ConvTransposeOptions<2>) -> FloatTensor<Self>;
            to_compute fn conv_transpose2d_bias_backward(x, bias, output_grad) -> FloatTensor<Self>;
            to_compute fn conv_transpose3d_x_backward(weight, output_grad; options: ConvTransposeOptions<3>) -> FloatTensor<Self>;
            to_compute fn conv_transpose3d_weight_backward(x, weight, output_grad; options: ConvTransposeOptions<3>) -> FloatTensor<Self>;
            to_compute fn conv_transpose3d_bias_backward(x, bias, output_grad) -> FloatTensor<Self>;
            to_widest fn embedding_backward(weights, output_grad; indices: IntTensor<Self>) -> FloatTensor<Self>;
            to_widest fn avg_pool1d_backward(x, grad; kernel_size: usize, stride: usize, padding: usize, count_include_pad: bool, ceil_mode: bool) -> FloatTensor<Self>;
            to_widest fn avg_pool2d_backward(x, grad; kernel_size: [usize; 2], stride: [usize; 2], padding: [usize; 2], count_include_pad: bool, ceil_mode: bool) -> FloatTensor<Self>;
            to_widest fn adaptive_avg_pool1d_backward(x, grad) -> FloatTensor<Self>;
            to_widest fn adaptive_avg_pool2d_backward(x, grad) -> FloatTensor<Self>;
            to_widest fn interpolate_backward(x, grad; output_size: [usize; 2], options: InterpolateOptions) -> FloatTensor<Self>;
        }
    };
}

/// The ops of `ModuleOps` handed to the inner backend as they are.
macro_rules! module_forwarded {
    ($then:ident) => {
        $then! { B;
            fn linear_bias_backward(output_grad: FloatTensor<Self>) -> FloatTensor<Self>;
            fn unfold4d(x: FloatTensor<Self>, kernel_size: [usize; 2], options: UnfoldOptions) -> FloatTensor<Self>;
            fn avg_pool1d(x: FloatTensor<Self>, kernel_size: usize, stride: usize, padding: usize, count_include_pad: bool, ceil_mode: bool) -> FloatTensor<Self>;
            fn avg_pool2d(x: FloatTensor<Self>, kernel_size: [usize; 2], stride: [usize; 2], padding: [usize; 2], count_include_pad: bool, ceil_mode: bool) -> FloatTensor<Self>;
            fn adaptive_avg_pool1d(x: FloatTensor<Self>, output_size: usize) -> FloatTensor<Self>;
            fn max_pool1d(x: FloatTensor<Self>, kernel_size: usize, stride: usize, padding: usize, dilation: usize, ceil_mode: bool) -> FloatTensor<Self>;
            fn interpolate(x: FloatTensor<Self>, output_size: [usize; 2], options: InterpolateOptions) -> FloatTensor<Self>;
            #[query] fn has_ctc_loss_backward() -> bool;
        }
    };
}

impl<B: Backend> ModuleOps<Self> for MixedPrecision<B> {
    /// Compute class. On burn-amp's kernels (Flex) the operands are not cast: they are
    /// rounded while packed, and the bias is added before the output is rounded. Under an
    /// FP8 policy there, f32 operands are rounded to FP8 (through the compute dtype) in
    /// their own dtype, and the weight's gradient stays f32.
    fn linear(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
    ) -> FloatTensor<Self> {
        let op = LINEAR.resolve::<B>(&B::float_device(&x));
        let target = op.policy.compute_dtype();
        let _op = LINEAR.record(Some(target.into()));
        let routed = op
            .routed()
            .filter(|_| !autocast::any_f64::<B>(&[Some(&x), Some(&weight), bias.as_ref()]));
        if routed.is_some() {
            if op.fp8.is_none() {
                return autocast::linear::<B>(routed, x, weight, bias, &op);
            }
            let [x, weight] = [x, weight].map(|t| autocast::to_fp8_operand::<B>(t, &op));
            return op.compute(LINEAR.name(), x, weight, |x, weight| {
                autocast::linear::<B>(routed, x, weight, bias, &op)
            });
        }
        compute_inputs!(op; x, weight; bias);
        op.compute(LINEAR.name(), x, weight, |x, weight| {
            autocast::linear::<B>(routed, x, weight, bias, &op)
        })
    }

    /// Compute class. On burn-amp's kernels (Flex) by the GEMM: the columns rounded to the
    /// compute dtype as they are laid out, the weight while packed, the bias added to the
    /// f32 sums.
    fn conv1d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<1>,
    ) -> FloatTensor<Self> {
        convolution::<B, _>(CONV1D, x, weight, bias, options, B::conv1d)
    }

    /// Compute class, as [`conv1d`](Self::conv1d).
    fn conv2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvOptions<2>,
    ) -> FloatTensor<Self> {
        convolution::<B, _>(CONV2D, x, weight, bias, options, B::conv2d)
    }

    /// Compute class. On burn-amp's kernels (Flex) as the input gradient of the
    /// convolution it transposes: a product per phase of the stride, the bias added to the
    /// f32 sums; its gradients are that convolution's output and weight gradient.
    fn conv_transpose1d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<1>,
    ) -> FloatTensor<Self> {
        let inner = B::conv_transpose1d;
        convolution::<B, _>(CONV_TRANSPOSE1D, x, weight, bias, options, inner)
    }

    /// Compute class, as [`conv_transpose1d`](Self::conv_transpose1d).
    fn conv_transpose2d(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: Option<FloatTensor<Self>>,
        options: ConvTransposeOptions<2>,
    ) -> FloatTensor<Self> {
        let inner = B::conv_transpose2d;
        convolution::<B, _>(CONV_TRANSPOSE2D, x, weight, bias, options, inner)
    }

    conv_ops! {
        fn conv3d(x, weight, bias; options: ConvOptions<3>) = CONV3D;
        fn conv_transpose3d(x, weight, bias; options: ConvTransposeOptions<3>) = CONV_TRANSPOSE3D;
    }

    fn deform_conv2d(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        options: DeformConvOptions<2>,
    ) -> FloatTensor<Self> {
        let op = DEFORM_CONV2D.resolve::<B>(&B::float_device(&x));
        compute_inputs!(op; x, offset, weight; mask, bias);
        let _op = DEFORM_CONV2D.record(Some(x.dtype()));
        B::deform_conv2d(x, offset, weight, mask, bias, options)
    }

    fn attention(
        query: FloatTensor<Self>,
        key: FloatTensor<Self>,
        value: FloatTensor<Self>,
        mask: Option<BoolTensor<Self>>,
        attn_bias: Option<FloatTensor<Self>>,
        options: AttentionModuleOptions,
    ) -> FloatTensor<Self> {
        let device = B::float_device(&query);
        let op = ATTENTION.resolve::<B>(&device);
        if B::ad_enabled(&device) {
            // An autodiff backend decomposes attention into matmuls and a softmax anyway;
            // decomposing it here instead sends those ops through the casting rules, so
            // the scores' softmax runs in f32 and the two matmuls in the compute dtype (not
            // in FP8: FP8 recipes leave attention's products in 16 bits, so they run under
            // the same policy without FP8).
            return with_policy(op.policy.without_fp8(), || {
                attention_fallback::<Self>(query, key, value, mask, attn_bias, options)
            });
        }
        // Inference keeps the inner backend's fused kernel, fed in the compute dtype.
        compute_inputs!(op; query, key, value; attn_bias);
        let _op = ATTENTION.record(Some(query.dtype()));
        B::attention(query, key, value, mask, attn_bias, options)
    }

    /// The lookup runs on the f32 table (only the rows looked up are cast, not the table);
    /// its output joins the other activations in the compute dtype, as in Keras.
    fn embedding(weights: FloatTensor<Self>, indices: IntTensor<Self>) -> FloatTensor<Self> {
        let op = EMBEDDING.resolve::<B>(&B::float_device(&weights));
        let target = op.policy.compute_dtype();
        let _op = EMBEDDING.record(Some(target.into()));
        autocast::to_target::<B>(B::embedding(weights, indices), target, &op)
    }

    /// Float32 class: on burn-amp's kernels where the policy routes (one op reading `x` in
    /// its dtype, statistics in f32, with its own backward pass), else the operands cast to
    /// f32 and the backend's op.
    fn layer_norm(
        tensor: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: Option<FloatTensor<Self>>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        let op = context::of::<B>(&tensor);
        let _op = LAYER_NORM.record(Some(burn_tensor::DType::F32));
        let (tensor, gamma, beta) = match op.routed_ops() {
            Some(ops) if !autocast::any_f64::<B>(&[Some(&tensor), Some(&gamma), beta.as_ref()]) => {
                match (ops.layer_norm)(ops.isa, (tensor, gamma, beta, epsilon)) {
                    Routed::Ran(out) => return out,
                    Routed::Declined((tensor, gamma, beta, _)) => (tensor, gamma, beta),
                }
            }
            _ => (tensor, gamma, beta),
        };
        let [tensor, gamma] = autocast::to_f32::<B, 2>([tensor, gamma], &op);
        let beta = beta.map(|b| {
            let [b] = autocast::to_f32::<B, 1>([b], &op);
            b
        });
        B::layer_norm(tensor, gamma, beta, epsilon)
    }

    fn ctc_loss(
        log_probs: FloatTensor<Self>,
        targets: IntTensor<Self>,
        input_lengths: IntTensor<Self>,
        target_lengths: IntTensor<Self>,
        blank: usize,
    ) -> FloatTensor<Self> {
        let op = context::of::<B>(&log_probs);
        let [log_probs] = autocast::to_f32::<B, 1>([log_probs], &op);
        let _op = CTC_LOSS.record(Some(log_probs.dtype()));
        B::ctc_loss(log_probs, targets, input_lengths, target_lengths, blank)
    }

    fn rfft(
        signal: FloatTensor<Self>,
        dim: usize,
        n: Option<usize>,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let op = context::of::<B>(&signal);
        let [signal] = autocast::to_f32::<B, 1>([signal], &op);
        let _op = RFFT.record(Some(signal.dtype()));
        B::rfft(signal, dim, n)
    }

    fn irfft(
        spectrum_re: FloatTensor<Self>,
        spectrum_im: FloatTensor<Self>,
        dim: usize,
        n: Option<usize>,
    ) -> FloatTensor<Self> {
        let op = context::of::<B>(&spectrum_re);
        let [re, im] = autocast::to_f32::<B, 2>([spectrum_re, spectrum_im], &op);
        let _op = IRFFT.record(Some(re.dtype()));
        B::irfft(re, im, dim, n)
    }

    // Ops returning Burn's result structs: same fields, re-tagged with `Self`.

    fn deform_conv2d_backward(
        x: FloatTensor<Self>,
        offset: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        mask: Option<FloatTensor<Self>>,
        bias: Option<FloatTensor<Self>>,
        output_grad: FloatTensor<Self>,
        options: DeformConvOptions<2>,
    ) -> DeformConv2dBackward<Self> {
        let op = DEFORM_CONV2D_BACKWARD.resolve::<B>(&B::float_device(&x));
        compute_inputs!(op; x, offset, weight, output_grad; mask, bias);
        let _op = DEFORM_CONV2D_BACKWARD.record(Some(x.dtype()));
        let g = B::deform_conv2d_backward(x, offset, weight, mask, bias, output_grad, options);
        DeformConv2dBackward::new(
            g.x_grad,
            g.offset_grad,
            g.weight_grad,
            g.mask_grad,
            g.bias_grad,
        )
    }

    fn max_pool1d_with_indices(
        x: FloatTensor<Self>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
        ceil_mode: bool,
    ) -> MaxPool1dWithIndices<Self> {
        let _op = MAX_POOL1D_WITH_INDICES.record(None);
        let out = B::max_pool1d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode);
        MaxPool1dWithIndices::new(out.output, out.indices)
    }

    fn max_pool1d_with_indices_backward(
        x: FloatTensor<Self>,
        kernel_size: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
        ceil_mode: bool,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> MaxPool1dBackward<Self> {
        let op = context::of::<B>(&x);
        let [x, output_grad] = autocast::to_widest::<B, 2>([x, output_grad], &op);
        let _op = MAX_POOL1D_WITH_INDICES_BACKWARD.record(Some(x.dtype()));
        let g = B::max_pool1d_with_indices_backward(
            x,
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            output_grad,
            indices,
        );
        MaxPool1dBackward::new(g.x_grad)
    }

    /// Forwarded, except where the policy routes: on burn-amp's kernel (Flex), in the
    /// input's dtype, with its own backward pass (each output's position in its window
    /// kept, not an index tensor).
    fn max_pool2d(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> FloatTensor<Self> {
        let op = context::of::<B>(&x);
        let _op = MAX_POOL2D.record(None);
        let x = match op.routed_ops() {
            Some(ops) => {
                let args = MaxPool2dArgs {
                    kernel: kernel_size,
                    stride,
                    padding,
                    dilation,
                    ceil_mode,
                };
                match (ops.max_pool2d)(ops.isa, x, args) {
                    Routed::Ran(out) => return out,
                    Routed::Declined(x) => x,
                }
            }
            None => x,
        };
        B::max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)
    }

    /// Forwarded, except where the policy routes: a global average pool (to `[1, 1]`, an
    /// image classifier's head) on burn-amp's kernel (Flex), in the input's dtype, with its
    /// own backward pass.
    fn adaptive_avg_pool2d(x: FloatTensor<Self>, output_size: [usize; 2]) -> FloatTensor<Self> {
        let _op = ADAPTIVE_AVG_POOL2D.record(None);
        let x = match context::of::<B>(&x).routed_ops() {
            Some(ops) => match (ops.adaptive_avg_pool2d)(ops.isa, x, output_size) {
                Routed::Ran(out) => return out,
                Routed::Declined(x) => x,
            },
            None => x,
        };
        B::adaptive_avg_pool2d(x, output_size)
    }

    fn max_pool2d_with_indices(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
    ) -> MaxPool2dWithIndices<Self> {
        let _op = MAX_POOL2D_WITH_INDICES.record(None);
        let out = B::max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode);
        MaxPool2dWithIndices::new(out.output, out.indices)
    }

    fn max_pool2d_with_indices_backward(
        x: FloatTensor<Self>,
        kernel_size: [usize; 2],
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        ceil_mode: bool,
        output_grad: FloatTensor<Self>,
        indices: IntTensor<Self>,
    ) -> MaxPool2dBackward<Self> {
        let op = context::of::<B>(&x);
        let [x, output_grad] = autocast::to_widest::<B, 2>([x, output_grad], &op);
        let _op = MAX_POOL2D_WITH_INDICES_BACKWARD.record(Some(x.dtype()));
        let g = B::max_pool2d_with_indices_backward(
            x,
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            output_grad,
            indices,
        );
        MaxPool2dBackward::new(g.x_grad)
    }

    // The backward helpers below are called only by an autodiff decorator *outside* this one
    // (`Autodiff<MixedPrecision<B>>`), with saved inputs in their own dtype and gradients in
    // the compute dtype: those of compute-class ops run in the compute dtype, the others
    // promote.
    module_autocast!(autocast);

    fn ctc_loss_backward(
        log_probs: FloatTensor<Self>,
        targets: IntTensor<Self>,
        input_lengths: IntTensor<Self>,
        target_lengths: IntTensor<Self>,
        grad_loss: FloatTensor<Self>,
        blank: usize,
    ) -> FloatTensor<Self> {
        let op = context::of::<B>(&log_probs);
        let [log_probs, grad_loss] = autocast::to_f32::<B, 2>([log_probs, grad_loss], &op);
        let _op = CTC_LOSS_BACKWARD.record(Some(log_probs.dtype()));
        B::ctc_loss_backward(
            log_probs,
            targets,
            input_lengths,
            target_lengths,
            grad_loss,
            blank,
        )
    }

    module_forwarded!(forward);
}

/// The class table's rows of `ModuleOps`: the ops written out above, then the tables.
pub(super) fn classes() -> Vec<(&'static str, Counted)> {
    let tables = module_autocast!(autocast_classes)
        .into_iter()
        .chain(module_forwarded!(forward_classes));
    super::rows(&WRITTEN, tables)
}
