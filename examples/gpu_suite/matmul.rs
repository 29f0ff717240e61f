//! Matmul throughput through Burn (bare backend, no decorator) in f32, f16 and bf16: the
//! ceiling the training-step figures are judged against.

use burn::tensor::backend::Backend;
use burn::tensor::{Distribution, FloatDType, Tensor};

use crate::stats::time_pair;
use crate::{Goal, Row};

/// One `n^3` matmul in `dtype`, synced.
fn matmul<B: Backend>(a: &Tensor<B, 2>, b: &Tensor<B, 2>, device: &B::Device) {
    let c = a.clone().matmul(b.clone());
    let _ = B::sync(device);
    drop(c);
}

/// Rows of `dtype` against f32 at each size: TFLOP/s of both, the ratio.
pub fn rows<B: Backend>(sizes: &[usize], runs: usize, backend: &str) -> Vec<Row> {
    let device = B::Device::default();
    let mut rows = Vec::new();
    for &n in sizes {
        let tflops = |seconds: f64| 2.0 * (n as f64).powi(3) / seconds / 1e12;
        let input = || Tensor::<B, 2>::random([n, n], Distribution::Default, &device);
        let (a32, b32) = (input(), input());
        for dtype in [FloatDType::F16, FloatDType::BF16] {
            if !B::supports_dtype(&device, dtype.into()) {
                continue;
            }
            let (a, b) = (a32.clone().cast(dtype), b32.clone().cast(dtype));
            let (base, t) = time_pair(
                2,
                runs,
                || matmul(&a32, &b32, &device),
                || matmul(&a, &b, &device),
            );
            rows.push(Row {
                what: format!("Matmul {n}^3 through Burn, {dtype:?} vs f32"),
                backend: backend.into(),
                baseline: format!("f32: {:.3} TFLOP/s", tflops(base.median)),
                measured: format!("{dtype:?}: {:.3} TFLOP/s", tflops(t.median)),
                ratio: base.median / t.median,
                goal: Goal::AtLeast(2.0),
                note: "ratio = speed-up over f32 (tensor cores should give well over 2x)".into(),
            });
        }
    }
    rows
}
