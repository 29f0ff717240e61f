//! PyTorch on the CPU, the same workloads in the same run: `benches/pytorch_mlp.py` when
//! `torch` imports (each workload right after burn-amp's steps of it), else a line saying it
//! did not. Its autocast step where the CPU has avx512_bf16, its float32 step (its fastest)
//! where it does not.

use std::process::Command;

/// One row of PyTorch's table: the workload's label, the policy, and the float32 and mixed
/// step medians (ms); policy `float32` times the float32 step alone (no mixed step).
pub struct TorchRow {
    pub workload: String,
    pub policy: String,
    pub f32_ms: f64,
    pub mixed_ms: Option<f64>,
}

fn parse(table: &str) -> Vec<TorchRow> {
    table
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            // "", workload, policy, f32, mixed, ratio, ""
            if cells.len() < 6 {
                return None;
            }
            let median = |c: &str| c.split_whitespace().next()?.parse::<f64>().ok();
            Some(TorchRow {
                workload: cells[1].to_string(),
                policy: cells[2].to_string(),
                f32_ms: median(cells[3])?,
                mixed_ms: median(cells[4]),
            })
        })
        .collect()
}

/// PyTorch's side of the comparison, run one workload at a time, each right after
/// burn-amp's steps of it (this shared machine's speed drifts over minutes; a ratio of
/// two timings seconds apart drifts less), then `finish` for what is run once.
pub struct Torch {
    python: String,
    md: String,
    rows: Vec<TorchRow>,
    /// Whether `torch` imported: nothing runs otherwise.
    up: bool,
    quick: bool,
    /// Whether the CPU has avx512_bf16 (PyTorch's bf16 autocast takes a fast path; else its
    /// float32 step is its fastest).
    bf16_dot: bool,
}

impl Torch {
    /// `python` is the interpreter to run (one whose `torch` imports); `bf16_dot`: whether
    /// the CPU has avx512_bf16.
    pub fn new(quick: bool, python: &str, bf16_dot: bool) -> Torch {
        let mut md = String::from("\n### PyTorch on the CPU, same machine, same run\n\n");
        let import = Command::new(python).args(["-c", "import torch"]).output();
        let up = import.is_ok_and(|o| o.status.success());
        if !up {
            md.push_str(&format!(
                "Not run: `{python} -c \"import torch\"` failed here (install PyTorch, e.g. \
                 `pip install torch`, and rerun, with `--python PATH` for a virtual \
                 environment's interpreter).\n"
            ));
        } else if bf16_dot && !quick {
            md.push_str(
                "Each workload's PyTorch steps run right after burn-amp's steps of it (the \
                 FusedAdamW table above).\n\n",
            );
        } else if !quick {
            md.push_str(
                "This CPU lacks avx512_bf16, so PyTorch's bf16 and f16 CPU matmuls take a slow \
                 path (the one-step run at the end shows it) and its float32 step is its \
                 fastest: each workload's PyTorch float32 steps run right after burn-amp's \
                 steps of it (the FusedAdamW table above), and the comparison rows set \
                 burn-amp's `mixed_bfloat16` step against them.\n\n",
            );
        }
        Torch {
            python: python.to_string(),
            md,
            rows: Vec::new(),
            up,
            quick,
            bf16_dot,
        }
    }

    /// PyTorch's fastest steps of the script's workload `key` (the full run): its
    /// `mixed_bfloat16` and float32 steps where this CPU takes its bf16 fast path, else its
    /// float32 step alone; nothing in a quick run.
    pub fn workload(&mut self, key: &str) {
        if !self.up || self.quick {
            return;
        }
        let policy = if self.bf16_dot {
            "mixed_bfloat16"
        } else {
            "float32"
        };
        let args = ["--workloads", key, "--policies", policy, "--runs", "7"];
        let rows = run(&self.python, &args, &mut self.md);
        self.rows.extend(rows);
    }

    /// The runs made once, then the section (Markdown) and all of PyTorch's rows.
    pub fn finish(mut self) -> (String, Vec<TorchRow>) {
        if !self.up {
            return (self.md, self.rows);
        }
        // The invocations: (arguments, a sentence on why they are what they are).
        let runs: Vec<(Vec<&str>, &str)> = if self.quick {
            vec![(
                vec!["--workloads", "mlp", "--runs", "1", "--warmup", "0"]
                    .into_iter()
                    .chain(["--policies", "mixed_bfloat16", "--quick"])
                    .collect(),
                "",
            )]
        } else if self.bf16_dot {
            // x86 without avx512_fp16 or AMX-FP16 has no f16 dot product: PyTorch's f16
            // CPU matmuls take a slow path (tens of times float32), so one timed step.
            vec![(
                vec![
                    "--workloads",
                    "mlp",
                    "--policies",
                    "mixed_float16",
                    "--runs",
                    "1",
                    "--warmup",
                    "1",
                ],
                "This CPU has no f16 dot-product instructions (avx512_fp16, AMX-FP16), so \
                 PyTorch's f16 CPU matmuls take a slow path: one timed step of the MLP (its \
                 float32 column is one cold step too; the comparison rows use the float32 \
                 step of the table above).\n\n",
            )]
        } else {
            // Without avx512_bf16 PyTorch's 16-bit CPU matmuls take a slow path (about 80x
            // float32 on the MLP): one timed step of the two MLP-like workloads shows it.
            vec![(
                vec!["--workloads", "mlp,stack", "--runs", "1", "--warmup", "1"],
                "PyTorch's autocast on this CPU: one timed step of the batch-128 MLP and the \
                 linear stack under each 16-bit policy shows its slow path (their float32 \
                 columns are one cold step; the comparison rows use the float32 steps \
                 above).\n\n",
            )]
        };
        for (args, why) in runs {
            self.md.push_str(why);
            let rows = run(&self.python, &args, &mut self.md);
            self.rows.extend(rows);
        }
        (self.md, self.rows)
    }
}

/// Runs the script with `args`, appends its table (or why there is none) to `md`.
fn run(python: &str, args: &[&str], md: &mut String) -> Vec<TorchRow> {
    let mut cmd = Command::new(python);
    cmd.args(["benches/pytorch_mlp.py", "--device", "cpu"]);
    cmd.args(args);
    // The interpreter by its file name: where a virtual environment lives is this
    // machine's business, not the report's.
    let shown = std::path::Path::new(python)
        .file_name()
        .map_or(python.into(), |n| n.to_string_lossy());
    let cmdline = format!(
        "{shown} {}",
        cmd.get_args()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    match cmd.output() {
        Ok(o) if o.status.success() => {
            let out = String::from_utf8_lossy(&o.stdout);
            md.push_str(&format!("`{cmdline}`:\n\n"));
            md.push_str(&out);
            md.push('\n');
            parse(&out)
        }
        Ok(o) => {
            md.push_str(&format!(
                "`{cmdline}` failed: {}\n",
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            ));
            Vec::new()
        }
        Err(e) => {
            md.push_str(&format!("`{cmdline}` did not start: {e}\n"));
            Vec::new()
        }
    }
}
