//! The Keras mixed-precision guide's MNIST model, trained with burn-amp on the real digits
//! in `examples/data/mnist-10k` (8,000 to train, 2,000 to test).
//!
//! ```sh
//! cargo run --release --example mnist                                   # mixed_float16, Flex
//! cargo run --release --example mnist -- --policy mixed_bfloat16 --learner
//! cargo run --release --example mnist -- --backend wgpu --epochs 2
//! cargo run --release --example mnist -- --policy float8_from_mixed_bfloat16 --numerics
//! cargo run --release --example mnist -- --compare      # three policies -> BENCHMARKS.md
//! ```
//!
//! The last line printed is `test_accuracy=<value>`.

#[path = "../common/cli.rs"]
mod cli;
mod compare;
mod custom_loop;
mod data;
mod learner;
mod model;
mod numerics;
mod report;
mod run;
#[path = "../common/section.rs"]
mod section;

use std::path::PathBuf;

use burn::tensor::backend::AutodiffBackend;

use cli::{BackendKind, Job, number};
use run::{Mode, Options};

const USAGE: &str = "\
usage: mnist [--policy NAME] [--backend flex|wgpu|cuda|ndarray] [--epochs N]
             [--batch-size N] [--lr X] [--seed N] [--learner | --custom-loop] [--data DIR]
             [--train-size N] [--numerics [--numerics-png FILE]] [--cost]
             [--compare [--out FILE]]

  --policy      a dtype policy: float32, mixed_float16 (default), mixed_bfloat16,
                float8_from_mixed_bfloat16, float8_from_mixed_float16, ...
  --backend     flex (default; CPU), wgpu, cuda (needs --features cuda), ndarray
  --epochs      passes over the 8,000 training digits (default 5)
  --batch-size  default 128
  --lr          Adam's learning rate (default 1e-3)
  --learner     train with burn-train's Learner; --custom-loop (default) with a plain loop
  --data        the directory holding the IDX files (default examples/data/mnist-10k)
  --train-size  train on the first N of the 8,000 training digits (for quick timings)
  --numerics    under an FP8 policy, print the FP8 numerics of the last training step
                (amax, underflow and saturation per matmul site) and draw its histogram
  --numerics-png  where the histogram goes (default target/mnist-fp8-numerics.png)
  --cost        print what the last training step cost: ops by class and dtype, casts and
                their bytes, FP8 launches, reads back to the host (burn_amp::cost)
  --compare     train float32, mixed_float16 and mixed_bfloat16 in turn (custom loop) and
                write their table into BENCHMARKS.md (--out another file)";

/// What the command line asks for: one run, or `--compare` writing its table to a file.
struct Parsed {
    options: Options,
    backend: BackendKind,
    compare: Option<PathBuf>,
}

fn parse(args: impl Iterator<Item = String>) -> Result<Parsed, String> {
    let mut options = Options::default();
    let (mut compare, mut out) = (false, None);
    let mut backend = BackendKind::Flex;
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--policy" => {
                options.policy = value("--policy")?.parse().map_err(|e| format!("{e}"))?
            }
            "--backend" => backend = value("--backend")?.parse()?,
            "--epochs" => options.epochs = number("--epochs", value("--epochs")?)?,
            "--batch-size" => options.batch_size = number("--batch-size", value("--batch-size")?)?,
            "--lr" => options.lr = number("--lr", value("--lr")?)?,
            "--seed" => options.seed = number("--seed", value("--seed")?)?,
            "--data" => options.data = PathBuf::from(value("--data")?),
            "--train-size" => options.train_size = number("--train-size", value("--train-size")?)?,
            "--numerics" => {
                options.numerics.get_or_insert_with(default_numerics_png);
            }
            "--numerics-png" => options.numerics = Some(PathBuf::from(value("--numerics-png")?)),
            "--cost" => options.cost = true,
            "--compare" => compare = true,
            "--out" => out = Some(PathBuf::from(value("--out")?)),
            "--learner" => options.mode = Mode::Learner,
            "--custom-loop" => options.mode = Mode::CustomLoop,
            "--help" | "-h" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if options.epochs == 0 || options.batch_size == 0 || options.train_size == 0 {
        return Err("--epochs, --batch-size and --train-size must be at least 1".into());
    }
    if (options.numerics.is_some() || options.cost) && options.mode == Mode::Learner {
        return Err(
            "--numerics and --cost record a step of the custom loop; drop --learner".into(),
        );
    }
    if !(options.lr.is_finite() && options.lr > 0.0) {
        return Err("--lr must be a positive number".into());
    }
    if compare && (options.mode == Mode::Learner || options.numerics.is_some() || options.cost) {
        return Err("--compare runs the custom loop; drop --learner, --numerics and --cost".into());
    }
    if out.is_some() && !compare {
        return Err("--out is where --compare writes its table".into());
    }
    let compare = compare.then(|| {
        out.unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("BENCHMARKS.md"))
    });
    Ok(Parsed {
        options,
        backend,
        compare,
    })
}

fn default_numerics_png() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/mnist-fp8-numerics.png")
}

impl Job for Options {
    type Output = run::Outcome;

    fn run<B: AutodiffBackend>(&self) -> Result<run::Outcome, String> {
        run::run::<B>(Default::default(), self)
    }
}

fn main() {
    let parsed = cli::parsed_or_exit(parse(std::env::args().skip(1)), USAGE);
    if let Some(path) = parsed.compare {
        let job = compare::Compare {
            options: parsed.options,
            backend: format!("{:?}", parsed.backend),
        };
        let table = cli::succeeded_or_exit(parsed.backend.run(&job));
        cli::succeeded_or_exit(compare::publish(&table, &path));
        return;
    }
    let outcome = cli::succeeded_or_exit(parsed.backend.run(&parsed.options));
    println!("test_accuracy={:.4}", outcome.accuracy);
}
