//! Values of any kernel format summed in f32 where they lie, without a widened copy: added
//! into f32 sums place by place (the column sums of a linear layer's bf16 gradient), or
//! summed whole (each output channel's row of a convolution's gradient), for a bias's
//! gradient; and the products of two runs summed the same way (a batch norm's scale
//! gradient, each channel's `sum(g * x)`).

use super::{CastError, CpuFloat, Format, bf16_bits_to_f32, bits, convert_block};
use crate::cpu::Isa;
use crate::cpu::multiversion::multiversion;

/// Values of f16 widened on the stack at a time (F16C's conversion), then added (a
/// multiple of [`LANES`]).
const F16_BLOCK: usize = 256;

/// The partial sums of [`sum_widened`]: value `i` goes into lane `i % LANES` (one AVX-512
/// register, two AVX2 ones).
const LANES: usize = 16;

multiversion! {
    /// `acc[i] += src[i]`.
    fn add_f32(src: &[f32], acc: &mut [f32]) {
        acc.iter_mut().zip(src).for_each(|(a, s)| *a += s);
    }
}

multiversion! {
    /// `acc[i] += src[i]` of bf16 bits, widened in the registers.
    fn add_bf16(src: &[u16], acc: &mut [f32]) {
        acc.iter_mut().zip(src).for_each(|(a, s)| *a += bf16_bits_to_f32(*s));
    }
}

/// Adds each value of `src`, widened to f32 (exactly), to the same place of `acc`: one f32
/// addition a value, so the sums are those of widening `src` into a buffer and adding that.
///
/// ```
/// use burn_amp_kernels::cpu::{Isa, cast};
/// use half::bf16;
///
/// let mut sums = [1.0f32, 2.0, 3.0];
/// cast::add_widened(Isa::detect(), &[0.5, -2.0, 1.0].map(bf16::from_f32), &mut sums)?;
/// assert_eq!(sums, [1.5, 0.0, 4.0]);
/// # Ok::<(), cast::CastError>(())
/// ```
///
/// # Errors
/// [`CastError::LengthMismatch`] when the lengths differ; `acc` is then untouched.
pub fn add_widened<S: CpuFloat>(isa: Isa, src: &[S], acc: &mut [f32]) -> Result<(), CastError> {
    if src.len() != acc.len() {
        return Err(CastError::LengthMismatch {
            src: src.len(),
            dst: acc.len(),
        });
    }
    match S::FORMAT {
        Format::F32 => add_f32(isa, bits::<S, f32>(src), acc),
        // A NaN's bits go in as they are (`half`'s widening would set the quiet bit): the
        // sum is a NaN either way.
        Format::Bf16 => add_bf16(isa, bits::<S, u16>(src), acc),
        Format::F16 => {
            let mut buf = [0f32; F16_BLOCK];
            for (s, a) in src.chunks(F16_BLOCK).zip(acc.chunks_mut(F16_BLOCK)) {
                let buf = &mut buf[..s.len()];
                convert_block(isa, s, buf);
                add_f32(isa, buf, a);
            }
        }
    }
    Ok(())
}

/// Adds `src` into the partial sums, value `i` into lane `i % LANES`.
#[inline(always)]
fn add_lanes<T: Copy>(src: &[T], lanes: &mut [f32; LANES], widen: impl Fn(T) -> f32) {
    let mut chunks = src.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (lane, v) in lanes.iter_mut().zip(chunk) {
            *lane += widen(*v);
        }
    }
    for (lane, v) in lanes.iter_mut().zip(chunks.remainder()) {
        *lane += widen(*v);
    }
}

multiversion! {
    /// [`add_lanes`] of f32 values.
    fn lanes_f32(src: &[f32], lanes: &mut [f32; LANES]) {
        add_lanes(src, lanes, |v| v)
    }
}

multiversion! {
    /// [`add_lanes`] of bf16 bits, widened in the registers.
    fn lanes_bf16(src: &[u16], lanes: &mut [f32; LANES]) {
        add_lanes(src, lanes, bf16_bits_to_f32)
    }
}

/// Adds `a[i] * b[i]` (f32 products) into the partial sums, product `i` into lane
/// `i % LANES`.
#[inline(always)]
fn add_products<T: Copy>(a: &[T], b: &[T], lanes: &mut [f32; LANES], widen: impl Fn(T) -> f32) {
    let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    for (a, b) in (&mut ca).zip(&mut cb) {
        for ((lane, a), b) in lanes.iter_mut().zip(a).zip(b) {
            *lane += widen(*a) * widen(*b);
        }
    }
    let rest = ca.remainder().iter().zip(cb.remainder());
    for (lane, (a, b)) in lanes.iter_mut().zip(rest) {
        *lane += widen(*a) * widen(*b);
    }
}

multiversion! {
    /// [`add_products`] of f32 values.
    fn products_f32(a: &[f32], b: &[f32], lanes: &mut [f32; LANES]) {
        add_products(a, b, lanes, |v| v)
    }
}

multiversion! {
    /// [`add_products`] of bf16 bits, widened in the registers.
    fn products_bf16(a: &[u16], b: &[u16], lanes: &mut [f32; LANES]) {
        add_products(a, b, lanes, bf16_bits_to_f32)
    }
}

/// The lanes added in halves (lane `j` and lane `j + 8`, then `j + 4`, ...).
fn fold(mut lanes: [f32; LANES]) -> f32 {
    let mut width = LANES / 2;
    while width > 0 {
        for j in 0..width {
            lanes[j] += lanes[j + width];
        }
        width /= 2;
    }
    lanes[0]
}

/// The sum of `a[i] * b[i]` in f32, each value widened exactly and each product rounded to
/// f32 (not fused), summed in [`sum_widened`]'s order: the same bits on every instruction
/// set and thread count as summing the products written out.
///
/// ```
/// use burn_amp_kernels::cpu::{Isa, cast};
///
/// let a: Vec<f32> = (1..=4).map(|i| i as f32).collect();
/// assert_eq!(cast::dot_widened(Isa::detect(), &a, &a)?, 30.0);
/// # Ok::<(), cast::CastError>(())
/// ```
///
/// # Errors
/// [`CastError::LengthMismatch`] when the lengths differ.
pub fn dot_widened<S: CpuFloat>(isa: Isa, a: &[S], b: &[S]) -> Result<f32, CastError> {
    if a.len() != b.len() {
        return Err(CastError::LengthMismatch {
            src: a.len(),
            dst: b.len(),
        });
    }
    let mut lanes = [0f32; LANES];
    match S::FORMAT {
        Format::F32 => products_f32(isa, bits::<S, f32>(a), bits::<S, f32>(b), &mut lanes),
        Format::Bf16 => products_bf16(isa, bits::<S, u16>(a), bits::<S, u16>(b), &mut lanes),
        Format::F16 => {
            let (mut wa, mut wb) = ([0f32; F16_BLOCK], [0f32; F16_BLOCK]);
            for (a, b) in a.chunks(F16_BLOCK).zip(b.chunks(F16_BLOCK)) {
                let (wa, wb) = (&mut wa[..a.len()], &mut wb[..a.len()]);
                convert_block(isa, a, wa);
                convert_block(isa, b, wb);
                products_f32(isa, wa, wb, &mut lanes);
            }
        }
    }
    Ok(fold(lanes))
}

/// The sum of `src` in f32, each value widened exactly: 16 partial sums (value `i`
/// into sum `i % 16`, in order), then those added in halves (sum `j` and sum `j + 8`,
/// then `j + 4`, ...). The same order on every instruction set and thread count, so the
/// same bits; a sum of independent lanes runs at the vector units' rate where one running
/// sum waits on each addition's latency.
///
/// ```
/// use burn_amp_kernels::cpu::{Isa, cast};
/// use half::bf16;
///
/// let values: Vec<bf16> = (1..=100).map(|i| bf16::from_f32(i as f32)).collect();
/// assert_eq!(cast::sum_widened(Isa::detect(), &values), 5050.0);
/// ```
pub fn sum_widened<S: CpuFloat>(isa: Isa, src: &[S]) -> f32 {
    let mut lanes = [0f32; LANES];
    match S::FORMAT {
        Format::F32 => lanes_f32(isa, bits::<S, f32>(src), &mut lanes),
        Format::Bf16 => lanes_bf16(isa, bits::<S, u16>(src), &mut lanes),
        Format::F16 => {
            let mut buf = [0f32; F16_BLOCK];
            for s in src.chunks(F16_BLOCK) {
                let buf = &mut buf[..s.len()];
                convert_block(isa, s, buf);
                lanes_f32(isa, buf, &mut lanes);
            }
        }
    }
    fold(lanes)
}
