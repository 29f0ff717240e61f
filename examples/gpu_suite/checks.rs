//! Correctness checks of the decorator on one backend: dtypes per policy, `float32`
//! bit-identical to the bare backend, a skipped step touching nothing.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::backend::Autodiff;
use burn::module::Param;
use burn::nn::{Linear, LinearConfig};
use burn::optim::adaptor::OptimizerAdaptor;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Recorder};
use burn::tensor::activation::softmax;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn_amp::{LossScaleConfig, LossScaleOptimizer, MixedPrecision, Policy};

/// One check's outcome.
pub struct Check {
    pub backend: String,
    pub name: String,
    pub passed: bool,
    pub detail: String,
}

/// Runs checks on one backend, catching panics as failures.
pub struct Checks {
    pub backend: String,
    pub results: Vec<Check>,
}

impl Checks {
    pub fn new(backend: &str) -> Self {
        Self {
            backend: backend.into(),
            results: Vec::new(),
        }
    }

    /// Runs `f`, which returns `Ok(detail)` or `Err(what went wrong)`; prints the line.
    pub fn run(&mut self, name: &str, f: impl FnOnce() -> Result<String, String>) {
        let outcome = catch_unwind(AssertUnwindSafe(f))
            .unwrap_or_else(|panic| Err(format!("panicked: {}", panic_message(&*panic))));
        let (passed, detail) = match outcome {
            Ok(detail) => (true, detail),
            Err(detail) => (false, detail),
        };
        let word = if passed { "PASS" } else { "FAIL" };
        println!("{word} [{}] {name}: {detail}", self.backend);
        self.results.push(Check {
            backend: self.backend.clone(),
            name: name.into(),
            passed,
            detail,
        });
    }
}

pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// A reproducible stream in [-1, 1) (64-bit LCG, high bits).
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(6364136223846793005) ^ 0x9e37_79b9_7f4a_7c15)
    }

    pub fn next_u32(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 32) as u32
    }

    pub fn next_f32(&mut self) -> f32 {
        (self.next_u32() >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
    }

    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next_f32() * scale).collect()
    }
}

pub fn tensor<B: Backend, const D: usize>(
    values: Vec<f32>,
    shape: [usize; D],
    device: &B::Device,
) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(values, shape), device)
}

pub fn f32s<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec::<f32>().unwrap()
}

fn bits<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<u32> {
    f32s(t).iter().map(|v| v.to_bits()).collect()
}

/// Under each policy `B` supports: compute class in the compute dtype, float32 class in
/// f32, variables in the variable dtype and their gradients read in f32 (so an optimizer's
/// state is f32 under every policy).
pub fn dtypes<B: Backend>(checks: &mut Checks, device: &B::Device)
where
    B::Device: Clone,
{
    type M<B> = MixedPrecision<Autodiff<B>>;
    for policy in [
        Policy::mixed_float16(),
        Policy::mixed_bfloat16(),
        Policy::float16(),
        Policy::bfloat16(),
    ] {
        if MixedPrecision::<Autodiff<B>>::set_policy(device, policy).is_err() {
            println!(
                "SKIP [{}] dtypes under {policy}: the device lacks a dtype",
                checks.backend
            );
            continue;
        }
        checks.run(&format!("dtypes under {policy}"), || {
            let layer: Linear<M<B>> = LinearConfig::new(16, 8).init(device);
            let x = Tensor::<M<B>, 2>::ones([4, 16], device);
            let hidden = layer.forward(x);
            let probs = softmax(hidden.clone(), 1);
            let grads = probs.clone().sum().backward();
            let grad = layer.weight.grad(&grads).ok_or("no weight gradient")?;
            let seen = [
                FloatDType::from(layer.weight.val().dtype()),
                FloatDType::from(hidden.dtype()),
                FloatDType::from(probs.dtype()),
                FloatDType::from(grad.dtype()),
            ];
            let want = [
                policy.variable_dtype(),
                policy.compute_dtype(),
                FloatDType::F32,
                FloatDType::F32,
            ];
            if seen == want {
                Ok(format!("variable, linear, softmax, gradient: {seen:?}"))
            } else {
                Err(format!("got {seen:?}, want {want:?}"))
            }
        });
        MixedPrecision::<Autodiff<B>>::clear_policy(device);
    }
}

/// A two-layer network's loss and gradients, on any autodiff backend.
fn two_layers<B: AutodiffBackend>(device: &B::Device) -> Vec<Vec<u32>> {
    let mut rng = Lcg::new(7);
    let x = tensor::<B, 2>(rng.vec(32 * 64, 1.0), [32, 64], device);
    let w1 = tensor::<B, 2>(rng.vec(64 * 128, 0.2), [64, 128], device).require_grad();
    let w2 = tensor::<B, 2>(rng.vec(128 * 10, 0.2), [128, 10], device).require_grad();
    let h = burn::tensor::activation::relu(x.matmul(w1.clone()));
    let logits = h.matmul(w2.clone());
    let loss = burn::tensor::activation::log_softmax(logits, 1)
        .mean()
        .neg();
    let grads = loss.backward();
    vec![
        bits(loss),
        bits(w1.grad(&grads).unwrap()),
        bits(w2.grad(&grads).unwrap()),
    ]
}

/// Under `float32` the decorator hands every f32 op to the backend unchanged: the loss and
/// gradients are bit-identical to the bare backend's.
pub fn float32_is_bare<B: Backend>(checks: &mut Checks, device: &B::Device) {
    checks.run("float32 policy bit-identical to the bare backend", || {
        MixedPrecision::<Autodiff<B>>::set_policy(device, "float32").map_err(|e| e.to_string())?;
        let bare = two_layers::<Autodiff<B>>(device);
        let decorated = two_layers::<MixedPrecision<Autodiff<B>>>(device);
        MixedPrecision::<Autodiff<B>>::clear_policy(device);
        let n: usize = bare.iter().map(Vec::len).sum();
        if bare == decorated {
            Ok(format!("loss and 2 gradients, {n} values, same bits"))
        } else {
            Err("loss or gradients differ".into())
        }
    });
}

fn param_bytes<B: Backend, const D: usize>(p: &Param<Tensor<B, D>>) -> Vec<u8> {
    f32s(p.val()).iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// A step whose gradients hold a NaN is skipped: parameters and the inner optimizer's
/// moments keep their bytes, the scale halves.
pub fn skipped_step_touches_nothing<B: Backend>(checks: &mut Checks, device: &B::Device) {
    type M<B> = MixedPrecision<Autodiff<B>>;
    checks.run(
        "a skipped step leaves parameters and moments untouched",
        || {
            let mut model: Linear<M<B>> = LinearConfig::new(16, 8).init(device);
            let adam = AdamConfig::new().init::<M<B>, Linear<M<B>>>();
            let mut optim = LossScaleConfig::new()
                .init_manual(adam)
                .map_err(|e| e.to_string())?;
            let x = Tensor::<M<B>, 2>::ones([4, 16], device);
            let grads =
                GradientsParams::from_grads(model.forward(x.clone()).sum().backward(), &model);
            model = optim.step(1e-2, model, grads); // moments exist from here on
            type Adam<B> = OptimizerAdaptor<burn::optim::Adam, Linear<M<B>>, M<B>>;
            let moments = |optim: &LossScaleOptimizer<Adam<B>>| {
                let record = Optimizer::<Linear<M<B>>, M<B>>::to_record(optim);
                let mut entries: Vec<(String, Vec<u8>)> = record
                    .inner
                    .into_iter()
                    .map(|(id, r)| {
                        let bytes = BinBytesRecorder::<FullPrecisionSettings>::default()
                            .record(r, ())
                            .unwrap();
                        (id.to_string(), bytes)
                    })
                    .collect();
                entries.sort();
                entries
            };
            let before = (
                param_bytes(&model.weight),
                moments(&optim),
                optim.loss_scale(),
            );
            let loss = model.forward(x).sum() * f32::NAN;
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(1e-2, model, grads);
            let after = (
                param_bytes(&model.weight),
                moments(&optim),
                optim.loss_scale(),
            );
            if before.0 != after.0 {
                return Err("the weight changed".into());
            }
            if before.1 != after.1 {
                return Err("the moments changed".into());
            }
            if (after.2, optim.skipped_steps()) != (before.2 / 2.0, 1) {
                return Err(format!(
                    "scale {} -> {}, skipped {}",
                    before.2,
                    after.2,
                    optim.skipped_steps()
                ));
            }
            Ok(format!("scale {} -> {}, 1 step skipped", before.2, after.2))
        },
    );
}
