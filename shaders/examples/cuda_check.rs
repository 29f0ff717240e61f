//! Compiles every CubeCL kernel of burn-amp to PTX with NVRTC, for the GPU architectures
//! users have, on a machine without a GPU; prints the table kernel x architecture and exits
//! non-zero on any failure, with NVRTC's message and the source lines it names.
//!
//! ```sh
//! ./scripts/cuda-check.sh                      # installs NVRTC and the headers, then runs this
//! cargo run -p burn-amp-kernels --features cuda-check --example cuda_check -- \
//!     [--arch 80,89,90,100] [--only quantize] [--list] [--source NAME]
//! ```
//! NVRTC is found on `LD_LIBRARY_PATH`, the CUDA headers under `$CUDA_PATH/include` (or
//! `--include DIR`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use burn_amp_kernels::cuda_check::{self, CudaTarget, Nvrtc};

struct Args {
    targets: Vec<CudaTarget>,
    only: Option<String>,
    list: bool,
    source: Option<String>,
    include: Option<PathBuf>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        targets: CudaTarget::DEFAULT.to_vec(),
        only: None,
        list: false,
        source: None,
        include: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--arch" => {
                args.targets = value()?
                    .split(',')
                    .map(|sm| {
                        let sm = sm.trim().trim_start_matches("sm_");
                        sm.parse().map(|sm| CudaTarget { sm }).map_err(|_| {
                            format!("--arch: `{sm}` is not a compute capability like 89")
                        })
                    })
                    .collect::<Result<_, _>>()?
            }
            "--only" => args.only = Some(value()?),
            "--include" => args.include = Some(PathBuf::from(value()?)),
            "--source" => args.source = Some(value()?),
            "--list" => args.list = true,
            "--help" | "-h" => {
                return Err(
                    "usage: cuda_check [--arch 80,89,90,100] [--only TEXT] [--list] \
                            [--source TEXT] [--include DIR]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument `{other}` (see --help)")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let only = args.only.clone();
    let keep = move |i: &cuda_check::catalog::Instantiation| {
        only.as_ref().is_none_or(|text| {
            i.family.contains(text.as_str()) || i.variant.contains(text.as_str())
        })
    };
    if let Some(text) = &args.source {
        // The generated CUDA C++ of the matching instantiations, for the first target.
        let target = args.targets[0];
        for (instantiation, kernels) in cuda_check::generate(target, |i| {
            i.family.contains(text.as_str()) || i.variant.contains(text.as_str())
        }) {
            for kernel in kernels {
                println!(
                    "// {} [{}] for {target}",
                    instantiation.family, instantiation.variant
                );
                match kernel.source {
                    Ok(source) => println!("{source}"),
                    Err(reason) => println!("// not generated: {reason}"),
                }
            }
        }
        return ExitCode::SUCCESS;
    }
    let nvrtc = match Nvrtc::load(args.include.clone()) {
        Ok(nvrtc) => nvrtc,
        Err(err) => {
            eprintln!("cuda_check: {err}");
            return ExitCode::from(2);
        }
    };
    let (major, minor) = nvrtc.version();
    println!(
        "NVRTC {major}.{minor}, headers {}, CubeCL's CUDA code generation as for CUDA {}.{}",
        nvrtc.include().display(),
        cuda_check::cuda_version() / 1000,
        cuda_check::cuda_version() % 1000 / 10,
    );
    let start = Instant::now();
    let report = cuda_check::check(&args.targets, &nvrtc, keep);
    println!(
        "{} kernels generated and compiled for {} architectures in {:.1} s\n",
        report.rows().len(),
        args.targets.len(),
        start.elapsed().as_secs_f64()
    );
    print!("{}", report.table());
    if args.list {
        println!();
        print!("{}", report.listing());
    }
    let failures = report.failures();
    if failures.is_empty() {
        println!("\ncuda_check: every kernel compiled");
        ExitCode::SUCCESS
    } else {
        println!("\n{}", report.failure_details());
        println!(
            "cuda_check: {} kernel x architecture pairs FAILED",
            failures.len()
        );
        ExitCode::FAILURE
    }
}
