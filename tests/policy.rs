//! Policy names, the precedence of scoped / per-device / global policies, and the refusal
//! of policies a device cannot run (NdArray: no f16 or bf16; wgpu: no bf16).

use std::sync::Mutex;

use burn::backend::{Flex, NdArray, Wgpu};
use burn::tensor::{FloatDType, Tensor};
use burn_amp::policy::Kernels;
use burn_amp::{
    MixedPrecision, Policy, PolicyError, global_policy, set_global_policy, with_policy,
};

/// Tests that change process-wide policies (global, per-device) take this lock; the others
/// use `with_policy`, which is per-thread and wins over both.
static GLOBAL_STATE: Mutex<()> = Mutex::new(());

use FloatDType::{BF16, F16, F32};

#[test]
fn every_keras_name_parses_to_its_dtypes() {
    let cases = [
        ("float32", F32, F32, F32),
        ("float16", F16, F16, F16),
        ("bfloat16", BF16, BF16, BF16),
        ("mixed_float16", F32, F16, F32),
        ("mixed_bfloat16", F32, BF16, F32),
    ];
    for (name, variable, compute, output) in cases {
        let policy: Policy = name.parse().unwrap();
        assert_eq!(policy.variable_dtype(), variable, "{name}");
        assert_eq!(policy.compute_dtype(), compute, "{name}");
        assert_eq!(policy.output_dtype(), output, "{name}");
        assert_eq!(policy.to_string(), name);
        assert_eq!(policy.name(), name);
    }
    assert_eq!(Policy::default(), Policy::float32());
}

#[test]
fn jmp_specs_parse_and_round_trip() {
    let custom: Policy = "params=float32,compute=bfloat16,output=bfloat16"
        .parse()
        .unwrap();
    assert_eq!(
        (
            custom.variable_dtype(),
            custom.compute_dtype(),
            custom.output_dtype()
        ),
        (F32, BF16, BF16)
    );
    assert_eq!(
        custom.to_string(),
        "params=float32,compute=bfloat16,output=bfloat16"
    );
    assert_eq!(custom.to_string().parse::<Policy>().unwrap(), custom);

    // A spec that names a Keras policy is that policy, and prints as its name.
    let spec: Policy = "params=float32,compute=float16,output=float32"
        .parse()
        .unwrap();
    assert_eq!(spec, Policy::mixed_float16());
    assert_eq!(spec.to_string(), "mixed_float16");

    // jmp's short keys and dtype names; missing keys are float32.
    let short: Policy = "p=f32,c=bf16,o=f32".parse().unwrap();
    assert_eq!(short, Policy::mixed_bfloat16());
    let partial: Policy = "compute=half".parse().unwrap();
    assert_eq!(partial, Policy::mixed_float16());
    let spaced: Policy = " params = float16 , compute = float16 , output = float32 "
        .parse()
        .unwrap();
    assert_eq!(
        spaced.to_string(),
        "params=float16,compute=float16,output=float32"
    );

    // Every combination round-trips through its name, with either kernels.
    for v in [F32, F16, BF16] {
        for c in [F32, F16, BF16] {
            for o in [F32, F16, BF16] {
                for kernels in [Kernels::Auto, Kernels::Backend] {
                    let policy = Policy::new(v, c, o).unwrap().with_kernels(kernels);
                    assert_eq!(policy.name().parse::<Policy>().unwrap(), policy);
                }
            }
        }
    }
}

#[test]
fn kernels_key_picks_whose_kernels_run_and_is_checked() {
    let backend: Policy = "params=float32,compute=bfloat16,output=float32,kernels=backend"
        .parse()
        .unwrap();
    assert_eq!(backend.kernels(), Kernels::Backend);
    assert_eq!(backend.compute_dtype(), BF16);
    assert_ne!(backend, Policy::mixed_bfloat16());
    assert_eq!(
        backend.to_string(),
        "params=float32,compute=bfloat16,output=float32,kernels=backend"
    );
    let auto: Policy = "p=f32,c=bf16,o=f32,kernels=auto".parse().unwrap();
    assert_eq!(auto, Policy::mixed_bfloat16());
    assert_eq!(auto.to_string(), "mixed_bfloat16");
    for (spec, says) in [
        ("compute=bf16,kernels=fast", "use auto or backend"),
        ("compute=bf16,kernels=auto,kernels=backend", "given twice"),
    ] {
        let err = spec.parse::<Policy>().unwrap_err();
        assert!(err.to_string().contains(says), "{spec}: {err}");
    }
}

#[test]
fn bad_names_give_typed_errors_that_list_the_valid_names() {
    let unknown = [
        "",
        "float",
        "Float32",
        "mixed_float61",
        "mixed_float8",
        "mixed-float16",
        "fp16",
        "mixed_bfloat",
        "float64",
        "int8",
        "mixed",
        "mixed_float16 extra",
    ];
    for name in unknown {
        let err = name.parse::<Policy>().unwrap_err();
        assert!(
            matches!(err, PolicyError::UnknownName { .. }),
            "{name:?}: {err:?}"
        );
        let message = err.to_string();
        for valid in [
            "float32",
            "float16",
            "bfloat16",
            "mixed_float16",
            "mixed_bfloat16",
        ] {
            assert!(message.contains(valid), "{name:?}: {message}");
        }
    }
    let err = "mixed_float61".parse::<Policy>().unwrap_err();
    assert!(
        err.to_string().contains("did you mean \"mixed_float16\"?"),
        "{err}"
    );
    assert!(matches!(
        "Mixed-BFloat16".parse::<Policy>(),
        Err(PolicyError::UnknownName {
            suggestion: Some("mixed_bfloat16"),
            ..
        })
    ));
    assert!(matches!(
        "int8".parse::<Policy>(),
        Err(PolicyError::UnknownName {
            suggestion: None,
            ..
        })
    ));
    let invalid = [
        "params=float64",
        "compute=int8",
        "params=float32,params=float16",
        "weights=float32",
        "params=float32,",
        "compute",
        "=float16",
    ];
    for spec in invalid {
        let err = spec.parse::<Policy>().unwrap_err();
        assert!(
            matches!(
                err,
                PolicyError::InvalidSpec { .. } | PolicyError::UnknownName { .. }
            ),
            "{spec:?}: {err:?}"
        );
        assert!(err.to_string().contains(spec.trim()), "{spec:?}: {err}");
    }
    let err = Policy::new(FloatDType::F64, F32, F32).unwrap_err();
    assert!(matches!(err, PolicyError::InvalidSpec { .. }));
}

/// Every error for a bad string teaches: the policy names, and for a spec its keys, the
/// dtype spellings and the FP8 scalings.
#[test]
fn fp8_toolbox_specs_round_trip_and_misplaced_settings_are_errors() {
    use burn_amp::fp8::{
        AmaxCompute, DelayedRecipe, ExponentBiasRecipe, Fp8Formats, Fp8Scaling, GradientCompression,
    };
    let base = "params=float32,compute=bfloat16,output=float32";
    for keys in [
        "fp8=delayed",
        "fp8=delayed,history=16,margin=1,amax=most_recent",
        "fp8=bias",
        "fp8=bias,drift=3,format=auto",
        "fp8=blockwise,format=auto,grads=aps_shp",
        "grads=aps",
    ] {
        let spec = format!("{base},{keys}");
        let policy: Policy = spec.parse().unwrap();
        assert_eq!(policy.to_string(), spec);
    }
    let p: Policy = "c=bf16,amax=most_recent,fp8=delayed,history=16"
        .parse()
        .unwrap();
    let want = DelayedRecipe {
        history: 16,
        margin: 0,
        amax: AmaxCompute::MostRecent,
    };
    assert_eq!(p.fp8_scaling(), Some(Fp8Scaling::Delayed(want)));
    assert_eq!(DelayedRecipe::default().history, 1024); // Transformer Engine's default
    let p: Policy = "c=f16,fp8=bias,format=auto".parse().unwrap();
    assert_eq!(
        p.fp8_scaling(),
        Some(Fp8Scaling::ExponentBias(ExponentBiasRecipe { drift: 2 }))
    );
    assert_eq!(p.fp8_formats(), Fp8Formats::Auto);
    let p: Policy = "mixed_bfloat16".parse::<Policy>().unwrap();
    assert_eq!(p.gradient_compression(), GradientCompression::None);
    for (spec, says) in [
        ("c=bf16,fp8=tensor,history=4", "need fp8=delayed"),
        ("c=bf16,fp8=delayed,drift=2", "belongs to fp8=bias"),
        ("c=bf16,fp8=bias,margin=2", "belong to fp8=delayed"),
        ("c=bf16,fp8=delayed,history=0", "at least 1"),
        ("c=bf16,fp8=delayed,history=many", "not a whole number"),
        ("c=bf16,format=auto", "needs an fp8= scaling"),
        ("c=bf16,fp8=delayed,amax=mean", "max or most_recent"),
        ("c=bf16,grads=fp4", "aps, aps_shp or none"),
        ("c=bf16,fp8=delayed,history=4,history=8", "given twice"),
    ] {
        let message = spec.parse::<Policy>().unwrap_err().to_string();
        assert!(message.contains(says), "{spec:?}: {message}");
    }
}

#[test]
fn every_spec_error_lists_keys_dtypes_and_policy_names() {
    let names = [
        "float32",
        "float16",
        "bfloat16",
        "mixed_float16",
        "mixed_bfloat16",
        "float8_from_mixed_bfloat16",
        "float8_from_mixed_float16",
    ];
    assert_eq!(
        Policy::NAMES,
        names,
        "the documented names, in the errors' order"
    );
    let spec_words = [
        "params",
        "compute",
        "output",
        "fp8",
        "f32",
        "f16",
        "bf16",
        "half",
        "tensor",
        "blockwise",
        "delayed",
        "history",
        "margin",
        "amax",
        "drift",
        "auto",
        "aps",
        "kernels",
        "backend",
    ];
    let specs = [
        "params=float8",
        "params=float32,params=float16",
        "fp8=tensor,fp8=blockwise",
        "fp8=sometimes",
        "weights=float32",
        "params=float32,",
    ];
    for spec in specs {
        let err = spec.parse::<Policy>().unwrap_err();
        assert!(
            matches!(err, PolicyError::InvalidSpec { .. }),
            "{spec:?}: {err:?}"
        );
        let message = err.to_string();
        for word in names.iter().chain(&spec_words) {
            assert!(
                message.contains(word),
                "{spec:?} does not mention {word}: {message}"
            );
        }
    }
    for name in ["mixed_float61", "float8_from_mixed_float61"] {
        let message = name.parse::<Policy>().unwrap_err().to_string();
        for valid in names {
            assert!(message.contains(valid), "{name:?}: {message}");
        }
    }
}

#[test]
fn scoped_policy_wins_and_is_restored_even_after_a_panic() {
    let device = Default::default();
    type B = MixedPrecision<Flex>;
    let a = Tensor::<B, 2>::ones([2, 2], &device);
    with_policy(Policy::mixed_float16(), || {
        assert_eq!(a.clone().matmul(a.clone()).dtype(), F16.into());
        with_policy(Policy::mixed_bfloat16(), || {
            assert_eq!(a.clone().matmul(a.clone()).dtype(), BF16.into());
        });
        assert_eq!(a.clone().matmul(a.clone()).dtype(), F16.into());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            with_policy(Policy::float32(), || panic!("inside"));
        }));
        assert!(caught.is_err());
        assert_eq!(a.clone().matmul(a.clone()).dtype(), F16.into());
    });
}

#[test]
fn device_policy_wins_over_global_and_clears() {
    let _lock = GLOBAL_STATE.lock().unwrap_or_else(|e| e.into_inner());
    let device = Default::default();
    type B = MixedPrecision<Flex>;
    let a = Tensor::<B, 2>::ones([2, 2], &device);

    assert_eq!(global_policy(), Policy::float32(), "default policy");
    assert_eq!(a.clone().matmul(a.clone()).dtype(), F32.into());

    set_global_policy("mixed_bfloat16").unwrap();
    assert_eq!(a.clone().matmul(a.clone()).dtype(), BF16.into());
    MixedPrecision::<Flex>::set_policy(&device, "mixed_float16").unwrap();
    assert_eq!(
        MixedPrecision::<Flex>::policy(&device).unwrap(),
        Policy::mixed_float16()
    );
    assert_eq!(a.clone().matmul(a.clone()).dtype(), F16.into());
    MixedPrecision::<Flex>::clear_policy(&device);
    assert_eq!(a.clone().matmul(a.clone()).dtype(), BF16.into());

    // A bad name leaves the global policy as it was.
    assert!(set_global_policy("mixed_float61").is_err());
    assert_eq!(global_policy(), Policy::mixed_bfloat16());
    set_global_policy(Policy::float32()).unwrap();
    assert_eq!(a.clone().matmul(a).dtype(), F32.into());
}

#[test]
fn unsupported_dtypes_are_refused_with_backend_dtype_and_a_working_policy() {
    let _lock = GLOBAL_STATE.lock().unwrap_or_else(|e| e.into_inner());

    // NdArray runs neither f16 nor bf16.
    for name in ["mixed_float16", "float16", "mixed_bfloat16", "bfloat16"] {
        let err = MixedPrecision::<NdArray>::set_policy(&Default::default(), name).unwrap_err();
        let PolicyError::Unsupported {
            backend,
            dtype,
            suggestion,
            policy,
            ..
        } = &err
        else {
            panic!("{name}: {err:?}");
        };
        assert_eq!(backend, "ndarray");
        assert!(matches!(dtype, F16 | BF16));
        assert_eq!(*suggestion, Policy::float32());
        assert_eq!(policy.name(), name);
        let message = err.to_string();
        assert!(
            message.contains("ndarray") && message.contains("float32"),
            "{message}"
        );
    }
    MixedPrecision::<NdArray>::set_policy(&Default::default(), "float32").unwrap();
    MixedPrecision::<NdArray>::clear_policy(&Default::default());

    // wgpu (WGSL) runs f16 but not bf16: the suggestion keeps the mixed layout.
    let device = Default::default();
    let err = MixedPrecision::<Wgpu>::set_policy(&device, "mixed_bfloat16").unwrap_err();
    let PolicyError::Unsupported {
        dtype, suggestion, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(*dtype, BF16);
    assert_eq!(*suggestion, Policy::mixed_float16());
    assert!(err.to_string().contains("mixed_float16"), "{err}");
    MixedPrecision::<Wgpu>::set_policy(&device, "mixed_float16").unwrap();
    MixedPrecision::<Wgpu>::clear_policy(&device);

    // A global policy the device cannot run: `policy()` reports it as a value...
    set_global_policy("mixed_bfloat16").unwrap();
    assert!(matches!(
        MixedPrecision::<Wgpu>::policy(&device),
        Err(PolicyError::Unsupported { .. })
    ));
    // ...and an op refuses to run rather than run another dtype.
    let caught = std::panic::catch_unwind(|| {
        let a = Tensor::<MixedPrecision<Wgpu>, 2>::ones([2, 2], &device);
        a.clone().matmul(a).into_data()
    });
    set_global_policy("float32").unwrap();
    let message = *caught.unwrap_err().downcast::<String>().unwrap();
    assert!(
        message.contains("BF16") && message.contains("mixed_float16"),
        "{message}"
    );
}

#[test]
fn loss_scaling_advice_follows_the_compute_dtype() {
    assert!(Policy::mixed_float16().needs_loss_scaling());
    assert!(Policy::float16().needs_loss_scaling());
    assert!(!Policy::mixed_bfloat16().needs_loss_scaling());
    assert!(!Policy::float32().needs_loss_scaling());
}

/// README's first program is `examples/readme.rs`, which the test build compiles (and CI
/// runs): the snippet a new user copies cannot stop compiling unnoticed.
#[test]
fn readme_first_program_is_the_compiled_example() {
    let readme = include_str!("../README.md");
    let example = include_str!("../examples/readme.rs");
    let block = readme
        .split("```rust\n")
        .nth(1)
        .and_then(|rest| rest.split("```\n").next())
        .expect("README has a rust block");
    assert_eq!(
        block, example,
        "README's first rust block differs from examples/readme.rs"
    );
}

/// The generated sections of README.md and BENCHMARKS.md: each `name:begin` marker names
/// the command (an example or a script of this repository) that writes it, has its `name:end` after it,
/// holds something, and the sections the docs point to are all there. A hand edit that
/// breaks a marker would make the next run of the command append a second copy.
#[test]
fn generated_sections_are_well_formed_and_name_their_commands() {
    let files = [
        ("README.md", include_str!("../README.md"), &["headline"][..]),
        (
            "BENCHMARKS.md",
            include_str!("../BENCHMARKS.md"),
            &["bench", "mnist", "gpt-cpu", "accumulation", "gpu-suite"][..],
        ),
    ];
    for (file, text, expected) in files {
        let mut found = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find("<!-- ") {
            rest = &rest[at + 5..];
            let marker = rest.split("-->").next().unwrap_or_default();
            if !marker.contains(":begin (written by `") {
                continue; // an end marker, or another comment
            }
            let (name, after) = rest
                .split_once(":begin (written by `")
                .expect("the marker holds it");
            assert!(
                !name.contains(' ') && !name.ends_with(":end -->"),
                "{file}: {name}"
            );
            let (command, body) = after
                .split_once("`) -->\n")
                .unwrap_or_else(|| panic!("{file}: the {name} marker does not close"));
            let end = format!("<!-- {name}:end -->");
            let (section, _) = body
                .split_once(&end)
                .unwrap_or_else(|| panic!("{file}: {name} has no {end}"));
            assert!(!section.trim().is_empty(), "{file}: {name} is empty");
            assert!(
                !section.contains(":begin (written by"),
                "{file}: {name} nests"
            );
            let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
            if let Some(script) = command.strip_prefix("scripts/") {
                // A section a script of this repository writes (from a run elsewhere).
                let script = script.split_whitespace().next().unwrap_or_default();
                assert!(
                    root.join("scripts").join(script).exists(),
                    "{file}: {name} is written by script {script:?}, which does not exist"
                );
                found.push(name.to_string());
                continue;
            }
            let example = command
                .split("--example ")
                .nth(1)
                .and_then(|s| s.split_whitespace().next())
                .unwrap_or_else(|| panic!("{file}: {name}'s command {command:?} runs no example"));
            let root = root.join("examples");
            assert!(
                root.join(format!("{example}.rs")).exists()
                    || root.join(example).join("main.rs").exists(),
                "{file}: {name} is written by example {example:?}, which does not exist"
            );
            found.push(name.to_string());
        }
        for name in expected {
            assert!(
                found.iter().any(|f| f == name),
                "{file} lacks section {name}"
            );
        }
    }
}
