//! The training loop: forward, `loss.backward()`, fused AdamW step through the
//! `LossScaleOptimizer`; validation every `eval_every` steps; checkpoints and `--resume`.

use std::time::Instant;

use burn::data::dataloader::batcher::Batcher;
use burn::module::{AutodiffModule, Module};
use burn::optim::grad_clipping::GradientClippingConfig;
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::ElementConversion;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_amp::{FusedAdamW, FusedAdamWConfig, LossScaleOptimizer, MixedPrecision};

use crate::checkpoint::{self, TrainState};
use crate::data::{self, Corpus, Rng, TextBatcher};
use crate::generate;
use crate::model::Gpt;
use crate::progress::{Progress, Status};
use crate::run::{Options, Summary, label};

/// AdamW as nanoGPT sets it for Shakespeare (betas 0.9/0.99, weight decay 0.1), with the
/// gradient norm clipped at 1: burn-amp's fused one (Burn's `AdamW` update, one pass per
/// parameter; its checkpoints are Burn's `AdamW` records).
pub fn adamw() -> FusedAdamWConfig {
    FusedAdamWConfig::new()
        .with_beta_2(0.99)
        .with_weight_decay(0.1)
        .with_grad_clipping(Some(GradientClippingConfig::Norm(1.0)))
}

/// AdamW behind the `LossScaleOptimizer`, as both loops train.
pub type Optim<B> = LossScaleOptimizer<FusedAdamW<Gpt<MixedPrecision<B>>, MixedPrecision<B>>>;

/// The optimizer of both loops, bound to `device`: every backward pass on it applies this
/// optimizer's loss scale.
pub fn optimizer<B: AutodiffBackend>(
    options: &Options,
    device: &B::Device,
) -> Result<Optim<B>, String> {
    options
        .loss_scale
        .clone()
        .init_on(
            adamw().init::<MixedPrecision<B>, Gpt<MixedPrecision<B>>>(),
            core::slice::from_ref(device),
        )
        .map_err(|e| e.to_string())
}

/// The mean loss over the fixed validation windows.
pub fn validation_loss<B: Backend>(
    model: &Gpt<B>,
    batcher: &TextBatcher,
    windows: &[Vec<usize>],
    device: &B::Device,
) -> f32 {
    let total: f64 = windows
        .iter()
        .map(|starts| {
            let batch = <TextBatcher as Batcher<B, _, _>>::batch(batcher, starts.clone(), device);
            model.loss(batch).into_scalar().elem::<f64>()
        })
        .sum();
    (total / windows.len() as f64) as f32
}

pub fn train<B: AutodiffBackend>(
    device: &B::Device,
    options: &Options,
    corpus: &Corpus,
) -> Result<Summary, String> {
    type M<B> = MixedPrecision<B>;
    type Inner<B> = <MixedPrecision<B> as AutodiffBackend>::InnerBackend;
    let config = &options.train;
    let seq_len = config.model.seq_len;
    let policy_name = options.policy.to_string();

    let mut model: Gpt<M<B>> = config.model.init(device);
    // Bound to this device: every backward pass on it applies this optimizer's loss scale.
    let mut optim = optimizer::<B>(options, device)?;
    let mut state = TrainState::new(
        policy_name.clone(),
        config.clone(),
        options.seed,
        0,
        Rng(options.seed),
        Vec::new(),
        Vec::new(),
    );
    if options.resume {
        match checkpoint::load::<M<B>, Optim<B>>(
            &options.checkpoint_dir,
            &policy_name,
            config,
            options.seed,
            device,
        )? {
            Some(loaded) => {
                model = model.load_record(loaded.model);
                optim
                    .try_load_record::<Gpt<M<B>>, M<B>>(loaded.optimizer)
                    .map_err(|e| format!("checkpoint: {e}"))?;
                state = loaded.state;
                println!(
                    "resumed from step {} ({}): loss scale {}, {} steps skipped so far",
                    state.step,
                    options.checkpoint_dir.display(),
                    optim.loss_scale(),
                    optim.skipped_steps()
                );
            }
            None => println!(
                "--resume: no checkpoint in {}; starting from step 0",
                options.checkpoint_dir.display()
            ),
        }
    }

    let (train_batcher, valid_batcher) = TextBatcher::pair(corpus, seq_len);
    let windows = corpus.validation_windows(config);
    let mut progress = Progress::new(config.steps);
    let scaled = options.policy.needs_loss_scaling();
    let (mut scale_changes, mut last_scale) = (0, optim.loss_scale());
    let (mut tokens, mut seconds) = (0usize, 0.0f64);
    let mut costs = Vec::new();
    crate::alloc::reset_peak();

    while state.step < config.steps {
        if options.stop_after == Some(state.step) {
            progress.clear();
            println!("stopped after step {} (--stop-after)", state.step);
            break;
        }
        let start = Instant::now();
        if config.model.dropout > 0.0 {
            // Dropout's masks are a function of the step, so a resumed run draws the same.
            <M<B> as Backend>::seed(device, options.seed.wrapping_add(state.step as u64));
        }
        let starts = data::random_starts(
            &mut state.rng,
            corpus.train.len(),
            seq_len,
            config.batch_size,
        );
        let batch = <TextBatcher as Batcher<M<B>, _, _>>::batch(&train_batcher, starts, device);
        let lr = config.lr_at(state.step);
        let train_step = |model: Gpt<M<B>>| {
            let loss = model.loss(batch);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            let loss = loss.into_scalar().elem::<f32>();
            (optim.step(lr, model, grads), loss)
        };
        let (next, loss) = if options.cost {
            let (out, cost) = burn_amp::cost::record(|| train_step(model));
            costs.push(cost);
            out
        } else {
            train_step(model)
        };
        model = next;
        seconds += start.elapsed().as_secs_f64();
        tokens += config.tokens_per_step();
        state.step += 1;
        state.train_losses.push(loss);
        if optim.loss_scale() != last_scale {
            scale_changes += 1;
            last_scale = optim.loss_scale();
        }

        let recent = &state.train_losses[state.train_losses.len().saturating_sub(20)..];
        let recent = recent.iter().map(|&l| l as f64).sum::<f64>() / recent.len() as f64;
        if state.step.is_multiple_of(config.eval_every) || state.step == config.steps {
            let valid =
                validation_loss::<Inner<B>>(&model.valid(), &valid_batcher, &windows, device);
            state.valid_losses.push((state.step, valid));
            progress.validation(state.step, recent, valid);
        }
        if options.checkpoint_every > 0 && state.step.is_multiple_of(options.checkpoint_every) {
            checkpoint::save(&options.checkpoint_dir, &model, &optim, &state)?;
        }
        progress.update(&Status {
            step: state.step,
            loss: recent,
            tokens_per_second: tokens as f64 / seconds.max(1e-9),
            loss_scale: scaled.then(|| optim.loss_scale()),
            skipped: optim.skipped_steps(),
        });
    }
    progress.clear();
    let peak_heap_bytes = crate::alloc::peak();
    let tokens_per_second = tokens as f64 / seconds.max(1e-9);

    let sample = if options.sample_len > 0 && state.step == config.steps {
        generate::sample::<Inner<B>>(
            &model.valid(),
            options.sample_len,
            seq_len,
            options.seed,
            device,
        )
    } else {
        String::new()
    };
    let summary = Summary {
        policy: options.policy,
        train_losses: state.train_losses,
        valid_losses: state.valid_losses,
        tokens_per_second,
        peak_heap_bytes,
        skipped_steps: optim.skipped_steps(),
        loss_scale: scaled.then(|| optim.loss_scale()),
        scale_changes,
        costs,
        sample,
    };
    if state.step == config.steps {
        println!(
            "{}: final validation loss {:.6}  {:.0} tok/s  peak heap {:.0} MiB  skipped {}  loss scale {} ({} changes)",
            label(&options.policy),
            summary.final_valid_loss(),
            tokens_per_second,
            peak_heap_bytes as f64 / (1 << 20) as f64,
            summary.skipped_steps,
            summary.loss_scale.map_or("-".into(), |s| s.to_string()),
            summary.scale_changes
        );
        if !summary.sample.is_empty() {
            println!(
                "--- sample ({}) ---\n{}\n---",
                label(&options.policy),
                summary.sample
            );
        }
    }
    let _ = <M<B> as Backend>::sync(device);
    Ok(summary)
}
