//! Where a training step's time goes on a GPU, op by op: `burn_amp::cost::profile_synced`
//! around steps of the suite's workloads under `float32` and a mixed policy, the device
//! synced around every op (so each op is charged its own device time; Burn's fusion fuses
//! nothing then, and a profiled step is slower than an unsynced one).

use std::fmt::Write as _;

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_amp::{MixedPrecision, cost};

use crate::models::{Opt, Workload, mixed_with};

/// The profile tables of `workloads` under `policies` on `B` (an autodiff backend), as
/// Markdown: `runs` steps profiled after two warm-up steps (one unsynced, one synced).
pub fn section<B: AutodiffBackend>(
    backend: &str,
    workloads: &[Workload],
    policies: &[&str],
    runs: usize,
) -> String {
    let device = B::Device::default();
    let mut md = format!(
        "\n## Where the step's time goes, op by op ({backend})\n\n\
         `burn_amp::cost::profile_synced` around {runs} steps (FusedAdamW) after two warm-up \
         steps, the device synced \
         around every op: each op's self time on the device, by phase; ops run one by one \
         (nothing fused), so a profiled step takes longer than an unsynced one. Ops under 1% of the step \
         are summed as `other ops`.\n"
    );
    for workload in workloads {
        for policy in policies {
            eprintln!(
                "gpu_suite: profile of {} under {policy} [{backend}]",
                workload.describe()
            );
            MixedPrecision::<B>::set_policy(&device, *policy)
                .expect("the suite's policies run here");
            let mut step = mixed_with::<B>(*workload, &device, Opt::FusedAdam);
            let synced = |step: &mut Box<dyn crate::models::Step>| {
                let sync_device = device.clone();
                let sync = move || {
                    let _ = <B as Backend>::sync(&sync_device);
                };
                cost::profile_synced(sync, || step.phases()).1
            };
            // Warm-up, unsynced then synced: ops run one by one compile (and autotune) other
            // kernels than a fused step does.
            step.phases();
            synced(&mut step);
            let mut profile = cost::Profile::default();
            for _ in 0..runs {
                profile.absorb(&synced(&mut step));
            }
            drop(step);
            MixedPrecision::<B>::clear_policy(&device);
            let _ = writeln!(
                md,
                "\n**{}, {policy}**: {:.1} ms a profiled step\n",
                workload.describe(),
                profile.total().as_secs_f64() * 1e3 / runs as f64
            );
            md.push_str(&profile.table(runs as u32, 0.01));
        }
    }
    md
}
