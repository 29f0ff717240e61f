//! APS (`grads=aps`) of one layer on the device: the FP8 operation the loss scaler's
//! gradient compression (`crate::loss_scale`) finds in the registry.

use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, Overflow};
use burn_tensor::ops::FloatTensor;
use burn_tensor::{FloatDType, Shape, Tensor, TensorMetadata, TensorPrimitive};

use super::device::{finite_or_zero, fp8_scales, round_per_tensor};
use crate::fp8::Fp8Backend;

/// `grads=aps` for one layer on the device: every worker's gradient of it rounded to E5M2
/// (non-saturating) with the largest power-of-two scale `s` such that the sum of all the
/// workers' scaled gradients cannot overflow ([`aps_scale`] of the maximum over the workers
/// of the layer's finite amax). The workers' amaxes meet on the first one's device; nothing
/// is read back. With a worker count that is not a power of two the total is rounded up in
/// f32, so near a power-of-two boundary the scale may be half the host rule's (never
/// larger: the sum still cannot overflow).
///
/// `across`: the layer's amax already reduced over the replicas of a data-parallel run
/// (`[1]`, on the first gradient's device) and the total worker count; the amaxes of `grads`
/// are then not taken again.
pub(crate) fn aps_e5m2<I: Fp8Backend>(
    grads: Vec<FloatTensor<I>>,
    across: Option<(FloatTensor<I>, usize)>,
) -> Vec<FloatTensor<I>> {
    let Some(first) = grads.first() else {
        return grads;
    };
    let device = I::float_device(first);
    let flat = |g: &FloatTensor<I>| {
        let n = g.shape().num_elements();
        Tensor::<I, 1>::from_primitive(TensorPrimitive::Float(I::float_reshape(
            g.clone(),
            Shape::new([n]),
        )))
    };
    let (amax, workers) = match across {
        Some((amax, workers)) => (
            Tensor::<I, 1>::from_primitive(TensorPrimitive::Float(amax)),
            workers,
        ),
        None => {
            let amaxes: Vec<Tensor<I, 1>> = grads
                .iter()
                .filter(|g| g.shape().num_elements() > 0)
                .map(|g| {
                    finite_or_zero(flat(g).cast(FloatDType::F32).abs())
                        .max()
                        .to_device(&device)
                })
                .collect();
            if amaxes.is_empty() {
                return grads;
            }
            (Tensor::cat(amaxes, 0).max(), grads.len())
        }
    };
    let factor = if workers.is_power_of_two() {
        workers as f32
    } else {
        workers as f32 * (1.0 + 2.0 * f32::EPSILON)
    };
    let total = amax.cast(FloatDType::F32).mul_scalar(factor);
    let format = Fp8Format::E5M2;
    let (scale, inv) = fp8_scales::<I>(&total, format, ScaleRule::PowerOfTwo { margin: 0 });
    let cast = Fp8Cast::new(format).with_overflow(Overflow::NonSaturating);
    grads
        .into_iter()
        .map(|g| {
            let shape = g.shape();
            let len = shape.num_elements();
            if len == 0 {
                return g;
            }
            let at = I::float_device(&g);
            let values = I::float_reshape(g, Shape::new([len]));
            let (scale, inv) = (scale.clone().to_device(&at), inv.clone().to_device(&at));
            I::float_reshape(round_per_tensor::<I>(values, &scale, &inv, cast), shape)
        })
        .collect()
}
