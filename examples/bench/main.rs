//! Writes BENCHMARKS.md: every figure a ratio measured in the same run (median of several
//! runs, with min and max), with its goal and whether it is met.
//!
//! ```sh
//! cargo run --release --example bench                  # rewrites BENCHMARKS.md (~15 min)
//! cargo run --release --example bench -- --quick       # checks the harness runs (seconds)
//! ```

mod alloc;
mod kernels;
mod models;
mod stats;
mod training;

use std::fmt::Write as _;

use burn::backend::{Autodiff, Flex, Wgpu};
use models::Workload;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// What a row must show.
#[derive(Clone, Copy, Debug)]
pub enum Goal {
    AtMost(f64),
    AtLeast(f64),
}

/// One line of the report.
pub struct Row {
    pub what: String,
    pub backend: String,
    pub baseline: String,
    pub measured: String,
    pub ratio: f64,
    pub goal: Goal,
    pub note: String,
}

impl Row {
    fn met(&self) -> bool {
        match self.goal {
            Goal::AtMost(g) => self.ratio <= g,
            Goal::AtLeast(g) => self.ratio >= g,
        }
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kb| format!("{:.0} GiB", kb / 1024.0 / 1024.0))
        .unwrap_or_default();
    format!(
        "{cpu}, {cores} cores, {mem}; {} {}",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

fn main() {
    let (mut quick, mut out) = (false, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match (arg.as_str(), &out) {
            ("--quick", _) => quick = true,
            ("--out", None) => out = args.next(),
            _ => {
                eprintln!("usage: bench [--quick] [--out FILE]");
                std::process::exit(2);
            }
        }
    }
    let out = out.unwrap_or_else(|| {
        if quick {
            "target/BENCHMARKS-quick.md".into()
        } else {
            "BENCHMARKS.md".into()
        }
    });
    let runs = if quick { 1 } else { 7 };
    let (mlp, mlp_small, encoder) = if quick {
        (
            Workload::Mlp {
                width: 64,
                batch: 8,
            },
            Workload::Mlp {
                width: 64,
                batch: 8,
            },
            Workload::Encoder {
                d_model: 32,
                layers: 1,
                seq: 8,
                batch: 2,
            },
        )
    } else {
        (
            Workload::Mlp {
                width: 4096,
                batch: 128,
            },
            Workload::Mlp {
                width: 512,
                batch: 128,
            },
            Workload::Encoder {
                d_model: 256,
                layers: 4,
                seq: 128,
                batch: 16,
            },
        )
    };
    let flex = "Flex (CPU)";
    let wgpu = "wgpu (lavapipe)";
    let mut rows = Vec::new();
    progress("decorator overhead on Flex");
    rows.push(training::overhead::<Autodiff<Flex>>(mlp, runs, flex));
    progress("decorator overhead on wgpu");
    rows.push(training::overhead::<Autodiff<Wgpu>>(mlp_small, runs, wgpu));
    progress("policies on Flex (MLP)");
    rows.extend(training::policies::<Autodiff<Flex>>(
        mlp,
        &["mixed_float16", "mixed_bfloat16"],
        runs,
        flex,
        true,
    ));
    progress("policies on Flex (Transformer encoder)");
    rows.extend(training::policies::<Autodiff<Flex>>(
        encoder,
        &["mixed_float16", "mixed_bfloat16"],
        runs,
        flex,
        true,
    ));
    progress("policies on wgpu");
    rows.extend(training::policies::<Autodiff<Wgpu>>(
        mlp_small,
        &["mixed_float16"],
        runs,
        wgpu,
        false,
    ));
    progress("kernels on wgpu");
    rows.extend(kernels::rows(quick, runs, wgpu));

    let mut md = String::new();
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(
        md,
        "Written by `cargo run --release --example bench`{}.\n",
        if quick {
            " --quick (harness check; sizes too small to mean anything)"
        } else {
            ""
        }
    );
    let _ = writeln!(md, "- Machine: {}", machine());
    let _ = writeln!(
        md,
        "- Date: {}",
        std::process::Command::new("date")
            .arg("-u")
            .arg("+%Y-%m-%d")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    );
    let _ = writeln!(
        md,
        "- Each figure: median of {runs} runs (min-max); A and B of a pair are timed alternately."
    );
    let _ = writeln!(
        md,
        "- wgpu ran on lavapipe (Mesa's CPU Vulkan driver): no GPU on this machine.\n"
    );
    let _ = writeln!(
        md,
        "| Measurement | Backend | Baseline | Measured | Ratio | Goal | Met | Note |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for r in &rows {
        let goal = match r.goal {
            Goal::AtMost(g) => format!("<= {g}"),
            Goal::AtLeast(g) => format!(">= {g}"),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.3} | {} | {} | {} |",
            r.what,
            r.backend,
            r.baseline,
            r.measured,
            r.ratio,
            goal,
            if r.met() { "yes" } else { "no" },
            r.note
        );
    }
    if let Some(dir) = std::path::Path::new(&out).parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Err(e) = std::fs::write(&out, &md) {
        eprintln!("error: writing {out}: {e}");
        std::process::exit(2);
    }
    print!("{md}");
    progress(&format!("written to {out}"));
}
