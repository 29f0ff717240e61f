//! The kernel traits for [`MixedPrecision<B>`]: same primitives as `B`, so the work is
//! `B`'s.

use burn_amp_kernels::accum::{AccumConfig, Fp8MatmulConfig};
use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_tensor::FloatDType;
use burn_tensor::ops::{FloatTensor, IntTensor};

use crate::MixedPrecision;
use crate::accum::AccumBackend;
use crate::fp8::Fp8Backend;

impl<B: Fp8Backend> Fp8Backend for MixedPrecision<B> {
    const HOST_MEMORY: bool = B::HOST_MEMORY;

    fn fp8_amax(tensor: FloatTensor<Self>, layout: BlockLayout) -> FloatTensor<Self> {
        B::fp8_amax(tensor, layout)
    }

    fn fp8_scales(
        amax: FloatTensor<Self>,
        format: Fp8Format,
        rule: ScaleRule,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        B::fp8_scales(amax, format, rule)
    }

    fn fp8_quantize(
        tensor: FloatTensor<Self>,
        scales: FloatTensor<Self>,
        layout: BlockLayout,
        cast: Fp8Cast,
    ) -> IntTensor<Self> {
        B::fp8_quantize(tensor, scales, layout, cast)
    }

    fn fp8_dequantize(
        codes: IntTensor<Self>,
        scale_invs: FloatTensor<Self>,
        layout: BlockLayout,
        format: Fp8Format,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        B::fp8_dequantize(codes, scale_invs, layout, format, dtype)
    }

    fn fp8_fake_quantize(
        tensor: FloatTensor<Self>,
        layout: BlockLayout,
        cast: Fp8Cast,
        rule: ScaleRule,
    ) -> FloatTensor<Self> {
        B::fp8_fake_quantize(tensor, layout, cast, rule)
    }
}

impl<B: AccumBackend> AccumBackend for MixedPrecision<B> {
    fn blocked_row_sums(
        tensor: FloatTensor<Self>,
        other: Option<FloatTensor<Self>>,
        rows: u32,
        cols: u32,
        config: AccumConfig,
    ) -> FloatTensor<Self> {
        B::blocked_row_sums(tensor, other, rows, cols, config)
    }

    fn blocked_matmul(
        a: FloatTensor<Self>,
        b: FloatTensor<Self>,
        dims: (u32, u32, u32),
        config: AccumConfig,
    ) -> FloatTensor<Self> {
        B::blocked_matmul(a, b, dims, config)
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
        B::fp8_block_matmul(
            a_codes,
            a_scale_invs,
            b_codes,
            b_scale_invs,
            dims,
            format,
            config,
        )
    }
}
