//! Reads back to the host per training step, counted by `burn_amp::cost` under each policy
//! and FP8 scaling: what a GPU waits for. Expected: one per step with Burn's `AdamW` inside
//! `LossScaleOptimizer` where the loss is scaled (the overflow check), none without loss
//! scaling, none with `FusedAdamW`.

use burn::backend::Autodiff;
use burn::nn::{Linear, LinearConfig};
use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
use burn::tensor::FloatDType;
use burn_amp::fp8::Fp8Backend;
use burn_amp::{FusedAdamWConfig, LossScaleConfig, MixedPrecision, Policy, cost, with_policy};

use crate::checks::{Checks, Lcg, tensor};

type M<B> = MixedPrecision<Autodiff<B>>;

/// burn-amp's reads in each of 3 steps of a linear layer under `policy`.
fn reads<B: Fp8Backend>(policy: &Policy, fused: bool, device: &B::Device) -> Vec<u64> {
    with_policy(*policy, || {
        let mut layer: Linear<M<B>> = LinearConfig::new(256, 128).init(device);
        let mut counts = Vec::new();
        macro_rules! drive {
            ($optim:expr) => {{
                let mut optim = $optim;
                for step in 0..3u64 {
                    let x = tensor::<M<B>, 2>(Lcg::new(step).vec(64 * 256, 1.0), [64, 256], device);
                    let (l, c) = cost::record(|| {
                        let loss = layer.forward(x).powf_scalar(2.0).mean();
                        let grads = GradientsParams::from_grads(loss.backward(), &layer);
                        optim.step(1e-3, layer.clone(), grads)
                    });
                    layer = l;
                    counts.push(c.reads().burn_amp);
                }
            }};
        }
        let devices = [device.clone()];
        if fused {
            drive!(
                LossScaleConfig::new()
                    .init_on(
                        FusedAdamWConfig::new().init::<M<B>, Linear<M<B>>>(),
                        &devices
                    )
                    .expect("a loss-scale optimizer")
            );
        } else {
            drive!(
                LossScaleConfig::new()
                    .init_on(AdamWConfig::new().init::<M<B>, Linear<M<B>>>(), &devices)
                    .expect("a loss-scale optimizer")
            );
        }
        counts
    })
}

/// One check per policy: the reads of 3 steps with `AdamW` and with `FusedAdamW`, printed.
pub fn reads_per_step<B: Fp8Backend>(checks: &mut Checks, device: &B::Device) {
    let compute = if B::supports_dtype(device, FloatDType::BF16.into()) {
        ["float16", "bfloat16"].as_slice()
    } else {
        ["float16"].as_slice()
    };
    for c in compute {
        let expected = u64::from(*c == "float16");
        for extra in [
            "",
            ",fp8=tensor",
            ",fp8=delayed",
            ",fp8=bias",
            ",fp8=tensor,format=auto",
            ",grads=aps",
        ] {
            let spec = format!("params=float32,compute={c},output=float32{extra}");
            checks.run(&format!("reads per step: {spec}"), || {
                let policy: Policy = spec.parse().map_err(|e| format!("{e}"))?;
                let plain = reads::<B>(&policy, false, device);
                let fused = reads::<B>(&policy, true, device);
                let detail = format!("AdamW {plain:?}, FusedAdamW {fused:?}");
                if plain == vec![expected; 3] && fused == vec![0; 3] {
                    Ok(detail)
                } else {
                    Err(format!("{detail}; expected {expected} and 0 per step"))
                }
            });
        }
    }
}
