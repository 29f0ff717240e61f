//! PyTorch on the CPU, the same workloads in the same run: `benches/pytorch_mlp.py` when
//! `torch` imports (each workload's steps alternating with burn-amp's steps of it), else a
//! line saying it did not. Its autocast step where the CPU has avx512_bf16, its float32
//! step (its fastest) where it does not.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::thread::{self, JoinHandle};

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

/// PyTorch's side of the comparison, run one workload at a time, its steps alternating
/// with burn-amp's steps of it (`paced`: this shared machine's speed drifts from one
/// second to the next, and a drift then slows both sides alike), then `finish` for what is
/// run once.
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
                "Each workload's PyTorch steps alternate with burn-amp's `mixed_bfloat16` \
                 steps of it (the FusedAdamW table above): one PyTorch step pair after each \
                 of burn-amp's.\n\n",
            );
        } else if !quick {
            md.push_str(
                "This CPU lacks avx512_bf16, so PyTorch's bf16 and f16 CPU matmuls take a slow \
                 path (the one-step run at the end shows it) and its float32 step is its \
                 fastest: each workload's PyTorch float32 steps alternate with burn-amp's \
                 `mixed_bfloat16` steps of it (the FusedAdamW table above; one PyTorch step \
                 after each of burn-amp's step pairs), and the comparison rows set \
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

    /// PyTorch's fastest steps of the script's workload `key` (the full run), paced by
    /// burn-amp's: its `mixed_bfloat16` and float32 steps where this CPU takes its bf16
    /// fast path, else its float32 step alone; `None` in a quick run, or where the script
    /// did not start (`md` says why).
    pub fn paced(&mut self, key: &str) -> Option<Paced> {
        if !self.up || self.quick {
            return None;
        }
        let policy = if self.bf16_dot {
            "mixed_bfloat16"
        } else {
            "float32"
        };
        let args = ["--workloads", key, "--policies", policy, "--steps-on-stdin"];
        let mut cmd = script(&self.python, &args);
        let cmdline = shown(&self.python, &cmd);
        let started = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match started {
            Ok(child) => child,
            Err(e) => {
                self.md
                    .push_str(&format!("`{cmdline}` did not start: {e}\n"));
                return None;
            }
        };
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().map(BufReader::new);
        // Read as it comes, on a thread of its own: a script that wrote more than the pipe
        // holds before its next `done` would otherwise wait on us while we wait on it.
        let stderr = child.stderr.take().map(|mut pipe| {
            thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        });
        let mut paced = Paced {
            child,
            stdin,
            stdout,
            stderr,
            cmdline,
        };
        // Its models built and warmed up before any step of ours is timed.
        if paced.expect("ready") {
            Some(paced)
        } else {
            self.finish_paced(paced);
            None
        }
    }

    /// Ends `paced`: its table (all the steps it timed) or why there is none goes to the
    /// section, its row to the comparison.
    pub fn finish_paced(&mut self, mut paced: Paced) {
        drop(paced.stdin.take());
        let mut out = String::new();
        if let Some(mut stdout) = paced.stdout.take() {
            let _ = stdout.read_to_string(&mut out);
        }
        let err = paced
            .stderr
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        let ok = paced.child.wait().is_ok_and(|s| s.success());
        let cmdline = &paced.cmdline;
        if ok {
            self.md.push_str(&format!(
                "`{cmdline}` (one PyTorch step after each of burn-amp's step pairs):\n\n"
            ));
            self.md.push_str(&out);
            self.md.push('\n');
            self.rows.extend(parse(&out));
        } else {
            let last = err.lines().last().unwrap_or("");
            self.md.push_str(&format!("`{cmdline}` failed: {last}\n"));
        }
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

/// The script's command with `args`, on the CPU.
fn script(python: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(python);
    cmd.args(["benches/pytorch_mlp.py", "--device", "cpu"]);
    cmd.args(args);
    cmd
}

/// `cmd` as the report shows it: the interpreter by its file name (where a virtual
/// environment lives is this machine's business, not the report's).
fn shown(python: &str, cmd: &Command) -> String {
    let name = std::path::Path::new(python)
        .file_name()
        .map_or(python.into(), |n| n.to_string_lossy());
    format!(
        "{name} {}",
        cmd.get_args()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// PyTorch's script running one workload's steps when asked (`--steps-on-stdin`), so that
/// its steps and burn-amp's alternate: this machine's speed drifts from one second to the
/// next, and a drift then slows both sides alike.
pub struct Paced {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<BufReader<ChildStdout>>,
    /// The script's stderr, read to its end on a thread.
    stderr: Option<JoinHandle<String>>,
    cmdline: String,
}

impl Paced {
    /// One more timed step of PyTorch's (a float32 and a mixed one where it alternates
    /// two), back when it is done; false once the script has stopped (`finish_paced`
    /// reports why).
    pub fn step(&mut self) -> bool {
        let sent = self
            .stdin
            .as_mut()
            .is_some_and(|stdin| writeln!(stdin, "1").and_then(|()| stdin.flush()).is_ok());
        sent && self.expect("done")
    }

    /// Whether the script's next line is `word`; a script that said anything else has
    /// stopped following the protocol and is asked for nothing more.
    fn expect(&mut self, word: &str) -> bool {
        let mut line = String::new();
        let read = self
            .stdout
            .as_mut()
            .is_some_and(|out| out.read_line(&mut line).is_ok_and(|n| n > 0));
        let ok = read && line.trim() == word;
        if !ok {
            drop(self.stdin.take());
        }
        ok
    }
}

/// Runs the script with `args`, appends its table (or why there is none) to `md`.
fn run(python: &str, args: &[&str], md: &mut String) -> Vec<TorchRow> {
    let mut cmd = script(python, args);
    let cmdline = shown(python, &cmd);
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
