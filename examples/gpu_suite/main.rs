//! The GPU suite: burn-amp's correctness checks (PASS/FAIL lines and a summary) and its speed
//! figures (ratios timed alternately in the same run) on an NVIDIA GPU, through CUDA and
//! through wgpu over Vulkan; or, with `--quick`, the same harness on the CPU (Flex, and wgpu
//! over lavapipe) with small sizes, which is how CI keeps it from rotting.
//!
//! ```sh
//! cargo run --example gpu_suite -- --quick                      # CPU, seconds to minutes
//! ./scripts/gpu-suite.sh pack                                    # build --features cuda, pack
//! ./scripts/gpu-suite.sh run DIR                                 # on the GPU machine
//! ```
//!
//! Writes a Markdown report (`--out FILE`, default `gpu-suite-report.md`) and exits 1 when a
//! check failed or a backend could not start.

#[path = "../bench/alloc.rs"]
mod alloc;
mod checks;
#[cfg(feature = "cuda")]
mod cublaslt;
#[cfg(feature = "cuda")]
mod cuda_kernels;
mod fp8;
#[path = "../bench/kernels.rs"]
mod kernels;
mod matmul;
#[cfg(feature = "nccl")]
mod nccl;
#[cfg(feature = "cuda")]
mod ordered;
mod profile;
mod reads;
// Shared with the bench, which uses more of them.
#[path = "../bench/models.rs"]
#[allow(dead_code)]
mod models;
#[path = "../bench/phases.rs"]
#[allow(dead_code)]
mod phases;
#[path = "../bench/report.rs"]
#[allow(dead_code)]
mod report;
#[path = "../common/section.rs"]
#[allow(dead_code)]
mod section;
#[path = "../bench/stats.rs"]
mod stats;
#[path = "../bench/step_profile.rs"]
mod step_profile;
#[path = "../bench/training.rs"]
mod training;

use std::fmt::Write as _;

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::tensor::backend::Backend;
use burn_amp::accum::AccumBackend;
use burn_amp::fp8::Fp8Backend;
use checks::Checks;
use models::Workload;
pub use report::{Goal, Row};

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

struct Options {
    quick: bool,
    checks_only: bool,
    /// Only the op-by-op profiles (no checks, no speed rows).
    profile_only: bool,
    /// Only the cuBLASLt products: the executor's checks and rates.
    products_only: bool,
    /// Also the products ordered with CubeCL's stream (`OrderedLt`): their chain once hung
    /// an H100 (driver 580), so they run only when asked for.
    ordered: bool,
    out: String,
}

/// The sizes of one mode.
struct Sizes {
    runs: usize,
    random_f32: usize,
    mlp: Workload,
    decoder: Workload,
    matmul: Vec<usize>,
    kernels_quick: bool,
}

impl Sizes {
    fn of(quick: bool) -> Self {
        if quick {
            Self {
                runs: 1,
                random_f32: 1 << 16,
                mlp: Workload::Mlp {
                    width: 64,
                    batch: 8,
                },
                decoder: Workload::Encoder {
                    d_model: 32,
                    layers: 1,
                    seq: 8,
                    batch: 2,
                },
                matmul: vec![64],
                kernels_quick: true,
            }
        } else {
            Self {
                runs: 7,
                random_f32: 1 << 20,
                mlp: Workload::Mlp {
                    width: 4096,
                    batch: 1024,
                },
                decoder: Workload::Encoder {
                    d_model: 1024,
                    layers: 8,
                    seq: 1024,
                    batch: 8,
                },
                matmul: vec![4096, 8192],
                kernels_quick: false,
            }
        }
    }
}

fn parse() -> Options {
    let mut options = Options {
        quick: false,
        checks_only: false,
        profile_only: false,
        products_only: false,
        ordered: false,
        out: "gpu-suite-report.md".into(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => options.quick = true,
            "--checks-only" => options.checks_only = true,
            "--profile-only" => options.profile_only = true,
            "--products-only" => options.products_only = true,
            "--ordered" => options.ordered = true,
            "--out" => match args.next() {
                Some(out) => options.out = out,
                None => usage(),
            },
            _ => usage(),
        }
    }
    options
}

fn usage() -> ! {
    eprintln!(
        "usage: gpu_suite [--quick] [--checks-only | --profile-only | --products-only] [--ordered] \
         [--out FILE]"
    );
    std::process::exit(2);
}

/// Every correctness check on backend `B`.
fn check<B: Backend + Fp8Backend + AccumBackend>(name: &str, sizes: &Sizes) -> Checks {
    let device = B::Device::default();
    let mut checks = Checks::new(name);
    checks::dtypes::<B>(&mut checks, &device);
    checks::float32_is_bare::<B>(&mut checks, &device);
    checks::skipped_step_touches_nothing::<B>(&mut checks, &device);
    fp8::fp8_bytes::<B>(&mut checks, &device, sizes.random_f32);
    fp8::accumulation::<B>(&mut checks, &device);
    fp8::training_step::<B>(&mut checks, &device);
    reads::reads_per_step::<B>(&mut checks, &device);
    checks
}

/// Every speed row on backend `B` (autodiff over it for training) with runtime `R`; each row
/// is printed as soon as it is measured, so that a run stopped early still shows its rows.
fn speed<B: Backend, R: cubecl::Runtime>(
    name: &str,
    sizes: &Sizes,
    policies: &[&str],
    rows: &mut Vec<Row>,
) {
    eprintln!("gpu_suite: speed on {name}");
    let mut add = |new: Vec<Row>| {
        for row in &new {
            eprintln!(
                "gpu_suite: {} [{}]: {} / {} = {:.3}",
                row.what, row.backend, row.measured, row.baseline, row.ratio
            );
        }
        rows.extend(new);
    };
    add(vec![training::overhead::<Autodiff<B>>(
        sizes.mlp, sizes.runs, name,
    )]);
    for workload in [sizes.mlp, sizes.decoder] {
        add(training::policies::<Autodiff<B>>(
            workload, policies, sizes.runs, name,
        ));
    }
    add(vec![training::fused_vs_adam::<Autodiff<B>>(
        sizes.mlp,
        &Default::default(),
        sizes.runs,
        name,
        None,
    )]);
    add(matmul::rows::<B>(&sizes.matmul, sizes.runs, name));
    add(kernels::rows::<R>(
        &Default::default(),
        sizes.kernels_quick,
        sizes.runs,
        name,
    ));
}

fn main() {
    let options = parse();
    let sizes = Sizes::of(options.quick);
    let mut all = Vec::new();
    let mut rows = Vec::new();
    let mut unavailable = Vec::new();
    // The CUDA build of every kernel (only with the `cuda` feature, on a CUDA device).
    #[allow(unused_mut)]
    let mut kernels_md = String::new();
    let fp8_policies = [
        "mixed_float16",
        "mixed_bfloat16",
        "float8_from_mixed_bfloat16",
    ];

    // The op-by-op profiles of each GPU backend (after its speed rows).
    let mut profiles = String::new();
    let profile_runs = if options.quick { 1 } else { 3 };
    let checks = !options.profile_only;
    if options.quick && checks {
        all.push(check::<Flex>("Flex (CPU)", &sizes));
    }
    // The quick mode is the CPU's (Flex, and wgpu over lavapipe): a build with `cuda` run
    // there does not look for a GPU.
    #[cfg(feature = "cuda")]
    if !options.quick {
        use burn::backend::Cuda;
        match burn_amp::probe_backend::<Cuda>(&Default::default()) {
            Ok(()) => {
                let name = format!("CUDA ({})", <Cuda as Backend>::name(&Default::default()));
                if options.products_only {
                    let mut products = Checks::new(&name);
                    cublaslt::check(&mut products, &mut kernels_md);
                    if options.ordered {
                        ordered::check(&mut products, &mut kernels_md);
                    }
                    all.push(products);
                } else if checks {
                    all.push(check::<Cuda>(&name, &sizes));
                    let mut kernels = Checks::new(&name);
                    cuda_kernels::check(&mut kernels, &name, &mut kernels_md);
                    all.push(kernels);
                    let mut products = Checks::new(&name);
                    cublaslt::check(&mut products, &mut kernels_md);
                    if options.ordered {
                        ordered::check(&mut products, &mut kernels_md);
                    }
                    all.push(products);
                    #[cfg(feature = "nccl")]
                    {
                        let mut collective = Checks::new(&name);
                        nccl::check(&mut collective);
                        all.push(collective);
                    }
                }
                if !options.checks_only && !options.products_only {
                    if !options.profile_only {
                        speed::<Cuda, cubecl::cuda::CudaRuntime>(
                            &name,
                            &sizes,
                            &fp8_policies,
                            &mut rows,
                        );
                    }
                    profiles.push_str(&profile::section::<Autodiff<Cuda>>(
                        &name,
                        &[sizes.mlp, sizes.decoder],
                        &["float32", "mixed_bfloat16"],
                        profile_runs,
                    ));
                }
            }
            Err(why) => unavailable.push(format!("CUDA: {why}")),
        }
    }
    let wgpu = if options.quick {
        "wgpu (lavapipe)"
    } else {
        "wgpu (Vulkan)"
    };
    match burn_amp::probe_backend::<Wgpu>(&Default::default()) {
        _ if options.products_only => {}
        Ok(()) => {
            if checks {
                all.push(check::<Wgpu>(wgpu, &sizes));
            }
            if !options.checks_only {
                // WGSL has no bf16: the f16 policies only.
                let policies = ["mixed_float16", "float8_from_mixed_float16"];
                if !options.profile_only {
                    speed::<Wgpu, cubecl::wgpu::WgpuRuntime>(wgpu, &sizes, &policies, &mut rows);
                }
                profiles.push_str(&profile::section::<Autodiff<Wgpu>>(
                    wgpu,
                    &[sizes.mlp, sizes.decoder],
                    &["float32", "mixed_float16"],
                    profile_runs,
                ));
            }
        }
        Err(why) => unavailable.push(format!("wgpu: {why}")),
    }
    if options.quick && !options.checks_only && !options.profile_only {
        speed_on_flex(&sizes, &fp8_policies, &mut rows);
    }

    let results: Vec<_> = all.iter().flat_map(|c| &c.results).collect();
    let passed = results.iter().filter(|c| c.passed).count();
    let failed = results.len() - passed;
    for why in &unavailable {
        println!("UNAVAILABLE {why}");
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# burn-amp GPU suite{}\n",
        if options.quick { " (--quick, CPU)" } else { "" }
    );
    // Read once: it reads /proc and asks nvidia-smi.
    let machine = report::machine();
    let _ = writeln!(md, "- Machine: {machine}");
    let _ = writeln!(md, "- Checks: {passed} passed, {failed} failed\n");
    for why in &unavailable {
        let _ = writeln!(md, "- UNAVAILABLE: {why}");
    }
    for c in &results {
        let word = if c.passed { "PASS" } else { "FAIL" };
        let _ = writeln!(md, "- {word} [{}] {}: {}", c.backend, c.name, c.detail);
    }
    md.push_str(&kernels_md);
    if !rows.is_empty() {
        let _ = writeln!(md, "\n## Speed\n");
        md.push_str(&report::table(&rows, sizes.runs, options.quick, &machine));
    }
    md.push_str(&profiles);
    if let Err(e) = std::fs::write(&options.out, &md) {
        eprintln!("gpu_suite: writing {}: {e}", options.out);
        std::process::exit(2);
    }
    if !rows.is_empty() {
        print!(
            "{}",
            report::table(&rows, sizes.runs, options.quick, &machine)
        );
    }
    eprintln!("gpu_suite: report written to {}", options.out);
    println!("gpu_suite: {passed} passed, {failed} failed");
    if failed > 0 || !unavailable.is_empty() || (all.is_empty() && checks) {
        std::process::exit(1);
    }
}

/// The quick mode's speed rows on Flex: proves the training rows run, at toy sizes.
fn speed_on_flex(sizes: &Sizes, policies: &[&str], rows: &mut Vec<Row>) {
    let name = "Flex (CPU)";
    rows.push(training::overhead::<Autodiff<Flex>>(
        sizes.mlp, sizes.runs, name,
    ));
    rows.extend(training::policies::<Autodiff<Flex>>(
        sizes.decoder,
        policies,
        sizes.runs,
        name,
    ));
    rows.extend(training::memory::<Autodiff<Flex>>(
        sizes.decoder,
        policies,
        name,
    ));
    rows.push(training::fused_vs_adam::<Autodiff<Flex>>(
        sizes.mlp,
        &Default::default(),
        sizes.runs,
        name,
        None,
    ));
    rows.extend(matmul::rows::<Flex>(&sizes.matmul, sizes.runs, name));
}
