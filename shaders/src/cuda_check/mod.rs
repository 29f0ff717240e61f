//! The CUDA build of every CubeCL kernel, checked on a machine without a GPU.
//!
//! CubeCL's CUDA runtime turns each kernel into CUDA C++ and compiles it with NVRTC when it
//! is first launched, so a kernel that WGSL accepts can still fail on the first NVIDIA GPU
//! it meets. NVRTC needs no GPU. This module launches every [instantiation](catalog) of the
//! crate's kernels on [`codegen::CudaCodegen`], a CubeCL runtime whose server runs CubeCL's
//! CUDA compiler with the options a device of each [`CudaTarget`] would give, and compiles
//! each source with [`Nvrtc`] for that architecture.
//!
//! ```no_run
//! use burn_amp_kernels::cuda_check::{CudaTarget, Nvrtc, check};
//!
//! let nvrtc = Nvrtc::load(None)?; // NVRTC on the library path, headers under $CUDA_PATH
//! let report = check(&CudaTarget::DEFAULT, &nvrtc, |_| true);
//! print!("{}", report.table());
//! assert!(report.failures().is_empty());
//! # Ok::<(), burn_amp_kernels::cuda_check::CheckError>(())
//! ```
//!
//! `examples/cuda_check` prints the table; `scripts/cuda-check.sh` installs NVRTC and the
//! CUDA headers from PyPI and runs it.

pub mod catalog;
pub mod codegen;
mod nvrtc;
mod report;
mod target;

use std::collections::HashMap;
use std::path::PathBuf;

use rayon::prelude::*;

pub use nvrtc::{CompileFailure, Nvrtc};
pub use report::{Outcome, Report, Row};
pub use target::{CudaTarget, cuda_version};

use catalog::Instantiation;
use codegen::Generated;

/// Why the check cannot run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CheckError {
    /// No NVRTC library on the library path.
    #[error(
        "NVRTC not found: put libnvrtc (CUDA 12 or 13) on LD_LIBRARY_PATH, e.g. from the PyPI \
         wheel nvidia-cuda-nvrtc (scripts/cuda-check.sh installs it)"
    )]
    NvrtcMissing,
    /// The CUDA headers (`cuda_fp16.h`, ...) are not where NVRTC is told to look.
    #[error(
        "CUDA headers not found in {0}: set CUDA_PATH to a CUDA installation or to the folder of \
         the PyPI wheel nvidia-cuda-runtime (scripts/cuda-check.sh does)"
    )]
    HeadersMissing(PathBuf),
    /// NVRTC answered a query with an error.
    #[error("NVRTC: {0}")]
    Nvrtc(String),
}

/// Generates every instantiation `keep` accepts for each of `targets`, and compiles each
/// source with `nvrtc` (in parallel). Architectures NVRTC does not know are reported as
/// such, not compiled.
pub fn check(
    targets: &[CudaTarget],
    nvrtc: &Nvrtc,
    keep: impl Fn(&Instantiation) -> bool,
) -> Report {
    let generated = targets
        .iter()
        .map(|&target| generate(target, &keep))
        .collect();
    compile(targets, nvrtc, generated)
}

/// Compiles what [`generate`] produced for each of `targets` (one entry per target, the
/// same instantiations in each) and tabulates the outcome.
pub fn compile(
    targets: &[CudaTarget],
    nvrtc: &Nvrtc,
    generated: Vec<Vec<(Instantiation, Vec<Generated>)>>,
) -> Report {
    let instantiations: Vec<Instantiation> = generated
        .first()
        .map(|column| column.iter().map(|(i, _)| i.clone()).collect())
        .unwrap_or_default();
    let columns = targets
        .iter()
        .zip(generated)
        .map(|(&target, column)| {
            let kernels = column.into_iter().map(|(_, kernels)| kernels).collect();
            compile_column(target, kernels, nvrtc)
        })
        .collect();
    Report::new(targets.to_vec(), &instantiations, columns)
}

/// Compiles the kernels each instantiation generated for `target`, each distinct source
/// once.
fn compile_column(
    target: CudaTarget,
    kernels: Vec<Vec<Generated>>,
    nvrtc: &Nvrtc,
) -> Vec<Vec<(Generated, Outcome)>> {
    if !nvrtc.supports(target) {
        let (major, minor) = nvrtc.version();
        let reason = format!("NVRTC {major}.{minor} does not know {target}");
        return kernels
            .into_iter()
            .map(|generated| {
                generated
                    .into_iter()
                    .map(|g| (g, Outcome::Skipped(reason.clone())))
                    .collect()
            })
            .collect();
    }
    let mut sources: Vec<&str> = kernels
        .iter()
        .flatten()
        .filter_map(|g| g.source.as_deref().ok())
        .collect();
    sources.sort_unstable();
    sources.dedup();
    let compiled: HashMap<&str, Result<usize, CompileFailure>> = sources
        .par_iter()
        .map(|&source| (source, nvrtc.compile(source, target)))
        .collect();
    kernels
        .iter()
        .map(|generated| {
            generated
                .iter()
                .map(|g| {
                    let outcome = match &g.source {
                        Err(reason) => Outcome::NotGenerated(reason.clone()),
                        Ok(source) => match &compiled[source.as_str()] {
                            Ok(ptx) => Outcome::Compiled { ptx_bytes: *ptx },
                            Err(failure) => Outcome::Failed(failure.clone()),
                        },
                    };
                    (g.clone(), outcome)
                })
                .collect()
        })
        .collect()
}

/// The CUDA source each instantiation `keep` accepts generates for `target` (no NVRTC
/// needed): `(instantiation, kernels)`.
pub fn generate(
    target: CudaTarget,
    keep: impl Fn(&Instantiation) -> bool,
) -> Vec<(Instantiation, Vec<Generated>)> {
    let client = codegen::client(target);
    catalog::instantiations()
        .into_iter()
        .filter(|i| keep(i))
        .map(|instantiation| {
            catalog::launch(&client, instantiation.launch);
            let generated = codegen::take_generated(&client);
            (instantiation, generated)
        })
        .collect()
}

/// Launches every instantiation `keep` accepts on a real device's `client` (CubeCL compiles
/// each kernel with that device's options and NVRTC, then runs it on buffers of the right
/// sizes) and tabulates what the device reported: the GPU suite's confirmation of
/// [`check`]. `label` names the column.
pub fn run_on_device<R: cubecl::Runtime>(
    client: &cubecl::prelude::ComputeClient<R>,
    label: String,
    keep: impl Fn(&Instantiation) -> bool,
) -> Report {
    let instantiations: Vec<Instantiation> = catalog::instantiations()
        .into_iter()
        .filter(|i| keep(i))
        .collect();
    let column = instantiations
        .iter()
        .map(|instantiation| {
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                catalog::launch(client, instantiation.launch);
                cubecl::future::block_on(client.sync())
            }));
            let outcome = match ran {
                Ok(Ok(())) => Outcome::Compiled { ptx_bytes: 0 },
                Ok(Err(err)) => Outcome::Failed(CompileFailure {
                    log: err.to_string(),
                    excerpt: String::new(),
                }),
                Err(_) => Outcome::NotGenerated("the launch panicked (message above)".into()),
            };
            let generated = Generated {
                kernel: instantiation.family,
                entrypoint: None,
                source: Err("compiled on the device".into()),
            };
            vec![(generated, outcome)]
        })
        .collect();
    Report::from_columns(vec![label], &instantiations, vec![column])
}
