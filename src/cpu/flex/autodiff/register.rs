//! How burn-amp's backward passes hand a parent its gradient. Burn's
//! `Gradients::register` adds a second gradient of a tensor to the first on the inner
//! backend, and Flex adds 16-bit tensors value by value; a 16-bit activation read by
//! several f32 ops (a batch norm's input, cast once for each statistic and once for the
//! normalization) gets its gradients summed that way. Here two 16-bit gradients of one
//! shape are added on burn-amp's elementwise kernel instead: the same IEEE sums (each
//! value added in f32 and rounded once), so the same bits, in one pass.

use std::sync::Arc;

use burn::backend::Autodiff;
use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::Ops;
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::nn::BinaryOp;
use burn_tensor::DType;
use burn_tensor::ops::{FloatTensor, FloatTensorOps};

use super::super::arithmetic as flex_ops;

/// `grad` registered as (a part of) the gradient of `ops`' parent `i`, when that parent
/// is tracked: added to the gradient it already has, 16-bit ones on burn-amp's kernel.
pub(super) fn register<S, const N: usize>(
    isa: Isa,
    grads: &mut Gradients,
    ops: &Ops<S, N>,
    i: usize,
    grad: FlexTensor,
) {
    let Some(parent) = &ops.parents[i] else {
        return;
    };
    let mut grad = grad;
    if matches!(grad.dtype(), DType::BF16 | DType::F16) {
        let (new, old) = taken(grads, ops, i, grad);
        grad = match old {
            Some(old)
                if old.dtype() == new.dtype() && old.layout().shape() == new.layout().shape() =>
            {
                flex_ops::binary(isa, BinaryOp::Add, &new, &old, new.dtype())
            }
            // What `Gradients::register` would do.
            Some(old) => Flex::float_add(new, old),
            None => new,
        };
    }
    grads.register::<Flex>(parent.id, grad);
}

/// The gradient `ops`' parent `i` already has (none when it is untracked), taken out of
/// `grads` (the caller registers the sum in its place), with `like` back. `Gradients`
/// finds a gradient by its tensor's node: a tensor of the parent's node asks for it (only
/// the node's id is read), made of `like`.
pub(super) fn taken<S, const N: usize>(
    grads: &mut Gradients,
    ops: &Ops<S, N>,
    i: usize,
    like: FlexTensor,
) -> (FlexTensor, Option<FlexTensor>) {
    let Some(parent) = &ops.parents[i] else {
        return (like, None);
    };
    let key: FloatTensor<Autodiff<Flex, NoCheckpointing>> =
        FloatTensor::<Autodiff<Flex, NoCheckpointing>> {
            primitive: like,
            node: parent.clone(),
            rc: Arc::new(parent.id),
        };
    let old = grads.remove::<Flex>(&key);
    (key.primitive, old)
}

/// Burn's `unary` backward step with [`register`]: the output's gradient taken, and
/// `f(grad)` registered for the one parent when it is tracked.
pub(super) fn unary<S>(
    isa: Isa,
    ops: &Ops<S, 1>,
    grads: &mut Gradients,
    f: impl FnOnce(FlexTensor) -> FlexTensor,
) {
    let grad: FlexTensor = grads.consume::<Flex>(&ops.node);
    if ops.parents[0].is_some() {
        let grad = f(grad);
        register(isa, grads, ops, 0, grad);
    }
}

/// Burn's `binary` backward step with [`register`]: the output's gradient taken, and
/// `lhs(grad)` and `rhs(grad)` registered for the parents that are tracked.
pub(super) fn binary<S>(
    isa: Isa,
    ops: &Ops<S, 2>,
    grads: &mut Gradients,
    lhs: impl FnOnce(&FlexTensor) -> FlexTensor,
    rhs: impl FnOnce(&FlexTensor) -> FlexTensor,
) {
    let grad: FlexTensor = grads.consume::<Flex>(&ops.node);
    if ops.parents[0].is_some() {
        let g = lhs(&grad);
        register(isa, grads, ops, 0, g);
    }
    if ops.parents[1].is_some() {
        let g = rhs(&grad);
        register(isa, grads, ops, 1, g);
    }
}
