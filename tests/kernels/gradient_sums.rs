//! A 16-bit tensor read by several of burn-amp's ops (ReLU, `mask_fill`, max pooling, a
//! reshape of a transposed view, casts): each op's backward pass hands its gradient on
//! through burn-amp's `register`, which adds the 16-bit gradients of one tensor on the
//! elementwise kernel. Every gradient here is exact (the output's or zero), so the sum has
//! Flex's bits on bare `Autodiff<Flex>`, and the profile shows that burn-amp's nodes ran.

use burn::prelude::Backend;
use burn::tensor::module::max_pool2d;
use burn::tensor::{Bool, FloatDType, Tensor, TensorData};

use crate::common::Lcg;
use crate::statistics::both;

const MIXED: [&str; 2] = ["mixed_bfloat16", "mixed_float16"];

/// `x` read five times, the results in f32 side by side: ReLU, `mask_fill`, 2x2 max
/// pooling, a reshape of a transposed view (a contiguous copy) and `x` itself.
fn readers<B: Backend>(x: Tensor<B, 4>, mask: Tensor<B, 4, Bool>) -> Tensor<B, 2> {
    let flat = |t: Tensor<B, 4>| t.cast(FloatDType::F32).reshape([2, -1]);
    let pooled = max_pool2d(x.clone(), [2, 2], [2, 2], [0, 0], [1, 1], false);
    let swapped = x.clone().swap_dims(1, 2).reshape([2, 4 * 6 * 6]);
    Tensor::cat(
        vec![
            flat(burn::tensor::activation::relu(x.clone())),
            flat(x.clone().mask_fill(mask, -3.0)),
            flat(pooled),
            swapped.cast(FloatDType::F32),
            flat(x),
        ],
        1,
    )
}

#[test]
fn a_16_bit_tensor_read_by_several_ops_sums_its_gradients_with_flex_bits() {
    let dims = [2, 4, 6, 6];
    let n: usize = dims.iter().product();
    let x = Lcg::new(51).vec(n, 3.0);
    let w = Lcg::new(52).vec(2 * (n / 2 * 4 + n / 8), 1.0);
    let set: Vec<bool> = Lcg::new(53).vec(n, 1.0).iter().map(|v| *v > 0.2).collect();
    let mask = TensorData::new(set, dims);
    let device = Default::default();
    for policy in MIXED {
        for dtype in [FloatDType::BF16, FloatDType::F16] {
            let what = format!("{dtype:?} ({policy})");
            let (got, want, profile) = both(
                policy,
                (&x, dims, dtype),
                &w,
                |x| readers(x, Tensor::from_data(mask.clone(), &device)),
                |x| readers(x, Tensor::from_data(mask.clone(), &device)),
            );
            assert_eq!(got, want, "{what}: Flex's bits, values and gradient");
            for op in [
                "relu (backward)",
                "mask_fill (backward)",
                "max_pool2d (backward)",
                "contiguous copy (backward)",
            ] {
                assert!(
                    profile.entries().any(|e| e.op == op),
                    "{what}: burn-amp's {op} ran: {profile}"
                );
            }
        }
    }
}
