//! Training under a policy: a small MLP trained 100 steps under `mixed_float16` (Flex, wgpu)
//! and `mixed_bfloat16` (Flex) follows its float32 loss curve.
//!
//! Tolerance. We compare 10-step means of the loss (one step's loss depends on its batch).
//! Rounding the activations of a 3-layer network to f16 (unit roundoff 2^-11 = 0.05%) or
//! bf16 (2^-8 = 0.39%) moves each step's loss by a few roundoffs, and the trajectories drift
//! apart slowly from there. Measured on this suite (Flex and lavapipe, 2026-11): 0.35%
//! (f16, Flex), 0.37% (f16, wgpu), 0.42% (bf16, Flex). The bounds, 1.5% for f16 and 2% for
//! bf16 (about 5 bf16 roundoffs), leave 4-5x headroom for other CPUs and drivers, and stay
//! far below what a broken run gives: a model that stops learning is off by more than 100%
//! by the last window, and a run that diverges by whole multiples.

mod common;

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::AutodiffBackend;
use burn_amp::{MixedPrecision, Policy, with_policy};
use common::{Mlp, teacher_batch, values};

const STEPS: usize = 100;
const WINDOW: usize = 10;
const F16_TOLERANCE: f32 = 0.015;
const BF16_TOLERANCE: f32 = 0.02;

/// The per-step training losses of the test MLP under `policy` (Adam, lr 3e-3, batch 32,
/// 10 fixed batches of a teacher task, cycled).
fn loss_curve<B: AutodiffBackend>(device: &B::Device, policy: Policy) -> Vec<f32> {
    type M<B> = MixedPrecision<B>;
    with_policy(policy, || {
        let mut model = Mlp::<M<B>>::new(32, 64, 8, device);
        let mut optim = AdamConfig::new().init::<M<B>, Mlp<M<B>>>();
        let loss_fn = CrossEntropyLossConfig::new().init(device);
        (0..STEPS)
            .map(|step| {
                let (x, y) = teacher_batch::<M<B>>(step % 10, 32, 32, 8, device);
                let loss = loss_fn.forward(model.forward(x), y);
                let value = values(loss.clone())[0];
                let grads = GradientsParams::from_grads(loss.backward(), &model);
                model = optim.step(3e-3, model.clone(), grads);
                value
            })
            .collect()
    })
}

fn windows(curve: &[f32]) -> Vec<f32> {
    curve
        .chunks(WINDOW)
        .map(|w| w.iter().sum::<f32>() / w.len() as f32)
        .collect()
}

/// The largest relative gap between the 10-step means of two loss curves.
fn max_relative_gap(reference: &[f32], other: &[f32]) -> f32 {
    windows(reference)
        .iter()
        .zip(windows(other))
        .map(|(r, o)| (r - o).abs() / r)
        .fold(0.0, f32::max)
}

fn check_follows_float32<B: AutodiffBackend>(device: &B::Device, policy: Policy, tolerance: f32) {
    let reference = loss_curve::<B>(device, Policy::float32());
    let curve = loss_curve::<B>(device, policy);
    let gap = max_relative_gap(&reference, &curve);
    eprintln!(
        "{policy} on {}: first {:.4} last {:.4} (float32 {:.4} -> {:.4}), max 10-step gap {:.3}%",
        B::name(device),
        curve[0],
        curve[STEPS - 1],
        reference[0],
        reference[STEPS - 1],
        gap * 100.0
    );
    assert!(
        curve.iter().all(|l| l.is_finite()),
        "{policy}: non-finite loss"
    );
    let (start, end) = (windows(&curve)[0], *windows(&curve).last().unwrap());
    assert!(
        end < 0.6 * start,
        "{policy}: did not learn ({start} -> {end})"
    );
    assert!(
        gap <= tolerance,
        "{policy}: 10-step mean loss off float32 by {gap}"
    );
}

#[test]
fn mixed_float16_follows_float32_on_flex() {
    check_follows_float32::<Autodiff<Flex>>(
        &Default::default(),
        Policy::mixed_float16(),
        F16_TOLERANCE,
    );
}

#[test]
fn mixed_bfloat16_follows_float32_on_flex() {
    check_follows_float32::<Autodiff<Flex>>(
        &Default::default(),
        Policy::mixed_bfloat16(),
        BF16_TOLERANCE,
    );
}

#[test]
fn mixed_float16_follows_float32_on_wgpu() {
    check_follows_float32::<Autodiff<Wgpu>>(
        &Default::default(),
        Policy::mixed_float16(),
        F16_TOLERANCE,
    );
}
