//! The check's result: one row per generated kernel, one column per architecture (or
//! device), and the table printed from it.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::catalog::Instantiation;
use super::codegen::Generated;
use super::nvrtc::CompileFailure;
use super::target::CudaTarget;

/// What became of one kernel on one architecture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// NVRTC compiled it (or, on a device, it was compiled and ran).
    Compiled {
        /// Size of the PTX (0 where a device compiled it and did not say).
        ptx_bytes: usize,
    },
    /// NVRTC rejected it.
    Failed(CompileFailure),
    /// CubeCL generated no source for it: the reason.
    NotGenerated(String),
    /// Not compiled for this column, and why (an architecture this NVRTC does not know).
    Skipped(String),
}

impl Outcome {
    fn is_failure(&self) -> bool {
        matches!(self, Self::Failed(_) | Self::NotGenerated(_))
    }
}

/// One kernel of one instantiation, across the columns.
#[derive(Clone, Debug)]
pub struct Row {
    /// The kernel family: `fp8::quantize`, ...
    pub family: &'static str,
    /// The instantiation, in words.
    pub variant: String,
    /// The kernel's entry point (or its Rust type where no source was generated).
    pub kernel: String,
    /// One outcome per column.
    pub outcomes: Vec<Outcome>,
}

/// The table of kernels x architectures.
#[derive(Clone, Debug)]
pub struct Report {
    columns: Vec<String>,
    rows: Vec<Row>,
}

impl Report {
    /// From what each target's column generated and compiled, per instantiation.
    pub(crate) fn new(
        targets: Vec<CudaTarget>,
        instantiations: &[Instantiation],
        columns: Vec<Vec<Vec<(Generated, Outcome)>>>,
    ) -> Self {
        let labels = targets.iter().map(|t| t.label()).collect();
        Self::from_columns(labels, instantiations, columns)
    }

    /// From columns with their labels (the GPU suite's: one real device).
    pub fn from_columns(
        labels: Vec<String>,
        instantiations: &[Instantiation],
        columns: Vec<Vec<Vec<(Generated, Outcome)>>>,
    ) -> Self {
        let mut rows = Vec::new();
        for (i, instantiation) in instantiations.iter().enumerate() {
            let kernels = columns
                .iter()
                .map(|column| column.get(i).map_or(0, Vec::len))
                .max()
                .unwrap_or(0)
                .max(1);
            for k in 0..kernels {
                let mut kernel = None;
                let outcomes = columns
                    .iter()
                    .map(
                        |column| match column.get(i).and_then(|kernels| kernels.get(k)) {
                            Some((generated, outcome)) => {
                                kernel.get_or_insert_with(|| {
                                    generated
                                        .entrypoint
                                        .clone()
                                        .unwrap_or_else(|| generated.kernel.to_string())
                                });
                                outcome.clone()
                            }
                            None => Outcome::NotGenerated("no kernel was launched".into()),
                        },
                    )
                    .collect();
                rows.push(Row {
                    family: instantiation.family,
                    variant: instantiation.variant.clone(),
                    kernel: kernel.unwrap_or_else(|| "-".into()),
                    outcomes,
                });
            }
        }
        Self {
            columns: labels,
            rows,
        }
    }

    /// Every row.
    pub fn rows(&self) -> &[Row] {
        &self.rows
    }

    /// The column labels.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// `(row, column label, outcome)` of every kernel that failed to generate or compile.
    pub fn failures(&self) -> Vec<(&Row, &str, &Outcome)> {
        self.rows
            .iter()
            .flat_map(|row| {
                row.outcomes
                    .iter()
                    .zip(&self.columns)
                    .filter(|(outcome, _)| outcome.is_failure())
                    .map(move |(outcome, column)| (row, column.as_str(), outcome))
            })
            .collect()
    }

    /// Kernel family x column: kernels compiled out of those generated, and the reason for
    /// any column not compiled.
    pub fn table(&self) -> String {
        let mut families: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
        for row in &self.rows {
            families.entry(row.family).or_default().push(row);
        }
        let mut out = String::new();
        let _ = write!(out, "| kernel | kernels |");
        for column in &self.columns {
            let _ = write!(out, " {column} |");
        }
        let _ = write!(out, "\n|---|---|");
        for _ in &self.columns {
            out.push_str("---|");
        }
        out.push('\n');
        let mut notes = Vec::new();
        for (family, rows) in &families {
            let _ = write!(out, "| `{family}` | {} |", rows.len());
            for c in 0..self.columns.len() {
                let outcomes: Vec<&Outcome> = rows.iter().map(|row| &row.outcomes[c]).collect();
                let compiled = outcomes
                    .iter()
                    .filter(|o| matches!(o, Outcome::Compiled { .. }))
                    .count();
                let skipped = outcomes.iter().find_map(|o| match o {
                    Outcome::Skipped(reason) => Some(reason),
                    _ => None,
                });
                let failed = outcomes.iter().filter(|o| o.is_failure()).count();
                let cell = match (skipped, failed) {
                    (Some(reason), 0) if compiled == 0 => {
                        if !notes.contains(reason) {
                            notes.push(reason.clone());
                        }
                        "not compiled (see below)".to_string()
                    }
                    (_, 0) => format!("{compiled}/{} compiled", outcomes.len()),
                    (_, failed) => format!("**{failed} FAILED**, {compiled} compiled"),
                };
                let _ = write!(out, " {cell} |");
            }
            out.push('\n');
        }
        let total = self.rows.len();
        let _ = write!(out, "| all | {total} |");
        for c in 0..self.columns.len() {
            let compiled = self
                .rows
                .iter()
                .filter(|row| matches!(row.outcomes[c], Outcome::Compiled { .. }))
                .count();
            let _ = write!(out, " {compiled}/{total} |");
        }
        out.push('\n');
        for note in notes {
            let _ = writeln!(out, "\nNot compiled: {note}.");
        }
        out
    }

    /// Every row and its outcome in each column, one line per kernel.
    pub fn listing(&self) -> String {
        let mut out = String::new();
        for row in &self.rows {
            let cells: Vec<String> = row
                .outcomes
                .iter()
                .map(|outcome| match outcome {
                    Outcome::Compiled { ptx_bytes: 0 } => "ok".to_string(),
                    Outcome::Compiled { ptx_bytes } => format!("ok ({} KiB PTX)", ptx_bytes / 1024),
                    Outcome::Failed(_) => "FAILED".into(),
                    Outcome::NotGenerated(_) => "NOT GENERATED".into(),
                    Outcome::Skipped(_) => "skipped".into(),
                })
                .collect();
            let _ = writeln!(
                out,
                "{:<20} {:<55} {:<28} {}",
                row.family,
                row.variant,
                row.kernel,
                cells.join(" | ")
            );
        }
        out
    }

    /// The failures in full: instantiation, architecture, NVRTC's log and the source lines
    /// it names.
    pub fn failure_details(&self) -> String {
        let mut out = String::new();
        for (row, column, outcome) in self.failures() {
            let _ = writeln!(
                out,
                "== {} [{}] `{}` on {column}:",
                row.family, row.variant, row.kernel
            );
            match outcome {
                Outcome::Failed(failure) => {
                    let _ = writeln!(out, "{}", failure.log.trim_end());
                    let _ = writeln!(out, "{}", failure.excerpt.trim_end());
                }
                Outcome::NotGenerated(reason) => {
                    let _ = writeln!(out, "{reason}");
                }
                _ => {}
            }
        }
        out
    }
}
