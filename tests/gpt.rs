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

/// A scale too large for this model's f16 gradients (2^28) overflows at first: steps are
/// skipped and the scale halves; a growth interval of 6 then raises it again, so it changes
/// more than once before the interruption. (burn-amp's fused matmuls on Flex sum and write
/// weight gradients in f32, so 2^20, which overflowed the f16 weight gradients before,
/// now fits: it is the f16 activation gradients that overflow.)
fn overflowing(dir: PathBuf) -> Options {
    Options {
        train: TrainConfig {
            steps: 30,
            ..TrainConfig::tiny()
        },
        loss_scale: LossScaleConfig::new()
            .with_initial_scale(2f32.powi(28))
            .with_max_scale(2f32.powi(28))
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

/// Every float parameter of `model`, in visit order.
fn gpt_params<B: burn::tensor::backend::Backend>(model: &model::Gpt<B>) -> Vec<f32> {
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::tensor::Tensor;
    struct Collect(Vec<f32>);
    impl<B: burn::tensor::backend::Backend> ModuleVisitor<B> for Collect {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            let data = param.val().into_data().convert::<f32>();
            self.0.extend(data.to_vec::<f32>().unwrap());
        }
    }
    let mut collect = Collect(Vec::new());
    model.visit(&mut collect);
    collect.0
}

/// A copy of `grads` (the same tensors under the same ids), for a second optimizer.
fn dup_grads<B: burn::tensor::backend::AutodiffBackend>(
    model: &model::Gpt<B>,
    grads: &burn::optim::GradientsParams,
) -> burn::optim::GradientsParams {
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::optim::GradientsParams;
    use burn::tensor::Tensor;
    struct Dup<'a>(&'a GradientsParams, GradientsParams);
    impl<B: burn::tensor::backend::AutodiffBackend> ModuleVisitor<B> for Dup<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
            if let Some(g) = self.0.get::<B::InnerBackend, D>(param.id) {
                self.1.register::<B::InnerBackend, D>(param.id, g);
            }
        }
    }
    let mut dup = Dup(grads, GradientsParams::new());
    model.visit(&mut dup);
    dup.1
}

/// `FusedAdamW` against Burn's `AdamW` with the example's hyper-parameters (betas
/// 0.9/0.99, weight decay 0.1, gradient norm clipped at 1) over 200 steps of the tiny GPT
/// (the example's batches and learning-rate schedule), step-locked: each step both
/// optimizers update the same parameters with the same gradients (those of the model Burn's
/// optimizer trains), so their moments see the same history and a difference cannot grow
/// through the model. After every step: on Flex (burn-amp's CPU kernel, `mixed_bfloat16`)
/// the same bits; on wgpu (the CubeCL kernel, `float32`) within 2^-19 of the largest
/// parameter (a few f32 roundings: the GPU may fuse a multiply-add, and its square root and
/// division need not round correctly).
fn fused_follows_adamw<B: burn::tensor::backend::AutodiffBackend>(
    device: &B::Device,
    policy: Policy,
    exact: bool,
) {
    use burn::data::dataloader::batcher::Batcher;
    use burn::grad_clipping::GradientClippingConfig;
    use burn::optim::{AdamWConfig, GradientsParams, Optimizer};
    type M<B> = burn_amp::MixedPrecision<B>;
    let _serial = serial();
    M::<B>::set_policy(device, policy).unwrap();
    let config = TrainConfig::tiny();
    let corpus = data::load(&data::default_path(), config.model.seq_len).unwrap();
    let (batcher, _) = data::TextBatcher::pair(&corpus, config.model.seq_len);
    let mut rng = data::Rng(7);
    let start = config.model.init::<M<B>>(device);
    let mut burns = AdamWConfig::new()
        .with_beta_2(0.99)
        .with_weight_decay(0.1)
        .with_grad_clipping(Some(GradientClippingConfig::Norm(1.0)))
        .init::<M<B>, model::Gpt<M<B>>>();
    let mut fused = custom_loop::adamw().init::<M<B>, model::Gpt<M<B>>>();
    let bound = if exact { 0.0 } else { 2f32.powi(-19) };
    let mut model = start.clone();
    for step in 0..200 {
        let starts = data::random_starts(
            &mut rng,
            corpus.train.len(),
            config.model.seq_len,
            config.batch_size,
        );
        let batch = <data::TextBatcher as Batcher<M<B>, _, _>>::batch(&batcher, starts, device);
        let grads = GradientsParams::from_grads(model.loss(batch).backward(), &model);
        let same = dup_grads(&model, &grads);
        let lr = config.lr_at(step.min(config.steps));
        let theirs = burns.step(lr, model.clone(), grads);
        let ours = fused.step(lr, model, same);
        let (a, b) = (gpt_params(&theirs), gpt_params(&ours));
        let largest = a.iter().fold(0f32, |m, x| m.max(x.abs()));
        let diff = a
            .iter()
            .zip(&b)
            .fold(0f32, |m, (x, y)| m.max((x - y).abs()))
            / largest;
        assert!(diff <= bound, "{policy}, step {step}: {diff:e} > {bound:e}");
        model = theirs;
    }
    M::<B>::set_policy(device, Policy::float32()).unwrap();
    assert_ne!(gpt_params(&start), gpt_params(&model), "it trained");
}

#[test]
fn fused_adamw_follows_burns_adamw_for_200_tiny_gpt_steps_on_flex() {
    fused_follows_adamw::<Autodiff<Flex>>(&Default::default(), Policy::mixed_bfloat16(), true);
}

#[test]
fn fused_adamw_follows_burns_adamw_for_200_tiny_gpt_steps_on_wgpu() {
    use burn::backend::Wgpu;
    fused_follows_adamw::<Autodiff<Wgpu>>(&Default::default(), Policy::float32(), false);
}

/// Three steps of the tiny GPT under `spec` with the example's loop (`--cost`): burn-amp's
/// reads of each step (the example's `LossScaleOptimizer<FusedAdamW>` decides any skip on
/// the device) and the loop's own (its logged loss).
fn gpt_reads<B: burn::tensor::backend::AutodiffBackend>(spec: &str) -> (Vec<u64>, Vec<u64>) {
    let policy: Policy = spec.parse().unwrap_or_else(|e| panic!("{spec}: {e}"));
    let options = Options {
        train: TrainConfig {
            steps: 3,
            ..TrainConfig::tiny()
        },
        sample_len: 0,
        cost: true,
        ..tiny(policy)
    };
    let summary =
        run::run::<B>(Default::default(), &options).unwrap_or_else(|e| panic!("{spec}: {e}"));
    assert!(summary.train_losses.iter().all(|l| l.is_finite()), "{spec}");
    assert_eq!(summary.skipped_steps, 0, "{spec}");
    let own = summary.costs.iter().map(|c| c.reads().burn_amp).collect();
    let user = summary.costs.iter().map(|c| c.reads().user).collect();
    (own, user)
}

/// Every policy and FP8 scaling the GPT trains under, over a compute dtype.
fn gpt_specs(compute: &str) -> Vec<String> {
    let base = format!("params=float32,compute={compute},output=float32");
    [
        "",
        ",fp8=tensor",
        ",fp8=delayed",
        ",fp8=bias",
        ",fp8=tensor,format=auto",
        ",grads=aps",
    ]
    .iter()
    .map(|extra| format!("{base}{extra}"))
    .collect()
}

#[test]
fn a_gpt_step_reads_nothing_back_for_burn_amp_under_every_policy_on_flex() {
    let _serial = serial();
    for compute in ["float32", "bfloat16", "float16"] {
        for spec in gpt_specs(compute) {
            if compute == "float32" && spec.contains("fp8") {
                continue;
            }
            let (own, user) = gpt_reads::<Autodiff<Flex>>(&spec);
            assert_eq!(own, vec![0; 3], "{spec}: burn-amp's reads");
            assert_eq!(user, vec![1; 3], "{spec}: the loop's logged loss");
        }
    }
}

/// Lavapipe runs f16, not bf16 (WGSL): the float16 policies.
#[test]
fn a_gpt_step_reads_nothing_back_for_burn_amp_under_every_policy_on_wgpu() {
    use burn::backend::Wgpu;
    let _serial = serial();
    for spec in gpt_specs("float16") {
        let (own, user) = gpt_reads::<Autodiff<Wgpu>>(&spec);
        assert_eq!(own, vec![0; 3], "{spec}: burn-amp's reads");
        assert_eq!(user, vec![1; 3], "{spec}: the loop's logged loss");
    }
}
