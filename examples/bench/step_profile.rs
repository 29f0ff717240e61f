//! One workload's step profile under one policy, as Markdown: what the benchmark's tables
//! (`cost::profile`) and the GPU suite's (`cost::profile_synced`) share.

use std::fmt::Write as _;

use burn::tensor::backend::AutodiffBackend;
use burn_amp::{MixedPrecision, Policy, cost};

use crate::models::{Opt, Step, Workload, mixed_with};

/// How a profiled step is taken and what the table calls it.
pub struct Profiling<P: Fn(&mut dyn Step) -> cost::Profile> {
    /// Profiles one step.
    pub profile: P,
    /// Profiled steps thrown away after the first, unprofiled, warm-up step.
    pub profiled_warm_ups: usize,
    /// The profiled steps averaged.
    pub runs: usize,
    /// What the heading calls one step ("a step", "a profiled step").
    pub per: &'static str,
}

/// The heading and table of `workload`'s step under `policy` (named `label`) on `B`,
/// FusedAdamW as its optimizer; the device's policy is cleared after.
pub fn step_profile<B: AutodiffBackend, P: Fn(&mut dyn Step) -> cost::Profile>(
    device: &B::Device,
    workload: Workload,
    (label, policy): (&str, Policy),
    how: &Profiling<P>,
) -> String {
    MixedPrecision::<B>::set_policy(device, policy).expect("the policy runs here");
    let mut step = mixed_with::<B>(workload, device, Opt::FusedAdam);
    step.phases();
    for _ in 0..how.profiled_warm_ups {
        (how.profile)(step.as_mut());
    }
    // One profile a step: each starts in the forward phase.
    let mut profile = cost::Profile::default();
    for _ in 0..how.runs {
        profile.absorb(&(how.profile)(step.as_mut()));
    }
    drop(step);
    MixedPrecision::<B>::clear_policy(device);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n**{}, {label}**: {:.1} ms {}\n",
        workload.describe(),
        profile.total().as_secs_f64() * 1e3 / how.runs as f64,
        how.per
    );
    md.push_str(&profile.table(how.runs as u32, 0.01));
    md
}
