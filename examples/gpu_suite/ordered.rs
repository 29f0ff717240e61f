//! cuBLASLt products on CubeCL's CUDA tensors, ordered with CubeCL's stream by burn-amp's
//! handshake (`OrderedLt`): a chain of dependent products interleaved with CubeCL kernels,
//! every buffer dropped and reallocated at each link, against the same chain on CubeCL's
//! matmul (within a bound) and against itself (bit for bit); then the rates of ordered
//! products beside the bare executor's and CubeCL's, ordering included.

use std::fmt::Write as _;
use std::time::Instant;

use burn::tensor::{Distribution, Tensor, TensorPrimitive};
use burn_amp::cublaslt::{GemmDtype, GemmPlan, OrderedLt, OrderedProduct, PlanOptions, View};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::tensor::CubeTensor;
use burn_tensor::{DType, FloatDType};
use cubecl::cuda::CudaRuntime;

use crate::checks::Checks;

/// Burn's CUDA backend without fusion: its tensors are CubeCL buffers.
type B = CubeBackend<CudaRuntime, f32, i32, u8>;

/// Links in the chain.
const LINKS: usize = 1000;

fn cube(t: Tensor<B, 2>) -> CubeTensor<CudaRuntime> {
    into_contiguous(t.into_primitive().tensor())
}

fn view(t: &CubeTensor<CudaRuntime>) -> View {
    let dtype = match t.dtype {
        DType::BF16 => GemmDtype::BF16,
        DType::F16 => GemmDtype::F16,
        _ => GemmDtype::F32,
    };
    // Contiguous (made so by `cube`); the handle's offset is in the address the executor
    // reads.
    View::contiguous(&t.meta.shape().to_vec(), dtype)
}

/// `x @ w` (both `[*, *]` in one 16-bit type, output in it) through the ordered executor.
fn ordered_matmul(
    lt: &mut OrderedLt,
    x: Tensor<B, 2>,
    w: Tensor<B, 2>,
) -> Result<Tensor<B, 2>, String> {
    let (x, w) = (cube(x), cube(w));
    let (xv, wv) = (view(&x), view(&w));
    let plan = GemmPlan::new(&xv, &wv, PlanOptions::new(xv.dtype)).map_err(|e| e.to_string())?;
    let bytes = plan.out_len() * xv.dtype.size();
    let handle = x.client.empty(bytes);
    let out = CubeTensor::new_contiguous(
        x.client.clone(),
        x.device.clone(),
        burn_tensor::Shape::new([plan.out_shape[0], plan.out_shape[1]]),
        handle,
        x.dtype,
    );
    lt.run(&[OrderedProduct {
        plan: &plan,
        a: &w.handle,
        b: &x.handle,
        d: &out.handle,
        bias: None,
        scale_invs: None,
    }])
    .map_err(|e| e.to_string())?;
    Ok(Tensor::from_primitive(TensorPrimitive::Float(out)))
}

/// The chain: `x <- tanh(x @ w_i)` with a scratch tensor made and dropped at each link;
/// the products ordered through `lt`, or CubeCL's matmul where `lt` is `None`.
fn chain(mut lt: Option<&mut OrderedLt>, dtype: FloatDType, n: usize) -> Result<Vec<f32>, String> {
    let device = Default::default();
    <B as burn::tensor::backend::Backend>::seed(&device, 7);
    let bound = 0.8 / (n as f64).sqrt() * 3f64.sqrt();
    let weights: Vec<Tensor<B, 2>> = (0..8)
        .map(|_| {
            Tensor::<B, 2>::random([n, n], Distribution::Uniform(-bound, bound), &device)
                .cast(dtype)
        })
        .collect();
    let mut x =
        Tensor::<B, 2>::random([256, n], Distribution::Uniform(-1.0, 1.0), &device).cast(dtype);
    for i in 0..LINKS {
        let w = weights[i % weights.len()].clone();
        let y = match lt.as_deref_mut() {
            Some(lt) => ordered_matmul(lt, x, w)?,
            None => x.matmul(w),
        };
        // A buffer made and dropped between the products: CubeCL may hand the memory of
        // `x` (dropped above) or of this scratch to the next link's output.
        let scratch = y.clone().mul_scalar(0.5);
        drop(scratch);
        x = y.tanh();
    }
    x.cast(FloatDType::F32)
        .into_data()
        .to_vec::<f32>()
        .map_err(|e| format!("{e:?}"))
}

/// Runs the checks and the rates, appending the rates to `md`.
pub fn check(checks: &mut Checks, md: &mut String) {
    let device = Default::default();
    let probe = Tensor::<B, 2>::zeros([1, 1], &device);
    let client = cube(probe).client;
    let mut lt = match OrderedLt::new(client, 0) {
        Ok(lt) => lt,
        Err(e) => return checks.run("ordered cuBLASLt products", || Err(e.to_string())),
    };
    for (dtype, name) in [(FloatDType::BF16, "bf16"), (FloatDType::F16, "f16")] {
        let n = 512;
        checks.run(
            &format!(
                "ordered cuBLASLt {name}: a chain of {LINKS} dependent products between CubeCL \
                 kernels, buffers dropped and reused, equals CubeCL's matmul within 0.05 and \
                 itself bit for bit"
            ),
            || {
                let first = chain(Some(&mut lt), dtype, n)?;
                let second = chain(Some(&mut lt), dtype, n)?;
                let cubecl = chain(None, dtype, n)?;
                if first
                    .iter()
                    .zip(&second)
                    .any(|(a, b)| a.to_bits() != b.to_bits())
                {
                    return Err("two runs of the ordered chain differ".into());
                }
                let worst = first
                    .iter()
                    .zip(&cubecl)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                let spread = first.iter().fold(0f32, |m, v| m.max(v.abs()));
                if worst.is_finite() && worst <= 0.05 && spread > 0.05 {
                    Ok(format!(
                        "max |ordered - CubeCL| = {worst:.2e} over values up to {spread:.2}; {} \
                         handshakes, burn-amp's stream waiting by {:?}",
                        lt.handshakes(),
                        lt.transport()
                    ))
                } else {
                    Err(format!(
                        "max |ordered - CubeCL| = {worst:.2e} (values up to {spread:.2})"
                    ))
                }
            },
        );
    }
    println!(
        "ordered cuBLASLt: burn-amp's stream waits by {:?}",
        lt.transport()
    );
    let _ = writeln!(
        md,
        "\n## Ordered cuBLASLt products (handshake with CubeCL's stream included, {:?})\n\n\
         | product | ordered TFLOP/s | CubeCL matmul TFLOP/s | ordered / CubeCL time |\n|---|---|---|---|",
        lt.transport()
    );
    for (m, k, n, dtype, name) in [
        (8192, 8192, 8192, FloatDType::BF16, "bf16"),
        (8192, 8192, 8192, FloatDType::F16, "f16"),
        (8192, 1024, 4096, FloatDType::BF16, "bf16"),
        (8192, 4096, 1024, FloatDType::BF16, "bf16"),
        (8192, 1024, 1024, FloatDType::BF16, "bf16"),
        (1024, 1024, 1024, FloatDType::BF16, "bf16"),
        (256, 256, 256, FloatDType::BF16, "bf16"),
    ] {
        let (ordered, cubecl) = rates(&mut lt, (m, k, n), dtype);
        let row = format!(
            "| {m}x{k} @ {k}x{n} {name} | {ordered:.0} | {cubecl:.0} | {:.3} |",
            cubecl / ordered
        );
        println!("{row}");
        let _ = writeln!(md, "{row}");
    }
}

/// TFLOP/s of `x @ w` ordered through `lt` and on CubeCL's matmul (median of 7 runs of 10
/// products each, the two alternated, a sync at the end of each run).
fn rates(lt: &mut OrderedLt, (m, k, n): (usize, usize, usize), dtype: FloatDType) -> (f64, f64) {
    let device = Default::default();
    let x = Tensor::<B, 2>::random([m, k], Distribution::Uniform(-1.0, 1.0), &device).cast(dtype);
    let w = Tensor::<B, 2>::random([k, n], Distribution::Uniform(-1.0, 1.0), &device).cast(dtype);
    let sync = || <B as burn::tensor::backend::Backend>::sync(&device).expect("sync");
    let mut time = |ordered: bool| {
        let start = Instant::now();
        for _ in 0..10 {
            let y = if ordered {
                ordered_matmul(lt, x.clone(), w.clone()).expect("an ordered product")
            } else {
                x.clone().matmul(w.clone())
            };
            drop(y);
        }
        sync();
        start.elapsed().as_secs_f64() / 10.0
    };
    time(true);
    time(false);
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..7 {
        a.push(time(true));
        b.push(time(false));
    }
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let flops = 2.0 * (m * k * n) as f64;
    (flops / a[3] / 1e12, flops / b[3] / 1e12)
}
