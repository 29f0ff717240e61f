//! [`OpContext`]: what one op runs under, resolved once by [`resolve`](super::resolve) and
//! handed by value to the casting rule and the kernels it picks.

use core::cell::OnceCell;

use burn_amp_kernels::cpu::cast::Format;
use burn_tensor::FloatDType;
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;

use crate::cpu::RoutedOps;
use crate::fp8::training::Fp8Site;
use crate::policy::{Kernels, Policy};
use crate::registry;

/// Whether an op's products may go through the FP8 site under an FP8 policy: each compute
/// op's row of the class table says so (`ComputeOp` in `backend/ops`); other ops never do. Matmul, linear and the convolutions do; attention's
/// products, embeddings and deformable convolutions stay in the 16-bit compute dtype
/// (Transformer Engine's default recipes, too, quantize the GEMMs of linear layers and leave
/// attention's in 16 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fp8Use {
    /// Through the FP8 site when the policy asks for FP8.
    Site,
    /// Never in FP8.
    Never,
}

/// What one op runs under: its policy, its FP8 site, and the backend's kernels.
pub(crate) struct OpContext<B: Backend> {
    /// The policy in force for the op's device, checked against `B`.
    pub policy: Policy,
    /// The FP8 treatment of the op's products: under an FP8 policy, for an op whose
    /// [`Fp8Use`] is `Site`.
    pub fp8: Option<Fp8Site<B>>,
    /// burn-amp's kernels for `B`, looked up at first use (most ops under `float32` never
    /// ask).
    kernels: OnceCell<Option<RoutedOps<B>>>,
}

impl<B: Backend> OpContext<B> {
    /// A context of `policy` with no FP8 site.
    pub fn new(policy: Policy) -> Self {
        Self::with_fp8(policy, None)
    }

    pub(super) fn with_fp8(policy: Policy, fp8: Option<Fp8Site<B>>) -> Self {
        Self {
            policy,
            fp8,
            kernels: OnceCell::new(),
        }
    }

    /// burn-amp's kernels for `B` (Flex), where `B` has them and the policy's kernels are
    /// `auto`: casts run on them.
    pub fn kernels(&self) -> Option<RoutedOps<B>> {
        if self.policy.kernels() != Kernels::Auto {
            return None;
        }
        *self.kernels.get_or_init(registry::routed::<B>)
    }

    /// The kernels a compute-class op hands its operands to uncast, with the format they
    /// round them to: [`kernels`](Self::kernels) under an f16 or bf16 compute dtype.
    pub fn routed(&self) -> Option<(RoutedOps<B>, Format)> {
        let format = match self.policy.compute_dtype() {
            FloatDType::BF16 => Format::Bf16,
            FloatDType::F16 => Format::F16,
            _ => return None,
        };
        self.kernels().map(|ops| (ops, format))
    }

    /// The routed kernels of a mixed policy (as [`routed`](Self::routed)), for the ops
    /// around the products.
    pub fn routed_ops(&self) -> Option<RoutedOps<B>> {
        self.routed().map(|(ops, _)| ops)
    }

    /// Runs a compute-class op `op(lhs, rhs)` whose inputs are in the compute dtype: as it
    /// is, or through its FP8 site.
    pub fn compute(
        &self,
        kind: &str,
        lhs: FloatTensor<B>,
        rhs: FloatTensor<B>,
        op: impl FnOnce(FloatTensor<B>, FloatTensor<B>) -> FloatTensor<B>,
    ) -> FloatTensor<B> {
        match &self.fp8 {
            Some(site) => {
                // FP8 rounds each operand as a flat tensor: a view (attention's permuted
                // operands) is made row-major on burn-amp's row copy where `B` has it (Flex),
                // not by the flattening reshape's copy, a value at a time.
                let [lhs, rhs] = [lhs, rhs].map(|t| match self.kernels() {
                    Some(ops) => (ops.contiguous)(ops.isa, t),
                    None => t,
                });
                site.run(kind, lhs, rhs, op)
            }
            None => op(lhs, rhs),
        }
    }
}
