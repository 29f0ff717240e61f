//! Launching the SHP and UHP kernels over raw CubeCL buffers. Each entry checks its
//! buffers against `len` and returns a [`LaunchError`] instead of launching when one is too
//! short or misaligned.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::format::Half16;
use super::kernel;
use crate::checks::{self, LaunchError};
use crate::grid;

/// `u32` words holding `len` 16-bit codes.
pub fn packed_len(len: u32) -> u32 {
    len.div_ceil(2)
}

/// Encodes `len` f32 values of `input`; returns the codes, two per `u32`.
///
/// # Errors
/// [`LaunchError`] when `input` holds fewer than `len` f32 or is misaligned; nothing is
/// launched then.
pub fn encode<R: Runtime>(
    client: &ComputeClient<R>,
    input: Handle,
    len: u32,
    format: Half16,
) -> Result<Handle, LaunchError> {
    let output = client.empty(packed_len(len).max(1) as usize * 4);
    encode_into::<R>(client, input, output.clone(), len, format)?;
    Ok(output)
}

/// [`encode`] into `output` (`ceil(len / 2)` u32).
///
/// # Errors
/// As [`encode`], and when `output` is too short or misaligned.
pub fn encode_into<R: Runtime>(
    client: &ComputeClient<R>,
    input: Handle,
    output: Handle,
    len: u32,
    format: Half16,
) -> Result<(), LaunchError> {
    let words = packed_len(len);
    checks::buffer("input", &input, len.into(), 4)?;
    checks::buffer("output", &output, words.into(), 4)?;
    let (count, dim) = grid::elementwise(client, words);
    // SAFETY: checked above: `input` holds `len` f32 and `output` `ceil(len / 2)` u32; unit
    // `k < words` reads values `2k, 2k + 1 < len` and writes word `k`.
    unsafe {
        kernel::encode_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(input, len.max(1) as usize),
            ArrayArg::from_raw_parts(output, words as usize),
            len,
            format.bias(),
            matches!(format, Half16::Uhp),
        );
    }
    Ok(())
}

/// Decodes `len` codes (two per `u32`); returns `len` f32 values.
///
/// # Errors
/// [`LaunchError`] when `codes` holds fewer than `ceil(len / 2)` u32 or is misaligned;
/// nothing is launched then.
pub fn decode<R: Runtime>(
    client: &ComputeClient<R>,
    codes: Handle,
    len: u32,
    format: Half16,
) -> Result<Handle, LaunchError> {
    let output = client.empty(len.max(1) as usize * 4);
    decode_into::<R>(client, codes, output.clone(), len, format)?;
    Ok(output)
}

/// [`decode`] into `output` (`len` f32).
///
/// # Errors
/// As [`decode`], and when `output` is too short or misaligned.
pub fn decode_into<R: Runtime>(
    client: &ComputeClient<R>,
    codes: Handle,
    output: Handle,
    len: u32,
    format: Half16,
) -> Result<(), LaunchError> {
    let words = packed_len(len);
    checks::buffer("codes", &codes, words.into(), 4)?;
    checks::buffer("output", &output, len.into(), 4)?;
    let (count, dim) = grid::elementwise(client, words);
    // SAFETY: checked above: `codes` holds `ceil(len / 2)` u32 and `output` `len` f32; unit
    // `k < words` reads word `k` and writes values `2k, 2k + 1 < len`.
    unsafe {
        kernel::decode_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(codes, words as usize),
            ArrayArg::from_raw_parts(output, len.max(1) as usize),
            len,
            format.bias(),
            matches!(format, Half16::Uhp),
        );
    }
    Ok(())
}
