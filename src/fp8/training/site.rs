//! One FP8 matmul site, as the decorator sees it: the inputs go to E4M3 before the op, the
//! output is wrapped so its gradient goes to E5M2 on the way back.
//!
//! An [`Fp8Site`] is a value: `crate::context` builds it once per op from the policy in
//! force (its scaling), the backend's registered operations and the numerics report being
//! recorded, if any.

use burn_tensor::TensorMetadata;
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;

use super::numerics::{Observer, SiteTag};
use super::registry::Fp8Ops;
use super::scaling::{Fp8Role, Fp8Scaling};

/// The FP8 treatment of one compute-class op under an FP8 policy.
pub(crate) struct Fp8Site<B: Backend> {
    ops: Fp8Ops<B>,
    scaling: Fp8Scaling,
    observer: Option<Observer>,
}

impl<B: Backend> Fp8Site<B> {
    pub(crate) fn new(ops: Fp8Ops<B>, scaling: Fp8Scaling, observer: Option<Observer>) -> Self {
        Self {
            ops,
            scaling,
            observer,
        }
    }

    /// Runs `op(lhs, rhs)` (a matmul, linear or convolution whose inputs are already in the
    /// compute dtype) on E4M3-rounded operands, with its output gradient rounded to E5M2.
    /// `kind` labels the site in the numerics report.
    pub(crate) fn run(
        &self,
        kind: &str,
        lhs: FloatTensor<B>,
        rhs: FloatTensor<B>,
        op: impl FnOnce(FloatTensor<B>, FloatTensor<B>) -> FloatTensor<B>,
    ) -> FloatTensor<B> {
        let tag = self
            .observer
            .as_ref()
            .map(|o| o.site(kind, &lhs.shape(), &rhs.shape()));
        let lhs = self.quantize(lhs, Fp8Role::Input, &tag);
        let rhs = self.quantize(rhs, Fp8Role::Weight, &tag);
        self.output(op(lhs, rhs), tag)
    }

    /// `tensor`, the op's operand of `role`, rounded to E4M3 (straight-through gradient).
    fn quantize(
        &self,
        tensor: FloatTensor<B>,
        role: Fp8Role,
        tag: &Option<SiteTag>,
    ) -> FloatTensor<B> {
        (self.ops.quantize)(tensor, role, self.scaling.recipe(role), tag.clone())
    }

    /// The op's output, unchanged; its gradient is rounded to E5M2 on the way back.
    fn output(&self, output: FloatTensor<B>, tag: Option<SiteTag>) -> FloatTensor<B> {
        let role = Fp8Role::Gradient;
        match self.ops.quantize_grad {
            Some(quantize_grad) => quantize_grad(output, role, self.scaling.recipe(role), tag),
            None => output,
        }
    }
}
