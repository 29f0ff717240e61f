//! The `nn` kernels (softmax, layer norm, GELU, ReLU, arithmetic, dropout masks) and strided
//! copies: every instruction set gives the portable copy's bits; 16-bit outputs are the
//! f32 result rounded once; each op is within its stated bound of an f64 reference, on
//! inputs that break kernels (odd lengths, rows of one, `-inf` masks, rows of only `-inf`,
//! inf and NaN, subnormals); arithmetic and ReLU are exact (the f32 operation rounded
//! once); dropout masks and strided copies are exact.

use burn_amp_kernels::cpu::cast::{self, CpuFloat};
use burn_amp_kernels::cpu::nn::{self, BinaryOp, NnError};
use burn_amp_kernels::cpu::{Isa, layout};
use half::{bf16, f16};

use super::Rng;

/// A float's bits, to compare NaN-carrying outputs exactly.
trait Bits: CpuFloat {
    fn bits(self) -> u32;
}
impl Bits for f32 {
    fn bits(self) -> u32 {
        self.to_bits()
    }
}
impl Bits for bf16 {
    fn bits(self) -> u32 {
        self.to_bits() as u32
    }
}
impl Bits for f16 {
    fn bits(self) -> u32 {
        self.to_bits() as u32
    }
}

fn bits<T: Bits>(v: &[T]) -> Vec<u32> {
    v.iter().map(|x| x.bits()).collect()
}

/// Values of scale `scale`, with every awkward value sprinkled in.
fn awkward(n: usize, scale: f32, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    let mut v: Vec<f32> = (0..n).map(|_| rng.uniform() * scale).collect();
    let edges = [
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(1),
        -1e-40,
        -0.0,
        0.0,
        1e-30,
        3e38,
    ];
    for (i, e) in edges.iter().enumerate() {
        if i * 37 < n {
            v[i * 37] = *e;
        }
    }
    v
}

fn narrow<T: CpuFloat>(v: &[f32]) -> Vec<T> {
    v.iter().map(|x| T::from_f32(*x)).collect()
}

fn wide<T: CpuFloat>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f32() as f64).collect()
}

/// Runs `f` on every instruction set this CPU has and checks each against the portable
/// copy's bits; returns the portable output.
fn same_bits_everywhere<T: Bits>(what: &str, f: impl Fn(Isa) -> Vec<T>) -> Vec<T> {
    let reference = f(Isa::PORTABLE);
    for isa in Isa::available() {
        assert_eq!(bits(&f(isa)), bits(&reference), "{what} on {isa}");
    }
    reference
}

/// Row lengths that break kernels: one value, shorter and longer than a vector, odd.
const ROWS: [usize; 7] = [1, 3, 16, 17, 33, 128, 1000];

/// Rows of `row` values: random ones, one with a `-inf` mask, one of only `-inf`, one with
/// NaN, one with +inf, one of subnormals.
fn softmax_input(row: usize, seed: u64) -> Vec<f32> {
    let mut x = awkward(row * 6, 8.0, seed);
    // Clean random rows first, then the special ones.
    let mut rng = Rng(seed + 1);
    x.iter_mut().for_each(|v| *v = rng.uniform() * 8.0);
    for i in 0..row {
        if i % 3 == 1 {
            x[row + i] = f32::NEG_INFINITY;
        }
        x[2 * row + i] = f32::NEG_INFINITY;
        x[5 * row + i] = f32::from_bits(1 + i as u32);
    }
    x[3 * row + row / 2] = f32::NAN;
    x[4 * row + row / 2] = f32::INFINITY;
    x
}

/// Softmax of a row in f64, NaN throughout where the f32 kernel (and Burn) give NaN.
fn softmax_ref(row: &[f64], log: bool) -> Vec<f64> {
    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if row.iter().any(|v| v.is_nan()) || m.is_infinite() {
        return vec![f64::NAN; row.len()];
    }
    let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
    row.iter()
        .map(|v| {
            if log {
                v - m - s.ln()
            } else {
                (v - m).exp() / s
            }
        })
        .collect()
}

fn close(got: f64, want: f64, tol: f64) -> bool {
    (got.is_nan() && want.is_nan()) || got == want || (got - want).abs() <= tol
}

fn softmax_case<I: CpuFloat, O: Bits>(row: usize, log: bool) {
    let x: Vec<I> = narrow(&softmax_input(row, row as u64));
    let what = format!(
        "{}softmax, rows of {row}, {:?} -> {:?}",
        if log { "log-" } else { "" },
        I::FORMAT,
        O::FORMAT
    );
    let y = same_bits_everywhere(&what, |isa| {
        let mut y = vec![O::default(); x.len()];
        if log {
            nn::log_softmax(isa, &x, &mut y, row).unwrap();
        } else {
            nn::softmax(isa, &x, &mut y, row).unwrap();
        }
        y
    });
    // The f32 result rounded once.
    let mut y32 = vec![0f32; x.len()];
    if log {
        nn::log_softmax(Isa::PORTABLE, &x, &mut y32, row).unwrap();
    } else {
        nn::softmax(Isa::PORTABLE, &x, &mut y32, row).unwrap();
    }
    assert_eq!(bits(&y), bits(&narrow::<O>(&y32)), "{what}: rounded once");
    for (r, (xr, yr)) in wide(&x).chunks(row).zip(y32.chunks(row)).enumerate() {
        let want = softmax_ref(xr, log);
        for (i, (g, w)) in yr.iter().zip(&want).enumerate() {
            let tol = if log {
                2e-6 * (1.0 + w.abs())
            } else {
                1e-6 * w + 1e-37
            };
            assert!(close(*g as f64, *w, tol), "{what}: row {r}[{i}] {g} vs {w}");
        }
    }
}

#[test]
fn softmax_and_log_softmax_are_within_bounds_of_f64_on_every_isa() {
    for row in ROWS {
        for log in [false, true] {
            softmax_case::<f32, f32>(row, log);
            softmax_case::<bf16, f32>(row, log);
            softmax_case::<f16, f32>(row, log);
            softmax_case::<bf16, bf16>(row, log);
            softmax_case::<f32, f16>(row, log);
        }
    }
}

#[test]
fn softmax_backward_is_within_bounds_of_f64_on_every_isa() {
    for row in ROWS {
        let mut rng = Rng(row as u64);
        let x: Vec<f32> = (0..row * 4).map(|_| rng.uniform() * 6.0).collect();
        let dy: Vec<f32> = (0..row * 4).map(|_| rng.uniform()).collect();
        for log in [false, true] {
            let mut y = vec![0f32; x.len()];
            if log {
                nn::log_softmax(Isa::PORTABLE, &x, &mut y, row).unwrap();
            } else {
                nn::softmax(Isa::PORTABLE, &x, &mut y, row).unwrap();
            }
            let what = format!(
                "{}softmax backward, rows of {row}",
                if log { "log-" } else { "" }
            );
            let dx = same_bits_everywhere(&what, |isa| {
                let mut dx = vec![0f32; x.len()];
                if log {
                    nn::log_softmax_backward(isa, &y, &dy, &mut dx, row).unwrap();
                } else {
                    nn::softmax_backward(isa, &y, &dy, &mut dx, row).unwrap();
                }
                dx
            });
            let dx16 = same_bits_everywhere(&what, |isa| {
                let mut dx = vec![bf16::ZERO; x.len()];
                if log {
                    nn::log_softmax_backward(isa, &y, &dy, &mut dx, row).unwrap();
                } else {
                    nn::softmax_backward(isa, &y, &dy, &mut dx, row).unwrap();
                }
                dx
            });
            assert_eq!(
                bits(&dx16),
                bits(&narrow::<bf16>(&dx)),
                "{what}: rounded once"
            );
            for r in 0..4 {
                let (y, dy, dx) = (
                    &y[r * row..][..row],
                    &dy[r * row..][..row],
                    &dx[r * row..][..row],
                );
                let (y, dy): (Vec<f64>, Vec<f64>) = (wide(y), wide(dy));
                let dot: f64 = y.iter().zip(&dy).map(|(a, b)| a * b).sum();
                let abs_dot: f64 = y.iter().zip(&dy).map(|(a, b)| (a * b).abs()).sum();
                let sum: f64 = dy.iter().sum();
                let abs_sum: f64 = dy.iter().map(|v| v.abs()).sum();
                for i in 0..row {
                    let (want, tol) = if log {
                        let e = y[i].exp();
                        (dy[i] - e * sum, 2e-6 * (dy[i].abs() + e * abs_sum) + 1e-30)
                    } else {
                        (
                            y[i] * (dy[i] - dot),
                            2e-6 * y[i] * (dy[i].abs() + abs_dot) + 1e-30,
                        )
                    };
                    assert!(
                        close(dx[i] as f64, want, tol),
                        "{what}: [{r}][{i}] {} vs {want}",
                        dx[i]
                    );
                }
            }
        }
    }
}

fn layer_norm_ref(x: &[f64], g: &[f64], b: &[f64], eps: f64) -> (Vec<f64>, f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n;
    let rstd = 1.0 / (var + eps).sqrt();
    let y = x
        .iter()
        .zip(g)
        .zip(b)
        .map(|((x, g), b)| (x - mean) * rstd * g + b)
        .collect();
    (y, mean, rstd)
}

#[test]
fn layer_norm_forward_and_backward_are_within_bounds_of_f64_on_every_isa() {
    let eps = 1e-5;
    for row in ROWS {
        let rows = 6;
        let mut rng = Rng(100 + row as u64);
        let mut x: Vec<f32> = (0..rows * row).map(|_| rng.uniform() * 3.0 + 0.5).collect();
        x[row] = f32::NAN; // row 1 is NaN throughout
        x[2 * row..3 * row]
            .iter_mut()
            .for_each(|v| *v = f32::from_bits(3)); // subnormal row
        let gamma: Vec<f32> = (0..row).map(|_| rng.uniform() + 1.0).collect();
        let beta: Vec<f32> = (0..row).map(|_| rng.uniform()).collect();
        let dy: Vec<f32> = (0..rows * row).map(|_| rng.uniform()).collect();
        for with_beta in [true, false] {
            let b = with_beta.then_some(beta.as_slice());
            let what = format!("layer norm, rows of {row}, beta {with_beta}");
            let xb: Vec<bf16> = narrow(&x);
            let run = |isa: Isa| {
                let mut y = vec![0f32; x.len()];
                let stats = nn::layer_norm(isa, &xb, &gamma, b, eps, &mut y, row).unwrap();
                (y, stats)
            };
            let y = same_bits_everywhere(&what, |isa| run(isa).0);
            let stats = run(Isa::PORTABLE).1;
            let zeros = vec![0f32; row];
            let bref = b.unwrap_or(&zeros);
            let (gw, bw) = (wide(&gamma), wide(bref));
            for r in 0..rows {
                let xr = wide(&xb[r * row..][..row]);
                let (want, mean, rstd) = layer_norm_ref(&xr, &gw, &bw, eps as f64);
                if r != 1 {
                    assert!(
                        (stats.mean[r] as f64 - mean).abs() <= 1e-6 * (1.0 + mean.abs()),
                        "{what}: mean {r}"
                    );
                    assert!(
                        (stats.rstd[r] as f64 - rstd).abs() <= 2e-6 * rstd,
                        "{what}: rstd {r}"
                    );
                }
                for i in 0..row {
                    let xhat = (xr[i] - mean) * rstd;
                    let tol = 4e-6 * (gw[i].abs() * (1.0 + xhat.abs()) + bw[i].abs());
                    let got = y[r * row + i] as f64;
                    assert!(
                        close(got, want[i], tol),
                        "{what}: [{r}][{i}] {got} vs {}",
                        want[i]
                    );
                }
            }
            // Backward, on the rows without NaN.
            let clean: Vec<bf16> = xb
                .iter()
                .enumerate()
                .map(|(i, v)| if i / row == 1 { bf16::ONE } else { *v })
                .collect();
            let mut y = vec![0f32; x.len()];
            let stats = nn::layer_norm(Isa::PORTABLE, &clean, &gamma, b, eps, &mut y, row).unwrap();
            let back = |isa: Isa| {
                let mut dx = vec![0f32; x.len()];
                let sums = nn::layer_norm_backward(isa, &clean, &dy, &gamma, &stats, &mut dx, row)
                    .unwrap();
                (dx, sums)
            };
            let dx = same_bits_everywhere(&what, |isa| back(isa).0);
            let sums = same_bits_everywhere(&what, |isa| {
                let (g, b) = back(isa).1;
                [g, b].concat()
            });
            let (mut dgamma, mut dbeta) = (vec![0f64; row], vec![0f64; row]);
            let (mut gabs, mut babs) = (vec![0f64; row], vec![0f64; row]);
            for r in 0..rows {
                let xr = wide(&clean[r * row..][..row]);
                let g = wide(&dy[r * row..][..row]);
                let (_, mean, rstd) = layer_norm_ref(&xr, &gw, &bw, eps as f64);
                let xhat: Vec<f64> = xr.iter().map(|v| (v - mean) * rstd).collect();
                let gg: Vec<f64> = g.iter().zip(&gw).map(|(a, b)| a * b).collect();
                let n = row as f64;
                let a = gg.iter().sum::<f64>() / n;
                let bb = gg.iter().zip(&xhat).map(|(a, b)| a * b).sum::<f64>() / n;
                let scale: f64 = gg.iter().map(|v| v.abs()).sum::<f64>() / n;
                for i in 0..row {
                    let want = rstd * (gg[i] - a - xhat[i] * bb);
                    let tol = 8e-6 * rstd * (gg[i].abs() + scale * (1.0 + xhat[i].abs())) + 1e-12;
                    let got = dx[r * row + i] as f64;
                    assert!(
                        close(got, want, tol),
                        "{what}: dx[{r}][{i}] {got} vs {want}"
                    );
                    dgamma[i] += g[i] * xhat[i];
                    dbeta[i] += g[i];
                    gabs[i] += (g[i] * xhat[i]).abs();
                    babs[i] += g[i].abs();
                }
            }
            for i in 0..row {
                assert!(
                    close(sums[i] as f64, dgamma[i], 4e-6 * (gabs[i] + 1.0)),
                    "{what}: dgamma[{i}]"
                );
                assert!(
                    close(sums[row + i] as f64, dbeta[i], 4e-6 * (babs[i] + 1.0)),
                    "{what}: dbeta[{i}]"
                );
            }
        }
    }
}

#[test]
fn gelu_and_its_gradient_are_within_bounds_of_f64_on_every_isa() {
    for n in [1, 15, 16, 17, 1000, 70_001] {
        let x = awkward(n, 6.0, n as u64);
        let g = awkward(n, 1.0, n as u64 + 7);
        let what = format!("gelu, {n} values");
        let y = same_bits_everywhere(&what, |isa| {
            let mut y = vec![0f32; n];
            nn::gelu(isa, &x, &mut y).unwrap();
            y
        });
        let dx = same_bits_everywhere(&what, |isa| {
            let mut dx = vec![0f32; n];
            nn::gelu_backward(isa, &x, &g, &mut dx).unwrap();
            dx
        });
        let xb: Vec<bf16> = narrow(&x);
        let yb = same_bits_everywhere(&what, |isa| {
            let mut y = vec![bf16::ZERO; n];
            nn::gelu(isa, &xb, &mut y).unwrap();
            y
        });
        let mut y32 = vec![0f32; n];
        nn::gelu(Isa::PORTABLE, &xb, &mut y32).unwrap();
        assert_eq!(
            bits(&yb),
            bits(&narrow::<bf16>(&y32)),
            "{what}: rounded once"
        );
        for i in 0..n {
            let (xi, gi) = (x[i] as f64, g[i] as f64);
            let cdf = 0.5 * (1.0 + libm::erf(xi / 2f64.sqrt()));
            let pdf = (-0.5 * xi * xi).exp() / (2.0 * core::f64::consts::PI).sqrt();
            let want = xi * cdf;
            let grad = gi * (cdf + xi * pdf);
            let tol = 5e-7 * xi.abs().max(1e-30) + 1e-37;
            if xi.is_finite() && xi.abs() < 1e30 {
                assert!(
                    close(y[i] as f64, want, tol),
                    "{what}: gelu({xi}) = {} vs {want}",
                    y[i]
                );
                let gtol = 1e-6 * gi.abs() * xi.abs().max(1.0) + 1e-37;
                assert!(
                    close(dx[i] as f64, grad, gtol),
                    "{what}: gelu'({xi}) * {gi} = {} vs {grad}",
                    dx[i]
                );
            } else if xi.is_nan() {
                assert!(y[i].is_nan() && dx[i].is_nan());
            }
        }
        if n > 74 {
            // awkward() puts +inf at 37 and -inf at 74. As in Flex's formula,
            // gelu(-inf) = -inf * 0 and gelu'(inf) = inf * 0 are NaN.
            assert_eq!(y[37], f32::INFINITY, "gelu(inf)");
            assert!(y[74].is_nan() && dx[37].is_nan(), "gelu(-inf), gelu'(inf)");
        }
    }
}

#[test]
fn arithmetic_is_the_f32_operation_rounded_once() {
    let n = 70_003;
    let a = awkward(n, 100.0, 1);
    let b = awkward(n, 3.0, 2);
    let ops = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];
    let f = |op: BinaryOp, a: f32, b: f32| match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
    };
    fn check<T: Bits>(op: BinaryOp, a: &[f32], b: &[f32], f: impl Fn(BinaryOp, f32, f32) -> f32) {
        let (a, b): (Vec<T>, Vec<T>) = (narrow(a), narrow(b));
        let want: Vec<T> = a
            .iter()
            .zip(&b)
            .map(|(x, y)| T::from_f32(f(op, x.to_f32(), y.to_f32())))
            .collect();
        let got = same_bits_everywhere(&format!("{op:?} {:?}", T::FORMAT), |isa| {
            let mut out = vec![T::default(); a.len()];
            nn::binary(isa, op, &a, &b, &mut out).unwrap();
            out
        });
        assert_eq!(bits(&got), bits(&want), "{op:?} {:?}", T::FORMAT);
        let s = 1.1f32;
        let want: Vec<T> = a
            .iter()
            .map(|x| T::from_f32(f(op, x.to_f32(), s)))
            .collect();
        let got = same_bits_everywhere(&format!("{op:?} scalar {:?}", T::FORMAT), |isa| {
            let mut out = vec![T::default(); a.len()];
            nn::scalar(isa, op, &a, s, &mut out).unwrap();
            out
        });
        assert_eq!(bits(&got), bits(&want), "{op:?} scalar {:?}", T::FORMAT);
    }
    for op in ops {
        check::<f32>(op, &a, &b, f);
        check::<bf16>(op, &a, &b, f);
        check::<f16>(op, &a, &b, f);
    }
}

#[test]
fn a_scaled_product_of_two_is_the_sum_of_the_product_with_itself() {
    // `(g * x) * 2` is the gradient of `x * x` as Burn's product rule sums it: `g * x` from
    // each operand, added. Scaling by two is exact, so the bits agree in every format; any
    // other scale is the f32 product rounded, then scaled.
    fn check<T: Bits>(n: usize) {
        let a: Vec<T> = narrow(&awkward(n, 100.0, 5));
        let b: Vec<T> = narrow(&awkward(n, 3.0, 6));
        let mut product = vec![T::default(); n];
        nn::binary(Isa::PORTABLE, BinaryOp::Mul, &a, &b, &mut product).unwrap();
        let mut want = vec![T::default(); n];
        nn::binary(Isa::PORTABLE, BinaryOp::Add, &product, &product, &mut want).unwrap();
        let what = format!("{n} {:?}", T::FORMAT);
        let got = same_bits_everywhere(&what, |isa| {
            let mut out = vec![T::default(); n];
            nn::scaled_product(isa, &a, &b, 2.0, &mut out).unwrap();
            out
        });
        assert_eq!(bits(&got), bits(&want), "{what}");
    }
    for n in [1, 17, 512, 1000, 40_000] {
        check::<f32>(n);
        check::<bf16>(n);
        check::<f16>(n);
    }
    let (a, b) = (awkward(3000, 10.0, 7), awkward(3000, 10.0, 8));
    let want: Vec<f32> = a.iter().zip(&b).map(|(a, b)| (a * b) * 0.3).collect();
    let got = same_bits_everywhere("scale 0.3", |isa| {
        let mut out = vec![0f32; 3000];
        nn::scaled_product(isa, &a, &b, 0.3, &mut out).unwrap();
        out
    });
    assert_eq!(bits(&got), bits(&want));
    let mut out = vec![0f32; 3];
    for (la, lb) in [(3, 2), (2, 3)] {
        assert!(matches!(
            nn::scaled_product(Isa::detect(), &a[..la], &b[..lb], 2.0, &mut out),
            Err(NnError::Length { .. })
        ));
    }
}

#[test]
fn a_rounded_sum_is_the_cast_then_the_sum() {
    // A cast's gradient added to the one its 16-bit input already has: `a` converted to
    // `b`'s format, then added there. Values near the halfway points of the narrow format
    // (where rounding once or twice differ), every awkward value, block (512) and task
    // (16,384) boundaries; the output in `b`'s format and in f32.
    fn check<A: Bits, B: Bits, O: Bits>(n: usize) {
        let mut a: Vec<f32> = awkward(n, 300.0, 9);
        // 1 + 2^-9 + 2^-20: rounds up to bf16 alone, down to 1 in `1 + x` unrounded.
        a.iter_mut()
            .step_by(7)
            .for_each(|v| *v = 1.0 + 1.0 / 512.0 + 1.0 / 1_048_576.0);
        let a: Vec<A> = narrow(&a);
        let b: Vec<B> = narrow(&awkward(n, 30.0, 10));
        let mut rounded = vec![B::default(); n];
        cast::convert(Isa::PORTABLE, &a, &mut rounded).unwrap();
        let mut want = vec![O::default(); n];
        nn::binary(Isa::PORTABLE, BinaryOp::Add, &rounded, &b, &mut want).unwrap();
        let what = format!("{n} {:?} + {:?} -> {:?}", A::FORMAT, B::FORMAT, O::FORMAT);
        let got = same_bits_everywhere(&what, |isa| {
            let mut out = vec![O::default(); n];
            nn::rounded_sum(isa, &a, &b, &mut out).unwrap();
            out
        });
        assert_eq!(bits(&got), bits(&want), "{what}");
    }
    for n in [1, 17, 512, 1000, 40_000] {
        check::<f32, bf16, bf16>(n);
        check::<f32, f16, f16>(n);
        check::<f32, bf16, f32>(n);
        check::<bf16, f16, f16>(n);
        check::<f32, f32, f32>(n);
    }
    let (a, b) = (awkward(3, 1.0, 11), narrow::<bf16>(&awkward(3, 1.0, 12)));
    let mut out = [bf16::ZERO; 3];
    for (la, lb, lo) in [(3, 2, 3), (2, 3, 3), (3, 3, 2)] {
        assert!(matches!(
            nn::rounded_sum(Isa::detect(), &a[..la], &b[..lb], &mut out[..lo]),
            Err(NnError::Length { .. })
        ));
    }
}

#[test]
fn a_repeated_operand_gives_the_bits_of_its_expansion() {
    // `[outer, kept, inner]` against `[kept]`: each side, each op, each format, with block
    // boundaries (512 values) and task boundaries (16,384) falling inside runs, an inner of
    // one (the repeated values consecutive) and a kept of one (a scalar).
    let ops = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];
    let sides = [nn::Broadcast::Left, nn::Broadcast::Right];
    fn check<T: Bits>(op: BinaryOp, side: nn::Broadcast, blocks: [usize; 3]) {
        let [outer, kept, inner] = blocks;
        let n = outer * kept * inner;
        let a: Vec<T> = narrow(&awkward(n, 100.0, 3));
        let b: Vec<T> = narrow(&awkward(kept, 3.0, 4));
        let expanded: Vec<T> = (0..n).map(|i| b[(i / inner) % kept]).collect();
        let mut want = vec![T::default(); n];
        match side {
            nn::Broadcast::Right => nn::binary(Isa::PORTABLE, op, &a, &expanded, &mut want),
            nn::Broadcast::Left => nn::binary(Isa::PORTABLE, op, &expanded, &a, &mut want),
        }
        .unwrap();
        let what = format!("{op:?} {side:?} {blocks:?} {:?}", T::FORMAT);
        let got = same_bits_everywhere(&what, |isa| {
            let mut out = vec![T::default(); n];
            nn::binary_broadcast(isa, op, &a, &b, blocks, side, &mut out).unwrap();
            out
        });
        assert_eq!(bits(&got), bits(&want), "{what}");
    }
    for blocks in [
        [3, 5, 1000],
        [7, 33, 1],
        [2, 1, 40_000],
        [1, 700, 37],
        [5, 3, 2],
    ] {
        for op in ops {
            for side in sides {
                check::<f32>(op, side, blocks);
                check::<bf16>(op, side, blocks);
                check::<f16>(op, side, blocks);
            }
        }
    }
    let (x, mut y) = (vec![0f32; 12], vec![0f32; 12]);
    let right = nn::Broadcast::Right;
    for (b, blocks, out) in [(2, [2, 3, 2], 12), (3, [2, 3, 3], 12), (3, [2, 3, 2], 11)] {
        assert!(
            matches!(
                nn::binary_broadcast(
                    Isa::detect(),
                    BinaryOp::Add,
                    &x,
                    &x[..b],
                    blocks,
                    right,
                    &mut y[..out]
                ),
                Err(NnError::Length { .. })
            ),
            "{b} values against {blocks:?} into {out}"
        );
    }
    let huge = [usize::MAX, 2, 2];
    assert!(matches!(
        nn::binary_broadcast(
            Isa::detect(),
            BinaryOp::Add,
            &x,
            &x[..2],
            huge,
            right,
            &mut y
        ),
        Err(NnError::Length { .. })
    ));
}

#[test]
fn scaled_runs_and_their_dots_are_the_two_passes() {
    // `scaled_and_dots` against the two passes it replaces: `binary_broadcast` (the full
    // operand's gradient) and `dot_widened` over each run (what the repeated operand's
    // gradient sums), bit for bit on every instruction set; runs longer than a block (512),
    // tasks (16,384 values) ending inside the kept places, an inner of one, NaN and inf.
    fn check<S: Bits, R: Bits>(op: BinaryOp, blocks: [usize; 3]) {
        let [outer, kept, inner] = blocks;
        let n = outer * kept * inner;
        let g: Vec<S> = narrow(&awkward(n, 10.0, 13));
        let x: Vec<S> = narrow(&awkward(n, 3.0, 14));
        let s: Vec<R> = narrow(&awkward(kept, 2.0, 15));
        let mut want = vec![S::default(); n];
        let right = nn::Broadcast::Right;
        nn::binary_broadcast(Isa::PORTABLE, op, &g, &s, blocks, right, &mut want).unwrap();
        let want_dots: Vec<f32> = (0..outer * kept)
            .map(|r| {
                let run = r * inner..(r + 1) * inner;
                cast::dot_widened(Isa::PORTABLE, &g[run.clone()], &x[run]).unwrap()
            })
            .collect();
        let what = format!("{op:?} {blocks:?} {:?} by {:?}", S::FORMAT, R::FORMAT);
        let dots_everywhere = std::cell::RefCell::new(Vec::new());
        let got = same_bits_everywhere(&what, |isa| {
            let (mut out, mut dots) = (vec![S::default(); n], vec![f32::NAN; outer * kept]);
            nn::scaled_and_dots(isa, op, &g, &x, &s, blocks, &mut out, &mut dots).unwrap();
            dots_everywhere.borrow_mut().push(dots);
            out
        });
        assert_eq!(bits(&got), bits(&want), "{what}");
        for dots in dots_everywhere.into_inner() {
            assert_eq!(bits(&dots), bits(&want_dots), "{what}: dots");
        }
    }
    for blocks in [
        [3, 5, 1000],
        [7, 33, 1],
        [2, 1, 40_000],
        [1, 700, 37],
        [4, 64, 257],
    ] {
        for op in [BinaryOp::Mul, BinaryOp::Div] {
            check::<f32, f32>(op, blocks);
            check::<bf16, bf16>(op, blocks);
            check::<f16, f32>(op, blocks);
        }
    }
    let (x, mut y, mut d) = (vec![0f32; 12], vec![0f32; 12], vec![0f32; 6]);
    let mul = BinaryOp::Mul;
    for (len, s, out, dots) in [
        (11, 3, 12, 6),
        (12, 2, 12, 6),
        (12, 3, 11, 6),
        (12, 3, 12, 5),
    ] {
        assert!(
            matches!(
                nn::scaled_and_dots(
                    Isa::detect(),
                    mul,
                    &x[..len],
                    &x,
                    &x[..s],
                    [2, 3, 2],
                    &mut y[..out],
                    &mut d[..dots]
                ),
                Err(NnError::Length { .. })
            ),
            "{len} {s} {out} {dots}"
        );
    }
    let huge = [usize::MAX, 3, 2];
    assert!(matches!(
        nn::scaled_and_dots(Isa::detect(), mul, &x, &x, &x[..3], huge, &mut y, &mut d),
        Err(NnError::Length { .. })
    ));
}

#[test]
fn dropout_masks_are_bernoulli_and_repeatable() {
    let n = 1 << 20;
    for p in [0.0, 0.1, 0.5, 0.9, 1.0] {
        let mask = same_bits_everywhere(&format!("bernoulli {p}"), |isa| {
            let mut m = vec![bf16::ZERO; n];
            nn::bernoulli(isa, [7, 11], p, &mut m);
            m
        });
        assert!(
            mask.iter().all(|v| *v == bf16::ZERO || *v == bf16::ONE),
            "p {p}: 0s and 1s"
        );
        let ones = mask.iter().filter(|v| **v == bf16::ONE).count() as f64;
        let sigma = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (ones - p * n as f64).abs() <= 5.0 * sigma,
            "p {p}: {ones} ones of {n}"
        );
        // f32 and bf16 masks of one key are the same draws.
        let mut m32 = vec![0f32; n];
        nn::bernoulli(Isa::detect(), [7, 11], p, &mut m32);
        assert_eq!(
            bits(&mask),
            bits(&narrow::<bf16>(&m32)),
            "p {p}: formats agree"
        );
    }
    // Another key, other draws; successive values not correlated.
    let (mut a, mut b) = (vec![0f32; n], vec![0f32; n]);
    nn::bernoulli(Isa::detect(), [7, 11], 0.5, &mut a);
    nn::bernoulli(Isa::detect(), [7, 12], 0.5, &mut b);
    let same = a.iter().zip(&b).filter(|(x, y)| x == y).count() as f64;
    assert!(
        (same / n as f64 - 0.5).abs() < 0.005,
        "keys: {same} equal of {n}"
    );
    let pairs = a.windows(2).filter(|w| w[0] == 1.0 && w[1] == 1.0).count() as f64;
    assert!(
        (pairs / (n - 1) as f64 - 0.25).abs() < 0.005,
        "neighbours: {pairs}"
    );
    let mut u = vec![0f32; n];
    nn::uniform(Isa::detect(), [3, 4], &mut u);
    assert!(u.iter().all(|v| (0.0..1.0).contains(v)));
    let mean = u.iter().map(|v| *v as f64).sum::<f64>() / n as f64;
    assert!((mean - 0.5).abs() < 0.002, "uniform mean {mean}");
}

#[test]
fn strided_views_are_copied_exactly() {
    let shape = [3usize, 5, 4, 7];
    let n: usize = shape.iter().product();
    let src: Vec<u32> = (0..n as u32).collect();
    let contiguous = [140isize, 28, 7, 1];
    // Every permutation of the four dimensions, and a flip.
    let perms = [
        [0, 1, 2, 3],
        [0, 2, 1, 3],
        [1, 0, 3, 2],
        [3, 2, 1, 0],
        [2, 3, 0, 1],
    ];
    for perm in perms {
        let pshape: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
        let pstrides: Vec<isize> = perm.iter().map(|&d| contiguous[d]).collect();
        let mut dst = vec![0u32; n];
        layout::copy_strided(&src, 0, &pshape, &pstrides, &mut dst).unwrap();
        let mut want = Vec::with_capacity(n);
        for a in 0..pshape[0] {
            for b in 0..pshape[1] {
                for c in 0..pshape[2] {
                    for d in 0..pshape[3] {
                        let at = a as isize * pstrides[0]
                            + b as isize * pstrides[1]
                            + c as isize * pstrides[2]
                            + d as isize * pstrides[3];
                        want.push(src[at as usize]);
                    }
                }
            }
        }
        assert_eq!(dst, want, "permutation {perm:?}");
    }
    // A flipped last dimension: offset at its end, stride -1.
    let mut dst = vec![0u32; 7];
    layout::copy_strided(&src, 6, &[7], &[-1], &mut dst).unwrap();
    assert_eq!(dst, [6, 5, 4, 3, 2, 1, 0]);
    // Out of bounds and wrong sizes are typed errors.
    let mut dst = vec![0u32; 8];
    assert!(matches!(
        layout::copy_strided(&src[..7], 0, &[8], &[1], &mut dst),
        Err(layout::LayoutError::OutOfBounds { .. })
    ));
    assert!(matches!(
        layout::copy_strided(&src, 0, &[7], &[1], &mut dst),
        Err(layout::LayoutError::Shape { .. })
    ));
}

#[test]
fn bad_lengths_are_typed_errors() {
    let (x, mut y) = (vec![0f32; 10], vec![0f32; 9]);
    assert!(matches!(
        nn::softmax(Isa::detect(), &x, &mut y, 5),
        Err(NnError::Length { .. })
    ));
    let mut y = vec![0f32; 10];
    assert!(matches!(
        nn::softmax(Isa::detect(), &x, &mut y, 3),
        Err(NnError::Rows { .. })
    ));
    assert!(matches!(
        nn::softmax(Isa::detect(), &x, &mut y, 0),
        Err(NnError::Rows { .. })
    ));
    assert!(matches!(
        nn::layer_norm(Isa::detect(), &x, &[1.0; 4], None, 1e-5, &mut y, 5),
        Err(NnError::Length { .. })
    ));
    assert!(matches!(
        nn::gelu(Isa::detect(), &x, &mut y[..3]),
        Err(NnError::Length { .. })
    ));
    assert!(matches!(
        nn::binary(Isa::detect(), BinaryOp::Add, &x, &x[..2], &mut y),
        Err(NnError::Length { .. })
    ));
}

/// ReLU and its gradient with one 16-bit format in and out (computed on the bits) against
/// the same values through the f32 path (an f32 output, narrowed back: exact here), on every
/// instruction set, specials included.
fn relu_on_the_bits_matches_the_f32_path<T: Bits>() {
    let n = 70_001;
    let x = narrow::<T>(&awkward(n, 4.0, 5));
    let g = narrow::<T>(&awkward(n, 1.0, 6));
    let y = same_bits_everywhere("relu on bits", |isa| {
        let mut y = vec![T::default(); n];
        nn::relu(isa, &x, &mut y).unwrap();
        y
    });
    let mut wide_y = vec![0f32; n];
    nn::relu(Isa::detect(), &x, &mut wide_y).unwrap();
    let dx = same_bits_everywhere("relu backward on bits", |isa| {
        let mut dx = vec![T::default(); n];
        nn::relu_backward(isa, &y, &g, &mut dx).unwrap();
        dx
    });
    let mut wide_dx = vec![0f32; n];
    nn::relu_backward(Isa::detect(), &y, &g, &mut wide_dx).unwrap();
    let (mut negatives, mut passed, mut nans) = (0, 0, 0);
    for i in 0..n {
        let (yi, want) = (y[i].to_f32(), wide_y[i]);
        if want.is_nan() {
            assert!(yi.is_nan(), "relu({}) = {yi}, not NaN", x[i].to_f32());
            nans += 1;
        } else {
            assert_eq!(yi.to_bits(), want.to_bits(), "relu({})", x[i].to_f32());
        }
        negatives += usize::from(x[i].to_f32() < 0.0);
        let (d, want) = (dx[i].to_f32(), wide_dx[i]);
        if want.is_nan() {
            assert!(d.is_nan(), "relu'({yi}) * NaN = {d}");
        } else {
            assert_eq!(
                d.to_bits(),
                want.to_bits(),
                "relu'({yi}) * {}",
                g[i].to_f32()
            );
        }
        passed += usize::from(yi > 0.0);
    }
    // The inputs reach every case: negatives cleared, positives passed, NaN kept.
    assert!(negatives > n / 4 && passed > n / 4 && nans > 0);
}

#[test]
fn relu_on_bf16_bits_matches_the_f32_path() {
    relu_on_the_bits_matches_the_f32_path::<bf16>();
}

#[test]
fn relu_on_f16_bits_matches_the_f32_path() {
    relu_on_the_bits_matches_the_f32_path::<f16>();
}

#[test]
fn relu_and_its_gradient_are_exact_on_every_isa() {
    let n = 70_001;
    let x = awkward(n, 4.0, 3);
    let g = awkward(n, 1.0, 4);
    let y = same_bits_everywhere("relu", |isa| {
        let mut y = vec![bf16::ZERO; n];
        nn::relu(isa, &narrow::<bf16>(&x), &mut y).unwrap();
        y
    });
    let dx = same_bits_everywhere("relu backward", |isa| {
        let mut dx = vec![0f32; n];
        nn::relu_backward(isa, &y, &g, &mut dx).unwrap();
        dx
    });
    for i in 0..n {
        let xi = bf16::from_f32(x[i]);
        // NaN stays NaN; negatives (and -0) become +0.
        let want = if xi.is_nan() {
            xi
        } else if xi.to_f32() < 0.0 {
            bf16::ZERO
        } else {
            xi
        };
        assert_eq!(y[i].to_bits(), want.to_bits(), "relu({xi})");
        let grad = if y[i].to_f32() > 0.0 { g[i] } else { 0.0 };
        assert_eq!(dx[i].to_bits(), grad.to_bits(), "relu'({xi}) * {}", g[i]);
    }
}
