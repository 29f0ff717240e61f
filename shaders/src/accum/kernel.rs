//! The accumulation kernels in CubeCL: the additions and roundings of
//! [`super::reference`], in the same order.

// `#[cube]` expands each function into an undocumented helper module.
#![allow(missing_docs)]

use cubecl::prelude::*;

use crate::fp8::kernel::{flush, shift_round};

/// f32 bits rounded to a format of `m` mantissa bits, bias `bias`, largest finite exponent
/// field `max_field` (overflow to inf); the result as f32 bits.
#[cube]
pub fn round_bits(
    bits: u32,
    seed: u32,
    index: u32,
    #[comptime] m: u32,
    #[comptime] bias: i32,
    #[comptime] max_field: u32,
    #[comptime] stochastic: bool,
) -> u32 {
    let bits = flush(bits);
    let sign = bits & 0x8000_0000u32;
    let abs = bits & 0x7fff_ffffu32;
    let mut out = bits;
    if abs < 0x7f80_0000u32 && abs != 0 {
        let exponent = i32::cast_from(abs >> 23) - 127;
        let mantissa = (abs & 0x7f_ffffu32) | 0x80_0000u32;
        let field = exponent + bias;
        let full = (u32::cast_from(max(field, 1i32)) << 23) | (mantissa & 0x7f_ffffu32);
        let mut code = shift_round(full, 23 - m, seed, index, stochastic);
        if field < 1 {
            code = shift_round(
                mantissa,
                23 - m + u32::cast_from(1 - field),
                seed,
                index,
                stochastic,
            );
        }
        let rfield = code >> m;
        let mut mant = code & ((1u32 << m) - 1);
        if rfield > max_field {
            out = sign | 0x7f80_0000u32;
        } else if rfield == 0 && mant == 0 {
            out = sign;
        } else {
            let mut exp = i32::cast_from(rfield) - bias;
            if rfield == 0 {
                exp = 1 - bias;
                #[unroll]
                for _ in 0..m {
                    if (mant & (1u32 << m)) == 0 {
                        mant <<= 1;
                        exp -= 1;
                    }
                }
                mant &= (1u32 << m) - 1;
            }
            out = sign | (u32::cast_from(exp + 127) << 23) | (mant << (23 - m));
        }
    }
    out
}

/// `acc + x` in accumulator `mode` (0 f32, 1 f16, 2 bf16, 3 E8M13), as f32 values.
#[cube]
pub fn add(
    acc: f32,
    x: f32,
    seed: u32,
    index: u32,
    #[comptime] mode: u32,
    #[comptime] stochastic: bool,
) -> f32 {
    let a = f32::reinterpret(flush(u32::reinterpret(acc)));
    let b = f32::reinterpret(flush(u32::reinterpret(x)));
    let s = u32::reinterpret(a + b);
    let mut out = flush(s);
    if comptime!(mode == 1) {
        out = round_bits(s, seed, index, 10u32, 15i32, 30u32, stochastic);
    } else if comptime!(mode == 2) {
        out = round_bits(s, seed, index, 7u32, 127i32, 254u32, stochastic);
    } else if comptime!(mode == 3) {
        out = round_bits(s, seed, index, 13u32, 127i32, 254u32, stochastic);
    }
    f32::reinterpret(out)
}

/// How the rows of a chunked sum are cut: `[rows, cols]`, chunks of `chunk` columns,
/// `chunks` of them per row.
#[derive(CubeLaunch, CubeType, Clone, Copy)]
pub struct RowChunks {
    pub cols: u32,
    pub chunk: u32,
    pub chunks: u32,
}

/// How a chunked sum runs, fixed when its kernel is compiled: over `input` alone or the
/// products `input * other` (`product`), in accumulator `mode` (see [`add`](fn@add)), rounding
/// stochastically or not, its loop unrolled by `unroll`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct SumSettings {
    pub product: bool,
    pub mode: u32,
    pub stochastic: bool,
    pub unroll: u32,
}

/// The shape of a chunked matrix product `[m, k] x [k, n]` (`m` follows from the output),
/// and its chunk of `chunk` products.
#[derive(CubeLaunch, CubeType, Clone, Copy)]
pub struct MatmulDims {
    pub k: u32,
    pub n: u32,
    pub chunk: u32,
}

/// How a chunked matrix product accumulates, fixed when its kernel is compiled: chunks in
/// `mode`, chunk sums combined in `combine` (see [`add`](fn@add)), rounding stochastically or not.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct MatmulSettings {
    pub mode: u32,
    pub combine: u32,
    pub stochastic: bool,
}

/// The block layout of a block-scaled FP8 product `[m, k] x [k, n]`: scale blocks of
/// `block` along `k` (and `n` for `B`), windows of `window` products, the FP8 format's
/// exponent `bias`.
#[derive(CubeLaunch, CubeType, Clone, Copy)]
pub struct Fp8MatmulDims {
    pub k: u32,
    pub n: u32,
    pub block: u32,
    pub window: u32,
    pub bias: i32,
}

/// How a block-scaled FP8 product runs, fixed when its kernel is compiled: the FP8
/// format's mantissa width `m_bits`, the accumulator `mode` (see [`add`](fn@add)), and whether each
/// window is promoted to f32.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Fp8MatmulSettings {
    pub m_bits: u32,
    pub mode: u32,
    pub promote: bool,
}

/// Pass 1 of a chunked sum (loops are unrolled by `unroll`: llvmpipe, the CPU Vulkan driver
/// CI runs on, stops any shader loop after 65535 trips) over the rows of `input` (`[rows, cols]`, or the products
/// `input * other` when `product`): unit `u` sums chunk `u % chunks` of row `u / chunks`
/// into `partials[u]`, in the accumulator.
#[cube(launch_unchecked)]
pub fn chunk_sums_kernel<F: Float>(
    input: &Array<F>,
    other: &Array<F>,
    partials: &mut Array<f32>,
    rows: RowChunks,
    seed: u32,
    #[comptime] recipe: SumSettings,
) {
    let (cols, chunk, chunks) = (rows.cols, rows.chunk, rows.chunks);
    let product = recipe.product;
    let mode = recipe.mode;
    let stochastic = recipe.stochastic;
    let unroll = recipe.unroll;
    let u = ABSOLUTE_POS;
    if u >= partials.len() {
        terminate!();
    }
    let unit = u32::cast_from(u);
    let row = unit / chunks;
    let start = (unit % chunks) * chunk;
    let end = min(start + chunk, cols);
    let mut acc = 0.0f32;
    let trips = (end - start).div_ceil(unroll);
    for s in 0..trips {
        let from = start + s * unroll;
        #[unroll]
        for q in 0..unroll {
            let c = from + q;
            if c < end {
                let i = row * cols + c;
                let mut term = f32::cast_from(input[i as usize]);
                if comptime!(product) {
                    term = f32::reinterpret(flush(u32::reinterpret(
                        term * f32::cast_from(other[i as usize]),
                    )));
                }
                acc = add(acc, term, seed, i, mode, stochastic);
            }
        }
    }
    partials[u] = acc;
}

/// Pass 2: unit `r` adds the `chunks` partial sums of row `r`, in order, in `combine`.
#[cube(launch_unchecked)]
pub fn combine_kernel(
    partials: &Array<f32>,
    output: &mut Array<f32>,
    chunks: u32,
    #[comptime] combine: u32,
    #[comptime] unroll: u32,
) {
    let r = ABSOLUTE_POS;
    if r >= output.len() {
        terminate!();
    }
    let base = u32::cast_from(r) * chunks;
    let mut total = 0.0f32;
    let trips = chunks.div_ceil(unroll);
    for s in 0..trips {
        #[unroll]
        for q in 0..unroll {
            let c = s * unroll + q;
            if c < chunks {
                total = add(
                    total,
                    partials[(base + c) as usize],
                    0u32,
                    0u32,
                    combine,
                    false,
                );
            }
        }
    }
    output[r] = total;
}

/// The chunked matrix product: unit `(i, j)` forms `out[i, j]`, each chunk of `chunk` products
/// in the accumulator, chunk sums combined in `combine`.
#[cube(launch_unchecked)]
pub fn matmul_kernel<F: Float>(
    a: &Array<F>,
    b: &Array<F>,
    out: &mut Array<f32>,
    dims: MatmulDims,
    seed: u32,
    #[comptime] recipe: MatmulSettings,
) {
    let (k, n, chunk) = (dims.k, dims.n, dims.chunk);
    let mode = recipe.mode;
    let combine = recipe.combine;
    let stochastic = recipe.stochastic;
    let u = ABSOLUTE_POS;
    if u >= out.len() {
        terminate!();
    }
    let unit = u32::cast_from(u);
    let i = unit / n;
    let j = unit % n;
    let base = unit * k;
    let mut total = 0.0f32;
    let mut start = 0u32;
    while start < k {
        let end = min(start + chunk, k);
        let mut acc = 0.0f32;
        for t in start..end {
            let p =
                f32::cast_from(a[(i * k + t) as usize]) * f32::cast_from(b[(t * n + j) as usize]);
            acc = add(
                acc,
                f32::reinterpret(flush(u32::reinterpret(p))),
                seed,
                base + t,
                mode,
                stochastic,
            );
        }
        total = add(total, acc, 0u32, 0u32, combine, false);
        start = end;
    }
    out[u] = total;
}

/// The block-scaled FP8 matrix product `out = A B` (DeepSeek-V3's recipe). `a` holds the
/// packed codes of `A` (`[m, k]`, one scale per 1 x `block` along `k`: `a_scale_invs[i, t /
/// block]`), `b` those of `B` (`[k, n]`, one scale per `block` x `block`). With `promote`,
/// the products of each window of `window` terms (a divisor of `block`) are summed in the
/// accumulator, then scaled by `sa * sb` and added to an f32 total; without, every product
/// is dequantized and summed in the accumulator over all of `k` (naive FP8 accumulation).
#[cube(launch_unchecked)]
pub fn fp8_matmul_kernel(
    a: &Array<u32>,
    a_scale_invs: &Array<f32>,
    b: &Array<u32>,
    b_scale_invs: &Array<f32>,
    out: &mut Array<f32>,
    dims: Fp8MatmulDims,
    #[comptime] recipe: Fp8MatmulSettings,
) {
    let (k, n, block, window, bias) = (dims.k, dims.n, dims.block, dims.window, dims.bias);
    let m_bits = recipe.m_bits;
    let mode = recipe.mode;
    let promote = recipe.promote;
    let u = ABSOLUTE_POS;
    if u >= out.len() {
        terminate!();
    }
    let unit = u32::cast_from(u);
    let i = unit / n;
    let j = unit % n;
    let kb = k.div_ceil(block);
    let nb = n.div_ceil(block);
    let mut total = 0.0f32;
    let mut acc = 0.0f32;
    for t in 0..k {
        let ai = i * k + t;
        let bi = t * n + j;
        let ac = (a[(ai / 4) as usize] >> (8 * (ai % 4))) & 0xffu32;
        let bc = (b[(bi / 4) as usize] >> (8 * (bi % 4))) & 0xffu32;
        let av = f32::reinterpret(crate::fp8::kernel::decode(ac, bias, m_bits));
        let bv = f32::reinterpret(crate::fp8::kernel::decode(bc, bias, m_bits));
        let sa = a_scale_invs[(i * kb + t / block) as usize];
        let sb = b_scale_invs[((t / block) * nb + j / block) as usize];
        if comptime!(promote) {
            acc = add(acc, av * bv, 0u32, 0u32, mode, false);
            if (t + 1) % window == 0 || t + 1 == k {
                let s = f32::reinterpret(flush(u32::reinterpret(sa * sb)));
                let scaled = f32::reinterpret(flush(u32::reinterpret(acc * s)));
                total = add(total, scaled, 0u32, 0u32, 0u32, false);
                acc = 0.0;
            }
        } else {
            let x = f32::reinterpret(flush(u32::reinterpret(av * sa)));
            let y = f32::reinterpret(flush(u32::reinterpret(bv * sb)));
            let p = f32::reinterpret(flush(u32::reinterpret(x * y)));
            total = add(total, p, 0u32, 0u32, mode, false);
        }
    }
    out[u] = total;
}
