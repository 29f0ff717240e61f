//! A convolution's batch split across threads: each thread takes a run of samples, chunked
//! to fit its caches, and sums its own share of the weight gradient; a few large samples
//! run one after the other, each product on every thread. Whatever the split, the output
//! and the input gradient keep their bits, the weight and bias gradients their value, and
//! a run on the same threads repeats bit for bit.

use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn_amp::{Policy, with_policy};

use super::nn::{Ad, assert_close, tensor};
use crate::common::{Lcg, values};

/// Output, input, weight and bias gradients of a 3x3 convolution (stride 2, padding 1)
/// of `batch` samples of `size` under `policy`, on a pool of `threads` threads.
fn run(policy: &str, threads: usize, batch: usize, size: usize) -> [Vec<f32>; 4] {
    let policy: Policy = policy.parse().expect("a policy");
    let (c, o) = (5, 7);
    let x = Lcg::new(21).vec(batch * c * size * size, 2.0);
    let weight = Lcg::new(22).vec(o * c * 9, 0.3);
    let bias = Lcg::new(23).vec(o, 0.5);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool");
    pool.install(|| {
        with_policy(policy, || {
            let xt = tensor::<Ad, 4>(&x, [batch, c, size, size], FloatDType::F32).require_grad();
            let wt = tensor::<Ad, 4>(&weight, [o, c, 3, 3], FloatDType::F32).require_grad();
            let bt = tensor::<Ad, 1>(&bias, [o], FloatDType::F32).require_grad();
            let options = ConvOptions::new([2, 2], [1, 1], [1, 1], 1);
            let y = conv2d(xt.clone(), wt.clone(), Some(bt.clone()), options);
            let dims = y.dims();
            let dy = TensorData::new(Lcg::new(24).vec(dims.iter().product(), 1.0), dims);
            let dy = Tensor::<Ad, 4>::from_data(dy, &Default::default());
            let grads = (y.clone().cast(FloatDType::F32) * dy).sum().backward();
            [
                values(y),
                values(xt.grad(&grads).expect("dx")),
                values(wt.grad(&grads).expect("dw")),
                values(bt.grad(&grads).expect("db")),
            ]
        })
    })
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn a_convolutions_batch_splits_across_threads_without_changing_its_results() {
    // 13 samples: uneven runs on 2, 3 and 5 threads; 9x9 inputs make one chunk of several
    // samples a run, 80x80 inputs chunks of one sample. One thread takes the whole batch.
    // Every policy whose convolutions run on burn-amp's kernels (float32 runs Flex's).
    let policies = ["mixed_bfloat16", "mixed_float16", "bfloat16", "float16"];
    for (policy, size) in policies.iter().flat_map(|p| [(*p, 9), (*p, 80)]) {
        let one = run(policy, 1, 13, size);
        for threads in [2, 3, 5] {
            let [y, dx, dw, db] = run(policy, threads, 13, size);
            let on = format!("{policy}, {size}x{size}, {threads} threads");
            assert_eq!(bits(&y), bits(&one[0]), "output, {on}");
            assert_eq!(bits(&dx), bits(&one[1]), "input gradient, {on}");
            let scale = one[2].iter().fold(0f32, |m, v| m.max(v.abs()));
            assert_close(&format!("weight gradient, {on}"), &dw, &one[2], 1e-5, scale);
            let scale = one[3].iter().fold(0f32, |m, v| m.max(v.abs()));
            assert_close(&format!("bias gradient, {on}"), &db, &one[3], 1e-5, scale);
            // The same threads sum in the same order.
            let again = run(policy, threads, 13, size);
            assert_eq!(bits(&again[2]), bits(&dw), "weight gradient repeats, {on}");
            assert_eq!(bits(&again[3]), bits(&db), "bias gradient repeats, {on}");
        }
    }
    // Fewer samples than threads: chunks in turn, each product on all threads.
    let one = run("mixed_bfloat16", 1, 2, 40);
    let [y, dx, dw, db] = run("mixed_bfloat16", 4, 2, 40);
    assert_close("output, 2 samples", &y, &one[0], 1e-6, 1.0);
    assert_close("input gradient, 2 samples", &dx, &one[1], 1e-5, 1.0);
    let scale = one[2].iter().fold(0f32, |m, v| m.max(v.abs()));
    assert_close("weight gradient, 2 samples", &dw, &one[2], 1e-5, scale);
    assert_close("bias gradient, 2 samples", &db, &one[3], 1e-5, 1.0);
}
