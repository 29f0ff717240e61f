//! Every named policy, and the spec forms README shows, crossed with every loss-scale mode
//! (none, automatic, fixed) and both optimizers (Burn's Adam, `FusedAdamW`): a few training
//! steps on Flex (the f16 policies on wgpu too) run without a panic, give finite losses and
//! leave the parameters in the policy's variable dtype.

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::module::AutodiffModule;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn_amp::with_policy;
use burn_amp::{FusedAdamWConfig, LossScaleConfig, LossScaleOptimizer, MixedPrecision, Policy};

use super::common::{Mlp, teacher_batch, values};
use super::serial;

/// Keras' names, the FP8 names, and the spec strings README and the guide show.
pub(super) const POLICIES: [&str; 16] = [
    "float32",
    "float16",
    "bfloat16",
    "mixed_float16",
    "mixed_bfloat16",
    "float8_from_mixed_bfloat16",
    "float8_from_mixed_float16",
    "params=float16,compute=float16,output=float32",
    "params=float32,compute=bfloat16,output=bfloat16",
    "params=float32,compute=bfloat16,output=float32,kernels=backend",
    "params=float32,compute=bfloat16,output=float32,fp8=delayed",
    "params=float32,compute=bfloat16,output=float32,fp8=tensor,format=auto",
    "params=float32,compute=bfloat16,output=float32,fp8=blockwise",
    "params=float32,compute=bfloat16,output=float32,fp8=bias",
    "params=float32,compute=float16,output=float32,fp8=tensor,grads=aps",
    "params=float32,compute=float16,output=float32,fp8=delayed",
];

#[derive(Clone, Copy, Debug)]
enum Scaler {
    None,
    Automatic,
    Fixed,
}

const SCALERS: [Scaler; 3] = [Scaler::None, Scaler::Automatic, Scaler::Fixed];

type M<B> = MixedPrecision<B>;

/// Six steps of `optim` on the test MLP; panics with `what` on a non-finite loss or a
/// parameter of another dtype than the policy's variables.
fn steps<B: AutodiffBackend, O: Optimizer<Mlp<M<B>>, M<B>>>(
    mut optim: O,
    policy: Policy,
    device: &B::Device,
    what: &str,
) where
    Mlp<M<B>>: AutodiffModule<M<B>>,
{
    let mut model = Mlp::<M<B>>::new(8, 16, 4, device);
    let want = policy.variable_dtype().into();
    assert_eq!(
        model.fc1.weight.val().dtype(),
        want,
        "{what}: fc1.weight before training"
    );
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    for step in 0..6 {
        let (x, y) = teacher_batch::<M<B>>(step % 3, 16, 8, 4, device);
        let loss = loss_fn.forward(model.forward(x), y);
        let value = values(loss.clone())[0];
        assert!(value.is_finite(), "{what}: loss {value} at step {step}");
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-3, model, grads);
    }
    for (name, dtype) in [
        ("fc1.weight", model.fc1.weight.val().dtype()),
        ("fc2.bias", model.fc2.bias.as_ref().unwrap().val().dtype()),
        ("out.weight", model.out.weight.val().dtype()),
    ] {
        assert_eq!(dtype, want, "{what}: {name}");
    }
    let w = values(model.fc1.weight.val());
    assert!(
        w.iter().all(|v| v.is_finite()),
        "{what}: non-finite weights"
    );
}

fn with_scaler<B: AutodiffBackend, O: Optimizer<Mlp<M<B>>, M<B>>>(
    optim: O,
    scaler: Scaler,
    policy: Policy,
    device: &B::Device,
    what: &str,
) where
    Mlp<M<B>>: AutodiffModule<M<B>>,
{
    match scaler {
        Scaler::None => steps::<B, _>(optim, policy, device, what),
        Scaler::Automatic => steps::<B, _>(LossScaleOptimizer::new(optim), policy, device, what),
        Scaler::Fixed => {
            let optim = LossScaleConfig::fixed(1024.0).init(optim).unwrap();
            steps::<B, _>(optim, policy, device, what)
        }
    }
}

fn matrix<B: AutodiffBackend>(device: &B::Device, keep: impl Fn(&Policy) -> bool, backend: &str)
where
    Mlp<M<B>>: AutodiffModule<M<B>>,
{
    let mut ran = 0;
    for spec in POLICIES {
        let policy: Policy = spec.parse().unwrap_or_else(|e| panic!("{spec}: {e}"));
        if !keep(&policy) {
            continue;
        }
        for scaler in SCALERS {
            with_policy(policy, || {
                let what = format!("{backend} {spec} {scaler:?} Adam");
                let adam = AdamConfig::new().init::<M<B>, Mlp<M<B>>>();
                with_scaler::<B, _>(adam, scaler, policy, device, &what);
                let what = format!("{backend} {spec} {scaler:?} FusedAdamW");
                let fused = FusedAdamWConfig::new().init::<M<B>, Mlp<M<B>>>();
                with_scaler::<B, _>(fused, scaler, policy, device, &what);
            });
            ran += 2;
        }
    }
    assert!(ran >= 6, "{backend}: {ran} combinations");
}

#[test]
fn every_policy_trains_with_every_loss_scale_mode_and_optimizer_on_flex() {
    let _serial = serial();
    matrix::<Autodiff<Flex>>(&Default::default(), |_| true, "Flex");
}

#[test]
fn the_f16_policies_train_with_every_loss_scale_mode_and_optimizer_on_wgpu() {
    let _serial = serial();
    // WGSL has no bf16: the policies that compute and keep variables in f32 or f16.
    matrix::<Autodiff<Wgpu>>(
        &Default::default(),
        |p| {
            let bf16 = burn::tensor::FloatDType::BF16;
            p.compute_dtype() != bf16 && p.variable_dtype() != bf16 && p.output_dtype() != bf16
        },
        "wgpu",
    );
}
