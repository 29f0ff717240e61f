//! One FP8 matmul site, as the decorator sees it: the inputs go to E4M3 before the op, the
//! output is wrapped so its gradient goes to E5M2 on the way back.

use std::cell::Cell;

use burn_tensor::TensorMetadata;
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;

use super::numerics;
use super::registry::{self, Fp8Ops};
use super::scaling::{Fp8Role, Fp8Scaling};
use crate::policy::scope;

thread_local! {
    static SUSPENDED: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with FP8 off on this thread: the matmuls inside run in the compute dtype.
/// Attention's two matmuls use it, as in Transformer Engine and Keras, whose FP8 recipes
/// cover the linear layers and leave attention's score and value products in 16 bits.
pub(crate) fn without_fp8<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SUSPENDED.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SUSPENDED.with(|s| s.replace(true)));
    f()
}

/// Runs a compute-class op `op(lhs, rhs)` (a matmul, linear or convolution, whose inputs
/// are already in the compute dtype): as it is, or, under an FP8 policy, on E4M3-rounded
/// operands with its output gradient rounded to E5M2. `kind` labels the site in the
/// numerics report.
pub(crate) fn run<B: Backend>(
    kind: &str,
    lhs: FloatTensor<B>,
    rhs: FloatTensor<B>,
    op: impl FnOnce(FloatTensor<B>, FloatTensor<B>) -> FloatTensor<B>,
) -> FloatTensor<B> {
    match Site::<B>::begin(kind, &lhs, &rhs) {
        Some(site) => {
            let lhs = site.quantize(lhs, Fp8Role::Input);
            let rhs = site.quantize(rhs, Fp8Role::Weight);
            site.output(op(lhs, rhs))
        }
        None => op(lhs, rhs),
    }
}

/// An FP8 site of the forward pass: a matmul, linear or convolution under an FP8 policy.
struct Site<B: Backend> {
    ops: Fp8Ops<B>,
    scaling: Fp8Scaling,
    site: u32,
}

impl<B: Backend> Site<B> {
    /// The site, when the policy in force for `lhs`'s device has FP8 on; `kind` and the
    /// operand shapes label it in the numerics report.
    fn begin(kind: &str, lhs: &FloatTensor<B>, rhs: &FloatTensor<B>) -> Option<Self> {
        if SUSPENDED.with(Cell::get) {
            return None;
        }
        let scaling = scope::resolve::<B>(&B::float_device(lhs)).fp8_scaling()?;
        // `resolve` refuses an FP8 policy on an unregistered backend, so this finds it.
        let ops = registry::lookup::<B>()?;
        let site = numerics::next_site(kind, &lhs.shape(), &rhs.shape());
        Some(Self { ops, scaling, site })
    }

    /// `tensor`, the op's operand of `role`, rounded to E4M3 (straight-through gradient).
    fn quantize(&self, tensor: FloatTensor<B>, role: Fp8Role) -> FloatTensor<B> {
        (self.ops.quantize)(tensor, role, self.scaling.recipe(role), self.site)
    }

    /// The op's output, unchanged; its gradient is rounded to E5M2 on the way back.
    fn output(&self, output: FloatTensor<B>) -> FloatTensor<B> {
        let role = Fp8Role::Gradient;
        match self.ops.quantize_grad {
            Some(quantize_grad) => {
                quantize_grad(output, role, self.scaling.recipe(role), self.site)
            }
            None => output,
        }
    }
}
