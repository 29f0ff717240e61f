//! Rows for training steps: the decorator's overhead, and the mixed policies against
//! float32 (time, and on Flex peak heap memory).

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_amp::MixedPrecision;

use crate::models::{Step, Workload, bare, mixed};
use crate::stats::time_pair;
use crate::{Goal, Row, alloc};

/// Bytes above the resting level at the peak of one step, and the peak itself.
fn memory(step: &mut Box<dyn Step>) -> (usize, usize) {
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

pub fn policies<B: AutodiffBackend>(
    workload: Workload,
    policies: &[&str],
    runs: usize,
    backend: &str,
    heap: bool,
) -> Vec<Row> {
    let device = B::Device::default();
    let mut base_step = bare::<B>(workload, &device);
    let base_mem = heap.then(|| memory(&mut base_step));
    let mut rows = Vec::new();
    for policy in policies {
        MixedPrecision::<B>::set_policy(&device, *policy).unwrap();
        let mut step = mixed::<B>(workload, &device);
        let mem = heap.then(|| memory(&mut step));
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
            note: if backend.starts_with("Flex") || backend.contains("lavapipe") {
                // A CPU: Flex, or wgpu on Mesa's CPU Vulkan driver.
                "no fast 16-bit arithmetic on this CPU: the speed goal is for GPUs".into()
            } else {
                String::new()
            },
        });
        if let (Some((bt, bp)), Some((mt, mp))) = (base_mem, mem) {
            rows.push(Row {
                what: format!(
                    "{policy} vs float32: peak memory of a step above rest, {}",
                    workload.describe()
                ),
                backend: backend.into(),
                baseline: format!("float32 {:.1} MiB (peak {:.1})", mib(bt), mib(bp)),
                measured: format!("{policy} {:.1} MiB (peak {:.1})", mib(mt), mib(mp)),
                ratio: mt as f64 / bt as f64,
                goal: Goal::AtMost(1.0),
                note: "activations, gradients and temporaries (heap)".into(),
            });
        }
    }
    let _ = <MixedPrecision<B> as Backend>::name(&device);
    rows
}
