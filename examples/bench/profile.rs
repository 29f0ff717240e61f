//! Where a training step's time goes, op by op (burn-amp's cost profile): the encoder and
//! the CNN under float32, under mixed_bfloat16 on Flex's own ops (`kernels=backend`: what a
//! Burn user had before burn-amp's kernels for these ops) and under mixed_bfloat16 with
//! them (`kernels=auto`, the default).

use burn::backend::{Autodiff, Flex};
use burn_amp::{Policy, cost};

use crate::models::{Step, Workload};
use crate::progress;
use crate::step_profile::{Profiling, step_profile};

/// The tables, as Markdown.
pub fn section(workloads: &[Workload], runs: usize) -> String {
    section_of(workloads, runs, &CONFIGS)
}

/// The policies a profile compares, each with its label.
const CONFIGS: [(&str, &str); 3] = [
    ("float32", "float32"),
    (
        "mixed_bfloat16, Flex's ops (kernels=backend)",
        "params=float32,compute=bfloat16,output=float32,kernels=backend",
    ),
    ("mixed_bfloat16", "mixed_bfloat16"),
];

/// One workload's profile over `runs` steps under `policy` (default `mixed_bfloat16`;
/// `bench --profile NAME [--policy SPEC]`: the op table alone, and a loop to sample with
/// `perf record`).
pub fn one(workload: Workload, runs: usize, policy: Option<&str>) -> String {
    match policy {
        Some(spec) => section_of(&[workload], runs, &[(spec, spec)]),
        None => section_of(&[workload], runs, &CONFIGS[2..]),
    }
}

fn section_of(workloads: &[Workload], runs: usize, configs: &[(&str, &str)]) -> String {
    type B = Autodiff<Flex>;
    let device = Default::default();
    let mut md = String::from(
        "\n### Where the step's time goes, op by op\n\n\
         `burn_amp::cost::profile` around the steps (FusedAdamW): each op's self time, by phase. \
         The backward passes Burn's `Autodiff` runs itself are one entry (`Burn's Autodiff \
         steps`); burn-amp's own are named `(backward)`. Ops under 1% of the step are summed \
         as `other ops`.\n",
    );
    let how = Profiling {
        profile: |step: &mut dyn Step| cost::profile(|| step.phases()).1,
        profiled_warm_ups: 0,
        runs,
        per: "a step",
    };
    for workload in workloads {
        for &(label, spec) in configs {
            progress(&format!("profile: {} under {label}", workload.describe()));
            let policy: Policy = spec.parse().expect("a valid policy");
            md.push_str(&step_profile::<B, _>(
                &device,
                *workload,
                (label, policy),
                &how,
            ));
        }
    }
    md
}
