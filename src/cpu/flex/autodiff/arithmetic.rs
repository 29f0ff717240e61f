//! The elementwise arithmetic of activations (`lhs op rhs`, shapes that broadcast, and
//! `x op s`) as ops of `Autodiff<Flex, C>`, with their backward passes: a repeated
//! operand's gradient summed back in one pass over the output's gradient, its product with
//! the other operand (`mul`, `div`) summed without being written out.

use burn::backend::Autodiff;
use burn::backend::Flex;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::nn::BinaryOp;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{DType, Shape};

use super::super::super::Routed;
use super::super::arithmetic as flex_ops;
use super::super::nn::takes;
use super::super::tensor::values_f32;
use super::products::widened;
use super::register::{register, unary};

type Tensor<C> = FloatTensor<Autodiff<Flex, C>>;

#[derive(Debug)]
struct Binary;

/// What the backward pass of `lhs op rhs` needs: the op, the operands it reads (mul, div),
/// the operands' dtypes and shapes (an operand broadcast gets its gradient summed back).
#[derive(Clone, Debug)]
struct BinaryState {
    isa: Isa,
    op: BinaryOp,
    lhs: Option<FlexTensor>,
    rhs: Option<FlexTensor>,
    dtypes: [DType; 2],
    shapes: [Shape; 2],
}

impl Backward<Flex, 2> for Binary {
    type State = BinaryState;

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("arithmetic (backward)", None);
        let s = &ops.state;
        let isa = s.isa;
        let (lhs, rhs) = (s.lhs.as_ref(), s.rhs.as_ref());
        let kept = "operands kept for mul and div";
        let [dl, dr] = s.dtypes;
        let [sl, sr] = &s.shapes;
        let g: FlexTensor = grads.consume::<Flex>(&ops.node);
        let [wants_lhs, wants_rhs] = ops.parents.each_ref().map(Option::is_some);
        let left = |g: FlexTensor| {
            if let Some(grad) = repeated(isa, s.op, Side::Left, &g, [rhs, rhs], sl, dl) {
                return grad;
            }
            // A broadcast operand's products stay in f32 until summed back.
            let wide = wide(&g, sl, dl);
            let g = match s.op {
                BinaryOp::Add | BinaryOp::Sub => g,
                op => flex_ops::binary(isa, op, &g, rhs.expect(kept), wide),
            };
            flex_ops::unbroadcast(isa, g, sl, dl)
        };
        let right = |g: FlexTensor| {
            if let Some(grad) = repeated(isa, s.op, Side::Right, &g, [lhs, rhs], sr, dr) {
                return grad;
            }
            let wide = wide(&g, sr, dr);
            let g = match s.op {
                BinaryOp::Add => g,
                BinaryOp::Sub => flex_ops::scalar(isa, BinaryOp::Mul, &g, -1.0, wide),
                BinaryOp::Mul => flex_ops::binary(isa, BinaryOp::Mul, &g, lhs.expect(kept), wide),
                BinaryOp::Div => {
                    // -g * lhs / rhs^2, as (-(g * lhs) / rhs) / rhs.
                    let (lhs, rhs) = (lhs.expect(kept), rhs.expect(kept));
                    let t = flex_ops::binary(isa, BinaryOp::Mul, &g, lhs, DType::F32);
                    let t = flex_ops::binary(isa, BinaryOp::Div, &t, rhs, DType::F32);
                    let t = flex_ops::binary(isa, BinaryOp::Div, &t, rhs, DType::F32);
                    flex_ops::scalar(isa, BinaryOp::Mul, &t, -1.0, wide)
                }
            };
            flex_ops::unbroadcast(isa, g, sr, dr)
        };
        if wants_lhs
            && wants_rhs
            && let Some([grad_lhs, grad_rhs]) = both(s, &g)
        {
            register(isa, grads, &ops, 0, grad_lhs);
            register(isa, grads, &ops, 1, grad_rhs);
            return;
        }
        // Burn's `binary` step: the left operand's gradient first.
        if wants_lhs {
            let grad = left(g.clone());
            register(isa, grads, &ops, 0, grad);
        }
        if wants_rhs {
            let grad = right(g);
            register(isa, grads, &ops, 1, grad);
        }
    }
}

/// Both gradients of `lhs * rhs` or `lhs / rhs` with `rhs` repeated over `lhs` (a batch
/// norm's scale or standard deviation) in one pass over `g`, with the bits of `left` and
/// `right`'s two passes; `None` for other ops and layouts.
fn both(s: &BinaryState, g: &FlexTensor) -> Option<[FlexTensor; 2]> {
    let [sl, sr] = &s.shapes;
    let full = g.layout().shape();
    if !matches!(s.op, BinaryOp::Mul | BinaryOp::Div) || full != sl || full == sr {
        return None;
    }
    let kept = "operands kept for mul and div";
    let (lhs, rhs) = (s.lhs.as_ref().expect(kept), s.rhs.as_ref().expect(kept));
    let (grad_lhs, mut sums) = flex_ops::scaled_and_dots(s.isa, s.op, g, lhs, rhs, s.dtypes[0])?;
    if s.op == BinaryOp::Div {
        quotient_sums(s.isa, &mut sums, rhs);
    }
    let grad_rhs = flex_ops::from_sums(s.isa, &sums, sr, s.dtypes[1]);
    Some([grad_lhs, grad_rhs])
}

/// The gradient of `rhs` in `lhs / rhs` from `sums`, each `sum(g * lhs)` over the places
/// one value of `rhs` was repeated to: `-g * lhs / rhs^2`, as `-(sum / rhs) / rhs`.
fn quotient_sums(isa: Isa, sums: &mut [f32], rhs: &FlexTensor) {
    let r = values_f32(isa, rhs);
    sums.iter_mut()
        .zip(&r)
        .for_each(|(d, r)| *d = -(*d / r) / r);
}

/// Which operand a gradient is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Left,
    Right,
}

/// The gradient of an operand of `shape` that the output repeats (a batch norm's statistic),
/// where it takes one pass over `g` and writes nothing of `g`'s size: `-sum(g)` for the
/// right operand of `sub`, `sum(g * other)` for either operand of `mul` (`other` the
/// operand the gradient is not for), `-sum(g * lhs) / rhs^2` for the right operand of `div`
/// (`rhs` is then the operand itself, constant over each sum); `[other, rhs]` are the
/// operands kept for `mul` and `div`. `None` for an operand of the output's shape, for the
/// cases whose one-pass form is already `unbroadcast`'s, and for layouts the block sums do
/// not take.
fn repeated(
    isa: Isa,
    op: BinaryOp,
    side: Side,
    g: &FlexTensor,
    [other, rhs]: [Option<&FlexTensor>; 2],
    shape: &Shape,
    dtype: DType,
) -> Option<FlexTensor> {
    let kept = "operands kept for mul and div";
    if g.layout().shape() == shape {
        return None;
    }
    let sums = match (op, side) {
        (BinaryOp::Sub, Side::Right) => {
            let sum = flex_ops::unbroadcast(isa, g.clone(), shape, dtype);
            // Negation is exact: the sum's bits with the sign flipped.
            return Some(flex_ops::scalar(isa, BinaryOp::Mul, &sum, -1.0, dtype));
        }
        (BinaryOp::Mul, _) => flex_ops::block_dots(isa, g, other.expect(kept), shape)?,
        (BinaryOp::Div, Side::Right) => {
            let mut sums = flex_ops::block_dots(isa, g, other.expect(kept), shape)?;
            quotient_sums(isa, &mut sums, rhs.expect(kept));
            sums
        }
        _ => return None,
    };
    Some(flex_ops::from_sums(isa, &sums, shape, dtype))
}

/// The dtype an operand's gradient is computed in: its own, or f32 where it was broadcast
/// (its gradient then sums several values).
fn wide(g: &FlexTensor, shape: &Shape, dtype: DType) -> DType {
    if g.layout().shape() == shape {
        dtype
    } else {
        DType::F32
    }
}

/// `lhs op rhs` (shapes that broadcast) in their dtype; the operands back when the kernels
/// do not take them.
pub(crate) fn binary<C: CheckpointStrategy>(
    isa: Isa,
    op: BinaryOp,
    lhs: Tensor<C>,
    rhs: Tensor<C>,
) -> Routed<Tensor<C>, [Tensor<C>; 2]> {
    if !flex_ops::takes_binary(&lhs.primitive, &rhs.primitive) {
        return Routed::Declined([lhs, rhs]);
    }
    let dtype = lhs.primitive.dtype();
    if rhs.primitive.dtype() != dtype {
        return widened_sum::<C>(isa, op, lhs, rhs);
    }
    Routed::Ran(node::<C>(isa, op, [lhs, rhs], dtype))
}

/// `lhs + rhs` or `lhs - rhs` of a 16-bit and an f32 tensor, in f32: the 16-bit one read
/// widened where it lies, under a cast's node ([`widened`]), the bits of its cast and the
/// op; other ops and dtypes back.
fn widened_sum<C: CheckpointStrategy>(
    isa: Isa,
    op: BinaryOp,
    lhs: Tensor<C>,
    rhs: Tensor<C>,
) -> Routed<Tensor<C>, [Tensor<C>; 2]> {
    let narrow = |t: &Tensor<C>| matches!(t.primitive.dtype(), DType::BF16 | DType::F16);
    let wide = |t: &Tensor<C>| t.primitive.dtype() == DType::F32;
    let mixed = (narrow(&lhs) && wide(&rhs)) || (wide(&lhs) && narrow(&rhs));
    if !matches!(op, BinaryOp::Add | BinaryOp::Sub) || !mixed {
        return Routed::Declined([lhs, rhs]);
    }
    // Both gradients are f32, the cast's node rounding its own; add and sub keep no operand.
    let operands = [lhs, rhs].map(|t| if narrow(&t) { widened::<C>(isa, t) } else { t });
    Routed::Ran(node::<C>(isa, op, operands, DType::F32))
}

/// The node of `lhs op rhs`, computed in `dtype` (the output's and both gradients'), the
/// operands a product or quotient's gradients read kept for its backward pass.
fn node<C: CheckpointStrategy>(
    isa: Isa,
    op: BinaryOp,
    [lhs, rhs]: [Tensor<C>; 2],
    dtype: DType,
) -> Tensor<C> {
    let forward = || flex_ops::binary(isa, op, &lhs.primitive, &rhs.primitive, dtype);
    let reads = matches!(op, BinaryOp::Mul | BinaryOp::Div);
    match Binary
        .prepare::<C>([lhs.node.clone(), rhs.node.clone()])
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let state = BinaryState {
                isa,
                op,
                lhs: (reads && rhs.is_tracked()).then(|| lhs.primitive.clone()),
                rhs: reads.then(|| rhs.primitive.clone()),
                dtypes: [dtype, dtype],
                shapes: [
                    lhs.primitive.layout().shape().clone(),
                    rhs.primitive.layout().shape().clone(),
                ],
            };
            prep.finish(state, forward())
        }
        OpsKind::UnTracked(prep) => prep.finish(forward()),
    }
}

#[derive(Debug)]
struct Scalar;

impl Backward<Flex, 1> for Scalar {
    /// The CPU's instruction set, the op and the scalar.
    type State = (Isa, BinaryOp, f32);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let _time = crate::cost::timed("arithmetic with a scalar (backward)", None);
        let (isa, op, s) = ops.state;
        unary(isa, &ops, grads, |g| {
            let dtype = g.dtype();
            match op {
                BinaryOp::Add | BinaryOp::Sub => g,
                BinaryOp::Mul => flex_ops::scalar(isa, BinaryOp::Mul, &g, s, dtype),
                BinaryOp::Div => flex_ops::scalar(isa, BinaryOp::Div, &g, s, dtype),
            }
        });
    }
}

/// `x op s` in `x`'s dtype; `x` back when the kernels do not take it.
pub(crate) fn scalar<C: CheckpointStrategy>(
    isa: Isa,
    op: BinaryOp,
    x: Tensor<C>,
    s: f32,
) -> Routed<Tensor<C>, Tensor<C>> {
    if !takes(&x.primitive) {
        return Routed::Declined(x);
    }
    let dtype = x.primitive.dtype();
    let forward = || flex_ops::scalar(isa, op, &x.primitive, s, dtype);
    Routed::Ran(
        match Scalar
            .prepare::<C>([x.node.clone()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => prep.finish((isa, op, s), forward()),
            OpsKind::UnTracked(prep) => prep.finish(forward()),
        },
    )
}

#[cfg(test)]
mod tests {
    use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
    use burn_tensor::ops::FloatTensorOps;
    use burn_tensor::{FloatDType, TensorData};

    use super::super::super::cast::cast;
    use super::*;

    type Ad = Autodiff<Flex>;

    fn tensor(values: &[f32], shape: [usize; 2], dtype: DType) -> Tensor<NoCheckpointing> {
        let data = TensorData::new(values.to_vec(), shape).convert_dtype(dtype);
        Ad::float_from_data(data, &Default::default())
    }

    fn bits(t: FlexTensor) -> Vec<u32> {
        t.into_data()
            .convert::<f32>()
            .iter::<f32>()
            .map(f32::to_bits)
            .collect()
    }

    #[test]
    fn a_16_bit_operand_of_add_or_sub_beside_an_f32_one_is_read_widened() {
        let isa = Isa::detect();
        let values: Vec<f32> = (0..12).map(|i| i as f32 * 0.3 - 1.7).collect();
        let means = [0.25f32, -1.5, 3.0 + 1.0 / 1024.0];
        for dtype in [DType::BF16, DType::F16] {
            let x = tensor(&values, [4, 3], dtype);
            let m = tensor(&means, [1, 3], DType::F32);
            let wide = cast(isa, x.primitive.clone(), FloatDType::F32);
            for (op, flex) in [
                (BinaryOp::Add, Flex::float_add as fn(_, _) -> _),
                (BinaryOp::Sub, Flex::float_sub),
            ] {
                let want = bits(flex(wide.clone(), m.primitive.clone()));
                for (lhs, rhs, want) in [
                    (x.clone(), m.clone(), want.clone()),
                    (
                        m.clone(),
                        x.clone(),
                        bits(flex(m.primitive.clone(), wide.clone())),
                    ),
                ] {
                    match binary::<NoCheckpointing>(isa, op, lhs, rhs) {
                        Routed::Ran(y) => {
                            assert_eq!(y.primitive.dtype(), DType::F32);
                            assert_eq!(bits(y.primitive), want, "{op:?} {dtype:?}");
                        }
                        Routed::Declined(_) => panic!("{op:?} of {dtype:?} and f32 declined"),
                    }
                }
            }
            // A product keeps its operands for its gradient: the policy's casts come first.
            let declined = binary::<NoCheckpointing>(isa, BinaryOp::Mul, x, m);
            assert!(matches!(declined, Routed::Declined(_)), "{dtype:?}");
        }
    }
}
