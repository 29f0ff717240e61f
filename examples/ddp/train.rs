//! One rank's run: train the GPT on this rank's shard, checkpoint, compare parameters.

use std::sync::Arc;
use std::time::Instant;

use burn::backend::Autodiff;
use burn::data::dataloader::batcher::Batcher;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamW, AdamWConfig, GradientsParams};
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor};
use burn_amp::collective::{Collective, MpiCollective};
use burn_amp::{LossScaleConfig, LossScaleOptimizer, MixedPrecision, with_policy};

use crate::Options;
use crate::checkpoint::{self, TrainState};
use crate::config::TrainConfig;
use crate::data::{self, Rng, TextBatcher};
use crate::model::Gpt;

/// AdamW over the GPT under `MixedPrecision<Autodiff<R>>`.
type Adam<R> =
    OptimizerAdaptor<AdamW, Gpt<MixedPrecision<Autodiff<R>>>, MixedPrecision<Autodiff<R>>>;

/// The seed every rank's model starts from.
const SEED: u64 = 42;

/// FNV-1a over every parameter's values, in visit order (not the record's bytes: parameter
/// ids are drawn per process): enough to tell two parameter sets apart.
struct Digest(u64);

impl<B: Backend> ModuleVisitor<B> for Digest {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let data = param.val().into_data();
        for b in data.as_bytes() {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

pub fn digest<B: Backend, M: Module<B>>(module: &M) -> u64 {
    let mut digest = Digest(0xcbf2_9ce4_8422_2325);
    module.visit(&mut digest);
    digest.0
}

/// The batch of `rank` at `step`: a function of both only, so a resumed run draws the same.
fn starts(rank: usize, step: usize, config: &TrainConfig, text_len: usize) -> Vec<usize> {
    let mut rng = Rng(SEED ^ ((rank as u64) << 40) ^ (step as u64).wrapping_mul(0x1000_0001));
    data::random_starts(&mut rng, text_len, config.model.seq_len, config.batch_size)
}

/// Trains on `R` (the raw backend under `MixedPrecision<Autodiff<R>>`) on `device`, the
/// step's reductions through `collective`; `group` (MPI) compares the final parameters.
pub fn run<R: Backend>(
    options: &Options,
    group: &Arc<MpiCollective>,
    collective: Arc<dyn Collective<R>>,
    device: R::Device,
) -> Result<(), String>
where
    R::Device: 'static,
{
    type B<R> = MixedPrecision<Autodiff<R>>;
    let config = TrainConfig::preset(&options.preset)?;
    let (rank, world) = (group.rank(), group.world_size());
    let corpus = data::load(&data::default_path(), config.model.seq_len)?;
    let (batcher, _) = TextBatcher::pair(&corpus, config.model.seq_len);
    let policy_name = options.policy.to_string();
    if rank == 0 {
        println!(
            "{world} replicas ({}), policy {policy_name}, preset {}, {} steps",
            MpiCollective::library_version(),
            options.preset,
            options.steps
        );
    }

    with_policy(options.policy, || -> Result<(), String> {
        // The same seed everywhere: every replica starts from the same parameters.
        <B<R> as Backend>::seed(&device, SEED);
        let mut model: Gpt<B<R>> = config.model.init(&device);
        let mut optim: LossScaleOptimizer<Adam<R>> = LossScaleConfig::new()
            .init_on(
                AdamWConfig::new().init::<B<R>, Gpt<B<R>>>(),
                core::slice::from_ref(&device),
            )
            .map_err(|e| e.to_string())?
            .with_collective::<R>(collective);
        let mut state = TrainState::new(
            policy_name.clone(),
            config.clone(),
            SEED,
            0,
            Rng(SEED),
            Vec::new(),
            Vec::new(),
        );
        if options.resume {
            let dir = &options.checkpoint_dir;
            let loaded = checkpoint::load::<B<R>, LossScaleOptimizer<Adam<R>>>(
                dir,
                &policy_name,
                &config,
                SEED,
                &device,
            )?
            .ok_or_else(|| format!("--resume: no checkpoint in {}", dir.display()))?;
            model = model.load_record(loaded.model);
            optim
                .try_load_record::<Gpt<B<R>>, B<R>>(loaded.optimizer)
                .map_err(|e| format!("checkpoint: {e}"))?;
            state = loaded.state;
            if rank == 0 {
                println!(
                    "resumed from step {}: loss scale {}, {} steps skipped so far",
                    state.step,
                    optim.loss_scale(),
                    optim.skipped_steps()
                );
            }
        }
        let started = Instant::now();
        for step in state.step..options.steps {
            let failing = options.fail_rank.unwrap_or(world - 1);
            if options.fail_at == Some(step) && rank == failing {
                eprintln!("rank {rank}: exiting at step {step} (--fail-at)");
                std::process::exit(3);
            }
            if config.model.dropout > 0.0 {
                <B<R> as Backend>::seed(&device, SEED ^ (step * world + rank) as u64);
            }
            let starts = starts(rank, step, &config, corpus.train.len());
            let batch = <TextBatcher as Batcher<B<R>, _, _>>::batch(&batcher, starts, &device);
            let loss = model.loss(batch);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            let loss = loss.into_scalar().elem::<f32>();
            state.train_losses.push(loss);
            state.step = step + 1;
            model = optim
                .try_step(config.lr_at(step), model, grads)
                .map_err(|e| e.to_string())?;
            if rank == 0 && (step + 1) % options.checkpoint_every == 0 {
                checkpoint::save(&options.checkpoint_dir, &model, &optim, &state)?;
            }
            if rank == 0 && (step % 10 == 0 || step + 1 == options.steps) {
                println!(
                    "step {step:>4}  loss {loss:.4}  (rank 0's shard)  scale {}  skipped {}  {:.1} s",
                    optim.loss_scale(),
                    optim.skipped_steps(),
                    started.elapsed().as_secs_f32()
                );
            }
        }
        drop(optim);
        compare(group, digest(&model))
    })
}

/// Checks that every rank holds the same parameters: the digest's four 16-bit parts, each
/// exact in f32, have the same maximum and minimum over the ranks only if all are equal.
fn compare(group: &MpiCollective, digest: u64) -> Result<(), String> {
    let parts: Vec<f32> = (0..4)
        .map(|i| ((digest >> (16 * i)) & 0xffff) as f32)
        .collect();
    // The maxima of the parts and of their negations (minus the minima), in one call.
    let both: Vec<f32> = parts
        .iter()
        .copied()
        .chain(parts.iter().map(|p| -p))
        .collect();
    let reduced = group.all_reduce_max_host(both).map_err(|e| e.to_string())?;
    let (max, negated_min) = reduced.split_at(parts.len());
    let min: Vec<f32> = negated_min.iter().map(|p| -p).collect();
    if max != min {
        return Err(format!(
            "the replicas' parameters differ (this rank's digest {digest:016x})"
        ));
    }
    if group.rank() == 0 {
        println!(
            "parameters identical on {} replicas (digest {digest:016x})",
            group.world_size()
        );
    }
    Ok(())
}
