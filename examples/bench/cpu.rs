//! The CPU rows (Flex): burn-amp's casts against a copy and against Flex's own cast, its
//! GEMM against Flex's f32 matmul, and training steps of each mixed policy against float32,
//! with burn-amp's CPU kernels (`kernels=auto`, the default) and without them
//! (`kernels=backend`: every cast a separate Flex op, Flex's matmul), by phase.
//!
//! The goals depend on the CPU: with `avx512_bf16` a bf16 product is faster than an f32
//! one and `mixed_bfloat16` must be faster than float32; without it bf16 runs at f32
//! speed and mixed precision must cost (almost) nothing.

use std::fmt::Write as _;

use burn::backend::{Autodiff, Flex};
use burn::tensor::{Distribution, FloatDType, Tensor};
use burn_amp::{MixedPrecision, Policy, policy::Kernels};
use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::isa::IsaLevel;
use rayon::prelude::*;

use crate::models::{Opt, Workload, bare_with, mixed_with};
use crate::phases::{Phases, time_pair_phases, time_pair_phases_between};
use crate::pytorch::{Paced, Torch};
use crate::stats::{Summary, time_pair};
use crate::{Goal, Row, progress};

const FLEX: &str = "Flex (CPU)";

/// Whether this CPU multiplies bf16 faster than f32.
pub fn has_bf16_dot() -> bool {
    Isa::detect().level() >= IsaLevel::Avx512Bf16
}

/// burn-amp's step times the PyTorch rows compare with: `(workload, policy, median ms)`,
/// with FusedAdamW (PyTorch trains with its own Adam, which is one pass too).
pub type OurSteps = Vec<(Workload, String, f64)>;

/// The CPU rows, the phase breakdown (Markdown), and burn-amp's steps for the PyTorch rows;
/// `torch` runs PyTorch's steps of each workload alternately with burn-amp's FusedAdamW
/// `mixed_bfloat16` steps of it.
pub fn rows(quick: bool, runs: usize, torch: &mut Torch) -> (Vec<Row>, String, OurSteps) {
    let mut rows = casts(quick, runs);
    rows.extend(matmuls(quick, runs));
    let mut breakdown = String::new();
    // Each workload, whether its phases are detailed, and the name PyTorch's script gives it
    // (`benches/pytorch_mlp.py --workloads`), where it trains it.
    let workloads: Vec<(Workload, bool, Option<&str>)> = if quick {
        vec![(
            Workload::Mlp {
                width: 64,
                batch: 8,
            },
            true,
            None,
        )]
    } else {
        vec![
            (
                Workload::Mlp {
                    width: 4096,
                    batch: 128,
                },
                true,
                Some("mlp"),
            ),
            (
                Workload::Mlp {
                    width: 4096,
                    batch: 1024,
                },
                false,
                Some("mlp-b1024"),
            ),
            (
                Workload::Stack {
                    width: 1024,
                    layers: 4,
                    batch: 512,
                },
                false,
                Some("stack"),
            ),
            (
                Workload::Encoder {
                    d_model: 256,
                    layers: 4,
                    seq: 128,
                    batch: 16,
                },
                false,
                Some("encoder"),
            ),
            (Workload::Cnn { batch: 64 }, false, Some("cnn")),
            (Workload::NormCnn { batch: 32 }, false, Some("norm-cnn")),
            (Workload::GPT_CPU, false, Some("gpt")),
            (Workload::GPT_200, false, Some("gpt-200")),
        ]
    };
    for (workload, detailed, _) in workloads.iter().copied() {
        let (r, md, _) = steps(workload, runs, detailed, Opt::BurnAdam, None);
        rows.extend(r);
        breakdown.push_str(&md);
    }
    breakdown.push_str(&flex_elementwise(quick, runs));
    // The same steps with FusedAdamW on both sides, and the optimizer step against memory.
    let mut fused_md = String::new();
    let mut fused_mlp = None;
    let mut ours = OurSteps::new();
    for (workload, detailed, torch_key) in workloads {
        let mut paced = torch_key.and_then(|key| {
            progress(&format!("PyTorch on the CPU: {}", workload.describe()));
            torch.paced(key)
        });
        let (r, md, phases) = steps(workload, runs, detailed, Opt::FusedAdam, paced.as_mut());
        if let Some(paced) = paced {
            torch.finish_paced(paced);
        }
        rows.extend(r);
        fused_md.push_str(&md);
        for (policy, p) in &phases {
            ours.push((workload, policy.clone(), p.total.median * 1e3));
        }
        if detailed {
            fused_mlp = Some((workload, phases));
        }
    }
    if let Some((workload, phases)) = fused_mlp {
        rows.extend(optimizer_rows(workload, &phases, runs));
    }
    (
        rows,
        breakdown + "\n### The same steps with FusedAdamW on both sides\n" + &fused_md,
        ours,
    )
}

/// burn-amp's steps against PyTorch's on the same workloads, same run: each mixed policy
/// against PyTorch's autocast step of it (or `mixed_bfloat16` against PyTorch's float32
/// step, where that is its fastest), float32 against float32.
pub fn torch_rows(ours: &OurSteps, torch: &[crate::pytorch::TorchRow]) -> Vec<Row> {
    let mut rows = Vec::new();
    // PyTorch's float32 step of a workload is taken from its first (fully timed) invocation
    // only: a later one-step invocation (the slow f16 path) times float32 once, cold.
    let mut f32_seen: Vec<&str> = Vec::new();
    for t in torch {
        let find = |policy: &str| {
            ours.iter()
                .find(|(w, p, _)| w.describe() == t.workload && p == policy)
                .map(|(w, _, ms)| (*w, *ms))
        };
        match t.mixed_ms {
            Some(torch_mixed) => {
                if let Some((workload, mixed)) = find(&t.policy) {
                    rows.push(autocast_row(t, torch_mixed, workload, mixed));
                }
            }
            // PyTorch's float32 step alone: its fastest where its 16-bit path is slow.
            None => {
                if let Some((workload, mixed)) = find("mixed_bfloat16") {
                    rows.push(Row {
                        what: format!(
                            "burn-amp mixed_bfloat16 step vs PyTorch's fastest step (float32 on this CPU), {}",
                            t.workload
                        ),
                        backend: FLEX.into(),
                        baseline: format!("PyTorch float32 {:.1} ms", t.f32_ms),
                        measured: format!("burn-amp (FusedAdamW) {mixed:.1} ms"),
                        ratio: mixed / t.f32_ms,
                        goal: Goal::AtMost(torch_goal(workload)),
                        note: "same CPU, same run; PyTorch's bf16 autocast takes a slow path \
                               without avx512_bf16, so its float32 step (fused Adam) is its fastest"
                            .into(),
                    });
                }
            }
        }
        if f32_seen.contains(&t.workload.as_str()) {
            continue;
        }
        f32_seen.push(&t.workload);
        if let Some((_, f32)) = find("float32") {
            rows.push(Row {
                what: format!(
                    "burn-amp float32 step vs PyTorch's float32 step, {}",
                    t.workload
                ),
                backend: FLEX.into(),
                baseline: format!("PyTorch {:.1} ms", t.f32_ms),
                measured: format!("burn-amp (Flex, FusedAdamW) {f32:.1} ms"),
                ratio: f32 / t.f32_ms,
                goal: Goal::None,
                note: "for reference: Flex's f32 ops against PyTorch's".into(),
            });
        }
    }
    rows
}

/// burn-amp's `mixed` step (ms) of `workload` against PyTorch's autocast step of the same
/// policy (`torch_mixed` ms).
fn autocast_row(
    t: &crate::pytorch::TorchRow,
    torch_mixed: f64,
    workload: Workload,
    mixed: f64,
) -> Row {
    // Where PyTorch's 16-bit step is several times its float32 step, this CPU has no dot
    // product for that dtype and PyTorch takes a slow path: beating it is no goal.
    let slow_path = torch_mixed > 3.0 * t.f32_ms;
    Row {
        what: format!(
            "burn-amp {} step vs PyTorch's autocast step, {}",
            t.policy, t.workload
        ),
        backend: FLEX.into(),
        baseline: format!("PyTorch {torch_mixed:.1} ms"),
        measured: format!("burn-amp (FusedAdamW) {mixed:.1} ms"),
        ratio: mixed / torch_mixed,
        goal: if slow_path {
            Goal::None
        } else {
            Goal::AtMost(torch_goal(workload))
        },
        note: if slow_path {
            format!(
                "for reference only: PyTorch's {} CPU path here is {:.0}x its float32 step",
                t.policy,
                torch_mixed / t.f32_ms
            )
        } else {
            "same CPU, same run; PyTorch: torch.autocast (+ GradScaler for f16), Adam".into()
        },
    }
}

/// A step's phases by configuration: `(policy, kernels) -> phases`, and float32's.
type StepPhases = Vec<(String, Phases)>;

/// FusedAdamW's optimizer step against the memory traffic it must do (read the parameter,
/// its gradient and both moments, write the parameter and the moments: 7 f32 streams),
/// measured as a threaded pass doing exactly that traffic; and float32's step with it
/// against Burn's Adam.
fn optimizer_rows(workload: Workload, fused: &StepPhases, runs: usize) -> Vec<Row> {
    let Some((_, fused_f32)) = fused.iter().find(|(name, _)| name == "float32") else {
        return Vec::new();
    };
    let n = workload.params();
    let (mut p, g, mut m, mut v) = (
        vec![0.5f32; n],
        vec![0.25f32; n],
        vec![0.0f32; n],
        vec![0.0f32; n],
    );
    let chunk = 1 << 15;
    let (_, traffic) = time_pair(
        1,
        runs,
        || {},
        || {
            p.par_chunks_mut(chunk)
                .zip(g.par_chunks(chunk))
                .zip(m.par_chunks_mut(chunk))
                .zip(v.par_chunks_mut(chunk))
                .for_each(|(((p, g), m), v)| {
                    for i in 0..p.len() {
                        p[i] += g[i];
                        m[i] += g[i];
                        v[i] += g[i];
                    }
                });
        },
    );
    let bytes = 7.0 * 4.0 * n as f64;
    let mut rows = vec![Row {
        what: format!(
            "Optimizer step, FusedAdamW, {} ({:.1}M f32 parameters): time vs the 7 f32 streams it must move",
            workload.describe(),
            n as f64 / 1e6
        ),
        backend: FLEX.into(),
        baseline: format!(
            "7 streams {} ms ({:.1} GB/s)",
            traffic.ms(),
            bytes / traffic.median / 1e9
        ),
        measured: format!("FusedAdamW {} ms", fused_f32.optimizer.ms()),
        ratio: fused_f32.optimizer.median / traffic.median,
        goal: Goal::AtMost(1.5),
        note: "optimizer phase of the float32 step".into(),
    }];
    let device = Default::default();
    rows.push(crate::training::fused_vs_adam::<Autodiff<Flex>>(
        workload,
        &device,
        runs,
        FLEX,
        Some(0.75),
    ));
    rows
}

/// What lies in Burn's reach: Flex's elementwise ops by dtype (its f16 and bf16 paths
/// convert each value on its own), against a threaded copy of the same f32 values.
fn flex_elementwise(quick: bool, runs: usize) -> String {
    let (rows, cols) = if quick { (64, 64) } else { (2048, 1024) };
    let device = Default::default();
    let x = Tensor::<Flex, 2>::random([rows, cols], Distribution::Default, &device);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n**Flex's own elementwise ops by dtype** ({rows}x{cols} values; ms, median of {runs}; \
         burn-amp does not run these: Burn's):\n"
    );
    let _ = writeln!(md, "| Op | f32 | bf16 | f16 |");
    let _ = writeln!(md, "|---|---|---|---|");
    type Op = fn(Tensor<Flex, 2>) -> Tensor<Flex, 2>;
    let ops: [(&str, Op); 4] = [
        ("add (x + x)", |t| t.clone() + t),
        ("mul_scalar (x * 0.5)", |t| t.mul_scalar(0.5)),
        ("relu", burn::tensor::activation::relu),
        ("erf (GELU's)", |t| t.erf()),
    ];
    for (name, op) in ops {
        let mut cells = Vec::new();
        for dtype in [FloatDType::F32, FloatDType::BF16, FloatDType::F16] {
            let t = x.clone().cast(dtype);
            let (_, s) = time_pair(
                1,
                runs,
                || {},
                || {
                    let _ = op(t.clone());
                },
            );
            cells.push(format!("{:.2}", s.median * 1e3));
        }
        let _ = writeln!(md, "| {name} | {} |", cells.join(" | "));
    }
    md
}

/// The same values as a tensor of `MixedPrecision<Flex>` (same primitive, no copy).
fn mixed_tensor(t: &Tensor<Flex, 2>) -> Tensor<MixedPrecision<Flex>, 2> {
    Tensor::from_primitive(burn::tensor::TensorPrimitive::Float(
        t.clone().into_primitive().tensor(),
    ))
}

fn gbs(bytes: f64, s: &Summary) -> f64 {
    bytes / s.median / 1e9
}

/// Casts of a 4096x4096 tensor: burn-amp's (through `MixedPrecision<Flex>`, into a new
/// tensor) against a threaded copy of the same values into a new buffer (both pay for
/// fresh pages), and against Flex's own cast.
fn casts(quick: bool, runs: usize) -> Vec<Row> {
    let n = if quick { 256 } else { 4096 };
    let device = Default::default();
    let x = Tensor::<Flex, 2>::random([n, n], Distribution::Default, &device);
    let xm = mixed_tensor(&x);
    let values: Vec<f32> = x.to_data().to_vec().unwrap();
    let threaded_copy = || {
        // Allocated as burn-amp's outputs are (huge pages where the OS offers them): the
        // two sides differ only in the work.
        let mut copy = burn_amp_kernels::cpu::cast::zeroed::<f32>(values.len());
        copy.par_chunks_mut(1 << 16)
            .zip(values.par_chunks(1 << 16))
            .for_each(|(d, s)| d.copy_from_slice(s));
        copy
    };
    let mut out = Vec::new();
    for (label, from, to) in [
        ("f32 -> bf16", FloatDType::F32, FloatDType::BF16),
        ("bf16 -> f32", FloatDType::BF16, FloatDType::F32),
        ("f32 -> f16", FloatDType::F32, FloatDType::F16),
    ] {
        let src = xm.clone().cast(from);
        let src_flex = x.clone().cast(from);
        let (copy_t, ours) = time_pair(
            1,
            runs,
            || drop(threaded_copy()),
            || {
                let _ = src.clone().cast(to);
            },
        );
        let (_, flex) = time_pair(
            1,
            runs.min(3),
            || {},
            || {
                let _ = src_flex.clone().cast(to);
            },
        );
        let elems = (n * n) as f64;
        let size = |d: FloatDType| if d == FloatDType::F32 { 4.0 } else { 2.0 };
        let bytes = elems * (size(from) + size(to));
        out.push(Row {
            what: format!("Cast {label}, {n}x{n}, into a new tensor: bandwidth vs a threaded copy into a new buffer"),
            backend: FLEX.into(),
            baseline: format!(
                "copy {:.1} GB/s, {} ms",
                gbs(8.0 * elems, &copy_t),
                copy_t.ms()
            ),
            measured: format!("{:.1} GB/s, {} ms", gbs(bytes, &ours), ours.ms()),
            ratio: gbs(bytes, &ours) / gbs(8.0 * elems, &copy_t),
            goal: Goal::AtLeast(0.5),
            note: format!("Flex's own cast: {} ms", flex.ms()),
        });
    }
    out
}

/// The MLP's three products in bf16 (x W, the weight gradient x^T g, the input gradient
/// g W^T): burn-amp's GEMM reading the f32 weight against Flex's f32 matmul.
fn matmuls(quick: bool, runs: usize) -> Vec<Row> {
    let (m, k, n): (usize, usize, usize) = if quick {
        (8, 64, 64)
    } else {
        (128, 4096, 4096)
    };
    let device = Default::default();
    let flops = 2.0 * (m * k * n) as f64;
    let x = Tensor::<Flex, 2>::random([m, k], Distribution::Default, &device);
    let w = Tensor::<Flex, 2>::random([k, n], Distribution::Default, &device);
    let g = Tensor::<Flex, 2>::random([m, n], Distribution::Default, &device);
    let (xm, wm, gm) = (
        mixed_tensor(&x).cast(FloatDType::BF16),
        mixed_tensor(&w),
        mixed_tensor(&g).cast(FloatDType::BF16),
    );
    let mut out = Vec::new();
    type Op<'a> = Box<dyn Fn() + 'a>;
    let products: [(&str, Op, Op); 3] = [
        (
            "x W (bf16 x, f32 W)",
            Box::new(|| {
                let _ = x.clone().matmul(w.clone());
            }),
            Box::new(|| {
                let _ = xm.clone().matmul(wm.clone());
            }),
        ),
        (
            "weight gradient x^T g",
            Box::new(|| {
                let _ = x.clone().transpose().matmul(g.clone());
            }),
            Box::new(|| {
                let _ = xm.clone().transpose().matmul(gm.clone());
            }),
        ),
        (
            "input gradient g W^T",
            Box::new(|| {
                let _ = g.clone().matmul(w.clone().transpose());
            }),
            Box::new(|| {
                let _ = gm.clone().matmul(wm.clone().transpose());
            }),
        ),
    ];
    burn_amp::with_policy(Policy::mixed_bfloat16(), || {
        for (label, f32_op, bf16_op) in products {
            let (a, b) = time_pair(1, runs, f32_op, bf16_op);
            out.push(Row {
                what: format!("Matmul {m}x{k}x{n}, {label}: burn-amp bf16 vs Flex f32"),
                backend: FLEX.into(),
                baseline: format!(
                    "Flex f32 {} ms, {:.0} GFLOP/s",
                    a.ms(),
                    flops / a.median / 1e9
                ),
                measured: format!("bf16 {} ms, {:.0} GFLOP/s", b.ms(), flops / b.median / 1e9),
                ratio: b.median / a.median,
                goal: Goal::AtMost(if has_bf16_dot() { 0.75 } else { 1.05 }),
                note: format!("{} kernel", kernel_name()),
            });
        }
    });
    out.extend(bf16_kernels(m, k, n, runs));
    out
}

/// Where the CPU has both, the two AVX-512 kernels of bf16 products on the same x W: bf16
/// pairs by `vdpbf16ps` against f32 FMAs on the values widened while packed. Which one the
/// GEMM chooses follows the CPU's `Bf16Dot` rate; this row shows that the choice holds here.
fn bf16_kernels(m: usize, k: usize, n: usize, runs: usize) -> Vec<Row> {
    use burn_amp_kernels::cpu::cast::Format;
    use burn_amp_kernels::cpu::gemm::{self, Kernel, MatRef};
    use burn_amp_kernels::cpu::isa::Bf16Dot;
    let isa = Isa::detect();
    if isa.level() != IsaLevel::Avx512Bf16 {
        return Vec::new();
    }
    let [pairs, fma] = [Bf16Dot::FullRate, Bf16Dot::HalfRate]
        .map(|rate| Kernel::select(isa.with_bf16_dot(rate), Format::Bf16));
    let x: Vec<half::bf16> = (0..m * k)
        .map(|i| half::bf16::from_f32(((i * 7 % 13) as f32 - 6.0) / 7.0))
        .collect();
    let w: Vec<f32> = (0..k * n)
        .map(|i| ((i * 5 % 11) as f32 - 5.0) / 9.0)
        .collect();
    let mut y = vec![half::bf16::ZERO; m * n];
    let (xm, wm) = (
        MatRef::row_major(&x, m, k).expect("m x k"),
        MatRef::row_major(&w, k, n).expect("k x n"),
    );
    let mut y2 = y.clone();
    let (a, b) = time_pair(
        1,
        runs,
        || gemm::gemm(pairs, xm, wm, &mut y).expect("shapes"),
        || gemm::gemm(fma, xm, wm, &mut y2).expect("shapes"),
    );
    let flops = 2.0 * (m * k * n) as f64;
    let chosen = Kernel::select(isa, Format::Bf16);
    vec![Row {
        what: format!("bf16 GEMM {m}x{k}x{n}, x W: f32 FMAs on widened values vs vdpbf16ps pairs"),
        backend: FLEX.into(),
        baseline: format!(
            "{} {} ms, {:.0} GFLOP/s",
            pairs.name(),
            a.ms(),
            flops / a.median / 1e9
        ),
        measured: format!(
            "{} {} ms, {:.0} GFLOP/s",
            fma.name(),
            b.ms(),
            flops / b.median / 1e9
        ),
        ratio: b.median / a.median,
        // The kernel chosen for this CPU should be the faster one.
        goal: match isa.bf16_dot() {
            Bf16Dot::HalfRate => Goal::AtMost(1.0),
            Bf16Dot::FullRate => Goal::AtLeast(1.0),
        },
        note: format!("chosen here: {} ({:?})", chosen.name(), isa.bf16_dot()),
    }]
}

fn kernel_name() -> &'static str {
    burn_amp_kernels::cpu::gemm::Kernel::select(
        Isa::detect(),
        burn_amp_kernels::cpu::cast::Format::Bf16,
    )
    .name()
}

/// The goal of burn-amp's mixed step against PyTorch's autocast step: at most PyTorch's,
/// but for the CNN, whose convolutions PyTorch runs with oneDNN's direct kernels (1.2x its
/// step on up to 2 cores, 1.5x on more).
fn torch_goal(workload: Workload) -> f64 {
    match workload {
        Workload::Cnn { .. } | Workload::NormCnn { .. } if rayon::current_num_threads() <= 2 => 1.2,
        Workload::Cnn { .. } | Workload::NormCnn { .. } => 1.5,
        _ => 1.0,
    }
}

/// The goal of a policy's step-time ratio on this CPU.
fn step_goal(policy: &str, workload: Workload) -> f64 {
    let bf16_dot = has_bf16_dot();
    match (policy, workload) {
        ("mixed_float16", _) => 1.0,
        (_, Workload::Encoder { .. } | Workload::Gpt { .. }) if !bf16_dot => 0.9,
        (_, _) if !bf16_dot => 1.05,
        (_, Workload::Mlp { batch: 128, .. }) => 0.90,
        (_, Workload::Mlp { .. }) => 0.65,
        (_, Workload::Stack { .. }) => 0.75,
        (_, Workload::Encoder { .. } | Workload::Gpt { .. }) => 0.40,
        (_, Workload::Cnn { .. } | Workload::NormCnn { .. }) => 0.60,
    }
}

/// One workload's step under `policy` (default `mixed_bfloat16`) against the bare float32
/// step, FusedAdamW on both, timed alternately by phase as in the step tables (`bench
/// --profile NAME --pair`: one table row in seconds, to compare two builds); written
/// nowhere.
pub fn pair(workload: Workload, runs: usize, policy: Option<&str>) -> String {
    type B = Autodiff<Flex>;
    let device = Default::default();
    let spec = policy.unwrap_or("mixed_bfloat16");
    let policy: Policy = spec.parse().expect("checked by the caller");
    let mut base = bare_with::<B>(workload, &device, Opt::FusedAdam);
    MixedPrecision::<B>::set_policy(&device, policy).expect("a policy Flex runs");
    let mut step = mixed_with::<B>(workload, &device, Opt::FusedAdam);
    let (b, m) = time_pair_phases(1, runs, || base.phases(), || step.phases());
    drop(step);
    MixedPrecision::<B>::clear_policy(&device);
    let ms = |s: &Summary| format!("{:.2}", s.median * 1e3);
    let row = |name: &str, p: &Phases| {
        format!(
            "| {name} | {} | {} | {} | {} ({:.2}-{:.2}) |\n",
            ms(&p.forward),
            ms(&p.backward),
            ms(&p.optimizer),
            ms(&p.total),
            p.total.min * 1e3,
            p.total.max * 1e3
        )
    };
    format!(
        "\n**{}**, FusedAdamW (Flex; ms, median of {runs}, alternately):\n\n\
         | Policy | Forward | Backward | Optimizer | Step |\n|---|---|---|---|---|\n{}{}",
        workload.describe(),
        row("float32 (bare Autodiff<Flex>)", &b),
        row(spec, &m)
    )
}

/// Training steps of each mixed policy against float32 (bare `Autodiff<Flex>`), with and
/// without burn-amp's kernels, by phase, both sides training with `opt`; one of `paced`'s
/// steps (PyTorch's) after each pair of `mixed_bfloat16` (burn-amp's kernels) and float32.
fn steps(
    workload: Workload,
    runs: usize,
    detailed: bool,
    opt: Opt,
    mut paced: Option<&mut Paced>,
) -> (Vec<Row>, String, StepPhases) {
    type B = Autodiff<Flex>;
    let device = Default::default();
    progress(&format!(
        "Flex steps, {}: {}",
        opt.name(),
        workload.describe()
    ));
    let mut base = bare_with::<B>(workload, &device, opt);
    let mut rows = Vec::new();
    let mut all = StepPhases::new();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n**{}**, {} (Flex; ms, median of {runs}; float32 timed alternately with each):\n",
        workload.describe(),
        opt.name()
    );
    let _ = writeln!(
        md,
        "| Policy | Kernels | Forward | Backward | Optimizer | Step | Step / float32 |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|---|---|");
    let configs: Vec<(&str, Kernels)> = if detailed && opt == Opt::BurnAdam {
        vec![
            ("float32", Kernels::Auto),
            ("mixed_bfloat16", Kernels::Backend),
            ("mixed_bfloat16", Kernels::Auto),
            ("mixed_float16", Kernels::Backend),
            ("mixed_float16", Kernels::Auto),
        ]
    } else {
        vec![
            ("mixed_bfloat16", Kernels::Auto),
            ("mixed_float16", Kernels::Auto),
        ]
    };
    let mut base_line = None;
    for (name, kernels) in configs {
        let policy: Policy = name.parse::<Policy>().unwrap().with_kernels(kernels);
        MixedPrecision::<B>::set_policy(&device, policy).unwrap();
        let mut step = mixed_with::<B>(workload, &device, opt);
        let interleaved = name == "mixed_bfloat16" && kernels == Kernels::Auto;
        let between = || {
            if let Some(paced) = paced.as_mut().filter(|_| interleaved) {
                paced.step();
            }
        };
        let (b, m) = time_pair_phases_between(1, runs, || base.phases(), || step.phases(), between);
        drop(step);
        MixedPrecision::<B>::clear_policy(&device);
        let ms = |s: &Summary| format!("{:.1}", s.median * 1e3);
        if base_line.is_none() {
            base_line = Some(b);
            all.push(("float32".to_string(), b));
            let _ = writeln!(
                md,
                "| float32 (bare Autodiff<Flex>) | - | {} | {} | {} | {} | 1 |",
                ms(&b.forward),
                ms(&b.backward),
                ms(&b.optimizer),
                ms(&b.total)
            );
        }
        let ratio = m.total.median / b.total.median;
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {} | {} | {ratio:.3} |",
            kernels.name(),
            ms(&m.forward),
            ms(&m.backward),
            ms(&m.optimizer),
            ms(&m.total)
        );
        if kernels == Kernels::Backend {
            continue;
        }
        all.push((name.to_string(), m));
        rows.extend(step_rows(name, workload, &b, &m, opt));
    }
    (rows, md, all)
}

fn step_rows(name: &str, workload: Workload, b: &Phases, m: &Phases, opt: Opt) -> Vec<Row> {
    let cpu = if has_bf16_dot() {
        "avx512_bf16 CPU"
    } else {
        "CPU without avx512_bf16"
    };
    if opt == Opt::FusedAdam {
        // The fused optimizer's goals: bf16 faster than float32 by 20% where the CPU has
        // bf16 products (the encoder and the CNN: their own goals), f16 (with its loss
        // scale) no slower than float32.
        let goal = match (name, workload) {
            ("mixed_float16", _) => 1.0,
            (
                _,
                Workload::Encoder { .. }
                | Workload::Cnn { .. }
                | Workload::NormCnn { .. }
                | Workload::Gpt { .. },
            ) => step_goal(name, workload),
            _ if has_bf16_dot() => 0.80,
            _ => 1.0,
        };
        return vec![Row {
            what: format!(
                "{name} vs float32, both with FusedAdamW: step time, {}",
                workload.describe()
            ),
            backend: FLEX.into(),
            baseline: format!("float32 {} ms", b.total.ms()),
            measured: format!("{name} {} ms", m.total.ms()),
            ratio: m.total.median / b.total.median,
            goal: Goal::AtMost(goal),
            note: format!("{cpu}; mixed_float16 with LossScaleOptimizer<FusedAdamW>"),
        }];
    }
    if name == "float32" {
        return vec![Row {
            what: format!("Decorator overhead: training step, {}", workload.describe()),
            backend: FLEX.into(),
            baseline: format!("autodiff<flex> {} ms", b.total.ms()),
            measured: format!("MixedPrecision, float32: {} ms", m.total.ms()),
            ratio: m.total.median / b.total.median,
            goal: Goal::AtMost(1.02),
            note: String::new(),
        }];
    }
    let mut rows = vec![Row {
        what: format!("{name} vs float32: step time, {}", workload.describe()),
        backend: FLEX.into(),
        baseline: format!("float32 {} ms", b.total.ms()),
        measured: format!("{name} {} ms", m.total.ms()),
        ratio: m.total.median / b.total.median,
        goal: Goal::AtMost(step_goal(name, workload)),
        note: format!("{cpu}; Burn's Adam on both sides"),
    }];
    if matches!(workload, Workload::Mlp { batch: 128, .. }) && name == "mixed_bfloat16" {
        let fb = |p: &Phases| p.forward.median + p.backward.median;
        rows.push(Row {
            what: format!(
                "{name} vs float32: forward + backward (no optimizer), {}",
                workload.describe()
            ),
            backend: FLEX.into(),
            baseline: format!("float32 {:.1} ms", fb(b) * 1e3),
            measured: format!("{name} {:.1} ms", fb(m) * 1e3),
            ratio: fb(m) / fb(b),
            goal: Goal::AtMost(if has_bf16_dot() { 0.70 } else { 1.05 }),
            note: cpu.into(),
        });
    }
    rows
}
