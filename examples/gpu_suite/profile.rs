//! Where a training step's time goes on a GPU, op by op: `burn_amp::cost::profile_synced`
//! around steps of the suite's workloads under `float32` and a mixed policy, the device
//! synced around every op (so each op is charged its own device time; Burn's fusion fuses
//! nothing then, and a profiled step is slower than an unsynced one).

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_amp::{Policy, cost};

use crate::models::{Step, Workload};
use crate::step_profile::{Profiling, step_profile};

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
    let how = Profiling {
        profile: |step: &mut dyn Step| {
            let sync_device = device.clone();
            let sync = move || {
                let _ = <B as Backend>::sync(&sync_device);
            };
            cost::profile_synced(sync, || step.phases()).1
        },
        // Ops run one by one compile (and autotune) other kernels than a fused step does.
        profiled_warm_ups: 1,
        runs,
        per: "a profiled step",
    };
    for workload in workloads {
        for policy in policies {
            eprintln!(
                "gpu_suite: profile of {} under {policy} [{backend}]",
                workload.describe()
            );
            let parsed: Policy = policy.parse().expect("the suite's policies parse");
            md.push_str(&step_profile::<B, _>(
                &device,
                *workload,
                (policy, parsed),
                &how,
            ));
        }
    }
    md
}
