//! The report: the rows, rendered as a Markdown table with the run's conditions, written
//! between two markers of BENCHMARKS.md so that the hand-written sections around them (how
//! to read the figures, the PyTorch and GPU figures) survive a rerun.

use std::fmt::Write as _;
use std::path::Path;

use crate::section::date;
pub use crate::section::machine;

/// What a row must show.
#[derive(Clone, Copy, Debug)]
pub enum Goal {
    AtMost(f64),
    AtLeast(f64),
    /// A figure for reference, with no goal.
    None,
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
    fn met(&self) -> Option<bool> {
        match self.goal {
            Goal::AtMost(g) => Some(self.ratio <= g),
            Goal::AtLeast(g) => Some(self.ratio >= g),
            Goal::None => None,
        }
    }
}

/// The generated part: conditions, then one table line per row.
pub fn table(rows: &[Row], runs: usize, quick: bool, machine: &str) -> String {
    let mut md = String::new();
    if quick {
        let _ = writeln!(
            md,
            "`--quick`: a harness check; the sizes are too small to mean anything.\n"
        );
    }
    let _ = writeln!(md, "- Machine: {machine}");
    let _ = writeln!(md, "- Date: {}", date());
    let _ = writeln!(
        md,
        "- Each figure: median of {runs} runs (min-max); A and B of a pair are timed alternately."
    );
    let _ = writeln!(
        md,
        "- wgpu ran on lavapipe (Mesa's CPU Vulkan driver) unless the backend says otherwise.\n"
    );
    let _ = writeln!(
        md,
        "| Measurement | Backend | Baseline | Measured | Ratio | Goal | Met | Note |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|");
    for r in rows {
        let goal = match r.goal {
            Goal::AtMost(g) => format!("<= {g}"),
            Goal::AtLeast(g) => format!(">= {g}"),
            Goal::None => "-".into(),
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
            match r.met() {
                Some(true) => "yes",
                Some(false) => "no",
                None => "-",
            },
            r.note
        );
    }
    md
}

/// Puts `table` between BENCHMARKS.md's bench markers, keeping what is around them.
pub fn write(path: &Path, table: &str) -> std::io::Result<()> {
    crate::section::write_section(path, "bench", "cargo run --release --example bench", table)
}

/// README's headline figures, from this run's rows: for each line, `(label, row title
/// prefix)` alternatives, the first found shown. A line none of whose rows ran (a section
/// skipped with `--only`) is left out.
const HEADLINES: [&[(&str, &str)]; 4] = [
    &[(
        "`mixed_bfloat16` training step vs `float32`, MLP 784-4096-4096-10, batch 128, Flex, `FusedAdamW`",
        "mixed_bfloat16 vs float32, both with FusedAdamW: step time, MLP 784-4096-4096-10, batch 128",
    )],
    &[
        (
            "the same `mixed_bfloat16` step vs PyTorch's float32 step (fused Adam; its fastest on this CPU, whose bf16 autocast takes a slow path), same CPU",
            "burn-amp mixed_bfloat16 step vs PyTorch's fastest step (float32 on this CPU), MLP 784-4096-4096-10, batch 128",
        ),
        (
            "the same `mixed_bfloat16` step vs PyTorch's bf16 autocast step (fused Adam), same CPU",
            "burn-amp mixed_bfloat16 step vs PyTorch's autocast step, MLP 784-4096-4096-10, batch 128",
        ),
    ],
    &[
        (
            "`mixed_bfloat16` step vs PyTorch's float32 step (its fastest here), Transformer encoder d=256 x4, seq 128, batch 16",
            "burn-amp mixed_bfloat16 step vs PyTorch's fastest step (float32 on this CPU), Transformer encoder",
        ),
        (
            "`mixed_bfloat16` step vs PyTorch's bf16 autocast step, Transformer encoder d=256 x4, seq 128, batch 16",
            "burn-amp mixed_bfloat16 step vs PyTorch's autocast step, Transformer encoder",
        ),
    ],
    &[(
        "decorator overhead: `MixedPrecision` under `float32` vs the bare backend, training step",
        "Decorator overhead: training step, MLP 784-4096-4096-10",
    )],
];

/// The headline block README shows: a few ratios of this run, with the machine and date.
pub fn headline(rows: &[Row], machine: &str) -> String {
    let mut md = String::new();
    for line in HEADLINES {
        let found = line.iter().find_map(|(label, prefix)| {
            Some((label, rows.iter().find(|r| r.what.starts_with(prefix))?))
        });
        if let Some((label, r)) = found {
            let _ = writeln!(
                md,
                "- {label}: **{:.2}x** ({} against {})",
                r.ratio, r.measured, r.baseline
            );
        }
    }
    let _ = writeln!(md, "\nMeasured {} on {machine}.", date());
    md
}
