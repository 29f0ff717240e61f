//! `LossScaleOptimizer`: skipped steps leave parameters and moments untouched, the scale
//! moves by the rules and stays within its clamps, records restore it exactly, scaling
//! rescues gradients that underflow f16, and both the custom loop and Burn's Learner train
//! with it on Flex and wgpu.
//!
//! Loss-scale bindings are process-wide (a default automatic optimizer scales the backward
//! passes of every device without one of its own), so every test here holds `SERIAL`.

#[path = "loss_scaling/binding.rs"]
mod binding;
mod common;
#[path = "loss_scaling/fp8_state.rs"]
mod fp8_state;
#[path = "loss_scaling/fused.rs"]
mod fused;
#[path = "loss_scaling/matrix.rs"]
mod matrix;
#[path = "loss_scaling/multi_device.rs"]
mod multi_device;
#[path = "loss_scaling/reads.rs"]
mod reads;
#[path = "loss_scaling/recorders.rs"]
mod recorders;
#[path = "loss_scaling/records.rs"]
mod records;
#[path = "loss_scaling/replicas.rs"]
#[cfg(feature = "mpi")]
mod replicas;
#[path = "loss_scaling/resume.rs"]
mod resume;

use std::sync::{Mutex, MutexGuard};

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::module::{AutodiffModule, Module};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer, SgdConfig};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Int, Tensor, TensorData};
use burn::train::metric::{AccuracyMetric, LossMetric};
use burn::train::{
    ClassificationOutput, InferenceStep, Learner, SupervisedTraining, TrainOutput, TrainStep,
};
use burn_amp::{
    LossScaleConfig, LossScaleMetric, LossScaleOptimizer, MixedPrecision, Policy,
    SkippedStepsMetric, with_policy,
};
use common::{Mlp, bytes, det, teacher_batch, values};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

type Fx = MixedPrecision<Autodiff<Flex>>;
type FxDevice = burn::backend::flex::FlexDevice;

fn record_bytes<R: burn::record::Record<Fx>>(record: R) -> Vec<u8> {
    BinBytesRecorder::<FullPrecisionSettings>::default()
        .record(record, ())
        .unwrap()
}

/// An optimizer record (one entry per parameter, in a `HashMap`), as bytes per parameter
/// in id order: serializing the map itself depends on its iteration order.
fn per_param_bytes<R: burn::record::Record<Fx>>(
    record: impl IntoIterator<Item = (burn::module::ParamId, R)>,
) -> Vec<(String, Vec<u8>)> {
    let mut entries: Vec<_> = record
        .into_iter()
        .map(|(id, r)| (id.to_string(), record_bytes(r)))
        .collect();
    entries.sort();
    assert!(!entries.is_empty(), "the optimizer holds state");
    entries
}

/// One real backward pass of the MLP (marks the scale as used), then gradients from it.
fn grads_of<B: AutodiffBackend>(model: &Mlp<B>, device: &B::Device) -> GradientsParams {
    let (x, y) = teacher_batch::<B>(0, 16, 8, 4, device);
    let loss = CrossEntropyLossConfig::new()
        .init(device)
        .forward(model.forward(x), y);
    GradientsParams::from_grads(loss.backward(), model)
}

/// Replaces one gradient with a copy holding `poison` in one element.
fn poison(mut grads: GradientsParams, model: &Mlp<Fx>, poison: f32) -> GradientsParams {
    type Inner = <Fx as AutodiffBackend>::InnerBackend;
    let id = model.fc2.weight.id;
    let grad = grads.remove::<Inner, 2>(id).unwrap();
    let mut data = grad.to_data().convert::<f32>().to_vec::<f32>().unwrap();
    data[3] = poison;
    let device = grad.device();
    grads.register(
        id,
        Tensor::<Inner, 2>::from_data(TensorData::new(data, grad.dims()), &device),
    );
    grads
}

#[test]
fn inf_and_nan_steps_change_no_parameter_or_moment_and_halve_the_scale() {
    let _serial = serial();
    let device = Default::default();
    with_policy(Policy::mixed_float16(), || {
        let mut model = Mlp::<Fx>::new(8, 16, 4, &device);
        let mut optim = LossScaleOptimizer::new(AdamConfig::new().init::<Fx, Mlp<Fx>>());
        // Two clean steps so Adam has moments to protect.
        for _ in 0..2 {
            let grads = grads_of(&model, &device);
            model = optim.step(1e-2, model, grads);
        }
        assert_eq!((optim.total_steps(), optim.skipped_steps()), (2, 0));

        for (i, bad) in [f32::INFINITY, f32::NAN, f32::NEG_INFINITY]
            .into_iter()
            .enumerate()
        {
            let params_before = record_bytes(model.clone().into_record());
            let moments_before = per_param_bytes(optim.to_record().inner);
            let scale_before = optim.loss_scale();
            let grads = poison(grads_of(&model, &device), &model, bad);
            model = optim.step(1e-2, model, grads);
            let (params_after, moments_after) = (
                record_bytes(model.clone().into_record()),
                per_param_bytes(optim.to_record().inner),
            );
            assert!(params_after == params_before, "{bad}: parameters changed");
            assert!(moments_after == moments_before, "{bad}: moments changed");
            assert_eq!(
                optim.loss_scale(),
                scale_before / 2.0,
                "{bad}: scale halves"
            );
            assert_eq!(optim.skipped_steps(), i as u64 + 1);
        }
        // A clean step afterwards updates again.
        let before = bytes(model.fc1.weight.val());
        let grads = grads_of(&model, &device);
        model = optim.step(1e-2, model, grads);
        assert_ne!(bytes(model.fc1.weight.val()), before);
        assert_eq!((optim.total_steps(), optim.skipped_steps()), (6, 3));
    });
}

/// A real overflow: a scale so large that the f16 backward pass overflows. The optimizer
/// skips and halves until the scaled gradients fit, then trains.
fn real_overflow<B: AutodiffBackend>(device: &B::Device) {
    type M<B> = MixedPrecision<B>;
    with_policy(Policy::mixed_float16(), || {
        let mut model = Mlp::<M<B>>::new(8, 16, 4, device);
        let config = LossScaleConfig::new().with_initial_scale(2f32.powi(24));
        let mut optim = config
            .init(SgdConfig::new().init::<M<B>, Mlp<M<B>>>())
            .unwrap();
        for _ in 0..20 {
            let (x, y) = teacher_batch::<M<B>>(0, 16, 8, 4, device);
            let loss = CrossEntropyLossConfig::new()
                .init(device)
                .forward(model.forward(x), y);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(0.1, model, grads);
        }
        let skipped = optim.skipped_steps();
        assert!(
            skipped >= 1,
            "2^24 times these gradients overflows f16 (max 65504)"
        );
        assert!(skipped < 20, "the scale backs off until it fits");
        assert_eq!(
            optim.loss_scale(),
            2f32.powi(24) / 2f32.powi(skipped as i32)
        );
        assert!(values(model.fc1.weight.val()).iter().all(|v| v.is_finite()));
    });
}

#[test]
fn a_real_f16_overflow_is_skipped_and_the_scale_backs_off_until_it_fits() {
    let _serial = serial();
    real_overflow::<Autodiff<Flex>>(&Default::default());
    real_overflow::<Autodiff<Wgpu>>(&Default::default());
}

/// A tiny model for driving the optimizer with hand-made gradients.
fn tiny() -> (Mlp<Fx>, FxDevice) {
    let device = Default::default();
    (Mlp::<Fx>::new(2, 2, 2, &device), device)
}

fn handmade(model: &Mlp<Fx>, device: &FxDevice, value: f32) -> GradientsParams {
    type Inner = <Fx as AutodiffBackend>::InnerBackend;
    let mut grads = GradientsParams::new();
    let t = Tensor::<Inner, 2>::full([2, 2], value, device);
    grads.register(model.fc1.weight.id, t);
    grads
}

#[test]
fn ten_thousand_alternating_steps_keep_the_scale_finite_and_clamped() {
    let _serial = serial();
    let (mut model, device) = tiny();
    let config = LossScaleConfig::new()
        .with_growth_interval(1)
        .with_min_scale(4.0)
        .with_max_scale(2f32.powi(20));
    let (min, max) = (config.min_scale, config.max_scale);
    let mut optim = config
        .init_manual(SgdConfig::new().init::<Fx, Mlp<Fx>>())
        .unwrap();
    let pattern = |i: usize| match i {
        // Alternating, then long runs that press against both clamps.
        0..4000 => i.is_multiple_of(2),
        4000..6000 => false,
        6000..8000 => true,
        _ => !i.is_multiple_of(3),
    };
    for i in 0..10_000 {
        let value = if pattern(i) { 1e-3 } else { f32::NAN };
        let grads = handmade(&model, &device, value);
        model = optim.step(1e-3, model, grads);
        let scale = optim.loss_scale();
        assert!(
            scale.is_finite() && (min..=max).contains(&scale),
            "step {i}: scale {scale}"
        );
    }
    assert_eq!(optim.total_steps(), 10_000);
    assert_eq!(
        optim.skipped_steps(),
        (0..10_000).filter(|&i| !pattern(i)).count() as u64
    );
    assert!(values(model.fc1.weight.val()).iter().all(|v| v.is_finite()));
}

#[test]
fn growth_happens_exactly_after_the_configured_count() {
    let _serial = serial();
    let (mut model, device) = tiny();
    let config = LossScaleConfig::new()
        .with_growth_interval(5)
        .with_initial_scale(8.0);
    let mut optim = config
        .init_manual(SgdConfig::new().init::<Fx, Mlp<Fx>>())
        .unwrap();
    let mut scales = Vec::new();
    for i in 0..13 {
        let value = if i == 7 { f32::INFINITY } else { 1e-3 };
        model = optim.step(1e-3, model.clone(), handmade(&model, &device, value));
        scales.push(optim.loss_scale());
    }
    // Steps 0-4 finite: grows at the 5th. Step 7 overflows (halve, reset count); 8-12 finite:
    // grows at the 5th after the overflow.
    assert_eq!(
        scales,
        [8., 8., 8., 8., 16., 16., 16., 8., 8., 8., 8., 8., 16.]
    );
}

#[test]
fn fixed_scale_stays_and_still_skips() {
    let _serial = serial();
    let (mut model, device) = tiny();
    let mut optim = LossScaleConfig::fixed(1024.0)
        .init_manual(SgdConfig::new().init::<Fx, Mlp<Fx>>())
        .unwrap();
    for i in 0..10 {
        let value = if i % 3 == 0 { f32::NAN } else { 1e-3 };
        model = optim.step(1e-3, model.clone(), handmade(&model, &device, value));
        assert_eq!(optim.loss_scale(), 1024.0);
    }
    assert_eq!(optim.skipped_steps(), 4);
}

#[test]
fn invalid_settings_are_typed_errors() {
    let _serial = serial();
    let bad = [
        LossScaleConfig::new().with_initial_scale(0.0),
        LossScaleConfig::new().with_initial_scale(f32::INFINITY),
        LossScaleConfig::new().with_growth_factor(1.0),
        LossScaleConfig::new().with_backoff_factor(0.0),
        LossScaleConfig::new().with_growth_interval(0),
        LossScaleConfig::new().with_min_scale(-1.0),
        LossScaleConfig::new().with_max_scale(0.5),
    ];
    for config in bad {
        let err = config
            .clone()
            .init(SgdConfig::new().init::<Fx, Mlp<Fx>>())
            .err();
        let err = err.unwrap_or_else(|| panic!("{config:?} accepted"));
        assert!(
            err.to_string().contains("invalid loss-scale setting"),
            "{err}"
        );
    }
}

/// Trains `steps` steps with automatic scaling; returns the model and optimizer.
fn train(
    model: Mlp<Fx>,
    mut optim: LossScaleOptimizer<impl Optimizer<Mlp<Fx>, Fx>>,
    steps: std::ops::Range<usize>,
    device: &FxDevice,
) -> (Mlp<Fx>, LossScaleOptimizer<impl Optimizer<Mlp<Fx>, Fx>>) {
    let mut model = model;
    for step in steps {
        let (x, y) = teacher_batch::<Fx>(step % 5, 16, 8, 4, device);
        let loss = CrossEntropyLossConfig::new()
            .init(device)
            .forward(model.forward(x), y);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-2, model, grads);
    }
    (model, optim)
}

#[test]
fn a_record_round_trip_restores_scale_and_counters_and_resumes_exactly() {
    let _serial = serial();
    let device = Default::default();
    with_policy(Policy::mixed_float16(), || {
        let config = LossScaleConfig::new()
            .with_growth_interval(3)
            .with_initial_scale(64.0);
        let optim = config
            .clone()
            .init(AdamConfig::new().init::<Fx, Mlp<Fx>>())
            .unwrap();
        let (model, mut optim) = train(Mlp::new(8, 16, 4, &device), optim, 0..7, &device);
        // One overflowing step so every counter is non-zero.
        let grads = poison(grads_of(&model, &device), &model, f32::NAN);
        let model = optim.step(1e-2, model, grads);
        let (scale, skipped, total) = (
            optim.loss_scale(),
            optim.skipped_steps(),
            optim.total_steps(),
        );
        assert_eq!((skipped, total), (1, 8));

        let recorder = BinBytesRecorder::<FullPrecisionSettings>::default();
        let saved = recorder.record(optim.to_record(), ()).unwrap();
        let saved_model = model.clone().into_record();
        let (model_a, optim_a) = train(model, optim, 8..14, &device);

        let fresh = config
            .init(AdamConfig::new().init::<Fx, Mlp<Fx>>())
            .unwrap();
        let resumed = fresh.load_record(recorder.load(saved, &device).unwrap());
        assert_eq!(resumed.loss_scale(), scale);
        assert_eq!(
            (resumed.skipped_steps(), resumed.total_steps()),
            (skipped, total)
        );
        let model = Mlp::new(8, 16, 4, &device).load_record(saved_model);
        let (model_b, optim_b) = train(model, resumed, 8..14, &device);

        assert_eq!(optim_a.loss_scale(), optim_b.loss_scale());
        assert_eq!(optim_a.total_steps(), optim_b.total_steps());
        assert!(bytes(model_a.fc1.weight.val()) == bytes(model_b.fc1.weight.val()));
        assert!(bytes(model_a.out.weight.val()) == bytes(model_b.out.weight.val()));
    });
}

/// Gradients below f16's smallest subnormal (2^-24, about 6e-8) flush to zero in an f16
/// backward pass; with the loss scaled they survive and come out right.
#[test]
fn gradients_that_underflow_in_f16_survive_with_scaling() {
    let _serial = serial();
    let device = Default::default();
    let tiny_grad = |scaled: bool| -> Vec<f32> {
        let layer = common::det_linear::<Fx>(4, 3, 5, &device);
        let _optim =
            scaled.then(|| LossScaleOptimizer::new(SgdConfig::new().init::<Fx, Mlp<Fx>>()));
        let x = det::<Fx, 2>([2, 4], 6, 1.0, &device);
        // d loss / d y = 1e-8 everywhere: representable in f32, zero in f16.
        let weights = Tensor::<Fx, 2>::full([2, 3], 1e-8, &device);
        let loss = (layer.forward(x) * weights).sum();
        let grads = loss.backward();
        values(layer.weight.grad(&grads).unwrap())
    };
    let reference = with_policy(Policy::float32(), || tiny_grad(false));
    let unscaled = with_policy(Policy::mixed_float16(), || tiny_grad(false));
    let scaled = with_policy(Policy::mixed_float16(), || tiny_grad(true));
    assert!(reference.iter().all(|g| g.abs() > 1e-9), "{reference:?}");
    assert!(
        unscaled.iter().all(|&g| g == 0.0),
        "f16 flushes them: {unscaled:?}"
    );
    for (s, r) in scaled.iter().zip(&reference) {
        // 2^15 * 1e-8 = 3.3e-4 is a normal f16 number: about 3 significant digits survive.
        assert!((s - r).abs() <= 2e-3 * r.abs(), "scaled {s} vs float32 {r}");
    }
}

#[test]
fn bf16_needs_no_scaling_and_the_optimizer_passes_through() {
    let _serial = serial();
    let device = Default::default();
    with_policy(Policy::mixed_bfloat16(), || {
        let model = Mlp::<Fx>::new(8, 16, 4, &device);
        let loss = || {
            let (x, y) = teacher_batch::<Fx>(0, 16, 8, 4, &device);
            CrossEntropyLossConfig::new()
                .init(&device)
                .forward(model.forward(x), y)
        };
        // The plain optimizer's step, before any LossScaleOptimizer exists.
        let plain = SgdConfig::new().init::<Fx, Mlp<Fx>>();
        let grads = GradientsParams::from_grads(loss().backward(), &model);
        let reference = plain.clone().step(0.1, model.clone(), grads);

        let mut optim = LossScaleOptimizer::new(SgdConfig::new().init::<Fx, Mlp<Fx>>());
        let grads = loss().backward();
        assert_eq!(grads.scale(), 1.0, "a bf16 backward pass is not scaled");
        let grads = GradientsParams::from_grads(grads, &model);
        let stepped = optim.step(0.1, model.clone(), grads);
        assert!(bytes(stepped.fc1.weight.val()) == bytes(reference.fc1.weight.val()));
        assert_eq!(
            (
                optim.total_steps(),
                optim.skipped_steps(),
                optim.loss_scale()
            ),
            (1, 0, 32768.0)
        );
    });
}

/// The Keras custom loop, manual mode: scale_loss, backward, unscale_grads, step.
fn custom_loop<B: AutodiffBackend>(device: &B::Device, manual: bool) {
    type M<B> = MixedPrecision<B>;
    with_policy(Policy::mixed_float16(), || {
        let mut model = Mlp::<M<B>>::new(16, 32, 4, device);
        let adam = AdamConfig::new().init::<M<B>, Mlp<M<B>>>();
        let mut optim = if manual {
            LossScaleConfig::new().init_manual(adam).unwrap()
        } else {
            LossScaleOptimizer::new(adam)
        };
        let loss_fn = CrossEntropyLossConfig::new().init(device);
        let mut losses = Vec::new();
        for step in 0..40 {
            let (x, y) = teacher_batch::<M<B>>(step % 4, 32, 16, 4, device);
            let loss = loss_fn.forward(model.forward(x), y);
            losses.push(values(loss.clone())[0]);
            let scaled = optim.scale_loss(loss);
            let grads = scaled.backward();
            let grads = GradientsParams::from_grads(grads, &model);
            let grads = optim.unscale_grads(grads, &model);
            model = optim.step(3e-3, model, grads);
        }
        assert_eq!(model.fc1.weight.val().dtype(), FloatDType::F32.into());
        assert_eq!((optim.total_steps(), optim.skipped_steps()), (40, 0));
        let (first, last) = (
            losses[..4].iter().sum::<f32>(),
            losses[36..].iter().sum::<f32>(),
        );
        assert!(
            last < 0.7 * first,
            "manual={manual}: loss {first} -> {last}"
        );
    });
}

#[test]
fn custom_loop_trains_on_flex_and_wgpu_in_both_modes() {
    let _serial = serial();
    custom_loop::<Autodiff<Flex>>(&Default::default(), true);
    custom_loop::<Autodiff<Flex>>(&Default::default(), false);
    custom_loop::<Autodiff<Wgpu>>(&Default::default(), true);
    custom_loop::<Autodiff<Wgpu>>(&Default::default(), false);
}

// ---- Burn's Learner: an ordinary TrainStep that calls `loss.backward()` ----

#[derive(Clone, Debug)]
struct Item {
    x: Vec<f32>,
    y: i64,
}

#[derive(Clone, Debug)]
struct Batch<B: Backend> {
    x: Tensor<B, 2>,
    y: Tensor<B, 1, Int>,
}

#[derive(Clone, Default)]
struct ItemBatcher;

impl<B: Backend> Batcher<B, Item, Batch<B>> for ItemBatcher {
    fn batch(&self, items: Vec<Item>, device: &B::Device) -> Batch<B> {
        let n = items.len();
        let x: Vec<f32> = items.iter().flat_map(|i| i.x.clone()).collect();
        let y: Vec<i64> = items.iter().map(|i| i.y).collect();
        Batch {
            x: Tensor::from_data(TensorData::new(x, [n, 16]), device),
            y: Tensor::from_data(TensorData::new(y, [n]), device),
        }
    }
}

#[derive(Module, Debug)]
struct Classifier<B: Backend> {
    mlp: Mlp<B>,
}

impl<B: Backend> Classifier<B> {
    fn classify(&self, batch: Batch<B>) -> ClassificationOutput<B> {
        let output = self.mlp.forward(batch.x);
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(output.clone(), batch.y.clone());
        ClassificationOutput::new(loss, output, batch.y)
    }
}

impl<B: AutodiffBackend> TrainStep for Classifier<B> {
    type Input = Batch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: Batch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let item = self.classify(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl<B: Backend> InferenceStep for Classifier<B> {
    type Input = Batch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: Batch<B>) -> ClassificationOutput<B> {
        self.classify(batch)
    }
}

fn items(range: std::ops::Range<usize>) -> Vec<Item> {
    range
        .flat_map(|b| {
            let device = Default::default();
            let (x, y) = teacher_batch::<Flex>(b, 32, 16, 4, &device);
            let x = values(x);
            let y = y.into_data().convert::<i64>().to_vec::<i64>().unwrap();
            (0..32)
                .map(move |i| Item {
                    x: x[i * 16..(i + 1) * 16].to_vec(),
                    y: y[i],
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Burn's Learner trains an unchanged model whose only changes are the backend type and
/// the wrapped optimizer; the loss scale and skipped steps are among its metrics.
fn learner<B: AutodiffBackend>(device: B::Device, name: &str) {
    type M<B> = MixedPrecision<B>;
    MixedPrecision::<B>::set_policy(&device, "mixed_float16").unwrap();
    let dir = std::env::temp_dir().join(format!("burn-amp-learner-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    let train = DataLoaderBuilder::<M<B>, _, _>::new(ItemBatcher)
        .batch_size(32)
        .build(InMemDataset::new(items(0..12)));
    let valid = DataLoaderBuilder::<M<B::InnerBackend>, _, _>::new(ItemBatcher)
        .batch_size(32)
        .build(InMemDataset::new(items(100..104)));
    let model = Classifier {
        mlp: Mlp::<M<B>>::new(16, 32, 4, &device),
    };
    let optim = LossScaleOptimizer::new(AdamConfig::new().init::<M<B>, Classifier<M<B>>>());
    let handle = optim.handle();

    let before = {
        let batch = ItemBatcher.batch(items(100..101), &device);
        values(model.classify(batch).loss)[0]
    };
    let result = SupervisedTraining::new(&dir, train, valid)
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .metric_train_numeric(LossScaleMetric::new(handle.clone()))
        .metric_train_numeric(SkippedStepsMetric::new(handle.clone()))
        .num_epochs(3)
        .launch(Learner::new(model, optim, 3e-3));
    MixedPrecision::<B>::clear_policy(&device);

    assert_eq!(handle.total_steps(), 36, "3 epochs of 12 batches");
    assert_eq!(handle.skipped_steps(), 0);
    let trained: Classifier<M<B::InnerBackend>> = result.model;
    let after = {
        let batch = ItemBatcher.batch(items(100..101), &device);
        values(trained.classify(batch).loss)[0]
    };
    assert!(
        after < 0.8 * before,
        "{name}: validation loss {before} -> {after}"
    );
    // The metrics were logged by the Learner.
    for metric in ["Loss Scale", "Skipped Steps"] {
        let log = dir
            .join("train/epoch-3")
            .join(format!("{}.log", metric.replace(' ', "_")));
        let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{log:?}: {e}"));
        assert!(!text.trim().is_empty(), "{metric} logged nothing");
    }
    let scale_log = std::fs::read_to_string(dir.join("train/epoch-1/Loss_Scale.log")).unwrap();
    assert!(scale_log.contains("32768"), "{scale_log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn learner_trains_with_loss_scaling_on_flex_and_wgpu() {
    let _serial = serial();
    learner::<Autodiff<Flex>>(Default::default(), "flex");
    learner::<Autodiff<Wgpu>>(Default::default(), "wgpu");
}

#[test]
fn valid_model_is_inner_backend() {
    let _serial = serial();
    let model = Classifier {
        mlp: Mlp::<Fx>::new(16, 32, 4, &Default::default()),
    };
    let _inner: Classifier<MixedPrecision<Flex>> = model.valid();
}
