//! Which scale a backward pass applies: the device's own automatic optimizer, else the
//! newest live default one; dropping an optimizer never redirects another one's passes.

use burn::backend::wgpu::WgpuDevice;
use burn::backend::{Autodiff, Flex, Wgpu};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::Tensor;
use burn::tensor::backend::AutodiffBackend;
use burn_amp::{
    LossScaleConfig, LossScaleError, LossScaleOptimizer, MixedPrecision, Policy, with_policy,
};

use super::common::{self, Mlp, det, teacher_batch, values};
use super::{Fx, FxDevice, serial};

type Wx = MixedPrecision<Autodiff<Wgpu>>;

fn sgd<B: AutodiffBackend>() -> impl Optimizer<Mlp<B>, B> {
    SgdConfig::new().init::<B, Mlp<B>>()
}

fn scaled(initial: f32) -> LossScaleConfig {
    LossScaleConfig::new().with_initial_scale(initial)
}

/// The gradient of a layer whose true gradients (about 1e-8) underflow in f16, and the
/// scale the backward pass applied.
fn tiny_grad(device: &FxDevice) -> (Vec<f32>, f32) {
    let layer = common::det_linear::<Fx>(4, 3, 5, device);
    let x = det::<Fx, 2>([2, 4], 6, 1.0, device);
    let weights = Tensor::<Fx, 2>::full([2, 3], 1e-8, device);
    let grads = (layer.forward(x) * weights).sum().backward();
    (values(layer.weight.grad(&grads).unwrap()), grads.scale())
}

#[test]
fn dropping_the_newest_default_hands_backward_to_the_one_before_never_to_nothing() {
    let _serial = serial();
    let device = FxDevice::default();
    let reference = with_policy(Policy::float32(), || tiny_grad(&device).0);
    with_policy(Policy::mixed_float16(), || {
        let a = scaled(1024.0).init(sgd::<Fx>()).unwrap();
        let b = scaled(4096.0).init(sgd::<Fx>()).unwrap();
        let c = scaled(65536.0).init(sgd::<Fx>()).unwrap();
        assert_eq!(tiny_grad(&device).1, 65536.0, "the newest default applies");
        drop(c);
        let (grad, scale) = tiny_grad(&device);
        assert_eq!(scale, 4096.0, "B's scale, not 1.0 (the bug) and not A's");
        for (g, r) in grad.iter().zip(&reference) {
            // 4096 * 1e-8 = 4e-5 is an f16 subnormal with a step of 6e-8: 1% holds.
            assert!((g - r).abs() <= 1e-2 * r.abs(), "{g} vs float32 {r}");
        }

        // A temporary default made and dropped (an evaluation helper, a failed resume)
        // leaves B in charge afterwards; dropping the older A changes nothing either.
        let temporary = LossScaleOptimizer::new(sgd::<Fx>());
        drop(temporary);
        drop(a);
        assert_eq!(tiny_grad(&device).1, 4096.0);
        // Manual optimizers bind nothing.
        let manual = scaled(8.0).init_manual(sgd::<Fx>()).unwrap();
        assert_eq!(tiny_grad(&device).1, 4096.0);
        drop((manual, b));
        assert_eq!(
            tiny_grad(&device).1,
            1.0,
            "no automatic optimizer left: unscaled"
        );
    });
}

#[test]
fn a_handle_keeps_no_binding_alive_and_a_clone_keeps_its_own() {
    let _serial = serial();
    let device = FxDevice::default();
    with_policy(Policy::mixed_float16(), || {
        let optim = scaled(512.0).init(sgd::<Fx>()).unwrap();
        let handle = optim.handle();
        let clone = optim.clone();
        drop(optim);
        assert_eq!(
            tiny_grad(&device).1,
            512.0,
            "a clone is bound as a default too"
        );
        drop(clone);
        assert_eq!(
            tiny_grad(&device).1,
            1.0,
            "a metric's handle keeps nothing bound"
        );
        assert_eq!(handle.scale(), 512.0);
    });
}

/// One step of the MLP on `optim`, its loss made infinite when `overflow`.
fn mlp_step<O: Optimizer<Mlp<Fx>, Fx>>(
    optim: &mut O,
    model: Mlp<Fx>,
    overflow: bool,
    device: &FxDevice,
) -> Mlp<Fx> {
    let (x, y) = teacher_batch::<Fx>(0, 16, 8, 4, device);
    let mut loss = CrossEntropyLossConfig::new()
        .init(device)
        .forward(model.forward(x), y);
    if overflow {
        loss = loss.mul_scalar(f32::INFINITY);
    }
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    optim.step(1e-2, model, grads)
}

/// Burn's DDP clones the optimizer once per device: each replica's clone must own its scale,
/// or an overflow would halve every replica's scale once per replica.
#[test]
fn a_replicas_clone_steps_its_own_scale_without_moving_the_originals() {
    let _serial = serial();
    let device = FxDevice::default();
    // The mixed policy, and `float16` (16-bit variables), both scaled.
    for policy in [Policy::mixed_float16(), Policy::float16()] {
        with_policy(policy, || {
            for bound_to_device in [true, false] {
                let config = scaled(512.0);
                let original = if bound_to_device {
                    config.init_on(sgd::<Fx>(), &[device]).unwrap()
                } else {
                    config.init(sgd::<Fx>()).unwrap()
                };
                let metric = original.handle();
                let mut replica = original.clone();
                let model = Mlp::<Fx>::new(8, 16, 4, &device);
                // The replica's first backward ran through the original's binding; its step
                // takes the device over with that pass's state and skips the overflow.
                let model = mlp_step(&mut replica, model, true, &device);
                assert_eq!(
                    replica.loss_scale(),
                    256.0,
                    "{policy}, bound to device: {bound_to_device}"
                );
                assert_eq!((replica.total_steps(), replica.skipped_steps()), (1, 1));
                assert_eq!(original.loss_scale(), 512.0, "the original's scale moved");
                assert_eq!((original.total_steps(), original.skipped_steps()), (0, 0));
                // From now on backward passes on the device apply the replica's scale.
                assert_eq!(tiny_grad(&device).1, 256.0);
                let _ = mlp_step(&mut replica, model, false, &device);
                assert_eq!((replica.total_steps(), replica.skipped_steps()), (2, 1));
                assert_eq!(replica.loss_scale(), 256.0);
                assert_eq!(original.total_steps(), 0);
                // A metric's handle on the original reports the replica, the one that steps.
                assert_eq!((metric.scale(), metric.total_steps()), (256.0, 2));
                drop(replica);
                assert_eq!((metric.scale(), metric.total_steps()), (512.0, 0));
                assert_eq!(
                    tiny_grad(&device).1,
                    512.0,
                    "with the replica gone, the device falls back to the original"
                );
            }
        });
    }
}

#[test]
fn a_device_holds_one_automatic_optimizer_until_it_is_dropped() {
    let _serial = serial();
    let device = FxDevice::default();
    let first = scaled(256.0).init_on(sgd::<Fx>(), &[device]).unwrap();
    let second = scaled(128.0).init_on(sgd::<Fx>(), &[device]);
    let Err(LossScaleError::DeviceTaken { device: name }) = second else {
        panic!("a second claim must be refused");
    };
    assert!(!name.is_empty());
    // A device binding wins over a newer default one.
    let default = scaled(8.0).init(sgd::<Fx>()).unwrap();
    with_policy(Policy::mixed_float16(), || {
        assert_eq!(tiny_grad(&device).1, 256.0);
        drop(first);
        assert_eq!(
            tiny_grad(&device).1,
            8.0,
            "the device falls back to the default"
        );
    });
    drop(default);
    assert!(scaled(128.0).init_on(sgd::<Fx>(), &[device]).is_ok());
}

#[test]
fn a_backward_pass_on_a_worker_thread_applies_its_devices_scale() {
    let _serial = serial();
    let device = FxDevice::default();
    let _optim = scaled(2048.0).init_on(sgd::<Fx>(), &[device]).unwrap();
    // Burn's multi-device training runs each device's backward pass on a worker thread.
    let worker = move || with_policy(Policy::mixed_float16(), || tiny_grad(&device).1);
    let scale = std::thread::spawn(worker).join().unwrap();
    assert_eq!(scale, 2048.0);
}

/// One training step of `model` on `device`; `blow_up` multiplies the loss by 1e30 so that
/// the f16 backward pass overflows. Returns the model, the scale the backward pass applied
/// and the loss.
fn step<I: AutodiffBackend>(
    model: Mlp<MixedPrecision<I>>,
    optim: &mut LossScaleOptimizer<impl Optimizer<Mlp<MixedPrecision<I>>, MixedPrecision<I>>>,
    batch: usize,
    blow_up: bool,
    device: &I::Device,
) -> (Mlp<MixedPrecision<I>>, f32, f32) {
    let (x, y) = teacher_batch::<MixedPrecision<I>>(batch % 5, 16, 8, 4, device);
    let loss = CrossEntropyLossConfig::new()
        .init(device)
        .forward(model.forward(x), y);
    let value = values(loss.clone())[0];
    let loss = if blow_up { loss * 1e30 } else { loss };
    let grads = loss.backward();
    let applied = grads.scale();
    let grads = GradientsParams::from_grads(grads, &model);
    (optim.step(5e-2, model, grads), applied, value)
}

#[test]
fn two_models_on_two_devices_train_in_alternation_each_with_its_own_scale() {
    let _serial = serial();
    let flex = FxDevice::default();
    let wgpu = WgpuDevice::default();
    MixedPrecision::<Autodiff<Flex>>::set_policy(&flex, "mixed_float16").unwrap();
    MixedPrecision::<Autodiff<Wgpu>>::set_policy(&wgpu, "mixed_float16").unwrap();
    let config = |s: f32| scaled(s).with_growth_interval(1000);
    let mut optim_f = config(1024.0).init_on(sgd::<Fx>(), &[flex]).unwrap();
    let mut optim_w = config(256.0)
        .init_on(sgd::<Wx>(), std::slice::from_ref(&wgpu))
        .unwrap();
    let mut model_f = Mlp::<Fx>::new(8, 16, 4, &flex);
    let mut model_w = Mlp::<Wx>::new(8, 16, 4, &wgpu);
    let (mut first_f, mut first_w, mut last_f, mut last_w) = (0.0, 0.0, 0.0, 0.0);
    for i in 0..30 {
        // Step 10 of the Flex model overflows: only its own scale backs off.
        let (m, applied, loss) = step(model_f, &mut optim_f, i, i == 10, &flex);
        model_f = m;
        assert_eq!(
            applied,
            if i <= 10 { 1024.0 } else { 512.0 },
            "flex step {i}"
        );
        let (m, applied, loss_w) = step(model_w, &mut optim_w, i, false, &wgpu);
        model_w = m;
        assert_eq!(applied, 256.0, "wgpu step {i}");
        if i == 0 {
            (first_f, first_w) = (loss, loss_w);
        }
        (last_f, last_w) = (loss, loss_w);
    }
    assert_eq!((optim_f.skipped_steps(), optim_f.total_steps()), (1, 30));
    assert_eq!((optim_w.skipped_steps(), optim_w.total_steps()), (0, 30));
    assert!(
        last_f < 0.8 * first_f && last_f.is_finite(),
        "flex {first_f} -> {last_f}"
    );
    assert!(
        last_w < 0.8 * first_w && last_w.is_finite(),
        "wgpu {first_w} -> {last_w}"
    );
    MixedPrecision::<Autodiff<Flex>>::clear_policy(&flex);
    MixedPrecision::<Autodiff<Wgpu>>::clear_policy(&wgpu);
}
