//! Launching the SHP and UHP kernels over raw CubeCL buffers.

use cubecl::prelude::*;
use cubecl::server::Handle;

use super::format::Half16;
use super::kernel;
use crate::grid;

/// `u32` words holding `len` 16-bit codes.
pub fn packed_len(len: u32) -> u32 {
    len.div_ceil(2)
}

/// Encodes `len` f32 values of `input`; returns the codes, two per `u32`.
pub fn encode<R: Runtime>(
    client: &ComputeClient<R>,
    input: Handle,
    len: u32,
    format: Half16,
) -> Handle {
    let words = packed_len(len);
    let output = client.empty(words.max(1) as usize * 4);
    let (count, dim) = grid::elementwise(client, words);
    unsafe {
        kernel::encode_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(input, len.max(1) as usize),
            ArrayArg::from_raw_parts(output.clone(), words as usize),
            len,
            format.bias(),
            matches!(format, Half16::Uhp),
        );
    }
    output
}

/// Decodes `len` codes (two per `u32`); returns `len` f32 values.
pub fn decode<R: Runtime>(
    client: &ComputeClient<R>,
    codes: Handle,
    len: u32,
    format: Half16,
) -> Handle {
    let words = packed_len(len);
    let output = client.empty(len.max(1) as usize * 4);
    let (count, dim) = grid::elementwise(client, words);
    unsafe {
        kernel::decode_kernel::launch_unchecked::<R>(
            client,
            count,
            dim,
            ArrayArg::from_raw_parts(codes, words as usize),
            ArrayArg::from_raw_parts(output.clone(), len.max(1) as usize),
            len,
            format.bias(),
            matches!(format, Half16::Uhp),
        );
    }
    output
}
