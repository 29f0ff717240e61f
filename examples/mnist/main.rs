//! The Keras mixed-precision guide's MNIST model, trained with burn-amp on the real digits
//! in `examples/data/mnist-10k` (8,000 to train, 2,000 to test).
//!
//! ```sh
//! cargo run --release --example mnist                                   # mixed_float16, Flex
//! cargo run --release --example mnist -- --policy mixed_bfloat16 --learner
//! cargo run --release --example mnist -- --backend wgpu --epochs 2
//! cargo run --release --example mnist -- --policy float8_from_mixed_bfloat16 --numerics
//! ```
//!
//! The last line printed is `test_accuracy=<value>`.

#[path = "../common/cli.rs"]
mod cli;
mod custom_loop;
mod data;
mod learner;
mod model;
mod numerics;
mod report;
mod run;

use std::path::PathBuf;

use burn::tensor::backend::AutodiffBackend;

use cli::{BackendKind, Job, number};
use run::{Mode, Options};

const USAGE: &str = "\
usage: mnist [--policy NAME] [--backend flex|wgpu|cuda|ndarray] [--epochs N]
             [--batch-size N] [--lr X] [--seed N] [--learner | --custom-loop] [--data DIR]
             [--train-size N] [--numerics [--numerics-png FILE]] [--cost]

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
                their bytes, FP8 launches, reads back to the host (burn_amp::cost)";

fn parse(args: impl Iterator<Item = String>) -> Result<(Options, BackendKind), String> {
    let mut options = Options::default();
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
    Ok((options, backend))
}

fn default_numerics_png() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/mnist-fp8-numerics.png")
}

impl Job for Options {
    type Output = f64;

    fn run<B: AutodiffBackend>(&self) -> Result<f64, String> {
        run::run::<B>(Default::default(), self)
    }
}

fn main() {
    let (options, backend) = cli::parsed_or_exit(parse(std::env::args().skip(1)), USAGE);
    let accuracy = cli::succeeded_or_exit(backend.run(&options));
    println!("test_accuracy={accuracy:.4}");
}
