//! cuBLASLt call plans for every product shape Burn produces, carried out by the CPU
//! reference on the tensors' own buffers and held to Burn's matmul on Flex: contiguous,
//! transposed (either side, both), pitched (a slice of a wider tensor), batched,
//! broadcast (a shared weight, a batch of one), several batch dimensions, attention's
//! `q k^T`, a weight gradient `x^T g`; odd sizes and K not a multiple of 16. A wrong
//! transpose flag, leading dimension or batch stride fails here.

use burn::backend::Flex;
use burn::backend::flex::FlexTensor;
use burn::tensor::{Tensor, TensorPrimitive};
use burn_amp::cublaslt::{
    Epilogue, Fp8Scales, GemmDtype, GemmPlan, PlanError, PlanOptions, View, reference,
};

use super::common::Lcg;

/// A tensor of deterministic values.
fn tensor<const D: usize>(shape: [usize; D], seed: u64) -> Tensor<Flex, D> {
    let n = shape.iter().product();
    let data = burn::tensor::TensorData::new(Lcg::new(seed).vec(n, 1.0), shape);
    Tensor::from_data(data, &Default::default())
}

/// The primitive of a tensor (a view: shape, strides, offset, its buffer).
fn primitive<const D: usize>(t: &Tensor<Flex, D>) -> FlexTensor {
    match t.clone().into_primitive() {
        TensorPrimitive::Float(p) => p,
        _ => unreachable!("a float tensor"),
    }
}

/// The view the plan reads, and the whole buffer behind it.
fn view<const D: usize>(t: &Tensor<Flex, D>) -> (View, Vec<f32>) {
    let p = primitive(t);
    let layout = p.layout();
    let view = View {
        shape: layout.shape().to_vec(),
        strides: layout.strides().to_vec(),
        offset: layout.start_offset(),
        dtype: GemmDtype::F32,
    };
    (view, p.storage::<f32>().to_vec())
}

thread_local! {
    /// Every plan `check` built on this thread: the ordering tests run the plan tests and
    /// take the products they built.
    static BUILT: std::cell::RefCell<Vec<GemmPlan>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Every plan the plan tests build (run again on this thread).
pub(super) fn every_plan() -> Vec<GemmPlan> {
    BUILT.with(|b| b.borrow_mut().clear());
    plans_of_two_dimensional_products_match_burns_matmul();
    plans_of_batched_and_broadcast_products_match_burns_matmul();
    BUILT.with(|b| b.borrow().clone())
}

/// Plans `lhs @ rhs`, carries the plan out on their buffers and compares with Burn's.
fn check<const D: usize>(what: &str, lhs: Tensor<Flex, D>, rhs: Tensor<Flex, D>) -> GemmPlan {
    let ((lv, lb), (rv, rb)) = (view(&lhs), view(&rhs));
    let plan = GemmPlan::new(&lv, &rv, PlanOptions::new(GemmDtype::F32))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let expected = lhs.matmul(rhs);
    assert_eq!(
        plan.out_shape,
        expected.shape().dims::<D>().to_vec(),
        "{what}"
    );
    let expected: Vec<f32> = expected.into_data().to_vec().unwrap();
    let mut got = vec![f32::NAN; plan.out_len()];
    reference::gemm(&plan, (&rb, &lb), None, (1.0, 1.0), &mut got);
    let scale = expected.iter().fold(1f32, |m, v| m.max(v.abs()));
    for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
        assert!(
            (g - e).abs() <= 1e-5 * scale * plan.k as f32,
            "{what}: element {i}: {g} where Burn gives {e} ({plan:?})"
        );
    }
    BUILT.with(|b| b.borrow_mut().push(plan.clone()));
    plan
}

#[test]
fn plans_of_two_dimensional_products_match_burns_matmul() {
    // Odd sizes, K not a multiple of 16.
    let (m, k, n) = (7, 19, 5);
    let plan = check("contiguous", tensor([m, k], 1), tensor([k, n], 2));
    assert!(!plan.a.transposed && !plan.b.transposed);
    assert_eq!((plan.a.ld, plan.b.ld), (n, k));
    let plan = check(
        "lhs transposed",
        tensor([k, m], 3).transpose(),
        tensor([k, n], 4),
    );
    assert!(plan.b.transposed && !plan.a.transposed);
    let plan = check(
        "rhs transposed (x W^T)",
        tensor([m, k], 5),
        tensor([n, k], 6).transpose(),
    );
    assert!(plan.a.transposed && !plan.b.transposed);
    check(
        "both transposed",
        tensor([k, m], 7).transpose(),
        tensor([n, k], 8).transpose(),
    );
    // A slice of a wider tensor: rows pitched by 31 values.
    let wide = tensor([m, 31], 9).slice([0..m, 3..3 + k]);
    let plan = check("pitched lhs", wide, tensor([k, n], 10));
    assert_eq!(plan.b.ld, 31);
    assert_eq!(plan.b.offset, 3);
    let pitched_t = tensor([n + 2, 40], 11).slice([1..n + 1, 0..k]).transpose();
    let plan = check("pitched, transposed rhs", tensor([m, k], 12), pitched_t);
    assert!(plan.a.transposed);
    assert_eq!(plan.a.ld, 40);
    check("one row", tensor([1, k], 13), tensor([k, n], 14));
    check("one column", tensor([m, k], 15), tensor([k, 1], 16));
    check("1 x 1 x 1", tensor([1, 1], 17), tensor([1, 1], 18));
    // A weight gradient: x^T g.
    check(
        "weight gradient x^T g",
        tensor([33, 17], 19).transpose(),
        tensor([33, 9], 20),
    );
}

#[test]
fn plans_of_batched_and_broadcast_products_match_burns_matmul() {
    let (b, m, k, n) = (3, 5, 21, 6);
    let plan = check("batched", tensor([b, m, k], 21), tensor([b, k, n], 22));
    assert_eq!(
        (plan.batch, plan.b.batch_stride, plan.a.batch_stride),
        (3, m * k, k * n)
    );
    let plan = check(
        "shared weight (batch of one broadcast)",
        tensor([b, m, k], 23),
        tensor([1, k, n], 24),
    );
    assert_eq!(plan.a.batch_stride, 0);
    check("batch of one", tensor([1, m, k], 25), tensor([1, k, n], 26));
    let plan = check(
        "two batch dimensions",
        tensor([2, 3, m, k], 27),
        tensor([2, 3, k, n], 28),
    );
    assert_eq!(plan.batch, 6);
    check(
        "broadcast over both batch dimensions",
        tensor([2, 3, m, k], 29),
        tensor([1, 1, k, n], 30),
    );
    // Attention's scores: q k^T over [batch, heads, seq, head_dim].
    let (q, key) = (tensor([2, 4, 9, 16], 31), tensor([2, 4, 9, 16], 32));
    let plan = check("attention q k^T", q, key.swap_dims(2, 3));
    assert!(plan.a.transposed);
    // A batched transposed view: the batch stride is kept under the transpose.
    check(
        "batched, lhs transposed",
        tensor([b, k, m], 33).swap_dims(1, 2),
        tensor([b, k, n], 34),
    );
}

#[test]
fn products_one_call_cannot_read_are_refused_with_the_reason() {
    let f32 = GemmDtype::F32;
    let plan = |l: &View, r: &View| GemmPlan::new(l, r, PlanOptions::new(f32));
    // Batch dimensions with no single stride: one side broadcast in an outer dimension only.
    let (lhs, _) = view(&tensor([2, 3, 4, 5], 40));
    let (rhs, _) = view(&tensor([1, 3, 5, 6], 41));
    assert!(matches!(plan(&lhs, &rhs), Err(PlanError::Batch("rhs"))));
    // No unit stride in the last two dimensions (every other column).
    let (stepped, _) = view(&tensor([4, 10], 42).slice(burn::tensor::s![0..4, 0..10;2]));
    let (rhs, _) = view(&tensor([5, 3], 43));
    assert!(matches!(
        plan(&stepped, &rhs),
        Err(PlanError::Strides("lhs"))
    ));
    // Shapes that do not multiply.
    let (a, _) = view(&tensor([4, 5], 44));
    assert!(matches!(plan(&a, &a), Err(PlanError::Shape(_))));
}

#[test]
fn fp8_plans_need_k_major_operands_scales_and_multiples_of_16() {
    let e4m3 = GemmDtype::E4M3;
    let with = |shape: &[usize], strides: Vec<isize>| View {
        shape: shape.to_vec(),
        strides,
        offset: 0,
        dtype: e4m3,
    };
    let fp8 = PlanOptions {
        fp8: Some(Fp8Scales { fast_accum: true }),
        ..PlanOptions::new(GemmDtype::BF16)
    };
    // x [32, 64] row-major, the weight stored [48, 64] and read transposed: TN.
    let x = with(&[32, 64], vec![64, 1]);
    let w_t = with(&[64, 48], vec![1, 64]);
    let plan = GemmPlan::new(&x, &w_t, fp8).unwrap();
    assert!(plan.a.transposed && !plan.b.transposed);
    // The weight row-major [64, 48]: not K-major.
    let w = with(&[64, 48], vec![48, 1]);
    assert!(matches!(GemmPlan::new(&x, &w, fp8), Err(PlanError::Fp8(_))));
    // K = 40: not a multiple of 16.
    let (x40, w40) = (with(&[32, 40], vec![40, 1]), with(&[40, 48], vec![1, 40]));
    assert!(matches!(
        GemmPlan::new(&x40, &w40, fp8),
        Err(PlanError::Fp8(_))
    ));
    // No scales.
    let unscaled = PlanOptions::new(GemmDtype::BF16);
    assert!(matches!(
        GemmPlan::new(&x, &w_t, unscaled),
        Err(PlanError::Fp8(_))
    ));
    // E5M2 x E5M2 is not a product cuBLASLt runs; f16 operands do not write bf16.
    let e5 = View {
        dtype: GemmDtype::E5M2,
        ..x.clone()
    };
    let e5_t = View {
        dtype: GemmDtype::E5M2,
        ..w_t.clone()
    };
    assert!(matches!(
        GemmPlan::new(&e5, &e5_t, fp8),
        Err(PlanError::Types(_))
    ));
    let h = View::contiguous(&[4, 4], GemmDtype::F16);
    let bf = PlanOptions::new(GemmDtype::BF16);
    assert!(matches!(
        GemmPlan::new(&h, &h, bf),
        Err(PlanError::Types(_))
    ));
}

/// The FP8 plan carried out: operands rounded to E4M3, the scales' inverses applied, the
/// bias epilogue added, the output rounded to bf16: within E4M3's rounding of an f32
/// product with the same bias.
#[test]
fn an_fp8_plan_with_a_bias_runs_like_a_rounded_product() {
    let (m, k, n) = (16, 64, 32);
    let x = tensor([m, k], 50);
    let w = tensor([n, k], 51);
    let bias: Vec<f32> = Lcg::new(52).vec(n, 1.0);
    let (mut xv, xb) = view(&x);
    let (mut wv, wb) = view(&w.clone().transpose());
    xv.dtype = GemmDtype::E4M3;
    wv.dtype = GemmDtype::E4M3;
    let options = PlanOptions {
        epilogue: Epilogue::Bias,
        fp8: Some(Fp8Scales { fast_accum: false }),
        ..PlanOptions::new(GemmDtype::BF16)
    };
    let plan = GemmPlan::new(&xv, &wv, options).unwrap();
    let mut got = vec![0f32; m * n];
    reference::gemm(&plan, (&wb, &xb), Some(&bias), (0.5, 2.0), &mut got);
    let device = Default::default();
    let bias_t = Tensor::<Flex, 1>::from_floats(bias.as_slice(), &device).unsqueeze();
    let magnitude: Vec<f32> = x
        .clone()
        .abs()
        .matmul(w.clone().abs().transpose())
        .into_data()
        .to_vec()
        .unwrap();
    let exact: Vec<f32> = (x.matmul(w.transpose()) + bias_t)
        .into_data()
        .to_vec()
        .unwrap();
    for ((g, e), mag) in got.iter().zip(&exact).zip(&magnitude) {
        // E4M3 keeps 3 mantissa bits: each operand within 2^-4 of itself (2^-10 absolute
        // below its normals), each product within 2 * 2^-4 + 2^-8 of |a||b|; bf16's
        // rounding of the result on top.
        let bound = 0.14 * mag + k as f32 * 2f32.powi(-9) + e.abs() * 2f32.powi(-8);
        assert!((g - e).abs() <= bound, "{g} vs {e} (bound {bound})");
    }
}
