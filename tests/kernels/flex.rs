//! burn-amp's CPU kernels on Flex, through `MixedPrecision`: casts are `half`'s on every
//! value and layout; the fused cast-and-matmul and linear (operands rounded while packed)
//! give values and gradients within the rounding bound of the exact product of the rounded
//! operands, as the cast-then-op path (`kernels=backend`) does.

use burn::backend::autodiff::checkpoint::strategy::BalancedCheckpointing;
use burn::backend::{Autodiff, Flex};
use burn::module::Param;
use burn::nn::{Linear, LinearConfig};
use burn::tensor::backend::AutodiffBackend;
use burn::tensor::{DType, FloatDType, Tensor, TensorData};
use burn_amp::{MixedPrecision, Policy, policy::Kernels, with_policy};
use burn_amp_kernels::cpu::{Isa, gemm::Kernel};
use half::{bf16, f16};

use crate::common::{Lcg, values};

type M = MixedPrecision<Flex>;
type Ad = MixedPrecision<Autodiff<Flex>>;

#[test]
fn cpu_kernels_report_what_runs_here() {
    let isa = Isa::detect();
    let kernel = Kernel::select(isa, burn_amp_kernels::cpu::cast::Format::Bf16);
    eprintln!(
        "CPU kernels: {isa}; bf16 products on the {} kernel",
        kernel.name()
    );
    assert!(Isa::available().contains(&isa));
}

/// Values with every edge a cast meets: NaN (quiet, signalling, negative), infinities,
/// subnormals of f32 and of f16, bf16 and f16 ties, overflow to inf.
fn edge_values(n: usize) -> Vec<f32> {
    let mut v = Lcg::new(3).vec(n, 70000.0);
    let edges = [
        f32::NAN,
        f32::from_bits(0x7F80_0001),
        f32::from_bits(0xFFC0_1234),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(1),
        -1e-40,
        6e-8,
        f32::from_bits(0x3F80_8000),
        f32::from_bits(0x3F81_8000),
        65520.0,
        3.4e38,
        -0.0,
    ];
    for (i, e) in edges.iter().enumerate() {
        v[i * 7] = *e;
    }
    v
}

fn half_bits(x: f32, to: FloatDType) -> u16 {
    match to {
        FloatDType::BF16 => bf16::from_f32(x).to_bits(),
        _ => f16::from_f32(x).to_bits(),
    }
}

fn narrow_bits<const D: usize>(t: Tensor<M, D>) -> Vec<u16> {
    let data = t.into_data();
    match data.dtype {
        DType::BF16 => data
            .to_vec::<bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        DType::F16 => data
            .to_vec::<f16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn casts_are_halfs_on_every_layout() {
    let device = Default::default();
    let (rows, cols) = (64, 33);
    let host = edge_values(rows * cols);
    let x = Tensor::<M, 2>::from_data(TensorData::new(host.clone(), [rows, cols]), &device);
    // The logical values of each view, row-major, and the view.
    let at = |r: usize, c: usize| host[r * cols + c];
    let views: Vec<(&str, Tensor<M, 2>, Vec<f32>)> = vec![
        ("contiguous", x.clone(), host.clone()),
        (
            "transposed",
            x.clone().transpose(),
            (0..cols)
                .flat_map(|c| (0..rows).map(move |r| at(r, c)))
                .collect(),
        ),
        (
            "sliced",
            x.clone().slice([5..40, 3..20]),
            (5..40)
                .flat_map(|r| (3..20).map(move |c| at(r, c)))
                .collect(),
        ),
        (
            "flipped",
            x.clone().flip([1]),
            (0..rows)
                .flat_map(|r| (0..cols).rev().map(move |c| at(r, c)))
                .collect(),
        ),
    ];
    for to in [FloatDType::BF16, FloatDType::F16] {
        for (name, view, logical) in &views {
            let narrow = view.clone().cast(to);
            assert_eq!(narrow.dims(), view.dims(), "{name}");
            let expected: Vec<u16> = logical.iter().map(|x| half_bits(*x, to)).collect();
            assert_eq!(narrow_bits(narrow.clone()), expected, "{name} -> {to:?}");
            // And back: the widening of each narrow value.
            let wide = values(narrow.cast(FloatDType::F32));
            for (w, e) in wide.iter().zip(&expected) {
                let back = match to {
                    FloatDType::BF16 => bf16::from_bits(*e).to_f32(),
                    _ => f16::from_bits(*e).to_f32(),
                };
                assert_eq!(w.to_bits(), back.to_bits(), "{name} {to:?} -> f32");
            }
        }
    }
}

fn round(x: f32, compute: FloatDType) -> f64 {
    match compute {
        FloatDType::BF16 => bf16::from_f32(x).to_f64(),
        _ => f16::from_f32(x).to_f64(),
    }
}

/// How many times a path rounds a result, or partial results, to the compute dtype.
#[derive(Clone, Copy, Debug)]
enum Rounded {
    /// Once, at the end (the fused kernels, or a single product).
    Once,
    /// Once per partial sum and once per sum of them (Burn's gradient of a broadcast or
    /// batched operand: one product per batch entry in the compute dtype, then a sum).
    Partials(usize),
}

/// `|got - exact| <= (k + 1) 2^-24 sum|a b| + rounding` per entry, the rounding being
/// `u |exact|` for one rounding at the end or `(n + 1) u sum|a b|` for n rounded partial
/// sums (u: the compute dtype's unit roundoff, 2^-8 for bf16, 2^-11 for f16; 0 for an f32
/// result).
fn assert_within(
    what: &str,
    got: &[f32],
    exact: &[f64],
    magnitude: &[f64],
    k: usize,
    u: f64,
    rounded: Rounded,
) {
    assert_eq!(got.len(), exact.len(), "{what}: length");
    for (i, ((g, e), m)) in got.iter().zip(exact).zip(magnitude).enumerate() {
        let rounding = match rounded {
            Rounded::Once => 2.0 * u * e.abs(),
            Rounded::Partials(n) => 2.0 * (n + 1) as f64 * u * m,
        };
        let bound = (k + 1) as f64 * 2f64.powi(-24) * m + rounding + 1e-30;
        assert!(
            (*g as f64 - e).abs() <= bound,
            "{what}[{i}]: {g} vs exact {e} (bound {bound:e})"
        );
    }
}

/// The exact product of row-major `a` (m x k) and `b` (k x n), with its magnitudes.
fn product(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut p, mut q) = (vec![0.0; m * n], vec![0.0; m * n]);
    for i in 0..m {
        for j in 0..n {
            for t in 0..k {
                let x = a[i * k + t] * b[t * n + j];
                p[i * n + j] += x;
                q[i * n + j] += x.abs();
            }
        }
    }
    (p, q)
}

fn transpose(a: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| a[r * cols + c]))
        .collect()
}

/// A linear layer under `policy` on `B`, with loss `sum(y * c)`: the output, and the
/// gradients of x, the weight and the bias.
fn linear_run<B: AutodiffBackend>(
    policy: Policy,
    x: &[f32],
    x_shape: [usize; 3],
    w: &[f32],
    b: &[f32],
    c: &[f32],
) -> [Vec<f32>; 4] {
    let device = Default::default();
    with_policy(policy, || {
        let (d_in, d_out) = (x_shape[2], b.len());
        let mut layer: Linear<MixedPrecision<B>> = LinearConfig::new(d_in, d_out).init(&device);
        layer.weight = Param::from_data(TensorData::new(w.to_vec(), [d_in, d_out]), &device);
        layer.bias = Some(Param::from_data(
            TensorData::new(b.to_vec(), [d_out]),
            &device,
        ));
        let x = Tensor::<MixedPrecision<B>, 3>::from_data(
            TensorData::new(x.to_vec(), x_shape),
            &device,
        )
        .require_grad();
        let y = layer.forward(x.clone());
        assert_eq!(FloatDType::from(y.dtype()), policy.compute_dtype());
        let [bt, t, _] = x_shape;
        let c = Tensor::<MixedPrecision<B>, 3>::from_data(
            TensorData::new(c.to_vec(), [bt, t, d_out]),
            &device,
        );
        let grads = (y.clone() * c.cast(policy.compute_dtype()))
            .sum()
            .backward();
        let gw = layer.weight.grad(&grads).unwrap();
        assert_eq!(
            FloatDType::from(gw.dtype()),
            FloatDType::F32,
            "weight grads stay f32"
        );
        [
            values(y),
            values(x.grad(&grads).unwrap()),
            values(gw),
            values(layer.bias.as_ref().unwrap().grad(&grads).unwrap()),
        ]
    })
}

#[test]
fn fused_linear_values_and_gradients_are_within_the_rounding_bound() {
    let (bt, t, d_in, d_out) = (3, 7, 37, 19);
    let x = Lcg::new(11).vec(bt * t * d_in, 2.0);
    let w = Lcg::new(12).vec(d_in * d_out, 0.5);
    let b = Lcg::new(13).vec(d_out, 0.1);
    let c = Lcg::new(14).vec(bt * t * d_out, 1.0);
    let rows = bt * t;
    for compute in [FloatDType::BF16, FloatDType::F16] {
        let policy = Policy::new(FloatDType::F32, compute, FloatDType::F32).unwrap();
        let u = if compute == FloatDType::BF16 {
            2f64.powi(-8)
        } else {
            2f64.powi(-11)
        };
        let r = |v: &[f32]| -> Vec<f64> { v.iter().map(|x| round(*x, compute)).collect() };
        let (xr, wr, br, cr) = (r(&x), r(&w), r(&b), r(&c));
        // y = x W + b; dx = c W^T; dW = x^T c; db = column sums of c.
        let (mut y, ym) = product(&xr, &wr, rows, d_in, d_out);
        y.iter_mut()
            .enumerate()
            .for_each(|(i, v)| *v += br[i % d_out]);
        let (dx, dxm) = product(&cr, &transpose(&wr, d_in, d_out), rows, d_out, d_in);
        let (dw, dwm) = product(&transpose(&xr, rows, d_in), &cr, d_in, rows, d_out);
        let db: Vec<f64> = (0..d_out)
            .map(|j| (0..rows).map(|i| cr[i * d_out + j]).sum())
            .collect();
        let dbm: Vec<f64> = (0..d_out)
            .map(|j| (0..rows).map(|i| cr[i * d_out + j].abs()).sum())
            .collect();
        let mut outs = Vec::new();
        for kernels in [Kernels::Auto, Kernels::Backend] {
            let p = policy.with_kernels(kernels);
            let [gy, gx, gw, gb] = linear_run::<Autodiff<Flex>>(p, &x, [bt, t, d_in], &w, &b, &c);
            let what = |s: &str| format!("{compute:?} {kernels:?} {s}");
            let ym2: Vec<f64> = ym
                .iter()
                .enumerate()
                .map(|(i, m)| m + br[i % d_out].abs())
                .collect();
            // Cast-then-linear adds the bias in the compute dtype (two roundings) and sums
            // the weight and bias gradients per batch entry in it (Burn's linear backward).
            let (once, sums) = match kernels {
                Kernels::Auto => (Rounded::Once, Rounded::Once),
                Kernels::Backend => (Rounded::Partials(1), Rounded::Partials(bt + t)),
            };
            assert_within(&what("y"), &gy, &y, &ym2, d_in + 1, u, once);
            assert_within(&what("dx"), &gx, &dx, &dxm, d_out, u, Rounded::Once);
            assert_within(&what("dW"), &gw, &dw, &dwm, rows, u, sums);
            assert_within(&what("db"), &gb, &db, &dbm, rows, u, sums);
            outs.push(gw);
        }
        // The fused weight gradient is f32 from f32 sums: within f32 rounding of the exact
        // one, where the cast-then-matmul path's passed through the compute dtype.
        assert_within(
            &format!("{compute:?} fused dW (f32)"),
            &outs[0],
            &dw,
            &dwm,
            rows,
            0.0,
            Rounded::Once,
        );
        // And the same under Burn's balanced checkpointing: the same kernels, the same bits.
        let ck = linear_run::<Autodiff<Flex, BalancedCheckpointing>>(
            policy,
            &x,
            [bt, t, d_in],
            &w,
            &b,
            &c,
        );
        assert_eq!(ck[2], outs[0], "{compute:?}: checkpointing changes nothing");
    }
}

/// Row-major strides of a shape.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The exact (f64) `y = lhs @ rhs` with Burn's batch broadcasting, and the gradients of
/// `sum(y)` for each operand, each with the sum of its terms' magnitudes.
#[allow(clippy::type_complexity)]
fn matmul_reference(
    lhs: &[f64],
    ls: &[usize],
    rhs: &[f64],
    rs: &[usize],
) -> [(Vec<f64>, Vec<f64>); 3] {
    let r = ls.len();
    let (m, k, n) = (ls[r - 2], ls[r - 1], rs[r - 1]);
    let out_batch: Vec<usize> = (0..r - 2).map(|d| ls[d].max(rs[d])).collect();
    let (lst, rst) = (strides(ls), strides(rs));
    let count: usize = out_batch.iter().product();
    let lhs_len: usize = ls.iter().product();
    let rhs_len: usize = rs.iter().product();
    let (mut y, mut ym) = (vec![0.0; count * m * n], vec![0.0; count * m * n]);
    let (mut dl, mut dlm) = (vec![0.0; lhs_len], vec![0.0; lhs_len]);
    let (mut dr, mut drm) = (vec![0.0; rhs_len], vec![0.0; rhs_len]);
    for e in 0..count {
        let (mut lo, mut ro, mut rem) = (0, 0, e);
        for d in (0..r - 2).rev() {
            let idx = rem % out_batch[d];
            rem /= out_batch[d];
            lo += if ls[d] == 1 { 0 } else { idx * lst[d] };
            ro += if rs[d] == 1 { 0 } else { idx * rst[d] };
        }
        for i in 0..m {
            for j in 0..n {
                for t in 0..k {
                    let (a, b) = (lhs[lo + i * k + t], rhs[ro + t * n + j]);
                    y[(e * m + i) * n + j] += a * b;
                    ym[(e * m + i) * n + j] += (a * b).abs();
                    dl[lo + i * k + t] += b;
                    dlm[lo + i * k + t] += b.abs();
                    dr[ro + t * n + j] += a;
                    drm[ro + t * n + j] += a.abs();
                }
            }
        }
    }
    [(y, ym), (dl, dlm), (dr, drm)]
}

/// `lhs @ rhs` of the given shapes under mixed_bfloat16, with and without the kernels:
/// the value and both gradients of `sum(y)` within the bound of the exact ones.
fn matmul_agrees<const D: usize>(lhs_shape: [usize; D], rhs_shape: [usize; D]) {
    let device = Default::default();
    let n = |s: &[usize]| s.iter().product::<usize>();
    let lhs = Lcg::new(21).vec(n(&lhs_shape), 1.0);
    let rhs = Lcg::new(22).vec(n(&rhs_shape), 1.0);
    let r = |v: &[f32]| -> Vec<f64> { v.iter().map(|x| round(*x, FloatDType::BF16)).collect() };
    let [y, dl, dr] = matmul_reference(&r(&lhs), &lhs_shape, &r(&rhs), &rhs_shape);
    let (m, k, nn) = (lhs_shape[D - 2], lhs_shape[D - 1], rhs_shape[D - 1]);
    // How many batch entries each operand's gradient sums over.
    let reps = |own: &[usize]| -> usize {
        (0..D - 2)
            .map(|d| {
                if own[d] == 1 {
                    lhs_shape[d].max(rhs_shape[d])
                } else {
                    1
                }
            })
            .product()
    };
    for kernels in [Kernels::Auto, Kernels::Backend] {
        let (gy, gl, gr) = with_policy(Policy::mixed_bfloat16().with_kernels(kernels), || {
            let l = Tensor::<Ad, D>::from_data(TensorData::new(lhs.clone(), lhs_shape), &device)
                .require_grad();
            let r = Tensor::<Ad, D>::from_data(TensorData::new(rhs.clone(), rhs_shape), &device)
                .require_grad();
            let y = l.clone().matmul(r.clone());
            assert_eq!(FloatDType::from(y.dtype()), FloatDType::BF16);
            let grads = y.clone().cast(FloatDType::F32).sum().backward();
            let (gl, gr) = (l.grad(&grads).unwrap(), r.grad(&grads).unwrap());
            assert_eq!(gl.dims(), lhs_shape);
            assert_eq!(gr.dims(), rhs_shape);
            (values(y), values(gl), values(gr))
        });
        let what = |s: &str| format!("{lhs_shape:?} @ {rhs_shape:?} {kernels:?} {s}");
        let u = 2f64.powi(-8);
        let sums = |own: &[usize]| match kernels {
            Kernels::Auto => Rounded::Once,
            Kernels::Backend => Rounded::Partials(reps(own)),
        };
        assert_within(&what("y"), &gy, &y.0, &y.1, k, u, Rounded::Once);
        assert_within(
            &what("dlhs"),
            &gl,
            &dl.0,
            &dl.1,
            nn * reps(&lhs_shape),
            u,
            sums(&lhs_shape),
        );
        assert_within(
            &what("drhs"),
            &gr,
            &dr.0,
            &dr.1,
            m * reps(&rhs_shape),
            u,
            sums(&rhs_shape),
        );
    }
}

#[test]
fn fused_matmul_agrees_with_cast_then_matmul_on_every_plan() {
    // Batched (attention's products), shared right-hand side (a weight), 2-D, and a
    // broadcast the kernels leave to Flex.
    matmul_agrees([2, 3, 17, 23], [2, 3, 23, 11]);
    matmul_agrees([4, 9, 23], [1, 23, 11]);
    matmul_agrees([13, 29], [29, 31]);
    matmul_agrees([2, 1, 5, 7], [1, 3, 7, 4]);
}

#[test]
fn f64_is_never_narrowed_and_float32_is_untouched() {
    let device = Default::default();
    with_policy(Policy::mixed_bfloat16(), || {
        let a = Tensor::<M, 2>::ones([2, 3], &device).cast(FloatDType::F64);
        assert_eq!(a.dtype(), DType::F64);
        let y = a.clone().matmul(a.transpose());
        assert_eq!(y.dtype(), DType::F64);
        assert_eq!(values(y), vec![3.0; 4]);
    });
    // float32: the kernels are not asked; the product is Flex's, bit for bit.
    let x =
        Tensor::<Flex, 2>::from_data(TensorData::new(Lcg::new(5).vec(12, 1.0), [3, 4]), &device);
    let bare = values(x.clone().matmul(x.clone().transpose()));
    with_policy(Policy::float32(), || {
        let xm = Tensor::<M, 2>::from_data(x.to_data(), &device);
        assert_eq!(values(xm.clone().matmul(xm.transpose())), bare);
    });
}
