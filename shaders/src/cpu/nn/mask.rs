//! `mask_fill`: a value where a mask is set, the input elsewhere, with the mask read in
//! place through its strides, so that a mask broadcast along some dimensions (an attention
//! mask of `[batch, 1, seq, seq]` over scores of `[batch, heads, seq, seq]`) is never
//! expanded. The values are copied as they are (any dtype): the op is its own gradient's
//! too, the output's gradient filled with zero where the mask is set.

use super::{CHUNK, NnError, check};
use crate::cpu::parallel;

/// Where a mask's bytes lie for each element of the tensor it masks: element
/// `(i_0, ..., i_{r-1})` of the row-major tensor of shape `shape` reads byte
/// `offset + i_0 * strides[0] + ... + i_{r-1} * strides[r-1]` of the mask, set when
/// nonzero (a stride of 0 broadcasts the mask along its dimension).
#[derive(Clone, Copy, Debug)]
pub struct MaskLayout<'a> {
    /// The masked tensor's shape.
    pub shape: &'a [usize],
    /// The mask's step along each dimension, in bytes (0 where it is broadcast).
    pub strides: &'a [isize],
    /// The byte of element `(0, ..., 0)`.
    pub offset: usize,
}

impl MaskLayout<'_> {
    /// The values the masked tensor holds, after checking that the layout names one stride
    /// per dimension and reaches no byte outside a mask of `len` bytes.
    fn check(&self, len: usize) -> Result<usize, NnError> {
        let refuse = || NnError::Mask {
            len,
            shape: self.shape.to_vec(),
            strides: self.strides.to_vec(),
            offset: self.offset,
        };
        if self.shape.len() != self.strides.len() {
            return Err(refuse());
        }
        let values = self
            .shape
            .iter()
            .try_fold(1usize, |n, d| n.checked_mul(*d))
            .ok_or_else(refuse)?;
        if values == 0 {
            return Ok(0);
        }
        // The lowest and highest byte read, in i128: no product of a dimension and a
        // stride overflows it.
        let (mut lo, mut hi) = (self.offset as i128, self.offset as i128);
        for (d, s) in self.shape.iter().zip(self.strides) {
            let reach = (*d as i128 - 1) * *s as i128;
            if reach < 0 {
                lo += reach;
            } else {
                hi += reach;
            }
        }
        if lo < 0 || hi >= len as i128 {
            return Err(refuse());
        }
        Ok(values)
    }
}

/// `out[i] = value` where element `i`'s mask byte is set, else `x[i]`; `x` and `out` are
/// row-major tensors of `layout.shape`, the mask's bytes are read through `layout`.
///
/// ```
/// use burn_amp_kernels::cpu::nn::{self, MaskLayout};
///
/// // A [2, 3] tensor masked by one row of 3 bytes broadcast over both rows.
/// let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
/// let mask = [0u8, 1, 0];
/// let layout = MaskLayout { shape: &[2, 3], strides: &[0, 1], offset: 0 };
/// let mut out = [0f32; 6];
/// nn::mask_fill(&x, &mask, layout, -1.0, &mut out)?;
/// assert_eq!(out, [1.0, -1.0, 3.0, 4.0, -1.0, 6.0]);
/// # Ok::<(), nn::NnError>(())
/// ```
///
/// # Errors
/// [`NnError::Mask`] when the layout does not name one stride per dimension or reaches
/// outside `mask`; [`NnError::Length`] when `x` or `out` does not hold the shape's values.
pub fn mask_fill<T: Copy + Send + Sync>(
    x: &[T],
    mask: &[u8],
    layout: MaskLayout<'_>,
    value: T,
    out: &mut [T],
) -> Result<(), NnError> {
    let values = layout.check(mask.len())?;
    check("input", values, x.len())?;
    check("output", values, out.len())?;
    if values == 0 {
        return Ok(());
    }
    let rank = layout.shape.len();
    // A scalar is one row of one value.
    let (row, step) = match rank {
        0 => (1, 0),
        _ => (layout.shape[rank - 1], layout.strides[rank - 1]),
    };
    let outer = &layout.shape[..rank.saturating_sub(1)];
    let outer_strides = &layout.strides[..rank.saturating_sub(1)];
    // The mask byte of row `r`'s first element.
    let start = |mut r: usize| -> usize {
        let mut at = layout.offset as isize;
        for (d, s) in outer.iter().zip(outer_strides).rev() {
            at += (r % d) as isize * s;
            r /= d;
        }
        at as usize
    };
    let rows_per_job = CHUNK.div_ceil(row).max(1);
    parallel::chunks(out, rows_per_job * row, |job, out| {
        let x = parallel::chunk(x, rows_per_job * row, job);
        for (i, (x, out)) in x.chunks(row).zip(out.chunks_mut(row)).enumerate() {
            let at = start(job * rows_per_job + i);
            match step {
                1 => fill_row(x, &mask[at..at + row], value, out),
                0 if mask[at] != 0 => out.fill(value),
                0 => out.copy_from_slice(x),
                _ => {
                    for (j, (x, out)) in x.iter().zip(out.iter_mut()).enumerate() {
                        let m = mask[(at as isize + j as isize * step) as usize];
                        *out = if m != 0 { value } else { *x };
                    }
                }
            }
        }
    });
    Ok(())
}

/// One row whose mask bytes are consecutive: a select the compiler turns into blends.
fn fill_row<T: Copy>(x: &[T], mask: &[u8], value: T, out: &mut [T]) {
    for ((out, x), m) in out.iter_mut().zip(x).zip(mask) {
        *out = if *m != 0 { value } else { *x };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference: each element's mask byte found from its multi-index.
    fn reference(x: &[f32], mask: &[u8], layout: MaskLayout<'_>, value: f32) -> Vec<f32> {
        (0..x.len())
            .map(|mut i| {
                let mut at = layout.offset as isize;
                let flat = i;
                for (d, s) in layout.shape.iter().zip(layout.strides).rev() {
                    at += (i % d) as isize * s;
                    i /= d;
                }
                if mask[at as usize] != 0 {
                    value
                } else {
                    x[flat]
                }
            })
            .collect()
    }

    #[test]
    fn broadcast_strided_and_negative_masks_match_the_reference() {
        let mask: Vec<u8> = (0..8192u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 29) as u8 % 2)
            .collect();
        let cases: [(&[usize], &[isize], usize); 6] = [
            (&[3, 4, 50, 50], &[2500, 0, 50, 1], 0),
            (&[3, 4, 50, 50], &[0, 0, 0, 0], 7),
            (&[3, 4, 50, 50], &[1, 0, 0, 3], 9),
            (&[6, 700], &[700, 1], 0),
            (&[5, 7], &[-7, -1], 34),
            (&[], &[], 11),
        ];
        for (shape, strides, offset) in cases {
            let layout = MaskLayout {
                shape,
                strides,
                offset,
            };
            let n: usize = shape.iter().product();
            let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let mut out = vec![0f32; n];
            mask_fill(&x, &mask, layout, -7.5, &mut out).unwrap();
            assert_eq!(
                out,
                reference(&x, &mask, layout, -7.5),
                "{shape:?} {strides:?}"
            );
        }
    }

    #[test]
    fn a_layout_outside_the_mask_or_of_the_wrong_rank_is_refused() {
        let (x, mut out, mask) = ([0f32; 6], [0f32; 6], [0u8; 6]);
        let bad: [(&[usize], &[isize], usize); 4] = [
            (&[2, 3], &[3, 1], 1),
            (&[2, 3], &[-3, 1], 0),
            (&[2, 3], &[3], 0),
            (&[2, 3], &[4, 1], 0),
        ];
        for (shape, strides, offset) in bad {
            let layout = MaskLayout {
                shape,
                strides,
                offset,
            };
            assert!(matches!(
                mask_fill(&x, &mask, layout, 1.0, &mut out),
                Err(NnError::Mask { .. })
            ));
        }
        let layout = MaskLayout {
            shape: &[2, 4],
            strides: &[0, 0],
            offset: 0,
        };
        assert!(matches!(
            mask_fill(&x, &mask, layout, 1.0, &mut out),
            Err(NnError::Length { .. })
        ));
    }
}
