//! The kernel traits' operations, one line each: the table the backends that hand the work
//! on (`wrappers.rs`: `Autodiff`, `MixedPrecision`) and the fused backends (`fusion.rs`)
//! make their implementations from. A new kernel op is its kernel and launch, its trait
//! method with the portable default, its CubeCL launch (`cube.rs`) and its line here.
//!
//! Each line: the method, its parameters (`F` a float tensor, `I` an int tensor of packed
//! FP8 codes, `O` an optional float tensor, any other type as it is), what it returns (`F`,
//! `I` or `(F, F)`) and, in brackets, each output's flat length and dtype.

/// Calls `$then! { (args) Trait [consts] { lines } }` once for each kernel trait.
macro_rules! kernel_ops {
    ($then:ident ! ($($args:tt)*)) => {
        $then! { ($($args)*) Fp8Backend [HOST_MEMORY: bool] {
            fp8_amax(tensor: F, layout: BlockLayout) -> F [(layout.num_blocks(), DType::F32)];
            fp8_scales(amax: F, format: Fp8Format, rule: ScaleRule) -> (F, F) [(len(&amax), DType::F32), (len(&amax), DType::F32)];
            fp8_quantize(tensor: F, scales: F, layout: BlockLayout, cast: Fp8Cast) -> I [(layout.len.div_ceil(4), DType::U32)];
            fp8_dequantize(codes: I, scale_invs: F, layout: BlockLayout, format: Fp8Format, dtype: FloatDType) -> F [(layout.len, dtype)];
            fp8_fake_quantize(tensor: F, layout: BlockLayout, cast: Fp8Cast, rule: ScaleRule) -> F [(len(&tensor), tensor.dtype())];
        } }
        $then! { ($($args)*) AccumBackend [] {
            blocked_row_sums(tensor: F, other: O, rows: u32, cols: u32, config: AccumConfig) -> F [(rows, DType::F32)];
            blocked_matmul(a: F, b: F, dims: (u32, u32, u32), config: AccumConfig) -> F [(dims.0 * dims.2, DType::F32)];
            fp8_block_matmul(a_codes: I, a_scale_invs: F, b_codes: I, b_scale_invs: F, dims: (u32, u32, u32), format: Fp8Format, config: Fp8MatmulConfig) -> F [(dims.0 * dims.2, DType::F32)];
        } }
    };
}

/// A parameter's type in an implementation of the traits (inside the impl: `Self`).
macro_rules! param_ty {
    (F) => { burn_tensor::ops::FloatTensor<Self> };
    (I) => { burn_tensor::ops::IntTensor<Self> };
    (O) => { Option<burn_tensor::ops::FloatTensor<Self>> };
    ($ty:ty) => { $ty };
}

/// A method's return type.
macro_rules! return_ty {
    (F) => { burn_tensor::ops::FloatTensor<Self> };
    (I) => { burn_tensor::ops::IntTensor<Self> };
    ((F, F)) => { (burn_tensor::ops::FloatTensor<Self>, burn_tensor::ops::FloatTensor<Self>) };
}

pub(super) use {kernel_ops, param_ty, return_ty};
