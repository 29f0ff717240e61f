//! A GPT-style byte-level language model trained on Shakespeare under burn-amp's policies.
//!
//! ```sh
//! cargo run --release --example gpt                          # mixed_bfloat16, Flex, ~minutes
//! cargo run --release --example gpt -- --compare             # every policy, one PNG + table
//! cargo run --release --example gpt -- --policy mixed_float16 --checkpoint-every 250
//! cargo run --release --example gpt -- --policy mixed_float16 --checkpoint-every 250 --resume
//! cargo run --release --example gpt -- --learner             # burn-train's Learner + dashboard
//! cargo run --release --features cuda --example gpt -- --backend cuda --preset gpu --compare
//! ```

#[path = "../bench/alloc.rs"]
mod alloc;
mod checkpoint;
#[path = "../common/cli.rs"]
mod cli;
mod compare;
mod config;
mod custom_loop;
mod data;
mod generate;
mod learner;
mod model;
#[path = "../common/png.rs"]
mod png;
mod progress;
mod run;
#[path = "../common/section.rs"]
mod section;

use std::path::PathBuf;

use burn::tensor::backend::AutodiffBackend;

use cli::{BackendKind, Job, number};
use config::TrainConfig;
use run::{Mode, Options, Summary};

/// Counts heap bytes for the peak-memory column (Flex keeps its tensors on the heap).
#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

const USAGE: &str = "\
usage: gpt [--policy NAME | --compare] [--backend flex|wgpu|cuda|ndarray] [--preset cpu|gpu|tiny]
           [--steps N] [--batch-size N] [--lr X] [--seed N] [--eval-every N] [--learner]
           [--checkpoint-every N] [--checkpoint-dir DIR] [--resume] [--stop-after N]
           [--data FILE] [--plot FILE] [--out FILE] [--sample-len N] [--cost]

  --policy            a dtype policy: float32, mixed_bfloat16 (default), mixed_float16,
                      float8_from_mixed_bfloat16, \"float8_from_mixed_bfloat16\" with fp8=blockwise
                      as params=float32,compute=bfloat16,output=float32,fp8=blockwise, ...
  --compare           train float32, mixed_bfloat16, mixed_float16 and FP8 (per-tensor and
                      blockwise) one after the other with the same seed and batches, then
                      draw every loss curve and a table into --plot
  --backend           flex (default; CPU), wgpu, cuda (needs --features cuda), ndarray
  --preset            cpu (default: 4 layers, d_model 128, context 64, 2,000 steps),
                      gpu (12 layers, d_model 768, context 1,024), tiny (seconds; for tests)
  --learner           train with burn-train's Learner and its dashboard
  --checkpoint-every  write a checkpoint every N steps into --checkpoint-dir
                      (default target/gpt/checkpoints/<policy>)
  --resume            continue from the newest checkpoint: the same losses as a run never
                      interrupted
  --stop-after        stop after N steps, as if killed (to try --resume)
  --data              the text (default examples/data/tinyshakespeare/input.txt)
  --plot              where --compare draws (default guide/img/gpt-<preset>.png)
  --out               the Markdown file --compare writes its table into, between the
                      markers gpt-<preset> (default BENCHMARKS.md)
  --sample-len        bytes of text generated at the end (default 300)
  --cost              count what each training step costs (burn_amp::cost): print the last
                      step's table (ops by class and dtype, casts and their bytes, FP8
                      launches, reads back to the host) and every step's reads";

struct Cli {
    options: Options,
    backend: BackendKind,
    compare: bool,
    plot: PathBuf,
    checkpoint_dir: Option<PathBuf>,
    preset: String,
    /// Where `--compare` writes its table (between the `gpt-<preset>` markers).
    out: PathBuf,
    /// The command line, as the table's markers name it.
    command: String,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Cli, String> {
    let args: Vec<String> = args.collect();
    let command = format!(
        "cargo run --release{} --example gpt -- {}",
        if cfg!(feature = "cuda") {
            " --features cuda"
        } else {
            ""
        },
        args.join(" ")
    );
    let mut out = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("BENCHMARKS.md");
    let mut options = Options::default();
    let mut cli_train: Vec<(String, String)> = Vec::new();
    let mut preset = "cpu".to_string();
    let mut backend = BackendKind::Flex;
    let mut compare = false;
    let mut plot = None;
    let mut checkpoint_dir = None;
    let mut args = args.into_iter().peekable();
    while let Some(flag) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--policy" => {
                options.policy = value("--policy")?.parse().map_err(|e| format!("{e}"))?
            }
            "--compare" => compare = true,
            "--out" => out = PathBuf::from(value("--out")?),
            "--backend" => backend = value("--backend")?.parse()?,
            "--preset" => preset = value("--preset")?,
            "--steps" | "--batch-size" | "--lr" | "--eval-every" => {
                cli_train.push((flag.clone(), value(&flag)?))
            }
            "--seed" => options.seed = number("--seed", value("--seed")?)?,
            "--learner" => options.mode = Mode::Learner,
            "--cost" => options.cost = true,
            "--checkpoint-every" => {
                options.checkpoint_every =
                    number("--checkpoint-every", value("--checkpoint-every")?)?
            }
            "--checkpoint-dir" => checkpoint_dir = Some(PathBuf::from(value("--checkpoint-dir")?)),
            "--resume" => options.resume = true,
            "--stop-after" => {
                options.stop_after = Some(number("--stop-after", value("--stop-after")?)?)
            }
            "--data" => options.data = PathBuf::from(value("--data")?),
            "--plot" => plot = Some(PathBuf::from(value("--plot")?)),
            "--sample-len" => options.sample_len = number("--sample-len", value("--sample-len")?)?,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    options.train = TrainConfig::preset(&preset)?;
    // The guide shows each preset's curves from here.
    let plot = plot.unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("guide/img/gpt-{preset}.png"))
    });
    for (flag, value) in cli_train {
        let train = &mut options.train;
        match flag.as_str() {
            "--steps" => train.steps = number(&flag, value)?,
            "--batch-size" => train.batch_size = number(&flag, value)?,
            "--lr" => train.lr = number(&flag, value)?,
            _ => train.eval_every = number(&flag, value)?,
        }
    }
    options.train.check()?;
    if options.mode == Mode::Learner && (options.resume || options.checkpoint_every > 0 || compare)
    {
        return Err("--learner trains one policy without checkpoints; drop --resume, --checkpoint-every and --compare".into());
    }
    Ok(Cli {
        options,
        backend,
        compare,
        plot,
        checkpoint_dir,
        preset,
        out,
        command,
    })
}

/// `--cost`: the last step's table and the reads of every step.
fn print_costs(summary: &Summary) {
    let Some(last) = summary.costs.last() else {
        println!("--cost: no step was counted (the Learner path does not count)");
        return;
    };
    println!(
        "what the last training step cost under {}:\n{last}",
        run::label(&summary.policy)
    );
    let own: Vec<u64> = summary.costs.iter().map(|c| c.reads().burn_amp).collect();
    let user: Vec<u64> = summary.costs.iter().map(|c| c.reads().user).collect();
    let max = |v: &[u64]| v.iter().copied().max().unwrap_or(0);
    println!(
        "reads back to the host per step over {} steps: burn-amp's at most {}, the loop's \
         own (the logged loss) at most {}",
        own.len(),
        max(&own),
        max(&user)
    );
}

/// Each policy checkpoints into its own folder unless one was given.
fn checkpoint_dir(cli: &Cli, options: &Options) -> PathBuf {
    cli.checkpoint_dir.clone().unwrap_or_else(|| {
        let name = run::label(&options.policy).replace([' ', '(', ')', ',', '='], "_");
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("target/gpt/checkpoints")
            .join(name)
    })
}

impl Job for Cli {
    type Output = ();

    fn run<B: AutodiffBackend>(&self) -> Result<(), String> {
        train::<B>(self)
    }
}

fn train<B: AutodiffBackend>(cli: &Cli) -> Result<(), String> {
    if !cli.compare {
        let mut options = cli.options.clone();
        options.checkpoint_dir = checkpoint_dir(cli, &options);
        let summary = run::run::<B>(Default::default(), &options)?;
        if options.cost {
            print_costs(&summary);
        }
        return Ok(());
    }
    let mut runs: Vec<Summary> = Vec::new();
    for policy in run::compared_policies() {
        let mut options = cli.options.clone();
        options.policy = policy;
        options.checkpoint_dir = checkpoint_dir(cli, &options);
        match run::run::<B>(Default::default(), &options) {
            Ok(summary) => runs.push(summary),
            // A policy the device cannot run (bf16 on a WGSL device) is left out, said so.
            Err(message) => println!("{}: skipped: {message}", run::label(&policy)),
        }
        println!();
    }
    let rows = compare::rows(&runs);
    let table = compare::markdown(&rows);
    println!("{table}");
    let title = format!(
        "burn-amp GPT (byte-level, tinyshakespeare): d_model {}, {} layers, context {}, batch {}, {} steps",
        cli.options.train.model.d_model,
        cli.options.train.model.n_layers,
        cli.options.train.model.seq_len,
        cli.options.train.batch_size,
        cli.options.train.steps
    );
    compare::plot(&runs, &title, &cli.plot).map_err(|e| format!("{}: {e}", cli.plot.display()))?;
    // The table with the generated samples, beside the other outputs (not in the guide).
    let md = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/gpt")
        .join(
            cli.plot
                .with_extension("md")
                .file_name()
                .unwrap_or_default(),
        );
    if let Some(dir) = md.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let samples: String = runs
        .iter()
        .map(|r| {
            format!(
                "\n**{}**\n\n```text\n{}\n```\n",
                run::label(&r.policy),
                r.sample
            )
        })
        .collect();
    std::fs::write(&md, format!("{table}{samples}"))
        .map_err(|e| format!("{}: {e}", md.display()))?;
    let section_md = format!(
        "{title}; {:?}, each policy in turn in one run, the same seed and batches. Measured {} \
         on {}.\n\n{table}",
        cli.backend,
        section::date(),
        section::machine()
    );
    section::write_section(
        &cli.out,
        &format!("gpt-{}", cli.preset),
        &cli.command,
        &section_md,
    )
    .map_err(|e| format!("{}: {e}", cli.out.display()))?;
    println!(
        "plot: {}\ntable and samples: {}\ntable written to {}",
        cli.plot.display(),
        md.display(),
        cli.out.display()
    );
    Ok(())
}

fn main() {
    let cli = cli::parsed_or_exit(parse(std::env::args().skip(1)), USAGE);
    cli::succeeded_or_exit(cli.backend.run(&cli));
}
