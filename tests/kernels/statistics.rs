//! A batch norm's statistics on burn-amp's kernels under the mixed policies: the square
//! (`powi` of 2) and the mean over a dimension of f32 tensors, and the gradients of a
//! 16-bit activation read by several f32 ops, summed in its dtype. Each against bare
//! `Autodiff<Flex>` on the same values, bit for bit: the same IEEE operations, fewer passes.

use burn::backend::{Autodiff, Flex};
use burn::tensor::{FloatDType, Tensor, TensorData};
use burn_amp::{Policy, cost, with_policy};

use crate::common::{Lcg, values};
use crate::nn::{Ad, tensor};

type Bare = Autodiff<Flex>;

const MIXED: [&str; 2] = ["mixed_bfloat16", "mixed_float16"];

fn bits(v: Vec<f32>) -> Vec<u32> {
    v.into_iter().map(f32::to_bits).collect()
}

/// The bits of `f(x)` and of `x`'s gradient of `sum(f(x) * w)`, `x` of `dims` in `dtype`,
/// on `MixedPrecision<Autodiff<Flex>>` under `policy` (with its cost profile) and on bare
/// `Autodiff<Flex>`, where `bare` writes the casts the policy inserts.
#[allow(clippy::type_complexity)]
pub(crate) fn both<const D: usize, const E: usize>(
    policy: &str,
    (x, dims, dtype): (&[f32], [usize; D], FloatDType),
    w: &[f32],
    ours: impl Fn(Tensor<Ad, D>) -> Tensor<Ad, E>,
    bare: impl Fn(Tensor<Bare, D>) -> Tensor<Bare, E>,
) -> ([Vec<u32>; 2], [Vec<u32>; 2], cost::Profile) {
    let device = Default::default();
    let parsed: Policy = policy.parse().unwrap();
    let (got, profile) = cost::profile(|| {
        with_policy(parsed, || {
            let xt = tensor::<Ad, D>(x, dims, dtype).require_grad();
            let y = ours(xt.clone());
            let wt = Tensor::<Ad, E>::from_data(TensorData::new(w.to_vec(), y.dims()), &device);
            let grads = (y.clone() * wt).sum().backward();
            [bits(values(y)), bits(values(xt.grad(&grads).unwrap()))]
        })
    });
    let xt = tensor::<Bare, D>(x, dims, dtype).require_grad();
    let y = bare(xt.clone());
    let wt = Tensor::<Bare, E>::from_data(TensorData::new(w.to_vec(), y.dims()), &device);
    let grads = (y.clone() * wt).sum().backward();
    let want = [bits(values(y)), bits(values(xt.grad(&grads).unwrap()))];
    (got, want, profile)
}

#[test]
fn squares_and_means_of_f32_tensors_run_on_the_kernels_with_flex_bits() {
    let dims = [3, 4, 5, 6];
    let n: usize = dims.iter().product();
    let x = Lcg::new(31).vec(n, 3.0);
    let w = Lcg::new(32).vec(n, 1.0);
    for policy in MIXED {
        // The square's gradient, `(g * x) * 2`, against the product rule's `g * x + g * x`.
        let what = format!("square ({policy})");
        let (got, want, profile) = both(
            policy,
            (&x, dims, FloatDType::F32),
            &w,
            |x| x.square(),
            |x| x.square(),
        );
        assert_eq!(got, want, "{what}: Flex's bits, values and gradient");
        assert!(
            profile.entries().any(|e| e.op == "square (backward)"),
            "{what}: burn-amp's op ran: {profile}"
        );
        // A 16-bit input is cast to f32 first (the float32 class), then squared there.
        let what = format!("square of bf16 ({policy})");
        let (got, want, _) = both(
            policy,
            (&x, dims, FloatDType::BF16),
            &w,
            |x| x.square(),
            |x| x.cast(FloatDType::F32).square(),
        );
        assert_eq!(got, want, "{what}: Flex's bits, values and gradient");
        for dim in 0..4 {
            let mut kept = dims;
            kept[dim] = 1;
            let m: usize = kept.iter().product();
            let w = Lcg::new(33 + dim as u64).vec(m, 1.0);
            let what = format!("mean over {dim} ({policy})");
            let (got, want, profile) = both(
                policy,
                (&x, dims, FloatDType::F32),
                &w,
                |x| x.mean_dim(dim),
                |x| x.mean_dim(dim),
            );
            assert_eq!(got, want, "{what}: Flex's bits, values and gradient");
            assert!(
                profile.entries().any(|e| e.op == "mean_dim (backward)"),
                "{what}: burn-amp's op ran: {profile}"
            );
            // A 16-bit input: the bits of its cast to f32 and Flex's mean there, with no
            // cast node (its gradient comes back in its dtype from the mean's pass).
            for dtype in [FloatDType::BF16, FloatDType::F16] {
                let what = format!("mean over {dim} of {dtype:?} ({policy})");
                let (got, want, profile) = both(
                    policy,
                    (&x, dims, dtype),
                    &w,
                    |x| x.mean_dim(dim),
                    |x| x.cast(FloatDType::F32).mean_dim(dim),
                );
                assert_eq!(got, want, "{what}: Flex's bits, values and gradient");
                assert!(
                    !profile.entries().any(|e| e.op == "cast (backward)"),
                    "{what}: no cast: {profile}"
                );
            }
        }
    }
}

#[test]
fn a_16_bit_activation_read_by_several_f32_ops_sums_its_gradients_with_flex_bits() {
    // A batch norm's input: cast to f32 for each statistic and for the normalization, each
    // cast's gradient rounded back to the input's dtype, the three added there (the mean's
    // cast is its own: it reads the 16-bit rows and writes their gradient in their dtype).
    // The sums run on burn-amp's kernel, each value added in f32 and rounded once, as Flex
    // adds them.
    let dims = [2, 8, 4, 4];
    let n: usize = dims.iter().product();
    let x = Lcg::new(41).vec(n, 3.0);
    let w = Lcg::new(42).vec(n, 1.0);
    let s = Lcg::new(43).vec(8, 1.0);
    let device = Default::default();
    for policy in MIXED {
        for dtype in [FloatDType::BF16, FloatDType::F16] {
            let what = format!("{dtype:?} ({policy})");
            let stat = |v: &[f32]| TensorData::new(v.to_vec(), [1, 8, 1, 1]);
            let (got, want, profile) = both(
                policy,
                (&x, dims, dtype),
                &w,
                |x| {
                    let s = Tensor::<Ad, 4>::from_data(stat(&s), &device);
                    let mean = x.clone().swap_dims(0, 1).reshape([8, 32]).mean_dim(1);
                    let mean = mean.reshape([1, 8, 1, 1]);
                    (x.clone() - mean.clone()).square() * s.clone() + (x - mean) / (s + 4.0)
                },
                |x| {
                    let s = Tensor::<Bare, 4>::from_data(stat(&s), &device);
                    let wide = |x: Tensor<Bare, 4>| x.cast(FloatDType::F32);
                    let rows = x.clone().swap_dims(0, 1).reshape([8, 32]);
                    let mean = rows.cast(FloatDType::F32).mean_dim(1);
                    let mean = mean.reshape([1, 8, 1, 1]);
                    (wide(x.clone()) - mean.clone()).square() * s.clone()
                        + (wide(x) - mean) / (s + 4.0)
                },
            );
            assert_eq!(got, want, "{what}: Flex's bits, values and gradient");
            // The mean widens its 16-bit input itself: casts only for the two differences.
            let calls = |op: &str| -> u64 {
                let entries = profile.entries().filter(|e| e.op == op);
                entries.map(|e| e.calls).sum()
            };
            assert_eq!(calls("cast (backward)"), 2, "{what}: {profile}");
            assert_eq!(calls("mean_dim (backward)"), 1, "{what}: {profile}");
        }
    }
}
