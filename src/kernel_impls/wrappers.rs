//! The kernel traits for the backends that hand the work to the one they wrap:
//! [`MixedPrecision<B>`] (the same primitives) and `Autodiff<B>` (the inner primitives; the
//! results are new leaves: these operations are not differentiated here). The methods come
//! from the table of kernel ops (`table.rs`), with how a wrapper unwraps a float tensor and
//! wraps one back; a wrapper is one line at the end.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_amp_kernels::accum::{AccumConfig, Fp8MatmulConfig};
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_tensor::FloatDType;
use burn_tensor::backend::Backend;
use burn_tensor::ops::FloatTensor;

use super::table::{kernel_ops, param_ty, return_ty};
use crate::MixedPrecision;
use crate::accum::AccumBackend;
use crate::fp8::Fp8Backend;
use crate::registry::{BackendKernels, KernelBackend};

/// One kernel trait for `$ty` (generics `[$g]`): each method `$inner`'s, on the float
/// tensors `$into` unwraps, its float results wrapped by `$from`; the trait's constants
/// `$inner`'s.
macro_rules! forward {
    (([$($g:tt)*] $ty:ty, $inner:ident, $into:path, $from:path)
     $trait:ident [$($c:ident: $cty:ty),*] {
        $($op:ident($($arg:ident: $kind:tt),*) -> $ret:tt [$($out:tt)*];)*
    }) => {
        impl<$($g)*> $trait for $ty
        where
            $inner: $trait,
        {
            $(const $c: $cty = $inner::$c;)*
            $(
                fn $op($($arg: param_ty!($kind)),*) -> return_ty!($ret) {
                    let result = $inner::$op($(unwrap_arg!($into, $kind, $arg)),*);
                    wrap_result!($from, $ret, result)
                }
            )*
        }
    };
}

/// A parameter as the inner backend takes it.
macro_rules! unwrap_arg {
    ($into:path, F, $arg:ident) => {
        $into($arg)
    };
    ($into:path, O, $arg:ident) => {
        $arg.map($into)
    };
    ($into:path, $kind:tt, $arg:ident) => {
        $arg
    };
}

/// The inner backend's result as the wrapper's.
macro_rules! wrap_result {
    ($from:path, F, $result:ident) => {
        $from($result)
    };
    ($from:path, I, $result:ident) => {
        $result
    };
    ($from:path, (F, F), $result:ident) => {
        ($from($result.0), $from($result.1))
    };
}

/// A `MixedPrecision<B>` tensor is `B`'s.
fn same<T>(tensor: T) -> T {
    tensor
}

/// The inner tensor (not through `AutodiffBackend::inner`: with Burn's `distributed` feature
/// `Autodiff<B>` is an `AutodiffBackend` only for `B: DistributedBackend`).
fn inner<B: Backend, C: CheckpointStrategy>(tensor: FloatTensor<Autodiff<B, C>>) -> FloatTensor<B> {
    tensor.primitive
}

/// A new leaf around an inner tensor.
fn from_inner<B: Backend, C: CheckpointStrategy>(
    tensor: FloatTensor<B>,
) -> FloatTensor<Autodiff<B, C>> {
    <FloatTensor<Autodiff<B, C>>>::new(tensor)
}

kernel_ops!(forward!([B: Backend] MixedPrecision<B>, B, same, same));
kernel_ops!(
    forward!([B: Backend, C: CheckpointStrategy] Autodiff<B, C>, B, inner::<B, C>, from_inner::<B, C>)
);

/// `MixedPrecision<B>`'s tensors are `B`'s: `B`'s kernels run on them, except the routed
/// ops (the decorator routes `B`'s ops to them itself).
impl<B: KernelBackend> KernelBackend for MixedPrecision<B> {
    fn kernels(isa: Isa) -> BackendKernels<Self> {
        BackendKernels {
            adamw: B::kernels(isa).adamw,
            ..Default::default()
        }
    }
}

/// `Autodiff<B, C>` has what `B` has for its autodiff tensors.
impl<B: KernelBackend, C: CheckpointStrategy> KernelBackend for Autodiff<B, C> {
    fn kernels(isa: Isa) -> BackendKernels<Self> {
        B::autodiff_kernels::<C>(isa)
    }
}
