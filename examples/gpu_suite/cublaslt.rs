//! burn-amp's cuBLASLt calls on the device: every layout case the plan tests build on the
//! CPU (transposed, pitched, batched, broadcast, odd sizes, K not a multiple of 16), in
//! f32, f16 and bf16, and the FP8 E4M3 product with its scale inverses and a bias, each
//! against the CPU reference of the same plan; then the rate of 8192^3 products in bf16,
//! f16 and FP8 E4M3 through the same calls.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use burn_amp::cublaslt::{
    Buffers, CublasLt, Epilogue, Fp8Scales, GemmDtype, GemmPlan, PlanOptions, View, reference,
};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DevicePtr};

use crate::checks::Checks;

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// A buffer of `values` in `dtype` on the device, and the values as that type rounds them.
fn upload(stream: &Arc<CudaStream>, values: &[f32], dtype: GemmDtype) -> (CudaSlice<u8>, Vec<f32>) {
    use burn_amp_kernels::fp8::{Fp8Cast, Fp8Format, reference as fp8};
    let mut rounded = Vec::with_capacity(values.len());
    let bytes: Vec<u8> = match dtype {
        GemmDtype::F32 => {
            rounded.extend_from_slice(values);
            values.iter().flat_map(|v| v.to_le_bytes()).collect()
        }
        GemmDtype::F16 => values
            .iter()
            .flat_map(|v| {
                let h = half::f16::from_f32(*v);
                rounded.push(h.to_f32());
                h.to_le_bytes()
            })
            .collect(),
        GemmDtype::BF16 => values
            .iter()
            .flat_map(|v| {
                let h = half::bf16::from_f32(*v);
                rounded.push(h.to_f32());
                h.to_le_bytes()
            })
            .collect(),
        GemmDtype::E4M3 | GemmDtype::E5M2 => {
            let format = if dtype == GemmDtype::E4M3 {
                Fp8Format::E4M3
            } else {
                Fp8Format::E5M2
            };
            values
                .iter()
                .map(|v| {
                    let code = fp8::encode_scaled(*v, 1.0, Fp8Cast::new(format), 0);
                    rounded.push(fp8::decode_scaled(code, format, 1.0));
                    code
                })
                .collect()
        }
    };
    (stream.clone_htod(&bytes).expect("upload"), rounded)
}

/// The output read back as f32.
fn download(stream: &Arc<CudaStream>, d: &CudaSlice<u8>, dtype: GemmDtype) -> Vec<f32> {
    let bytes = stream.clone_dtoh(d).expect("download");
    match dtype {
        GemmDtype::F32 => bytes
            .chunks(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        GemmDtype::F16 => bytes
            .chunks(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        _ => bytes
            .chunks(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
    }
}

/// Elements a view reaches from its buffer's start.
fn reach(v: &View) -> usize {
    v.offset
        + v.shape
            .iter()
            .zip(&v.strides)
            .map(|(s, t)| (s - 1) * (*t).max(0) as usize)
            .sum::<usize>()
        + 1
}

/// One case: plans `lhs @ rhs`, runs it on the device and on the CPU reference.
fn case(
    lt: &mut CublasLt,
    stream: &Arc<CudaStream>,
    (lhs, rhs): (View, View),
    options: PlanOptions,
) -> Result<String, String> {
    case_with(lt, stream, (lhs, rhs), options, (3, false))
}

/// [`case`] with the bias drawn from `seed`, and the two scale inverses in one buffer (4
/// bytes apart) or in two allocations of their own (`separate`).
fn case_with(
    lt: &mut CublasLt,
    stream: &Arc<CudaStream>,
    (lhs, rhs): (View, View),
    options: PlanOptions,
    (seed, separate): (u64, bool),
) -> Result<String, String> {
    let plan = GemmPlan::new(&lhs, &rhs, options).map_err(|e| e.to_string())?;
    let (a_dev, a) = upload(stream, &values(reach(&rhs), 1), rhs.dtype);
    let (b_dev, b) = upload(stream, &values(reach(&lhs), 2), lhs.dtype);
    let bias = values(plan.m, seed);
    let (bias_dev, _) = upload(stream, &bias, options.out);
    let scales: CudaSlice<f32> = stream.clone_htod(&[0.5f32, 2.0]).expect("scales");
    let second: CudaSlice<f32> = stream.clone_htod(&[2.0f32]).expect("scales");
    let d_dev: CudaSlice<u8> = stream
        .alloc_zeros(plan.out_len() * options.out.size())
        .expect("output");
    let ptr = |s: &CudaSlice<u8>| s.device_ptr(stream).0;
    let scale_ptr = scales.device_ptr(stream).0;
    let b_scale = if separate {
        second.device_ptr(stream).0
    } else {
        scale_ptr + 4
    };
    let buffers = Buffers {
        a: ptr(&a_dev),
        b: ptr(&b_dev),
        d: ptr(&d_dev),
        bias: (options.epilogue == Epilogue::Bias).then(|| ptr(&bias_dev)),
        scale_invs: options.fp8.map(|_| (scale_ptr, b_scale)),
    };
    // SAFETY: every buffer holds what the plan reads or writes (sized from the views and the
    // plan) and lives until the stream is synchronized below.
    unsafe { lt.run(&plan, &buffers) }.map_err(|e| e.to_string())?;
    stream.synchronize().map_err(|e| format!("{e:?}"))?;
    let got = download(stream, &d_dev, options.out);
    let mut expected = vec![0f32; plan.out_len()];
    let scales = if options.fp8.is_some() {
        (0.5, 2.0)
    } else {
        (1.0, 1.0)
    };
    let bias = (options.epilogue == Epilogue::Bias).then_some(bias.as_slice());
    reference::gemm(&plan, (&a, &b), bias, scales, &mut expected);
    // f32 accumulation in another order, TF32-free; the output's own rounding. FP8
    // products are accumulated by Hopper's tensor cores in fewer bits than f32 (about 14
    // between the promotions cuBLASLt makes to f32; more with fast accumulation): a bound
    // of 2^-12 per unit of |a||b| summed (the values are at most 1, the scales' product 1).
    let out_u = match options.out {
        GemmDtype::F32 => 2f32.powi(-20),
        GemmDtype::F16 => 2f32.powi(-10),
        _ => 2f32.powi(-7),
    };
    let accum_u = if lhs.dtype.is_fp8() {
        2f32.powi(-12)
    } else {
        2f32.powi(-22)
    };
    let worst = got
        .iter()
        .zip(&expected)
        .map(|(g, e)| (g - e).abs() / (plan.k as f32 * accum_u + out_u * e.abs().max(1.0)))
        .fold(0f32, f32::max);
    if worst <= 1.0 && got.iter().all(|v| v.is_finite()) {
        Ok(format!(
            "{plan:?}",
            plan = (plan.m, plan.n, plan.k, plan.batch)
        ))
    } else {
        Err(format!("{worst:.2} x the bound ({plan:?})"))
    }
}

/// A row-major view of `shape`, transposed in storage when `t` (its last two dimensions
/// swapped), pitched by `pad` extra columns.
fn view(shape: &[usize], t: bool, pad: usize, dtype: GemmDtype) -> View {
    let r = shape.len();
    let mut stored = shape.to_vec();
    if t {
        stored.swap(r - 1, r - 2);
    }
    stored[r - 1] += pad;
    let mut v = View::contiguous(&stored, dtype);
    v.shape[r - 1] -= pad;
    if t {
        v.shape.swap(r - 1, r - 2);
        v.strides.swap(r - 1, r - 2);
    }
    v
}

/// Runs the checks and the rates, appending the rates to `md`.
pub fn check(checks: &mut Checks, md: &mut String) {
    let ctx = match CudaContext::new(0) {
        Ok(ctx) => ctx,
        Err(e) => return checks.run("cuBLASLt calls", || Err(format!("CUDA: {e:?}"))),
    };
    let stream = ctx.default_stream();
    let mut lt = match CublasLt::new(stream.clone()) {
        Ok(lt) => lt,
        Err(e) => return checks.run("cuBLASLt calls", || Err(e.to_string())),
    };
    use GemmDtype::*;
    for dtype in [F32, F16, BF16] {
        let out = if dtype == F32 { F32 } else { dtype };
        let plain = PlanOptions::new(out);
        let cases: Vec<(&str, View, View)> = vec![
            (
                "contiguous 77x33x19",
                view(&[77, 19], false, 0, dtype),
                view(&[19, 33], false, 0, dtype),
            ),
            (
                "lhs^T",
                view(&[64, 48], true, 0, dtype),
                view(&[48, 40], false, 0, dtype),
            ),
            (
                "rhs^T (x W^T)",
                view(&[64, 48], false, 0, dtype),
                view(&[48, 40], true, 0, dtype),
            ),
            (
                "both^T",
                view(&[33, 17], true, 0, dtype),
                view(&[17, 9], true, 0, dtype),
            ),
            (
                "pitched",
                view(&[40, 24], false, 8, dtype),
                view(&[24, 16], false, 16, dtype),
            ),
            (
                "batched",
                view(&[3, 20, 36], false, 0, dtype),
                view(&[3, 36, 12], false, 0, dtype),
            ),
            (
                "broadcast weight",
                view(&[3, 20, 36], false, 0, dtype),
                view(&[1, 36, 12], false, 0, dtype),
            ),
            (
                "attention q k^T",
                view(&[2, 4, 64, 32], false, 0, dtype),
                view(&[2, 4, 32, 64], true, 0, dtype),
            ),
        ];
        for (name, lhs, rhs) in cases {
            let title = format!("cuBLASLt {dtype:?}: {name} against the CPU reference");
            checks.run(&title, || case(&mut lt, &stream, (lhs, rhs), plain));
        }
        let bias = PlanOptions {
            epilogue: Epilogue::Bias,
            ..plain
        };
        checks.run(
            &format!("cuBLASLt {dtype:?}: linear with the bias epilogue"),
            || {
                case(
                    &mut lt,
                    &stream,
                    (
                        view(&[64, 96], false, 0, dtype),
                        view(&[96, 80], true, 0, dtype),
                    ),
                    bias,
                )
            },
        );
    }
    // The same plan twice with another bias: the second call reads its own bias (the
    // descriptor cache keeps layouts and algorithm, not pointers).
    let linear = || {
        (
            view(&[64, 96], false, 0, BF16),
            view(&[96, 80], true, 0, BF16),
        )
    };
    let bias = PlanOptions {
        epilogue: Epilogue::Bias,
        ..PlanOptions::new(BF16)
    };
    checks.run(
        "cuBLASLt bf16: a cached plan called again reads the new call's bias",
        || {
            case_with(&mut lt, &stream, linear(), bias, (3, false))?;
            case_with(&mut lt, &stream, linear(), bias, (4, false))
        },
    );
    println!("cuBLASLt: libcublasLt version {}", lt.version());
    let fp8 = |out, bias: bool, fast_accum| PlanOptions {
        epilogue: if bias { Epilogue::Bias } else { Epilogue::None },
        fp8: Some(Fp8Scales { fast_accum }),
        ..PlanOptions::new(out)
    };
    let tn = |m, k, n, lhs| (view(&[m, k], false, 0, lhs), view(&[k, n], true, 0, E4M3));
    // The FP8 forward (E4M3 x E4M3, fast accumulation) and gradient (E5M2 x E4M3) products,
    // with and without a bias, into bf16, f16 and f32, scale inverses in one buffer or two.
    for (name, (lhs, rhs), options) in [
        (
            "E4M3 x E4M3 (TN, scales, bias, fast) -> bf16",
            tn(64, 128, 96, E4M3),
            fp8(BF16, true, true),
        ),
        (
            "E4M3 x E4M3 (TN, scales) -> bf16",
            tn(64, 128, 96, E4M3),
            fp8(BF16, false, false),
        ),
        (
            "E4M3 x E4M3 (TN, scales) -> f32",
            tn(64, 128, 96, E4M3),
            fp8(F32, false, false),
        ),
        (
            "E4M3 x E4M3 (TN, scales, bias) -> f16",
            tn(64, 128, 96, E4M3),
            fp8(F16, true, false),
        ),
        (
            "E5M2 x E4M3 gradient (TN, scales) -> bf16",
            tn(48, 256, 64, E5M2),
            fp8(BF16, false, false),
        ),
        (
            "E4M3 x E4M3 (TN, scales, fast), K 1024 -> f32",
            tn(32, 1024, 48, E4M3),
            fp8(F32, false, true),
        ),
    ] {
        checks.run(&format!("cuBLASLt FP8 {name}"), || {
            case_with(&mut lt, &stream, (lhs, rhs), options, (3, true))
        });
    }
    checks.run(
        "cuBLASLt FP8 scale inverses off a 16-byte boundary are refused",
        || match case_with(
            &mut lt,
            &stream,
            tn(64, 128, 96, E4M3),
            fp8(BF16, false, false),
            (3, false),
        ) {
            Err(why) if why.contains("16-byte") => Ok(why),
            other => Err(format!("not refused: {other:?}")),
        },
    );
    checks.run("cuBLASLt FP8 without scale inverses is refused", || {
        let plan = GemmPlan::new(
            &view(&[16, 32], false, 0, E4M3),
            &view(&[32, 16], true, 0, E4M3),
            fp8(BF16, false, false),
        )
        .map_err(|e| e.to_string())?;
        let buffers = Buffers {
            a: 0,
            b: 0,
            d: 0,
            bias: None,
            scale_invs: None,
        };
        // SAFETY: refused before anything is enqueued (no buffer is read).
        match unsafe { lt.run(&plan, &buffers) } {
            Err(burn_amp::cublaslt::CublasLtError::Buffers(why)) => Ok(why.to_string()),
            other => Err(format!("not refused: {other:?}")),
        }
    });
    let _ = writeln!(
        md,
        "\n## cuBLASLt through burn-amp's plans\n\n| product | TFLOP/s |\n|---|---|"
    );
    for (label, dtype, out, options) in [
        ("bf16 8192^3", BF16, BF16, PlanOptions::new(BF16)),
        ("f16 8192^3", F16, F16, PlanOptions::new(F16)),
        (
            "FP8 E4M3 8192^3 (TN, fast accumulation) -> bf16",
            E4M3,
            BF16,
            PlanOptions {
                fp8: Some(Fp8Scales { fast_accum: true }),
                ..PlanOptions::new(BF16)
            },
        ),
    ] {
        let n = 8192;
        let lhs = view(&[n, n], false, 0, dtype);
        let rhs = view(&[n, n], dtype.is_fp8(), 0, dtype);
        let rate = rate(&mut lt, &stream, (lhs, rhs), out, options);
        let _ = writeln!(md, "| {label} | {rate} |");
        println!("cuBLASLt {label}: {rate} TFLOP/s");
    }
}

/// TFLOP/s of `lhs @ rhs` (median of 10 runs of 10 calls, after a warm-up).
fn rate(
    lt: &mut CublasLt,
    stream: &Arc<CudaStream>,
    (lhs, rhs): (View, View),
    out: GemmDtype,
    options: PlanOptions,
) -> String {
    let Ok(plan) = GemmPlan::new(&lhs, &rhs, options) else {
        return "no plan".into();
    };
    let bytes = |v: &View| reach(v) * v.dtype.size();
    let (Ok(a), Ok(b), Ok(d), Ok(s)) = (
        stream.alloc_zeros::<u8>(bytes(&rhs)),
        stream.alloc_zeros::<u8>(bytes(&lhs)),
        stream.alloc_zeros::<u8>(plan.out_len() * out.size()),
        stream.clone_htod(&[1f32, 0.0, 0.0, 0.0, 1.0]),
    ) else {
        return "out of memory".into();
    };
    let sp = s.device_ptr(stream).0;
    let buffers = Buffers {
        a: a.device_ptr(stream).0,
        b: b.device_ptr(stream).0,
        d: d.device_ptr(stream).0,
        bias: None,
        scale_invs: options.fp8.map(|_| (sp, sp + 16)),
    };
    let mut times = Vec::new();
    for round in 0..11 {
        let start = Instant::now();
        for _ in 0..10 {
            // SAFETY: the buffers hold the plan's operands and live past the sync below.
            if let Err(e) = unsafe { lt.run(&plan, &buffers) } {
                return e.to_string();
            }
        }
        let _ = stream.synchronize();
        if round > 0 {
            times.push(start.elapsed().as_secs_f64() / 10.0);
        }
    }
    times.sort_by(f64::total_cmp);
    let flops = 2.0 * (plan.m * plan.n * plan.k) as f64;
    format!("{:.0}", flops / times[times.len() / 2] / 1e12)
}
