//! Launching the FP8 kernels on any CubeCL runtime, over raw buffers (`Handle`s). The glue
//! to Burn's tensors lives in `burn-amp`.
//!
//! Each entry checks its buffers against the layout it is given and returns a
//! [`LaunchError`] instead of launching when one is too short or misaligned; the `_into`
//! forms write into output buffers the caller gives, the others allocate them.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::format::{Fp8Cast, Fp8Format, Rounding};
use super::kernel;
use super::scale::ScaleRule;
use crate::checks::{self, LaunchError};
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

    /// Checks that the layout holds together: block sizes and `cols` at least 1, `len` a
    /// whole number of rows.
    ///
    /// ```
    /// use burn_amp_kernels::fp8::launch::BlockLayout;
    ///
    /// assert!(BlockLayout::blocks(12, 4, 2, 2).validate().is_ok());
    /// assert!(BlockLayout::blocks(10, 4, 2, 2).validate().is_err()); // 2.5 rows
    /// let zero = BlockLayout { len: 8, cols: 0, block_rows: 1, block_cols: 1 };
    /// assert!(zero.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), LaunchError> {
        checks::layout(
            self.cols >= 1 && self.block_rows >= 1 && self.block_cols >= 1,
            || format!("cols and block sizes must be at least 1: {self:?}"),
        )?;
        checks::layout(self.len.is_multiple_of(self.cols), || {
            format!(
                "len {} is not a whole number of rows of {}",
                self.len, self.cols
            )
        })
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
/// block) into `output` (the packed codes, `ceil(len / 4)` u32).
///
/// # Errors
/// [`LaunchError`] when the layout does not hold together or a buffer is too short or
/// misaligned for it; nothing is launched then.
pub fn quantize_into<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    input: Handle,
    scales: Handle,
    output: Handle,
    layout: BlockLayout,
    cast: Fp8Cast,
) -> Result<(), LaunchError> {
    layout.validate()?;
    let words = packed_len(layout.len);
    let blocks = layout.num_blocks();
    checks::buffer("input", &input, layout.len.into(), size_of::<F>())?;
    checks::buffer("scales", &scales, blocks.into(), 4)?;
    checks::buffer("output", &output, words.into(), 4)?;
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
    // SAFETY: checked above: `input` holds `len` values of `F`, `scales` one f32 per block,
    // `output` `words` u32; the kernel reads input `i < len` and its block's scale, and
    // writes output `k < words` only.
    unsafe {
        kernel::quantize_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(input, layout.len.max(1) as usize),
            ArrayArg::from_raw_parts(scales, blocks as usize),
            ArrayArg::from_raw_parts(output, words as usize),
            layout.arg(),
            cast.format.bias(),
            seed,
            encoding,
        );
    }
    Ok(())
}

/// [`quantize_into`] a new buffer; returns the packed codes.
///
/// # Errors
/// As [`quantize_into`].
pub fn quantize<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    input: Handle,
    scales: Handle,
    layout: BlockLayout,
    cast: Fp8Cast,
) -> Result<Handle, LaunchError> {
    layout.validate()?;
    let output = client.empty(packed_len(layout.len).max(1) as usize * 4);
    quantize_into::<R, F>(client, input, scales, output.clone(), layout, cast)?;
    Ok(output)
}

/// Decodes packed `codes` of `layout.len` values and multiplies them by their block's
/// `scale_invs` entry, into `output` (`len` values of `F`).
///
/// # Errors
/// [`LaunchError`] when the layout does not hold together or a buffer is too short or
/// misaligned for it; nothing is launched then.
pub fn dequantize_into<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    codes: Handle,
    scale_invs: Handle,
    output: Handle,
    layout: BlockLayout,
    format: Fp8Format,
) -> Result<(), LaunchError> {
    layout.validate()?;
    let words = packed_len(layout.len);
    let blocks = layout.num_blocks();
    checks::buffer("codes", &codes, words.into(), 4)?;
    checks::buffer("scale_invs", &scale_invs, blocks.into(), 4)?;
    checks::buffer("output", &output, layout.len.into(), size_of::<F>())?;
    let (count, dim) = grid::elementwise(client, words);
    // SAFETY: checked above: `codes` holds `words` u32, `scale_invs` one f32 per block,
    // `output` `len` values of `F`; the kernel reads code word `k < words` and writes only
    // the values `4k + j < len` it decodes.
    unsafe {
        kernel::dequantize_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(codes, words as usize),
            ArrayArg::from_raw_parts(scale_invs, blocks as usize),
            ArrayArg::from_raw_parts(output, layout.len.max(1) as usize),
            layout.arg(),
            format.bias(),
            format.layout().mantissa_bits(),
        );
    }
    Ok(())
}

/// [`dequantize_into`] a new buffer; returns `len` values of `F`.
///
/// # Errors
/// As [`dequantize_into`].
pub fn dequantize<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    codes: Handle,
    scale_invs: Handle,
    layout: BlockLayout,
    format: Fp8Format,
) -> Result<Handle, LaunchError> {
    layout.validate()?;
    let output = client.empty(layout.len.max(1) as usize * size_of::<F>());
    dequantize_into::<R, F>(client, codes, scale_invs, output.clone(), layout, format)?;
    Ok(output)
}

/// The amax of each block of `input`, as f32 bits, into `output` (`num_blocks` u32, which
/// must hold zeros: the kernel folds each block's amax into it with an atomic max).
///
/// # Errors
/// [`LaunchError`] when the layout does not hold together or a buffer is too short or
/// misaligned for it; nothing is launched then.
pub fn amax_into<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    input: Handle,
    output: Handle,
    layout: BlockLayout,
) -> Result<(), LaunchError> {
    layout.validate()?;
    let blocks = layout.num_blocks();
    checks::buffer("input", &input, layout.len.into(), size_of::<F>())?;
    checks::buffer("output", &output, blocks.into(), 4)?;
    let units = layout.len.div_ceil(AMAX_CHUNK);
    if units == 0 {
        return Ok(());
    }
    let (count, dim) = grid::elementwise(client, units);
    // SAFETY: checked above: `input` holds `len` values of `F` and `output` one u32 per
    // block; each unit reads its chunk of `input` below `len` and folds into its elements'
    // blocks.
    unsafe {
        kernel::amax_kernel::launch_unchecked::<F, R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(input, layout.len as usize),
            ArrayArg::from_raw_parts(output, blocks as usize),
            layout.arg(),
            AMAX_CHUNK,
        );
    }
    Ok(())
}

/// [`amax_into`] a new buffer of zeros; returns `num_blocks` u32 (f32 bits).
///
/// # Errors
/// As [`amax_into`].
pub fn amax<R: Runtime, F: Float + CubeElement>(
    client: &ComputeClient<R>,
    input: Handle,
    layout: BlockLayout,
) -> Result<Handle, LaunchError> {
    layout.validate()?;
    let output = client.create_from_slice(u32::as_bytes(&vec![0u32; layout.num_blocks() as usize]));
    amax_into::<R, F>(client, input, output.clone(), layout)?;
    Ok(output)
}

/// Per-block scales and their inverses (f32 each, into `scales` and `scale_invs`) from
/// `num_blocks` per-block `amax` bits, by `rule`.
///
/// # Errors
/// [`LaunchError`] when a buffer is too short or misaligned for `num_blocks`; nothing is
/// launched then.
pub fn scales_into<R: Runtime>(
    client: &ComputeClient<R>,
    amax: Handle,
    (scales, scale_invs): (Handle, Handle),
    num_blocks: u32,
    format: Fp8Format,
    rule: ScaleRule,
) -> Result<(), LaunchError> {
    checks::buffer("amax", &amax, num_blocks.into(), 4)?;
    checks::buffer("scales", &scales, num_blocks.into(), 4)?;
    checks::buffer("scale_invs", &scale_invs, num_blocks.into(), 4)?;
    let (count, dim) = grid::elementwise(client, num_blocks);
    // SAFETY: checked above: all three buffers hold `num_blocks` 32-bit values; the kernel
    // reads and writes index `b < num_blocks` only.
    unsafe {
        kernel::scales_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(amax, num_blocks as usize),
            ArrayArg::from_raw_parts(scales, num_blocks as usize),
            ArrayArg::from_raw_parts(scale_invs, num_blocks as usize),
            format.max(),
            rule.margin(),
            rule.kind(),
        );
    }
    Ok(())
}

/// [`scales_into`] new buffers; returns `(scales, scale_invs)`.
///
/// # Errors
/// As [`scales_into`].
pub fn scales<R: Runtime>(
    client: &ComputeClient<R>,
    amax: Handle,
    num_blocks: u32,
    format: Fp8Format,
    rule: ScaleRule,
) -> Result<(Handle, Handle), LaunchError> {
    let bytes = num_blocks.max(1) as usize * 4;
    let outputs = (client.empty(bytes), client.empty(bytes));
    scales_into::<R>(client, amax, outputs.clone(), num_blocks, format, rule)?;
    Ok(outputs)
}

/// Copies `words` u32 from `input` to `output` (a plain device copy, for comparison).
///
/// # Errors
/// [`LaunchError`] when a buffer is too short or misaligned for `words`; nothing is
/// launched then.
pub fn copy_into<R: Runtime>(
    client: &ComputeClient<R>,
    input: Handle,
    output: Handle,
    words: u32,
) -> Result<(), LaunchError> {
    checks::buffer("input", &input, words.into(), 4)?;
    checks::buffer("output", &output, words.into(), 4)?;
    let (count, dim) = grid::elementwise(client, words);
    // SAFETY: checked above: both buffers hold `words` u32; the kernel copies index
    // `k < words` only.
    unsafe {
        kernel::copy_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(input, words as usize),
            ArrayArg::from_raw_parts(output, words as usize),
        );
    }
    Ok(())
}

/// [`copy_into`] a new buffer.
///
/// # Errors
/// As [`copy_into`].
pub fn copy<R: Runtime>(
    client: &ComputeClient<R>,
    input: Handle,
    words: u32,
) -> Result<Handle, LaunchError> {
    let output = client.empty(words.max(1) as usize * 4);
    copy_into::<R>(client, input, output.clone(), words)?;
    Ok(output)
}
