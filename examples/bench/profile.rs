//! Where a training step's time goes, op by op (burn-amp's cost profile): the encoder and
//! the CNN under float32, under mixed_bfloat16 on Flex's own ops (`kernels=backend`: what a
//! Burn user had before burn-amp's kernels for these ops) and under mixed_bfloat16 with
//! them (`kernels=auto`, the default).

use std::fmt::Write as _;

use burn::backend::{Autodiff, Flex};
use burn_amp::{MixedPrecision, Policy, cost};

use crate::models::{Opt, Workload, mixed_with};
use crate::progress;

/// The tables, as Markdown.
pub fn section(workloads: &[Workload], runs: usize) -> String {
    type B = Autodiff<Flex>;
    let device = Default::default();
    let mut md = String::from(
        "\n### Where the step's time goes, op by op\n\n\
         `burn_amp::cost::profile` around the steps (FusedAdamW): each op's self time, by phase. \
         The backward passes Burn's `Autodiff` runs itself are one entry (`Burn's Autodiff \
         steps`); burn-amp's own are named `(backward)`. Ops under 1% of the step are summed \
         as `other ops`.\n",
    );
    let configs = [
        ("float32", "float32"),
        (
            "mixed_bfloat16, Flex's ops (kernels=backend)",
            "params=float32,compute=bfloat16,output=float32,kernels=backend",
        ),
        ("mixed_bfloat16", "mixed_bfloat16"),
    ];
    for workload in workloads {
        for (label, spec) in configs {
            progress(&format!("profile: {} under {label}", workload.describe()));
            let policy: Policy = spec.parse().expect("a valid policy");
            MixedPrecision::<B>::set_policy(&device, policy).expect("Flex runs it");
            let mut step = mixed_with::<B>(*workload, &device, Opt::FusedAdam);
            step.phases();
            // One profile a step: each starts in the forward phase.
            let mut profile = cost::Profile::default();
            for _ in 0..runs {
                let (_, one) = cost::profile(|| step.phases());
                profile.absorb(&one);
            }
            drop(step);
            MixedPrecision::<B>::clear_policy(&device);
            let _ = writeln!(
                md,
                "\n**{}, {label}**: {:.1} ms a step\n",
                workload.describe(),
                profile.total().as_secs_f64() * 1e3 / runs as f64
            );
            md.push_str(&profile.table(runs as u32, 0.01));
        }
    }
    md
}
