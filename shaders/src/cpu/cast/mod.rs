//! Conversions between f32, bf16 and f16 slices, bit for bit those of the `half` crate
//! (round to nearest even; NaN stays NaN with its quiet bit set and its sign and top payload
//! bits kept; infinities and subnormals exact where the target has them).
//!
//! The portable path calls `half` element by element and is the reference; on x86 with
//! AVX2 and F16C the conversions run 16 lanes a loop (bf16 by integer rounding, since
//! `vcvtneps2bf16` flushes subnormals; f16 by F16C). Large slices are split over rayon's
//! threads, and are memory-bound: AVX2 already reaches a copy's bandwidth on the CPUs
//! measured (BENCHMARKS.md). Small ones are not: the GEMM rounds each 32 x 32 tile of a
//! bf16 output from the cache, so with AVX-512 BF16 a vector of 32 values without a
//! subnormal is rounded by `vcvtne2ps2bf16` (the same bits).
//!
//! ```
//! use burn_amp_kernels::cpu::{Isa, cast};
//! use half::bf16;
//!
//! let src = [1.0f32, 1.00390625, f32::INFINITY, -0.0];
//! let mut dst = [bf16::ZERO; 4];
//! cast::convert(Isa::detect(), &src, &mut dst)?;
//! assert_eq!(dst, src.map(bf16::from_f32));
//! # Ok::<(), cast::CastError>(())
//! ```

mod portable;
mod widened_sum;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

pub use widened_sum::{add_widened, dot_widened, sum_widened};

use half::{bf16, f16};

use super::Isa;
use super::erased::{Floats, FloatsMut, Sealed, typed, typed_mut};
use super::parallel;

/// The float formats the CPU kernels read and write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// IEEE binary32.
    F32,
    /// bfloat16: f32's exponent, 8 significant bits.
    Bf16,
    /// IEEE binary16.
    F16,
}

impl Format {
    /// Bytes per value.
    pub fn size(self) -> usize {
        match self {
            Format::F32 => 4,
            Format::Bf16 | Format::F16 => 2,
        }
    }

    /// `x` rounded to this format (to nearest, ties to even) and widened again, as a cast
    /// there and back would give it (the widening is exact).
    ///
    /// ```
    /// use burn_amp_kernels::cpu::cast::Format;
    ///
    /// let x = 1.0 + 1.0 / 512.0;
    /// assert_eq!(Format::Bf16.round(x), 1.0); // 8 significant bits
    /// assert_eq!(Format::F16.round(x), x); // 11
    /// assert_eq!(Format::F32.round(x), x);
    /// ```
    #[inline(always)]
    pub fn round(self, x: f32) -> f32 {
        match self {
            Format::F32 => x,
            Format::Bf16 => bf16::from_f32(x).to_f32(),
            Format::F16 => f16::from_f32(x).to_f32(),
        }
    }
}

/// An element type of the CPU kernels: `f32`, `half::bf16` or `half::f16`.
pub trait CpuFloat: Copy + Default + Send + Sync + PartialEq + Sealed + 'static {
    /// Its format.
    const FORMAT: Format;
    /// `half`'s widening to f32 (exact).
    fn to_f32(self) -> f32;
    /// `half`'s rounding from f32 (to nearest even).
    fn from_f32(value: f32) -> Self;
}

impl CpuFloat for f32 {
    const FORMAT: Format = Format::F32;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        value
    }
}

impl CpuFloat for bf16 {
    const FORMAT: Format = Format::Bf16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        bf16::from_f32(value)
    }
}

impl CpuFloat for f16 {
    const FORMAT: Format = Format::F16;
    #[inline(always)]
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    #[inline(always)]
    fn from_f32(value: f32) -> Self {
        f16::from_f32(value)
    }
}

/// Why a conversion was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CastError {
    /// Source and destination differ in length.
    #[error("cannot convert {src} values into a slice of {dst}")]
    LengthMismatch {
        /// Values in the source.
        src: usize,
        /// Room in the destination.
        dst: usize,
    },
}

/// Values per task when a conversion is split over threads: large enough that a task
/// outlasts its scheduling (about 50 µs of copying), small enough to balance two cores.
const CHUNK: usize = 1 << 16;

/// Output bytes from which a widening cast writes with non-temporal stores (see
/// `x86::widen`): past what the caches of a few cores hold, the output cannot stay cached
/// for the op that reads it next anyway.
const STREAM_BYTES: usize = 8 << 20;

/// Converts `src` into `dst` (same length), as `half` converts each value, with `isa`'s
/// fast path, on rayon's threads for long slices.
///
/// # Errors
/// [`CastError::LengthMismatch`] when the lengths differ; `dst` is then untouched.
pub fn convert<S: CpuFloat, D: CpuFloat>(
    isa: Isa,
    src: &[S],
    dst: &mut [D],
) -> Result<(), CastError> {
    convert_erased(isa, S::floats(src), D::floats_mut(dst))
}

/// [`convert`], its body compiled here for every pair of types (`erased`).
fn convert_erased(isa: Isa, src: Floats<'_>, dst: FloatsMut<'_>) -> Result<(), CastError> {
    typed!(src, |src| typed_mut!(dst, |dst| convert_typed(
        isa, src, dst
    )))
}

fn convert_typed<S: CpuFloat, D: CpuFloat>(
    isa: Isa,
    src: &[S],
    dst: &mut [D],
) -> Result<(), CastError> {
    if src.len() != dst.len() {
        return Err(CastError::LengthMismatch {
            src: src.len(),
            dst: dst.len(),
        });
    }
    let stream = size_of_val(dst) >= STREAM_BYTES;
    if src.len() <= CHUNK {
        convert_serial(isa, src, dst, stream);
    } else {
        parallel::chunks(dst, CHUNK, |c, d| {
            convert_serial(isa, parallel::chunk(src, CHUNK, c), d, stream)
        });
    }
    Ok(())
}

/// Converts one block of `src` into `dst` (same length) on the calling thread: what the
/// kernels that compute in f32 use to read and write their operands a block at a time.
pub(crate) fn convert_block<S: CpuFloat, D: CpuFloat>(isa: Isa, src: &[S], dst: &mut [D]) {
    debug_assert_eq!(src.len(), dst.len());
    convert_serial(isa, src, dst, false);
}

/// [`convert_block`] of `rows` rows of `cols` f32 values, `src_ld` apart in `src`, into
/// rows `dst_ld` apart from `dst`: a product's tile of sums rounded into C. Into bf16 on
/// AVX2 (without AVX-512 BF16) one call does the whole tile instead of one call a row.
///
/// # Safety
/// `src` holds `rows` rows of `cols` values `src_ld` apart; `dst + r * dst_ld` is valid
/// for writing `cols` values for every `r < rows`, and overlaps nothing else in use.
pub(crate) unsafe fn convert_rows<D: CpuFloat>(
    isa: Isa,
    (src, src_ld): (&[f32], usize),
    (dst, dst_ld): (*mut D, usize),
    (rows, cols): (usize, usize),
) {
    debug_assert!(rows == 0 || src.len() >= (rows - 1) * src_ld + cols);
    #[cfg(target_arch = "x86_64")]
    if D::FORMAT == Format::Bf16 && isa.has_avx2() && !isa.has_avx512_bf16() {
        // SAFETY: the Isa value proves AVX2; the rows lie in `src` (asserted in debug
        // builds, the caller's contract) and in `dst` (the caller's contract).
        return unsafe {
            x86::f32_to_bf16_rows(bits(src).as_ptr(), src_ld, dst.cast(), dst_ld, rows, cols)
        };
    }
    for r in 0..rows {
        // SAFETY: row r of `dst`, by the caller's contract.
        let d = unsafe { core::slice::from_raw_parts_mut(dst.add(r * dst_ld), cols) };
        convert_block(isa, &src[r * src_ld..r * src_ld + cols], d);
    }
}

/// `src` rounded to `format` (exactly as converting it would) and widened back, into
/// `dst`; a block at a time through a 16-bit buffer on the stack.
pub(crate) fn round_block(isa: Isa, format: Format, src: &[f32], dst: &mut [f32]) {
    debug_assert_eq!(src.len(), dst.len());
    const STEP: usize = 512;
    let mut narrow = [0u16; STEP];
    for (src, dst) in src.chunks(STEP).zip(dst.chunks_mut(STEP)) {
        let narrow = &mut narrow[..src.len()];
        match format {
            Format::F32 => dst.copy_from_slice(src),
            Format::Bf16 => {
                let narrow: &mut [bf16] = bytemuck::cast_slice_mut(narrow);
                convert_block(isa, src, narrow);
                convert_block(isa, &*narrow, dst);
            }
            Format::F16 => {
                let narrow: &mut [f16] = bytemuck::cast_slice_mut(narrow);
                convert_block(isa, src, narrow);
                convert_block(isa, &*narrow, dst);
            }
        }
    }
}

/// Converts `src` into a new vector (see [`convert`]).
pub fn to_vec<S: CpuFloat, D: CpuFloat>(isa: Isa, src: &[S]) -> Vec<D> {
    let mut dst = zeroed(src.len());
    convert(isa, src, &mut dst).expect("lengths are equal");
    dst
}

/// `len` zeros, from zeroed memory: no pass writes them (for a large vector the pages come
/// from the OS already zero, and are touched first by whatever fills them, on its threads;
/// huge pages where the OS offers them).
pub fn zeroed<T: CpuFloat>(len: usize) -> Vec<T> {
    let mut v = match T::FORMAT {
        Format::F32 => retype(vec![0u32; len]),
        Format::Bf16 | Format::F16 => retype(vec![0u16; len]),
    };
    super::pages::advise_huge(&mut v);
    v
}

/// A vector of raw bits as the float type of the same size (`u32` as f32, `u16` as bf16 or
/// f16): the same allocation, no copy.
fn retype<U: bytemuck::Pod, T: CpuFloat>(v: Vec<U>) -> Vec<T> {
    assert_eq!(
        (size_of::<U>(), align_of::<U>()),
        (size_of::<T>(), align_of::<T>())
    );
    let mut v = core::mem::ManuallyDrop::new(v);
    // SAFETY: same size and alignment (asserted), so the allocation's layout is T's; every
    // bit pattern is a valid f32, bf16 or f16.
    unsafe { Vec::from_raw_parts(v.as_mut_ptr().cast::<T>(), v.len(), v.capacity()) }
}

/// The f32 that bf16 bits stand for: the bits as f32's upper half, exactly (a NaN keeps
/// its payload, where `bf16::to_f32` sets the quiet bit), so that a loop of it vectorises.
#[inline(always)]
pub(crate) fn bf16_bits_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// A slice of one of the kernel types as its raw bits (`u32` for f32, `u16` for the others).
///
/// # Panics
/// If `U` is not `T`'s size (a constant comparison, folded away where it holds).
pub(crate) fn bits<T: CpuFloat, U: bytemuck::Pod>(values: &[T]) -> &[U] {
    assert_eq!(size_of::<T>(), size_of::<U>(), "bits of the same size");
    // SAFETY: T is f32, bf16 or f16, plain old data of U's size (asserted); U is plain old
    // data (`Pod`) whose alignment, for u32 or u16, is its size, so T's alignment.
    unsafe { core::slice::from_raw_parts(values.as_ptr().cast(), values.len()) }
}

pub(crate) fn bits_mut<T: CpuFloat, U: bytemuck::Pod>(values: &mut [T]) -> &mut [U] {
    assert_eq!(size_of::<T>(), size_of::<U>(), "bits of the same size");
    // SAFETY: as in `bits`; every bit pattern is a valid T.
    unsafe { core::slice::from_raw_parts_mut(values.as_mut_ptr().cast(), values.len()) }
}

/// One thread's share: the fast path for the pair of formats, else the reference;
/// `stream`: a widening writes past the caches.
fn convert_serial<S: CpuFloat, D: CpuFloat>(isa: Isa, src: &[S], dst: &mut [D], stream: bool) {
    use Format::*;
    match (S::FORMAT, D::FORMAT) {
        (F32, F32) | (Bf16, Bf16) | (F16, F16) => {
            // SAFETY: same type, same length.
            let src: &[D] = unsafe { core::slice::from_raw_parts(src.as_ptr().cast(), src.len()) };
            dst.copy_from_slice(src);
        }
        (F32, Bf16) => f32_to_bf16(isa, bits(src), bits_mut(dst)),
        (Bf16, F32) => bf16_to_f32(isa, bits(src), bits_mut(dst), stream),
        (F32, F16) => f32_to_f16(isa, bits(src), bits_mut(dst)),
        (F16, F32) => f16_to_f32(isa, bits(src), bits_mut(dst), stream),
        // bf16 <-> f16: through f32 (exact), a stack buffer at a time.
        _ => {
            let mut wide = [0f32; 512];
            for (s, d) in src.chunks(wide.len()).zip(dst.chunks_mut(wide.len())) {
                let wide = &mut wide[..s.len()];
                convert_serial(isa, s, wide, false);
                convert_serial(isa, &*wide, d, false);
            }
        }
    }
}

fn f32_to_bf16(isa: Isa, src: &[u32], dst: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx512_bf16() {
        // SAFETY: the Isa value proves AVX-512F and AVX-512 BF16.
        return unsafe { x86::f32_to_bf16_avx512(src, dst) };
    }
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: the Isa value proves AVX2.
        return unsafe { x86::f32_to_bf16(src, dst) };
    }
    let _ = isa;
    portable::f32_to_bf16(src, dst)
}

fn bf16_to_f32(isa: Isa, src: &[u16], dst: &mut [u32], stream: bool) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: the Isa value proves AVX2 and F16C; equal lengths (checked by `convert`).
        return unsafe { x86::bf16_to_f32(src, dst, stream) };
    }
    let _ = (isa, stream);
    portable::bf16_to_f32(src, dst)
}

fn f32_to_f16(isa: Isa, src: &[u32], dst: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: the Isa value proves AVX2 and F16C.
        return unsafe { x86::f32_to_f16(src, dst) };
    }
    let _ = isa;
    portable::f32_to_f16(src, dst)
}

fn f16_to_f32(isa: Isa, src: &[u16], dst: &mut [u32], stream: bool) {
    #[cfg(target_arch = "x86_64")]
    if isa.has_avx2() {
        // SAFETY: the Isa value proves AVX2 and F16C; equal lengths (checked by `convert`).
        return unsafe { x86::f16_to_f32(src, dst, stream) };
    }
    let _ = (isa, stream);
    portable::f16_to_f32(src, dst)
}

/// Rounding a tile's rows at once gives the bits of rounding each row alone, on every
/// instruction set this CPU has, and writes nothing between the rows.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converting_rows_gives_the_bits_of_each_row_and_leaves_the_gaps() {
        fn check<D: CpuFloat>(isa: Isa) {
            for (rows, cols) in [
                (0, 16),
                (1, 1),
                (6, 16),
                (5, 13),
                (3, 19),
                (12, 32),
                (2, 40),
            ] {
                let (src_ld, dst_ld) = (cols + 3, cols + 5);
                // Values with bits below bf16's and f16's precision, ties, and specials.
                let src: Vec<f32> = (0..rows * src_ld)
                    .map(|i| match i % 11 {
                        0 => f32::NAN,
                        1 => f32::INFINITY,
                        2 => 1.0 + f32::EPSILON * 2f32.powi(15),
                        _ => (i as f32 * 0.618_034).sin() * 1e3,
                    })
                    .collect();
                let sentinel = D::from_f32(-7.0);
                let mut dst = vec![sentinel; rows * dst_ld];
                // SAFETY: `dst` holds `rows` rows `dst_ld` apart.
                unsafe {
                    convert_rows(
                        isa,
                        (&src, src_ld),
                        (dst.as_mut_ptr(), dst_ld),
                        (rows, cols),
                    );
                }
                for r in 0..rows {
                    let mut expected = vec![sentinel; cols];
                    convert_block(Isa::PORTABLE, &src[r * src_ld..][..cols], &mut expected);
                    let row = &dst[r * dst_ld..(r + 1) * dst_ld];
                    for (c, v) in row.iter().enumerate() {
                        let want = if c < cols { expected[c] } else { sentinel };
                        assert_eq!(
                            v.to_f32().to_bits(),
                            want.to_f32().to_bits(),
                            "{isa} {:?} {rows}x{cols}, row {r} column {c}",
                            D::FORMAT
                        );
                    }
                }
            }
        }
        for isa in Isa::available() {
            check::<bf16>(isa);
            check::<f16>(isa);
            check::<f32>(isa);
        }
    }
}
