//! The FP8 fake-quantization of a training step: values rounded to FP8 (through the
//! backend's [`Fp8Backend`] kernels, so exactly the bytes an FP8 GEMM would read) and
//! handed back in the tensor's own dtype, plus the two autodiff steps around it.
//!
//! - Forward, [`Quantize::straight_through`]: `x̂ = dq(q(x))`; the backward pass treats the
//!   rounding as the identity (the straight-through estimator every FP8 recipe uses), so
//!   `∂L/∂x = ∂L/∂x̂`.
//! - Backward, [`Quantize::quantize_grad`]: identity forward; the gradient that flows back
//!   through it is itself fake-quantized (to E5M2), so the op before it — a linear's or a
//!   convolution's backward matmuls — consumes an FP8 gradient, as in HFP8.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::scale::{BlockScale, ScaleRule};
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, Fp8Layout, Overflow};
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{DType, FloatDType, Shape, Tensor, TensorMetadata, TensorPrimitive};

use super::history::Slot;
use super::numerics::{self, Candidates, SiteTag};
use super::rules;
use super::scaling::{Fp8Formats, Fp8Role, Fp8Scaling};
use crate::cost;
use crate::fp8::Fp8Backend;
use crate::fp8::backend::{float_vec, host_f32};

/// How one tensor of one site is quantized: its role, the policy's scaling and format
/// choice, where its state lives (stateful scalings under autodiff) and where the numerics
/// report counts it.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub role: Fp8Role,
    pub scaling: Fp8Scaling,
    pub formats: Fp8Formats,
    pub slot: Option<Slot>,
    pub site: Option<SiteTag>,
}

impl Plan {
    /// Whether the tensor goes the plain way: current scaling, the role's hybrid format.
    /// (A site opens a slot only under a stateful scaling.)
    fn is_plain(&self) -> bool {
        self.formats == Fp8Formats::Hybrid && self.slot.is_none()
    }
}

/// What a tensor is rounded with, once decided.
struct Decision {
    cast: Fp8Cast,
    /// The per-tensor scale of a stateful scaling; `None`: current scales per block.
    scale: Option<BlockScale>,
    candidates: Candidates,
}

/// `tensor` rounded to FP8 as `plan` says, back in its own dtype and shape. f64 and empty
/// tensors are handed back untouched (burn-amp never narrows f64). Records the tensor in
/// the numerics report its site belongs to, if any.
///
/// # Panics
/// When the tensor has more than 2^32 - 1 elements (the FP8 kernels index with 32 bits).
pub(crate) fn fake_quantize<I: Fp8Backend>(tensor: FloatTensor<I>, plan: Plan) -> FloatTensor<I> {
    let shape = tensor.shape();
    let len = shape.num_elements();
    let dtype = match tensor.dtype() {
        DType::F32 | DType::Flex32 | DType::F16 | DType::BF16 => FloatDType::from(tensor.dtype()),
        _ => return tensor,
    };
    if len == 0 {
        return tensor;
    }
    let recipe = plan.scaling.recipe(plan.role);
    let layout = recipe
        .layout(&shape)
        .unwrap_or_else(|e| panic!("FP8 training of a tensor of shape {shape:?}: {e}"));
    let flat = I::float_reshape(tensor, Shape::new([len]));
    let rule = recipe.rule().unwrap_or(ScaleRule::Float { margin: 0 });
    let values = if plan.is_plain() {
        let cast = plan.role.cast();
        if let Some(tag) = &plan.site {
            let candidates = Candidates::current(cast.format.layout());
            numerics::record::<I>(tag, plan.role, recipe, flat.clone(), &shape, &candidates);
        }
        cost::fp8("fake_quantize");
        I::fp8_fake_quantize(flat, layout, cast, rule)
    } else {
        let decision = decide::<I>(&flat, &plan);
        if let Some(tag) = &plan.site {
            let c = &decision.candidates;
            numerics::record::<I>(tag, plan.role, recipe, flat.clone(), &shape, c);
        }
        match decision.scale {
            Some(scale) => round_trip::<I>(flat, scale, layout, decision.cast, dtype),
            None => {
                cost::fp8("fake_quantize");
                I::fp8_fake_quantize(flat, layout, decision.cast, rule)
            }
        }
    };
    debug_assert_eq!(FloatDType::from(values.dtype()), dtype);
    I::float_reshape(values, shape)
}

/// Quantizes with one given scale and decodes again.
fn round_trip<I: Fp8Backend>(
    flat: FloatTensor<I>,
    scale: BlockScale,
    layout: BlockLayout,
    cast: Fp8Cast,
    dtype: FloatDType,
) -> FloatTensor<I> {
    let device = I::float_device(&flat);
    let scales = float_vec::<I>(vec![scale.scale], &device);
    let scale_invs = float_vec::<I>(vec![scale.scale_inv], &device);
    cost::fp8("quantize");
    let codes = I::fp8_quantize(flat, scales, layout, cast);
    cost::fp8("dequantize");
    I::fp8_dequantize(codes, scale_invs, layout, cast.format, dtype)
}

/// The per-tensor amax (one read back to the host).
fn amax<I: Fp8Backend>(flat: &FloatTensor<I>) -> f32 {
    let len = flat.shape().num_elements() as u32;
    cost::fp8("amax");
    host_f32::<I>(I::fp8_amax(flat.clone(), BlockLayout::per_tensor(len)))[0]
}

const LAYOUTS: [Fp8Layout; 2] = [Fp8Layout::E4M3, Fp8Layout::E5M2];

/// Decides format and scale for a tensor under a stateful scaling or `format=auto`, and
/// moves the state of its slot: each format's candidate (its scale from the history, its
/// bias, or current scaling), the format (the role's, or `format=auto`'s choice from the
/// values each candidate would lose), then the history and choice recorded.
fn decide<I: Fp8Backend>(flat: &FloatTensor<I>, plan: &Plan) -> Decision {
    let amax = amax::<I>(flat);
    let slot = plan.slot.as_ref();
    // Each format's (format with its bias, per-tensor scale or None for current scaling).
    let mut formats = numerics::FORMATS;
    let mut scales: [Option<BlockScale>; 2] = [None; 2];
    if let Some(slot) = slot {
        slot.history.with_role(slot, plan.role, |state| {
            for (f, layout) in LAYOUTS.iter().enumerate() {
                match plan.scaling {
                    Fp8Scaling::Delayed(recipe) => {
                        let pick = rules::delayed_amax(&state.history, recipe.amax).unwrap_or(amax);
                        scales[f] = Some(rules::float_scale(pick, formats[f], recipe.margin));
                    }
                    Fp8Scaling::ExponentBias(recipe) => {
                        let ideal = rules::ideal_bias(amax, *layout);
                        let bias = rules::next_bias(state.bias[f], ideal, recipe.drift, *layout);
                        formats[f] = Fp8Format::new(*layout, bias).unwrap_or(formats[f]);
                        scales[f] = Some(BlockScale {
                            scale: 1.0,
                            scale_inv: 1.0,
                            e8m0: 127,
                        });
                    }
                    _ => {}
                }
            }
        });
    }
    let chosen = match plan.formats {
        Fp8Formats::Hybrid => plan.role.cast().format.layout(),
        Fp8Formats::Auto => {
            let effective = |f: usize| {
                scales[f].map_or_else(
                    || rules::float_scale(amax, formats[f], 0).scale,
                    |s| s.scale,
                )
            };
            let (count, lost) = lost_counts::<I>(flat, formats, [effective(0), effective(1)]);
            rules::choose_format(count, lost[0], lost[1])
        }
    };
    let f = usize::from(chosen == Fp8Layout::E5M2);
    // A stateful scale may lag the tensor: finite values past the range saturate (as in
    // Transformer Engine); an inf or NaN stays non-finite for the loss scaler.
    let overflow = if slot.is_some() && amax.is_finite() {
        Overflow::Saturate
    } else {
        Overflow::NonSaturating
    };
    if let Some(slot) = slot {
        slot.history.with_role(slot, plan.role, |state| {
            if let Fp8Scaling::Delayed(recipe) = plan.scaling {
                rules::push_amax(&mut state.history, amax, recipe.history);
            }
            if let Fp8Scaling::ExponentBias(_) = plan.scaling {
                state.bias = [Some(formats[0].bias()), Some(formats[1].bias())];
                rules::push_amax(&mut state.history, amax, 16);
            }
            state.scale = scales[f].map_or(1.0, |s| s.scale);
            state.format = formats[f];
            state.steps += 1;
            state.chosen[f] += 1;
        });
    }
    Decision {
        cast: Fp8Cast::new(formats[f]).with_overflow(overflow),
        scale: scales[f],
        candidates: Candidates {
            formats,
            scales: scales.map(|s| s.map(|s| s.scale)),
            chosen: f,
        },
    }
}

/// How many of `flat`'s values each candidate (format, scale) would lose: nonzero values
/// that round to zero (at most half the smallest subnormal after scaling) plus values past
/// the rounding boundary above the largest value. Counted on the device, one read back.
fn lost_counts<I: Fp8Backend>(
    flat: &FloatTensor<I>,
    formats: [Fp8Format; 2],
    scales: [f32; 2],
) -> (u64, [u64; 2]) {
    let x = Tensor::<I, 1>::from_primitive(TensorPrimitive::Float(flat.clone()))
        .cast(FloatDType::F32)
        .abs();
    let count = x.dims()[0] as u64;
    let lost: Vec<Tensor<I, 1, burn_tensor::Int>> = (0..2)
        .map(|f| {
            let format = formats[f];
            let s = f64::from(scales[f]);
            let m = format.layout().mantissa_bits() as i32;
            let max = f64::from(format.max());
            let half_ulp = 2f64.powi(max.log2().floor() as i32 - m - 1);
            let lo = (f64::from(format.min_subnormal()) / 2.0 / s) as f32;
            let hi = ((max + half_ulp) / s) as f32;
            let under = x
                .clone()
                .greater_elem(0.0)
                .bool_and(x.clone().lower_equal_elem(lo))
                .int()
                .sum();
            let over = x.clone().greater_elem(hi).int().sum();
            under + over
        })
        .collect();
    let data = cost::read(|| Tensor::cat(lost, 0).into_data()).convert::<i64>();
    let v = data.to_vec::<i64>().expect("counts");
    (count, [v[0].max(0) as u64, v[1].max(0) as u64])
}

/// The two autodiff steps of FP8 training, for `Autodiff<I, C>`.
pub(crate) trait Quantize: Backend {
    /// Fake-quantized forward, straight-through backward.
    fn straight_through(tensor: FloatTensor<Self>, plan: Plan) -> FloatTensor<Self>;

    /// Identity forward, fake-quantized gradient backward.
    fn quantize_grad(tensor: FloatTensor<Self>, plan: Plan) -> FloatTensor<Self>;
}

/// The straight-through estimator: the gradient passes the rounding unchanged.
#[derive(Debug)]
struct StraightThrough;

impl<I: Backend> Backward<I, 1> for StraightThrough {
    type State = ();

    fn backward(self, ops: Ops<(), 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<I>(&ops.node);
        let [parent] = ops.parents;
        if let Some(parent) = parent {
            grads.register::<I>(parent.id, grad);
        }
    }
}

/// The incoming gradient, rounded to FP8 on its way back.
#[derive(Debug)]
struct QuantizeGrad;

impl<I: Fp8Backend> Backward<I, 1> for QuantizeGrad {
    type State = Plan;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<I>(&ops.node);
        let [parent] = ops.parents;
        if let Some(parent) = parent {
            grads.register::<I>(parent.id, fake_quantize::<I>(grad, ops.state));
        }
    }
}

impl<I: Fp8Backend, C: CheckpointStrategy> Quantize for Autodiff<I, C> {
    fn straight_through(tensor: FloatTensor<Self>, plan: Plan) -> FloatTensor<Self> {
        let values = fake_quantize::<I>(tensor.primitive.clone(), plan);
        StraightThrough
            .prepare::<C>([tensor.node.clone()])
            .compute_bound()
            .stateless(values)
    }

    fn quantize_grad(tensor: FloatTensor<Self>, plan: Plan) -> FloatTensor<Self> {
        match QuantizeGrad
            .prepare::<C>([tensor.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish(plan, tensor.primitive),
            OpsKind::UnTracked(prep) => prep.finish(tensor.primitive),
        }
    }
}
