//! The kernels through Burn. FP8 tensors: the kernels (wgpu) and the portable path (Flex, NdArray) give
//! the CPU reference's bytes for every recipe, through `MixedPrecision` and `Autodiff` too;
//! (NdArray with `--features ndarray`, which `./scripts/test.sh` turns on); delayed scaling keeps its scale on zero or non-finite amaxes and survives a record; bad
//! input is a typed error; and the round-trip error of each recipe on a heavy-tailed tensor.
//! Blocked accumulation: every backend gives the reference's bits; the block-scaled FP8
//! matmul checks its operands. The CPU kernels on Flex (`kernels/flex.rs`): casts and the
//! fused cast-and-matmul; softmax, layer norm, GELU,
//! arithmetic, reshapes and dropout masks against Flex's own ops (`kernels/nn.rs`);
//! convolutions split across threads keep their results (`kernels/conv.rs`); a batch
//! norm's statistics and 16-bit gradient sums with Flex's bits (`kernels/statistics.rs`), for
//! a tensor read by several of burn-amp's ops too (`kernels/gradient_sums.rs`). The
//! cuBLASLt call plans against Burn's matmul (`kernels/gemm_plans.rs`).

mod common;
#[path = "kernels/conv.rs"]
mod conv;
#[path = "kernels/flex.rs"]
mod flex;
#[path = "kernels/gemm_plans.rs"]
mod gemm_plans;
#[path = "kernels/gradient_sums.rs"]
mod gradient_sums;
#[path = "kernels/nn.rs"]
mod nn;
#[path = "kernels/order.rs"]
mod order;
#[path = "kernels/scales.rs"]
mod scales;
#[path = "kernels/statistics.rs"]
mod statistics;

#[cfg(feature = "ndarray")]
use burn::backend::NdArray;
use burn::backend::{Autodiff, Flex, Wgpu};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::Backend;
use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use burn_amp::MixedPrecision;

/// Burn's `Wgpu` is fused here (the `fusion` feature, on by default); this is the plain one.
type WgpuUnfused =
    burn::backend::wgpu::CubeBackend<burn::backend::wgpu::WgpuRuntime, f32, i32, u32>;
use burn_amp::accum::{self, AccumBackend, AccumConfig, AccumError, Accumulator, Fp8MatmulConfig};
use burn_amp::fp8::{
    AmaxCompute, DelayedScaling, Fp8Backend, Fp8Cast, Fp8Error, Fp8Format, Fp8Recipe, Fp8Tensor,
    Overflow, Rounding, ScaleRule,
};
use burn_amp_kernels::accum::reference as accum_reference;
use burn_amp_kernels::fp8::reference;
use burn_amp_kernels::fp8::scale::amax_bits;

/// Heavy-tailed values: mostly normal, 1% divided by a small uniform (Student-t-like tails).
fn heavy_tailed(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = common::Lcg::new(seed);
    let mut uniform = move || (rng.next_f32() + 1.0) * 0.5 + 1e-7;
    (0..n)
        .map(|_| {
            let (u, v) = (uniform(), uniform());
            let normal = (-2.0 * u.ln()).sqrt() * (std::f32::consts::TAU * v).cos();
            if uniform() < 0.01 {
                normal / (uniform() * 0.05 + 1e-3)
            } else {
                normal
            }
        })
        .collect()
}

fn recipes() -> Vec<(&'static str, Fp8Recipe)> {
    vec![
        ("unscaled", Fp8Recipe::Unscaled),
        ("per-tensor", Fp8Recipe::per_tensor()),
        (
            "per-tensor pow2",
            Fp8Recipe::per_tensor().with_rule(ScaleRule::PowerOfTwo { margin: 0 }),
        ),
        ("1x128", Fp8Recipe::blocks_1x128()),
        ("128x128", Fp8Recipe::blocks_128x128()),
        ("mx", Fp8Recipe::mx()),
    ]
}

/// The reference's bytes for `values` as `[rows, cols]`.
fn reference_bytes(values: &[f32], cols: usize, cast: Fp8Cast, recipe: Fp8Recipe) -> Vec<u8> {
    let layout = recipe.layout(&[values.len() / cols, cols].into()).unwrap();
    reference::quantize_blocks(values, layout, cast, recipe.rule()).0
}

fn bytes_on<B: Fp8Backend>(
    values: &[f32],
    cols: usize,
    cast: Fp8Cast,
    recipe: Fp8Recipe,
) -> Vec<u8> {
    let device = Default::default();
    let x = Tensor::<B, 2>::from_data(
        TensorData::new(values.to_vec(), [values.len() / cols, cols]),
        &device,
    );
    Fp8Tensor::quantize(x, cast, recipe).unwrap().to_bytes()
}

#[test]
fn every_backend_gives_the_reference_bytes_for_every_recipe() {
    let (rows, cols) = (130, 200);
    let values = heavy_tailed(rows * cols, 1);
    let casts = [
        Fp8Cast::new(Fp8Format::E4M3),
        Fp8Cast::new(Fp8Format::E5M2).with_overflow(Overflow::NonSaturating),
        Fp8Cast::new(Fp8Format::E4M3).with_rounding(Rounding::Stochastic { seed: 9 }),
    ];
    for cast in casts {
        for (name, recipe) in recipes() {
            let want = reference_bytes(&values, cols, cast, recipe);
            let what = format!("{name} {cast:?}");
            assert!(
                bytes_on::<Flex>(&values, cols, cast, recipe) == want,
                "Flex: {what}"
            );
            #[cfg(feature = "ndarray")]
            assert!(
                bytes_on::<NdArray>(&values, cols, cast, recipe) == want,
                "NdArray: {what}"
            );
            assert!(
                bytes_on::<Wgpu>(&values, cols, cast, recipe) == want,
                "wgpu: {what}"
            );
            assert!(
                bytes_on::<MixedPrecision<Wgpu>>(&values, cols, cast, recipe) == want,
                "MixedPrecision<Wgpu>: {what}"
            );
            assert!(
                bytes_on::<Autodiff<Wgpu>>(&values, cols, cast, recipe) == want,
                "Autodiff<Wgpu>: {what}"
            );
            assert!(
                bytes_on::<MixedPrecision<Autodiff<Flex>>>(&values, cols, cast, recipe) == want,
                "MixedPrecision<Autodiff<Flex>>: {what}"
            );
        }
    }
}

#[test]
fn dequantization_matches_across_backends_and_dtypes() {
    let (rows, cols) = (64, 96);
    let values = heavy_tailed(rows * cols, 2);
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let back = |recipe: Fp8Recipe| -> [Vec<f32>; 2] {
        let run = |x: Vec<f32>, wgpu: bool| -> Vec<f32> {
            if wgpu {
                let t = Tensor::<Wgpu, 2>::from_data(
                    TensorData::new(x, [rows, cols]),
                    &Default::default(),
                );
                common::values(Fp8Tensor::quantize(t, cast, recipe).unwrap().dequantize())
            } else {
                let t = Tensor::<Flex, 2>::from_data(
                    TensorData::new(x, [rows, cols]),
                    &Default::default(),
                );
                common::values(Fp8Tensor::quantize(t, cast, recipe).unwrap().dequantize())
            }
        };
        [run(values.clone(), false), run(values.clone(), true)]
    };
    for (name, recipe) in recipes() {
        let [flex, wgpu] = back(recipe);
        let same = flex
            .iter()
            .zip(&wgpu)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{name}: Flex and wgpu dequantize differently");
    }
    // f16 out, and f16 in.
    let device = Default::default();
    let x = Tensor::<Wgpu, 2>::from_data(TensorData::new(values.clone(), [rows, cols]), &device)
        .cast(FloatDType::F16);
    let q = Fp8Tensor::quantize(x, cast, Fp8Recipe::blocks_1x128()).unwrap();
    assert_eq!(
        q.dequantize().dtype(),
        DType::F16,
        "dequantizes to the input dtype"
    );
    assert_eq!(q.dequantize_as(FloatDType::F32).dtype(), DType::F32);
}

#[test]
fn mx_scales_are_e8m0_powers_of_two() {
    let values = heavy_tailed(4 * 64, 3);
    let device = Default::default();
    let x = Tensor::<Wgpu, 2>::from_data(TensorData::new(values.clone(), [4, 64]), &device);
    let q = Fp8Tensor::quantize(x, Fp8Cast::new(Fp8Format::E4M3), Fp8Recipe::mx()).unwrap();
    let e8m0 = q.e8m0_scales();
    assert_eq!(e8m0.len(), 8, "4 rows x 2 blocks of 32");
    for (b, code) in e8m0.iter().enumerate() {
        let block = &values[b * 32..(b + 1) * 32];
        let amax = f32::from_bits(amax_bits(block));
        let shared = amax.log2().floor() as i32 - 8; // emax(E4M3) = 8
        assert_eq!(i32::from(*code) - 127, shared, "block {b}: amax {amax}");
    }
    assert_eq!(q.size_in_bytes(), 256 + 4 * 8);
}

#[test]
fn delayed_scaling_follows_the_history_and_keeps_its_scale_on_bad_amaxes() {
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let device = Default::default();
    let tensor = |values: &[f32]| {
        Tensor::<Flex, 1>::from_data(TensorData::new(values.to_vec(), [values.len()]), &device)
    };
    let mut max = DelayedScaling::new(4, 0, AmaxCompute::Max).unwrap();
    let mut recent = DelayedScaling::new(4, 0, AmaxCompute::MostRecent).unwrap();
    assert_eq!(max.scale(), 1.0, "no history: scale 1");
    for (values, want_max, want_recent) in [
        (vec![7.0, -1.0], 64.0, 64.0),      // 448/7 -> 64
        (vec![0.5, 1.0], 64.0, 256.0),      // max keeps 7; recent follows 1.0 -> 256
        (vec![0.0, 0.0], 64.0, 256.0),      // zero amax: recent keeps its scale
        (vec![f32::INFINITY], 64.0, 256.0), // non-finite amax: both keep theirs
        (vec![1.0], 256.0, 256.0),          // 7.0 has left the history of 4
    ] {
        max.quantize(tensor(&values), cast).unwrap();
        recent.quantize(tensor(&values), cast).unwrap();
        assert_eq!(max.scale(), want_max, "max after {values:?}");
        assert_eq!(recent.scale(), want_recent, "most recent after {values:?}");
        assert!(max.scale().is_finite() && max.scale() > 0.0);
    }
    // The scale used is the one from before the call.
    let q = max.quantize(tensor(&[3.0]), cast).unwrap();
    assert_eq!(common::values(q.scale_inv()), vec![1.0 / 256.0]);
    // A checkpoint restores history and scale exactly.
    let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
    let bytes = Recorder::<Flex>::record(&recorder, max.clone(), ()).unwrap();
    let restored: DelayedScaling = Recorder::<Flex>::load(&recorder, bytes, &device).unwrap();
    assert_eq!(restored, max);
    assert!(DelayedScaling::new(0, 0, AmaxCompute::Max).is_err());
}

#[test]
fn bad_input_is_a_typed_error() {
    let device = Default::default();
    let x = Tensor::<Flex, 2>::ones([2, 4], &device).cast(FloatDType::F64);
    let err =
        Fp8Tensor::quantize(x, Fp8Cast::new(Fp8Format::E4M3), Fp8Recipe::per_tensor()).unwrap_err();
    assert!(
        matches!(err, Fp8Error::UnsupportedDType(DType::F64)),
        "{err}"
    );
    let x = Tensor::<Flex, 2>::ones([2, 4], &device);
    let empty = Fp8Recipe::Blocks {
        rows: 0,
        cols: 32,
        rule: ScaleRule::E8M0,
    };
    let err = Fp8Tensor::quantize(x.clone(), Fp8Cast::new(Fp8Format::E4M3), empty).unwrap_err();
    assert!(matches!(err, Fp8Error::InvalidRecipe(_)), "{err}");
    let scales = Tensor::<Flex, 1>::ones([3], &device);
    let err = Fp8Tensor::quantize_with_scales(
        x,
        Fp8Cast::new(Fp8Format::E4M3),
        Fp8Recipe::per_tensor(),
        scales,
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("3 scales given for 1 blocks"),
        "{err}"
    );
    let err = Fp8Format::E4M3.with_bias(64).unwrap_err();
    assert!(err.to_string().contains("0..=63"), "{err}");
}

/// The relative RMS round-trip error of each recipe on a heavy-tailed tensor, printed
/// (`cargo test --test kernels round_trip -- --nocapture`, as the guide's FP8 chapter says).
#[test]
fn round_trip_error_per_recipe_on_a_heavy_tailed_tensor() {
    let (rows, cols) = (512, 512);
    let values = heavy_tailed(rows * cols, 4);
    let device = Default::default();
    let rms =
        |v: &[f32]| (v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
    let reference_rms = rms(&values);
    let mut table = Vec::new();
    for format in [Fp8Format::E4M3, Fp8Format::E5M2] {
        for (name, recipe) in recipes() {
            let x = Tensor::<Wgpu, 2>::from_data(
                TensorData::new(values.clone(), [rows, cols]),
                &device,
            );
            let q = Fp8Tensor::quantize(x, Fp8Cast::new(format), recipe).unwrap();
            let back = common::values(q.dequantize());
            let err: Vec<f32> = back.iter().zip(&values).map(|(b, v)| b - v).collect();
            let zeros = back
                .iter()
                .zip(&values)
                .filter(|(b, v)| **b == 0.0 && **v != 0.0)
                .count();
            let rel = rms(&err) / reference_rms;
            eprintln!(
                "| {format} | {name} | {:.2e} | {:.3}% | {:.3} |",
                rel,
                100.0 * zeros as f64 / values.len() as f64,
                q.size_in_bytes() as f64 / values.len() as f64
            );
            table.push((format, name, rel, zeros));
        }
    }
    let row = |f: Fp8Format, n: &str| {
        *table
            .iter()
            .find(|(ff, nn, ..)| *ff == f && *nn == n)
            .unwrap()
    };
    let error = |f, n| row(f, n).2;
    let flushed = |f, n| row(f, n).3;
    for f in [Fp8Format::E4M3, Fp8Format::E5M2] {
        // Scaling helps; 1x128 blocks help most on heavy tails.
        assert!(error(f, "per-tensor") <= error(f, "unscaled"), "{f}");
        assert!(error(f, "1x128") < error(f, "per-tensor"), "{f}");
        assert!(error(f, "1x128") < error(f, "128x128"), "{f}");
        assert!(error(f, "per-tensor") < 0.1, "{f}");
    }
    // MX's floor rule maps each block's amax into [256, 512): values above 448 saturate, so
    // its RMS error (dominated by the outliers) is above per-tensor's, but its 32-value
    // blocks flush the fewest small values to zero.
    let e4 = Fp8Format::E4M3;
    assert!(error(e4, "mx") > error(e4, "per-tensor"));
    for other in ["per-tensor", "1x128", "128x128"] {
        assert!(flushed(e4, "mx") <= flushed(e4, other), "mx vs {other}");
    }
    // E4M3's extra mantissa bit beats E5M2 wherever the range fits.
    assert!(error(Fp8Format::E4M3, "1x128") < error(Fp8Format::E5M2, "1x128"));
}

#[test]
fn quantize_leaves_the_input_and_its_gradient_alone() {
    type A = Autodiff<Flex>;
    let device = Default::default();
    let x = Tensor::<A, 1>::from_floats([1.0, 2.0, 3.0], &device).require_grad();
    let q = Fp8Tensor::quantize(
        x.clone(),
        Fp8Cast::new(Fp8Format::E4M3),
        Fp8Recipe::per_tensor(),
    )
    .unwrap();
    let y = q.dequantize();
    assert!(!y.is_require_grad(), "the dequantized tensor is a new leaf");
    let grads = (x.clone() * 2.0).sum().backward();
    assert_eq!(common::values(x.grad(&grads).unwrap()), vec![2.0, 2.0, 2.0]);
    let _ = <A as Backend>::name(&device);
}

fn accum_configs() -> Vec<AccumConfig> {
    vec![
        AccumConfig::naive(Accumulator::F16),
        AccumConfig::chunked(Accumulator::F16, 64),
        AccumConfig::chunked(Accumulator::BF16, 32).with_stochastic(3),
        AccumConfig::chunked(Accumulator::E8M13, 128).with_combine(Accumulator::E8M13),
    ]
}

fn accum_bits<B: AccumBackend>(
    x: &[f32],
    y: &[f32],
    rows: usize,
    cols: usize,
    config: AccumConfig,
) -> [Vec<u32>; 3] {
    let device = Default::default();
    let t = |v: &[f32], shape: [usize; 2]| {
        Tensor::<B, 2>::from_data(TensorData::new(v.to_vec(), shape), &device)
    };
    let bits = |t: Tensor<B, 1>| {
        common::values(t)
            .iter()
            .map(|v| v.to_bits())
            .collect::<Vec<_>>()
    };
    let sums = accum::blocked_sum(t(x, [rows, cols]), config).unwrap();
    let dot = accum::blocked_dot(
        t(&x[..cols], [1, cols]).reshape([cols]),
        t(&y[..cols], [1, cols]).reshape([cols]),
        config,
    )
    .unwrap();
    let mm = accum::blocked_matmul(t(x, [rows, cols]), t(y, [cols, rows]), config).unwrap();
    [bits(sums), bits(dot), bits(mm.reshape([rows * rows]))]
}

#[test]
fn blocked_accumulation_gives_the_reference_bits_on_every_backend() {
    let (rows, cols) = (6, 700);
    let x = heavy_tailed(rows * cols, 21);
    let y = heavy_tailed(rows * cols, 22);
    for config in accum_configs() {
        let sums = accum_reference::row_sums(&x, cols, config);
        let dot = accum_reference::dot(&x[..cols], &y[..cols], config);
        let mm = accum_reference::matmul(&x, &y, rows, cols, rows, config);
        let want = [sums, vec![dot], mm].map(|v| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>());
        assert!(
            accum_bits::<Flex>(&x, &y, rows, cols, config) == want,
            "Flex {config:?}"
        );
        #[cfg(feature = "ndarray")]
        assert!(
            accum_bits::<NdArray>(&x, &y, rows, cols, config) == want,
            "NdArray {config:?}"
        );
        assert!(
            accum_bits::<Wgpu>(&x, &y, rows, cols, config) == want,
            "wgpu (fused) {config:?}"
        );
        assert!(
            accum_bits::<WgpuUnfused>(&x, &y, rows, cols, config) == want,
            "wgpu {config:?}"
        );
        assert!(
            accum_bits::<MixedPrecision<Autodiff<Wgpu>>>(&x, &y, rows, cols, config) == want,
            "MixedPrecision<Autodiff<Wgpu>> {config:?}"
        );
    }
}

fn fp8_operands<B: AccumBackend + Fp8Backend>(
    m: usize,
    k: usize,
    n: usize,
) -> (Fp8Tensor<B, 2>, Fp8Tensor<B, 2>) {
    let device = Default::default();
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let a = Tensor::<B, 2>::from_data(TensorData::new(heavy_tailed(m * k, 31), [m, k]), &device);
    let b = Tensor::<B, 2>::from_data(TensorData::new(heavy_tailed(k * n, 32), [k, n]), &device);
    (
        Fp8Tensor::quantize(a, cast, Fp8Recipe::blocks_1x128()).unwrap(),
        Fp8Tensor::quantize(b, cast, Fp8Recipe::blocks_128x128()).unwrap(),
    )
}

#[test]
fn fp8_matmul_agrees_across_backends_and_checks_its_operands() {
    let (m, k, n) = (8, 384, 130);
    let config = Fp8MatmulConfig {
        block: 128,
        window: 128,
        accumulator: Accumulator::E8M13,
        promote: true,
    };
    let run = |a: Vec<f32>| a.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let (a, b) = fp8_operands::<Flex>(m, k, n);
    let flex = run(common::values(
        accum::fp8_matmul(&a, &b, config, FloatDType::F32).unwrap(),
    ));
    let (aw, bw) = fp8_operands::<Wgpu>(m, k, n);
    let wgpu = run(common::values(
        accum::fp8_matmul(&aw, &bw, config, FloatDType::F32).unwrap(),
    ));
    assert!(flex == wgpu, "Flex and wgpu differ");
    let want = accum_reference::fp8_matmul(
        &a.to_bytes(),
        &common::values(a.scale_inv()),
        &b.to_bytes(),
        &common::values(b.scale_inv()),
        (m, k, n),
        Fp8Format::E4M3,
        config,
    );
    assert!(flex == run(want), "Flex and the reference differ");
    let bf16 = accum::fp8_matmul(&aw, &bw, config, FloatDType::BF16).unwrap();
    assert_eq!(bf16.dtype(), DType::BF16);

    // Operands that do not fit.
    let err = accum::fp8_matmul(&b, &b, config, FloatDType::F32).unwrap_err();
    assert!(
        matches!(err, AccumError::Fp8(_) | AccumError::Shape(_)),
        "{err}"
    );
    let bad_window = Fp8MatmulConfig {
        window: 100,
        ..config
    };
    let err = accum::fp8_matmul(&a, &b, bad_window, FloatDType::F32).unwrap_err();
    assert!(err.to_string().contains("must divide"), "{err}");
    let (short, _) = fp8_operands::<Flex>(m, 256, n);
    let err = accum::fp8_matmul(&short, &b, config, FloatDType::F32).unwrap_err();
    assert!(matches!(err, AccumError::Shape(_)), "{err}");
    let device = Default::default();
    let x = Tensor::<Flex, 1>::ones([3], &device);
    let y = Tensor::<Flex, 1>::ones([4], &device);
    assert!(matches!(
        accum::blocked_dot(x, y, AccumConfig::naive(Accumulator::F16)),
        Err(AccumError::Shape(_))
    ));
}
