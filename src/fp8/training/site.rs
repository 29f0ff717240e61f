//! One FP8 matmul site, as the decorator sees it: the inputs go to FP8 before the op, the
//! output is wrapped so its gradient goes to FP8 on the way back.
//!
//! An [`Fp8Site`] is a value: `crate::context` builds it once per op from the policy in
//! force (its scaling and format choice), the backend's registered operations, the
//! [`Fp8History`] bound to the device (stateful scalings) and the numerics report being
//! recorded, if any.

use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;
use burn_tensor::{FloatDType, TensorMetadata};

use super::history::{Fp8History, Lane, Slot};
use super::numerics::{Observer, SiteTag};
use super::ops::Fp8Ops;
use super::quant::Plan;
use super::scaling::{Fp8Formats, Fp8Role, Fp8Scaling};

/// The FP8 treatment of one compute-class op under an FP8 policy.
pub(crate) struct Fp8Site<B: Backend> {
    pub ops: Fp8Ops<B>,
    pub scaling: Fp8Scaling,
    pub formats: Fp8Formats,
    /// The policy's compute dtype: an f32 operand is rounded to FP8 through it (the site's
    /// operands arrive in it, or in f32 where the product's kernels read f32 operands in
    /// it).
    pub compute: FloatDType,
    /// Where a stateful scaling keeps its state, and the device's lane in it.
    pub history: Option<(Fp8History, Lane)>,
    pub observer: Option<Observer>,
}

impl<B: Backend> Fp8Site<B> {
    /// Runs `op(lhs, rhs)` (a matmul, linear or convolution whose inputs are in the compute
    /// dtype, or in f32 for a product that reads them in it) on FP8-rounded operands, with
    /// its output gradient rounded to FP8. An f32 operand is rounded as its cast to the
    /// compute dtype would be, and stays f32: the same values, and its gradient comes back
    /// in f32 from the product itself.
    /// `kind` labels the site in the numerics report and the history.
    pub(crate) fn run(
        &self,
        kind: &str,
        lhs: FloatTensor<B>,
        rhs: FloatTensor<B>,
        op: impl FnOnce(FloatTensor<B>, FloatTensor<B>) -> FloatTensor<B>,
    ) -> FloatTensor<B> {
        let label = || {
            format!(
                "{kind} {:?} x {:?}",
                lhs.shape().as_slice(),
                rhs.shape().as_slice()
            )
        };
        let tag = self
            .observer
            .as_ref()
            .map(|o| o.site(kind, &lhs.shape(), &rhs.shape()));
        // State moves only in steps that train: without a backward pass (validation,
        // inference) a stateful scaling falls back to current scaling.
        let slot = match (&self.history, self.ops.quantize_grad) {
            (Some((history, lane)), Some(_)) if self.scaling.is_stateful() => {
                Some(history.open_site(*lane, label))
            }
            _ => None,
        };
        let lhs = (self.ops.quantize)(lhs, self.plan(Fp8Role::Input, &slot, &tag));
        let rhs = (self.ops.quantize)(rhs, self.plan(Fp8Role::Weight, &slot, &tag));
        let output = op(lhs, rhs);
        match self.ops.quantize_grad {
            Some(quantize_grad) => quantize_grad(output, self.plan(Fp8Role::Gradient, &slot, &tag)),
            None => output,
        }
    }

    fn plan(&self, role: Fp8Role, slot: &Option<Slot>, tag: &Option<SiteTag>) -> Plan {
        Plan {
            role,
            scaling: self.scaling,
            formats: self.formats,
            // A gradient is the product's output's, in the compute dtype already.
            through: (role != Fp8Role::Gradient).then_some(self.compute),
            slot: slot.clone(),
            site: tag.clone(),
        }
    }
}
