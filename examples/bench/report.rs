//! The report: the rows, rendered as a Markdown table with the run's conditions, written
//! between two markers of BENCHMARKS.md so that the hand-written sections around them (how
//! to read the figures, the PyTorch and GPU figures) survive a rerun.

use std::fmt::Write as _;
use std::path::Path;

const BEGIN: &str = "<!-- bench:begin (written by `cargo run --release --example bench`) -->";
const END: &str = "<!-- bench:end -->";

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

/// The machine a run is on: the CPU model, cores, memory and OS, and the NVIDIA GPUs with
/// their driver when `nvidia-smi` answers.
pub fn machine() -> String {
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
    let host = format!(
        "{cpu} ({}), {cores} cores, {mem}; {} {}",
        cpu_flags(),
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    let gpus = std::process::Command::new("nvidia-smi")
        .args(["--query-gpu=name,driver_version", "--format=csv,noheader"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .replace('\n', "; ")
        });
    match gpus {
        Some(gpus) => format!("GPU {gpus} (name, driver); host {host}"),
        None => host,
    }
}

/// The CPU's 16-bit arithmetic flags, present and absent, as every CPU figure must say.
pub fn cpu_flags() -> String {
    let flags: Vec<String> = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("flags")).map(|l| {
                l.split(':')
                    .nth(1)
                    .unwrap_or("")
                    .split_whitespace()
                    .map(String::from)
                    .collect()
            })
        })
        .unwrap_or_default();
    let wanted = [
        "avx512_bf16",
        "avx512_fp16",
        "amx_bf16",
        "avx512f",
        "avx2",
        "f16c",
    ];
    let (have, lacks): (Vec<&str>, Vec<&str>) =
        wanted.iter().partition(|f| flags.iter().any(|g| g == *f));
    format!(
        "has {}; lacks {}",
        if have.is_empty() {
            "none of them".into()
        } else {
            have.join(", ")
        },
        if lacks.is_empty() {
            "none".into()
        } else {
            lacks.join(", ")
        }
    )
}

fn date() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
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

/// Puts `table` between the markers of the file at `path`, keeping what is around them; a
/// file without the markers (or none) is written anew with a title and the markers.
pub fn write(path: &Path, table: &str) -> std::io::Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_default();
    let text = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if b < e => {
            format!("{}{BEGIN}\n{table}{}", &old[..b], &old[e..])
        }
        _ => format!("# Benchmarks\n\n{BEGIN}\n{table}{END}\n"),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, text)
}
