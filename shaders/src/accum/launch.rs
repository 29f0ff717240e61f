//! Launching the accumulation kernels over raw CubeCL buffers. Each entry checks its
//! buffers against the sizes it is given and returns a [`LaunchError`] instead of launching
//! when one is too short or misaligned.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::format::AccumConfig;
use super::kernel;
use super::reference::Fp8MatmulConfig;
use crate::checks::{self, LaunchError};
use crate::fp8::Fp8Format;
use crate::grid;

/// Loop unrolling that keeps a loop of `trips` terms under 65535 trips (llvmpipe, Mesa's
/// CPU Vulkan driver, stops any shader loop after 65535 trips, a guard against hangs).
pub fn unroll_for(trips: u32) -> u32 {
    trips.div_ceil(60_000).next_power_of_two().max(1)
}

/// The chunked sum of each row of `input` (`[rows, cols]` of `F`), or with `other` of the
/// elementwise products `input * other` (a dot product per row); returns `rows` f32.
///
/// # Errors
/// [`LaunchError`] when `input` or `other` holds fewer than `rows * cols` values of `F` (or
/// is misaligned), or the sizes pass 32-bit indexing; nothing is launched then.
pub fn row_sums<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    input: Handle,
    other: Option<Handle>,
    rows: u32,
    cols: u32,
    config: AccumConfig,
) -> Result<Handle, LaunchError> {
    let output = client.empty(rows.max(1) as usize * 4);
    row_sums_into::<R, F>(client, input, other, output.clone(), (rows, cols), config)?;
    Ok(output)
}

/// [`row_sums`] into `output` (`rows` f32).
///
/// # Errors
/// As [`row_sums`], and when `output` holds fewer than `rows` f32.
pub fn row_sums_into<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    input: Handle,
    other: Option<Handle>,
    output: Handle,
    (rows, cols): (u32, u32),
    config: AccumConfig,
) -> Result<(), LaunchError> {
    let len = checks::count("rows * cols", &[rows, cols])?;
    let chunk = config.chunk_len(cols);
    let chunks = cols.div_ceil(chunk).max(1);
    let units = checks::count("rows * chunks", &[rows, chunks])?;
    checks::buffer("input", &input, len.into(), size_of::<F>())?;
    if let Some(other) = &other {
        checks::buffer("other", other, len.into(), size_of::<F>())?;
    }
    checks::buffer("output", &output, rows.into(), 4)?;
    let len = len.max(1) as usize;
    let partials = client.empty(units.max(1) as usize * 4);
    let (count, dim) = grid::elementwise(client, units);
    let product = other.is_some();
    let other = other.unwrap_or_else(|| input.clone());
    // SAFETY: checked above: `input` (and `other`) hold `rows * cols` values of `F`, and
    // `partials` was made with `units` f32; each unit sums its chunk of one row, index
    // `< rows * cols`, into its partial `u < units`.
    unsafe {
        kernel::chunk_sums_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(input, len),
            ArrayArg::from_raw_parts(other, len),
            ArrayArg::from_raw_parts(partials.clone(), units as usize),
            kernel::RowChunksLaunch::new(cols, chunk, chunks),
            config.stochastic.unwrap_or(0),
            kernel::SumSettings {
                product,
                mode: config.accumulator.id(),
                stochastic: config.stochastic.is_some(),
                unroll: unroll_for(chunk),
            },
        );
    }
    let (count, dim) = grid::elementwise(client, rows);
    // SAFETY: `partials` holds `rows * chunks` f32 (made above) and `output` `rows` f32
    // (checked above); unit `r < rows` reads its row's `chunks` partials and writes `r`.
    unsafe {
        kernel::combine_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(partials, units as usize),
            ArrayArg::from_raw_parts(output, rows as usize),
            chunks,
            config.combine.id(),
            unroll_for(chunks),
        );
    }
    Ok(())
}

/// The chunked matrix product of `a` (`[m, k]`) and `b` (`[k, n]`); returns `m * n` f32.
///
/// # Errors
/// [`LaunchError`] when `a` or `b` is too short or misaligned for its shape, or the sizes
/// pass 32-bit indexing; nothing is launched then.
pub fn matmul<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    a: Handle,
    b: Handle,
    (m, k, n): (u32, u32, u32),
    config: AccumConfig,
) -> Result<Handle, LaunchError> {
    let units = checks::count("m * n", &[m, n])?;
    let output = client.empty(units.max(1) as usize * 4);
    matmul_into::<R, F>(client, a, b, output.clone(), (m, k, n), config)?;
    Ok(output)
}

/// [`matmul`] into `output` (`m * n` f32).
///
/// # Errors
/// As [`matmul`], and when `output` holds fewer than `m * n` f32.
pub fn matmul_into<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    a: Handle,
    b: Handle,
    output: Handle,
    (m, k, n): (u32, u32, u32),
    config: AccumConfig,
) -> Result<(), LaunchError> {
    let units = checks::count("m * n", &[m, n])?;
    let a_len = checks::count("m * k", &[m, k])?;
    let b_len = checks::count("k * n", &[k, n])?;
    checks::buffer("a", &a, a_len.into(), size_of::<F>())?;
    checks::buffer("b", &b, b_len.into(), size_of::<F>())?;
    checks::buffer("output", &output, units.into(), 4)?;
    let (count, dim) = grid::elementwise(client, units);
    // SAFETY: checked above: `a` holds `m * k` and `b` `k * n` values of `F`, `output`
    // `m * n` f32; unit `u < m * n` reads row `u / n` of `a` and column `u % n` of `b`.
    unsafe {
        kernel::matmul_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(a, a_len.max(1) as usize),
            ArrayArg::from_raw_parts(b, b_len.max(1) as usize),
            ArrayArg::from_raw_parts(output, units as usize),
            kernel::MatmulDimsLaunch::new(k, n, config.chunk_len(k)),
            config.stochastic.unwrap_or(0),
            kernel::MatmulSettings {
                mode: config.accumulator.id(),
                combine: config.combine.id(),
                stochastic: config.stochastic.is_some(),
            },
        );
    }
    Ok(())
}

/// One operand of [`fp8_matmul`]: its packed FP8 codes and the scale inverse of each of
/// its blocks (f32).
#[derive(Clone, Debug)]
pub struct Fp8Operand {
    /// The codes, four to a `u32`.
    pub codes: Handle,
    /// One f32 per scale block.
    pub scale_invs: Handle,
}

/// The block-scaled FP8 matrix product (see [`kernel::fp8_matmul_kernel`](fn@kernel::fp8_matmul_kernel))
/// of `a` (`[m, k]`, scale blocks `1 x block`) and `b` (`[k, n]`, blocks `block x block`);
/// returns `m * n` f32.
///
/// # Errors
/// [`LaunchError`] when `config`'s block or window is 0, a buffer is too short or
/// misaligned for the shapes, or the sizes pass 32-bit indexing; nothing is launched then.
pub fn fp8_matmul<R: Runtime>(
    client: &ComputeClient<R>,
    a: Fp8Operand,
    b: Fp8Operand,
    (m, k, n): (u32, u32, u32),
    format: Fp8Format,
    config: Fp8MatmulConfig,
) -> Result<Handle, LaunchError> {
    let units = checks::count("m * n", &[m, n])?;
    let output = client.empty(units.max(1) as usize * 4);
    fp8_matmul_into::<R>(client, a, b, output.clone(), (m, k, n), format, config)?;
    Ok(output)
}

/// [`fp8_matmul`] into `output` (`m * n` f32).
///
/// # Errors
/// As [`fp8_matmul`], and when `output` holds fewer than `m * n` f32.
pub fn fp8_matmul_into<R: Runtime>(
    client: &ComputeClient<R>,
    a: Fp8Operand,
    b: Fp8Operand,
    output: Handle,
    (m, k, n): (u32, u32, u32),
    format: Fp8Format,
    config: Fp8MatmulConfig,
) -> Result<(), LaunchError> {
    checks::layout(config.block >= 1 && config.window >= 1, || {
        format!(
            "block ({}) and window ({}) must be at least 1",
            config.block, config.window
        )
    })?;
    let units = checks::count("m * n", &[m, n])?;
    let (kb, nb) = (k.div_ceil(config.block), n.div_ceil(config.block));
    let a_words = checks::count("m * k", &[m, k])?.div_ceil(4);
    let b_words = checks::count("k * n", &[k, n])?.div_ceil(4);
    let a_blocks = checks::count("m * k blocks", &[m, kb])?;
    let b_blocks = checks::count("k * n blocks", &[kb, nb])?;
    checks::buffer("a.codes", &a.codes, a_words.into(), 4)?;
    checks::buffer("a.scale_invs", &a.scale_invs, a_blocks.into(), 4)?;
    checks::buffer("b.codes", &b.codes, b_words.into(), 4)?;
    checks::buffer("b.scale_invs", &b.scale_invs, b_blocks.into(), 4)?;
    checks::buffer("output", &output, units.into(), 4)?;
    let (count, dim) = grid::elementwise(client, units);
    // SAFETY: checked above: the codes hold `m * k` and `k * n` bytes (four to a word), the
    // scale inverses one f32 per block of each operand, `output` `m * n` f32; unit
    // `u < m * n` reads row `u / n` of `a`, column `u % n` of `b` and their blocks' scales.
    unsafe {
        kernel::fp8_matmul_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(a.codes, a_words.max(1) as usize),
            ArrayArg::from_raw_parts(a.scale_invs, a_blocks.max(1) as usize),
            ArrayArg::from_raw_parts(b.codes, b_words.max(1) as usize),
            ArrayArg::from_raw_parts(b.scale_invs, b_blocks.max(1) as usize),
            ArrayArg::from_raw_parts(output, units as usize),
            kernel::Fp8MatmulDimsLaunch::new(k, n, config.block, config.window, format.bias()),
            kernel::Fp8MatmulSettings {
                m_bits: format.layout().mantissa_bits(),
                mode: config.accumulator.id(),
                promote: config.promote,
            },
        );
    }
    Ok(())
}
