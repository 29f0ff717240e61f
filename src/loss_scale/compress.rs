//! Gradient compression before the update (`grads=aps`, `grads=aps_shp`): APS's per-layer
//! scales, from the maximum over workers of each layer's amax, and the rounding of every
//! worker's gradient to E5M2 or SHP with them — what an FP8 or 16-bit all-reduce would
//! carry.
//!
//! `grads=aps` runs on the device of a backend with FP8 operations (every backend
//! burn-amp registers): each worker's layer amax (finite values), their maximum, the scale
//! and the rounding are device ops; nothing is read back. `grads=aps_shp` (and `aps` on a
//! backend without FP8 operations) runs on the host: each layer's gradient is read back,
//! rounded with the kernels' CPU reference and written again (one read per layer and worker;
//! there is no SHP device kernel behind a backend trait yet).

use burn::module::{AutodiffModule, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{Tensor, TensorData};
use burn_amp_kernels::fp8::reference::{decode_scaled, encode_scaled};
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_amp_kernels::half16::{Half16, reference as half16};
use burn_tensor::TensorPrimitive;
use burn_tensor::ops::FloatTensor;

use crate::MixedPrecision;
use crate::cost;
use crate::fp8::training::registry::{self, ApsFn};
use crate::fp8::{GradientCompression, aps_scale};

/// The backend under the autodiff one that `MixedPrecision<B>` wraps (gradients live there).
type MixedInner<B> = <MixedPrecision<B> as AutodiffBackend>::InnerBackend;
/// The raw backend under the gradients' (their primitives are its).
type Raw<B> = <B as AutodiffBackend>::InnerBackend;

/// The SHP bias the APS exponent is counted from: f16's, so a scale of 1 is bias 15.
const SHP_BASE_BIAS: i32 = 15;

struct Compress<'a, B: AutodiffBackend> {
    workers: &'a mut [GradientsParams],
    how: GradientCompression,
    /// `grads=aps` on the device, where the raw backend has FP8 operations.
    aps: Option<ApsFn<Raw<B>>>,
}

impl<B: AutodiffBackend> ModuleVisitor<MixedPrecision<B>> for Compress<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<MixedPrecision<B>, D>>) {
        let grads: Vec<Option<Tensor<MixedInner<B>, D>>> = self
            .workers
            .iter_mut()
            .map(|g| g.remove::<MixedInner<B>, D>(param.id))
            .collect();
        let present = grads.iter().flatten().count();
        if present == 0 {
            return;
        }
        if let (GradientCompression::Aps, Some(aps)) = (self.how, self.aps) {
            let (slots, tensors): (Vec<usize>, Vec<FloatTensor<Raw<B>>>) = grads
                .into_iter()
                .enumerate()
                .filter_map(|(i, g)| Some((i, g?.into_primitive().tensor())))
                .unzip();
            for (i, rounded) in slots.into_iter().zip(aps(tensors, None)) {
                let tensor =
                    Tensor::<MixedInner<B>, D>::from_primitive(TensorPrimitive::Float(rounded));
                self.workers[i].register(param.id, tensor);
            }
            return;
        }
        let hosts: Vec<Option<Vec<f32>>> = grads
            .iter()
            .map(|g| {
                g.as_ref().map(|g| {
                    cost::read(|| g.to_data().convert::<f32>().to_vec::<f32>().expect("f32"))
                })
            })
            .collect();
        // The one scalar per layer that crosses workers: the maximum of their amaxes.
        let amax = hosts
            .iter()
            .flatten()
            .flat_map(|v| v.iter())
            .fold(
                0.0f32,
                |m, x| if x.is_finite() { m.max(x.abs()) } else { m },
            );
        for ((slot, grad), host) in self.workers.iter_mut().zip(grads).zip(hosts) {
            let (Some(grad), Some(values)) = (grad, host) else {
                continue;
            };
            let rounded = round(&values, amax, present, self.how);
            let data = TensorData::new(rounded, grad.shape()).convert_dtype(grad.dtype());
            slot.register(
                param.id,
                Tensor::<MixedInner<B>, D>::from_data(data, &grad.device()),
            );
        }
    }
}

/// `values` rounded as `how` says, with the APS scale of a layer whose amax over `workers`
/// workers is `amax`. Non-finite values stay non-finite.
pub(super) fn round(
    values: &[f32],
    amax: f32,
    workers: usize,
    how: GradientCompression,
) -> Vec<f32> {
    match how {
        GradientCompression::None => values.to_vec(),
        GradientCompression::Aps => {
            let format = Fp8Format::E5M2;
            let cast =
                Fp8Cast::new(format).with_overflow(burn_amp_kernels::fp8::Overflow::NonSaturating);
            let scale = aps_scale(amax, workers, format.max());
            values
                .iter()
                .enumerate()
                .map(|(i, x)| {
                    decode_scaled(
                        encode_scaled(*x, scale, cast, i as u32),
                        format,
                        1.0 / scale,
                    )
                })
                .collect()
        }
        GradientCompression::ApsShp => {
            let base = Half16::shp(SHP_BASE_BIAS).expect("bias 15 is valid");
            let k = aps_scale(amax, workers, base.max()).log2().round() as i32;
            let format = Half16::shp((SHP_BASE_BIAS + k).clamp(0, 63)).expect("clamped");
            values
                .iter()
                .map(|x| {
                    if x.is_finite() {
                        half16::decode(half16::encode(*x, format), format)
                    } else {
                        *x
                    }
                })
                .collect()
        }
    }
}

/// Rounds each worker's parameter gradients as `how` says, layer by layer, with APS's scale
/// from the maximum over the workers of the layer's amax.
pub(crate) fn compress<B: AutodiffBackend, M: AutodiffModule<MixedPrecision<B>>>(
    workers: &mut [GradientsParams],
    module: &M,
    how: GradientCompression,
) {
    if how != GradientCompression::None && !workers.is_empty() {
        let aps = registry::lookup::<Raw<B>>().and_then(|ops| ops.aps);
        module.visit(&mut Compress { workers, how, aps });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aps_keeps_every_worker_sum_finite_and_uses_the_range() {
        let values = [3.0f32, -1e-3, 0.0, 2.5e-6];
        let out = round(&values, 3.0, 4, GradientCompression::Aps);
        // Scale 4096: 3 * 4096 * 4 = 49152 <= 57344. 3.0 is exact in E5M2.
        assert_eq!(out[0], 3.0);
        assert_eq!(out[2], 0.0);
        assert!((out[1] + 1e-3).abs() <= 1e-3 * 0.125);
        let shp = round(&values, 3.0, 4, GradientCompression::ApsShp);
        assert_eq!(shp[0], 3.0);
        assert!((shp[3] - 2.5e-6).abs() <= 2.5e-6 * 2f32.powi(-11));
        assert!(round(&[f32::NAN], 1.0, 1, GradientCompression::ApsShp)[0].is_nan());
    }
}
