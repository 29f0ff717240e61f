//! The CPU backends take the reference path: the default methods of the kernel traits;
//! Flex also has burn-amp's CPU kernels (`crate::cpu`), FP8 amaxes and fake quantization
//! among them.

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

    use burn_amp_kernels::fp8::launch::BlockLayout;
    use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, ScaleRule};
    use burn_tensor::FloatDType;
    use burn_tensor::ops::{FloatTensor, IntTensor};

    use crate::fp8::backend::{
        portable_amax, portable_dequantize, portable_fake_quantize, portable_quantize,
        portable_through,
    };
    use crate::registry;

    /// Amaxes, fake quantization and codes on the CPU kernels; scales portable (one value a
    /// block).
    impl Fp8Backend for Flex {
        const HOST_MEMORY: bool = true;

        fn fp8_amax(tensor: FloatTensor<Self>, layout: BlockLayout) -> FloatTensor<Self> {
            flex::fp8::amax(registry::isa(), &tensor, layout)
                .unwrap_or_else(|| portable_amax::<Self>(tensor, layout))
        }

        fn fp8_fake_quantize(
            tensor: FloatTensor<Self>,
            layout: BlockLayout,
            cast: Fp8Cast,
            rule: ScaleRule,
        ) -> FloatTensor<Self> {
            flex::fp8::fake_quantize(registry::isa(), &tensor, layout, cast, rule)
                .unwrap_or_else(|| portable_fake_quantize::<Self>(tensor, layout, cast, rule))
        }

        fn fp8_fake_quantize_through(
            tensor: FloatTensor<Self>,
            through: FloatDType,
            layout: BlockLayout,
            cast: Fp8Cast,
            rule: ScaleRule,
        ) -> FloatTensor<Self> {
            match flex::fp8::fake_quantize_through(
                registry::isa(),
                &tensor,
                through,
                layout,
                cast,
                rule,
            ) {
                Some(values) => values,
                None => portable_through::<Self>(tensor, through, layout, cast, rule),
            }
        }

        fn fp8_quantize(
            tensor: FloatTensor<Self>,
            scales: FloatTensor<Self>,
            layout: BlockLayout,
            cast: Fp8Cast,
        ) -> IntTensor<Self> {
            flex::fp8::quantize(registry::isa(), &tensor, &scales, layout, cast)
                .unwrap_or_else(|| portable_quantize::<Self>(tensor, scales, layout, cast))
        }

        fn fp8_dequantize(
            codes: IntTensor<Self>,
            scale_invs: FloatTensor<Self>,
            layout: BlockLayout,
            format: Fp8Format,
            dtype: FloatDType,
        ) -> FloatTensor<Self> {
            flex::fp8::dequantize(registry::isa(), &codes, &scale_invs, layout, format, dtype)
                .unwrap_or_else(|| {
                    portable_dequantize::<Self>(codes, scale_invs, layout, format, dtype)
                })
        }
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
