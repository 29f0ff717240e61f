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
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Tensor, TensorData};
use burn_amp_kernels::fp8::reference::{decode_scaled, encode_scaled};
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_amp_kernels::half16::{Half16, reference as half16};
use burn_tensor::TensorPrimitive;

use crate::MixedPrecision;
use crate::cost;
use crate::fp8::training::ops::ApsFn;
use crate::fp8::{GradientCompression, aps_scale};
use crate::registry;

/// The backend under the autodiff one that `MixedPrecision<B>` wraps (gradients live there).
type MixedInner<B> = <MixedPrecision<B> as AutodiffBackend>::InnerBackend;
/// The raw backend under the gradients' (their primitives are its).
type Raw<B> = <B as AutodiffBackend>::InnerBackend;

/// The SHP bias the APS exponent is counted from: f16's, so a scale of 1 is bias 15.
const SHP_BASE_BIAS: i32 = 15;

/// Where `how`'s rounding runs on backend `R`: `grads=aps` on the device where `R` has FP8
/// operations, every other case on the host. The one place that decides it, for a step on
/// one machine ([`compress`]) and across data-parallel replicas (`super::replicas`).
pub(super) struct Rounding<R: Backend> {
    how: GradientCompression,
    device: Option<ApsFn<R>>,
}

impl<R: Backend> Rounding<R> {
    pub fn new(how: GradientCompression) -> Self {
        let device = match how {
            GradientCompression::Aps => registry::fp8::<R>().and_then(|ops| ops.aps),
            _ => None,
        };
        Self { how, device }
    }

    /// Whether the rounding reads each layer back to the host (and so wants the layer's
    /// amax there too).
    pub fn on_host(&self) -> bool {
        self.device.is_none()
    }

    /// Rounds one layer: `grads` holds each worker's gradient of it, flattened; `amax` is
    /// the layer's amax over `workers` workers where it was reduced elsewhere (on the
    /// device, and its value on the host when [`on_host`](Self::on_host)), or `None` to take
    /// the finite maximum of `grads` themselves. Non-finite values stay non-finite.
    pub fn layer(
        &self,
        grads: Vec<Tensor<R, 1>>,
        amax: Option<(Tensor<R, 1>, f32)>,
        workers: usize,
    ) -> Result<Vec<Tensor<R, 1>>, String> {
        if let Some(aps) = self.device {
            let tensors = grads
                .into_iter()
                .map(|g| g.into_primitive().tensor())
                .collect();
            let amax = amax.map(|(a, _)| (a.into_primitive().tensor(), workers));
            return Ok(aps(tensors, amax)
                .into_iter()
                .map(|t| Tensor::from_primitive(TensorPrimitive::Float(t)))
                .collect());
        }
        let hosts = grads
            .iter()
            .map(|g| {
                cost::read(|| g.to_data())
                    .convert::<f32>()
                    .to_vec::<f32>()
                    .map_err(|e| format!("a gradient read back as f32: {e:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let amax =
            match amax {
                Some((_, host)) => host,
                None => hosts.iter().flatten().fold(0.0f32, |m, x| {
                    if x.is_finite() { m.max(x.abs()) } else { m }
                }),
            };
        Ok(grads
            .iter()
            .zip(hosts)
            .map(|(grad, values)| {
                let n = values.len();
                let rounded = round(&values, amax, workers, self.how);
                let data = TensorData::new(rounded, [n]).convert_dtype(grad.dtype());
                Tensor::from_data(data, &grad.device())
            })
            .collect())
    }
}

struct Compress<'a, B: AutodiffBackend> {
    workers: &'a mut [GradientsParams],
    rounding: Rounding<Raw<B>>,
}

impl<B: AutodiffBackend> ModuleVisitor<MixedPrecision<B>> for Compress<'_, B> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<MixedPrecision<B>, D>>) {
        let mut slots = Vec::new();
        let mut flat = Vec::new();
        for (i, worker) in self.workers.iter_mut().enumerate() {
            if let Some(grad) = worker.remove::<MixedInner<B>, D>(param.id) {
                let shape = grad.shape();
                let raw = Tensor::<Raw<B>, D>::from_primitive(TensorPrimitive::Float(
                    grad.into_primitive().tensor(),
                ));
                flat.push(raw.reshape([shape.num_elements()]));
                slots.push((i, shape));
            }
        }
        if flat.is_empty() {
            return;
        }
        let present = flat.len();
        let rounded = self
            .rounding
            .layer(flat, None, present)
            .expect("a float gradient reads back as f32");
        for ((i, shape), grad) in slots.into_iter().zip(rounded) {
            let dims: [usize; D] = shape.dims();
            let grad = Tensor::<MixedInner<B>, D>::from_primitive(TensorPrimitive::Float(
                grad.reshape(dims).into_primitive().tensor(),
            ));
            self.workers[i].register(param.id, grad);
        }
    }
}

/// `values` rounded as `how` says, with the APS scale of a layer whose amax over `workers`
/// workers is `amax`. Non-finite values stay non-finite.
fn round(values: &[f32], amax: f32, workers: usize, how: GradientCompression) -> Vec<f32> {
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
        let rounding = Rounding::new(how);
        module.visit(&mut Compress { workers, rounding });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aps_on_the_device_and_on_the_host_round_alike() {
        use burn::backend::Flex;
        let device = Default::default();
        let worker = |seed: u32| {
            let values: Vec<f32> = (0..515u32)
                .map(|i| {
                    let x = (i.wrapping_mul(2654435761) ^ seed) as f32 / u32::MAX as f32 - 0.5;
                    x * 2f32.powi((i % 29) as i32 - 20)
                })
                .chain([f32::INFINITY, f32::NAN, 0.0, -0.0])
                .collect();
            Tensor::<Flex, 1>::from_floats(values.as_slice(), &device)
        };
        let grads = vec![worker(1), worker(7)];
        let on_device = Rounding::<Flex>::new(GradientCompression::Aps);
        assert!(!on_device.on_host(), "Flex has FP8 operations");
        let on_host = Rounding::<Flex> {
            how: GradientCompression::Aps,
            device: None,
        };
        let bits = |ts: Vec<Tensor<Flex, 1>>| -> Vec<Vec<u32>> {
            ts.into_iter()
                .map(|t| {
                    let v = t.into_data().to_vec::<f32>().unwrap();
                    v.into_iter()
                        .map(|x| if x.is_nan() { 0x7fc0_0000 } else { x.to_bits() })
                        .collect()
                })
                .collect()
        };
        let a = bits(on_device.layer(grads.clone(), None, 2).unwrap());
        let b = bits(on_host.layer(grads.clone(), None, 2).unwrap());
        assert_eq!(a, b);
        // With the amax given (a data-parallel run): the same on both sides too.
        let amax = Tensor::<Flex, 1>::from_floats([0.25], &device);
        let a = bits(
            on_device
                .layer(grads.clone(), Some((amax.clone(), 0.25)), 4)
                .unwrap(),
        );
        let b = bits(on_host.layer(grads, Some((amax, 0.25)), 4).unwrap());
        assert_eq!(a, b);
    }

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
