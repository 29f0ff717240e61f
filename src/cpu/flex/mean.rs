//! The mean over a tensor's last dimension in f32, its rows split across threads (Flex
//! sums every row of a mean on the calling thread). Each block of rows is Flex's own mean,
//! so each row's sum and division are Flex's: the bits of `Flex::float_mean_dim` on the
//! tensor cast to f32. A 16-bit tensor is widened a block of rows at a time, each block
//! within a core's L2 cache, in place of an f32 copy of the whole tensor read back from
//! memory (a batch norm's statistic of its bf16 input).

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn_amp_kernels::cpu::{Isa, parallel};
use burn_tensor::ops::FloatTensorOps;
use burn_tensor::{DType, FloatDType, Shape};

use super::cast::cast;
use super::tensor::{converted, from_vec, reshaped};

/// Values a block of rows holds at most, unless one row is longer (256 KiB of f32).
const BLOCK: usize = 1 << 16;

/// `x`'s mean over `dim` in f32 (`x` in f32, bf16 or f16): the bits of casting it to f32
/// and Flex's mean there. Over the last dimension of a contiguous tensor of more than one
/// block the blocks of rows run in parallel; otherwise it is that cast and mean.
pub(crate) fn mean_dim(isa: Isa, x: FlexTensor, dim: usize) -> FlexTensor {
    let shape = x.layout().shape().clone();
    let rank = shape.num_dims();
    let width = shape[rank - 1];
    let n = shape.num_elements();
    let whole = x.is_contiguous() && x.layout().start_offset() == 0;
    if dim + 1 != rank || !whole || width == 0 || n <= BLOCK {
        return Flex::float_mean_dim(cast(isa, x, FloatDType::F32), dim);
    }
    let rows = n / width;
    let per_block = (BLOCK / width).max(1);
    let x = reshaped(x, Shape::new([rows, width]));
    let mut means = vec![0f32; rows];
    parallel::chunks(&mut means, per_block, |b, out| {
        let first = b * per_block;
        let block = match x.dtype() {
            DType::F32 => x.narrow(0, first, out.len()),
            dtype => crate::dtype::with_float!(dtype, S => {
                let values = &x.storage::<S>()[first * width..(first + out.len()) * width];
                from_vec(converted::<S, f32>(isa, values), Shape::new([out.len(), width]))
            }),
        };
        let mean = Flex::float_mean_dim(block, 1);
        out.copy_from_slice(&mean.storage::<f32>()[..out.len()]);
    });
    let mut kept = shape;
    kept[rank - 1] = 1;
    from_vec(means, kept)
}

#[cfg(test)]
mod tests {
    use burn_tensor::TensorData;
    use half::bf16;

    use super::*;

    fn tensor(values: Vec<f32>, shape: [usize; 3], dtype: FloatDType) -> FlexTensor {
        let t = FlexTensor::from_data(TensorData::new(values, shape));
        cast(Isa::detect(), t, dtype)
    }

    fn bits(t: FlexTensor) -> Vec<u32> {
        let t = super::super::layout::contiguous(&t);
        t.storage::<f32>()[..t.layout().num_elements()]
            .iter()
            .map(|v| v.to_bits())
            .collect()
    }

    #[test]
    fn blocks_of_rows_in_parallel_give_flex_bits_for_every_dtype_and_row_length() {
        let isa = Isa::detect();
        // Rows shorter than a block (several to a block, the last block short), and
        // longer (one to a block).
        for shape in [[3, 700, 50], [2, 3, 40_000]] {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 % 1013) as f32 - 500.0) * 0.37)
                .collect();
            for dtype in [FloatDType::F32, FloatDType::BF16, FloatDType::F16] {
                let x = tensor(values.clone(), shape, dtype);
                let got = mean_dim(isa, x.clone(), 2);
                assert_eq!(got.layout().shape().to_vec(), [shape[0], shape[1], 1]);
                let want = Flex::float_mean_dim(cast(isa, x, FloatDType::F32), 2);
                assert_eq!(bits(got), bits(want), "{shape:?} {dtype:?}");
            }
        }
    }

    #[test]
    fn other_dimensions_and_views_take_the_cast_and_flex_mean() {
        let isa = Isa::detect();
        let shape = [4, 300, 100];
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.25).collect();
        let x = tensor(values, shape, FloatDType::BF16);
        for dim in 0..3 {
            let want = Flex::float_mean_dim(cast(isa, x.clone(), FloatDType::F32), dim);
            assert_eq!(bits(mean_dim(isa, x.clone(), dim)), bits(want), "dim {dim}");
        }
        // A transposed view is not read as rows.
        let t = Flex::float_swap_dims(x, 1, 2);
        let want = Flex::float_mean_dim(cast(isa, t.clone(), FloatDType::F32), 2);
        assert_eq!(bits(mean_dim(isa, t, 2)), bits(want));
        let one = tensor(vec![bf16::ONE.to_f32(); 4], [1, 1, 4], FloatDType::BF16);
        assert_eq!(bits(mean_dim(isa, one, 2)), [1f32.to_bits()]);
    }
}
