//! Launching the accumulation kernels over raw CubeCL buffers.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::format::AccumConfig;
use super::kernel;
use super::reference::Fp8MatmulConfig;
use crate::fp8::Fp8Format;
use crate::grid;

/// Loop unrolling that keeps a loop of `trips` terms under 65535 trips (llvmpipe, Mesa's
/// CPU Vulkan driver, stops any shader loop after 65535 trips, a guard against hangs).
pub fn unroll_for(trips: u32) -> u32 {
    trips.div_ceil(60_000).next_power_of_two().max(1)
}

/// The chunked sum of each row of `input` (`[rows, cols]` of `F`), or with `other` of the
/// elementwise products `input * other` (a dot product per row); returns `rows` f32.
pub fn row_sums<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    input: Handle,
    other: Option<Handle>,
    rows: u32,
    cols: u32,
    config: AccumConfig,
) -> Handle {
    let chunk = config.chunk_len(cols);
    let chunks = cols.div_ceil(chunk).max(1);
    let units = rows * chunks;
    let len = (rows * cols).max(1) as usize;
    let partials = client.empty(units.max(1) as usize * 4);
    let (count, dim) = grid::elementwise(client, units);
    let product = other.is_some();
    let other = other.unwrap_or_else(|| input.clone());
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
    let output = client.empty(rows.max(1) as usize * 4);
    let (count, dim) = grid::elementwise(client, rows);
    unsafe {
        kernel::combine_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(partials, units as usize),
            ArrayArg::from_raw_parts(output.clone(), rows as usize),
            chunks,
            config.combine.id(),
            unroll_for(chunks),
        );
    }
    output
}

/// The chunked matrix product of `a` (`[m, k]`) and `b` (`[k, n]`); returns `m * n` f32.
pub fn matmul<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    a: Handle,
    b: Handle,
    (m, k, n): (u32, u32, u32),
    config: AccumConfig,
) -> Handle {
    let units = m * n;
    let output = client.empty(units.max(1) as usize * 4);
    let (count, dim) = grid::elementwise(client, units);
    unsafe {
        kernel::matmul_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(a, (m * k).max(1) as usize),
            ArrayArg::from_raw_parts(b, (k * n).max(1) as usize),
            ArrayArg::from_raw_parts(output.clone(), units as usize),
            kernel::MatmulDimsLaunch::new(k, n, config.chunk_len(k)),
            config.stochastic.unwrap_or(0),
            kernel::MatmulSettings {
                mode: config.accumulator.id(),
                combine: config.combine.id(),
                stochastic: config.stochastic.is_some(),
            },
        );
    }
    output
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
/// of `a` (`[m, k]`) and `b` (`[k, n]`); returns `m * n` f32.
pub fn fp8_matmul<R: Runtime>(
    client: &ComputeClient<R>,
    a: Fp8Operand,
    b: Fp8Operand,
    (m, k, n): (u32, u32, u32),
    format: Fp8Format,
    config: Fp8MatmulConfig,
) -> Handle {
    let units = m * n;
    let (kb, nb) = (k.div_ceil(config.block), n.div_ceil(config.block));
    let output = client.empty(units.max(1) as usize * 4);
    let (count, dim) = grid::elementwise(client, units);
    unsafe {
        kernel::fp8_matmul_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(a.codes, (m * k).div_ceil(4).max(1) as usize),
            ArrayArg::from_raw_parts(a.scale_invs, (m * kb).max(1) as usize),
            ArrayArg::from_raw_parts(b.codes, (k * n).div_ceil(4).max(1) as usize),
            ArrayArg::from_raw_parts(b.scale_invs, (kb * nb).max(1) as usize),
            ArrayArg::from_raw_parts(output.clone(), units as usize),
            kernel::Fp8MatmulDimsLaunch::new(k, n, config.block, config.window, format.bias()),
            kernel::Fp8MatmulSettings {
                m_bits: format.layout().mantissa_bits(),
                mode: config.accumulator.id(),
                promote: config.promote,
            },
        );
    }
    output
}
