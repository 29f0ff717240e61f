//! The kernel traits for `Autodiff<B>`: the work is `B`'s, on the inner tensors; the results
//! are new leaves (these operations are not differentiated here).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_tensor::FloatDType;
use burn_tensor::backend::AutodiffBackend;
use burn_tensor::ops::{FloatTensor, IntTensor};

use burn_amp_kernels::accum::{AccumConfig, Fp8MatmulConfig};

use crate::accum::AccumBackend;
use crate::fp8::Fp8Backend;

type Ad<B, C> = Autodiff<B, C>;

impl<B: Fp8Backend, C: CheckpointStrategy> Fp8Backend for Autodiff<B, C> {
    const HOST_MEMORY: bool = B::HOST_MEMORY;

    fn fp8_amax(tensor: FloatTensor<Self>, layout: BlockLayout) -> FloatTensor<Self> {
        Ad::<B, C>::from_inner(B::fp8_amax(Ad::<B, C>::inner(tensor), layout))
    }

    fn fp8_scales(
        amax: FloatTensor<Self>,
        format: Fp8Format,
        rule: ScaleRule,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (s, si) = B::fp8_scales(Ad::<B, C>::inner(amax), format, rule);
        (Ad::<B, C>::from_inner(s), Ad::<B, C>::from_inner(si))
    }

    fn fp8_quantize(
        tensor: FloatTensor<Self>,
        scales: FloatTensor<Self>,
        layout: BlockLayout,
        cast: Fp8Cast,
    ) -> IntTensor<Self> {
        B::fp8_quantize(
            Ad::<B, C>::inner(tensor),
            Ad::<B, C>::inner(scales),
            layout,
            cast,
        )
    }

    fn fp8_dequantize(
        codes: IntTensor<Self>,
        scale_invs: FloatTensor<Self>,
        layout: BlockLayout,
        format: Fp8Format,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        let out = B::fp8_dequantize(codes, Ad::<B, C>::inner(scale_invs), layout, format, dtype);
        Ad::<B, C>::from_inner(out)
    }

    fn fp8_fake_quantize(
        tensor: FloatTensor<Self>,
        layout: BlockLayout,
        cast: Fp8Cast,
        rule: ScaleRule,
    ) -> FloatTensor<Self> {
        let out = B::fp8_fake_quantize(Ad::<B, C>::inner(tensor), layout, cast, rule);
        Ad::<B, C>::from_inner(out)
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
        let other = other.map(Ad::<B, C>::inner);
        let out = B::blocked_row_sums(Ad::<B, C>::inner(tensor), other, rows, cols, config);
        Ad::<B, C>::from_inner(out)
    }

    fn blocked_matmul(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        dims: (u32, u32, u32),
        config: AccumConfig,
    ) -> FloatTensor<Self> {
        let out = B::blocked_matmul(Ad::<B, C>::inner(a), Ad::<B, C>::inner(b), dims, config);
        Ad::<B, C>::from_inner(out)
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
            Ad::<B, C>::inner(a_scale_invs),
            b_codes,
            Ad::<B, C>::inner(b_scale_invs),
            dims,
            format,
            config,
        );
        Ad::<B, C>::from_inner(out)
    }
}
