//! FP8 on Flex tensors through the CPU kernels (`burn_amp_kernels::cpu::fp8`): amaxes, fake
//! quantization, and codes to and from values, each one vectorised, threaded pass over the
//! tensor in its own dtype, the same bytes as the portable path (which copies the tensor to
//! f32 and handles one value at a time). Codes are `u32` words, four codes each, as every
//! FP8 backend stores them (on a little-endian CPU, the words' bytes are the codes in
//! order).

use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::{Isa, fp8};
use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, ScaleRule};
use burn_tensor::{DType, FloatDType, Shape};

use super::layout::contiguous;
use super::tensor::{format, from_vec, values, values_f32};
use crate::dtype::with_float;

/// `t`'s values rounded to FP8 and back (scales from each block's amax by `rule`), in its
/// dtype and shape; `None` for a dtype the kernels do not take (f64).
///
/// # Panics
/// When `layout` does not describe `t` (a caller's bug: the FP8 policies build it from the
/// tensor's shape).
pub(crate) fn fake_quantize(
    isa: Isa,
    t: &FlexTensor,
    layout: BlockLayout,
    cast: Fp8Cast,
    rule: ScaleRule,
) -> Option<FlexTensor> {
    let own = FloatDType::from(t.dtype());
    fake_quantize_through(isa, t, own, layout, cast, rule)
}

/// [`fake_quantize`] of `t`'s values cast to `through` (and the results rounded to it), in
/// `t`'s dtype, in one pass of the kernels; `None` for a dtype the kernels do not take.
///
/// # Panics
/// As [`fake_quantize`].
pub(crate) fn fake_quantize_through(
    isa: Isa,
    t: &FlexTensor,
    through: FloatDType,
    layout: BlockLayout,
    cast: Fp8Cast,
    rule: ScaleRule,
) -> Option<FlexTensor> {
    format(t.dtype())?;
    let through = format(DType::from(through))?;
    let t = contiguous(t);
    let shape = t.layout().shape().clone();
    Some(with_float!(t.dtype(), T => {
        let x = values::<T>(&t);
        let mut out = super::tensor::to_fill::<T>(x.len());
        fp8::fake_quantize_through(isa, x, &mut out, through, layout, cast, rule)
            .unwrap_or_else(|e| panic!("FP8 fake quantization of a tensor of shape {shape:?}: {e}"));
        from_vec(out, shape)
    }, _ => unreachable!("checked above")))
}

/// The amax of each block of `t` (f32, `[layout.num_blocks()]`); `None` for a dtype the
/// kernels do not take.
///
/// # Panics
/// As [`fake_quantize`].
pub(crate) fn amax(isa: Isa, t: &FlexTensor, layout: BlockLayout) -> Option<FlexTensor> {
    format(t.dtype())?;
    let t = contiguous(t);
    let bits = with_float!(t.dtype(), T => {
        fp8::block_amax(isa, values::<T>(&t), layout)
    }, _ => unreachable!("checked above"))
    .unwrap_or_else(|e| {
        panic!(
            "FP8 amax of a tensor of shape {:?}: {e}",
            t.layout().shape()
        )
    });
    let n = bits.len();
    Some(from_vec(
        bits.into_iter().map(f32::from_bits).collect(),
        Shape::new([n]),
    ))
}

/// `t` scaled by each block's entry of `scales` and encoded with `cast`: the packed codes
/// (`u32`, `[ceil(len / 4)]`); `None` for a dtype the kernels do not take.
///
/// # Panics
/// As [`fake_quantize`], or when `scales` has fewer entries than the layout has blocks.
pub(crate) fn quantize(
    isa: Isa,
    t: &FlexTensor,
    scales: &FlexTensor,
    layout: BlockLayout,
    cast: Fp8Cast,
) -> Option<FlexTensor> {
    if cfg!(target_endian = "big") {
        return None;
    }
    format(t.dtype())?;
    let t = contiguous(t);
    let scales = values_f32(isa, scales);
    let len = t.layout().num_elements();
    let mut words = vec![0u32; len.div_ceil(4)];
    let codes = &mut bytemuck::cast_slice_mut::<u32, u8>(&mut words)[..len];
    with_float!(t.dtype(), T => {
        fp8::quantize(isa, values::<T>(&t), codes, layout, cast, &scales)
    }, _ => unreachable!("checked above"))
    .unwrap_or_else(|e| {
        panic!(
            "FP8 quantization of a tensor of shape {:?}: {e}",
            t.layout().shape()
        )
    });
    let n = words.len();
    Some(FlexTensor::new(
        super::pool::bytes(words),
        burn::backend::flex::Layout::contiguous(Shape::new([n])),
        DType::U32,
    ))
}

/// Packed `codes` (`u32` words) decoded in `format`, times each block's entry of
/// `scale_invs`, as `[layout.len]` values of `dtype`; `None` for codes that are not `u32`
/// words or a dtype the kernels do not take.
///
/// # Panics
/// As [`quantize`].
pub(crate) fn dequantize(
    isa: Isa,
    codes: &FlexTensor,
    scale_invs: &FlexTensor,
    layout: BlockLayout,
    fp8_format: Fp8Format,
    dtype: FloatDType,
) -> Option<FlexTensor> {
    let target = DType::from(dtype);
    if cfg!(target_endian = "big") || codes.dtype() != DType::U32 || format(target).is_none() {
        return None;
    }
    let codes = contiguous(codes);
    let len = layout.len as usize;
    let words = codes.as_slice::<u32>()?;
    let bytes = bytemuck::cast_slice::<u32, u8>(words);
    if bytes.len() < len {
        return None;
    }
    let invs = values_f32(isa, scale_invs);
    Some(with_float!(target, T => {
        let mut out = super::tensor::to_fill::<T>(len);
        fp8::dequantize(isa, &bytes[..len], &mut out, layout, fp8_format, &invs)
            .unwrap_or_else(|e| panic!("FP8 dequantization of {len} codes: {e}"));
        from_vec(out, Shape::new([len]))
    }, _ => unreachable!("checked above")))
}
