//! Blocked (chunk-based) accumulation on Burn tensors, and the block-scaled FP8 matmul.
//!
//! Long sums in a narrow accumulator lose small addends once the running sum is large
//! (swamping). Splitting them into chunks of `CL` terms — summed in the accumulator, the
//! chunk sums then combined in f32 — brings the error from about `n u` to about
//! `(n / CL + CL) u` (IBM, 2018). [`blocked_sum`], [`blocked_dot`] and [`blocked_matmul`]
//! do this with the accumulator (f32, f16, bf16, or E8M13) and chunk length as parameters;
//! [`fp8_matmul`] multiplies block-scaled E4M3 tensors promoting partial sums to f32 every
//! `N_C` products (DeepSeek-V3).
//!
//! CubeCL backends run the kernels of `burn_amp_kernels::accum`; other backends run its CPU
//! reference; both perform the same operations in the same order and give the same bits.

mod backend;

pub use backend::AccumBackend;
pub use burn_amp_kernels::accum::{AccumConfig, Accumulator, Fp8MatmulConfig};

use burn_tensor::backend::Backend;
use burn_tensor::{DType, FloatDType, Tensor, TensorPrimitive};

use crate::fp8::{Fp8Recipe, Fp8Tensor};

/// Why a blocked operation was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum AccumError {
    /// Shapes that do not fit together.
    #[error("shape mismatch: {0}")]
    Shape(String),
    /// Kernels index with 32 bits.
    #[error("{0} elements exceed the 2^32 - 1 the kernels index")]
    TooLarge(usize),
    /// Only f32, f16 and bf16 tensors are summed.
    #[error("cannot accumulate a {0:?} tensor: use f32, f16 or bf16")]
    UnsupportedDType(DType),
    /// An FP8 operand whose recipe or format does not fit the block-scaled matmul.
    #[error("invalid FP8 matmul operands: {0}")]
    Fp8(String),
}

fn check(tensor_dtype: DType, len: usize) -> Result<u32, AccumError> {
    match tensor_dtype {
        DType::F32 | DType::Flex32 | DType::F16 | DType::BF16 => {}
        other => return Err(AccumError::UnsupportedDType(other)),
    }
    u32::try_from(len).map_err(|_| AccumError::TooLarge(len))
}

fn float<B: Backend, const D: usize>(p: burn_tensor::ops::FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(p))
}

/// Sums each row of `tensor` (`[rows, cols]`) along its last dimension, as `config` says;
/// f32 results, `[rows]`.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::Tensor;
/// use burn_amp::accum::{AccumConfig, Accumulator, blocked_sum};
///
/// let x = Tensor::<Flex, 2>::full([1, 20_000], 0.3, &Default::default());
/// let naive = blocked_sum(x.clone(), AccumConfig::naive(Accumulator::F16))?;
/// let chunked = blocked_sum(x, AccumConfig::chunked(Accumulator::F16, 64))?;
/// let (naive, chunked) = (naive.into_scalar(), chunked.into_scalar());
/// assert_eq!(naive, 1024.0); // the running f16 sum stalls: 0.3 is under half a step there
/// assert!((chunked - 6000.0).abs() < 60.0); // chunks of 64 keep it within 1%
/// # Ok::<(), burn_amp::accum::AccumError>(())
/// ```
///
/// # Errors
/// [`AccumError`] for an f64 or integer tensor, or more than 2^32 - 1 elements.
pub fn blocked_sum<B: AccumBackend>(
    tensor: Tensor<B, 2>,
    config: AccumConfig,
) -> Result<Tensor<B, 1>, AccumError> {
    let [rows, cols] = tensor.dims();
    check(tensor.dtype(), rows * cols)?;
    let p = tensor.into_primitive().tensor();
    Ok(float(B::blocked_row_sums(
        p,
        None,
        rows as u32,
        cols as u32,
        config,
    )))
}

/// The dot product of `x` and `y` (products in f32, summed as `config` says); `[1]`.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::Tensor;
/// use burn_amp::accum::{AccumConfig, Accumulator, blocked_dot};
///
/// let device = Default::default();
/// let x = Tensor::<Flex, 1>::ones([4096], &device);
/// // A naive f16 running sum stalls at 2048 (1 is half an f16 ulp there); chunks do not.
/// let naive = blocked_dot(x.clone(), x.clone(), AccumConfig::naive(Accumulator::F16))?;
/// let chunked = blocked_dot(x.clone(), x, AccumConfig::chunked(Accumulator::F16, 64))?;
/// assert_eq!(naive.into_scalar(), 2048.0);
/// assert_eq!(chunked.into_scalar(), 4096.0);
/// # Ok::<(), burn_amp::accum::AccumError>(())
/// ```
///
/// # Errors
/// [`AccumError::Shape`] for vectors of different lengths, and as [`blocked_sum`].
pub fn blocked_dot<B: AccumBackend>(
    x: Tensor<B, 1>,
    y: Tensor<B, 1>,
    config: AccumConfig,
) -> Result<Tensor<B, 1>, AccumError> {
    let (n, ny) = (x.dims()[0], y.dims()[0]);
    if n != ny {
        return Err(AccumError::Shape(format!(
            "dot of vectors of {n} and {ny} elements"
        )));
    }
    check(x.dtype(), n)?;
    check(y.dtype(), n)?;
    let y = y.cast(FloatDType::from(x.dtype()));
    let (px, py) = (x.into_primitive().tensor(), y.into_primitive().tensor());
    Ok(float(B::blocked_row_sums(
        px,
        Some(py),
        1,
        n as u32,
        config,
    )))
}

/// The matrix product `a b` (`[m, k] x [k, n]`), each output a chunked sum of `k` products;
/// f32 results, `[m, n]`.
///
/// # Errors
/// [`AccumError::Shape`] when the inner dimensions differ, and as [`blocked_sum`].
pub fn blocked_matmul<B: AccumBackend>(
    a: Tensor<B, 2>,
    b: Tensor<B, 2>,
    config: AccumConfig,
) -> Result<Tensor<B, 2>, AccumError> {
    let ([m, k], [kb, n]) = (a.dims(), b.dims());
    if k != kb {
        return Err(AccumError::Shape(format!("[{m}, {k}] x [{kb}, {n}]")));
    }
    check(a.dtype(), m * k)?;
    check(b.dtype(), k * n)?;
    check(a.dtype(), m * n)?;
    let b = b.cast(FloatDType::from(a.dtype()));
    let out = B::blocked_matmul(
        a.into_primitive().tensor(),
        b.into_primitive().tensor(),
        (m as u32, k as u32, n as u32),
        config,
    );
    Ok(float::<B, 1>(out).reshape([m, n]))
}

/// The block-scaled FP8 product `a b` of E4M3 (or E5M2) tensors: `a` (`[m, k]`) quantized
/// with 1 x `block` scales, `b` (`[k, n]`) with `block` x `block` scales
/// ([`Fp8Recipe::blocks_1x128`] and [`Fp8Recipe::blocks_128x128`] for `block = 128`);
/// products summed in `config.accumulator` over windows of `config.window` terms, each
/// window scaled and promoted to an f32 total. The result is returned in `out`.
///
/// # Errors
/// [`AccumError::Fp8`] when the operands' recipes, formats or the window do not fit;
/// [`AccumError::Shape`] when the inner dimensions differ.
pub fn fp8_matmul<B: AccumBackend + crate::fp8::Fp8Backend>(
    a: &Fp8Tensor<B, 2>,
    b: &Fp8Tensor<B, 2>,
    config: Fp8MatmulConfig,
    out: FloatDType,
) -> Result<Tensor<B, 2>, AccumError> {
    let (sa, sb) = (a.shape(), b.shape());
    let ([m, k], [kb, n]) = (sa.dims::<2>(), sb.dims::<2>());
    if k != kb {
        return Err(AccumError::Shape(format!("[{m}, {k}] x [{kb}, {n}]")));
    }
    let block = config.block as usize;
    let rule_a = matches!(a.recipe(), Fp8Recipe::Blocks { rows: 1, cols, .. } if cols == block);
    let rule_b = matches!(b.recipe(), Fp8Recipe::Blocks { rows, cols, .. } if rows == block && cols == block);
    if !rule_a || !rule_b {
        return Err(AccumError::Fp8(format!(
            "a needs 1 x {block} blocks and b {block} x {block} blocks; got {:?} and {:?}",
            a.recipe(),
            b.recipe()
        )));
    }
    if a.format() != b.format() {
        return Err(AccumError::Fp8(format!(
            "formats differ: {} and {}",
            a.format(),
            b.format()
        )));
    }
    if config.window == 0 || !block.is_multiple_of(config.window as usize) {
        return Err(AccumError::Fp8(format!(
            "the window {} must divide the block {block}",
            config.window
        )));
    }
    check(DType::F32, m * n)?;
    let result = B::fp8_block_matmul(
        a.codes().into_primitive(),
        a.scale_inv().into_primitive().tensor(),
        b.codes().into_primitive(),
        b.scale_inv().into_primitive().tensor(),
        (m as u32, k as u32, n as u32),
        a.format(),
        config,
    );
    let result = float::<B, 1>(result).reshape([m, n]);
    Ok(if out == FloatDType::F32 {
        result
    } else {
        result.cast(out)
    })
}
