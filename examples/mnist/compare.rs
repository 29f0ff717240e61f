//! `--compare`: the same model trained under `float32`, `mixed_float16` and
//! `mixed_bfloat16` one after the other (same seed, same batches), its table printed and
//! written between the `mnist` markers of BENCHMARKS.md.

use std::fmt::Write as _;
use std::path::Path;

use burn::tensor::backend::AutodiffBackend;
use burn_amp::Policy;

use crate::cli::Job;
use crate::run::{self, Options, Outcome};
use crate::section;

/// The command whose table BENCHMARKS.md holds.
pub const COMMAND: &str = "cargo run --release --example mnist -- --compare";

/// The runs of `--compare`, on the backend `--backend` names.
pub struct Compare {
    pub options: Options,
    pub backend: String,
}

impl Job for Compare {
    type Output = String;

    fn run<B: AutodiffBackend>(&self) -> Result<String, String> {
        let policies = [
            Policy::float32(),
            Policy::mixed_float16(),
            Policy::mixed_bfloat16(),
        ];
        let mut outcomes: Vec<(Policy, Outcome)> = Vec::new();
        for policy in policies {
            let options = Options {
                policy,
                ..self.options.clone()
            };
            outcomes.push((policy, run::run::<B>(Default::default(), &options)?));
        }
        Ok(table(&outcomes, &self.options, &self.backend))
    }
}

fn table(outcomes: &[(Policy, Outcome)], options: &Options, backend: &str) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "The Keras guide's MNIST model ({} epochs on {} digits, batch {}, Adam through \
         `FusedAdamW`, lr {}; tested on 2,000), {backend}, release build, each policy in turn \
         in one run. Measured {} on {}.\n",
        options.epochs,
        options.train_size,
        options.batch_size,
        options.lr,
        section::date(),
        section::machine()
    );
    let _ = writeln!(
        md,
        "| Policy | Test accuracy | Last epoch | Whole run | vs `float32` (last epoch) | Loss scale at the end | Skipped steps |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    let base = outcomes[0].1.last_epoch_seconds.unwrap_or(f64::NAN);
    for (policy, o) in outcomes {
        let last = o.last_epoch_seconds.unwrap_or(f64::NAN);
        let _ = writeln!(
            md,
            "| `{policy}` | {:.4} | {last:.1} s | {:.1} s | {:.2} | {} | {} |",
            o.accuracy,
            o.seconds,
            last / base,
            o.loss_scale.map_or("-".into(), |s| s.to_string()),
            o.skipped
        );
    }
    md
}

/// Prints the table and writes it into `path` between the `mnist` markers.
pub fn publish(table: &str, path: &Path) -> Result<(), String> {
    print!("{table}");
    section::write_section(path, "mnist", COMMAND, table)
        .map_err(|e| format!("writing {}: {e}", path.display()))
}
