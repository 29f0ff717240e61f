//! The kernel traits for the backends that hand the work to the one they wrap:
//! [`MixedPrecision<B>`] (the same primitives) and `Autodiff<B>` (the inner primitives; the
//! results are new leaves: these operations are not differentiated here). Each trait's
//! methods are written once, in `forward_kernels!`, with how a wrapper unwraps a float
//! tensor and wraps one back; a wrapper is one line at the end. A new kernel op is its
//! default method (the portable path), its CubeCL launch (`cube.rs`), its fused
//! registration (`fusion.rs`) and its line here.

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_amp_kernels::accum::{AccumConfig, Fp8MatmulConfig};
use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_tensor::FloatDType;
use burn_tensor::backend::Backend;
use burn_tensor::ops::{FloatTensor, IntTensor};

use crate::MixedPrecision;
use crate::accum::AccumBackend;
use crate::fp8::Fp8Backend;

/// `Fp8Backend` and `AccumBackend` for `$ty` (with generics `[$g]`), each method `$inner`'s
/// on the float tensors `$into` unwraps, its float results wrapped by `$from`.
macro_rules! forward_kernels {
    ([$($g:tt)*] $ty:ty, $inner:ident, $into:path, $from:path) => {
        impl<$($g)*> Fp8Backend for $ty
        where
            $inner: Fp8Backend,
        {
            const HOST_MEMORY: bool = $inner::HOST_MEMORY;

            fn fp8_amax(tensor: FloatTensor<Self>, layout: BlockLayout) -> FloatTensor<Self> {
                $from($inner::fp8_amax($into(tensor), layout))
            }

            fn fp8_scales(
                amax: FloatTensor<Self>,
                format: Fp8Format,
                rule: ScaleRule,
            ) -> (FloatTensor<Self>, FloatTensor<Self>) {
                let (s, si) = $inner::fp8_scales($into(amax), format, rule);
                ($from(s), $from(si))
            }

            fn fp8_quantize(
                tensor: FloatTensor<Self>,
                scales: FloatTensor<Self>,
                layout: BlockLayout,
                cast: Fp8Cast,
            ) -> IntTensor<Self> {
                $inner::fp8_quantize($into(tensor), $into(scales), layout, cast)
            }

            fn fp8_dequantize(
                codes: IntTensor<Self>,
                scale_invs: FloatTensor<Self>,
                layout: BlockLayout,
                format: Fp8Format,
                dtype: FloatDType,
            ) -> FloatTensor<Self> {
                $from($inner::fp8_dequantize(codes, $into(scale_invs), layout, format, dtype))
            }

            fn fp8_fake_quantize(
                tensor: FloatTensor<Self>,
                layout: BlockLayout,
                cast: Fp8Cast,
                rule: ScaleRule,
            ) -> FloatTensor<Self> {
                $from($inner::fp8_fake_quantize($into(tensor), layout, cast, rule))
            }
        }

        impl<$($g)*> AccumBackend for $ty
        where
            $inner: AccumBackend,
        {
            fn blocked_row_sums(
                tensor: FloatTensor<Self>,
                other: Option<FloatTensor<Self>>,
                rows: u32,
                cols: u32,
                config: AccumConfig,
            ) -> FloatTensor<Self> {
                let other = other.map($into);
                $from($inner::blocked_row_sums($into(tensor), other, rows, cols, config))
            }

            fn blocked_matmul(
                a: FloatTensor<Self>,
                b: FloatTensor<Self>,
                dims: (u32, u32, u32),
                config: AccumConfig,
            ) -> FloatTensor<Self> {
                $from($inner::blocked_matmul($into(a), $into(b), dims, config))
            }

            fn fp8_block_matmul(
                a_codes: IntTensor<Self>,
                a_scale_invs: FloatTensor<Self>,
                b_codes: IntTensor<Self>,
                b_scale_invs: FloatTensor<Self>,
                dims: (u32, u32, u32),
                format: Fp8Format,
                config: Fp8MatmulConfig,
            ) -> FloatTensor<Self> {
                let (sa, sb) = ($into(a_scale_invs), $into(b_scale_invs));
                $from($inner::fp8_block_matmul(a_codes, sa, b_codes, sb, dims, format, config))
            }
        }
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

forward_kernels!([B: Backend] MixedPrecision<B>, B, same, same);
forward_kernels!([B: Backend, C: CheckpointStrategy] Autodiff<B, C>, B, inner::<B, C>, from_inner::<B, C>);
