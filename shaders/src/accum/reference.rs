//! The CPU reference: the same additions, in the same order, with the same roundings as the
//! kernels.

use super::format::{AccumConfig, Accumulator};
use crate::fp8::Rounding;
use crate::fp8::reference::shift_round_pub;

/// f32 bits with subnormals flushed to a signed zero.
fn flush_bits(bits: u32) -> u32 {
    if bits & 0x7f80_0000 == 0 {
        bits & 0x8000_0000
    } else {
        bits
    }
}

/// Rounds f32 bits to a format with `m` mantissa bits, exponent bias `bias` and largest
/// finite exponent field `max_field`, returning the rounded value as f32 bits (overflow to
/// inf, as IEEE addition does).
fn round_bits(bits: u32, m: u32, bias: i32, max_field: u32, rounding: Rounding, index: u32) -> u32 {
    let bits = flush_bits(bits);
    let sign = bits & 0x8000_0000;
    let abs = bits & 0x7fff_ffff;
    if abs >= 0x7f80_0000 || abs == 0 {
        return bits; // inf, NaN and zeros are representable
    }
    let exponent = (abs >> 23) as i32 - 127;
    let mantissa = (abs & 0x7f_ffff) | 0x80_0000;
    let field = exponent + bias;
    let code = if field >= 1 {
        let full = ((field as u32) << 23) | (mantissa & 0x7f_ffff);
        shift_round_pub(full, 23 - m, rounding, index)
    } else {
        shift_round_pub(mantissa, 23 - m + (1 - field) as u32, rounding, index)
    };
    let field = code >> m;
    if field > max_field {
        return sign | 0x7f80_0000;
    }
    let mut mant = code & ((1 << m) - 1);
    if field == 0 && mant == 0 {
        return sign;
    }
    let mut exp = field as i32 - bias;
    if field == 0 {
        exp = 1 - bias;
        while mant & (1 << m) == 0 {
            mant <<= 1;
            exp -= 1;
        }
        mant &= (1 << m) - 1;
    }
    sign | (((exp + 127) as u32) << 23) | (mant << (23 - m))
}

/// `x` rounded to `accumulator` (an f32 holding its value).
pub fn round_to(x: f32, accumulator: Accumulator, rounding: Rounding, index: u32) -> f32 {
    let bits = x.to_bits();
    f32::from_bits(match accumulator {
        Accumulator::F32 => flush_bits(bits),
        Accumulator::F16 => round_bits(bits, 10, 15, 30, rounding, index),
        Accumulator::BF16 => round_bits(bits, 7, 127, 254, rounding, index),
        Accumulator::E8M13 => round_bits(bits, 13, 127, 254, rounding, index),
    })
}

/// `acc + x` in `accumulator`: an f32 addition, then a rounding.
pub fn add(acc: f32, x: f32, accumulator: Accumulator, stochastic: Option<u32>, index: u32) -> f32 {
    let rounding = match stochastic {
        Some(seed) => Rounding::Stochastic { seed },
        None => Rounding::NearestEven,
    };
    round_to(flush(acc) + flush(x), accumulator, rounding, index)
}

fn flush(x: f32) -> f32 {
    f32::from_bits(flush_bits(x.to_bits()))
}

/// The sum of `terms(i)` for `i` in `0..len`, chunked as `config` says. `index(i)` names
/// term `i` for stochastic rounding.
pub fn chunked_sum(
    len: u32,
    config: AccumConfig,
    index: impl Fn(u32) -> u32,
    terms: impl Fn(u32) -> f32,
) -> f32 {
    let chunk = config.chunk_len(len);
    let mut total = 0.0f32;
    let mut start = 0;
    while start < len {
        let end = (start + chunk).min(len);
        let mut acc = 0.0f32;
        for i in start..end {
            acc = add(
                acc,
                terms(i),
                config.accumulator,
                config.stochastic,
                index(i),
            );
        }
        total = add(total, acc, config.combine, None, 0);
        start = end;
    }
    total
}

/// The chunked sum of `values` (one row).
pub fn sum(values: &[f32], config: AccumConfig) -> f32 {
    chunked_sum(values.len() as u32, config, |i| i, |i| values[i as usize])
}

/// The chunked dot product of `x` and `y`; each product is formed in f32.
pub fn dot(x: &[f32], y: &[f32], config: AccumConfig) -> f32 {
    chunked_sum(
        x.len() as u32,
        config,
        |i| i,
        |i| flush(x[i as usize] * y[i as usize]),
    )
}

/// The chunked matrix product of `a` (`[m, k]`) and `b` (`[k, n]`), row-major.
pub fn matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize, config: AccumConfig) -> Vec<f32> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let base = ((i * n + j) * k) as u32;
            out[i * n + j] = chunked_sum(
                k as u32,
                config,
                |t| base.wrapping_add(t),
                |t| flush(a[i * k + t as usize] * b[t as usize * n + j]),
            );
        }
    }
    out
}

/// The chunked sums of each row of `values` (`[rows, cols]`); term `(r, c)` has index
/// `r * cols + c` for stochastic rounding.
pub fn row_sums(values: &[f32], cols: usize, config: AccumConfig) -> Vec<f32> {
    values
        .chunks(cols.max(1))
        .enumerate()
        .map(|(r, row)| {
            let base = (r * cols) as u32;
            chunked_sum(
                row.len() as u32,
                config,
                |c| base.wrapping_add(c),
                |c| row[c as usize],
            )
        })
        .collect()
}

/// Parameters of the block-scaled FP8 matrix product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fp8MatmulConfig {
    /// Scale block size along `k` (and along `n` for `B`): 128 in DeepSeek-V3.
    pub block: u32,
    /// Products summed in the accumulator before promotion to f32 (`N_C`); divides `block`.
    pub window: u32,
    /// The accumulator of each window.
    pub accumulator: Accumulator,
    /// Promote each window to f32 (true), or sum every dequantized product in the
    /// accumulator (false: naive FP8 accumulation).
    pub promote: bool,
}

/// The block-scaled FP8 matrix product, as [`super::kernel::fp8_matmul_kernel`](fn@super::kernel::fp8_matmul_kernel) computes it.
pub fn fp8_matmul(
    a_codes: &[u8],
    a_scale_invs: &[f32],
    b_codes: &[u8],
    b_scale_invs: &[f32],
    (m, k, n): (usize, usize, usize),
    format: crate::fp8::Fp8Format,
    config: Fp8MatmulConfig,
) -> Vec<f32> {
    use crate::fp8::reference::decode;
    let block = config.block as usize;
    let (kb, nb) = (k.div_ceil(block), n.div_ceil(block));
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let (mut total, mut acc) = (0.0f32, 0.0f32);
            for t in 0..k {
                let av = decode(a_codes[i * k + t], format);
                let bv = decode(b_codes[t * n + j], format);
                let sa = a_scale_invs[i * kb + t / block];
                let sb = b_scale_invs[(t / block) * nb + j / block];
                if config.promote {
                    acc = add(acc, av * bv, config.accumulator, None, 0);
                    if (t + 1) % config.window as usize == 0 || t + 1 == k {
                        let scaled = flush(acc * flush(sa * sb));
                        total = add(total, scaled, Accumulator::F32, None, 0);
                        acc = 0.0;
                    }
                } else {
                    let p = flush(flush(av * sa) * flush(bv * sb));
                    total = add(total, p, config.accumulator, None, 0);
                }
            }
            out[i * n + j] = total;
        }
    }
    out
}
