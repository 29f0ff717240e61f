//! A convolution's batch split across threads: each thread takes a run of samples, chunked
//! to fit its caches, and sums its own share of the weight gradient; a few large samples
//! run one after the other, each product on every thread. Whatever the split, the output
//! and the input gradient keep their bits, the weight and bias gradients their value, and
//! a run on the same threads repeats bit for bit.

use burn::tensor::module::conv2d;
use burn::tensor::ops::{ConvOptions, ConvTransposeOptions};
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
            conv2d_grads([xt, wt], bt, options, 0, 24)
        })
    })
}

/// The output of `conv2d(x, weight, bias)` under `options`, less `crop` positions on each
/// side, and its input, weight and bias gradients from the sum of its product with fixed
/// values (drawn from `seed`).
fn conv2d_grads(
    [x, weight]: [Tensor<Ad, 4>; 2],
    bias: Tensor<Ad, 1>,
    options: ConvOptions<2>,
    crop: usize,
    seed: u64,
) -> [Vec<f32>; 4] {
    let mut y = conv2d(x.clone(), weight.clone(), Some(bias.clone()), options);
    if crop > 0 {
        let [n, o, h, w] = y.dims();
        y = y.slice([0..n, 0..o, crop..h - crop, crop..w - crop]);
    }
    let dims = y.dims();
    let dy = TensorData::new(Lcg::new(seed).vec(dims.iter().product(), 1.0), dims);
    let dy = Tensor::<Ad, 4>::from_data(dy, &Default::default());
    let grads = (y.clone().cast(FloatDType::F32) * dy).sum().backward();
    [
        values(y),
        values(x.grad(&grads).expect("dx")),
        values(weight.grad(&grads).expect("dw")),
        values(bias.grad(&grads).expect("db")),
    ]
}

/// `got`'s output and input gradient hold `want`'s bits, its weight and bias gradients
/// their values (to 1e-5 of their largest).
fn assert_same(on: &str, got: &[Vec<f32>; 4], want: &[Vec<f32>; 4]) {
    assert_eq!(bits(&got[0]), bits(&want[0]), "output, {on}");
    assert_eq!(bits(&got[1]), bits(&want[1]), "input gradient, {on}");
    for (what, i) in [("weight", 2), ("bias", 3)] {
        let scale = want[i].iter().fold(0f32, |m, v| m.max(v.abs()));
        assert_close(
            &format!("{what} gradient, {on}"),
            &got[i],
            &want[i],
            1e-5,
            scale,
        );
    }
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
            let got = run(policy, threads, 13, size);
            let on = format!("{policy}, {size}x{size}, {threads} threads");
            assert_same(&on, &got, &one);
            // The same threads sum in the same order.
            let again = run(policy, threads, 13, size);
            assert_eq!(
                bits(&again[2]),
                bits(&got[2]),
                "weight gradient repeats, {on}"
            );
            assert_eq!(
                bits(&again[3]),
                bits(&got[3]),
                "bias gradient repeats, {on}"
            );
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

/// Output, input, weight and bias gradients of a 1x1 convolution (`c -> o` channels) of
/// `batch` samples of `h x w` under `policy`, its input in `dtype`, with zero `padding`: the
/// gradient of the output's `h x w` interior by fixed values (zero on the padding's ring).
fn one_by_one(
    policy: &str,
    batch: usize,
    [h, w]: [usize; 2],
    dtype: FloatDType,
    padding: usize,
) -> [Vec<f32>; 4] {
    let (c, o) = (6, 5);
    let x = Lcg::new(41).vec(batch * c * h * w, 2.0);
    let weight = Lcg::new(42).vec(o * c, 0.3);
    let bias = Lcg::new(43).vec(o, 0.5);
    with_policy(policy.parse::<Policy>().expect("a policy"), || {
        let xt = tensor::<Ad, 4>(&x, [batch, c, h, w], dtype).require_grad();
        let wt = tensor::<Ad, 4>(&weight, [o, c, 1, 1], FloatDType::F32).require_grad();
        let bt = tensor::<Ad, 1>(&bias, [o], FloatDType::F32).require_grad();
        let options = ConvOptions::new([1, 1], [padding, padding], [1, 1], 1);
        conv2d_grads([xt, wt], bt, options, padding, 44)
    })
}

#[test]
fn a_pointwise_convolution_reads_its_input_as_columns_with_the_same_bits() {
    // A 1x1 convolution at stride 1 without padding multiplies the input samples where
    // they lie; with a padding of 1 the same weights run through `im2col`, and the output's
    // interior is the same sums of the same rounded operands, so the same bits. Its input
    // gradient too (the ring's output gradient is zero); the weight and bias gradients sum
    // the ring's zeros in, so their value. Chunks of several samples (7x9) and of one
    // (60x60); an f32 input rounded by the packing, and one already 16-bit.
    let cases = [
        ("mixed_bfloat16", FloatDType::F32),
        ("mixed_bfloat16", FloatDType::BF16),
        ("mixed_float16", FloatDType::F32),
        ("mixed_float16", FloatDType::F16),
        ("bfloat16", FloatDType::BF16),
        ("float16", FloatDType::F16),
    ];
    for ((policy, dtype), size) in cases.iter().flat_map(|c| [(*c, [7, 9]), (*c, [60, 60])]) {
        let on = format!("{policy}, {dtype:?} input, {size:?}");
        let got = one_by_one(policy, 5, size, dtype, 0);
        assert_same(&on, &got, &one_by_one(policy, 5, size, dtype, 1));
    }
}

/// Output, input, weight and bias gradients of a transposed convolution (2-d, or 1-d where
/// `size[0]` is 0) under `policy`, and the operands burn-amp's kernels rounded while packing.
fn transposed(
    policy: &str,
    [c, o]: [usize; 2],
    [h, w]: [usize; 2],
    kernel: usize,
    options: ConvTransposeOptions<2>,
) -> ([Vec<f32>; 4], u64) {
    use burn::tensor::module::{conv_transpose1d, conv_transpose2d};
    use burn::tensor::ops::ConvTransposeOptions as Options;
    let batch = 3;
    let groups = options.groups;
    let x = Lcg::new(31).vec(batch * c * h.max(1) * w, 2.0);
    let weight = Lcg::new(32).vec(c * (o / groups) * kernel * kernel, 0.3);
    let bias = Lcg::new(33).vec(o, 0.5);
    with_policy(policy.parse::<Policy>().expect("a policy"), || {
        let bt = tensor::<Ad, 1>(&bias, [o], FloatDType::F32).require_grad();
        let (y, xg, wg, cost) = if h == 0 {
            // 1-d: the second axis's geometry.
            let xt = tensor::<Ad, 3>(&x, [batch, c, w], FloatDType::F32).require_grad();
            let wt = &weight[..c * (o / groups) * kernel];
            let wt = tensor::<Ad, 3>(wt, [c, o / groups, kernel], FloatDType::F32).require_grad();
            let one = Options::new(
                [options.stride[1]],
                [options.padding[1]],
                [options.padding_out[1]],
                [options.dilation[1]],
                groups,
            );
            let (y, cost) = burn_amp::cost::record(|| {
                conv_transpose1d(xt.clone(), wt.clone(), Some(bt.clone()), one)
            });
            let y: Tensor<Ad, 4> = y.unsqueeze_dim(2);
            (y, GradOf::X3(xt), GradOf::W3(wt), cost)
        } else {
            let xt = tensor::<Ad, 4>(&x, [batch, c, h, w], FloatDType::F32).require_grad();
            let wt = tensor::<Ad, 4>(&weight, [c, o / groups, kernel, kernel], FloatDType::F32)
                .require_grad();
            let (y, cost) = burn_amp::cost::record(|| {
                conv_transpose2d(xt.clone(), wt.clone(), Some(bt.clone()), options.clone())
            });
            (y, GradOf::X4(xt), GradOf::W4(wt), cost)
        };
        let dims = y.dims();
        let dy = TensorData::new(Lcg::new(34).vec(dims.iter().product(), 1.0), dims);
        let dy = Tensor::<Ad, 4>::from_data(dy, &Default::default());
        let grads = (y.clone().cast(FloatDType::F32) * dy).sum().backward();
        let rounded = cost.rounded_in_kernel().map(|(.., n, _)| n).sum();
        let out = [
            values(y),
            xg.grad(&grads),
            wg.grad(&grads),
            values(bt.grad(&grads).expect("db")),
        ];
        (out, rounded)
    })
}

/// A tensor whose gradient a test reads, of rank 3 or 4.
enum GradOf {
    X3(Tensor<Ad, 3>),
    W3(Tensor<Ad, 3>),
    X4(Tensor<Ad, 4>),
    W4(Tensor<Ad, 4>),
}

impl GradOf {
    fn grad(&self, grads: &<Ad as burn::tensor::backend::AutodiffBackend>::Gradients) -> Vec<f32> {
        match self {
            GradOf::X3(t) | GradOf::W3(t) => values(t.grad(grads).expect("a gradient")),
            GradOf::X4(t) | GradOf::W4(t) => values(t.grad(grads).expect("a gradient")),
        }
    }
}

/// A transposed convolution a test runs: name, `[in, out]` channels, input size, kernel,
/// options, and whether burn-amp's kernels take it.
type Case = (
    &'static str,
    [usize; 2],
    [usize; 2],
    usize,
    ConvTransposeOptions<2>,
    bool,
);

#[test]
fn transposed_convolutions_run_on_the_gemm_and_match_flex() {
    // Flex's own transposed convolution under the same compute dtype (its inputs cast
    // first) is the reference, forward and the three gradients.
    let flex =
        |compute: &str| format!("params=float32,compute={compute},output=float32,kernels=backend");
    let o = |stride, padding, padding_out, dilation, groups| {
        ConvTransposeOptions::new(stride, padding, padding_out, dilation, groups)
    };
    // (what, [in, out] channels, size ([0, w]: 1-d), kernel, options, taken by burn-amp)
    let cases: [Case; 8] = [
        // A 2x2 upsampling of stride 2 (a U-Net's): every output position one tap.
        (
            "k2 s2",
            [6, 4],
            [5, 7],
            2,
            o([2, 2], [0, 0], [0, 0], [1, 1], 1),
            true,
        ),
        // Overlapping taps, padding and an output padding.
        (
            "k3 s2 p1 out1",
            [5, 3],
            [4, 6],
            3,
            o([2, 2], [1, 1], [1, 1], [1, 1], 1),
            true,
        ),
        (
            "k3 s1 p1",
            [4, 6],
            [6, 5],
            3,
            o([1, 1], [1, 1], [0, 0], [1, 1], 1),
            true,
        ),
        (
            "k3 dilation 2",
            [4, 5],
            [5, 5],
            3,
            o([1, 2], [2, 1], [0, 1], [2, 2], 1),
            true,
        ),
        // Stride 3 with a 1x1 kernel: most output positions receive the bias alone.
        (
            "k1 s3",
            [4, 5],
            [3, 4],
            1,
            o([3, 3], [0, 0], [2, 1], [1, 1], 1),
            true,
        ),
        // A pointwise 1x1 at stride 1: the output gradient's columns are itself.
        (
            "k1 s1",
            [6, 4],
            [5, 7],
            1,
            o([1, 1], [0, 0], [0, 0], [1, 1], 1),
            true,
        ),
        // 1-d, and groups (handed to Flex).
        (
            "1-d k3 s2",
            [4, 6],
            [0, 9],
            3,
            o([1, 2], [0, 1], [0, 1], [1, 1], 1),
            true,
        ),
        (
            "groups 2",
            [4, 6],
            [5, 5],
            3,
            o([2, 2], [1, 1], [0, 0], [1, 1], 2),
            false,
        ),
    ];
    for (policy, compute) in [("mixed_bfloat16", "bfloat16"), ("mixed_float16", "float16")] {
        for (what, channels, size, kernel, options, taken) in cases.clone() {
            let on = format!("{what}, {policy}");
            let (ours, rounded) = transposed(policy, channels, size, kernel, options.clone());
            let (want, flex_rounded) = transposed(&flex(compute), channels, size, kernel, options);
            assert_eq!(flex_rounded, 0, "{on}: the reference runs Flex's ops");
            assert_eq!(
                rounded > 0,
                taken,
                "{on}: on burn-amp's kernels ({rounded} rounded)"
            );
            for (i, name) in [
                "output",
                "input gradient",
                "weight gradient",
                "bias gradient",
            ]
            .iter()
            .enumerate()
            {
                let scale = want[i].iter().fold(0f32, |m, v| m.max(v.abs()));
                assert_close(
                    &format!("{name}, {on}"),
                    &ours[i],
                    &want[i],
                    1.0 / 64.0,
                    scale,
                );
            }
        }
    }
}

/// Output, input, weight and bias gradients of a grouped 2-d convolution of `channels`
/// channels (`[channels, channels / groups, k, k]` weight) under `policy`, the operands
/// burn-amp's kernels rounded while packing, and whether burn-amp's convolution node ran
/// its backward pass (under a pure 16-bit policy the operands come rounded already).
fn grouped(
    policy: &str,
    channels: usize,
    [h, w]: [usize; 2],
    kernel: usize,
    options: ConvOptions<2>,
) -> ([Vec<f32>; 4], u64, bool) {
    let (batch, per_group) = (3, channels / options.groups);
    let x = Lcg::new(41).vec(batch * channels * h * w, 2.0);
    let weight = Lcg::new(42).vec(channels * per_group * kernel * kernel, 0.3);
    let bias = Lcg::new(43).vec(channels, 0.5);
    let ((out, rounded), profile) = burn_amp::cost::profile(|| {
        with_policy(policy.parse::<Policy>().expect("a policy"), || {
            let xt = tensor::<Ad, 4>(&x, [batch, channels, h, w], FloatDType::F32).require_grad();
            let wdims = [channels, per_group, kernel, kernel];
            let wt = tensor::<Ad, 4>(&weight, wdims, FloatDType::F32).require_grad();
            let bt = tensor::<Ad, 1>(&bias, [channels], FloatDType::F32).require_grad();
            let (y, cost) = burn_amp::cost::record(|| {
                conv2d(xt.clone(), wt.clone(), Some(bt.clone()), options.clone())
            });
            let dims = y.dims();
            let dy = TensorData::new(Lcg::new(44).vec(dims.iter().product(), 1.0), dims);
            let dy = Tensor::<Ad, 4>::from_data(dy, &Default::default());
            let grads = (y.clone().cast(FloatDType::F32) * dy).sum().backward();
            let rounded = cost.rounded_in_kernel().map(|(.., n, _)| n).sum();
            let out = [
                values(y),
                values(xt.grad(&grads).expect("dx")),
                values(wt.grad(&grads).expect("dw")),
                values(bt.grad(&grads).expect("db")),
            ];
            (out, rounded)
        })
    });
    let ours = profile.entries().any(|e| e.op == "conv (backward)");
    (out, rounded, ours)
}

#[test]
fn depthwise_convolutions_run_on_their_kernel_and_match_flex() {
    // The same policy on Flex's ops: mixed (f32 variables and outputs) or pure 16-bit.
    let flex = |policy: &str, compute: &str| {
        let outer = if policy.starts_with("mixed") {
            "float32"
        } else {
            compute
        };
        format!("params={outer},compute={compute},output={outer},kernels=backend")
    };
    // (what, channels, size, kernel, options, taken by a kernel of burn-amp's)
    let cases = [
        (
            "3x3 same",
            6,
            [9, 7],
            3,
            ConvOptions::new([1, 1], [1, 1], [1, 1], 6),
            true,
        ),
        (
            "3x3 stride 2",
            5,
            [9, 8],
            3,
            ConvOptions::new([2, 2], [1, 1], [1, 1], 5),
            true,
        ),
        (
            "5x5 dilation 2",
            4,
            [11, 10],
            5,
            ConvOptions::new([1, 2], [4, 2], [2, 2], 4),
            true,
        ),
        (
            "1x1 stride 3",
            4,
            [7, 7],
            1,
            ConvOptions::new([3, 3], [0, 0], [1, 1], 4),
            true,
        ),
        // Two channels a group: handed to Flex.
        (
            "groups of 2",
            6,
            [6, 6],
            3,
            ConvOptions::new([1, 1], [1, 1], [1, 1], 3),
            false,
        ),
    ];
    let policies = [
        ("mixed_bfloat16", "bfloat16"),
        ("mixed_float16", "float16"),
        ("bfloat16", "bfloat16"),
        ("float16", "float16"),
    ];
    for (policy, compute) in policies {
        for (what, channels, size, kernel, options, taken) in cases.clone() {
            let on = format!("{what}, {policy}");
            let (ours, rounded, ran) = grouped(policy, channels, size, kernel, options.clone());
            let reference = flex(policy, compute);
            let (want, flex_rounded, flex_ran) =
                grouped(&reference, channels, size, kernel, options);
            assert!(
                flex_rounded == 0 && !flex_ran,
                "{on}: the reference runs Flex's ops"
            );
            assert_eq!(
                ran, taken,
                "{on}: on burn-amp's kernels, forward and backward"
            );
            if policy.starts_with("mixed") {
                assert_eq!(
                    rounded > 0,
                    taken,
                    "{on}: f32 operands rounded by the kernel ({rounded} rounded)"
                );
            }
            let names = [
                "output",
                "input gradient",
                "weight gradient",
                "bias gradient",
            ];
            for (i, name) in names.iter().enumerate() {
                let scale = want[i].iter().fold(0f32, |m, v| m.max(v.abs()));
                let what = format!("{name}, {on}");
                assert_close(&what, &ours[i], &want[i], 1.0 / 64.0, scale);
            }
        }
    }
}

#[test]
fn max_pools_run_on_their_kernel_with_flex_values_and_gradients() {
    use burn::tensor::module::max_pool2d;
    type Bare = burn::backend::Autodiff<burn::backend::Flex>;
    let dims = [3, 4, 9, 8];
    let n: usize = dims.iter().product();
    // Few levels (ties) and a NaN now and then.
    let x: Vec<f32> = Lcg::new(51)
        .vec(n, 3.0)
        .iter()
        .enumerate()
        .map(|(i, v)| if i % 37 == 5 { f32::NAN } else { v.round() })
        .collect();
    // (kernel, stride, padding, dilation, ceil_mode, taken by burn-amp's kernel)
    let cases = [
        ([2, 2], [2, 2], [0, 0], [1, 1], false, true),
        ([3, 3], [2, 2], [1, 1], [1, 1], false, true),
        ([3, 2], [1, 2], [1, 0], [2, 1], false, true),
        ([2, 2], [2, 2], [0, 0], [1, 1], true, false),
    ];
    let device = Default::default();
    for policy in ["mixed_bfloat16", "mixed_float16"] {
        for dtype in [FloatDType::F32, FloatDType::BF16, FloatDType::F16] {
            for (k, s, p, d, ceil, taken) in cases {
                let what = format!("{k:?} {s:?} {p:?} {d:?} ceil {ceil}, {policy}, {dtype:?}");
                let ((y, dx), profile) = burn_amp::cost::profile(|| {
                    with_policy(policy.parse::<Policy>().unwrap(), || {
                        let xt = tensor::<Ad, 4>(&x, dims, dtype).require_grad();
                        let y = max_pool2d(xt.clone(), k, s, p, d, ceil);
                        assert_eq!(y.dtype(), dtype.into(), "{what}: the input's dtype");
                        let w = Lcg::new(52).vec(y.dims().iter().product(), 1.0);
                        let w = Tensor::<Ad, 4>::from_data(TensorData::new(w, y.dims()), &device);
                        let grads = (y.clone().cast(FloatDType::F32) * w).sum().backward();
                        (values(y), values(xt.grad(&grads).unwrap()))
                    })
                });
                let ran = profile.entries().any(|e| e.op == "max_pool2d (backward)");
                assert_eq!(ran, taken, "{what}: on burn-amp's kernel: {profile}");
                // Flex on the same values (in f32: each is exact in every dtype here).
                let rounded = values(tensor::<burn::backend::Flex, 4>(&x, dims, dtype));
                let xt = Tensor::<Bare, 4>::from_data(TensorData::new(rounded, dims), &device)
                    .require_grad();
                let yf = max_pool2d(xt.clone(), k, s, p, d, ceil);
                let w = Lcg::new(52).vec(yf.dims().iter().product(), 1.0);
                let w = Tensor::<Bare, 4>::from_data(TensorData::new(w, yf.dims()), &device);
                let grads = (yf.clone() * w).sum().backward();
                let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&y), bits(&values(yf)), "{what}: Flex's values");
                let dx_flex = values(xt.grad(&grads).unwrap());
                // The gradient in the input's dtype: Flex's rounded.
                let dx_flex = values(tensor::<burn::backend::Flex, 4>(&dx_flex, dims, dtype));
                assert_close(
                    &format!("{what}: gradient"),
                    &dx,
                    &dx_flex,
                    1.0 / 128.0,
                    1.0,
                );
            }
        }
    }
}

#[test]
fn global_average_pools_run_on_their_kernel_with_flex_bits() {
    // `adaptive_avg_pool2d` to `[1, 1]` (an image classifier's head) on burn-amp's kernel in
    // the input's dtype: f32 and bf16 with Flex's bits both ways (each plane summed in f32
    // in order), f16 within f16 rounding of Flex's f32 result (Flex sums f16 in f16, the
    // kernel in f32). Other output sizes stay Flex's.
    use burn::tensor::module::adaptive_avg_pool2d;
    type Bare = burn::backend::Autodiff<burn::backend::Flex>;
    let dims = [3, 5, 9, 7];
    let n: usize = dims.iter().product();
    let x = Lcg::new(61).vec(n, 3.0);
    let device = Default::default();
    for policy in ["mixed_bfloat16", "mixed_float16"] {
        for dtype in [FloatDType::F32, FloatDType::BF16, FloatDType::F16] {
            for (size, taken) in [([1, 1], true), ([2, 3], false)] {
                let what = format!("to {size:?}, {policy}, {dtype:?}");
                let run = |w: &[f32]| {
                    burn_amp::cost::profile(|| {
                        with_policy(policy.parse::<Policy>().unwrap(), || {
                            let xt = tensor::<Ad, 4>(&x, dims, dtype).require_grad();
                            let y = adaptive_avg_pool2d(xt.clone(), size);
                            assert_eq!(y.dtype(), dtype.into(), "{what}: the input's dtype");
                            let w = TensorData::new(w.to_vec(), y.dims());
                            let w = Tensor::<Ad, 4>::from_data(w, &device).cast(dtype);
                            let grads = (y.clone() * w).sum().backward();
                            (values(y), values(xt.grad(&grads).unwrap()))
                        })
                    })
                };
                let w = Lcg::new(62).vec(dims[0] * dims[1] * size[0] * size[1], 1.0);
                let ((y, dx), profile) = run(&w);
                let ran = profile
                    .entries()
                    .any(|e| e.op == "adaptive_avg_pool2d (backward)");
                assert_eq!(ran, taken, "{what}: on burn-amp's kernel: {profile}");
                // Flex on the same values in the same dtype (f16 in f32, where its sums
                // are exact enough to compare with).
                let flex_dtype = match dtype {
                    FloatDType::F16 => FloatDType::F32,
                    d => d,
                };
                let rounded = values(tensor::<burn::backend::Flex, 4>(&x, dims, dtype));
                let xt = tensor::<Bare, 4>(&rounded, dims, flex_dtype).require_grad();
                let yf = adaptive_avg_pool2d(xt.clone(), size);
                let wf = TensorData::new(w.clone(), yf.dims());
                let wf = Tensor::<Bare, 4>::from_data(wf, &device)
                    .cast(dtype)
                    .cast(flex_dtype);
                let grads = (yf.clone() * wf).sum().backward();
                let (yf, dxf) = (values(yf), values(xt.grad(&grads).unwrap()));
                if flex_dtype == dtype {
                    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&y), bits(&yf), "{what}: Flex's values");
                    assert_eq!(bits(&dx), bits(&dxf), "{what}: Flex's gradient");
                } else {
                    // One f16 rounding where the kernel sums in f32; Flex's own f16 sums
                    // round at each value.
                    // (absolute near zero).
                    let (tol, floor) = if taken {
                        (1.0 / 1024.0, 1e-3)
                    } else {
                        (1.0 / 128.0, 1.0)
                    };
                    assert_close(&format!("{what}: values"), &y, &yf, tol, floor);
                    assert_close(&format!("{what}: gradient"), &dx, &dxf, tol, floor);
                }
            }
        }
    }
}
