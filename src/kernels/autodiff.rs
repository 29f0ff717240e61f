//! The kernel traits for `Autodiff<B>`: the work is `B`'s, on the inner tensors; the results
//! are new leaves (these operations are not differentiated here).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_tensor::FloatDType;
use burn_tensor::backend::Backend;
use burn_tensor::ops::{FloatTensor, IntTensor};

use burn_amp_kernels::accum::{AccumConfig, Fp8MatmulConfig};

use crate::accum::AccumBackend;
use crate::fp8::Fp8Backend;

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

impl<B: Fp8Backend, C: CheckpointStrategy> Fp8Backend for Autodiff<B, C> {
    const HOST_MEMORY: bool = B::HOST_MEMORY;

    fn fp8_amax(tensor: FloatTensor<Self>, layout: BlockLayout) -> FloatTensor<Self> {
        from_inner::<B, C>(B::fp8_amax(inner::<B, C>(tensor), layout))
    }

    fn fp8_scales(
        amax: FloatTensor<Self>,
        format: Fp8Format,
        rule: ScaleRule,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (s, si) = B::fp8_scales(inner::<B, C>(amax), format, rule);
        (from_inner::<B, C>(s), from_inner::<B, C>(si))
    }

    fn fp8_quantize(
        tensor: FloatTensor<Self>,
        scales: FloatTensor<Self>,
        layout: BlockLayout,
        cast: Fp8Cast,
    ) -> IntTensor<Self> {
        B::fp8_quantize(inner::<B, C>(tensor), inner::<B, C>(scales), layout, cast)
    }

    fn fp8_dequantize(
        codes: IntTensor<Self>,
        scale_invs: FloatTensor<Self>,
        layout: BlockLayout,
        format: Fp8Format,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        let out = B::fp8_dequantize(codes, inner::<B, C>(scale_invs), layout, format, dtype);
        from_inner::<B, C>(out)
    }

    fn fp8_fake_quantize(
        tensor: FloatTensor<Self>,
        layout: BlockLayout,
        cast: Fp8Cast,
        rule: ScaleRule,
    ) -> FloatTensor<Self> {
        let out = B::fp8_fake_quantize(inner::<B, C>(tensor), layout, cast, rule);
        from_inner::<B, C>(out)
    }
}

impl<B: AccumBackend, C: CheckpointStrategy> AccumBackend for Autodiff<B, C> {
    fn blocked_row_sums(
        tensor: FloatTensor<Self>,
        other: Option<FloatTensor<Self>>,
        rows: u32,
        cols: u32,
        config: AccumConfig,
    ) -> FloatTensor<Self> {
        let other = other.map(inner::<B, C>);
        let out = B::blocked_row_sums(inner::<B, C>(tensor), other, rows, cols, config);
        from_inner::<B, C>(out)
    }

    fn blocked_matmul(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        dims: (u32, u32, u32),
        config: AccumConfig,
    ) -> FloatTensor<Self> {
        let out = B::blocked_matmul(inner::<B, C>(a), inner::<B, C>(b), dims, config);
        from_inner::<B, C>(out)
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
        let out = B::fp8_block_matmul(
            a_codes,
            inner::<B, C>(a_scale_invs),
            b_codes,
            inner::<B, C>(b_scale_invs),
            dims,
            format,
            config,
        );
        from_inner::<B, C>(out)
    }
}
