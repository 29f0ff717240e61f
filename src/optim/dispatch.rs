//! [`FusedAdamW`](super::FusedAdamW)'s step of one parameter: on burn-amp's kernel where
//! the registry of backend capabilities has one for the tensors (Flex on the CPU kernel,
//! Burn's CubeCL backends, plain or fused, on the CubeCL kernel), else in Burn tensor ops:
//! the same arithmetic, op by op, as Burn's `AdamW`.

use burn::tensor::backend::Backend;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_amp_kernels::cpu::optim::AdamwStep;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{Shape, TensorMetadata};

use crate::cpu::{AdamwIn, AdamwOut, AdamwState, Routed};
use crate::registry;

/// Whether a fused AdamW kernel takes these operands: f32 parameter, moments, step count
/// and skip count, an f32, f16 or bf16 gradient of the parameter's size, at most `u32::MAX`
/// values. Checked by each kernel before it runs (a fused backend before it registers the
/// kernel in its stream, where it can no longer decline).
#[cfg_attr(
    not(any(feature = "cubecl-backends", feature = "fusion")),
    allow(dead_code)
)]
pub(crate) fn kernel_takes<B: Backend>(
    (param, grad, state): &AdamwIn<B>,
    found: Option<&FloatTensor<B>>,
) -> bool {
    use burn_tensor::DType;
    let len = param.shape().num_elements();
    param.dtype() == DType::F32
        && [&state.m, &state.v, &state.time]
            .iter()
            .all(|t| t.dtype() == DType::F32)
        && found.is_none_or(|f| f.dtype() == DType::F32)
        && matches!(grad.dtype(), DType::F32 | DType::F16 | DType::BF16)
        && grad.shape().num_elements() == len
        && u32::try_from(len).is_ok()
}

fn flat<B: Backend>(t: FloatTensor<B>) -> Tensor<B, 1> {
    let n = t.shape().num_elements();
    Tensor::from_primitive(TensorPrimitive::Float(B::float_reshape(t, Shape::new([n]))))
}

fn shaped<B: Backend>(t: Tensor<B, 1>, shape: Shape) -> FloatTensor<B> {
    B::float_reshape(t.into_primitive().tensor(), shape)
}

/// One AdamW step of one parameter (see [`AdamwFn`]).
pub(crate) fn adamw<B: Backend>(
    operands: AdamwIn<B>,
    step: &AdamwStep,
    found: Option<&FloatTensor<B>>,
) -> AdamwOut<B> {
    let operands = match registry::adamw::<B>() {
        Some(kernel) => match kernel(registry::isa(), operands, step, found) {
            Routed::Ran(out) => return out,
            Routed::Declined(operands) => operands,
        },
        None => operands,
    };
    adamw_tensor_ops::<B>(operands, step, found)
}

/// The step in Burn tensor ops, in `AdamW`'s order; the bias corrections from the step
/// count on the device, and a skipped step selected away on the device.
fn adamw_tensor_ops<B: Backend>(
    (param, grad, state): AdamwIn<B>,
    step: &AdamwStep,
    found: Option<&FloatTensor<B>>,
) -> AdamwOut<B> {
    let shape = param.shape();
    let (p, g) = (flat::<B>(param), flat::<B>(grad));
    let (m, v) = (flat::<B>(state.m), flat::<B>(state.v));
    let time = flat::<B>(state.time);
    // 1 where the step runs, 0 where it is skipped.
    let runs = found.map(|f| flat::<B>(f.clone()).lower_equal_elem(0.0).float());
    let t = match &runs {
        Some(runs) => time.clone() + runs.clone(),
        None => time.clone().add_scalar(1.0),
    };
    // `beta` as a one-value tensor in `t`'s dtype (f32): built from `t`, since a tensor
    // created under a `float16` or `bfloat16` policy is created in that dtype (where 0.999
    // rounds to 1 in bf16, and the bias correction to 0).
    let correction = |beta: f32| {
        t.clone()
            .mul_scalar(0.0)
            .add_scalar(beta)
            .powf(t.clone())
            .neg()
            .add_scalar(1.0)
    };
    let (c1, c2) = (correction(step.beta_1), correction(step.beta_2));
    let m1 = m
        .clone()
        .mul_scalar(step.beta_1)
        .add(g.clone().mul_scalar(1.0 - step.beta_1));
    let v1 = v
        .clone()
        .mul_scalar(step.beta_2)
        .add(g.square().mul_scalar(1.0 - step.beta_2));
    let delta = m1
        .clone()
        .div(c1)
        .div(v1.clone().div(c2).sqrt().add_scalar(step.epsilon));
    let decayed = if step.decay == 1.0 {
        p.clone()
    } else {
        p.clone().mul_scalar(step.decay)
    };
    let p1 = decayed - delta.mul_scalar(step.lr);
    let (p1, m1, v1) = match runs {
        Some(runs) => {
            let skip = runs.equal_elem(0.0).expand(p.shape());
            (
                p1.mask_where(skip.clone(), p),
                m1.mask_where(skip.clone(), m),
                v1.mask_where(skip, v),
            )
        }
        None => (p1, m1, v1),
    };
    let n_shape = |t: Tensor<B, 1>| shaped::<B>(t, shape.clone());
    (
        n_shape(p1),
        AdamwState {
            m: n_shape(m1),
            v: n_shape(v1),
            time: shaped::<B>(t, Shape::new([1])),
        },
    )
}
