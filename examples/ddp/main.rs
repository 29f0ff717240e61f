//! Data-parallel training under MPI: the GPT example's model, one replica per MPI process,
//! each on its own shard of Shakespeare, the gradients averaged by burn-amp's
//! `LossScaleOptimizer` through an `MpiCollective`.
//!
//! ```text
//! cargo build --release --features mpi --example ddp
//! mpirun -n 2 target/release/examples/ddp --policy mixed_float16 --steps 60
//! ```
//!
//! (`srun` works the same way on a Slurm cluster; as root add `--allow-run-as-root`, and with
//! more ranks than cores `--oversubscribe`.) Rank 0 writes a checkpoint every
//! `--checkpoint-every` steps (the GPT example's format): the model, the whole
//! `LossScaleOptimizer` record (AdamW's moments, the loss scale and its counters, FP8
//! histories) and the step with rank 0's losses; `--resume` continues from it on
//! every rank, bit for bit. At the end the ranks compare their parameters' digests and rank 0
//! prints "parameters identical on N replicas". `--fail-at STEP --fail-rank R` makes rank R
//! exit at STEP: mpirun then ends the job and names the rank (a rank that hangs instead makes
//! the others fail after `--timeout`, naming the step).
//!
//! `--bench-allreduce` times instead the gradient bucket's all-reduce through the collective
//! against a bare `MPI_Allreduce` of the same bytes, alternately (`--write FILE` records the
//! table between markers).

mod bench;
#[path = "../gpt/checkpoint.rs"]
mod checkpoint;
#[path = "../common/cli.rs"]
#[allow(dead_code)]
mod cli;
#[path = "../gpt/config.rs"]
#[allow(dead_code)]
mod config;
#[path = "../gpt/data.rs"]
#[allow(dead_code)]
mod data;
#[path = "../gpt/model.rs"]
#[allow(dead_code)]
mod model;
#[path = "../common/section.rs"]
#[allow(dead_code)]
mod section;
mod train;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use burn::backend::Flex;
use burn_amp::Policy;
use burn_amp::collective::{Collective, MpiCollective};

const USAGE: &str = "\
usage: mpirun -n N ddp [--policy P] [--steps S] [--preset tiny|cpu] [--timeout SECONDS]
           [--checkpoint-dir DIR] [--checkpoint-every K] [--resume]
           [--fail-at STEP --fail-rank R] [--backend flex|cuda]
       mpirun -n N ddp --bench-allreduce [--preset tiny|cpu] [--write FILE]

  --policy P            a burn-amp policy (default mixed_float16)
  --steps S             optimizer steps in all, a resumed run's included (default 60)
  --preset NAME         the GPT example's model preset (default tiny)
  --timeout SECONDS     how long a collective call waits for the other ranks (default 60)
  --checkpoint-dir DIR  where rank 0 writes checkpoints (default target/ddp-checkpoint)
  --checkpoint-every K  steps between checkpoints (default 20)
  --resume              continue from the checkpoint in --checkpoint-dir
  --fail-at STEP        rank --fail-rank (default: the last) exits at STEP
  --backend NAME        flex (default: MPI reduces on the host) or cuda (one GPU per rank,
                        NCCL reduces on the devices; a build with --features nccl)
  --bench-allreduce     time the gradient bucket's all-reduce against a bare MPI_Allreduce
  --write FILE          with --bench-allreduce: write the table into FILE between markers";

/// What every rank of a run is told.
#[derive(Clone, Debug)]
pub struct Options {
    pub policy: Policy,
    pub steps: usize,
    pub preset: String,
    pub timeout: Duration,
    pub checkpoint_dir: PathBuf,
    pub checkpoint_every: usize,
    pub resume: bool,
    pub fail_at: Option<usize>,
    pub fail_rank: Option<usize>,
    pub bench: bool,
    pub write: Option<PathBuf>,
    pub cuda: bool,
}

fn parse(args: Vec<String>) -> Result<Options, String> {
    let mut options = Options {
        policy: Policy::mixed_float16(),
        steps: 60,
        preset: "tiny".into(),
        timeout: Duration::from_secs(60),
        checkpoint_dir: PathBuf::from("target/ddp-checkpoint"),
        checkpoint_every: 20,
        resume: false,
        fail_at: None,
        fail_rank: None,
        bench: false,
        write: None,
        cuda: false,
    };
    let mut args = args.into_iter();
    let number = |flag: &str, value: Option<String>| -> Result<usize, String> {
        let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
        value
            .parse()
            .map_err(|_| format!("{flag}: {value:?} is not a number"))
    };
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--policy" => {
                let name = args.next().ok_or("--policy needs a value")?;
                options.policy = name.parse().map_err(|e| format!("--policy: {e}"))?;
            }
            "--steps" => options.steps = number(&flag, args.next())?,
            "--preset" => options.preset = args.next().ok_or("--preset needs a value")?,
            "--timeout" => {
                options.timeout = Duration::from_secs(number(&flag, args.next())? as u64)
            }
            "--checkpoint-dir" => {
                options.checkpoint_dir = args.next().ok_or("--checkpoint-dir needs a value")?.into()
            }
            "--checkpoint-every" => options.checkpoint_every = number(&flag, args.next())?,
            "--resume" => options.resume = true,
            "--fail-at" => options.fail_at = Some(number(&flag, args.next())?),
            "--fail-rank" => options.fail_rank = Some(number(&flag, args.next())?),
            "--bench-allreduce" => options.bench = true,
            "--backend" => match args.next().as_deref() {
                Some("flex") => options.cuda = false,
                Some("cuda") => options.cuda = true,
                other => return Err(format!("--backend: {other:?}; use flex or cuda")),
            },
            "--write" => options.write = Some(args.next().ok_or("--write needs a file")?.into()),
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if options.steps == 0 || options.checkpoint_every == 0 {
        return Err("--steps and --checkpoint-every must be at least 1".into());
    }
    if options.fail_rank.is_some() && options.fail_at.is_none() {
        return Err("--fail-rank needs --fail-at".into());
    }
    config::TrainConfig::preset(&options.preset)?;
    Ok(options)
}

fn main() {
    let options = cli::parsed_or_exit(parse(std::env::args().skip(1).collect()), USAGE);
    let group = cli::succeeded_or_exit(
        MpiCollective::world(options.timeout).map_err(|e| format!("MPI: {e}")),
    );
    let group = Arc::new(group);
    let result = if options.bench {
        bench::run(&options, &group)
    } else if options.cuda {
        on_cuda(&options, &group)
    } else {
        let collective = group.clone() as Arc<dyn Collective<Flex>>;
        train::run::<Flex>(&options, &group, collective, Default::default())
    };
    match result {
        Ok(()) => {
            // MPI_Finalize (the last reference) before exiting: Open MPI counts a rank that
            // exits without it as failed.
            drop(group);
        }
        Err(message) => {
            // The communicator may be broken: exit without finalising; mpirun ends the job.
            eprintln!("rank {}: error: {message}", group.rank());
            std::process::exit(2);
        }
    }
}

/// One GPU per rank (rank modulo the GPUs here), the gradients reduced by NCCL on the
/// devices, its id sent over MPI.
#[cfg(feature = "nccl")]
fn on_cuda(options: &Options, group: &Arc<MpiCollective>) -> Result<(), String> {
    use burn::backend::Cuda;
    use burn::backend::cuda::CudaDevice;
    use burn::tensor::backend::Backend;
    use burn_amp::collective::NcclCollective;

    let gpus = <Cuda as Backend>::device_count(0).max(1);
    let device = CudaDevice::new(group.rank() % gpus);
    burn_amp::probe_backend::<Cuda>(&device).map_err(|e| e.to_string())?;
    let nccl = NcclCollective::from_mpi(group, &device, options.timeout)
        .map_err(|e| format!("NCCL: {e}"))?;
    train::run::<Cuda>(options, group, Arc::new(nccl), device)
}

#[cfg(not(feature = "nccl"))]
fn on_cuda(_: &Options, _: &Arc<MpiCollective>) -> Result<(), String> {
    Err("--backend cuda: this build has no NCCL; rebuild with `--features nccl`".into())
}
