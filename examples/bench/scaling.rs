//! `--scaling`: how the CPU kernels and a training step scale with threads. Each row at 1,
//! 2, 4, ... threads up to the machine's cores (rayon pools of that size, the thread counts
//! timed in turn within each run), with the efficiency against one thread
//! (`t1 / (n * tn)`): the bf16 GEMM of a layer (x W) and of its weight gradient (x^T g), the
//! f32 -> bf16 cast and a threaded copy of the same bytes, the fused AdamW step, and the
//! `mixed_bfloat16` step of the MLP at batch 1024 (FusedAdamW); then the same step's
//! profile at the most threads, which says where its time goes.

use std::fmt::Write as _;
use std::time::Instant;

use burn::backend::{Autodiff, Flex};
use burn::tensor::{Distribution, FloatDType, Tensor};
use burn_amp::{MixedPrecision, Policy};
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::optim::{self, AdamwStep};
use rayon::prelude::*;

use crate::models::{Opt, Workload, mixed_with};
use crate::progress;
use crate::stats::Summary;

/// 1, 2, 4, ... up to `max`, and `max` itself.
pub fn thread_counts(max: usize) -> Vec<usize> {
    let mut counts: Vec<usize> = (0..).map(|p| 1 << p).take_while(|&n| n < max).collect();
    counts.push(max.max(1));
    counts
}

/// One measured row: its label, what one run does, and how to read its rate.
struct Item<'a> {
    label: String,
    run: Box<dyn Fn() + Send + Sync + 'a>,
    /// Units per run (FLOP, bytes) and their name per second.
    rate: Option<(f64, &'static str)>,
}

/// The scaling table (Markdown) for `counts` threads, `runs` runs each.
pub fn section(quick: bool, runs: usize, counts: &[usize]) -> String {
    let pools: Vec<rayon::ThreadPool> = counts
        .iter()
        .map(|&n| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n)
                .build()
                .unwrap()
        })
        .collect();
    let device = Default::default();
    let (m, k, n): (usize, usize, usize) = if quick {
        (16, 128, 128)
    } else {
        (128, 4096, 4096)
    };
    let side: usize = if quick { 256 } else { 4096 };
    let x = Tensor::<MixedPrecision<Flex>, 2>::random([m, k], Distribution::Default, &device)
        .cast(FloatDType::BF16);
    let w = Tensor::<MixedPrecision<Flex>, 2>::random([k, n], Distribution::Default, &device);
    let g = Tensor::<MixedPrecision<Flex>, 2>::random([m, n], Distribution::Default, &device)
        .cast(FloatDType::BF16);
    let big =
        Tensor::<MixedPrecision<Flex>, 2>::random([side, side], Distribution::Default, &device);
    let values: Vec<f32> = big.to_data().to_vec().unwrap();
    let elems = (side * side) as f64;
    let flops = 2.0 * (m * k * n) as f64;
    // The AdamW step of one 4096 x 4096 parameter, in place (as FusedAdamW runs it on Flex).
    let isa = Isa::detect();
    let state = std::sync::Mutex::new((
        values.clone(),
        vec![0f32; values.len()],
        vec![0f32; values.len()],
    ));
    let grad: Vec<half::bf16> = values
        .iter()
        .map(|v| half::bf16::from_f32(v * 1e-3))
        .collect();
    let step = AdamwStep::new(1e-3, 0.9, 0.999, 1e-8, 0.01).at(3);
    let workload = if quick {
        Workload::Mlp {
            width: 64,
            batch: 16,
        }
    } else {
        Workload::Mlp {
            width: 4096,
            batch: 1024,
        }
    };
    type B = Autodiff<Flex>;
    let items: Vec<Item> = vec![
        Item {
            label: format!("GEMM {m}x{k}x{n} bf16, x W (f32 W rounded while packed)"),
            run: Box::new(|| {
                burn_amp::with_policy(Policy::mixed_bfloat16(), || {
                    drop(x.clone().matmul(w.clone()))
                })
            }),
            rate: Some((flops, "GFLOP/s")),
        },
        Item {
            label: format!("GEMM weight gradient x^T g, {k}x{m}x{n} bf16"),
            run: Box::new(|| {
                burn_amp::with_policy(Policy::mixed_bfloat16(), || {
                    drop(x.clone().transpose().matmul(g.clone()))
                })
            }),
            rate: Some((flops, "GFLOP/s")),
        },
        Item {
            label: format!("Cast f32 -> bf16, {side}x{side}, into a new tensor"),
            run: Box::new(|| drop(big.clone().cast(FloatDType::BF16))),
            rate: Some((6.0 * elems, "GB/s")),
        },
        Item {
            label: format!("Threaded copy of {side}x{side} f32 into a new buffer (the yardstick)"),
            run: Box::new(|| {
                // Allocated as burn-amp's outputs are (huge pages where the OS offers them): the
                // two sides differ only in the work.
                let mut copy = burn_amp_kernels::cpu::cast::zeroed::<f32>(values.len());
                copy.par_chunks_mut(1 << 16)
                    .zip(values.par_chunks(1 << 16))
                    .for_each(|(d, s)| d.copy_from_slice(s));
                drop(copy);
            }),
            rate: Some((8.0 * elems, "GB/s")),
        },
        Item {
            label: format!("AdamW step of {side}x{side} f32 (bf16 gradient), in place: 7 streams"),
            run: Box::new(|| {
                let mut s = state.lock().unwrap();
                let (p, m1, v) = &mut *s;
                optim::adamw(isa, p, &grad, m1, v, &step, None).unwrap();
            }),
            rate: Some((elems * (4.0 * 6.0 + 2.0), "GB/s")),
        },
    ];
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n### Scaling with threads\n\nEach row at every thread count (rayon pools, the counts \
         timed in turn within each of {runs} runs; median): ms, the rate, and the efficiency \
         against one thread, `t1 / (n x tn)`.\n"
    );
    let _ = write!(out, "| |");
    for c in counts {
        let _ = write!(out, " {c} thread{} |", if *c == 1 { "" } else { "s" });
    }
    let _ = writeln!(out, "\n|---|{}", "---|".repeat(counts.len()));
    for item in &items {
        progress(&format!("scaling: {}", item.label));
        let times = alternated(&pools, runs, &item.run);
        let _ = write!(out, "| {} |", item.label);
        for (c, t) in counts.iter().zip(&times) {
            let efficiency = times[0].median / (*c as f64 * t.median);
            let rate = item
                .rate
                .map(|(units, name)| format!(", {:.0} {name}", units / t.median / 1e9))
                .unwrap_or_default();
            let _ = write!(out, " {:.2} ms{rate}, {:.2} |", t.median * 1e3, efficiency);
        }
        let _ = writeln!(out);
    }
    // The step: built once per pool (its tensors are Flex's, shared by every pool).
    progress(&format!("scaling: {} step", workload.describe()));
    MixedPrecision::<B>::set_policy(&device, "mixed_bfloat16").unwrap();
    let mut step = mixed_with::<B>(workload, &device, Opt::FusedAdam);
    let step_times = {
        let step = std::sync::Mutex::new(&mut step);
        alternated(&pools, runs, &|| step.lock().unwrap().step())
    };
    let _ = write!(
        out,
        "| `mixed_bfloat16` step, {}, FusedAdamW |",
        workload.describe()
    );
    for (c, t) in counts.iter().zip(&step_times) {
        let efficiency = step_times[0].median / (*c as f64 * t.median);
        let _ = write!(out, " {:.1} ms, {:.2} |", t.median * 1e3, efficiency);
    }
    let _ = writeln!(out);
    let most = pools.last().expect("at least one pool");
    let (_, profile) = most.install(|| burn_amp::cost::profile(|| step.step()));
    MixedPrecision::<B>::clear_policy(&device);
    let _ = writeln!(
        out,
        "\nWhere the step's time goes at {} threads (one profiled step, each op's self time):\n\n{}",
        counts.last().unwrap(),
        profile
    );
    out
}

/// `run` timed on each pool in turn, `runs` times after one warm-up each: a summary per pool.
fn alternated(
    pools: &[rayon::ThreadPool],
    runs: usize,
    run: &(dyn Fn() + Send + Sync),
) -> Vec<Summary> {
    for pool in pools {
        pool.install(run);
    }
    let mut times = vec![Vec::new(); pools.len()];
    for _ in 0..runs {
        for (pool, t) in pools.iter().zip(&mut times) {
            let start = Instant::now();
            pool.install(run);
            t.push(start.elapsed().as_secs_f64());
        }
    }
    times.into_iter().map(Summary::of).collect()
}
