//! Every CubeCL kernel of burn-amp, in every instantiation, on the CUDA machine: the table
//! `scripts/cuda-check.sh` prints without a GPU (CubeCL's CUDA code for sm_80/89/90/100,
//! compiled by this machine's NVRTC), then the same instantiations launched on the device,
//! which CubeCL compiles with the device's own options. The first GPU run confirms the check.

use std::fmt::Write as _;

use burn_amp_kernels::cuda_check::{self, CudaTarget, Nvrtc};
use cubecl::Runtime;
use cubecl::cuda::{CudaDevice, CudaRuntime};

use crate::checks::Checks;

/// Runs both tables, records one check for each, and appends the tables to `md`.
pub fn check(checks: &mut Checks, device_name: &str, md: &mut String) {
    let _ = writeln!(md, "\n## CubeCL kernels compiled for CUDA\n");
    match Nvrtc::load(None) {
        Ok(nvrtc) => {
            let (major, minor) = nvrtc.version();
            let report = cuda_check::check(&CudaTarget::DEFAULT, &nvrtc, |_| true);
            let table = report.table();
            println!(
                "Kernels x architectures, NVRTC {major}.{minor} (no device involved):\n{table}"
            );
            let _ = writeln!(md, "NVRTC {major}.{minor}, no device involved:\n\n{table}");
            let failures = report.failures().len();
            checks.run(
                "every kernel compiles with NVRTC for sm_80/89/90/100",
                || {
                    if failures == 0 {
                        Ok(format!("{} kernels x 4 architectures", report.rows().len()))
                    } else {
                        Err(report.failure_details())
                    }
                },
            );
        }
        Err(err) => checks.run(
            "every kernel compiles with NVRTC for sm_80/89/90/100",
            || Err(err.to_string()),
        ),
    }
    let client = CudaRuntime::client(&CudaDevice::default());
    let report = cuda_check::run_on_device(&client, format!("{device_name} (device)"), |_| true);
    let table = report.table();
    println!("The same kernels compiled and launched on the device:\n{table}");
    let _ = writeln!(md, "\nLaunched on the device (its own options):\n\n{table}");
    checks.run("every kernel compiles and launches on the device", || {
        if report.failures().is_empty() {
            Ok(format!("{} kernels", report.rows().len()))
        } else {
            Err(report.failure_details())
        }
    });
}
