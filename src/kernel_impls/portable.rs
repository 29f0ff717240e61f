//! The CPU backends take the reference path: the default methods of the kernel traits;
//! Flex also has burn-amp's CPU kernels (`crate::cpu`).

use crate::accum::AccumBackend;
use crate::fp8::Fp8Backend;
use crate::registry::KernelBackend;

#[cfg(feature = "flex")]
mod flex {
    use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
    use burn::backend::{Autodiff, Flex};
    use burn_amp_kernels::cpu::Isa;

    use super::*;
    use crate::cpu::flex;
    use crate::registry::BackendKernels;

    impl Fp8Backend for Flex {
        const HOST_MEMORY: bool = true;
    }

    impl AccumBackend for Flex {}

    impl KernelBackend for Flex {
        fn kernels(isa: Isa) -> BackendKernels<Self> {
            BackendKernels {
                routed: Some(flex::ops(isa)),
                adamw: Some(flex::adamw),
            }
        }

        fn autodiff_kernels<C: CheckpointStrategy>(isa: Isa) -> BackendKernels<Autodiff<Self, C>> {
            BackendKernels {
                routed: Some(flex::autodiff_ops::<C>(isa)),
                adamw: None,
            }
        }
    }
}

#[cfg(feature = "ndarray")]
impl Fp8Backend for burn::backend::NdArray {
    const HOST_MEMORY: bool = true;
}
#[cfg(feature = "ndarray")]
impl AccumBackend for burn::backend::NdArray {}
#[cfg(feature = "ndarray")]
impl KernelBackend for burn::backend::NdArray {}
