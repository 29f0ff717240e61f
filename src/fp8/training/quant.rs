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
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{Bool, DType, FloatDType, Shape, Tensor, TensorMetadata, TensorPrimitive};

use super::device::{self, Vector};
use super::history::Slot;
use super::numerics::{self, Candidates, FORMATS, SiteTag};
use super::scaling::{Fp8Formats, Fp8Role, Fp8Scaling};
use crate::cost;
use crate::fp8::backend::host_f32;
use crate::fp8::{Fp8Backend, Fp8Recipe, Overflow};

/// How one tensor of one site is quantized: its role, the policy's scaling and format
/// choice, where its state lives (stateful scalings under autodiff) and where the numerics
/// report counts it.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub role: Fp8Role,
    pub scaling: Fp8Scaling,
    pub formats: Fp8Formats,
    /// The 16-bit dtype an f32 tensor is rounded through first (as if cast to it), the
    /// result staying f32; `None`, or any other tensor dtype: the tensor as it is.
    pub through: Option<FloatDType>,
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

/// `tensor` rounded to FP8 as `plan` says, back in its own dtype and shape. f64 and empty
/// tensors are handed back untouched (burn-amp never narrows f64). An f32 tensor with a
/// 16-bit `plan.through` is rounded as its cast to that dtype would be (in one pass on
/// kernels that read through it), its values those of the cast. Records the tensor in the
/// numerics report its site belongs to, if any (the cast values).
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
    let through = plan
        .through
        .filter(|t| dtype == FloatDType::F32 && matches!(t, FloatDType::BF16 | FloatDType::F16));
    let values = match through {
        Some(through) if plan.is_plain() && plan.site.is_none() => {
            cost::fp8("fake_quantize");
            I::fp8_fake_quantize_through(flat, through, layout, plan.role.cast(), rule)
        }
        Some(through) => {
            let narrow = I::float_cast(flat, through);
            let values = round::<I>(narrow, &plan, recipe, layout, rule, &shape);
            I::float_cast(values, dtype)
        }
        None => round::<I>(flat, &plan, recipe, layout, rule, &shape),
    };
    debug_assert_eq!(FloatDType::from(values.dtype()), dtype);
    I::float_reshape(values, shape)
}

/// A flat tensor of `shape`'s values rounded as `plan` says (see [`fake_quantize`]).
fn round<I: Fp8Backend>(
    flat: FloatTensor<I>,
    plan: &Plan,
    recipe: Fp8Recipe,
    layout: BlockLayout,
    rule: ScaleRule,
    shape: &Shape,
) -> FloatTensor<I> {
    if plan.is_plain() {
        let cast = plan.role.cast();
        if let Some(tag) = &plan.site {
            let candidates = Candidates::current(cast.format.layout());
            numerics::record::<I>(tag, plan.role, recipe, flat.clone(), shape, &candidates);
        }
        cost::fp8("fake_quantize");
        I::fp8_fake_quantize(flat, layout, cast, rule)
    } else {
        let decided = decide::<I>(&flat, plan);
        if let Some(tag) = &plan.site {
            let candidates = decided.candidates();
            numerics::record::<I>(tag, plan.role, recipe, flat.clone(), shape, &candidates);
        }
        decided.round(flat, layout, rule)
    }
}

/// The history length exponent-bias scaling keeps (for the report only).
const BIAS_HISTORY: usize = 16;

/// Which candidate a tensor is rounded with.
enum Choice<I: Backend> {
    /// Known on the host: the role's format.
    Host(usize),
    /// Chosen on the device (`format=auto`): `[1]` true for E5M2.
    Device(Tensor<I, 1, Bool>),
}

/// What a stateful or automatic tensor is rounded with: each candidate's per-tensor scale
/// and inverse on the device (`None`: current scales per block), whether the format carries
/// an exponent bias (its scale is then the bias's power of two), and the choice.
struct Decided<I: Backend> {
    scales: [Option<(Vector<I>, Vector<I>)>; 2],
    biased: bool,
    choice: Choice<I>,
    overflow: Overflow,
}

/// Decides scale and format on the device and moves the slot's state in the same step:
/// each format's candidate (its scale from the history, its bias, or current scaling), the
/// format (the role's, or `format=auto`'s choice from the values each candidate would
/// lose), then the history and the choice recorded. Reads nothing back.
fn decide<I: Fp8Backend>(flat: &FloatTensor<I>, plan: &Plan) -> Decided<I> {
    let device = I::float_device(flat);
    let len = flat.shape().num_elements() as u32;
    cost::fp8("amax");
    let amax = Vector::<I>::from_primitive(TensorPrimitive::Float(I::fp8_amax(
        flat.clone(),
        BlockLayout::per_tensor(len),
    )));
    let auto = plan.formats == Fp8Formats::Auto;
    let fixed = device::fixed_index(plan.role);
    let wanted = |f: usize| auto || f == fixed;
    let values = || Vector::<I>::from_primitive(TensorPrimitive::Float(flat.clone()));
    // Current scales of the whole tensor: what `format=auto` weighs a current candidate by.
    let current =
        |f: usize| device::fp8_scales(&amax, FORMATS[f], ScaleRule::Float { margin: 0 }).0;
    let choose = |scales: &[Option<(Vector<I>, Vector<I>)>; 2]| {
        if auto {
            let [s0, s1] = [0, 1].map(|f| {
                scales[f]
                    .as_ref()
                    .map_or_else(|| current(f), |s| s.0.clone())
            });
            Choice::Device(device::choose_e5m2(&values(), [&s0, &s1]))
        } else {
            Choice::Host(fixed)
        }
    };
    let Some(slot) = &plan.slot else {
        let scales = [None, None];
        let choice = choose(&scales);
        return Decided {
            scales,
            biased: false,
            choice,
            overflow: Overflow::NonSaturating,
        };
    };
    let capacity = match plan.scaling {
        Fp8Scaling::Delayed(recipe) => recipe.history as usize,
        _ => BIAS_HISTORY,
    };
    slot.history
        .with_device::<I, _>(slot, plan.role, capacity, &device, |state| {
            let mut scales: [Option<(Vector<I>, Vector<I>)>; 2] = [None, None];
            let mut biased = false;
            match plan.scaling {
                Fp8Scaling::Delayed(recipe) => {
                    let pick = state.delayed_amax(recipe.amax, &amax);
                    let rule = ScaleRule::Float {
                        margin: recipe.margin,
                    };
                    for (f, scale) in scales.iter_mut().enumerate() {
                        if wanted(f) {
                            *scale = Some(device::fp8_scales(&pick, FORMATS[f], rule));
                        }
                    }
                }
                Fp8Scaling::ExponentBias(recipe) => {
                    let bias = state.next_bias(&amax, recipe.drift);
                    for (f, scale) in scales.iter_mut().enumerate() {
                        if wanted(f) {
                            let s = bias.clone().slice(f..f + 1);
                            *scale = Some((s.clone(), s.recip()));
                        }
                    }
                    biased = true;
                }
                _ => {}
            }
            let choice = choose(&scales);
            // The scale the report and the record show: 1 for a biased format.
            let used = |f: usize| match (&scales[f], biased) {
                (Some((s, _)), false) => s.clone(),
                _ => Vector::<I>::ones([1], &device),
            };
            match &choice {
                Choice::Host(f) => {
                    state.scale = used(*f);
                    state.chose(*f);
                }
                Choice::Device(e5m2) => {
                    state.scale = used(0).mask_where(e5m2.clone(), used(1));
                    state.chose_on_device(e5m2);
                }
            }
            state.push(&amax);
            state.steps += 1;
            Decided {
                scales,
                biased,
                choice,
                // A scale from earlier steps may lag the tensor: finite values past the
                // range saturate (as in Transformer Engine); an infinity stays non-finite,
                // for the loss scaler.
                overflow: Overflow::SaturateFinite,
            }
        })
}

impl<I: Fp8Backend> Decided<I> {
    /// `flat` rounded with the chosen candidate (both, and one kept, when the choice is on
    /// the device).
    fn round(self, flat: FloatTensor<I>, layout: BlockLayout, rule: ScaleRule) -> FloatTensor<I> {
        let len = flat.shape().num_elements();
        let quantize = |f: usize| {
            let cast = Fp8Cast::new(FORMATS[f]).with_overflow(self.overflow);
            match &self.scales[f] {
                Some((scale, inv)) => device::round_per_tensor::<I>(flat.clone(), scale, inv, cast),
                None => {
                    cost::fp8("fake_quantize");
                    I::fp8_fake_quantize(flat.clone(), layout, cast, rule)
                }
            }
        };
        match &self.choice {
            Choice::Host(f) => quantize(*f),
            Choice::Device(e5m2) => {
                let wrap = |t| Vector::<I>::from_primitive(TensorPrimitive::Float(t));
                let e4 = wrap(quantize(0));
                let e5 = wrap(quantize(1));
                e4.mask_where(e5m2.clone().expand([len]), e5)
                    .into_primitive()
                    .tensor()
            }
        }
    }

    /// The candidates as the numerics report takes them (reads the scales and the choice
    /// back: the report reads while it records).
    fn candidates(&self) -> Candidates {
        let read = |t: &Vector<I>| host_f32::<I>(t.clone().into_primitive().tensor())[0];
        let mut formats = FORMATS;
        let mut scales = [None; 2];
        for f in 0..2 {
            if let Some((s, _)) = &self.scales[f] {
                let s = read(s);
                if self.biased {
                    // Shown as the biased format at scale 1, as the bias rule states it.
                    let layout = formats[f].layout();
                    let bias = layout.default_bias() + s.log2().round() as i32;
                    formats[f] = Fp8Format::new(layout, bias).unwrap_or(formats[f]);
                    scales[f] = Some(1.0);
                } else {
                    scales[f] = Some(s);
                }
            }
        }
        let chosen = match &self.choice {
            Choice::Host(f) => *f,
            Choice::Device(e5m2) => {
                let mask = e5m2.clone().float().into_primitive().tensor();
                usize::from(host_f32::<I>(mask)[0] != 0.0)
            }
        };
        Candidates {
            formats,
            scales,
            chosen,
        }
    }
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
