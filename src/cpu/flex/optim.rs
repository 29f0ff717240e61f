//! The optimizer kernels on Flex tensors: a parameter, its moments and its step count are
//! updated in place when nothing else holds them (copied first when something does), so a
//! step allocates nothing; the loss scaler's unscale divides a gradient in place and counts
//! its non-finite values in the same pass.

use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::optim::{self, AdamwStep};
use burn_amp_kernels::cpu::{Isa, cast::CpuFloat};
use burn_tensor::DType;

use super::super::{AdamwIn, AdamwRouted, AdamwState, Routed};
use crate::dtype::with_float;
use burn::backend::Flex;

/// The one value of a one-value f32 tensor.
fn scalar(t: &FlexTensor) -> f32 {
    t.storage::<f32>()[t.layout().start_offset()]
}

/// `t` as a contiguous tensor that owns its whole buffer, so that its storage can be
/// written in place (`storage_mut` copies it first if it is shared).
fn owned(t: FlexTensor) -> FlexTensor {
    let exact = t.is_contiguous()
        && t.layout().start_offset() == 0
        && t.bytes().len() == t.layout().num_elements() * t.dtype().size();
    if exact { t } else { t.to_contiguous() }
}

/// One AdamW step (see `crate::cpu::AdamwFn`): f32 parameter and moments, a gradient of
/// any float dtype.
pub(crate) fn adamw(
    isa: Isa,
    (param, grad, state): AdamwIn<Flex>,
    step: &AdamwStep,
    found: Option<&FlexTensor>,
) -> AdamwRouted<Flex> {
    let f32s = [&param, &state.m, &state.v, &state.time]
        .iter()
        .all(|t| t.dtype() == DType::F32);
    let grad_ok = matches!(grad.dtype(), DType::F32 | DType::BF16 | DType::F16);
    if !f32s || !grad_ok || grad.layout().num_elements() != param.layout().num_elements() {
        return Routed::Declined((param, grad, state));
    }
    if found.is_some_and(|f| scalar(f) > 0.0) {
        // Skipped: everything as it was, bit for bit.
        return Routed::Ran((param, state));
    }
    let mut time = owned(state.time);
    let t = {
        let slot = &mut time.storage_mut::<f32>()[0];
        *slot += 1.0;
        *slot as u32
    };
    let (mut param, mut m, mut v) = (owned(param), owned(state.m), owned(state.v));
    let grad = owned(grad);
    let at = step.at(t);
    let n = param.layout().num_elements();
    with_float!(grad.dtype(), G => {
        let g = &grad.storage::<G>()[..n];
        run(isa, &mut param, g, &mut m, &mut v, &at);
    }, _ => unreachable!("checked above"));
    Routed::Ran((param, AdamwState { m, v, time }))
}

fn run<G: CpuFloat>(
    isa: Isa,
    param: &mut FlexTensor,
    grad: &[G],
    m: &mut FlexTensor,
    v: &mut FlexTensor,
    at: &optim::AdamwAt,
) {
    let n = grad.len();
    let (p, m, v) = (
        &mut param.storage_mut::<f32>()[..n],
        &mut m.storage_mut::<f32>()[..n],
        &mut v.storage_mut::<f32>()[..n],
    );
    optim::adamw(isa, p, grad, m, v, at, None).expect("lengths checked");
}

/// `grad / scale`, in place where nothing else holds the gradient (an f32 gradient).
pub(crate) fn unscale(
    isa: Isa,
    grad: FlexTensor,
    scale: &FlexTensor,
) -> Routed<FlexTensor, FlexTensor> {
    if grad.dtype() != DType::F32 || scale.dtype() != DType::F32 {
        return Routed::Declined(grad);
    }
    let mut grad = owned(grad);
    let n = grad.layout().num_elements();
    optim::unscale(isa, &mut grad.storage_mut::<f32>()[..n], scalar(scale));
    Routed::Ran(grad)
}

/// How many values of `grad` are inf or NaN, as a one-value f32 tensor.
pub(crate) fn count_nonfinite(isa: Isa, grad: &FlexTensor) -> Option<FlexTensor> {
    let grad = grad.to_contiguous();
    let n = grad.layout().num_elements();
    let count = with_float!(grad.dtype(), T => {
        optim::count_nonfinite(isa, &grad.storage::<T>()[..n])
    }, _ => return None);
    Some(FlexTensor::from_data(burn_tensor::TensorData::new(
        vec![count as f32],
        [1],
    )))
}
