//! FP8 on the CPU: each block's amax, values rounded to FP8 and back ("fake quantization",
//! what FP8 training feeds its products), and FP8 codes to and from values, over f32, bf16
//! or f16 slices, vectorised and split over rayon's threads. Byte for byte the reference
//! ([`crate::fp8::reference`]): the same scales, the same codes, the same decoded values.
//!
//! Round to nearest even is done without leaving the vector registers: a value is rounded to
//! the FP8 step of its binade (the subnormal step below FP8's smallest normal) by adding and
//! subtracting `2^23` such steps, whose exponent is built from the value's own (one f32
//! rounding, which is to nearest even); overflows, infinities and NaN are selected afterwards
//! as the cast's overflow rule says. Stochastic rounding, and a block whose scale is NaN,
//! take the reference one value at a time.
//! f32 and bf16 values (and f32 values read through bf16) are read and written where they
//! lie, the conversions in the registers too; f16 is converted through f32 on the stack.
//!
//! ```
//! use burn_amp_kernels::cpu::{Isa, fp8};
//! use burn_amp_kernels::fp8::launch::BlockLayout;
//! use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, ScaleRule};
//! use half::bf16;
//!
//! let x = [0.1f32, -2.0, 7.0, 300.0].map(bf16::from_f32);
//! let mut y = [bf16::ZERO; 4];
//! let layout = BlockLayout::per_tensor(4);
//! let cast = Fp8Cast::new(Fp8Format::E4M3);
//! let scales = fp8::fake_quantize(Isa::detect(), &x, &mut y, layout, cast, ScaleRule::Float { margin: 0 })?;
//! assert_eq!(scales[0].scale, 448.0 / 300.0); // the block's amax lands on E4M3's largest value
//! assert_eq!(y[3].to_f32(), 300.0);
//! // -2 * 448/300 = -2.99 rounds to -3.0 in E4M3; times 300/448 that is -2.009, -2.015625 in bf16
//! assert_eq!(y[1].to_f32(), -2.015625);
//! # Ok::<(), burn_amp_kernels::LaunchError>(())
//! ```

use half::{bf16, f16};

use super::Isa;
use super::cast::{self, CpuFloat, Format};
use super::erased::{Floats, FloatsMut, typed, typed_mut, typed_same};
use super::multiversion::multiversion;
use super::nn::math::small_int;
use super::parallel;
use crate::LaunchError;
use crate::fp8::launch::BlockLayout;
use crate::fp8::reference;
use crate::fp8::scale::{BlockScale, ScaleRule, block_scale, flush};
use crate::fp8::{Fp8Cast, Fp8Format, Rounding};

/// Values a task works on.
const CHUNK: usize = 1 << 14;

/// Values converted to f32 at a time, on the stack.
const BLOCK: usize = 512;

const SIGN: u32 = 0x8000_0000;
const INF: u32 = 0x7f80_0000;
/// What the reference decodes every NaN code to (before the sign).
const NAN: u32 = 0x7fc0_0000;

/// The amax of each block of `layout` over `values`, as the bits of `|x|` in f32 (a NaN wins
/// over every number, an infinity over every finite one), as
/// [`amax_bits`](crate::fp8::scale::amax_bits) gives for one block.
///
/// # Errors
/// [`LaunchError::Layout`] when the layout does not hold together or does not have
/// `values.len()` elements.
pub fn block_amax<T: CpuFloat>(
    isa: Isa,
    values: &[T],
    layout: BlockLayout,
) -> Result<Vec<u32>, LaunchError> {
    block_amax_erased(isa, T::floats(values), layout)
}

/// [`block_amax`] for any type: not generic, so compiled here (`erased`).
fn block_amax_erased(
    isa: Isa,
    values: Floats<'_>,
    layout: BlockLayout,
) -> Result<Vec<u32>, LaunchError> {
    typed!(values, |values| block_amax_typed(isa, values, None, layout))
}

/// The amaxes of `values` read [`through`](widen) a narrower format, if any.
fn block_amax_typed<T: CpuFloat>(
    isa: Isa,
    values: &[T],
    through: Option<Format>,
    layout: BlockLayout,
) -> Result<Vec<u32>, LaunchError> {
    check_layout(values.len(), layout)?;
    let blocks = layout.num_blocks() as usize;
    let partial = parallel::map(values.len().div_ceil(CHUNK), |c| {
        let chunk = parallel::chunk(values, CHUNK, c);
        let start = c * CHUNK;
        let (first, last) = block_range(layout, start, start + chunk.len());
        let mut amax = vec![0u32; last - first];
        let mut buf = [0f32; BLOCK];
        for_each_run(layout, start, start + chunk.len(), |run, block| {
            let run = &chunk[run.start - start..run.end - start];
            let best = match T::FORMAT {
                Format::F32 => abs_max(isa, cast::bits::<T, f32>(run)),
                Format::Bf16 => abs_max_bf16(isa, cast::bits::<T, u16>(run)),
                Format::F16 => run.chunks(BLOCK).fold(0, |best, piece| {
                    let buf = &mut buf[..piece.len()];
                    cast::convert_block(isa, piece, buf);
                    best.max(abs_max(isa, buf))
                }),
            };
            // Rounding to nearest even is monotone and odd: the amax of the rounded
            // values is the rounded amax (a NaN stays a NaN, which is all a scale
            // reads of it).
            let best = narrow(f32::from_bits(best), through).to_bits();
            let slot = &mut amax[block - first];
            *slot = (*slot).max(best);
        });
        (first, amax)
    });
    let mut amax = vec![0u32; blocks];
    for (first, part) in partial {
        for (slot, v) in amax[first..].iter_mut().zip(part) {
            *slot = (*slot).max(v);
        }
    }
    Ok(amax)
}

/// `values` rounded to FP8 and back into `out`: each block's scales from its amax by `rule`,
/// then every value scaled, encoded with `cast` and decoded times the block's inverse
/// scale, as the reference does; returns the blocks' scales.
///
/// # Errors
/// [`LaunchError::Layout`] as [`block_amax`]; [`LaunchError::TooShort`] when `out` is not as
/// long as `values`.
pub fn fake_quantize<T: CpuFloat>(
    isa: Isa,
    values: &[T],
    out: &mut [T],
    layout: BlockLayout,
    cast: Fp8Cast,
    rule: ScaleRule,
) -> Result<Vec<BlockScale>, LaunchError> {
    fake_quantize_through(isa, values, out, T::FORMAT, layout, cast, rule)
}

/// [`fake_quantize`] of `values` converted to `through` first (to nearest even), the result
/// rounded to `through` too and handed back in `values`' own type: the same bytes as
/// `fake_quantize` of the converted values, converted back, without the two conversions'
/// passes. What a product that reads its operands in a 16-bit format is fed when its f32
/// operands are rounded to FP8 where they are. The amaxes, and so the scales, are those of
/// the converted values.
///
/// ```
/// use burn_amp_kernels::cpu::cast::Format;
/// use burn_amp_kernels::cpu::{Isa, fp8};
/// use burn_amp_kernels::fp8::launch::BlockLayout;
/// use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, ScaleRule};
/// use half::bf16;
///
/// let (isa, layout) = (Isa::detect(), BlockLayout::per_tensor(2));
/// let (cast, rule) = (Fp8Cast::new(Fp8Format::E4M3), ScaleRule::Float { margin: 0 });
/// let x = [1.0f32 + 1.0 / 512.0, 3.0];
/// let mut through = [0f32; 2];
/// fp8::fake_quantize_through(isa, &x, &mut through, Format::Bf16, layout, cast, rule)?;
/// // The same as casting to bf16, rounding to FP8 there, and widening.
/// let narrow = x.map(bf16::from_f32);
/// let mut rounded = [bf16::ZERO; 2];
/// fp8::fake_quantize(isa, &narrow, &mut rounded, layout, cast, rule)?;
/// assert_eq!(through, rounded.map(bf16::to_f32));
/// # Ok::<(), burn_amp_kernels::LaunchError>(())
/// ```
///
/// # Errors
/// As [`fake_quantize`].
pub fn fake_quantize_through<T: CpuFloat>(
    isa: Isa,
    values: &[T],
    out: &mut [T],
    through: Format,
    layout: BlockLayout,
    cast: Fp8Cast,
    rule: ScaleRule,
) -> Result<Vec<BlockScale>, LaunchError> {
    let through = (through != T::FORMAT).then_some(through);
    let (values, out) = (T::floats(values), T::floats_mut(out));
    fake_quantize_erased(isa, values, out, through, layout, cast, rule)
}

/// [`fake_quantize_through`] for any type: not generic, so compiled here (`erased`).
fn fake_quantize_erased(
    isa: Isa,
    values: Floats<'_>,
    out: FloatsMut<'_>,
    through: Option<Format>,
    layout: BlockLayout,
    cast: Fp8Cast,
    rule: ScaleRule,
) -> Result<Vec<BlockScale>, LaunchError> {
    typed_same!(values, out, |values, out| {
        fake_quantize_typed(isa, values, out, through, layout, cast, rule)
    })
}

fn fake_quantize_typed<T: CpuFloat>(
    isa: Isa,
    values: &[T],
    out: &mut [T],
    through: Option<Format>,
    layout: BlockLayout,
    cast: Fp8Cast,
    rule: ScaleRule,
) -> Result<Vec<BlockScale>, LaunchError> {
    check_out::<T>(values.len(), out.len())?;
    let scales: Vec<BlockScale> = block_amax_typed(isa, values, through, layout)?
        .into_iter()
        .map(|a| block_scale(a, cast.format, rule))
        .collect();
    fake_quantize_scaled_typed(isa, values, out, through, layout, cast, &scales)?;
    Ok(scales)
}

/// [`fake_quantize`] with the blocks' scales given (delayed scaling's, say): one per block of
/// `layout`.
///
/// # Errors
/// [`LaunchError::Layout`] as [`block_amax`]; [`LaunchError::TooShort`] when `out` is not as
/// long as `values` or `scales` has fewer entries than the layout has blocks.
pub fn fake_quantize_scaled<T: CpuFloat>(
    isa: Isa,
    values: &[T],
    out: &mut [T],
    layout: BlockLayout,
    cast: Fp8Cast,
    scales: &[BlockScale],
) -> Result<(), LaunchError> {
    let (values, out) = (T::floats(values), T::floats_mut(out));
    fake_quantize_scaled_erased(isa, values, out, layout, cast, scales)
}

/// [`fake_quantize_scaled`] for any type: not generic, so compiled here (`erased`).
fn fake_quantize_scaled_erased(
    isa: Isa,
    values: Floats<'_>,
    out: FloatsMut<'_>,
    layout: BlockLayout,
    cast: Fp8Cast,
    scales: &[BlockScale],
) -> Result<(), LaunchError> {
    typed_same!(values, out, |values, out| {
        fake_quantize_scaled_typed(isa, values, out, None, layout, cast, scales)
    })
}

fn fake_quantize_scaled_typed<T: CpuFloat>(
    isa: Isa,
    values: &[T],
    out: &mut [T],
    through: Option<Format>,
    layout: BlockLayout,
    cast: Fp8Cast,
    scales: &[BlockScale],
) -> Result<(), LaunchError> {
    check_layout(values.len(), layout)?;
    check_out::<T>(values.len(), out.len())?;
    check_scales::<BlockScale>(layout, scales.len())?;
    let grid = Grid::of(cast);
    par_runs(layout, values, out, |first, block, x, o, buf| {
        let s = scales[block];
        let exact =
            cast.rounding == Rounding::NearestEven && !s.scale.is_nan() && !s.scale_inv.is_nan();
        if !exact {
            for (i, (x, o)) in x.iter().zip(o).enumerate() {
                let index = (first + i) as u32;
                let x = narrow(x.to_f32(), through);
                let code = reference::encode_scaled(x, s.scale, cast, index);
                let value = reference::decode_scaled(code, cast.format, s.scale_inv);
                *o = T::from_f32(narrow(value, through));
            }
            return;
        }
        let (scale, inv) = (s.scale, s.scale_inv);
        // f32, f32 through bf16 and bf16 are read and written where they are, every
        // conversion in the registers; f16 and the other pairs go through f32 on the stack.
        match (T::FORMAT, through) {
            (Format::F32, None) => {
                let (x, o) = (cast::bits::<T, f32>(x), cast::bits_mut::<T, f32>(o));
                round_trip(isa, x, o, &grid, scale, inv);
            }
            (Format::F32, Some(Format::Bf16)) => {
                let (x, o) = (cast::bits::<T, f32>(x), cast::bits_mut::<T, f32>(o));
                round_trip_through_bf16(isa, x, o, &grid, scale, inv);
            }
            (Format::Bf16, None) => {
                let (x, o) = (cast::bits::<T, u16>(x), cast::bits_mut::<T, u16>(o));
                round_trip_bf16(isa, x, o, &grid, scale, inv);
            }
            _ => {
                let mut wide = [0f32; BLOCK];
                for (x, o) in x.chunks(BLOCK).zip(o.chunks_mut(BLOCK)) {
                    let (buf, wide) = (&mut buf[..x.len()], &mut wide[..x.len()]);
                    widen(isa, x, buf, through);
                    round_trip(isa, buf, wide, &grid, scale, inv);
                    narrow_into(isa, wide, o, through);
                }
            }
        }
    });
    Ok(())
}

/// `values` scaled by their block's entry of `scales` and encoded with `cast`, one code a
/// byte, as [`reference::encode_scaled`] (the codes FP8 tensors store).
///
/// # Errors
/// [`LaunchError::Layout`] as [`block_amax`]; [`LaunchError::TooShort`] when `codes` is not
/// as long as `values` or `scales` has fewer entries than the layout has blocks.
pub fn quantize<T: CpuFloat>(
    isa: Isa,
    values: &[T],
    codes: &mut [u8],
    layout: BlockLayout,
    cast: Fp8Cast,
    scales: &[f32],
) -> Result<(), LaunchError> {
    quantize_erased(isa, T::floats(values), codes, layout, cast, scales)
}

/// [`quantize`] for any type: not generic, so compiled here (`erased`).
fn quantize_erased(
    isa: Isa,
    values: Floats<'_>,
    codes: &mut [u8],
    layout: BlockLayout,
    cast: Fp8Cast,
    scales: &[f32],
) -> Result<(), LaunchError> {
    typed!(values, |values| quantize_typed(
        isa, values, codes, layout, cast, scales
    ))
}

fn quantize_typed<T: CpuFloat>(
    isa: Isa,
    values: &[T],
    codes: &mut [u8],
    layout: BlockLayout,
    cast: Fp8Cast,
    scales: &[f32],
) -> Result<(), LaunchError> {
    check_layout(values.len(), layout)?;
    check_out::<u8>(values.len(), codes.len())?;
    check_scales::<f32>(layout, scales.len())?;
    let grid = Grid::of(cast);
    par_runs(layout, values, codes, |first, block, x, o, buf| {
        let scale = scales[block];
        if cast.rounding != Rounding::NearestEven || scale.is_nan() {
            for (i, (x, o)) in x.iter().zip(o).enumerate() {
                *o = reference::encode_scaled(x.to_f32(), scale, cast, (first + i) as u32);
            }
            return;
        }
        for (x, o) in x.chunks(BLOCK).zip(o.chunks_mut(BLOCK)) {
            let buf = &mut buf[..x.len()];
            cast::convert_block(isa, x, buf);
            encode(isa, buf, o, &grid, scale);
        }
    });
    Ok(())
}

/// `codes` decoded in `format` and multiplied by their block's entry of `scale_invs` into
/// `out`, as [`reference::decode_scaled`], then rounded to `T`.
///
/// # Errors
/// [`LaunchError::Layout`] as [`block_amax`]; [`LaunchError::TooShort`] when `out` is not
/// as long as `codes` or `scale_invs` has fewer entries than the layout has blocks.
pub fn dequantize<T: CpuFloat>(
    isa: Isa,
    codes: &[u8],
    out: &mut [T],
    layout: BlockLayout,
    format: Fp8Format,
    scale_invs: &[f32],
) -> Result<(), LaunchError> {
    dequantize_erased(isa, codes, T::floats_mut(out), layout, format, scale_invs)
}

/// [`dequantize`] for any type: not generic, so compiled here (`erased`).
fn dequantize_erased(
    isa: Isa,
    codes: &[u8],
    out: FloatsMut<'_>,
    layout: BlockLayout,
    format: Fp8Format,
    scale_invs: &[f32],
) -> Result<(), LaunchError> {
    typed_mut!(out, |out| dequantize_typed(
        isa, codes, out, layout, format, scale_invs
    ))
}

fn dequantize_typed<T: CpuFloat>(
    isa: Isa,
    codes: &[u8],
    out: &mut [T],
    layout: BlockLayout,
    format: Fp8Format,
    scale_invs: &[f32],
) -> Result<(), LaunchError> {
    check_layout(codes.len(), layout)?;
    check_out::<T>(codes.len(), out.len())?;
    check_scales::<f32>(layout, scale_invs.len())?;
    let table: Vec<f32> = (0..=255u8).map(|c| reference::decode(c, format)).collect();
    par_runs(layout, codes, out, |_, block, x, o, buf| {
        let inv = scale_invs[block];
        for (x, o) in x.chunks(BLOCK).zip(o.chunks_mut(BLOCK)) {
            let buf = &mut buf[..x.len()];
            for (code, v) in x.iter().zip(buf.iter_mut()) {
                *v = reference::scaled(table[usize::from(*code)], inv);
            }
            cast::convert_block(isa, &*buf, o);
        }
    });
    Ok(())
}

/// What one FP8 format and overflow rule make of an f32's bits (all as `|x|` bits).
#[derive(Clone, Copy, Debug)]
struct Grid {
    /// Mantissa bits dropped: `23 - m`.
    shift: u32,
    /// The smallest normal FP8 value: below it, the subnormal step.
    normal: u32,
    /// The largest finite value.
    max: u32,
    /// The exponent field of `max`: the binade past which every value overflows.
    top: u32,
    /// `23 - m` as an exponent: a binade's bits plus this are the value that, added and
    /// subtracted, rounds a number of that binade to its FP8 step.
    steps: u32,
    /// What a finite value past `max` decodes to.
    overflow: u32,
    /// What an infinity decodes to.
    infinity: u32,
    /// `(127 - bias) << m`: a normal value's bits shifted right by `shift`, less this, are
    /// its code.
    offset: u32,
    /// `2^(m - emin)`: a subnormal value times this is its code.
    inv_step: f32,
    /// The codes (without sign) of a finite overflow, of an infinity and of NaN.
    overflow_code: u32,
    infinity_code: u32,
    nan_code: u32,
}

impl Grid {
    fn of(cast: Fp8Cast) -> Self {
        let layout = cast.format.layout();
        let m = layout.mantissa_bits();
        let bias = cast.format.bias();
        // Biases are 0..=63: emin = 1 - bias and every step stay normal f32 numbers, the
        // largest binade (2^30 at most) plus `steps` stays finite, and it is above emin's.
        debug_assert!((0..=63).contains(&bias));
        let decoded = |code: u8| reference::decode_bits(code, cast.format);
        let clamp_code = |yes: bool| {
            if yes {
                layout.max_finite_code()
            } else {
                layout.overflow_code()
            }
        };
        let clamp = |yes: bool| decoded(clamp_code(yes));
        Self {
            shift: 23 - m,
            normal: ((128 - bias) as u32) << 23,
            max: decoded(layout.max_finite_code()),
            top: decoded(layout.max_finite_code()) & INF,
            steps: (23 - m) << 23,
            overflow: clamp(cast.overflow.clamps_finite()),
            infinity: clamp(cast.overflow.clamps_infinite()),
            offset: ((127 - bias) as u32) << m,
            inv_step: f32::from_bits(((126 + bias) as u32 + m) << 23),
            overflow_code: u32::from(clamp_code(cast.overflow.clamps_finite())),
            infinity_code: u32::from(clamp_code(cast.overflow.clamps_infinite())),
            nan_code: u32::from(layout.nan_code()),
        }
    }
}

multiversion! {
    /// Each `x` scaled by `scale`, rounded to the grid and decoded times `scale_inv` into
    /// `out`, as `reference::decode_scaled(reference::encode_scaled(x, scale), scale_inv)`
    /// (neither scale NaN; round to nearest even).
    fn round_trip(x: &[f32], out: &mut [f32], grid: &Grid, scale: f32, scale_inv: f32) {
        round_trip_body::<F32>(x, out, grid, scale, scale_inv)
    }
}

multiversion! {
    /// [`round_trip`] of each `x` rounded to bf16 first, the result rounded to bf16 too, as
    /// [`narrow`] rounds them.
    fn round_trip_through_bf16(x: &[f32], out: &mut [f32], grid: &Grid, scale: f32, scale_inv: f32) {
        round_trip_body::<F32ThroughBf16>(x, out, grid, scale, scale_inv)
    }
}

multiversion! {
    /// [`round_trip`] of bf16 values (their bits), the results rounded to bf16.
    fn round_trip_bf16(x: &[u16], out: &mut [u16], grid: &Grid, scale: f32, scale_inv: f32) {
        round_trip_body::<Bf16>(x, out, grid, scale, scale_inv)
    }
}

/// How a [`round_trip_body`] reads its values as f32 and writes f32 results back, in the
/// registers.
trait Lanes {
    type Raw: Copy;
    fn load(raw: Self::Raw) -> f32;
    fn store(x: f32) -> Self::Raw;
}

/// f32 as it is.
enum F32 {}
/// f32 rounded to bf16 on the way in and on the way out.
enum F32ThroughBf16 {}
/// bf16 bits.
enum Bf16 {}

impl Lanes for F32 {
    type Raw = f32;
    #[inline(always)]
    fn load(raw: f32) -> f32 {
        raw
    }
    #[inline(always)]
    fn store(x: f32) -> f32 {
        x
    }
}

// The stores below round without `bf16_rounded`'s NaN case: a round trip's only NaNs are
// the canonical one times a scale, whose low half is zero and whose quiet bit is set, which
// the plain rounding leaves as `bf16::from_f32` does.

impl Lanes for F32ThroughBf16 {
    type Raw = f32;
    #[inline(always)]
    fn load(raw: f32) -> f32 {
        // Any f32 NaN comes in, and its rounding could carry into the sign: the NaN case.
        f32::from_bits(bf16_rounded(raw) << 16)
    }
    #[inline(always)]
    fn store(x: f32) -> f32 {
        f32::from_bits(bf16_rounded_number(x) << 16)
    }
}

impl Lanes for Bf16 {
    type Raw = u16;
    #[inline(always)]
    fn load(raw: u16) -> f32 {
        // Without the quiet bit: a NaN still reads as a NaN, and every NaN decodes to one.
        cast::bf16_bits_to_f32(raw)
    }
    #[inline(always)]
    fn store(x: f32) -> u16 {
        bf16_rounded_number(x) as u16
    }
}

/// The bf16 bits of `x` (in the low half), rounded to nearest even as `bf16::from_f32`
/// does (a NaN keeps its top bits and gets the quiet bit), on the f32 bits, so that a loop
/// of it vectorises.
#[inline(always)]
fn bf16_rounded(x: f32) -> u32 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1)) >> 16;
    let quiet = (bits >> 16) | 0x40;
    if bits & !SIGN > INF { quiet } else { rounded }
}

/// [`bf16_rounded`] of a number, or of a NaN whose low half is zero and whose quiet bit is
/// set (which the rounding leaves as it is).
#[inline(always)]
fn bf16_rounded_number(x: f32) -> u32 {
    let bits = x.to_bits();
    bits.wrapping_add(0x7FFF + ((bits >> 16) & 1)) >> 16
}

/// bf16 bits widened to f32 as `bf16::to_f32` does (a NaN gets the quiet bit).
#[inline(always)]
fn bf16_widened(raw: u16) -> f32 {
    let bits = u32::from(raw);
    let quiet = if bits & 0x7FFF > 0x7F80 { 0x40 } else { 0 };
    f32::from_bits((bits | quiet) << 16)
}

/// `|y|`'s bits `a` rounded to the grid's step at its binade, to nearest even: adding and
/// subtracting `2^23` steps (f32's own rounding) rounds a number to that step. Below the
/// smallest normal the step is the subnormal one; past the top binade the top's (where the
/// sum cannot overflow, and every value overflows the grid anyway: the caller's test). An
/// infinity stays one, a NaN a NaN.
#[inline(always)]
fn on_grid(a: u32, g: &Grid) -> u32 {
    let magic = f32::from_bits((a & INF).max(g.normal).min(g.top) + g.steps);
    ((f32::from_bits(a) + magic) - magic).to_bits()
}

/// The loop of the round trips.
#[inline(always)]
fn round_trip_body<L: Lanes>(
    x: &[L::Raw],
    out: &mut [L::Raw],
    grid: &Grid,
    scale: f32,
    scale_inv: f32,
) {
    let g = *grid;
    let one_in = scale.to_bits() == 1f32.to_bits();
    let one_out = scale_inv.to_bits() == 1f32.to_bits();
    for (v, o) in x.iter().zip(out.iter_mut()) {
        let v = L::load(*v);
        let y = if one_in { v } else { flush(flush(v) * scale) };
        let bits = y.to_bits();
        let (sign, a) = (bits & SIGN, bits & !SIGN);
        let mut d = on_grid(a, &g);
        d = if d > g.max { g.overflow } else { d };
        d = if a == INF { g.infinity } else { d };
        d = if a > INF { NAN } else { d };
        // A grid value is never an f32 subnormal (the smallest FP8 step is 2^-65 or more), so
        // the product is the one flush the reference's `flush(flush(d) * scale_inv)` needs.
        let d = f32::from_bits(sign | d);
        *o = L::store(if one_out { d } else { flush(d * scale_inv) });
    }
}

multiversion! {
    /// Each `x` scaled by `scale` and encoded on the grid, as `reference::encode_scaled`
    /// (scale not NaN; round to nearest even).
    fn encode(x: &[f32], codes: &mut [u8], grid: &Grid, scale: f32) {
        let g = *grid;
        let one_in = scale.to_bits() == 1f32.to_bits();
        for (v, c) in x.iter().zip(codes.iter_mut()) {
            let y = if one_in { *v } else { flush(flush(*v) * scale) };
            let bits = y.to_bits();
            let (sign, a) = (bits & SIGN, bits & !SIGN);
            let d = on_grid(a, &g);
            let mut code = if d >= g.normal {
                (d >> g.shift).wrapping_sub(g.offset)
            } else {
                // A whole number of steps below the smallest normal (`as u32` would
                // saturate, lane by lane in scalar code).
                small_int(f32::from_bits(d) * g.inv_step) as u32
            };
            code = if d > g.max { g.overflow_code } else { code };
            code = if a == INF { g.infinity_code } else { code };
            code = if a > INF { g.nan_code } else { code };
            *c = ((sign >> 24) | code) as u8;
        }
    }
}

multiversion! {
    /// The largest `|x|` bits of `x`.
    fn abs_max(x: &[f32]) -> u32 {
        x.iter().fold(0u32, |m, v| m.max(v.to_bits() & !SIGN))
    }
}

multiversion! {
    /// The largest `|x|` bits of bf16 values (their bits) widened to f32.
    fn abs_max_bf16(x: &[u16]) -> u32 {
        x.iter().fold(0u32, |m, v| m.max(bf16_widened(*v).to_bits() & !SIGN))
    }
}

/// `x` converted to f32 into `buf`, each value rounded to `through` on the way (to nearest
/// even, as a cast to it would): `None` reads the values as they are.
fn widen<T: CpuFloat>(isa: Isa, x: &[T], buf: &mut [f32], through: Option<Format>) {
    match through {
        Some(Format::Bf16) if T::FORMAT != Format::Bf16 => via::<T, bf16, f32>(isa, x, buf),
        Some(Format::F16) if T::FORMAT != Format::F16 => via::<T, f16, f32>(isa, x, buf),
        _ => cast::convert_block(isa, x, buf),
    }
}

/// `buf` converted into `out`, each value rounded to `through` on the way, if any.
fn narrow_into<T: CpuFloat>(isa: Isa, buf: &[f32], out: &mut [T], through: Option<Format>) {
    match through {
        Some(Format::Bf16) if T::FORMAT != Format::Bf16 => via::<f32, bf16, T>(isa, buf, out),
        Some(Format::F16) if T::FORMAT != Format::F16 => via::<f32, f16, T>(isa, buf, out),
        _ => cast::convert_block(isa, buf, out),
    }
}

/// `src` converted into `dst` through `N`, [`BLOCK`] values at a time on the stack.
fn via<S: CpuFloat, N: CpuFloat, D: CpuFloat>(isa: Isa, src: &[S], dst: &mut [D]) {
    let mut narrow = [N::default(); BLOCK];
    for (s, d) in src.chunks(BLOCK).zip(dst.chunks_mut(BLOCK)) {
        let narrow = &mut narrow[..s.len()];
        cast::convert_block(isa, s, narrow);
        cast::convert_block(isa, &*narrow, d);
    }
}

/// One value as [`widen`] and [`narrow_into`] round it.
fn narrow(x: f32, through: Option<Format>) -> f32 {
    through.map_or(x, |format| format.round(x))
}

/// `f(first, block, x, o, buf)` for each maximal run of `input` and the same elements of
/// `output` that lies in one row and one block of `layout` (`first`: the run's first index),
/// the runs split over rayon's tasks, each task with an f32 block of scratch.
fn par_runs<A: Sync, B: Send>(
    layout: BlockLayout,
    input: &[A],
    output: &mut [B],
    f: impl Fn(usize, usize, &[A], &mut [B], &mut [f32; BLOCK]) + Sync,
) {
    parallel::chunks(output, CHUNK, |c, o| {
        let x = parallel::chunk(input, CHUNK, c);
        let start = c * CHUNK;
        let mut buf = [0f32; BLOCK];
        for_each_run(layout, start, start + x.len(), |run, block| {
            let r = run.start - start..run.end - start;
            f(run.start, block, &x[r.clone()], &mut o[r], &mut buf);
        });
    });
}

/// Calls `f(range, block)` for each maximal run of elements `start..end` that lies in one
/// row and one block.
fn for_each_run(
    layout: BlockLayout,
    start: usize,
    end: usize,
    mut f: impl FnMut(core::ops::Range<usize>, usize),
) {
    let cols = layout.cols as usize;
    let block_cols = layout.block_cols as usize;
    let mut i = start;
    while i < end {
        let (row, col) = (i / cols, i % cols);
        let run_end = (row * cols + ((col / block_cols) + 1) * block_cols)
            .min((row + 1) * cols)
            .min(end);
        f(i..run_end, layout.block_of(i as u32) as usize);
        i = run_end;
    }
}

/// The blocks elements `start..end` (not empty) may touch: whole rows of blocks, from the
/// first element's to the last one's.
fn block_range(layout: BlockLayout, start: usize, end: usize) -> (usize, usize) {
    let row_blocks = layout.blocks_per_row() as usize;
    let first = layout.block_of(start as u32) as usize / row_blocks;
    let last = layout.block_of((end - 1) as u32) as usize / row_blocks;
    (first * row_blocks, (last + 1) * row_blocks)
}

fn check_layout(len: usize, layout: BlockLayout) -> Result<(), LaunchError> {
    layout.validate()?;
    if layout.len as usize != len {
        return Err(LaunchError::Layout(format!(
            "the layout has {} elements, the values {len}",
            layout.len
        )));
    }
    Ok(())
}

fn check_scales<S>(layout: BlockLayout, got: usize) -> Result<(), LaunchError> {
    let blocks = layout.num_blocks() as usize;
    if got < blocks {
        return Err(LaunchError::TooShort {
            buffer: "scales",
            needed: (blocks * size_of::<S>()) as u64,
            got: (got * size_of::<S>()) as u64,
        });
    }
    Ok(())
}

fn check_out<T>(len: usize, out: usize) -> Result<(), LaunchError> {
    if out == len {
        Ok(())
    } else {
        Err(LaunchError::TooShort {
            buffer: "out",
            needed: (len * size_of::<T>()) as u64,
            got: (out * size_of::<T>()) as u64,
        })
    }
}
