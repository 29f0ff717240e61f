//! Launching the FP8 kernels on any CubeCL runtime, over raw buffers (`Handle`s). The glue
//! to Burn's tensors lives in `burn-amp`.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::format::{Fp8Cast, Fp8Format, Rounding};
use super::kernel;
use super::scale::ScaleRule;
use crate::grid;

/// Elements one unit of the amax kernel folds.
const AMAX_CHUNK: u32 = 64;

/// How a tensor's `len` elements are cut into scale blocks: seen as `[len / cols, cols]`,
/// blocks of `block_rows x block_cols`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockLayout {
    /// Number of elements.
    pub len: u32,
    /// Size of the last dimension.
    pub cols: u32,
    /// Rows per block.
    pub block_rows: u32,
    /// Columns per block.
    pub block_cols: u32,
}

impl BlockLayout {
    /// One block holding everything: per-tensor scaling.
    pub fn per_tensor(len: u32) -> Self {
        let len1 = len.max(1);
        Self {
            len,
            cols: len1,
            block_rows: 1,
            block_cols: len1,
        }
    }

    /// Rows of blocks of `block_rows x block_cols` over a `[len / cols, cols]` matrix.
    pub fn blocks(len: u32, cols: u32, block_rows: u32, block_cols: u32) -> Self {
        Self {
            len,
            cols: cols.max(1),
            block_rows: block_rows.max(1),
            block_cols: block_cols.max(1),
        }
    }

    /// Number of rows.
    pub fn rows(&self) -> u32 {
        self.len / self.cols
    }

    /// Blocks along a row.
    pub fn blocks_per_row(&self) -> u32 {
        self.cols.div_ceil(self.block_cols)
    }

    /// Number of blocks.
    pub fn num_blocks(&self) -> u32 {
        self.rows().div_ceil(self.block_rows).max(1) * self.blocks_per_row()
    }

    /// The block element `i` belongs to (as the kernels compute it).
    pub fn block_of(&self, i: u32) -> u32 {
        let (row, col) = (i / self.cols, i % self.cols);
        (row / self.block_rows) * self.blocks_per_row() + col / self.block_cols
    }

    /// The layout as the kernels take it: one argument.
    fn arg<R: Runtime>(&self) -> kernel::BlocksLaunch<R> {
        kernel::BlocksLaunch::new(
            self.len,
            self.cols,
            self.block_rows,
            self.block_cols,
            self.blocks_per_row(),
        )
    }
}

/// Bytes of packed codes for `len` values: `4 * ceil(len / 4)`.
pub fn packed_len(len: u32) -> u32 {
    len.div_ceil(4)
}

/// Quantizes `input` (`layout.len` values of `F`) with per-block `scales` (f32, one per
/// block); returns the packed codes (`ceil(len / 4)` u32).
pub fn quantize<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    input: Handle,
    scales: Handle,
    layout: BlockLayout,
    cast: Fp8Cast,
) -> Handle {
    let words = packed_len(layout.len);
    let output = client.empty(words.max(1) as usize * 4);
    let (count, dim) = grid::elementwise(client, words);
    let (stochastic, seed) = match cast.rounding {
        Rounding::NearestEven => (false, 0),
        Rounding::Stochastic { seed } => (true, seed),
    };
    let encoding = kernel::Encoding {
        m: cast.format.layout().mantissa_bits(),
        saturate: cast.overflow.clamps_finite(),
        saturate_inf: cast.overflow.clamps_infinite(),
        stochastic,
    };
    unsafe {
        kernel::quantize_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(input, layout.len.max(1) as usize),
            ArrayArg::from_raw_parts(scales, layout.num_blocks() as usize),
            ArrayArg::from_raw_parts(output.clone(), words as usize),
            layout.arg(),
            cast.format.bias(),
            seed,
            encoding,
        );
    }
    output
}

/// Decodes packed `codes` of `layout.len` values and multiplies them by their block's
/// `scale_invs` entry; returns `len` values of `F`.
pub fn dequantize<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    codes: Handle,
    scale_invs: Handle,
    layout: BlockLayout,
    format: Fp8Format,
) -> Handle {
    let words = packed_len(layout.len);
    let output = client.empty(layout.len.max(1) as usize * size_of::<F>());
    let (count, dim) = grid::elementwise(client, words);
    unsafe {
        kernel::dequantize_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(codes, words as usize),
            ArrayArg::from_raw_parts(scale_invs, layout.num_blocks() as usize),
            ArrayArg::from_raw_parts(output.clone(), layout.len.max(1) as usize),
            layout.arg(),
            format.bias(),
            format.layout().mantissa_bits(),
        );
    }
    output
}

/// The amax of each block of `input`, as f32 bits (`num_blocks` u32).
pub fn amax<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    input: Handle,
    layout: BlockLayout,
) -> Handle {
    let blocks = layout.num_blocks() as usize;
    let output = client.create_from_slice(u32::as_bytes(&vec![0u32; blocks]));
    let units = layout.len.div_ceil(AMAX_CHUNK);
    if units == 0 {
        return output;
    }
    let (count, dim) = grid::elementwise(client, units);
    unsafe {
        kernel::amax_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(input, layout.len as usize),
            ArrayArg::from_raw_parts(output.clone(), blocks),
            layout.arg(),
            AMAX_CHUNK,
        );
    }
    output
}

/// Per-block `(scales, scale_invs)` (f32 each) from per-block `amax` bits.
pub fn scales<R: Runtime>(
    client: &ComputeClient<R>,
    amax: Handle,
    num_blocks: u32,
    format: Fp8Format,
    rule: ScaleRule,
) -> (Handle, Handle) {
    let bytes = num_blocks.max(1) as usize * 4;
    let (scales, scale_invs) = (client.empty(bytes), client.empty(bytes));
    let (count, dim) = grid::elementwise(client, num_blocks);
    unsafe {
        kernel::scales_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(amax, num_blocks as usize),
            ArrayArg::from_raw_parts(scales.clone(), num_blocks as usize),
            ArrayArg::from_raw_parts(scale_invs.clone(), num_blocks as usize),
            format.max(),
            rule.margin(),
            rule.kind(),
        );
    }
    (scales, scale_invs)
}

/// Copies `words` u32 from `input` to a new buffer (a plain device copy, for comparison).
pub fn copy<R: Runtime>(client: &ComputeClient<R>, input: Handle, words: u32) -> Handle {
    let output = client.empty(words.max(1) as usize * 4);
    let (count, dim) = grid::elementwise(client, words);
    unsafe {
        kernel::copy_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(input, words as usize),
            ArrayArg::from_raw_parts(output.clone(), words as usize),
        );
    }
    output
}
