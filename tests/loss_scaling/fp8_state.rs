//! The FP8 toolbox's state across steps, kept by `LossScaleOptimizer`: delayed scaling
//! against a hand-computed amax history, CFloat8's exponent bias and its drift rule,
//! `format=auto`, the history's record round trip and its checks, the minimum-scale
//! schedule, and APS gradient compression.

use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;
use burn_amp::fp8::{Fp8HistoryRecord, Fp8Numerics, Fp8Role};
use burn_amp::loss_scale::MinScaleStep;
use burn_amp::{LossScaleConfig, LossScaleError, LossScaleOptimizer, Policy, with_policy};

use super::{Fx, FxDevice, serial};

type Sgd = burn::optim::adaptor::OptimizerAdaptor<
    burn::optim::Sgd<<Fx as AutodiffBackend>::InnerBackend>,
    Linear<Fx>,
    Fx,
>;

fn bound_optimizer(device: &FxDevice) -> LossScaleOptimizer<Sgd> {
    LossScaleConfig::new()
        .init_on(SgdConfig::new().init::<Fx, Linear<Fx>>(), &[*device])
        .unwrap()
}

/// One training step of `x @ w` with the loss `c * sum(y)` (so the gradient reaching `y`
/// is `c` everywhere); returns `y`.
fn step(device: &FxDevice, x: [f32; 4], w: [[f32; 2]; 4], c: f32) -> Vec<f32> {
    let x = Tensor::<Fx, 2>::from_floats([x], device);
    let w = Tensor::<Fx, 2>::from_floats(w, device).require_grad();
    let y = x.matmul(w.clone());
    let values = y
        .clone()
        .into_data()
        .convert::<f32>()
        .to_vec::<f32>()
        .unwrap();
    let _grads = y.sum().mul_scalar(c).backward();
    values
}

const PICK: [[f32; 2]; 4] = [[1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 1.0]];

#[test]
fn delayed_scaling_matches_a_hand_computed_amax_history() {
    let _serial = serial();
    let device = FxDevice::default();
    let optim = bound_optimizer(&device);
    let policy: Policy = "compute=float32,fp8=delayed,history=3".parse().unwrap();
    let ks = [1.0f32, 4.0, 0.5, 2.0, 0.25];
    let cs = [1.0f32, 2.0, 3.0, 4.0, 5.0];
    let mut outputs = vec![];
    let mut first_scale = 0.0;
    with_policy(policy, || {
        for (i, (&k, c)) in ks.iter().zip(cs).enumerate() {
            // x = k * [1, -2, 0.5, 3]: amax 3k. The weight picks x[0] and x[3].
            outputs.push(step(&device, [k, -2.0 * k, 0.5 * k, 3.0 * k], PICK, c));
            if i == 0 {
                let sites = optim.fp8_history().sites(&device);
                first_scale = sites[0].roles[&Fp8Role::Input].scale;
            }
        }
    });
    // A site seen for the first time uses current scaling: 448 / 3.
    assert_eq!(first_scale, 448.0 / 3.0);
    // Step 1 (k = 4) uses step 0's amax 3: x[3] = 12 saturates to 448 / scale = 3, and so
    // does x[0] = 4; current scaling would have kept them.
    assert!((outputs[1][0] - 3.0).abs() < 1e-5, "{:?}", outputs[1]);
    assert!((outputs[1][1] - 3.0).abs() < 1e-5, "{:?}", outputs[1]);
    assert!((outputs[0][1] - 3.0).abs() < 1e-5 && (outputs[2][1] - 1.5).abs() < 1e-5);

    let sites = optim.fp8_history().sites(&device);
    assert_eq!(sites.len(), 1, "one matmul: one site, every step");
    assert!(sites[0].label.starts_with("matmul"), "{}", sites[0].label);
    let roles = &sites[0].roles;
    // Input amaxes 3, 12, 1.5, 6, 0.75; the last three kept.
    let input = &roles[&Fp8Role::Input];
    assert_eq!(Vec::from(input.history.clone()), vec![1.5, 6.0, 0.75]);
    // The last step's scale: 448 over the history before it ([12, 1.5, 6]): 448 / 12.
    assert_eq!(input.scale, 448.0 / 12.0);
    assert_eq!(input.steps, 5);
    let weight = &roles[&Fp8Role::Weight];
    assert_eq!(Vec::from(weight.history.clone()), vec![1.0, 1.0, 1.0]);
    assert_eq!(weight.scale, 448.0);
    // Gradients (E5M2): amaxes 1..5; the last step's scale from max(2, 3, 4).
    let grad = &roles[&Fp8Role::Gradient];
    assert_eq!(Vec::from(grad.history.clone()), vec![3.0, 4.0, 5.0]);
    assert_eq!(grad.scale, 57344.0 / 4.0);
    assert_eq!(grad.format, burn_amp::fp8::Fp8Format::E5M2);

    // The report prints the site, each role's scale and its newest amaxes.
    let report = optim.fp8_history().to_string();
    assert!(
        report.contains("#0 matmul") && report.contains("7.500e-1"),
        "{report}"
    );

    // Without gradients (validation) the history is left alone.
    let inner = Tensor::<<Fx as AutodiffBackend>::InnerBackend, 2>::ones([1, 4], &device);
    with_policy(policy, || inner.clone().matmul(inner.transpose()));
    assert_eq!(
        optim.fp8_history().sites(&device)[0].roles[&Fp8Role::Input].steps,
        5
    );
}

#[test]
fn the_fp8_history_survives_a_record_round_trip_and_bad_records_are_refused() {
    let _serial = serial();
    let device = FxDevice::default();
    let optim = bound_optimizer(&device);
    let policy: Policy = "c=f32,fp8=delayed,history=4,margin=1".parse().unwrap();
    with_policy(policy, || {
        for k in [1.0f32, 2.0, 8.0] {
            step(&device, [k, 1.0, 1.0, 1.0], PICK, k);
        }
    });
    let record = Optimizer::<Linear<Fx>, Fx>::to_record(&optim);
    let bytes = super::record_bytes(record.clone());
    assert!(!record.fp8.devices.is_empty());
    drop(optim);

    let mut fresh = bound_optimizer(&device);
    let loaded: <LossScaleOptimizer<Sgd> as Optimizer<Linear<Fx>, Fx>>::Record =
        burn::record::Recorder::<Fx>::load(
            &burn::record::BinBytesRecorder::<burn::record::FullPrecisionSettings>::default(),
            bytes,
            &device,
        )
        .unwrap();
    fresh.try_load_record::<Linear<Fx>, Fx>(loaded).unwrap();
    assert_eq!(fresh.fp8_history().to_record(), record.fp8);
    let before = fresh.fp8_history().to_record();

    // A poisoned history (a NaN scale, a negative amax) is refused; nothing changes.
    let mut bad = record.clone();
    bad.fp8.devices[0].sites[0].roles[0].scale = f32::NAN;
    let err = fresh.try_load_record::<Linear<Fx>, Fx>(bad).unwrap_err();
    assert!(
        matches!(err, LossScaleError::InvalidRecord { field: "fp8", .. }),
        "{err}"
    );
    let mut bad = record;
    bad.fp8.devices[0].sites[0].roles[1].history[0] = -1.0;
    assert!(fresh.try_load_record::<Linear<Fx>, Fx>(bad).is_err());
    assert_eq!(fresh.fp8_history().to_record(), before);
    assert!(Fp8HistoryRecord::default().validate().is_ok());
}

#[test]
fn the_exponent_bias_moves_only_on_overflow_or_past_its_drift() {
    let _serial = serial();
    let device = FxDevice::default();
    let optim = bound_optimizer(&device);
    let policy: Policy = "c=f32,fp8=bias,drift=2".parse().unwrap();
    let mut biases = vec![];
    let mut outputs = vec![];
    with_policy(policy, || {
        for amax in [1.0f32, 0.5, 0.2, 2.0] {
            outputs.push(step(&device, [amax, 0.0, 0.0, amax], PICK, 1.0));
            let sites = optim.fp8_history().sites(&device);
            biases.push(sites[0].roles[&Fp8Role::Input].format.bias());
        }
    });
    // 1.0 fits bias 7 + 8 = 15 (max 1.75); 0.5 is one binade below: kept; 0.2 would fit
    // bias 18, three binades away: raised; 2.0 overflows bias 18 (max 0.22): lowered to 14.
    assert_eq!(biases, vec![15, 15, 18, 14]);
    // The values are CFloat8 values of that bias, unscaled: 0.2 in E4M3 with bias 18.
    assert!((outputs[2][0] - 0.203125).abs() < 1e-7, "{:?}", outputs[2]);
}

#[test]
fn auto_format_picks_e5m2_for_a_wide_tensor_and_e4m3_for_a_narrow_one() {
    let _serial = serial();
    let device = FxDevice::default();
    let policy: Policy = "c=f32,fp8=tensor,format=auto".parse().unwrap();
    assert_eq!(
        policy.to_string(),
        "params=float32,compute=float32,output=float32,fp8=tensor,format=auto"
    );
    // Half the input sits 2^-20 below its amax: E4M3 (2^17.8 of range) flushes it, E5M2
    // (2^31.8) keeps it.
    let mut wide = vec![1.0f32; 64];
    for v in wide.iter_mut().skip(32) {
        *v = 2f32.powi(-20);
    }
    let x = Tensor::<Fx, 2>::from_floats(burn::tensor::TensorData::new(wide, [1, 64]), &device);
    let w = Tensor::<Fx, 2>::ones([64, 1], &device).require_grad();
    let ((), report) = Fp8Numerics::record(|| {
        with_policy(policy, || {
            let y = x.clone().matmul(w.clone());
            // 32 + 32 * 2^-20, which E5M2 keeps to within its precision.
            let got = y.clone().into_scalar();
            assert!(got > 32.0, "the small half was flushed: {got}");
            let _ = y.sum().backward();
        })
    });
    let site = &report.sites()[0];
    assert_eq!(site.roles[&Fp8Role::Input].chosen, [0, 1]);
    assert_eq!(site.roles[&Fp8Role::Weight].chosen, [1, 0]);
    assert_eq!(site.roles[&Fp8Role::Gradient].chosen, [1, 0]);
    assert!(report.to_string().contains("0/1"));
}

#[test]
fn the_min_scale_schedule_holds_the_floor_after_overflows_and_is_recorded() {
    let _serial = serial();
    let device = FxDevice::default();
    let config = LossScaleConfig::new()
        .with_initial_scale(4096.0)
        .with_min_scale_schedule(vec![
            MinScaleStep {
                step: 3,
                min_scale: 1024.0,
            },
            MinScaleStep {
                step: 8,
                min_scale: 8192.0,
            },
        ]);
    let model: Linear<Fx> = LinearConfig::new(2, 1).init(&device);
    let mut optim = config
        .clone()
        .init_manual(SgdConfig::new().init::<Fx, Linear<Fx>>())
        .unwrap();
    let overflow = |model: &Linear<Fx>| {
        let x = Tensor::<Fx, 2>::from_floats([[f32::INFINITY, 1.0]], &device);
        GradientsParams::from_grads(model.forward(x).sum().backward(), model)
    };
    let mut model = model;
    let mut scales = vec![];
    for _ in 0..10 {
        let grads = overflow(&model);
        model = optim.step(1e-3, model, grads);
        scales.push(optim.loss_scale());
    }
    assert_eq!(optim.skipped_steps(), 10);
    // Halved twice, then held at 1024 from step 3; raised to 8192 at step 8 and held.
    assert_eq!(
        scales,
        vec![
            2048.0, 1024.0, 1024.0, 1024.0, 1024.0, 1024.0, 1024.0, 8192.0, 8192.0, 8192.0
        ]
    );

    // The schedule travels in the record: an optimizer built without one applies it.
    let record = Optimizer::<Linear<Fx>, Fx>::to_record(&optim);
    assert_eq!(record.min_scale_schedule.len(), 2);
    let mut resumed = LossScaleConfig::new()
        .with_initial_scale(4096.0)
        .init_manual(SgdConfig::new().init::<Fx, Linear<Fx>>())
        .unwrap();
    resumed
        .try_load_record::<Linear<Fx>, Fx>(record.clone())
        .unwrap();
    let grads = overflow(&model);
    let _ = resumed.step(1e-3, model, grads);
    assert_eq!(resumed.loss_scale(), 8192.0);
    // A record whose scale sits below its schedule's floor is refused.
    let mut bad = record;
    bad.scale = 16.0;
    let err = resumed.try_load_record::<Linear<Fx>, Fx>(bad).unwrap_err();
    assert!(
        matches!(err, LossScaleError::InvalidRecord { field: "scale", .. }),
        "{err}"
    );
    // An unsorted schedule is a config error.
    let unsorted = config.with_min_scale_schedule(vec![
        MinScaleStep {
            step: 5,
            min_scale: 2.0,
        },
        MinScaleStep {
            step: 5,
            min_scale: 4.0,
        },
    ]);
    assert!(unsorted.validate().is_err());
}

#[test]
fn aps_rounds_the_gradients_the_optimizer_sees_to_e5m2_with_the_layer_scale() {
    let _serial = serial();
    let device = FxDevice::default();
    let policy: Policy = "c=f32,grads=aps".parse().unwrap();
    let mut optim = bound_optimizer(&device);
    let model: Linear<Fx> = LinearConfig::new(3, 1).with_bias(false).init(&device);
    let before = super::values(model.weight.val());
    // Gradient of w = x: 3, 0.1 and 1e-6 (amax 3: APS scale 16384, so 1e-6 * 16384 = 0.016
    // is a normal E5M2 value; 0.1 * 16384 = 1638.4 rounds to 1536, 0.09375).
    let x = Tensor::<Fx, 2>::from_floats([[3.0, 0.1, 1e-6]], &device);
    let model = with_policy(policy, || {
        let grads = GradientsParams::from_grads(model.forward(x).sum().backward(), &model);
        optim.step(1.0, model, grads)
    });
    let after = super::values(model.weight.val());
    let applied: Vec<f32> = before.iter().zip(&after).map(|(b, a)| b - a).collect();
    assert!((applied[0] - 3.0).abs() < 1e-6, "{applied:?}");
    assert!((applied[1] - 0.09375).abs() < 1e-6, "{applied:?}");
    let e5m2 = |x: f32| {
        use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, reference};
        let s = 16384.0;
        reference::decode_scaled(
            reference::encode_scaled(x, s, Fp8Cast::new(Fp8Format::E5M2), 0),
            Fp8Format::E5M2,
            1.0 / s,
        )
    };
    assert!((applied[2] - e5m2(1e-6)).abs() < 1e-9, "{applied:?}");
    assert_ne!(e5m2(1e-6), 1e-6);
}
