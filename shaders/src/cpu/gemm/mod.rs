//! `C = A B` over f32, bf16 and f16 operands, with the operands rounded to a compute
//! [`Format`] while they are packed and the products accumulated in f32.
//!
//! This is the product a mixed-precision matmul needs on a CPU: an f32 weight is rounded to
//! bf16 as it is packed, so its cast costs nothing beyond the packing any GEMM does; the
//! result is written in the dtype asked for (bf16 activations, an f32 weight gradient).
//! Operands may be transposed or strided (any row and column stride, negative included):
//! the packing reads them in place.
//!
//! One blocking driver (`driver`: cache-sized panels, rayon threads over column or row
//! blocks of C) packs A and B into the layout of the [`Kernel`] chosen for the CPU:
//!
//! - **AVX-512 BF16** (`vdpbf16ps`, 12x32 tiles): operands packed as bf16 pairs along k, two
//!   products per f32 lane and instruction. The instruction treats bf16 subnormal inputs as
//!   zero and flushes subnormal results, as every bf16 dot-product unit does.
//! - **AVX-512F** (12x32 f32 tiles): operands rounded to the compute format and widened to
//!   f32 while packing, 16-lane FMA: the f16 products (x86 has no f16 arithmetic before
//!   AVX-512 FP16) of the CPUs that have the bf16 kernel, and their bf16 products too where
//!   `vdpbf16ps` runs at half the FMAs' rate (Intel's cores, [`Bf16Dot`](super::isa::Bf16Dot)).
//! - **AVX2 + FMA** (6x16 tiles): the same on 8 lanes, on CPUs without AVX-512 (f16 and
//!   bf16 products at the speed of an f32 GEMM).
//! - **Portable** (the same packing, plain Rust loops), and the bf16-pair packing with a
//!   portable microkernel: the references the fast kernels are tested against on any CPU.
//!
//! A left operand that many products share (a convolution's weight, times each chunk of
//! the batch's columns) can be packed once, [`PackedA`], for [`gemm_packed_on`]: the same
//! bits as packing it in each product.
//!
//! Every kernel gives the exact f32 products of the rounded operands summed in f32 (an
//! order that depends on the kernel), so each entry lies within `k * 2^-23 * sum |a||b|`
//! of the exact product of the rounded operands, less subnormal products under
//! `vdpbf16ps`.
//!
//! ```
//! use burn_amp_kernels::cpu::cast::Format;
//! use burn_amp_kernels::cpu::gemm::{self, Kernel, MatRef};
//! use burn_amp_kernels::cpu::Isa;
//! use half::bf16;
//!
//! // x [2 x 3] in bf16 times an f32 weight [3 x 2] rounded to bf16: a bf16 result.
//! let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0].map(bf16::from_f32);
//! let w = [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
//! let mut y = [bf16::ZERO; 4];
//! let kernel = Kernel::select(Isa::detect(), Format::Bf16);
//! gemm::gemm(kernel, MatRef::row_major(&x, 2, 3)?, MatRef::row_major(&w, 3, 2)?, &mut y)?;
//! assert_eq!(y, [4.0, 5.0, 10.0, 11.0].map(bf16::from_f32));
//! # Ok::<(), gemm::GemmError>(())
//! ```

mod driver;
mod kernel;
mod pack;

pub use driver::{PackedA, Threads};
pub use kernel::Kernel;

use super::cast::{CpuFloat, Format};
use super::erased::{Floats, FloatsMut, typed_mut};

/// Why a product was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GemmError {
    /// A's columns are not B's rows.
    #[error("cannot multiply a {a_rows}x{a_cols} matrix by a {b_rows}x{b_cols} one")]
    ShapeMismatch {
        /// A's rows.
        a_rows: usize,
        /// A's columns.
        a_cols: usize,
        /// B's rows.
        b_rows: usize,
        /// B's columns.
        b_cols: usize,
    },
    /// The output slice does not hold `rows x cols` values.
    #[error("the output holds {len} values, not {rows}x{cols}")]
    OutputLength {
        /// Rows of the product.
        rows: usize,
        /// Columns of the product.
        cols: usize,
        /// Values in the output slice.
        len: usize,
    },
    /// The bias does not hold one value per column of the product (per row, for
    /// [`gemm_row_bias`]).
    #[error("the bias holds {len} values where the product needs {cols}")]
    BiasLength {
        /// Columns of the product (rows, for [`gemm_row_bias`]).
        cols: usize,
        /// Values in the bias.
        len: usize,
    },
    /// The product's sizes overflow the address space: `rows x cols` outputs, or `rows x
    /// depth` / `depth x cols` operand elements, more than `isize::MAX` (views with stride
    /// 0 can name such sizes over a single value).
    #[error("a {rows}x{depth} by {depth}x{cols} product is too large to address")]
    TooLarge {
        /// Rows of the product.
        rows: usize,
        /// The shared dimension.
        depth: usize,
        /// Columns of the product.
        cols: usize,
    },
    /// A view reaches outside its slice.
    #[error(
        "a {rows}x{cols} view at offset {offset} with strides ({row_stride}, {col_stride}) \
         reaches outside a slice of {len} values"
    )]
    OutOfBounds {
        /// Rows of the view.
        rows: usize,
        /// Columns of the view.
        cols: usize,
        /// Offset of element (0, 0).
        offset: usize,
        /// Step between rows, in values.
        row_stride: isize,
        /// Step between columns, in values.
        col_stride: isize,
        /// Values in the slice.
        len: usize,
    },
}

/// A [`MatRef`] of `f32`, `bf16` or `f16` (`erased`).
#[derive(Clone, Copy)]
enum Mats<'a> {
    F32(MatRef<'a, f32>),
    Bf16(MatRef<'a, half::bf16>),
    F16(MatRef<'a, half::f16>),
}

/// A read-only matrix view: element `(i, j)` is `data[offset + i * row_stride + j *
/// col_stride]`. Checked when made, so the kernels read only inside `data`.
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a, T> {
    data: &'a [T],
    offset: usize,
    rows: usize,
    cols: usize,
    row_stride: isize,
    col_stride: isize,
}

impl<'a, T: CpuFloat> MatRef<'a, T> {
    /// A strided view of `data`.
    ///
    /// # Errors
    /// [`GemmError::OutOfBounds`] when an element of the view lies outside `data`.
    pub fn new(
        data: &'a [T],
        offset: usize,
        rows: usize,
        cols: usize,
        row_stride: isize,
        col_stride: isize,
    ) -> Result<Self, GemmError> {
        let error = || GemmError::OutOfBounds {
            rows,
            cols,
            offset,
            row_stride,
            col_stride,
            len: data.len(),
        };
        if rows > 0 && cols > 0 {
            let reach = |extent: usize, stride: isize| -> Option<(isize, isize)> {
                let span = isize::try_from(extent - 1).ok()?.checked_mul(stride)?;
                Some((span.min(0), span.max(0)))
            };
            let (r_lo, r_hi) = reach(rows, row_stride).ok_or_else(error)?;
            let (c_lo, c_hi) = reach(cols, col_stride).ok_or_else(error)?;
            let base = isize::try_from(offset).map_err(|_| error())?;
            let lo = base.checked_add(r_lo).and_then(|v| v.checked_add(c_lo));
            let hi = base.checked_add(r_hi).and_then(|v| v.checked_add(c_hi));
            match (lo, hi) {
                (Some(lo), Some(hi)) if lo >= 0 && (hi as usize) < data.len() => {}
                _ => return Err(error()),
            }
        }
        Ok(Self {
            data,
            offset,
            rows,
            cols,
            row_stride,
            col_stride,
        })
    }

    /// A row-major `rows x cols` view of the start of `data`.
    ///
    /// # Errors
    /// [`GemmError::OutOfBounds`] when `data` is shorter than `rows * cols`.
    pub fn row_major(data: &'a [T], rows: usize, cols: usize) -> Result<Self, GemmError> {
        Self::new(data, 0, rows, cols, cols as isize, 1)
    }

    /// The transposed view (no copy).
    pub fn transpose(self) -> Self {
        Self {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
            ..self
        }
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Element `(i, j)` as f32 (exact).
    #[inline(always)]
    pub(crate) fn get(&self, i: usize, j: usize) -> f32 {
        self.data[self.index(i, j)].to_f32()
    }

    /// Pointer to element `(i, j)`; the view's check makes it valid for `i < rows`, `j < cols`.
    #[inline(always)]
    pub(crate) fn ptr(&self, i: usize, j: usize) -> *const T {
        debug_assert!(i < self.rows && j < self.cols);
        // SAFETY: `new` checked that every element of the view lies inside `data`.
        unsafe { self.data.as_ptr().add(self.index(i, j)) }
    }

    #[inline(always)]
    fn index(&self, i: usize, j: usize) -> usize {
        (self.offset as isize + i as isize * self.row_stride + j as isize * self.col_stride)
            as usize
    }

    /// The view as the variant of its element type (`erased`).
    fn erase(self) -> Mats<'a> {
        let MatRef {
            data,
            offset,
            rows,
            cols,
            row_stride,
            col_stride,
        } = self;
        macro_rules! view {
            ($variant:ident, $data:expr) => {
                Mats::$variant(MatRef {
                    data: $data,
                    offset,
                    rows,
                    cols,
                    row_stride,
                    col_stride,
                })
            };
        }
        match T::floats(data) {
            Floats::F32(d) => view!(F32, d),
            Floats::Bf16(d) => view!(Bf16, d),
            Floats::F16(d) => view!(F16, d),
        }
    }

    pub(crate) fn row_stride(&self) -> isize {
        self.row_stride
    }

    pub(crate) fn col_stride(&self) -> isize {
        self.col_stride
    }
}

/// `c = a b`, `c` row-major (`a.rows() x b.cols()`), with `kernel`'s compute format and
/// instructions; large products run on rayon's threads.
///
/// # Errors
/// [`GemmError::ShapeMismatch`] when `a.cols() != b.rows()`, [`GemmError::OutputLength`]
/// when `c` does not hold the product; `c` is then untouched.
pub fn gemm<A: CpuFloat, B: CpuFloat, C: CpuFloat>(
    kernel: Kernel,
    a: MatRef<'_, A>,
    b: MatRef<'_, B>,
    c: &mut [C],
) -> Result<(), GemmError> {
    gemm_bias::<A, B, f32, C>(kernel, a, b, None, c)
}

/// `c = a b + bias` (the bias added to every row): a linear layer. The bias is rounded to
/// the compute format, as its cast would, and added to the f32 sums before `c` is written,
/// so a narrow `c` is rounded once.
///
/// # Errors
/// As [`gemm`], and [`GemmError::BiasLength`] when the bias does not hold `b.cols()` values.
pub fn gemm_bias<A: CpuFloat, B: CpuFloat, D: CpuFloat, C: CpuFloat>(
    kernel: Kernel,
    a: MatRef<'_, A>,
    b: MatRef<'_, B>,
    bias: Option<&[D]>,
    c: &mut [C],
) -> Result<(), GemmError> {
    check(&a, &b, c.len())?;
    let bias = bias
        .map(|bias| rounded_bias(bias, b.cols, kernel.format()))
        .transpose()?;
    let bias = bias.as_deref().map(driver::Bias::Cols);
    run(
        kernel,
        a.erase(),
        b.erase(),
        bias,
        C::floats_mut(c),
        Threads::Pool,
    );
    Ok(())
}

/// `c = a b + bias` with the bias added to every column (one value per row of the
/// product): a convolution's, whose rows are output channels. Rounded and added as in
/// [`gemm_bias`].
///
/// # Errors
/// As [`gemm`], and [`GemmError::BiasLength`] when the bias does not hold `a.rows()` values.
pub fn gemm_row_bias<A: CpuFloat, B: CpuFloat, D: CpuFloat, C: CpuFloat>(
    kernel: Kernel,
    a: MatRef<'_, A>,
    b: MatRef<'_, B>,
    bias: &[D],
    c: &mut [C],
) -> Result<(), GemmError> {
    gemm_on(Threads::Pool, kernel, a, b, Some(bias), c)
}

/// [`gemm`], or [`gemm_row_bias`] when `row_bias` is given, on the threads `threads` names:
/// [`Threads::Caller`] is for a caller that splits its work across threads itself (a
/// convolution does, over the batch, so that each thread's columns stay in its caches).
///
/// ```
/// use burn_amp_kernels::cpu::gemm::{self, Kernel, MatRef, Threads};
/// use burn_amp_kernels::cpu::{Isa, cast::Format};
///
/// let kernel = Kernel::select(Isa::detect(), Format::F32);
/// let (a, b) = ([1f32, 2.0], [3f32, 4.0]);
/// let mut c = [0f32; 1];
/// let (a, b) = (MatRef::row_major(&a, 1, 2)?, MatRef::row_major(&b, 2, 1)?);
/// gemm::gemm_on(Threads::Caller, kernel, a, b, Some(&[0.5f32]), &mut c)?;
/// assert_eq!(c, [11.5]);
/// # Ok::<(), gemm::GemmError>(())
/// ```
///
/// # Errors
/// As [`gemm_row_bias`].
pub fn gemm_on<A: CpuFloat, B: CpuFloat, D: CpuFloat, C: CpuFloat>(
    threads: Threads,
    kernel: Kernel,
    a: MatRef<'_, A>,
    b: MatRef<'_, B>,
    row_bias: Option<&[D]>,
    c: &mut [C],
) -> Result<(), GemmError> {
    check(&a, &b, c.len())?;
    let bias = row_bias
        .map(|bias| rounded_bias(bias, a.rows, kernel.format()))
        .transpose()?;
    let bias = bias.as_deref().map(driver::Bias::Rows);
    run(
        kernel,
        a.erase(),
        b.erase(),
        bias,
        C::floats_mut(c),
        threads,
    );
    Ok(())
}

/// [`gemm_on`] with A packed once ([`PackedA`]) on its kernel: the same bits as
/// [`gemm_on`] with the matrix it was packed from, without packing it again.
///
/// # Errors
/// As [`gemm_row_bias`], `a` standing for the matrix it was packed from.
pub fn gemm_packed_on<B: CpuFloat, D: CpuFloat, C: CpuFloat>(
    threads: Threads,
    a: &PackedA,
    b: MatRef<'_, B>,
    row_bias: Option<&[D]>,
    c: &mut [C],
) -> Result<(), GemmError> {
    check_dims((a.rows(), a.depth()), &b, c.len())?;
    let kernel = a.kernel();
    let bias = row_bias
        .map(|bias| rounded_bias(bias, a.rows(), kernel.format()))
        .transpose()?;
    let bias = bias.as_deref().map(driver::Bias::Rows);
    run_lhs::<f32>(
        kernel,
        driver::Lhs::Packed(a),
        b.erase(),
        bias,
        C::floats_mut(c),
        threads,
    );
    Ok(())
}

/// The driver for the operands' and the output's types, instantiated here (`erased`).
fn run(
    kernel: Kernel,
    a: Mats<'_>,
    b: Mats<'_>,
    bias: Option<driver::Bias<'_>>,
    c: FloatsMut<'_>,
    threads: Threads,
) {
    match a {
        Mats::F32(a) => run_lhs(kernel, driver::Lhs::Matrix(a), b, bias, c, threads),
        Mats::Bf16(a) => run_lhs(kernel, driver::Lhs::Matrix(a), b, bias, c, threads),
        Mats::F16(a) => run_lhs(kernel, driver::Lhs::Matrix(a), b, bias, c, threads),
    }
}

/// [`run`] with the left operand's type known.
fn run_lhs<A: CpuFloat>(
    kernel: Kernel,
    a: driver::Lhs<'_, A>,
    b: Mats<'_>,
    bias: Option<driver::Bias<'_>>,
    c: FloatsMut<'_>,
    threads: Threads,
) {
    match b {
        Mats::F32(b) => typed_mut!(c, |c| driver::run(kernel, a, b, bias, c, threads)),
        Mats::Bf16(b) => typed_mut!(c, |c| driver::run(kernel, a, b, bias, c, threads)),
        Mats::F16(b) => typed_mut!(c, |c| driver::run(kernel, a, b, bias, c, threads)),
    }
}

/// Whether `a b` can be written into `len` values.
fn check<A: CpuFloat, B: CpuFloat>(
    a: &MatRef<'_, A>,
    b: &MatRef<'_, B>,
    len: usize,
) -> Result<(), GemmError> {
    check_dims((a.rows, a.cols), b, len)
}

/// Whether the product of an `a_rows x a_cols` matrix by `b` can be written into `len`
/// values.
fn check_dims<B: CpuFloat>(
    (a_rows, a_cols): (usize, usize),
    b: &MatRef<'_, B>,
    len: usize,
) -> Result<(), GemmError> {
    if a_cols != b.rows {
        return Err(GemmError::ShapeMismatch {
            a_rows,
            a_cols,
            b_rows: b.rows,
            b_cols: b.cols,
        });
    }
    let too_large = || GemmError::TooLarge {
        rows: a_rows,
        depth: a_cols,
        cols: b.cols,
    };
    // Every count the driver forms (outputs, and each operand's elements, which it walks
    // with `isize` offsets) must be addressable: checked, never wrapped.
    let addressable = |x: usize, y: usize| x.checked_mul(y).filter(|v| *v <= isize::MAX as usize);
    let outputs = addressable(a_rows, b.cols).ok_or_else(too_large)?;
    addressable(a_rows, a_cols).ok_or_else(too_large)?;
    addressable(b.rows, b.cols).ok_or_else(too_large)?;
    if len != outputs {
        return Err(GemmError::OutputLength {
            rows: a_rows,
            cols: b.cols,
            len,
        });
    }
    Ok(())
}

/// A bias of `len` values rounded to the compute format, as its cast would.
fn rounded_bias<D: CpuFloat>(
    bias: &[D],
    len: usize,
    format: Format,
) -> Result<Vec<f32>, GemmError> {
    if bias.len() != len {
        return Err(GemmError::BiasLength {
            cols: len,
            len: bias.len(),
        });
    }
    Ok(bias.iter().map(|v| format.round(v.to_f32())).collect())
}
