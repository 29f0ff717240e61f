//! `Fp8Backend` for `Autodiff<B>`: the work is `B`'s, on the inner tensors; the results are
//! new leaves (quantization is not differentiated here).

use burn::backend::Autodiff;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::scale::ScaleRule;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_tensor::FloatDType;
use burn_tensor::backend::AutodiffBackend;
use burn_tensor::ops::{FloatTensor, IntTensor};

use super::Fp8Backend;

type Ad<B, C> = Autodiff<B, C>;

impl<B: Fp8Backend, C: CheckpointStrategy> Fp8Backend for Autodiff<B, C> {
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
}
