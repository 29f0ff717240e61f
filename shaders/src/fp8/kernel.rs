//! The FP8 kernels in CubeCL: the steps of [`super::reference`], as integer bit work (WGSL
//! has no FP8 type), so every runtime gives the reference's bytes.
//!
//! Codes are stored one byte per value, four to a `u32` (little-endian: value `4k + j` in
//! bits `8j..8j+8`), which is byte for byte the `u8` layout on runtimes that have bytes.
//! Tensors are seen as `[rows, cols]` (`cols` the last dimension) and scaled per block of
//! `block_rows x block_cols`; one block covering everything is per-tensor scaling.

// `#[cube]` expands each function into an undocumented helper module.
#![allow(missing_docs)]

use cubecl::prelude::*;

use super::scale::ScaleKind;

/// Wellons' `lowbias32` hash ([`super::reference::hash32`]).
#[cube]
pub fn hash32(x: u32) -> u32 {
    let mut x = x;
    x ^= x >> 16;
    x *= 0x7feb_352du32;
    x ^= x >> 15;
    x *= 0x846c_a68bu32;
    x ^= x >> 16;
    x
}

/// Stochastic rounding's 32 random bits ([`super::reference::noise`]).
#[cube]
pub fn noise(seed: u32, index: u32) -> u32 {
    hash32(hash32(seed ^ 0x9e37_79b9u32) ^ index)
}

/// `value >> shift`, rounded to nearest even or stochastically.
///
/// Every shift amount is masked with `& 31`: a no-op on the paths that run, it keeps
/// constant-folded dead branches valid WGSL (shifts of 32 or more are rejected).
#[cube]
pub fn shift_round(
    value: u32,
    shift: u32,
    seed: u32,
    index: u32,
    #[comptime] stochastic: bool,
) -> u32 {
    let mut out = value;
    if shift > 0 {
        if comptime!(stochastic) {
            let r = noise(seed, index);
            if shift >= 32 {
                // Up with probability value / 2^shift, from 32 random bits.
                let mut threshold = 0u32;
                if shift < 64 {
                    threshold = value >> ((shift - 32) & 31);
                }
                out = 0;
                if r < threshold {
                    out = 1;
                }
            } else {
                let q = value >> (shift & 31);
                let rem = value & ((1u32 << (shift & 31)) - 1);
                out = q;
                if (r >> ((32 - shift) & 31)) < rem {
                    out = q + 1;
                }
            }
        } else if shift > 32 {
            out = 0;
        } else {
            let mut q = 0u32;
            let mut rem = value;
            if shift < 32 {
                q = value >> (shift & 31);
                rem = value & ((1u32 << (shift & 31)) - 1);
            }
            let half = 1u32 << ((shift - 1) & 31);
            out = q;
            if rem > half || (rem == half && (q & 1) == 1) {
                out = q + 1;
            }
        }
    }
    out
}

/// What a value past the range becomes, without its sign, for mantissa width `m`: the
/// largest finite code when `clamp`, else NaN (E4M3) or inf (E5M2). Evaluated at expansion.
const fn out_of_range_code(m: u32, clamp: bool) -> u32 {
    match (clamp, m == 3) {
        (true, true) => 0x7e,
        (true, false) => 0x7b,
        (false, true) => 0x7f,
        (false, false) => 0x7c,
    }
}

/// One f32 (as bits) to an FP8 code ([`super::reference::encode`]), as `encoding` says.
#[cube]
pub fn encode(bits: u32, bias: i32, seed: u32, index: u32, #[comptime] encoding: Encoding) -> u32 {
    let m = encoding.m;
    let saturate = encoding.saturate;
    let saturate_inf = encoding.saturate_inf;
    let stochastic = encoding.stochastic;
    let max_code = comptime!(if m == 3 { 0x7eu32 } else { 0x7bu32 }).runtime();
    let nan_code = comptime!(if m == 3 { 0x7fu32 } else { 0x7eu32 }).runtime();
    let overflow = comptime!(out_of_range_code(m, saturate)).runtime();
    let inf_code = comptime!(out_of_range_code(m, saturate_inf)).runtime();
    let sign = (bits >> 24) & 0x80u32;
    let abs = bits & 0x7fff_ffffu32;
    // NaN stays NaN (payloads are not kept: FP8 has room for one NaN per sign).
    let mut code = nan_code;
    if abs == 0x7f80_0000u32 {
        code = inf_code;
    } else if abs < 0x7f80_0000u32 {
        let biased = i32::cast_from(abs >> 23);
        let mut exponent = biased - 127;
        let mut mantissa = (abs & 0x7f_ffffu32) | 0x80_0000u32;
        if biased == 0 {
            exponent = -126;
            mantissa = abs & 0x7f_ffffu32;
        }
        let field = exponent + bias;
        if field > 31 {
            code = overflow;
        } else if field >= 1 {
            let full = (u32::cast_from(field) << 23) | (mantissa & 0x7f_ffffu32);
            code = shift_round(full, 23 - m, seed, index, stochastic);
        } else {
            let shift = 23 - m + u32::cast_from(1 - field);
            code = shift_round(mantissa, shift, seed, index, stochastic);
        }
        if code > max_code {
            code = overflow;
        }
    }
    sign | code
}

/// One FP8 code to f32 bits ([`super::reference::decode_bits`]).
#[cube]
pub fn decode(code: u32, bias: i32, #[comptime] m: u32) -> u32 {
    let nan_code = comptime!(if m == 3 { 0x7fu32 } else { 0x7eu32 }).runtime();
    let sign = (code & 0x80u32) << 24;
    let magnitude = code & 0x7fu32;
    let mut out = sign;
    let is_nan = if comptime!(m == 3) {
        magnitude == nan_code
    } else {
        magnitude > 0x7cu32
    };
    if is_nan {
        out = sign | 0x7fc0_0000u32;
    } else if comptime!(m == 2) && magnitude == 0x7cu32 {
        out = sign | 0x7f80_0000u32;
    } else {
        let field = i32::cast_from(magnitude >> m);
        let mut mantissa = magnitude & ((1u32 << m) - 1);
        if field != 0 || mantissa != 0 {
            let mut exponent = field - bias;
            if field == 0 {
                exponent = 1 - bias;
                #[unroll]
                for _ in 0..m {
                    if (mantissa & (1u32 << m)) == 0 {
                        mantissa <<= 1;
                        exponent -= 1;
                    }
                }
                mantissa &= (1u32 << m) - 1;
            }
            out = sign | (u32::cast_from(exponent + 127) << 23) | (mantissa << (23 - m));
        }
    }
    out
}

/// An f32 subnormal (as bits) flushed to a zero of its sign ([`super::scale::flush`]).
#[cube]
pub fn flush(bits: u32) -> u32 {
    let mut out = bits;
    if (bits & 0x7f80_0000u32) == 0 {
        out = bits & 0x8000_0000u32;
    }
    out
}

/// `floor(log2(x))` of a positive finite f32 given as bits.
#[cube]
pub fn exponent_of(bits: u32) -> i32 {
    let biased = i32::cast_from(bits >> 23);
    let mut out = biased - 127;
    if biased == 0 {
        out = -149 + (31 - i32::cast_from((bits & 0x7f_ffffu32).leading_zeros()));
    }
    out
}

/// The 23 fraction bits of a positive finite f32 given as bits, normalised if subnormal.
#[cube]
pub fn mantissa_of(bits: u32) -> u32 {
    let mut out = bits & 0x7f_ffffu32;
    if (bits >> 23) == 0 {
        out = (out << (out.leading_zeros() - 8)) & 0x7f_ffffu32;
    }
    out
}

/// `num / den` for positive, finite, non-zero f32 bits, rounded to nearest even as IEEE
/// division rounds, in integer arithmetic: Vulkan lets f32 division be 2.5 ulp off (NVIDIA's
/// driver is), and a scale must not depend on the driver. A quotient past f32's range gives
/// inf's bits, one below the normal range 0 (the one caller clamps both).
#[cube]
pub fn div_rn(num: u32, den: u32) -> u32 {
    let mut e = exponent_of(num) - exponent_of(den);
    let mut n = mantissa_of(num) | 0x80_0000u32;
    let d = mantissa_of(den) | 0x80_0000u32;
    if n < d {
        n <<= 1u32;
        e -= 1;
    }
    // 25 quotient bits (the 24 kept and a guard bit); the remainder is the sticky bit.
    let mut q = 0u32;
    for _ in 0..25u32 {
        q <<= 1u32;
        if n >= d {
            n -= d;
            q |= 1u32;
        }
        n <<= 1u32;
    }
    let mut m = q >> 1u32;
    if (q & 1u32) == 1u32 && (n != 0u32 || (m & 1u32) == 1u32) {
        m += 1u32;
    }
    if m == 0x100_0000u32 {
        m >>= 1u32;
        e += 1;
    }
    let mut out = 0u32;
    if e > 127 {
        out = 0x7f80_0000u32;
    } else if e >= -126 {
        out = (u32::cast_from(e + 127) << 23u32) | (m & 0x7f_ffffu32);
    }
    out
}

/// `2^k` for `k` in `-126..=127`.
#[cube]
pub fn pow2(k: i32) -> f32 {
    f32::reinterpret(u32::cast_from(k + 127) << 23)
}

/// Unit `b` turns block `b`'s amax (f32 bits) into its `scales` and `scale_invs` entries,
/// by the rule [`super::scale::block_scale`] describes, of kind `rule` with `margin`.
/// `fp8_max` is the FP8 format's largest value.
#[cube(launch_unchecked)]
pub fn scales_kernel(
    amax: &Array<u32>,
    scales: &mut Array<f32>,
    scale_invs: &mut Array<f32>,
    fp8_max: f32,
    margin: u32,
    #[comptime] rule: ScaleKind,
) {
    let b = ABSOLUTE_POS;
    if b >= amax.len() {
        terminate!();
    }
    let a = amax[b];
    let mut scale = 1.0f32;
    let mut scale_inv = 1.0f32;
    if a >= 0x7f80_0000u32 {
        if comptime!(rule == ScaleKind::E8M0) {
            // The canonical NaN, 0x7fc0_0000, built from `a` (any bits of a non-finite amax
            // give it): CubeCL 0.10's CUDA backend turns the reinterpret of a constant into
            // `reinterpret_cast<float const&>(uint32(..))`, which NVRTC rejects (tracel-ai/
            // cubecl#1476, fixed after 0.10; found by `cuda_check`).
            scale = f32::reinterpret((a & 0x7fc0_0000u32) | 0x7fc0_0000u32);
            scale_inv = scale;
        }
    } else if a != 0 {
        let max_bits = u32::reinterpret(fp8_max);
        if comptime!(rule == ScaleKind::Float) {
            let mut s = f32::reinterpret(div_rn(max_bits, a));
            if margin > 0 {
                s *= pow2(-i32::cast_from(min(margin, 126u32)));
            }
            // Clamped to [2^-126, 2^126] (see `scale::MIN_SCALE`): a subnormal (or flushed)
            // scale, or an infinite one, would make the inverse or the values non-finite.
            let s_bits = u32::reinterpret(s) & 0x7fff_ffffu32;
            if s_bits < 0x0080_0000u32 {
                s = pow2(-126i32);
            } else if s_bits > 0x7e80_0000u32 {
                s = pow2(126i32);
            }
            scale = s;
            scale_inv = f32::reinterpret(div_rn(0x3f80_0000u32, u32::reinterpret(s)));
        } else if comptime!(rule == ScaleKind::PowerOfTwo) {
            let mut k = exponent_of(max_bits) - exponent_of(a);
            if mantissa_of(a) > mantissa_of(max_bits) {
                k -= 1;
            }
            k = max(min(k - i32::cast_from(margin), 126i32), -126i32);
            scale = pow2(k);
            scale_inv = pow2(-k);
        } else {
            let shared = exponent_of(a) - exponent_of(max_bits);
            let code = max(min(shared + 127, 254i32), 1i32);
            scale = pow2(127 - code);
            scale_inv = pow2(code - 127);
        }
    }
    scales[b] = scale;
    scale_invs[b] = scale_inv;
}

/// `x` (as f32 bits) times `scale`, the way [`super::reference::encode_scaled`] has it:
/// untouched for a scale of exactly 1, the canonical NaN for a NaN scale (an MX block holding
/// an inf or NaN), else the product with f32 subnormals flushed before and after. Decided on
/// bits, not float compares: a Vulkan driver need not keep IEEE NaN semantics (lavapipe
/// does not), so NaN must never be left to the arithmetic.
#[cube]
pub fn scaled(bits: u32, scale: f32) -> u32 {
    let s = u32::reinterpret(scale);
    let mut out = bits;
    if s != 0x3f80_0000u32 {
        if (s & 0x7fff_ffffu32) > 0x7f80_0000u32 {
            out = 0x7fc0_0000u32;
        } else {
            out = flush(u32::reinterpret(f32::reinterpret(flush(bits)) * scale));
        }
    }
    out
}

/// A tensor's scale blocks, one kernel argument: `len` elements seen as `[len / cols,
/// cols]`, blocks of `block_rows x block_cols`, `blocks_per_row` of them along a row (the
/// device form of [`super::launch::BlockLayout`]).
#[derive(CubeLaunch, CubeType, Clone, Copy)]
pub struct Blocks {
    pub len: u32,
    pub cols: u32,
    pub block_rows: u32,
    pub block_cols: u32,
    pub blocks_per_row: u32,
}

#[cube]
impl Blocks {
    /// The index of the scale block element `i` belongs to.
    pub fn block_of(&self, i: u32) -> u32 {
        let row = i / self.cols;
        let col = i % self.cols;
        (row / self.block_rows) * self.blocks_per_row + col / self.block_cols
    }
}

/// How an FP8 cast turns f32 into codes, fixed when the kernel is compiled: the mantissa
/// width `m` (3 for E4M3, 2 for E5M2), whether finite and infinite values out of range
/// clamp to the largest finite code, and whether rounding is stochastic.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Encoding {
    pub m: u32,
    pub saturate: bool,
    pub saturate_inf: bool,
    pub stochastic: bool,
}

/// Scales and quantizes `input` into packed codes: unit `k` writes `output[k]`, the codes
/// of elements `4k..4k+4` (zero past the end). Each value is multiplied by its block's
/// `scales` entry in f32 first (skipped for a scale of exactly 1).
#[cube(launch_unchecked)]
pub fn quantize_kernel<F: Float>(
    input: &Array<F>,
    scales: &Array<f32>,
    output: &mut Array<u32>,
    blocks: Blocks,
    bias: i32,
    seed: u32,
    #[comptime] encoding: Encoding,
) {
    let k = ABSOLUTE_POS;
    if k >= output.len() {
        terminate!();
    }
    let first = u32::cast_from(k) * 4;
    let mut packed = 0u32;
    #[unroll]
    for j in 0..4u32 {
        let i = first + j;
        if i < blocks.len {
            let scale = scales[blocks.block_of(i) as usize];
            let bits = scaled(u32::reinterpret(f32::cast_from(input[i as usize])), scale);
            let code = encode(bits, bias, seed, i, encoding);
            packed |= code << (8 * j);
        }
    }
    output[k] = packed;
}

/// Decodes packed codes and multiplies each value by its block's `scale_invs` entry (in
/// f32, skipped for exactly 1): unit `k` writes elements `4k..4k+4`.
#[cube(launch_unchecked)]
pub fn dequantize_kernel<F: Float>(
    codes: &Array<u32>,
    scale_invs: &Array<f32>,
    output: &mut Array<F>,
    blocks: Blocks,
    bias: i32,
    #[comptime] m: u32,
) {
    let k = ABSOLUTE_POS;
    if k >= codes.len() {
        terminate!();
    }
    let packed = codes[k];
    let first = u32::cast_from(k) * 4;
    #[unroll]
    for j in 0..4u32 {
        let i = first + j;
        if i < blocks.len {
            let code = (packed >> (8 * j)) & 0xffu32;
            let scale_inv = scale_invs[blocks.block_of(i) as usize];
            let x = f32::reinterpret(scaled(decode(code, bias, m), scale_inv));
            output[i as usize] = F::cast_from(x);
        }
    }
}

/// The largest `|x|` of each scale block, as f32 bits (the bits of non-negative floats
/// order like the floats, so an integer max is exact; a NaN wins over everything): unit
/// `k` folds elements `chunk*k..chunk*(k+1)` into `amax` with atomic maxima. `amax` must
/// start at zero.
#[cube(launch_unchecked)]
pub fn amax_kernel<F: Float>(
    input: &Array<F>,
    amax: &mut Array<Atomic<u32>>,
    blocks: Blocks,
    chunk: u32,
) {
    let start = u32::cast_from(ABSOLUTE_POS) * chunk;
    if start >= blocks.len {
        terminate!();
    }
    let end = min(start + chunk, blocks.len);
    let mut block = blocks.block_of(start);
    let mut best = 0u32;
    for i in start..end {
        let b = blocks.block_of(i);
        if b != block {
            amax[block as usize].fetch_max(best);
            block = b;
            best = 0;
        }
        let bits = u32::reinterpret(f32::cast_from(input[i as usize])) & 0x7fff_ffffu32;
        best = max(best, bits);
    }
    amax[block as usize].fetch_max(best);
}

/// Copies `input` to `output`, one `u32` per unit: the bandwidth yardstick the benchmarks
/// hold the FP8 kernels against.
#[cube(launch_unchecked)]
pub fn copy_kernel(input: &Array<u32>, output: &mut Array<u32>) {
    let k = ABSOLUTE_POS;
    if k >= output.len() {
        terminate!();
    }
    output[k] = input[k];
}
