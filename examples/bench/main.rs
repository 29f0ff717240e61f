//! Writes BENCHMARKS.md: every figure a ratio measured in the same run (median of several
//! runs, with min and max), with its goal and whether it is met.
//!
//! ```sh
//! cargo run --release --example bench                  # rewrites the table in BENCHMARKS.md (~5 min, 2 cores)
//! cargo run --release --example bench -- --quick       # checks the harness runs (seconds)
//! cargo run --release --example bench -- --threads 4   # on a pool of 4 threads
//! cargo run --release --example bench -- --scaling     # 1, 2, 4, ... threads: the scaling table
//! cargo run --release --example bench -- --profile cnn # one model's mixed_bfloat16 op table (encoder, cnn, norm-cnn, gpt, gpt-200, mlp, mlp-b1024, stack)
//! cargo run --release --example bench -- --profile encoder --policy float8_from_mixed_bfloat16
//! ```

mod alloc;
mod cpu;
mod kernels;
mod models;
mod phases;
mod profile;
mod report;
mod scaling;
#[path = "../common/section.rs"]
mod section;
mod stats;
mod step_profile;
mod training;

use burn::backend::{Autodiff, Flex, Wgpu};

mod pytorch;
use models::Workload;
pub use report::{Goal, Row};

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

fn main() {
    let (mut quick, mut out, mut only) = (false, None, None);
    let (mut threads, mut scaling, mut profile, mut policy) = (None, false, None, None);
    let mut pair = false;
    let mut python = "python3".to_string();
    let mut args = std::env::args().skip(1);
    let usage = || -> ! {
        eprintln!(
            "usage: bench [--quick] [--out FILE] [--only cpu|wgpu|cuda] [--python PATH] \
             [--threads N] [--scaling] [--profile encoder|cnn|norm-cnn|gpt|gpt-200|mlp|mlp-b1024|stack [--policy SPEC] [--pair]]"
        );
        std::process::exit(2);
    };
    while let Some(arg) = args.next() {
        match (arg.as_str(), &out) {
            ("--quick", _) => quick = true,
            ("--out", None) => out = args.next(),
            ("--only", _) => only = args.next(),
            ("--python", _) => python = args.next().unwrap_or(python),
            ("--threads", _) => match args.next().and_then(|n| n.parse::<usize>().ok()) {
                Some(n) if n > 0 => threads = Some(n),
                _ => usage(),
            },
            ("--scaling", _) => scaling = true,
            ("--profile", _) => profile = args.next(),
            ("--policy", _) => policy = args.next(),
            ("--pair", _) => pair = true,
            _ => usage(),
        }
    }
    // Rayon's pool: every CPU kernel, and Flex's own ops, run on it.
    if let Some(n) = threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
            .expect("the global pool is built once, before any work");
    }
    let run = |section: &str| only.as_deref().is_none_or(|o| o == section);
    let out = out.unwrap_or_else(|| {
        if quick {
            "target/BENCHMARKS-quick.md".into()
        } else {
            "BENCHMARKS.md".into()
        }
    });
    let runs = if quick { 1 } else { 7 };
    if scaling {
        let cores = threads.unwrap_or_else(rayon::current_num_threads);
        let counts = scaling::thread_counts(cores);
        let md = format!(
            "Measured {} on {}.\n{}",
            section::date(),
            section::machine(),
            scaling::section(quick, runs.min(5), &counts)
        );
        print!("{md}");
        let marker = format!("scaling-{cores}-threads");
        let command = format!("cargo run --release --example bench -- --scaling --threads {cores}");
        if let Err(e) = section::write_section(std::path::Path::new(&out), &marker, &command, &md) {
            eprintln!("error: writing {out}: {e}");
            std::process::exit(2);
        }
        progress(&format!("scaling table written to {out}"));
        return;
    }
    let (mlp, mlp_small, encoder) = if quick {
        (
            Workload::Mlp {
                width: 64,
                batch: 8,
            },
            Workload::Mlp {
                width: 64,
                batch: 8,
            },
            Workload::Encoder {
                d_model: 32,
                layers: 1,
                seq: 8,
                batch: 2,
            },
        )
    } else {
        (
            Workload::Mlp {
                width: 4096,
                batch: 128,
            },
            Workload::Mlp {
                width: 512,
                batch: 128,
            },
            Workload::Encoder {
                d_model: 256,
                layers: 4,
                seq: 128,
                batch: 16,
            },
        )
    };
    if let Some(name) = profile {
        let workload = match name.as_str() {
            "encoder" => encoder,
            "cnn" => Workload::Cnn { batch: 64 },
            "norm-cnn" => Workload::NormCnn { batch: 32 },
            "gpt" => Workload::GPT_CPU,
            "gpt-200" => Workload::GPT_200,
            "mlp" => mlp,
            "mlp-b1024" => Workload::Mlp {
                width: 4096,
                batch: 1024,
            },
            "stack" => Workload::Stack {
                width: 1024,
                layers: 4,
                batch: 512,
            },
            _ => usage(),
        };
        if let Some(spec) = &policy
            && let Err(e) = spec.parse::<burn_amp::Policy>()
        {
            eprintln!("bench: --policy {spec}: {e}");
            std::process::exit(2);
        }
        let runs = if quick { 1 } else { 20 };
        if pair {
            print!("{}", cpu::pair(workload, runs, policy.as_deref()));
            return;
        }
        print!("{}", profile::one(workload, runs, policy.as_deref()));
        return;
    }
    let flex = "Flex (CPU)";
    let wgpu = "wgpu (lavapipe)";
    let mut rows = Vec::new();
    let mut extra = String::new();
    if run("cpu") {
        progress("CPU kernels and steps on Flex");
        let mut torch = pytorch::Torch::new(quick, &python, cpu::has_bf16_dot());
        let (cpu_rows, breakdown, ours) = cpu::rows(quick, runs, &mut torch);
        rows.extend(cpu_rows);
        progress("peak memory on Flex");
        rows.extend(training::memory::<Autodiff<Flex>>(
            mlp,
            &["mixed_float16", "mixed_bfloat16"],
            flex,
        ));
        rows.extend(training::memory::<Autodiff<Flex>>(
            encoder,
            &["mixed_float16", "mixed_bfloat16"],
            flex,
        ));
        extra.push_str(
            "
### Step by phase on Flex
",
        );
        extra.push_str(&breakdown);
        let profiled = if quick {
            vec![encoder]
        } else {
            vec![
                encoder,
                models::Workload::Cnn { batch: 64 },
                models::Workload::NormCnn { batch: 32 },
                models::Workload::GPT_CPU,
                models::Workload::GPT_200,
            ]
        };
        extra.push_str(&profile::section(&profiled, runs.min(3)));
        progress("PyTorch on the CPU");
        let (torch_md, torch) = torch.finish();
        rows.extend(cpu::torch_rows(&ours, &torch));
        extra.push_str(&torch_md);
    }
    // A backend that cannot start here (no Vulkan driver, no GPU) skips its rows with one
    // line saying why, instead of a panic inside its runtime.
    let wgpu_up = run("wgpu")
        && match burn_amp::probe_backend::<Wgpu>(&Default::default()) {
            Ok(()) => true,
            Err(why) => {
                let line = format!(
                    "wgpu rows skipped: {why} (a Vulkan driver is needed; on Debian/Ubuntu \
                     `apt-get install mesa-vulkan-drivers` gives the CPU one, lavapipe)"
                );
                progress(&line);
                extra.push_str(&format!("\n{line}\n"));
                false
            }
        };
    if wgpu_up {
        progress("decorator overhead on wgpu");
        rows.push(training::overhead::<Autodiff<Wgpu>>(mlp_small, runs, wgpu));
        progress("policies on wgpu");
        rows.extend(training::policies::<Autodiff<Wgpu>>(
            mlp_small,
            &["mixed_float16"],
            runs,
            wgpu,
        ));
        progress("FusedAdamW on wgpu");
        rows.push(training::fused_vs_adam::<Autodiff<Wgpu>>(
            mlp_small,
            &Default::default(),
            runs,
            wgpu,
            None,
        ));
        progress("kernels on wgpu");
        rows.extend(kernels::rows::<cubecl::wgpu::WgpuRuntime>(
            &Default::default(),
            quick,
            runs,
            wgpu,
        ));
    }
    #[cfg(feature = "cuda")]
    if run("cuda") {
        match burn_amp::probe_backend::<burn::backend::Cuda>(&Default::default()) {
            Ok(()) => rows.extend(cuda_rows(mlp, encoder, runs, quick)),
            Err(why) => {
                let line = format!("CUDA rows skipped: {why}");
                progress(&line);
                extra.push_str(&format!("\n{line}\n"));
            }
        }
    }

    let machine = report::machine();
    let mut table = report::table(&rows, runs, quick, &machine);
    table.push_str(&extra);
    if let Err(e) = report::write(std::path::Path::new(&out), &table) {
        eprintln!("error: writing {out}: {e}");
        std::process::exit(2);
    }
    // README's headline figures come from the same run (a quick run writes them aside).
    let readme = if quick {
        "target/README-quick.md"
    } else {
        "README.md"
    };
    let headline = report::headline(&rows, &machine);
    let written = section::write_section(
        std::path::Path::new(readme),
        "headline",
        "cargo run --release --example bench",
        &headline,
    );
    if let Err(e) = written {
        eprintln!("error: writing {readme}: {e}");
        std::process::exit(2);
    }
    print!("{table}");
    progress(&format!("written to {out}"));
}

/// The same rows on the first CUDA GPU (`--features cuda`), marked with its name.
#[cfg(feature = "cuda")]
fn cuda_rows(mlp: Workload, encoder: Workload, runs: usize, quick: bool) -> Vec<Row> {
    use burn::backend::Cuda;
    let device = Default::default();
    let name = format!(
        "CUDA ({})",
        <Cuda as burn::tensor::backend::Backend>::name(&device)
    );
    let mut rows = Vec::new();
    progress("decorator overhead on CUDA");
    rows.push(training::overhead::<Autodiff<Cuda>>(mlp, runs, &name));
    for workload in [mlp, encoder] {
        progress(&format!("policies on CUDA ({})", workload.describe()));
        rows.extend(training::policies::<Autodiff<Cuda>>(
            workload,
            &["mixed_float16", "mixed_bfloat16"],
            runs,
            &name,
        ));
    }
    progress("kernels on CUDA");
    rows.extend(kernels::rows::<cubecl::cuda::CudaRuntime>(
        &Default::default(),
        quick,
        runs,
        &name,
    ));
    rows
}
