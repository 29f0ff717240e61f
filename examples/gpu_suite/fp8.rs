//! Correctness checks of the kernels on one backend: FP8 quantize/dequantize against the CPU
//! reference byte for byte, blocked accumulation and the FP8 matmul bit for bit, and an FP8
//! training step.

use burn::backend::Autodiff;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn_amp::MixedPrecision;
use burn_amp::accum::{self, AccumBackend, AccumConfig, Accumulator, Fp8MatmulConfig};
use burn_amp::fp8::{
    Fp8Backend, Fp8Cast, Fp8Format, Fp8Recipe, Fp8Tensor, Overflow, Rounding, ScaleRule,
};
use burn_amp_kernels::accum::reference as accum_reference;
use burn_amp_kernels::fp8::reference::{decode_scaled, quantize_blocks};

use crate::checks::{Checks, Lcg, f32s, tensor};

fn recipes() -> [(&'static str, Fp8Recipe); 6] {
    [
        ("unscaled", Fp8Recipe::Unscaled),
        ("per-tensor", Fp8Recipe::per_tensor()),
        (
            "per-tensor pow2",
            Fp8Recipe::per_tensor().with_rule(ScaleRule::PowerOfTwo { margin: 0 }),
        ),
        ("1x128", Fp8Recipe::blocks_1x128()),
        ("128x128", Fp8Recipe::blocks_128x128()),
        ("mx", Fp8Recipe::mx()),
    ]
}

/// Every cast: both formats, both roundings, both overflow rules.
fn casts() -> Vec<Fp8Cast> {
    let mut out = Vec::new();
    for format in [Fp8Format::E4M3, Fp8Format::E5M2] {
        for rounding in [Rounding::NearestEven, Rounding::Stochastic { seed: 7 }] {
            for overflow in [Overflow::Saturate, Overflow::NonSaturating] {
                out.push(
                    Fp8Cast::new(format)
                        .with_rounding(rounding)
                        .with_overflow(overflow),
                );
            }
        }
    }
    out
}

/// The reference's codes and dequantized bits for `values` as `[rows, cols]`.
fn reference(values: &[f32], cols: usize, cast: Fp8Cast, recipe: Fp8Recipe) -> (Vec<u8>, Vec<u32>) {
    let layout = recipe.layout(&[values.len() / cols, cols].into()).unwrap();
    let (codes, scales) = quantize_blocks(values, layout, cast, recipe.rule());
    let dequantized = codes
        .iter()
        .enumerate()
        .map(|(i, &code)| {
            let scale_inv = scales[layout.block_of(i as u32) as usize].scale_inv;
            decode_scaled(code, cast.format, scale_inv).to_bits()
        })
        .collect();
    (codes, dequantized)
}

/// Quantizes `values` (`[rows, cols]`, in `dtype`) with every cast and recipe on `B` and
/// compares codes and dequantized values with the reference; `Ok` names what was compared.
fn compare<B: Fp8Backend>(
    values: &[f32],
    cols: usize,
    dtype: FloatDType,
    device: &B::Device,
) -> Result<String, String> {
    let rows = values.len() / cols;
    let x = Tensor::<B, 2>::from_data(TensorData::new(values.to_vec(), [rows, cols]), device)
        .cast(dtype);
    let mut compared = 0;
    for cast in casts() {
        for (name, recipe) in recipes() {
            let (codes, dequantized) = reference(values, cols, cast, recipe);
            let q = Fp8Tensor::quantize(x.clone(), cast, recipe).map_err(|e| e.to_string())?;
            let got = q.to_bytes();
            // A NaN's sign is not kept through every GPU's conversions (NVIDIA's f16/f32
            // conversions return the canonical NaN), so NaN codes match NaN codes, as the
            // dequantized values below match NaN to NaN.
            let nan = |code: u8| decode_scaled(code, cast.format, 1.0).is_nan();
            let same_code = |a: u8, b: u8| a == b || (nan(a) && nan(b));
            if let Some(i) = (0..codes.len()).find(|&i| !same_code(got[i], codes[i])) {
                return Err(format!(
                    "{name} {cast:?}: element {i} ({:e}) -> {:#04x}, reference {:#04x}",
                    values[i], got[i], codes[i]
                ));
            }
            let out: Vec<u32> = f32s(q.dequantize_as(FloatDType::F32))
                .iter()
                .map(|v| v.to_bits())
                .collect();
            let same = |a: u32, b: u32| {
                a == b || (f32::from_bits(a).is_nan() && f32::from_bits(b).is_nan())
            };
            if let Some(i) = (0..out.len()).find(|&i| !same(out[i], dequantized[i])) {
                return Err(format!(
                    "{name} {cast:?}: dequantized element {i} is {:e}, reference {:e}",
                    f32::from_bits(out[i]),
                    f32::from_bits(dequantized[i])
                ));
            }
            compared += 1;
        }
    }
    Ok(format!(
        "{} values x {compared} casts and recipes: codes and dequantized bits identical",
        values.len()
    ))
}

/// Random f32 with heavy tails, specials and subnormals mixed in.
fn random_f32(n: usize, seed: u64) -> Vec<f32> {
    let mut rng = Lcg::new(seed);
    (0..n)
        .map(|i| match i % 997 {
            0 => f32::NAN,
            1 => f32::INFINITY,
            2 => -f32::INFINITY,
            3 => f32::from_bits(rng.next_u32() & 0x807f_ffff), // a subnormal
            _ => {
                let exponent = (rng.next_u32() % 64) as i32 - 40; // 2^-40 .. 2^23
                rng.next_f32() * 2f32.powi(exponent)
            }
        })
        .collect()
}

pub fn fp8_bytes<B: Fp8Backend>(checks: &mut Checks, device: &B::Device, random: usize) {
    if B::supports_dtype(device, FloatDType::F16.into()) {
        checks.run("FP8 bytes on all 2^16 f16 bit patterns", || {
            let values: Vec<f32> = (0..=u16::MAX)
                .map(|b| half::f16::from_bits(b).to_f32())
                .collect();
            compare::<B>(&values, 256, FloatDType::F16, device)
        });
    }
    checks.run(&format!("FP8 bytes on {random} random f32"), || {
        compare::<B>(&random_f32(random, 11), 1024, FloatDType::F32, device)
    });
}

fn bits(values: Vec<f32>) -> Vec<u32> {
    values.iter().map(|v| v.to_bits()).collect()
}

pub fn accumulation<B: AccumBackend + Fp8Backend>(checks: &mut Checks, device: &B::Device) {
    checks.run(
        "blocked accumulation bit-identical to the reference",
        || {
            let (rows, cols) = (6, 700);
            // Within f16's range, so no accumulator meets inf - inf (NaN payloads may differ).
            let x = Lcg::new(21).vec(rows * cols, 4.0);
            let y = Lcg::new(22).vec(rows * cols, 4.0);
            let configs = [
                AccumConfig::naive(Accumulator::F16),
                AccumConfig::chunked(Accumulator::F16, 64),
                AccumConfig::chunked(Accumulator::BF16, 32).with_stochastic(3),
                AccumConfig::chunked(Accumulator::E8M13, 128).with_combine(Accumulator::E8M13),
            ];
            for config in configs {
                let sums =
                    accum::blocked_sum(tensor::<B, 2>(x.clone(), [rows, cols], device), config)
                        .map_err(|e| e.to_string())?;
                let dot = accum::blocked_dot(
                    tensor::<B, 1>(x[..cols].to_vec(), [cols], device),
                    tensor::<B, 1>(y[..cols].to_vec(), [cols], device),
                    config,
                )
                .map_err(|e| e.to_string())?;
                let mm = accum::blocked_matmul(
                    tensor::<B, 2>(x.clone(), [rows, cols], device),
                    tensor::<B, 2>(y.clone(), [cols, rows], device),
                    config,
                )
                .map_err(|e| e.to_string())?;
                let got = [bits(f32s(sums)), bits(f32s(dot)), bits(f32s(mm))];
                let want = [
                    bits(accum_reference::row_sums(&x, cols, config)),
                    bits(vec![accum_reference::dot(&x[..cols], &y[..cols], config)]),
                    bits(accum_reference::matmul(&x, &y, rows, cols, rows, config)),
                ];
                if got != want {
                    return Err(format!("{config:?} differs from the reference"));
                }
            }
            Ok("4 configurations x (row sums, dot, matmul)".into())
        },
    );
    checks.run("fp8_matmul bit-identical to the reference", || {
        let (m, k, n) = (8, 384, 130);
        let cast = Fp8Cast::new(Fp8Format::E4M3);
        let a = tensor::<B, 2>(Lcg::new(31).vec(m * k, 4.0), [m, k], device);
        let b = tensor::<B, 2>(Lcg::new(32).vec(k * n, 4.0), [k, n], device);
        let a =
            Fp8Tensor::quantize(a, cast, Fp8Recipe::blocks_1x128()).map_err(|e| e.to_string())?;
        let b =
            Fp8Tensor::quantize(b, cast, Fp8Recipe::blocks_128x128()).map_err(|e| e.to_string())?;
        let config = Fp8MatmulConfig {
            block: 128,
            window: 128,
            accumulator: Accumulator::E8M13,
            promote: true,
        };
        let got = accum::fp8_matmul(&a, &b, config, FloatDType::F32).map_err(|e| e.to_string())?;
        let want = accum_reference::fp8_matmul(
            &a.to_bytes(),
            &f32s(a.scale_inv()),
            &b.to_bytes(),
            &f32s(b.scale_inv()),
            (m, k, n),
            Fp8Format::E4M3,
            config,
        );
        if bits(f32s(got)) == bits(want) {
            Ok(format!("{m}x{k} @ {k}x{n}, E4M3, 1x128 / 128x128 scales"))
        } else {
            Err("differs from the reference".into())
        }
    });
}

/// A linear layer's training step under an FP8 policy: bf16-based where the device has
/// bf16, else f16-based.
pub fn training_step<B: Fp8Backend>(checks: &mut Checks, device: &B::Device) {
    type M<B> = MixedPrecision<Autodiff<B>>;
    let policy = if B::supports_dtype(device, FloatDType::BF16.into()) {
        "float8_from_mixed_bfloat16"
    } else {
        "float8_from_mixed_float16"
    };
    checks.run(&format!("an FP8 training step runs ({policy})"), || {
        MixedPrecision::<Autodiff<B>>::set_policy(device, policy).map_err(|e| e.to_string())?;
        let layer: Linear<M<B>> = LinearConfig::new(256, 128).init(device);
        let x = tensor::<M<B>, 2>(Lcg::new(5).vec(64 * 256, 1.0), [64, 256], device);
        let grads = layer.forward(x).sum().backward();
        let grad = layer.weight.grad(&grads).ok_or("no weight gradient")?;
        MixedPrecision::<Autodiff<B>>::clear_policy(device);
        let dtype = FloatDType::from(grad.dtype());
        let values = f32s(grad);
        if dtype == FloatDType::F32 && values.iter().all(|v| v.is_finite()) {
            Ok(format!("{} finite f32 weight gradients", values.len()))
        } else {
            Err(format!(
                "gradient dtype {dtype:?}, finite: {}",
                values.iter().all(|v| v.is_finite())
            ))
        }
    });
}
