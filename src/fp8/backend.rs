//! `Fp8Backend`: the FP8 operations a backend provides, on its primitives. The default
//! methods are the portable path — a round trip through the host and the CPU reference —
//! and give the same bytes as the kernels; CubeCL backends override them with the kernels.

use burn_amp_kernels::fp8::launch::BlockLayout;
use burn_amp_kernels::fp8::reference;
use burn_amp_kernels::fp8::scale::{ScaleRule, amax_bits, block_scale};
use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format};
use burn_tensor::TensorMetadata;
use burn_tensor::backend::Backend;
use burn_tensor::ops::{FloatTensor, IntTensor};
use burn_tensor::{DType, FloatDType, TensorData, read_sync};

use crate::cost;

/// A backend that can quantize to and from FP8.
///
/// Codes are packed four to a `u32` (value `4k + j` in bits `8j..8j+8` of word `k`), which is
/// byte for byte a `u8` array. Scales and amaxes are f32, one per block of a
/// [`BlockLayout`]. Every implementation gives the bytes of the CPU reference
/// ([`burn_amp_kernels::fp8::reference`]).
///
/// Implemented for Burn's CubeCL backends (wgpu, CUDA; fused or not) with the CubeCL
/// kernels, for Flex and NdArray with the portable default methods, and for `Autodiff<B>`
/// and [`MixedPrecision<B>`](crate::MixedPrecision) by handing the work to `B` (quantization is not differentiated
/// here). A custom backend gets the portable path with `impl Fp8Backend for MyBackend {}`;
/// FP8 policies then run on it once it is registered ([`register`](crate::register)).
pub trait Fp8Backend: Backend {
    /// Whether the backend's tensors live in host memory (Flex, NdArray): the portable
    /// methods' copies are then not reads back from a device, and the cost report does not
    /// count them (`burn_amp::cost`). A backend forwarding to another forwards this too.
    const HOST_MEMORY: bool = false;

    /// The amax of each block (f32, `[layout.num_blocks()]`). A block holding a NaN has a NaN
    /// amax.
    fn fp8_amax(tensor: FloatTensor<Self>, layout: BlockLayout) -> FloatTensor<Self> {
        portable_amax::<Self>(tensor, layout)
    }

    /// `(scales, scale_invs)` per block from per-block amaxes, by `rule`.
    fn fp8_scales(
        amax: FloatTensor<Self>,
        format: Fp8Format,
        rule: ScaleRule,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let device = Self::float_device(&amax);
        let scales: Vec<_> = portable_f32::<Self>(amax)
            .iter()
            .map(|a| block_scale(a.to_bits(), format, rule))
            .collect();
        (
            float_vec::<Self>(scales.iter().map(|s| s.scale).collect(), &device),
            float_vec::<Self>(scales.iter().map(|s| s.scale_inv).collect(), &device),
        )
    }

    /// Scales (by each element's block entry of `scales`) and quantizes `tensor`; returns
    /// the packed codes (`u32`, `[ceil(len / 4)]`).
    fn fp8_quantize(
        tensor: FloatTensor<Self>,
        scales: FloatTensor<Self>,
        layout: BlockLayout,
        cast: Fp8Cast,
    ) -> IntTensor<Self> {
        portable_quantize::<Self>(tensor, scales, layout, cast)
    }

    /// Decodes packed `codes` and multiplies each value by its block's `scale_invs` entry;
    /// returns `[layout.len]` values of `dtype`.
    fn fp8_dequantize(
        codes: IntTensor<Self>,
        scale_invs: FloatTensor<Self>,
        layout: BlockLayout,
        format: Fp8Format,
        dtype: FloatDType,
    ) -> FloatTensor<Self> {
        portable_dequantize::<Self>(codes, scale_invs, layout, format, dtype)
    }

    /// The values of a flat `tensor` rounded to FP8 and back, in its own dtype: scales from
    /// each block's amax by `rule`, then quantize and dequantize — what FP8 training feeds
    /// its matmuls. The same values as [`fp8_amax`](Self::fp8_amax),
    /// [`fp8_scales`](Self::fp8_scales), [`fp8_quantize`](Self::fp8_quantize) and
    /// [`fp8_dequantize`](Self::fp8_dequantize) in a row; the portable path does it in one
    /// pass over the host copy.
    fn fp8_fake_quantize(
        tensor: FloatTensor<Self>,
        layout: BlockLayout,
        cast: Fp8Cast,
        rule: ScaleRule,
    ) -> FloatTensor<Self> {
        portable_fake_quantize::<Self>(tensor, layout, cast, rule)
    }

    /// [`fp8_fake_quantize`](Self::fp8_fake_quantize) of `tensor` cast to `through` (to
    /// nearest even), cast back to the tensor's dtype: the scales are those of the cast
    /// values, and every value the result holds is one of `through`. What an FP8 site feeds
    /// a product that reads f32 operands in a 16-bit compute dtype. The default method does
    /// exactly that, in three ops; a backend whose kernels read through the narrower type
    /// (Flex) does it in one.
    fn fp8_fake_quantize_through(
        tensor: FloatTensor<Self>,
        through: FloatDType,
        layout: BlockLayout,
        cast: Fp8Cast,
        rule: ScaleRule,
    ) -> FloatTensor<Self> {
        portable_through::<Self>(tensor, through, layout, cast, rule)
    }
}

/// [`Fp8Backend::fp8_fake_quantize_through`]'s default: cast, fake-quantize, cast back.
pub(crate) fn portable_through<B: Fp8Backend>(
    tensor: FloatTensor<B>,
    through: FloatDType,
    layout: BlockLayout,
    cast: Fp8Cast,
    rule: ScaleRule,
) -> FloatTensor<B> {
    let dtype = tensor.dtype();
    if dtype == DType::from(through) {
        return B::fp8_fake_quantize(tensor, layout, cast, rule);
    }
    let narrow = B::float_cast(tensor, through);
    let values = B::fp8_fake_quantize(narrow, layout, cast, rule);
    B::float_cast(values, FloatDType::from(dtype))
}

/// [`Fp8Backend::fp8_amax`]'s portable path: the host copy's amaxes.
pub(crate) fn portable_amax<B: Fp8Backend>(
    tensor: FloatTensor<B>,
    layout: BlockLayout,
) -> FloatTensor<B> {
    let device = B::float_device(&tensor);
    let values = portable_f32::<B>(tensor);
    let amax = block_amax_bits(&values, layout)
        .into_iter()
        .map(f32::from_bits)
        .collect();
    float_vec::<B>(amax, &device)
}

/// [`Fp8Backend::fp8_quantize`]'s portable path: the host copy encoded a value at a time.
pub(crate) fn portable_quantize<B: Fp8Backend>(
    tensor: FloatTensor<B>,
    scales: FloatTensor<B>,
    layout: BlockLayout,
    cast: Fp8Cast,
) -> IntTensor<B> {
    let device = B::float_device(&tensor);
    let values = portable_f32::<B>(tensor);
    let scales = portable_f32::<B>(scales);
    let mut words = vec![0u32; layout.len.div_ceil(4) as usize];
    for (i, x) in values.iter().enumerate() {
        let scale = scales[layout.block_of(i as u32) as usize];
        let code = reference::encode_scaled(*x, scale, cast, i as u32);
        words[i / 4] |= u32::from(code) << (8 * (i % 4));
    }
    let len = words.len();
    B::int_from_data(TensorData::new(words, [len]), &device)
}

/// [`Fp8Backend::fp8_dequantize`]'s portable path: the host copy decoded a value at a time.
pub(crate) fn portable_dequantize<B: Fp8Backend>(
    codes: IntTensor<B>,
    scale_invs: FloatTensor<B>,
    layout: BlockLayout,
    format: Fp8Format,
    dtype: FloatDType,
) -> FloatTensor<B> {
    let device = B::int_device(&codes);
    let words = portable_u32::<B>(codes);
    let scale_invs = portable_f32::<B>(scale_invs);
    let values: Vec<f32> = (0..layout.len as usize)
        .map(|i| {
            let code = (words[i / 4] >> (8 * (i % 4))) as u8;
            let scale_inv = scale_invs[layout.block_of(i as u32) as usize];
            reference::decode_scaled(code, format, scale_inv)
        })
        .collect();
    let out = float_vec::<B>(values, &device);
    if dtype == FloatDType::F32 {
        out
    } else {
        B::float_cast(out, dtype)
    }
}

/// [`Fp8Backend::fp8_fake_quantize`]'s portable path: one pass over the host copy.
pub(crate) fn portable_fake_quantize<B: Fp8Backend>(
    tensor: FloatTensor<B>,
    layout: BlockLayout,
    cast: Fp8Cast,
    rule: ScaleRule,
) -> FloatTensor<B> {
    let device = B::float_device(&tensor);
    let dtype = FloatDType::from(tensor.dtype());
    let values = portable_f32::<B>(tensor);
    let scales: Vec<_> = block_amax_bits(&values, layout)
        .into_iter()
        .map(|a| block_scale(a, cast.format, rule))
        .collect();
    let decoded: Vec<f32> = (0..=255u8)
        .map(|c| reference::decode(c, cast.format))
        .collect();
    let round_trip = |i: usize, x: f32| {
        let s = scales[layout.block_of(i as u32) as usize];
        let code = reference::encode_scaled(x, s.scale, cast, i as u32);
        reference::scaled(decoded[code as usize], s.scale_inv)
    };
    let data = match dtype {
        FloatDType::F16 => TensorData::new(
            parallel_map(&values, |i, x| half::f16::from_f32(round_trip(i, x))),
            [values.len()],
        ),
        FloatDType::BF16 => TensorData::new(
            parallel_map(&values, |i, x| half::bf16::from_f32(round_trip(i, x))),
            [values.len()],
        ),
        _ => TensorData::new(parallel_map(&values, round_trip), [values.len()]),
    };
    let out = B::float_from_data(data, &device);
    if FloatDType::from(out.dtype()) == dtype {
        out
    } else {
        B::float_cast(out, dtype)
    }
}

/// The amax of each block of `layout` over `values`, as the bits of `|x|` (what
/// [`amax_bits`] gives for one block: a NaN wins over every number, an inf over every
/// finite one).
pub(crate) fn block_amax_bits(values: &[f32], layout: BlockLayout) -> Vec<u32> {
    let mut amax = vec![0u32; layout.num_blocks() as usize];
    for (i, v) in values.iter().enumerate() {
        let block = &mut amax[layout.block_of(i as u32) as usize];
        *block = (*block).max(amax_bits(core::slice::from_ref(v)));
    }
    amax
}

/// `f(i, values[i])` for every element, on all cores for large inputs (the portable path
/// runs on the CPU; each element's result depends only on itself and its index).
fn parallel_map<T: Send + Default + Clone>(
    values: &[f32],
    f: impl Fn(usize, f32) -> T + Sync,
) -> Vec<T> {
    const MIN_CHUNK: usize = 1 << 18;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = values.len().div_ceil(threads).max(MIN_CHUNK);
    let mut out = vec![T::default(); values.len()];
    std::thread::scope(|scope| {
        for (c, (input, output)) in values.chunks(chunk).zip(out.chunks_mut(chunk)).enumerate() {
            let f = &f;
            scope.spawn(move || {
                for (j, (x, o)) in input.iter().zip(output.iter_mut()).enumerate() {
                    *o = f(c * chunk + j, *x);
                }
            });
        }
    });
    out
}

/// [`Fp8Backend::fp8_fake_quantize`] from the backend's four FP8 operations: what the
/// kernel backends run (four launches, the values never leave the device).
#[cfg_attr(
    not(any(feature = "cubecl-backends", feature = "fusion")),
    allow(dead_code)
)]
pub(crate) fn composed_fake_quantize<B: Fp8Backend>(
    tensor: FloatTensor<B>,
    layout: BlockLayout,
    cast: Fp8Cast,
    rule: ScaleRule,
) -> FloatTensor<B> {
    let dtype = FloatDType::from(tensor.dtype());
    let amax = B::fp8_amax(tensor.clone(), layout);
    let (scales, scale_invs) = B::fp8_scales(amax, cast.format, rule);
    let codes = B::fp8_quantize(tensor, scales, layout, cast);
    B::fp8_dequantize(codes, scale_invs, layout, cast.format, dtype)
}

/// A float tensor's values on the host, as f32 (exact for f16 and bf16).
pub(crate) fn host_f32<B: Backend>(tensor: FloatTensor<B>) -> Vec<f32> {
    let data =
        cost::read(|| read_sync(B::float_into_data(tensor))).expect("the tensor can be read back");
    match data.dtype {
        DType::F32 => data.into_vec::<f32>().expect("f32 data"),
        DType::F16 => data
            .as_slice::<half::f16>()
            .expect("f16 data")
            .iter()
            .map(|v| v.to_f32())
            .collect(),
        DType::BF16 => data
            .as_slice::<half::bf16>()
            .expect("bf16 data")
            .iter()
            .map(|v| v.to_f32())
            .collect(),
        _ => data.convert::<f32>().to_vec::<f32>().expect("f32 data"),
    }
}

/// What the portable methods read: a counted read back unless `B`'s memory is the host's.
pub(crate) fn portable_f32<B: Fp8Backend>(tensor: FloatTensor<B>) -> Vec<f32> {
    if B::HOST_MEMORY {
        cost::uncounted(|| host_f32::<B>(tensor))
    } else {
        host_f32::<B>(tensor)
    }
}

/// [`portable_f32`] for codes.
pub(crate) fn portable_u32<B: Fp8Backend>(tensor: IntTensor<B>) -> Vec<u32> {
    if B::HOST_MEMORY {
        cost::uncounted(|| host_u32::<B>(tensor))
    } else {
        host_u32::<B>(tensor)
    }
}

/// An int tensor's values on the host, as u32.
pub(crate) fn host_u32<B: Backend>(tensor: IntTensor<B>) -> Vec<u32> {
    let data =
        cost::read(|| read_sync(B::int_into_data(tensor))).expect("the tensor can be read back");
    data.convert::<u32>().to_vec::<u32>().expect("u32 data")
}

pub(crate) fn float_vec<B: Backend>(values: Vec<f32>, device: &B::Device) -> FloatTensor<B> {
    let len = values.len();
    B::float_from_data(TensorData::new(values, [len]), device)
}
