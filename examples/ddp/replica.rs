//! One replica: join the run, train the GPT on this replica's shard, checkpoint, report.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use burn::backend::{Autodiff, Flex};
use burn::data::dataloader::batcher::Batcher;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::{AdamWConfig, GradientsParams};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::backend::Backend;
use burn::tensor::{ElementConversion, Tensor};
use burn_amp::collective::{Collective, TcpCollective};
use burn_amp::{LossScaleConfig, LossScaleOptimizer, MixedPrecision, with_policy};

use crate::config::TrainConfig;
use crate::data::{self, Rng, TextBatcher};
use crate::model::Gpt;
use crate::{Options, Seat};

type Raw = Flex;
type B = MixedPrecision<Autodiff<Raw>>;

/// Where replica `rank` leaves the digest of its final parameters.
pub fn digest_path(options: &Options, rank: usize) -> PathBuf {
    options.checkpoint_dir.join(format!("digest-{rank}.txt"))
}

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

fn digest<B: Backend, M: Module<B>>(module: &M) -> u64 {
    let mut digest = Digest(0xcbf2_9ce4_8422_2325);
    module.visit(&mut digest);
    digest.0
}

/// Writes `bytes` to `path` through a temporary file renamed over it: a reader sees the old
/// file or the new one, never half of one.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

pub fn run(options: &Options, seat: &Seat) -> Result<(), String> {
    let config = TrainConfig::preset(&options.preset)?;
    let device = Default::default();
    let root = format!("127.0.0.1:{}", seat.root_port)
        .parse()
        .map_err(|e| format!("{e}"))?;
    let replica = TcpCollective::join(seat.rank, options.workers, root, options.timeout)
        .map_err(|e| e.to_string())?;
    let replica = Arc::new(replica);
    std::fs::create_dir_all(&options.checkpoint_dir).map_err(|e| e.to_string())?;
    let corpus = data::load(&data::default_path(), config.model.seq_len)?;
    let (batcher, _) = TextBatcher::pair(&corpus, config.model.seq_len);
    let rank = seat.rank;

    with_policy(options.policy, || -> Result<(), String> {
        // The same seed everywhere: every replica starts from the same parameters.
        <B as Backend>::seed(&device, 42);
        let mut model: Gpt<B> = config.model.init(&device);
        let mut optim: LossScaleOptimizer<_> = LossScaleConfig::new()
            .init_on(
                AdamWConfig::new().init::<B, Gpt<B>>(),
                core::slice::from_ref(&device),
            )
            .map_err(|e| e.to_string())?
            .with_collective::<Raw>(replica as Arc<dyn Collective<Raw>>);
        // Each replica its own stream of windows: its shard of the text.
        let mut rng = Rng(1000 + rank as u64);
        let started = Instant::now();
        for step in 0..options.steps {
            if options.fail_at == Some(step) && rank + 1 == options.workers {
                eprintln!("replica {rank}: exiting at step {step} (--fail-at)");
                std::process::exit(3);
            }
            let starts = data::random_starts(
                &mut rng,
                corpus.train.len(),
                config.model.seq_len,
                config.batch_size,
            );
            let batch = <TextBatcher as Batcher<B, _, _>>::batch(&batcher, starts, &device);
            let loss = model.loss(batch);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            let loss = loss.into_scalar().elem::<f32>();
            model = optim
                .try_step(config.lr_at(step), model, grads)
                .map_err(|e| format!("replica {rank}, step {step}: {e}"))?;
            if rank == 0 && (step + 1) % options.checkpoint_every == 0 {
                let bytes = BinBytesRecorder::<FullPrecisionSettings>::default()
                    .record(model.clone().into_record(), ())
                    .map_err(|e| e.to_string())?;
                write_atomically(&options.checkpoint_dir.join("model.bin"), &bytes)?;
            }
            if rank == 0 && (step % 10 == 0 || step + 1 == options.steps) {
                println!(
                    "step {step:>4}  loss {loss:.4}  (replica 0's shard)  scale {}  skipped {}  {:.1} s",
                    optim.loss_scale(),
                    optim.skipped_steps(),
                    started.elapsed().as_secs_f32()
                );
            }
        }
        std::fs::write(
            digest_path(options, rank),
            format!("{:016x}\n", digest(&model)),
        )
        .map_err(|e| e.to_string())
    })
}
