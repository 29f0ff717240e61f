//! The GPT example (`examples/gpt/`) trained briefly under every policy, and resumed from a
//! checkpoint. Runs the example's own code on its `tiny` preset (2 layers of width 32,
//! context 32, 40 steps: seconds each) on Flex.

#[path = "../examples/bench/alloc.rs"]
mod alloc;
#[path = "../examples/gpt/checkpoint.rs"]
mod checkpoint;
#[path = "../examples/gpt/config.rs"]
mod config;
#[path = "../examples/gpt/custom_loop.rs"]
mod custom_loop;
#[path = "../examples/gpt/data.rs"]
mod data;
#[path = "../examples/gpt/generate.rs"]
mod generate;
#[path = "../examples/gpt/learner.rs"]
mod learner;
#[path = "../examples/gpt/model.rs"]
mod model;
#[path = "../examples/gpt/progress.rs"]
mod progress;
#[path = "../examples/gpt/run.rs"]
mod run;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use burn::backend::{Autodiff, Flex};
use burn::config::Config;
use burn_amp::fp8::Fp8Scaling;
use burn_amp::{LossScaleConfig, Policy};
use config::TrainConfig;
use run::{Mode, Options, Summary};

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// Each run sets the Flex device's policy and binds its loss scale to the device; both are
/// process-wide, so the tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn tiny(policy: Policy) -> Options {
    Options {
        policy,
        train: TrainConfig::tiny(),
        sample_len: 20,
        ..Options::default()
    }
}

fn train(options: &Options) -> Result<Summary, String> {
    run::run::<Autodiff<Flex>>(Default::default(), options)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("burn-amp-gpt-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The loss starts near ln 256 = 5.55 (uniform over bytes) and must fall by more than one
/// nat in 40 steps, every loss finite, the held-out loss too.
fn assert_learns(policy: Policy) -> Summary {
    let _serial = serial();
    let summary = train(&tiny(policy)).unwrap();
    let losses = &summary.train_losses;
    assert_eq!(losses.len(), 40);
    assert!(
        losses.iter().all(|l| l.is_finite()),
        "{policy}: a non-finite loss: {losses:?}"
    );
    let first = losses[0];
    let last = losses[35..].iter().sum::<f32>() / 5.0;
    assert!(
        (first - 256f32.ln()).abs() < 0.3,
        "{policy}: the untrained loss {first} is not near ln 256"
    );
    assert!(
        last < first - 1.0,
        "{policy}: the loss fell from {first} to only {last}"
    );
    let valid = summary.final_valid_loss();
    assert!(
        valid.is_finite() && valid < first - 1.0,
        "{policy}: validation loss {valid} (first training loss {first})"
    );
    assert!(
        !summary.sample.is_empty(),
        "{policy}: no text was generated"
    );
    assert_eq!(summary.policy, policy);
    assert!(summary.tokens_per_second > 0.0 && summary.peak_heap_bytes > 0);
    summary
}

#[test]
fn float32_trains_the_tiny_gpt() {
    assert_learns(Policy::float32());
}

#[test]
fn mixed_bfloat16_trains_the_tiny_gpt() {
    assert_learns(Policy::mixed_bfloat16());
}

#[test]
fn mixed_float16_trains_the_tiny_gpt_without_skipping_steps() {
    let summary = assert_learns(Policy::mixed_float16());
    assert_eq!(
        summary.skipped_steps, 0,
        "the default scale 2^15 fits this model"
    );
    assert_eq!(summary.loss_scale, Some(32768.0));
}

#[test]
fn float8_per_tensor_trains_the_tiny_gpt() {
    assert_learns(Policy::float8_from_mixed_bfloat16());
}

#[test]
fn float8_blockwise_trains_the_tiny_gpt() {
    assert_learns(Policy::float8_from_mixed_bfloat16().with_fp8_scaling(Fp8Scaling::Blockwise));
}

#[test]
fn the_learner_path_trains_the_tiny_gpt_under_mixed_float16() {
    let _serial = serial();
    let options = Options {
        mode: Mode::Learner,
        ..tiny(Policy::mixed_float16())
    };
    let summary = train(&options).unwrap();
    let valid = summary.final_valid_loss();
    assert!(
        valid < 256f32.ln() - 1.0,
        "validation loss after the Learner's run: {valid}"
    );
}

/// A scale too large for this model's f16 gradients (2^20; about 2^18 fits) overflows at
/// first: steps are skipped and the scale halves; a growth interval of 6 then raises it
/// again, so it changes more than once before the interruption.
fn overflowing(dir: PathBuf) -> Options {
    Options {
        train: TrainConfig {
            steps: 30,
            ..TrainConfig::tiny()
        },
        loss_scale: LossScaleConfig::new()
            .with_initial_scale(2f32.powi(20))
            .with_max_scale(2f32.powi(20))
            .with_growth_interval(6),
        checkpoint_dir: dir,
        sample_len: 0,
        ..tiny(Policy::mixed_float16())
    }
}

fn bits(losses: &[f32]) -> Vec<u32> {
    losses.iter().map(|l| l.to_bits()).collect()
}

#[test]
fn a_resumed_mixed_float16_run_repeats_the_uninterrupted_losses_bit_for_bit() {
    let _serial = serial();
    let whole = train(&overflowing(scratch("whole"))).unwrap();

    // Interrupted after step 17: the newest checkpoint is step 15's.
    let dir = scratch("resumed");
    let interrupted = train(&Options {
        checkpoint_every: 5,
        stop_after: Some(17),
        ..overflowing(dir.clone())
    })
    .unwrap();
    assert_eq!(interrupted.train_losses.len(), 17);
    assert_eq!(checkpoint::latest(&dir), Some(dir.join("step-000015")));
    let state = checkpoint::TrainState::load(dir.join("step-000015/state.json")).unwrap();
    assert_eq!(bits(&state.train_losses), bits(&whole.train_losses[..15]));
    // Before the interruption the scale overflowed (a skipped step) and changed.
    assert!(
        interrupted.skipped_steps >= 1,
        "no step was skipped before the interruption"
    );
    assert!(
        interrupted.scale_changes >= 2,
        "the scale changed {} times",
        interrupted.scale_changes
    );

    let resumed = train(&Options {
        checkpoint_every: 5,
        resume: true,
        ..overflowing(dir.clone())
    })
    .unwrap();
    assert_eq!(bits(&resumed.train_losses), bits(&whole.train_losses));
    assert_eq!(resumed.valid_losses.len(), whole.valid_losses.len());
    for ((s1, v1), (s2, v2)) in resumed.valid_losses.iter().zip(&whole.valid_losses) {
        assert_eq!((s1, v1.to_bits()), (s2, v2.to_bits()));
    }
    assert_eq!(resumed.skipped_steps, whole.skipped_steps);
    assert_eq!(resumed.loss_scale, whole.loss_scale);
    assert!(
        whole.train_losses[29] < whole.train_losses[0] - 0.5,
        "the run learns despite its skipped steps: {:?}",
        whole.train_losses
    );

    // A checkpoint resumes only the run that wrote it.
    let err = train(&Options {
        policy: Policy::float32(),
        checkpoint_every: 5,
        resume: true,
        ..overflowing(dir.clone())
    })
    .unwrap_err();
    assert!(err.contains("policy mixed_float16"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Delayed scaling's amax histories live in the loss-scale optimizer's record: a run
/// interrupted and resumed under `fp8=delayed` repeats the uninterrupted losses bit for
/// bit (resuming with fresh histories would fall back to current scaling at first, and
/// differ), and the delayed scales do change the run against current scaling.
#[test]
fn a_resumed_fp8_delayed_run_repeats_the_uninterrupted_losses_bit_for_bit() {
    let _serial = serial();
    let policy: Policy = "c=bf16,fp8=delayed,history=8".parse().unwrap();
    let options = |policy: Policy, dir: PathBuf| Options {
        train: TrainConfig {
            steps: 20,
            ..TrainConfig::tiny()
        },
        checkpoint_dir: dir,
        sample_len: 0,
        ..tiny(policy)
    };
    let whole = train(&options(policy, scratch("delayed-whole"))).unwrap();
    let current = policy.with_fp8_scaling(burn_amp::fp8::Fp8Scaling::PerTensor);
    let current = train(&options(current, scratch("delayed-current"))).unwrap();
    assert_ne!(bits(&whole.train_losses), bits(&current.train_losses));

    let dir = scratch("delayed-resumed");
    let interrupted = train(&Options {
        checkpoint_every: 5,
        stop_after: Some(12),
        ..options(policy, dir.clone())
    })
    .unwrap();
    assert_eq!(interrupted.train_losses.len(), 12);
    let resumed = train(&Options {
        checkpoint_every: 5,
        resume: true,
        ..options(policy, dir.clone())
    })
    .unwrap();
    assert_eq!(bits(&resumed.train_losses), bits(&whole.train_losses));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_presets_are_valid_and_compare_trains_five_distinct_policies() {
    for name in ["cpu", "gpu", "tiny"] {
        let preset = TrainConfig::preset(name).unwrap();
        preset.check().unwrap();
        assert!(preset.lr_at(0) > 0.0 && preset.lr_at(preset.steps) >= preset.lr / 10.0 * 0.999);
    }
    let err = TrainConfig::preset("huge").unwrap_err();
    assert!(err.contains("cpu, gpu or tiny"), "{err}");
    let labels: std::collections::BTreeSet<String> =
        run::compared_policies().iter().map(run::label).collect();
    assert_eq!(labels.len(), 5, "{labels:?}");
    assert!(labels.contains("float8_from_mixed_bfloat16 (blockwise)"));
}
