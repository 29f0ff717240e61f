//! Rows for training steps: the decorator's overhead, and the mixed policies against
//! float32 (time, and on Flex peak heap memory).

use burn::tensor::backend::AutodiffBackend;
use burn_amp::MixedPrecision;

use crate::models::{Opt, Step, Workload, bare, bare_with, mixed};
use crate::phases::time_pair_phases;
use crate::stats::time_pair;
use crate::{Goal, Row, alloc};

/// Bytes above the resting level at the peak of one step, and the peak itself.
fn memory_of(step: &mut Box<dyn Step>) -> (usize, usize) {
    step.step(); // optimizer state exists from here on
    let base = alloc::current();
    alloc::reset_peak();
    step.step();
    (alloc::peak().saturating_sub(base), alloc::peak())
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

pub fn overhead<B: AutodiffBackend>(workload: Workload, runs: usize, backend: &str) -> Row {
    let device = B::Device::default();
    MixedPrecision::<B>::set_policy(&device, "float32").unwrap();
    let mut plain = bare::<B>(workload, &device);
    let mut decorated = mixed::<B>(workload, &device);
    let (a, b) = time_pair(2, runs, || plain.step(), || decorated.step());
    MixedPrecision::<B>::clear_policy(&device);
    Row {
        what: format!("Decorator overhead: training step, {}", workload.describe()),
        backend: backend.into(),
        baseline: format!("{} {} ms", B::name(&device), a.ms()),
        measured: format!("MixedPrecision, float32: {} ms", b.ms()),
        ratio: b.median / a.median,
        goal: Goal::AtMost(1.02),
        note: String::new(),
    }
}

/// Each policy's step time against float32 (bare `B`).
pub fn policies<B: AutodiffBackend>(
    workload: Workload,
    policies: &[&str],
    runs: usize,
    backend: &str,
) -> Vec<Row> {
    let device = B::Device::default();
    let mut base_step = bare::<B>(workload, &device);
    let mut rows = Vec::new();
    for policy in policies {
        MixedPrecision::<B>::set_policy(&device, *policy).unwrap();
        let mut step = mixed::<B>(workload, &device);
        // The float32 step is bare B: the policy set above does not reach it.
        let (base_time, t) = time_pair(1, runs, || base_step.step(), || step.step());
        drop(step);
        MixedPrecision::<B>::clear_policy(&device);
        rows.push(Row {
            what: format!("{policy} vs float32: step time, {}", workload.describe()),
            backend: backend.into(),
            baseline: format!("float32 {} ms", base_time.ms()),
            measured: format!("{policy} {} ms", t.ms()),
            ratio: t.median / base_time.median,
            goal: Goal::AtMost(1.0),
            note: if backend.contains("lavapipe") {
                "lavapipe: no fast 16-bit arithmetic on this CPU Vulkan driver".into()
            } else {
                String::new()
            },
        });
    }
    rows
}

/// Each policy's peak heap memory of a step above rest against float32's (Flex keeps its
/// tensors on the heap).
pub fn memory<B: AutodiffBackend>(
    workload: Workload,
    policies: &[&str],
    backend: &str,
) -> Vec<Row> {
    let device = B::Device::default();
    let mut base_step = bare::<B>(workload, &device);
    let (bt, bp) = memory_of(&mut base_step);
    drop(base_step);
    let mut rows = Vec::new();
    for policy in policies {
        MixedPrecision::<B>::set_policy(&device, *policy).unwrap();
        let mut step = mixed::<B>(workload, &device);
        let (mt, mp) = memory_of(&mut step);
        drop(step);
        MixedPrecision::<B>::clear_policy(&device);
        rows.push(Row {
            what: format!(
                "{policy} vs float32: peak memory of a step above rest, {}",
                workload.describe()
            ),
            backend: backend.into(),
            baseline: format!("float32 {:.1} MiB (peak {:.1})", mib(bt), mib(bp)),
            measured: format!("{policy} {:.1} MiB (peak {:.1})", mib(mt), mib(mp)),
            ratio: mt as f64 / bt as f64,
            // A transformer's activations are mostly 16-bit under the mixed policies.
            goal: Goal::AtMost(match (workload, *policy) {
                (Workload::Encoder { .. }, "mixed_bfloat16") => 0.55,
                _ => 1.0,
            }),
            note: "activations, gradients and temporaries (heap)".into(),
        });
    }
    rows
}

/// float32 with FusedAdamW against float32 with Burn's Adam on `B`, alternately: the whole
/// step (the goal, where there is one), and the optimizer phase as bandwidth over the 7 f32
/// streams it must move.
pub fn fused_vs_adam<B: burn::tensor::backend::AutodiffBackend>(
    workload: Workload,
    device: &B::Device,
    runs: usize,
    backend: &str,
    goal: Option<f64>,
) -> Row {
    let mut burns = bare_with::<B>(workload, device, Opt::BurnAdam);
    let mut ours = bare_with::<B>(workload, device, Opt::FusedAdam);
    let (a, b) = time_pair_phases(1, runs, || burns.phases(), || ours.phases());
    let bytes = 7.0 * 4.0 * workload.params() as f64;
    Row {
        what: format!(
            "float32 step with FusedAdamW vs with Burn's Adam, {}",
            workload.describe()
        ),
        backend: backend.into(),
        baseline: format!(
            "Burn's Adam {} ms (optimizer {} ms)",
            a.total.ms(),
            a.optimizer.ms()
        ),
        measured: format!(
            "FusedAdamW {} ms (optimizer {} ms, {:.1} GB/s of its 7 f32 streams; Burn's Adam's optimizer {:.2}x it)",
            b.total.ms(),
            b.optimizer.ms(),
            bytes / b.optimizer.median / 1e9,
            a.optimizer.median / b.optimizer.median
        ),
        ratio: b.total.median / a.total.median,
        goal: goal.map_or(Goal::None, Goal::AtMost),
        note: String::new(),
    }
}
