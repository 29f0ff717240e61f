//! Policies set for a scope (`with_policy`), on the thread that opens it.

use std::cell::RefCell;

use crate::policy::Policy;

thread_local! {
    /// Why a thread-local: a scope belongs to the thread that opened it, since Burn records
    /// each op on the thread that calls it; ops read it once, when they resolve their policy.
    static SCOPED: RefCell<Vec<Policy>> = const { RefCell::new(Vec::new()) };
}

/// The innermost scoped policy on this thread.
pub(super) fn innermost() -> Option<Policy> {
    SCOPED.with(|s| s.borrow().last().copied())
}

/// Runs `f` with `policy` in force on this thread, whatever the global and per-device
/// policies say, then restores what was in force before (also when `f` panics).
///
/// This is how the Keras guide's advice "keep the model's last layer in float32" reads:
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{FloatDType, Tensor, activation::softmax};
/// use burn_amp::{MixedPrecision, Policy, with_policy};
///
/// type B = MixedPrecision<Flex>;
/// let device = Default::default();
/// MixedPrecision::<Flex>::set_policy(&device, "mixed_float16")?;
///
/// let x = Tensor::<B, 2>::ones([2, 4], &device);
/// let w = Tensor::<B, 2>::ones([4, 3], &device);
/// assert_eq!(x.clone().matmul(w.clone()).dtype(), FloatDType::F16.into());
/// let head = with_policy(Policy::float32(), || x.matmul(w));
/// assert_eq!(head.dtype(), FloatDType::F32.into());
/// # MixedPrecision::<Flex>::clear_policy(&device);
/// # Ok::<(), burn_amp::PolicyError>(())
/// ```
pub fn with_policy<R>(policy: Policy, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            SCOPED.with(|s| s.borrow_mut().pop());
        }
    }
    SCOPED.with(|s| s.borrow_mut().push(policy));
    let _pop = Pop;
    f()
}
