//! burn-amp's `nn` kernels on Flex, through `MixedPrecision<Autodiff<Flex>>` under the mixed
//! policies: softmax, log-softmax, layer norm, GELU, ReLU, arithmetic, reshapes of
//! transposed views, dropout masks and convolutions, forward and backward, against Flex's
//! own ops (bare `Autodiff<Flex>` on the same values in f32) within each op's stated bound;
//! views, broadcasts, groups and other dimensions either taken or handed to Flex with the
//! same result; and nothing of it under `float32`, which stays Flex's, bit for bit.

use burn::backend::{Autodiff, Flex};
use burn::tensor::activation::{gelu, log_softmax, relu, softmax};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, Distribution, FloatDType, Tensor, TensorData};
use burn_amp::{MixedPrecision, Policy, cost, with_policy};

use crate::common::{Lcg, values};

pub(crate) type Ad = MixedPrecision<Autodiff<Flex>>;
type Bare = Autodiff<Flex>;

/// Values with the awkward ones in: `-inf` masks (every fifth value), a row of only
/// `-inf` (row 1), NaN in row 2, subnormals; `cols` a row.
fn scores(rows: usize, cols: usize, seed: u64) -> Vec<f32> {
    let mut v = Lcg::new(seed).vec(rows * cols, 6.0);
    for (i, x) in v.iter_mut().enumerate() {
        if i % 5 == 3 && i / cols != 0 {
            *x = f32::NEG_INFINITY;
        }
    }
    v[cols..2 * cols]
        .iter_mut()
        .for_each(|x| *x = f32::NEG_INFINITY);
    v[2 * cols + 1] = f32::NAN;
    v[3 * cols + 2] = 1e-40;
    v
}

pub(crate) fn tensor<B: Backend, const D: usize>(
    v: &[f32],
    shape: [usize; D],
    dtype: FloatDType,
) -> Tensor<B, D> {
    Tensor::<B, D>::from_data(TensorData::new(v.to_vec(), shape), &Default::default()).cast(dtype)
}

/// `|got - want| <= tol * (|want| + floor)`, NaN where NaN.
pub(crate) fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32, floor: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (w.abs() + floor);
        assert!(ok, "{what}[{i}]: {g} vs Flex's {w}");
    }
}

/// `f` run on `MixedPrecision<Autodiff<Flex>>` under `policy` with the input in `dtype`, and
/// on bare `Autodiff<Flex>` with the same values in f32: outputs, and the input's gradient
/// of `sum(f(x) * w)` for fixed values `w` (NaN where both give NaN).
fn against_flex<const D: usize>(
    what: &str,
    policy: &str,
    (x, shape, dtype): (&[f32], [usize; D], FloatDType),
    f: impl Fn(Tensor<Ad, D>) -> Tensor<Ad, D>,
    g: impl Fn(Tensor<Bare, D>) -> Tensor<Bare, D>,
    tol: f32,
) {
    let device = Default::default();
    let parsed: Policy = policy.parse().unwrap();
    // The output's gradient: fixed values of the output's shape.
    let weights = |dims: [usize; D]| {
        let n = dims.iter().product();
        TensorData::new(Lcg::new(99).vec(n, 1.0), dims)
    };
    let (ours, our_grad, out_dtype) = with_policy(parsed, || {
        let xt = tensor::<Ad, D>(x, shape, dtype).require_grad();
        let y = f(xt.clone());
        let out_dtype = y.dtype();
        let wt = Tensor::<Ad, D>::from_data(weights(y.dims()), &device);
        let loss = (y.clone().cast(FloatDType::F32) * wt).sum();
        let grads = loss.backward();
        let grad = xt.grad(&grads).expect("a gradient");
        assert_eq!(
            grad.dtype(),
            dtype.into(),
            "{what}: the gradient in the input's dtype"
        );
        (values(y), values(grad), out_dtype)
    });
    // Flex on the same (rounded) values, in f32.
    let xr = values(tensor::<Flex, D>(x, shape, dtype));
    let xt = Tensor::<Bare, D>::from_data(TensorData::new(xr, shape), &device).require_grad();
    let y = g(xt.clone());
    let wt = Tensor::<Bare, D>::from_data(weights(y.dims()), &device);
    let grads = (y.clone() * wt).sum().backward();
    let (want, want_grad) = (values(y), values(xt.grad(&grads).unwrap()));
    // A 16-bit output carries one rounding more than Flex's f32.
    let out_tol = if out_dtype == DType::F32 {
        tol
    } else {
        tol.max(1.0 / 128.0)
    };
    // Relative to the value, and to 1 for values near 0 (GELU of a negative input: a
    // difference of erf approximations near -1).
    assert_close(
        &format!("{what} ({policy}): output"),
        &ours,
        &want,
        out_tol,
        1.0,
    );
    // Gradients: relative to the largest one, and to 0.1 (the output gradients are of order
    // 1, and a softmax's input gradient `y (dy - sum(dy y))` cancels: Flex's and ours each
    // land within about 1e-7 of an f64 gradient, in different directions; the kernels'
    // own tests hold theirs to f64).
    let grad_tol = if dtype == FloatDType::F32 {
        tol.max(1e-5)
    } else {
        tol.max(1.0 / 64.0)
    };
    let scale = want_grad
        .iter()
        .filter(|v| v.is_finite())
        .fold(0f32, |m, v| m.max(v.abs()));
    assert_close(
        &format!("{what} ({policy}): gradient"),
        &our_grad,
        &want_grad,
        grad_tol,
        if dtype == FloatDType::F32 {
            (scale * 1e-2).max(0.1)
        } else {
            // 16-bit gradients (rounded output gradients summed): relative to the largest.
            scale.max(0.1)
        },
    );
}

const MIXED: [&str; 2] = ["mixed_bfloat16", "mixed_float16"];

#[test]
fn softmax_and_log_softmax_match_flex_forward_and_backward() {
    let (rows, cols) = (6, 37);
    let x = scores(rows, cols, 1);
    for policy in MIXED {
        for dtype in [FloatDType::F32, FloatDType::BF16, FloatDType::F16] {
            // The rows of NaN (1 and 2) are NaN in both; their gradients too.
            against_flex(
                "softmax",
                policy,
                (&x, [2, 3, cols], dtype),
                |x| softmax(x, 2),
                |x| softmax(x, 2),
                2e-6,
            );
            let clean: Vec<f32> = x
                .iter()
                .map(|v| if v.is_finite() { *v } else { -30.0 })
                .collect();
            against_flex(
                "log_softmax",
                policy,
                (&clean, [2, 3, cols], dtype),
                |x| log_softmax(x, 2),
                |x| log_softmax(x, 2),
                4e-6,
            );
            // Not the last dimension: Flex's op after the cast, the same result.
            against_flex(
                "softmax dim 1",
                policy,
                (&clean, [2, 3, cols], dtype),
                |x| softmax(x, 1),
                |x| softmax(x, 1),
                2e-6,
            );
            // A transposed view.
            against_flex(
                "softmax of a transpose",
                policy,
                (&clean, [2, 3, cols], dtype),
                |x| softmax(x.swap_dims(1, 2), 2).swap_dims(1, 2),
                |x| softmax(x.swap_dims(1, 2), 2).swap_dims(1, 2),
                2e-6,
            );
        }
    }
}

#[test]
fn layer_norm_gelu_and_relu_match_flex_forward_and_backward() {
    use burn::nn::{LayerNorm, LayerNormConfig};
    let (rows, cols) = (5, 33);
    let x = Lcg::new(4).vec(rows * cols, 3.0);
    let device = Default::default();
    let ln_ad: LayerNorm<Ad> = LayerNormConfig::new(cols).init(&device);
    let ln_bare: LayerNorm<Bare> = LayerNormConfig::new(cols).init(&device);
    for policy in MIXED {
        for dtype in [FloatDType::F32, FloatDType::BF16, FloatDType::F16] {
            against_flex(
                "layer norm",
                policy,
                (&x, [rows, cols], dtype),
                |x| ln_ad.forward(x),
                |x| ln_bare.forward(x),
                1e-5,
            );
            against_flex("gelu", policy, (&x, [rows, cols], dtype), gelu, gelu, 2e-6);
            against_flex("relu", policy, (&x, [rows, cols], dtype), relu, relu, 0.0);
        }
    }
    // gamma and beta get their gradients, in f32, from the kernels' row sums.
    let grads_of = |policy: &str| {
        with_policy(policy.parse::<Policy>().unwrap(), || {
            let ln: LayerNorm<Ad> = LayerNormConfig::new(cols).init(&device);
            let xt = tensor::<Ad, 2>(&x, [rows, cols], FloatDType::BF16);
            let w = tensor::<Ad, 2>(
                &Lcg::new(5).vec(rows * cols, 1.0),
                [rows, cols],
                FloatDType::F32,
            );
            let grads = (ln.forward(xt) * w).sum().backward();
            let g = ln.gamma.grad(&grads).unwrap();
            let b = ln.beta.as_ref().unwrap().grad(&grads).unwrap();
            assert_eq!((g.dtype(), b.dtype()), (DType::F32, DType::F32));
            [values(g), values(b)].concat()
        })
    };
    // `kernels=backend`: the same policy on Flex's ops (the cast and Burn's decomposition).
    assert_close(
        "gamma and beta gradients",
        &grads_of("mixed_bfloat16"),
        &grads_of("params=float32,compute=bfloat16,output=float32,kernels=backend"),
        1e-5,
        1e-3,
    );
}

#[test]
fn arithmetic_on_16_bit_activations_matches_flex() {
    let (rows, cols) = (7, 19);
    let a = Lcg::new(6).vec(rows * cols, 4.0);
    let b: Vec<f32> = Lcg::new(7)
        .vec(rows * cols, 2.0)
        .iter()
        .map(|v| v + 3.0)
        .collect();
    for policy in MIXED {
        for dtype in [FloatDType::BF16, FloatDType::F16] {
            let other = |dtype| tensor::<Ad, 2>(&b, [rows, cols], dtype);
            let other_bare =
                |dtype| tensor::<Bare, 2>(&b, [rows, cols], dtype).cast(FloatDType::F32);
            against_flex(
                "add",
                policy,
                (&a, [rows, cols], dtype),
                |x| x.clone() + other(dtype),
                |x| x + other_bare(dtype),
                0.0,
            );
            against_flex(
                "sub",
                policy,
                (&a, [rows, cols], dtype),
                |x| x - other(dtype),
                |x| x - other_bare(dtype),
                0.0,
            );
            against_flex(
                "mul",
                policy,
                (&a, [rows, cols], dtype),
                |x| x * other(dtype),
                |x| x * other_bare(dtype),
                0.0,
            );
            against_flex(
                "div",
                policy,
                (&a, [rows, cols], dtype),
                |x| x / other(dtype),
                |x| x / other_bare(dtype),
                1e-6,
            );
            against_flex(
                "mul_scalar",
                policy,
                (&a, [rows, cols], dtype),
                |x| x * 1.1,
                |x| x * 1.1,
                0.0,
            );
            against_flex(
                "div_scalar",
                policy,
                (&a, [rows, cols], dtype),
                |x| x / 5.656854,
                |x| x / 5.656854,
                1e-6,
            );
            against_flex(
                "add_scalar",
                policy,
                (&a, [rows, cols], dtype),
                |x| x + 0.5,
                |x| x + 0.5,
                0.0,
            );
            // A broadcast row: Flex's op, the same values.
            let row: Vec<f32> = b[..cols].to_vec();
            let r = row.clone();
            against_flex(
                "broadcast add",
                policy,
                (&a, [rows, cols], dtype),
                move |x| x + tensor::<Ad, 2>(&row, [1, cols], dtype),
                move |x| x + tensor::<Bare, 2>(&r, [1, cols], dtype).cast(FloatDType::F32),
                0.0,
            );
        }
    }
}

#[test]
fn mask_fill_matches_flex_forward_and_backward_with_broadcast_and_strided_masks() {
    use burn::tensor::Bool;
    let shape = [2, 3, 5, 6];
    let x = scores(2 * 3 * 5, 6, 11);
    // Bits from a fixed draw: set where the draw is above 0.3.
    let bits = |n: usize, seed: u64| -> Vec<bool> {
        Lcg::new(seed)
            .vec(n, 1.0)
            .iter()
            .map(|v| *v > 0.3)
            .collect()
    };
    // The masks, made on each backend's own tensors: the whole shape, broadcast along the
    // heads (attention's), along everything but the last dimension, along the last (whole
    // rows), and a transposed view.
    fn masks<B: Backend>(bits: &dyn Fn(usize, u64) -> Vec<bool>) -> Vec<Tensor<B, 4, Bool>> {
        let device = Default::default();
        let mask = |dims: [usize; 4], seed| {
            let n = dims.iter().product();
            Tensor::<B, 4, Bool>::from_data(TensorData::new(bits(n, seed), dims), &device)
        };
        vec![
            mask([2, 3, 5, 6], 1),
            mask([2, 1, 5, 6], 2),
            mask([1, 1, 1, 6], 3),
            mask([2, 1, 5, 1], 5),
            mask([2, 1, 6, 5], 4).swap_dims(2, 3),
        ]
    }
    let ours = masks::<Ad>(&bits);
    let flex = masks::<Bare>(&bits);
    for policy in MIXED {
        for dtype in [FloatDType::BF16, FloatDType::F16, FloatDType::F32] {
            for (i, (m, f)) in ours.iter().zip(&flex).enumerate() {
                for value in [-1024.0f32, f32::NEG_INFINITY] {
                    let (m, f) = (m.clone(), f.clone());
                    against_flex(
                        &format!("mask_fill, mask {i}, {value}"),
                        policy,
                        (&x, shape, dtype),
                        move |x| x.mask_fill(m.clone(), value),
                        move |x| x.mask_fill(f.clone(), value),
                        0.0,
                    );
                }
            }
        }
    }
    // Under the 16-bit policies (variables in f16 or bf16): Flex's values, the output in the
    // input's dtype, the gradient zero under the mask and the output's elsewhere.
    let bare = masks::<Flex>(&bits);
    for (policy, dtype) in [("float16", FloatDType::F16), ("bfloat16", FloatDType::BF16)] {
        let (ys, g) = with_policy(policy.parse::<Policy>().unwrap(), || {
            let xt = tensor::<Ad, 4>(&x, shape, dtype).require_grad();
            let y = xt.clone().mask_fill(ours[1].clone(), -1024.0);
            assert_eq!(y.dtype(), dtype.into(), "{policy}: the output's dtype");
            let grads = y.clone().cast(FloatDType::F32).sum().backward();
            (values(y), values(xt.grad(&grads).unwrap()))
        });
        let want = values(tensor::<Flex, 4>(&x, shape, dtype).mask_fill(bare[1].clone(), -1024.0));
        assert_close(&format!("mask_fill ({policy})"), &ys, &want, 0.0, 0.0);
        let m = values(bare[1].clone().expand(shape).float());
        assert!(
            g.iter()
                .zip(&m)
                .all(|(g, m)| *g == if *m == 1.0 { 0.0 } else { 1.0 }),
            "mask_fill ({policy}): the gradient"
        );
    }
    // A 16-bit tensor's op and its gradient run on the kernel (the backward pass is burn-amp's).
    let (_, profile) = cost::profile(|| {
        with_policy(Policy::mixed_bfloat16(), || {
            let xt = tensor::<Ad, 4>(&x, shape, FloatDType::BF16).require_grad();
            let y = xt.clone().mask_fill(ours[1].clone(), -1024.0);
            let grads = y.cast(FloatDType::F32).sum().backward();
            let g = values(xt.grad(&grads).unwrap());
            let m = values(ours[1].clone().expand(shape).float());
            assert!(
                g.iter()
                    .zip(&m)
                    .all(|(g, m)| *g == if *m == 1.0 { 0.0 } else { 1.0 })
            );
        })
    });
    assert!(
        profile.entries().any(|e| e.op == "mask_fill (backward)"),
        "the backward pass is burn-amp's: {profile}"
    );
}

#[test]
fn reshapes_of_transposed_views_keep_values_and_gradients() {
    let x = Lcg::new(8).vec(2 * 5 * 4 * 3, 2.0);
    for policy in MIXED {
        for dtype in [FloatDType::F32, FloatDType::BF16] {
            // Attention's head split and merge: [b, s, h, d] -> [b, h, s, d] -> [b, s, h*d].
            let f = |x: Tensor<Ad, 4>| {
                x.swap_dims(1, 2)
                    .reshape([2, 4, 15])
                    .reshape([2, 4, 5, 3])
                    .swap_dims(1, 2)
            };
            let g = |x: Tensor<Bare, 4>| {
                x.swap_dims(1, 2)
                    .reshape([2, 4, 15])
                    .reshape([2, 4, 5, 3])
                    .swap_dims(1, 2)
            };
            against_flex(
                "swap_dims + reshape",
                policy,
                (&x, [2, 5, 4, 3], dtype),
                f,
                g,
                0.0,
            );
        }
    }
}

#[test]
fn dropout_masks_are_bernoulli_repeatable_and_take_the_variable_dtype() {
    let device = Default::default();
    let n = 1 << 18;
    let mask = |seed: u64, dtype: FloatDType| {
        <Ad as Backend>::seed(&device, seed);
        Tensor::<Ad, 1>::random([n], Distribution::Bernoulli(0.9), &device).cast(dtype)
    };
    with_policy(Policy::mixed_bfloat16(), || {
        let a = values(mask(3, FloatDType::F32));
        assert!(a.iter().all(|v| *v == 0.0 || *v == 1.0));
        let ones = a.iter().filter(|v| **v == 1.0).count() as f64;
        let sigma = (n as f64 * 0.09).sqrt();
        assert!(
            (ones - 0.9 * n as f64).abs() < 5.0 * sigma,
            "{ones} ones of {n}"
        );
        assert_eq!(
            a,
            values(mask(3, FloatDType::F32)),
            "the same seed, the same mask"
        );
        assert_ne!(
            a,
            values(mask(4, FloatDType::F32)),
            "another seed, another mask"
        );
        // Burn's Dropout module on a bf16 activation: a bf16 mask, scaled by 1/0.9 in f32.
        let x = Tensor::<Ad, 1>::ones([n], &device).cast(FloatDType::BF16);
        let (y, cost) = cost::record(|| burn::nn::DropoutConfig::new(0.1).init().forward(x));
        assert_eq!(y.dtype(), DType::BF16);
        let kept = values(y);
        let scaled = half::bf16::from_f32(1.0 / 0.9).to_f32();
        assert!(kept.iter().all(|v| *v == 0.0 || *v == scaled), "0 or 1/0.9");
        assert_eq!(cost.casts().count(), 0, "no cast: {cost}");
    });
}

#[test]
fn float32_runs_flex_own_ops_bit_for_bit() {
    let (rows, cols) = (6, 37);
    let x = Lcg::new(9).vec(rows * cols, 3.0);
    let device = Default::default();
    let run_ad = || {
        with_policy(Policy::float32(), || {
            <Ad as Backend>::seed(&device, 5);
            let xt = tensor::<Ad, 2>(&x, [rows, cols], FloatDType::F32).require_grad();
            let d = Tensor::<Ad, 2>::random([rows, cols], Distribution::Bernoulli(0.5), &device);
            let y = log_softmax(gelu(xt.clone()) * d / 3.0, 1) + softmax(xt.clone(), 1);
            let grads = y.clone().sum().backward();
            (
                common_bits(values(y)),
                common_bits(values(xt.grad(&grads).unwrap())),
            )
        })
    };
    <Bare as Backend>::seed(&device, 5);
    let xt = tensor::<Bare, 2>(&x, [rows, cols], FloatDType::F32).require_grad();
    let d = Tensor::<Bare, 2>::random([rows, cols], Distribution::Bernoulli(0.5), &device);
    let y = log_softmax(gelu(xt.clone()) * d / 3.0, 1) + softmax(xt.clone(), 1);
    let grads = y.clone().sum().backward();
    let want = (
        common_bits(values(y)),
        common_bits(values(xt.grad(&grads).unwrap())),
    );
    assert_eq!(run_ad(), want);
}

fn common_bits(v: Vec<f32>) -> Vec<u32> {
    v.into_iter().map(f32::to_bits).collect()
}

/// `v` rounded to bf16 and back.
fn bf16_round(v: &[f32]) -> Vec<f32> {
    v.iter()
        .map(|x| half::bf16::from_f32(*x).to_f32())
        .collect()
}

#[test]
fn convolutions_run_on_the_gemm_and_match_flex() {
    use burn::tensor::module::{conv1d, conv2d};
    use burn::tensor::ops::ConvOptions;
    let device: burn::backend::flex::FlexDevice = Default::default();
    // 2-d: stride 2, padding 1; groups 2 (handed to Flex); 1-d with dilation.
    let (n, c, h, w, o) = (3, 4, 9, 7, 6);
    let x = Lcg::new(10).vec(n * c * h * w, 2.0);
    for (groups, stride) in [(1, 2), (1, 1), (2, 1)] {
        let weight = Lcg::new(11).vec(o * (c / groups) * 9, 0.3);
        let bias = Lcg::new(12).vec(o, 0.5);
        // burn-amp rounds the f32 weight and bias to bf16 as it packs them: Flex gets them
        // rounded.
        let (wr, br) = (bf16_round(&weight), bf16_round(&bias));
        let options = ConvOptions::new([stride, stride], [1, 1], [1, 1], groups);
        let (wa, ba, o2) = (weight.clone(), bias.clone(), options.clone());
        against_flex(
            &format!("conv2d, groups {groups}, stride {stride}"),
            "mixed_bfloat16",
            (&x, [n, c, h, w], FloatDType::BF16),
            move |x| {
                let wt = Tensor::<Ad, 4>::from_data(
                    TensorData::new(wa.clone(), [o, c / groups, 3, 3]),
                    &Default::default(),
                );
                let bt = Tensor::<Ad, 1>::from_data(
                    TensorData::new(ba.clone(), [o]),
                    &Default::default(),
                );
                conv2d(x, wt, Some(bt), o2.clone())
            },
            move |x| {
                let wt = Tensor::<Bare, 4>::from_data(
                    TensorData::new(wr.clone(), [o, c / groups, 3, 3]),
                    &device,
                );
                let bt = Tensor::<Bare, 1>::from_data(TensorData::new(br.clone(), [o]), &device);
                conv2d(x, wt, Some(bt), options.clone())
            },
            1.0 / 64.0,
        );
    }
    let xs = Lcg::new(13).vec(n * c * 20, 2.0);
    let weight = Lcg::new(14).vec(o * c * 3, 0.3);
    let wr = bf16_round(&weight);
    let options = ConvOptions::new([1], [2], [2], 1);
    let o1 = options.clone();
    against_flex(
        "conv1d, dilation 2",
        "mixed_bfloat16",
        (&xs, [n, c, 20], FloatDType::BF16),
        move |x| {
            let wt = Tensor::<Ad, 3>::from_data(
                TensorData::new(weight.clone(), [o, c, 3]),
                &Default::default(),
            );
            conv1d(x, wt, None, o1.clone())
        },
        move |x| {
            let wt = Tensor::<Bare, 3>::from_data(
                TensorData::new(wr.clone(), [o, c, 3]),
                &Default::default(),
            );
            conv1d(x, wt, None, options.clone())
        },
        1.0 / 64.0,
    );
}

#[test]
fn a_convolutions_weight_and_bias_gradients_are_f32_sums_over_the_batch() {
    use burn::nn::PaddingConfig2d;
    use burn::nn::conv::{Conv2d, Conv2dConfig};
    let device = Default::default();
    let x = Lcg::new(15).vec(4 * 3 * 8 * 8, 1.0);
    let grads_of = |policy: &str| {
        with_policy(policy.parse::<Policy>().unwrap(), || {
            <Ad as Backend>::seed(&device, 3);
            let conv: Conv2d<Ad> = Conv2dConfig::new([3, 5], [3, 3])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(&device);
            let xt = tensor::<Ad, 4>(&x, [4, 3, 8, 8], FloatDType::F32);
            let (y, cost) = cost::record(|| conv.forward(xt));
            let grads = (y.cast(FloatDType::F32) * 0.5).sum().backward();
            let gw = conv.weight.grad(&grads).unwrap();
            let gb = conv.bias.as_ref().unwrap().grad(&grads).unwrap();
            assert_eq!(
                (gw.dtype(), gb.dtype()),
                (DType::F32, DType::F32),
                "{policy}"
            );
            (values(gw), values(gb), cost.rounded_in_kernel().count())
        })
    };
    let (w_ours, b_ours, rounded) = grads_of("mixed_bfloat16");
    assert!(
        rounded > 0,
        "the operands were rounded in the kernel, not cast"
    );
    // Flex's conv on the same policy (its inputs cast to bf16 first).
    let (w_flex, b_flex, _) =
        grads_of("params=float32,compute=bfloat16,output=float32,kernels=backend");
    let scale = w_flex.iter().fold(0f32, |m, v| m.max(v.abs()));
    assert_close("weight gradient", &w_ours, &w_flex, 1.0 / 64.0, scale);
    // The bias gradient is a sum of 0.5s: exact in f32 either way.
    assert_eq!(b_ours, b_flex);
}

/// `(x, y)`, or `(y, x)` where `swap`.
fn ordered<T>(swap: bool, x: T, y: T) -> (T, T) {
    if swap { (y, x) } else { (x, y) }
}

/// `x op y` for the four arithmetic ops, on any backend.
fn arithmetic<B: Backend, const D: usize>(
    op: usize,
    x: Tensor<B, D>,
    y: Tensor<B, D>,
) -> Tensor<B, D> {
    match op {
        0 => x + y,
        1 => x - y,
        2 => x * y,
        _ => x / y,
    }
}

#[test]
fn broadcast_operands_run_on_the_kernels_and_get_their_gradients_summed_back() {
    // f32 operands too: a batch norm's `x - mean` meets its f32 statistics in f32, which
    // Flex's broadcast path runs value by value; the IEEE operation gives Flex's bits.
    let (rows, cols) = (6, 11);
    // Away from 0, so that either side may divide.
    let a: Vec<f32> = Lcg::new(8)
        .vec(rows * cols, 3.0)
        .iter()
        .map(|v| v.abs() + 1.0)
        .collect();
    let r: Vec<f32> = Lcg::new(9).vec(cols, 1.0).iter().map(|v| v + 2.0).collect();
    let w = Lcg::new(99).vec(rows * cols, 1.0);
    let device = Default::default();
    for policy in MIXED {
        let parsed: Policy = policy.parse().unwrap();
        for dtype in [FloatDType::F32, FloatDType::BF16, FloatDType::F16] {
            for op in 0..4 {
                for row_first in [false, true] {
                    let what = format!("op {op}, row first {row_first} ({policy}, {dtype:?})");
                    let (ours, profile) = cost::profile(|| {
                        with_policy(parsed, || {
                            let at = tensor::<Ad, 2>(&a, [rows, cols], dtype).require_grad();
                            let rt = tensor::<Ad, 2>(&r, [1, cols], dtype).require_grad();
                            let (x, y) = ordered(row_first, at.clone(), rt.clone());
                            let out = arithmetic(op, x, y);
                            let wt = Tensor::<Ad, 2>::from_data(
                                TensorData::new(w.clone(), [rows, cols]),
                                &device,
                            );
                            let grads = (out.clone().cast(FloatDType::F32) * wt).sum().backward();
                            let (ga, gr) = (at.grad(&grads).unwrap(), rt.grad(&grads).unwrap());
                            assert_eq!(gr.dims(), [1, cols], "{what}: the row's gradient shape");
                            assert_eq!(gr.dtype(), dtype.into(), "{what}: in the row's dtype");
                            (values(out), values(ga), values(gr))
                        })
                    });
                    assert!(
                        profile.entries().any(|e| e.op == "arithmetic (backward)"),
                        "{what}: the op and its backward pass are burn-amp's: {profile}"
                    );
                    // Bare Flex in f32 on the rounded values, the output's gradient rounded
                    // as ours is (the output is in `dtype`).
                    let rounded = |v: &[f32], dims: [usize; 2]| {
                        TensorData::new(values(tensor::<Flex, 2>(v, dims, dtype)), dims)
                    };
                    let at = Tensor::<Bare, 2>::from_data(rounded(&a, [rows, cols]), &device)
                        .require_grad();
                    let rt = Tensor::<Bare, 2>::from_data(rounded(&r, [1, cols]), &device)
                        .require_grad();
                    let (x, y) = ordered(row_first, at.clone(), rt.clone());
                    let out = arithmetic(op, x, y);
                    let wt = Tensor::<Bare, 2>::from_data(rounded(&w, [rows, cols]), &device);
                    let grads = (out.clone() * wt).sum().backward();
                    // f32: the output exactly Flex's, the gradients within a few f32
                    // roundings (a quotient's derivative in another order of operations,
                    // the broadcast operand's sums in another order).
                    let (tol_out, tol) = match dtype {
                        FloatDType::F32 => (0.0, 1e-5),
                        _ => (1.0 / 128.0, 1.0 / 128.0),
                    };
                    let out = values(out);
                    assert_close(&format!("{what}: output"), &ours.0, &out, tol_out, 1e-3);
                    let ga = values(at.grad(&grads).unwrap());
                    assert_close(
                        &format!("{what}: full operand's gradient"),
                        &ours.1,
                        &ga,
                        tol,
                        1e-3,
                    );
                    let gr = values(rt.grad(&grads).unwrap());
                    assert_close(&format!("{what}: row's gradient"), &ours.2, &gr, tol, 1e-3);
                }
            }
        }
    }
}

#[test]
fn batch_norm_shaped_f32_broadcasts_run_on_the_kernels_with_flex_values() {
    // `x [n, c, h, w] op s [1, c, 1, 1]` in f32, as burn-nn's BatchNorm writes it, under
    // each mixed policy: the values of Flex's op bit for bit, and the gradients of both.
    // Other shapes of `s` sum its gradient back in other ways: along the last dimension
    // (a bias's), kept dimensions apart (handed to Flex's sums), everything.
    let dims = [3, 4, 5, 6];
    let n: usize = dims.iter().product();
    let x: Vec<f32> = Lcg::new(21).vec(n, 3.0);
    let w = Lcg::new(23).vec(n, 1.0);
    let device = Default::default();
    for sdims in [[1, 4, 1, 1], [1, 1, 1, 6], [3, 1, 5, 1], [1, 1, 1, 1]] {
        let m: usize = sdims.iter().product();
        let s: Vec<f32> = Lcg::new(22).vec(m, 1.0).iter().map(|v| v + 2.0).collect();
        for policy in MIXED {
            let parsed: Policy = policy.parse().unwrap();
            for op in 0..4 {
                let what = format!("op {op}, s {sdims:?} ({policy})");
                let (ours, profile) = cost::profile(|| {
                    with_policy(parsed, || {
                        let xt = tensor::<Ad, 4>(&x, dims, FloatDType::F32).require_grad();
                        let st = tensor::<Ad, 4>(&s, sdims, FloatDType::F32).require_grad();
                        let out = arithmetic(op, xt.clone(), st.clone());
                        let wt =
                            Tensor::<Ad, 4>::from_data(TensorData::new(w.clone(), dims), &device);
                        let grads = (out.clone() * wt).sum().backward();
                        let (gx, gs) = (xt.grad(&grads).unwrap(), st.grad(&grads).unwrap());
                        assert_eq!(out.dtype(), DType::F32, "{what}: stays f32");
                        assert_eq!(gs.dims(), sdims, "{what}: s's gradient shape");
                        (values(out), values(gx), values(gs))
                    })
                });
                assert!(
                    profile.entries().any(|e| e.op == "arithmetic (backward)"),
                    "{what}: burn-amp's kernels ran it: {profile}"
                );
                let xt = tensor::<Bare, 4>(&x, dims, FloatDType::F32).require_grad();
                let st = tensor::<Bare, 4>(&s, sdims, FloatDType::F32).require_grad();
                let out = arithmetic(op, xt.clone(), st.clone());
                let wt = Tensor::<Bare, 4>::from_data(TensorData::new(w.clone(), dims), &device);
                let grads = (out.clone() * wt).sum().backward();
                assert_eq!(
                    common_bits(ours.0),
                    common_bits(values(out)),
                    "{what}: Flex's bits"
                );
                assert_close(
                    &format!("{what}: x's gradient"),
                    &ours.1,
                    &values(xt.grad(&grads).unwrap()),
                    1e-6,
                    1e-3,
                );
                assert_close(
                    &format!("{what}: the statistic's gradient"),
                    &ours.2,
                    &values(st.grad(&grads).unwrap()),
                    1e-5,
                    1e-3,
                );
            }
        }
    }
}

#[test]
fn a_product_with_a_repeated_operand_gives_both_gradients_in_one_pass_with_the_bits_of_each() {
    // `x * s` and `x / s` with `s [1, c, 1, 1]` (a batch norm's scale and standard
    // deviation): with both operands tracked, both gradients come from one pass over the
    // output's gradient; with one tracked, each from its own pass. The bits must agree, in
    // every dtype and policy, over runs longer than a block and tasks ending inside the
    // channels. Under `float16` and `bfloat16` an f32 tensor made a variable
    // (`require_grad`) takes the variable dtype, so tracking `s` would change its values:
    // those policies run with 16-bit tensors only.
    let dims = [3, 7, 20, 41];
    let n: usize = dims.iter().product();
    let x: Vec<f32> = Lcg::new(31).vec(n, 3.0);
    let s: Vec<f32> = Lcg::new(32).vec(7, 1.0).iter().map(|v| v + 2.0).collect();
    let w = Lcg::new(33).vec(n, 1.0);
    let device = Default::default();
    for &policy in Policy::NAMES {
        let parsed: Policy = policy.parse().unwrap();
        for dtype in [FloatDType::F32, FloatDType::BF16, FloatDType::F16] {
            if dtype == FloatDType::F32 && parsed.variable_dtype() != FloatDType::F32 {
                continue;
            }
            for op in [2, 3] {
                // [x's gradient, s's gradient] with x tracked, s tracked, or both.
                let run = |track: [bool; 2]| {
                    with_policy(parsed, || {
                        let xt = tensor::<Ad, 4>(&x, dims, dtype);
                        let st = tensor::<Ad, 4>(&s, [1, 7, 1, 1], dtype);
                        let xt = if track[0] { xt.require_grad() } else { xt };
                        let st = if track[1] { st.require_grad() } else { st };
                        let out = arithmetic(op, xt.clone(), st.clone());
                        let wt =
                            Tensor::<Ad, 4>::from_data(TensorData::new(w.clone(), dims), &device);
                        let grads = (out.cast(FloatDType::F32) * wt).sum().backward();
                        [xt.grad(&grads), st.grad(&grads)].map(|g| g.map(values))
                    })
                };
                let what = format!("op {op} ({policy}, {dtype:?})");
                let [both_x, both_s] = run([true, true]).map(|g| common_bits(g.unwrap()));
                let alone_x = common_bits(run([true, false])[0].clone().unwrap());
                let alone_s = common_bits(run([false, true])[1].clone().unwrap());
                assert_eq!(both_x, alone_x, "{what}: x's gradient");
                assert_eq!(both_s, alone_s, "{what}: s's gradient");
            }
        }
    }
}
