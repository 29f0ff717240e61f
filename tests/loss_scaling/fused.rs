//! `FusedAdamW`: Burn's AdamW step for step (Flex: the same bits; wgpu: within f32
//! rounding), Adam without weight decay, records both ways, and inside a
//! `LossScaleOptimizer` the same skips and scales as an unfused optimizer with nothing read
//! back.

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::module::{AutodiffModule, Module};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, AdamWConfig, GradientsParams, Optimizer};
use burn::record::Recorder;
use burn::tensor::backend::AutodiffBackend;
use burn_amp::optim::RecordError;
use burn_amp::{FusedAdamWConfig, LossScaleConfig, MixedPrecision, Policy, cost, with_policy};

use super::common::{Mlp, teacher_batch, values};
use super::{Fx, grads_of, per_param_bytes, poison, record_bytes, serial};

/// Every parameter's values, in visit order.
fn params<B: AutodiffBackend>(model: &Mlp<B>) -> Vec<f32> {
    [
        values(model.fc1.weight.val()),
        values(model.fc1.bias.as_ref().unwrap().val()),
        values(model.fc2.weight.val()),
        values(model.out.weight.val()),
    ]
    .concat()
}

/// `steps` steps of `optim` on the teacher task.
fn train<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(
    mut model: Mlp<B>,
    optim: &mut O,
    steps: std::ops::Range<usize>,
    device: &B::Device,
) -> Mlp<B> {
    for step in steps {
        let (x, y) = teacher_batch::<B>(step % 7, 16, 8, 4, device);
        let loss = CrossEntropyLossConfig::new()
            .init(device)
            .forward(model.forward(x), y);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(3e-3, model, grads);
    }
    model
}

/// The largest difference between two parameter lists, relative to the largest value.
fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = a.iter().fold(0f32, |m, x| m.max(x.abs()));
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// The bound where the arithmetic differs by rounding only: 4 f32 ulps (2^-21 relative to
/// the largest parameter) per step.
fn rounding_bound(steps: usize) -> f32 {
    steps as f32 * 2f32.powi(-21)
}

fn follows_adamw<B: AutodiffBackend>(device: &B::Device, exact: bool) {
    let start = Mlp::<B>::new(8, 16, 4, device);
    let mut burns = AdamWConfig::new().init::<B, Mlp<B>>();
    let mut fused = FusedAdamWConfig::new().init::<B, Mlp<B>>();
    let a = train(start.clone(), &mut burns, 0..200, device);
    let b = train(start.clone(), &mut fused, 0..200, device);
    let bound = if exact { 0.0 } else { rounding_bound(200) };
    let diff = max_rel_diff(&params(&a), &params(&b));
    assert!(diff <= bound, "{}: {diff:e} > {bound:e}", B::name(device));
    assert_ne!(params(&start), params(&b), "it trained");
}

#[test]
fn two_hundred_steps_follow_burns_adamw() {
    // Flex runs burn-amp's kernel: Burn's operations in Burn's order, so the same values.
    follows_adamw::<Autodiff<Flex>>(&Default::default(), true);
    // wgpu runs the CubeCL kernel: the GPU may fuse a multiply-add, and its square root
    // and division need not round correctly: within f32 rounding, step by step.
    follows_adamw::<Autodiff<Wgpu>>(&Default::default(), false);
}

#[test]
fn without_weight_decay_it_is_adam() {
    // Burn's Adam folds the bias corrections into one factor (the same value, rounded
    // differently): within f32 rounding, step by step.
    let device = Default::default();
    type B = Autodiff<Flex>;
    let start = Mlp::<B>::new(8, 16, 4, &device);
    let a = train(
        start.clone(),
        &mut AdamConfig::new().init::<B, Mlp<B>>(),
        0..50,
        &device,
    );
    let b = train(
        start,
        &mut FusedAdamWConfig::adam().init::<B, Mlp<B>>(),
        0..50,
        &device,
    );
    let diff = max_rel_diff(&params(&a), &params(&b));
    assert!(diff <= rounding_bound(50), "{diff:e}");
}

#[test]
fn records_round_trip_and_burns_adamw_record_loads() {
    let device = Default::default();
    type B = Autodiff<Flex>;
    let start = Mlp::<B>::new(8, 16, 4, &device);
    // Uninterrupted, against interrupted at step 5 and resumed from the record.
    let mut once = FusedAdamWConfig::new().init::<B, Mlp<B>>();
    let whole = train(start.clone(), &mut once, 0..10, &device);
    let mut first = FusedAdamWConfig::new().init::<B, Mlp<B>>();
    let half = train(start.clone(), &mut first, 0..5, &device);
    let mut second = FusedAdamWConfig::new()
        .init::<B, Mlp<B>>()
        .load_record(first.to_record());
    let resumed = train(half, &mut second, 5..10, &device);
    assert_eq!(params(&whole), params(&resumed));
    // Burn's AdamW for 5 steps, then either Burn's or the fused one from its record.
    let mut burns = AdamWConfig::new().init::<B, Mlp<B>>();
    let half = train(start, &mut burns, 0..5, &device);
    let mut fused = FusedAdamWConfig::new()
        .init::<B, Mlp<B>>()
        .load_record(burns.to_record());
    let a = train(half.clone(), &mut burns, 5..10, &device);
    let b = train(half, &mut fused, 5..10, &device);
    assert_eq!(params(&a), params(&b));
    // And back: the fused one's record is Burn's.
    let mut back = AdamWConfig::new()
        .init::<B, Mlp<B>>()
        .load_record(fused.to_record());
    let _ = train(b, &mut back, 10..11, &device);
}

#[test]
fn bad_records_are_typed_errors_and_change_nothing() {
    let device = Default::default();
    type B = Autodiff<Flex>;
    let model = Mlp::<B>::new(8, 16, 4, &device);
    let mut amsgrad = AdamWConfig::new().with_amsgrad(true).init::<B, Mlp<B>>();
    let _ = train(model.clone(), &mut amsgrad, 0..1, &device);
    let mut fused = FusedAdamWConfig::new().init::<B, Mlp<B>>();
    let _ = train(model, &mut fused, 0..2, &device);
    let before = fused.to_record();
    let err = fused.try_load_record(amsgrad.to_record()).unwrap_err();
    assert!(matches!(err, RecordError::Amsgrad { .. }), "{err}");
    assert!(err.to_string().contains("AMSGrad"));
    let after = fused.to_record();
    assert_eq!(before.len(), after.len());
    for (id, r) in &before {
        let bytes = |r: &burn::optim::record::AdaptorRecord<burn::optim::AdamW, B>| {
            burn::record::BinBytesRecorder::<burn::record::FullPrecisionSettings>::default()
                .record(r.clone(), ())
                .unwrap()
        };
        assert_eq!(bytes(r), bytes(&after[id]), "state of {id} changed");
    }
}

#[test]
fn inside_a_loss_scale_optimizer_it_skips_and_scales_as_an_unfused_one_with_nothing_read_back() {
    let _serial = serial();
    let device = Default::default();
    with_policy(Policy::mixed_float16(), || {
        let start = Mlp::<Fx>::new(8, 16, 4, &device);
        let config = LossScaleConfig::new()
            .with_growth_interval(2)
            .with_initial_scale(256.0);
        let run = |fused: bool| {
            let mut model = start.clone();
            let mut scales = Vec::new();
            let mut reads = Vec::new();
            macro_rules! drive {
                ($optim:expr) => {{
                    let mut optim = $optim;
                    for step in 0..8 {
                        let before_params = record_bytes(model.clone().into_record());
                        let before_moments =
                            (step > 0).then(|| per_param_bytes(optim.to_record().inner));
                        let (m, cost) = cost::record(|| {
                            let grads = grads_of(&model, &device);
                            // Steps 3 and 4 overflow (a NaN, then an inf).
                            let grads = match step {
                                3 => poison(grads, &model, f32::NAN),
                                4 => poison(grads, &model, f32::INFINITY),
                                _ => grads,
                            };
                            optim.step(1e-2, model.clone(), grads)
                        });
                        model = m;
                        reads.push(cost.reads().burn_amp);
                        if step == 3 || step == 4 {
                            assert!(
                                record_bytes(model.clone().into_record()) == before_params,
                                "fused={fused} step {step}: parameters changed"
                            );
                            assert!(
                                Some(per_param_bytes(optim.to_record().inner)) == before_moments,
                                "fused={fused} step {step}: moments changed"
                            );
                        }
                        scales.push((optim.loss_scale(), optim.skipped_steps()));
                    }
                }};
            }
            if fused {
                drive!(
                    config
                        .clone()
                        .init(FusedAdamWConfig::new().init::<Fx, Mlp<Fx>>())
                        .unwrap()
                );
            } else {
                drive!(
                    config
                        .clone()
                        .init(AdamWConfig::new().init::<Fx, Mlp<Fx>>())
                        .unwrap()
                );
            }
            (scales, reads, params(&model))
        };
        let (fused_scales, fused_reads, fused_params) = run(true);
        let (plain_scales, plain_reads, plain_params) = run(false);
        assert_eq!(fused_scales, plain_scales, "the same skips and scales");
        assert_eq!(
            fused_scales[4],
            (128.0, 2),
            "two overflows halved 256 twice"
        );
        assert_eq!(fused_scales[7].0, 256.0, "two good steps in a row grow it");
        assert_eq!(fused_reads, vec![0; 8], "fused: nothing read back");
        assert_eq!(
            plain_reads,
            vec![1; 8],
            "unfused: the overflow count, once a step"
        );
        // Burn's AdamW sees the same gradients: the same parameters (same operations).
        assert_eq!(fused_params, plain_params);
    });
}

#[test]
fn on_wgpu_inside_a_loss_scale_optimizer_nothing_is_read_back() {
    let _serial = serial();
    type W = MixedPrecision<Autodiff<Wgpu>>;
    let device = Default::default();
    with_policy(Policy::mixed_float16(), || {
        let mut model = Mlp::<W>::new(8, 16, 4, &device);
        let mut optim = LossScaleConfig::new()
            .init(FusedAdamWConfig::new().init::<W, Mlp<W>>())
            .unwrap();
        for step in 0..3 {
            let (m, cost) = cost::record(|| {
                let (x, y) = teacher_batch::<W>(step, 16, 8, 4, &device);
                let loss = CrossEntropyLossConfig::new()
                    .init(&device)
                    .forward(model.forward(x), y);
                let grads = GradientsParams::from_grads(loss.backward(), &model);
                optim.step(1e-2, model.clone(), grads)
            });
            model = m;
            assert_eq!(cost.reads().burn_amp, 0, "step {step}");
        }
        assert_eq!((optim.total_steps(), optim.skipped_steps()), (3, 0));
        assert!(
            model
                .valid()
                .fc1
                .weight
                .val()
                .into_data()
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .all(|v| v.is_finite())
        );
    });
}

#[test]
fn a_record_reloaded_under_bfloat16_keeps_its_step_count() {
    // 257 steps: bf16 holds integers exactly only to 256, so a step count that went through
    // a bf16 tensor on loading would come back as 256.
    let _serial = serial();
    with_policy(Policy::bfloat16(), || {
        let device = Default::default();
        let mut optim = FusedAdamWConfig::new().init::<Fx, Mlp<Fx>>();
        let _ = train(
            Mlp::<Fx>::new(8, 16, 4, &device),
            &mut optim,
            0..257,
            &device,
        );
        let saved = per_param_bytes(optim.to_record());
        let reloaded = FusedAdamWConfig::new()
            .init::<Fx, Mlp<Fx>>()
            .load_record(optim.to_record());
        assert!(saved == per_param_bytes(reloaded.to_record()));
    });
}

/// A record whose moments are keyed to this model's parameters but have other shapes (the
/// record of another model) is refused at the first step, naming the parameter's module
/// path, before anything is changed.
#[test]
fn a_record_of_another_model_is_refused_at_the_first_step_naming_the_parameter() {
    let device = Default::default();
    type B = Autodiff<Flex>;
    let other = Mlp::<B>::new(8, 16, 4, &device);
    let mut trained = FusedAdamWConfig::new().init::<B, Mlp<B>>();
    let _ = train(other.clone(), &mut trained, 0..1, &device);
    let model = Mlp::<B>::new(8, 32, 4, &device);
    // The other model's states, keyed to this model's parameters in visit order.
    let theirs = burn::module::list_param_ids(&other);
    let ours = burn::module::list_param_ids(&model);
    let mut record = trained.to_record();
    let remapped = theirs
        .iter()
        .zip(&ours)
        .map(|(t, o)| (*o, record.remove(t).expect("a state per parameter")))
        .collect();
    let mut fused = FusedAdamWConfig::new().init::<B, Mlp<B>>();
    fused
        .try_load_record(remapped)
        .expect("consistent in itself");
    let grads = grads_of(&model, &device);
    let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fused.step(1e-3, model.clone(), grads)
    }));
    let message = *step
        .expect_err("a record of another model must not be stepped with")
        .downcast::<String>()
        .expect("a formatted panic message");
    assert!(
        message.contains("`fc1.weight`") && message.contains("not this model's"),
        "{message}"
    );
}
