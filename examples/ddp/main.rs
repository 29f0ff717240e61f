//! Data-parallel training in several processes on this machine: the GPT example's model, one
//! replica per process, each on its own shard of Shakespeare, the gradients averaged by
//! burn-amp's `LossScaleOptimizer` through a `TcpCollective`.
//!
//! ```text
//! cargo run --release --example ddp -- --workers 2 --policy mixed_float16
//! ```
//!
//! The launcher (this program without `--replica`) picks a free port for replica 0 to listen
//! on, runs itself once per replica, and waits. A replica that fails (or whose peer
//! died or hangs: every collective call is bounded by `--timeout`) ends with an error; the
//! launcher then ends the others by their PIDs and reports which one failed. Replica 0 writes
//! a checkpoint every `--checkpoint-every` steps, atomically (a new file renamed over the
//! old), so a checkpoint already written stays valid whatever happens later. At the end each
//! replica prints a digest of its parameters: the launcher checks they are all the same.

#[path = "../common/cli.rs"]
#[allow(dead_code)]
mod cli;
#[path = "../gpt/config.rs"]
#[allow(dead_code)]
mod config;
#[path = "../gpt/data.rs"]
#[allow(dead_code)]
mod data;
mod launcher;
#[path = "../gpt/model.rs"]
#[allow(dead_code)]
mod model;
mod replica;

use std::path::PathBuf;
use std::time::Duration;

use burn_amp::Policy;

const USAGE: &str = "\
usage: ddp [--workers N] [--policy P] [--steps S] [--preset tiny|cpu] [--timeout SECONDS]
           [--checkpoint-dir DIR] [--checkpoint-every K] [--fail-at STEP]

  --workers N           replica processes (default 2)
  --policy P            a burn-amp policy (default mixed_float16)
  --steps S             optimizer steps (default: 60)
  --preset NAME         the GPT example's model preset (default tiny)
  --timeout SECONDS     how long a collective call waits for the peers (default 60)
  --checkpoint-dir DIR  where replica 0 writes checkpoints (default target/ddp-checkpoint)
  --checkpoint-every K  steps between checkpoints (default 20)
  --fail-at STEP        the last replica exits at STEP (shows what a dead peer does)";

/// What every process of a run is told.
#[derive(Clone, Debug)]
pub struct Options {
    pub workers: usize,
    pub policy: Policy,
    pub steps: usize,
    pub preset: String,
    pub timeout: Duration,
    pub checkpoint_dir: PathBuf,
    pub checkpoint_every: usize,
    pub fail_at: Option<usize>,
}

/// Where a replica process meets the others.
#[derive(Clone, Debug)]
pub struct Seat {
    pub rank: usize,
    /// The port replica 0 listens on (localhost).
    pub root_port: u16,
}

fn parse(args: Vec<String>) -> Result<(Options, Option<Seat>), String> {
    let mut options = Options {
        workers: 2,
        policy: Policy::mixed_float16(),
        steps: 60,
        preset: "tiny".into(),
        timeout: Duration::from_secs(60),
        checkpoint_dir: PathBuf::from("target/ddp-checkpoint"),
        checkpoint_every: 20,
        fail_at: None,
    };
    let mut seat: Option<Seat> = None;
    let mut args = args.into_iter();
    let number = |flag: &str, value: Option<String>| -> Result<usize, String> {
        let value = value.ok_or_else(|| format!("{flag} needs a value"))?;
        value
            .parse()
            .map_err(|_| format!("{flag}: {value:?} is not a number"))
    };
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--workers" => options.workers = number(&flag, args.next())?,
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
            "--fail-at" => options.fail_at = Some(number(&flag, args.next())?),
            // Set by the launcher for the processes it starts.
            "--replica" => {
                let rank = number(&flag, args.next())?;
                let root_port = u16::try_from(number("--replica's port", args.next())?)
                    .map_err(|_| "--replica: the port must be below 65536".to_string())?;
                seat = Some(Seat { rank, root_port });
            }
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if options.workers == 0 || options.steps == 0 || options.checkpoint_every == 0 {
        return Err("--workers, --steps and --checkpoint-every must be at least 1".into());
    }
    config::TrainConfig::preset(&options.preset)?;
    Ok((options, seat))
}

fn main() {
    let (options, seat) = cli::parsed_or_exit(parse(std::env::args().skip(1).collect()), USAGE);
    cli::succeeded_or_exit(match seat {
        None => launcher::run(&options),
        Some(seat) => replica::run(&options, &seat),
    });
}
