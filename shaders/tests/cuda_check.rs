//! The CUDA check (feature `cuda-check`): CubeCL's CUDA code generation for every kernel and
//! architecture, and NVRTC's verdict, including on a kernel broken on purpose.
//!
//! The tests that compile need NVRTC and the CUDA headers, and are ignored unless asked for:
//! `./scripts/cuda-check.sh` installs both and runs this file with `--include-ignored`. The
//! others (code generation alone) run wherever the feature is on, as in the workspace's
//! tests with `cuda`. Without the feature this file is not built at all.

use burn_amp_kernels::cuda_check::catalog::{self, Launch};
use burn_amp_kernels::cuda_check::{self, CudaTarget, Nvrtc, Outcome};

fn nvrtc() -> Nvrtc {
    Nvrtc::load(None).unwrap_or_else(|err| {
        panic!("{err} (run this test through ./scripts/cuda-check.sh, which installs NVRTC)")
    })
}

/// The failure's source excerpt marks (`>`) a line holding `needle`: the line NVRTC named.
fn assert_marks_line(excerpt: &str, needle: &str) {
    assert!(
        excerpt
            .lines()
            .any(|line| line.starts_with('>') && line.contains(needle)),
        "no marked line holds {needle:?}:\n{excerpt}"
    );
}

#[test]
fn every_instantiation_generates_cuda_source_on_every_architecture() {
    let instantiations = catalog::instantiations().len();
    for target in CudaTarget::DEFAULT {
        let generated = cuda_check::generate(target, |_| true);
        assert_eq!(generated.len(), instantiations);
        for (instantiation, kernels) in &generated {
            let expected = match instantiation.launch {
                Launch::RowSums { .. } => 2, // the chunk sums, then their combination
                _ => 1,
            };
            assert_eq!(kernels.len(), expected, "{instantiation:?}");
            for kernel in kernels {
                let source = kernel.source.as_ref().unwrap_or_else(|err| {
                    panic!(
                        "{} [{}] on {target}: {err}",
                        instantiation.family, instantiation.variant
                    )
                });
                let entry = kernel.entrypoint.as_deref().expect("an entry point");
                assert!(source.contains("__global__"), "{source}");
                assert!(source.contains(entry), "{entry} missing from {source}");
            }
        }
    }
}

#[test]
fn distinct_comptime_choices_give_distinct_kernels() {
    // Stochastic rounding and each overflow rule are comptime: their sources must differ.
    let generated = cuda_check::generate(CudaTarget::SM90, |i| {
        i.family == "fp8::quantize" && i.variant.starts_with("F16 E4M3")
    });
    assert_eq!(generated.len(), 6);
    let mut sources: Vec<&str> = generated
        .iter()
        .map(|(_, kernels)| kernels[0].source.as_deref().unwrap())
        .collect();
    sources.sort_unstable();
    sources.dedup();
    assert_eq!(sources.len(), 6);
}

#[test]
#[ignore = "needs NVRTC and the CUDA headers: ./scripts/cuda-check.sh installs them and runs these"]
fn the_kernels_compile_for_hopper() {
    let nvrtc = nvrtc();
    let report = cuda_check::check(&[CudaTarget::SM90], &nvrtc, |i| {
        matches!(
            i.launch,
            Launch::Adamw(..) | Launch::Fp8Matmul(..) | Launch::Scales(_)
        )
    });
    assert_eq!(report.rows().len(), 6 + 16 + 3);
    assert!(report.failures().is_empty(), "{}", report.failure_details());
    for row in report.rows() {
        assert!(
            matches!(row.outcomes[0], Outcome::Compiled { ptx_bytes } if ptx_bytes > 100),
            "{row:?}"
        );
    }
}

#[test]
#[ignore = "needs NVRTC and the CUDA headers: ./scripts/cuda-check.sh installs them and runs these"]
fn a_broken_kernel_is_reported_with_nvrtcs_message_and_its_source_line() {
    let nvrtc = nvrtc();
    let mut generated = cuda_check::generate(CudaTarget::SM89, |i| i.family == "fp8::copy");
    assert_eq!(generated.len(), 1);
    // Break the kernel the way a code-generation bug would: a statement naming something
    // CUDA does not declare, right after the kernel's opening brace.
    let kernel = &mut generated[0].1[0];
    let source = kernel.source.as_mut().unwrap();
    let entry = kernel.entrypoint.clone().unwrap();
    let at = source.find(&entry).unwrap();
    let brace = at + source[at..].find('{').unwrap();
    source.insert_str(brace + 1, "\n    undeclared_intrinsic_for_the_test(1);\n");

    let report = cuda_check::compile(&[CudaTarget::SM89], &nvrtc, vec![generated]);
    let failures = report.failures();
    assert_eq!(failures.len(), 1, "{}", report.table());
    let (row, column, outcome) = failures[0];
    assert_eq!(row.family, "fp8::copy");
    assert!(column.starts_with("sm_89"));
    let Outcome::Failed(failure) = outcome else {
        panic!("expected an NVRTC failure, got {outcome:?}");
    };
    assert!(
        failure.log.contains("undeclared_intrinsic_for_the_test"),
        "{}",
        failure.log
    );
    assert!(failure.log.contains("error"), "{}", failure.log);
    assert_marks_line(&failure.excerpt, "undeclared_intrinsic_for_the_test");
    let details = report.failure_details();
    assert!(
        details.contains("fp8::copy") && details.contains("undeclared_intrinsic"),
        "{details}"
    );
    assert!(report.table().contains("FAILED"), "{}", report.table());
}

#[test]
#[ignore = "needs NVRTC and the CUDA headers: ./scripts/cuda-check.sh installs them and runs these"]
fn an_architecture_nvrtc_does_not_know_is_listed_as_not_compiled() {
    let nvrtc = nvrtc();
    let unknown = CudaTarget { sm: 990 };
    assert!(!nvrtc.supports(unknown));
    let report = cuda_check::check(&[CudaTarget::SM80, unknown], &nvrtc, |i| {
        i.family == "half16::encode"
    });
    assert!(report.failures().is_empty(), "{}", report.failure_details());
    for row in report.rows() {
        assert!(
            matches!(row.outcomes[0], Outcome::Compiled { .. }),
            "{row:?}"
        );
        assert!(matches!(&row.outcomes[1], Outcome::Skipped(why) if why.contains("sm_990")));
    }
    let table = report.table();
    assert!(table.contains("not compiled"), "{table}");
    assert!(table.contains("does not know sm_990"), "{table}");
}

/// The `#[cube(launch...)]` kernels defined under `dir`, by function name.
fn launchable_kernels(dir: &std::path::Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            launchable_kernels(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            let mut launchable = false;
            for line in text.lines().map(str::trim) {
                if line.starts_with("#[cube(launch") {
                    launchable = true;
                } else if launchable && line.starts_with("pub fn ") {
                    let name = line["pub fn ".len()..].split(['<', '(']).next().unwrap();
                    out.push(name.to_string());
                    launchable = false;
                }
            }
        }
    }
}

#[test]
fn the_catalog_launches_every_kernel_the_crate_defines() {
    // A kernel added without an entry in the catalog would escape the check.
    let mut defined = Vec::new();
    launchable_kernels(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut defined,
    );
    assert!(defined.len() >= 12, "{defined:?}");
    let generated = cuda_check::generate(CudaTarget::SM90, |_| true);
    let entrypoints: Vec<String> = generated
        .iter()
        .flat_map(|(_, kernels)| kernels.iter().filter_map(|k| k.entrypoint.clone()))
        .collect();
    for kernel in &defined {
        assert!(
            entrypoints.iter().any(|e| e.starts_with(kernel.as_str())),
            "kernel `{kernel}` is defined but no catalog entry launches it"
        );
    }
}

/// The reinterpret of a constant: CubeCL 0.10 writes it as
/// `reinterpret_cast<float const&>(uint32(..))`, which NVRTC rejects (tracel-ai/cubecl#1476;
/// burn-amp's E8M0 scale kernel works around it). Kept here as a real kernel the check must
/// fail on; when a CubeCL upgrade fixes the bug, this test says so.
mod miscompiled {
    use cubecl::prelude::*;

    #[cube(launch_unchecked)]
    pub fn reinterpret_of_a_constant(out: &mut Array<f32>) {
        out[0] = f32::reinterpret(0x7fc0_0000u32);
    }
}

#[test]
#[ignore = "needs NVRTC and the CUDA headers: ./scripts/cuda-check.sh installs them and runs these"]
fn a_kernel_cubecl_miscompiles_fails_the_check_with_nvrtcs_message() {
    use cubecl::prelude::*;
    let nvrtc = nvrtc();
    let client = cuda_check::codegen::client(CudaTarget::SM80);
    let out = client.empty(4);
    // SAFETY: one unit writing element 0 of a 4-byte buffer (the code generator runs
    // nothing on a device).
    unsafe {
        miscompiled::reinterpret_of_a_constant::launch_unchecked::<cuda_check::codegen::CudaCodegen>(
            &client,
            CubeCount::Static(1, 1, 1),
            CubeDim::new_1d(1),
            ArrayArg::from_raw_parts(out, 1),
        );
    }
    let generated = cuda_check::codegen::take_generated(&client);
    assert_eq!(generated.len(), 1);
    let source = generated[0].source.as_ref().expect("CubeCL generates it");
    let failure = nvrtc
        .compile(source, CudaTarget::SM80)
        .expect_err("NVRTC rejects the reinterpret of a constant");
    assert!(failure.log.contains("lvalue"), "{}", failure.log);
    assert_marks_line(&failure.excerpt, "reinterpret_cast");
}
