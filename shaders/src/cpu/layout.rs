//! A strided view copied into row-major order: what a reshape of a transposed or permuted
//! tensor needs. The view's dimensions are walked with counters instead of an index
//! computed per value, a row of the last dimension at a time (a `copy_from_slice` when that
//! dimension is contiguous), rows split over rayon's threads.
//!
//! ```
//! use burn_amp_kernels::cpu::layout;
//!
//! // The transpose of a 2 x 3 matrix: shape [3, 2], strides [1, 3].
//! let src = [1u16, 2, 3, 4, 5, 6];
//! let mut dst = [0u16; 6];
//! layout::copy_strided(&src, 0, &[3, 2], &[1, 3], &mut dst)?;
//! assert_eq!(dst, [1, 4, 2, 5, 3, 6]);
//! # Ok::<(), layout::LayoutError>(())
//! ```

use bytemuck::Pod;

use super::parallel;

/// Why a copy was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// The view reaches outside its buffer.
    #[error("a view of {elements} values reaching offsets {min}..={max} of a buffer of {len}")]
    OutOfBounds {
        /// Values in the view.
        elements: usize,
        /// Its lowest offset.
        min: isize,
        /// Its highest offset.
        max: isize,
        /// The buffer's length.
        len: usize,
    },
    /// The destination does not hold the view's values, or shape and strides differ in rank.
    #[error("a view of shape {shape:?} (strides {strides:?}) into {dst} values")]
    Shape {
        /// The view's shape.
        shape: Vec<usize>,
        /// Its strides.
        strides: Vec<isize>,
        /// Room in the destination.
        dst: usize,
    },
}

/// Values a task copies.
const CHUNK: usize = 1 << 15;

/// Copies the view of `src` starting at `offset` with `shape` and `strides` (in values)
/// into `dst`, in row-major order.
///
/// # Errors
/// [`LayoutError::Shape`] when `dst` is not the view's size or the ranks differ,
/// [`LayoutError::OutOfBounds`] when the view reaches outside `src`; `dst` is then untouched.
pub fn copy_strided<T: Pod + Send + Sync>(
    src: &[T],
    offset: usize,
    shape: &[usize],
    strides: &[isize],
    dst: &mut [T],
) -> Result<(), LayoutError> {
    // Values of 1, 2, 4 or 8 bytes move as words of that size through functions that are
    // not generic, so compiled here (see `erased`); others through the generic body.
    macro_rules! as_words {
        ($word:ty, $copy:ident) => {
            if size_of::<T>() == size_of::<$word>() {
                let src = bytemuck::try_cast_slice::<T, $word>(src);
                if let (Ok(src), Ok(dst)) = (src, bytemuck::try_cast_slice_mut::<T, $word>(dst)) {
                    return $copy(src, offset, shape, strides, dst);
                }
            }
        };
    }
    as_words!(u8, copy_u8);
    as_words!(u16, copy_u16);
    as_words!(u32, copy_u32);
    as_words!(u64, copy_u64);
    copy_typed(src, offset, shape, strides, dst)
}

macro_rules! copy_words {
    ($($copy:ident: $word:ty),*) => {$(
        fn $copy(
            src: &[$word],
            offset: usize,
            shape: &[usize],
            strides: &[isize],
            dst: &mut [$word],
        ) -> Result<(), LayoutError> {
            copy_typed(src, offset, shape, strides, dst)
        }
    )*};
}
copy_words!(copy_u8: u8, copy_u16: u16, copy_u32: u32, copy_u64: u64);

fn copy_typed<T: Copy + Send + Sync>(
    src: &[T],
    offset: usize,
    shape: &[usize],
    strides: &[isize],
    dst: &mut [T],
) -> Result<(), LayoutError> {
    let shape_error = || LayoutError::Shape {
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        dst: dst.len(),
    };
    // Checked: a product or reach that wraps would pass the bounds check below.
    let elements = shape
        .iter()
        .try_fold(1usize, |acc, &n| acc.checked_mul(n))
        .ok_or_else(shape_error)?;
    if shape.len() != strides.len() || dst.len() != elements {
        return Err(LayoutError::Shape {
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            dst: dst.len(),
        });
    }
    if elements == 0 {
        return Ok(());
    }
    let out_of_bounds = |min, max| LayoutError::OutOfBounds {
        elements,
        min,
        max,
        len: src.len(),
    };
    let start = isize::try_from(offset).map_err(|_| out_of_bounds(isize::MAX, isize::MAX))?;
    let (mut min, mut max) = (start, start);
    for (&n, &s) in shape.iter().zip(strides) {
        let reach = isize::try_from(n - 1)
            .ok()
            .and_then(|n| n.checked_mul(s))
            .ok_or_else(|| out_of_bounds(min, isize::MAX))?;
        let moved = if reach < 0 {
            min.checked_add(reach).map(|v| min = v)
        } else {
            max.checked_add(reach).map(|v| max = v)
        };
        moved.ok_or_else(|| out_of_bounds(min, max))?;
    }
    if min < 0 || max >= src.len() as isize {
        return Err(LayoutError::OutOfBounds {
            elements,
            min,
            max,
            len: src.len(),
        });
    }
    let rank = shape.len();
    if rank == 0 {
        dst[0] = src[offset];
        return Ok(());
    }
    let (row, step) = (shape[rank - 1], strides[rank - 1]);
    let outer = &shape[..rank - 1];
    let outer_strides = &strides[..rank - 1];
    let rows_per_task = (CHUNK / row).max(1);
    parallel::chunks(dst, rows_per_task * row, |task, dst| {
        // The counters of the task's first row, and its offset.
        let mut index = vec![0usize; outer.len()];
        let mut at = offset as isize;
        let mut first = task * rows_per_task;
        for d in (0..outer.len()).rev() {
            index[d] = first % outer[d];
            first /= outer[d];
            at += index[d] as isize * outer_strides[d];
        }
        for out in dst.chunks_mut(row) {
            if step == 1 {
                let start = at as usize;
                out.copy_from_slice(&src[start..start + row]);
            } else if step == 0 {
                // A value repeated along the row (a broadcast view).
                out.fill(src[at as usize]);
            } else {
                for (i, v) in out.iter_mut().enumerate() {
                    *v = src[(at + i as isize * step) as usize];
                }
            }
            // Next row: the counters carry from the last outer dimension up.
            for d in (0..outer.len()).rev() {
                index[d] += 1;
                at += outer_strides[d];
                if index[d] < outer[d] {
                    break;
                }
                at -= outer[d] as isize * outer_strides[d];
                index[d] = 0;
            }
        }
    });
    Ok(())
}
