//! The loss-scale step, written once: one worker's gradients (`step`, and the replica path
//! after its reduction) or several devices' (`step_multi`) are applied, skipped or passed
//! through by what the backward passes did, and the scale moves.

use burn::module::AutodiffModule;
use burn::optim::adaptor::GradAdaptor;
use burn::optim::{GradientsParams, LearningRate, MultiGradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn_tensor::ops::{FloatTensor, FloatTensorOps};

use super::{Inner, LossScaleOptimizer, compression};
use crate::MixedPrecision;
use crate::loss_scale::LossScaleError;
use crate::loss_scale::compress::compress;
use crate::loss_scale::grads::{all_finite, nonfinite_count};
use crate::loss_scale::state::Pending;
use crate::optim::as_fused;

/// The gradients of one step: one worker's, or one per device (Burn's MultiDevice strategy).
pub(super) enum StepGrads {
    One(GradientsParams),
    Many(MultiGradientsParams),
}

impl StepGrads {
    fn all_finite<B: AutodiffBackend, M: AutodiffModule<MixedPrecision<B>>>(
        &self,
        module: &M,
    ) -> bool {
        match self {
            Self::One(grads) => all_finite::<B, M>(grads, module),
            Self::Many(grads) => grads
                .grads
                .iter()
                .all(|(g, _)| all_finite::<B, M>(g, module)),
        }
    }

    /// The count of non-finite values over every gradient, on the first device; `None`
    /// when there is no gradient.
    fn nonfinite_count<B: AutodiffBackend, M: AutodiffModule<MixedPrecision<B>>>(
        &self,
        module: &M,
    ) -> Option<FloatTensor<Inner<B>>> {
        match self {
            Self::One(grads) => nonfinite_count::<B, M>(grads, module),
            Self::Many(grads) => grads
                .grads
                .iter()
                .filter_map(|(g, _)| nonfinite_count::<B, M>(g, module))
                .reduce(|a, b| {
                    let device = Inner::<B>::float_device(&a);
                    Inner::<B>::float_add(a, Inner::<B>::float_to_device(b, &device))
                }),
        }
    }

    /// Compressed as the policy says (`grads=aps`), all workers with the same scales.
    fn compressed<B: AutodiffBackend, M: AutodiffModule<MixedPrecision<B>>>(
        self,
        module: &M,
    ) -> Self {
        let how = compression(module);
        match self {
            Self::One(grads) => {
                let mut workers = [grads];
                compress::<B, M>(&mut workers, module, how);
                let [grads] = workers;
                Self::One(grads)
            }
            Self::Many(grads) => {
                let (mut workers, devices): (Vec<_>, Vec<_>) = grads.grads.into_iter().unzip();
                compress::<B, M>(&mut workers, module, how);
                Self::Many(MultiGradientsParams {
                    grads: workers.into_iter().zip(devices).collect(),
                })
            }
        }
    }

    /// The inner optimizer's step on these gradients.
    fn step<B, M, O>(self, inner: &mut O, lr: LearningRate, module: M) -> M
    where
        B: AutodiffBackend,
        M: AutodiffModule<MixedPrecision<B>>,
        O: Optimizer<M, MixedPrecision<B>>,
    {
        match self {
            Self::One(grads) => inner.step(lr, module, grads),
            Self::Many(grads) => inner.step_multi(lr, module, grads),
        }
    }
}

impl From<StepGrads> for GradAdaptor {
    fn from(grads: StepGrads) -> Self {
        match grads {
            StepGrads::One(grads) => grads.into(),
            StepGrads::Many(grads) => grads.into(),
        }
    }
}

impl<O> LossScaleOptimizer<O> {
    /// The step once the gradients are unscaled (and, across replicas, reduced): under a
    /// policy that needs no scaling they go straight to the inner optimizer; in manual mode
    /// the host checks them and moves its scale; in automatic mode the devices' scales move
    /// by the step's non-finite count, and the skip is decided on the device (FusedAdamW)
    /// or from that count read back. `compress`: whether the gradients still need
    /// compressing (`grads=aps`; the replica path compressed them before reducing).
    pub(super) fn finish_step<B, M>(
        &mut self,
        lr: LearningRate,
        module: M,
        grads: StepGrads,
        compress: bool,
    ) -> Result<M, LossScaleError>
    where
        B: AutodiffBackend,
        M: AutodiffModule<MixedPrecision<B>>,
        O: Optimizer<M, MixedPrecision<B>>,
    {
        let compressed = |grads: StepGrads, module: &M| {
            if compress {
                grads.compressed::<B, M>(module)
            } else {
                grads
            }
        };
        Ok(match self.pending() {
            Pending::NotNeeded => {
                self.scale.lock().total_steps += 1;
                compressed(grads, &module).step(&mut self.inner, lr, module)
            }
            _ if self.is_manual() => {
                let finite = grads.all_finite::<B, M>(&module);
                if self.admit_manual(finite) {
                    compressed(grads, &module).step(&mut self.inner, lr, module)
                } else {
                    module
                }
            }
            _ => {
                let slots = self.slots();
                let Some(found) = grads.nonfinite_count::<B, M>(&module) else {
                    // No gradient to apply.
                    self.scale.lock().total_steps += 1;
                    return Ok(grads.step(&mut self.inner, lr, module));
                };
                let grads = compressed(grads, &module);
                let module = match as_fused::<O, M, MixedPrecision<B>>(&mut self.inner) {
                    // The skip is decided on the device: nothing is read back.
                    Some(fused) => fused.run(lr, module, grads.into(), Some(found.clone()))?,
                    None => {
                        if self.finite_on_host::<Inner<B>>(&found, &slots) {
                            grads.step(&mut self.inner, lr, module)
                        } else {
                            module
                        }
                    }
                };
                self.move_scales::<Inner<B>>(&found, &slots);
                module
            }
        })
    }
}
