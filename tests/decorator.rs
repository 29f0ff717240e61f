//! The decorator on real backends: the dtype each op class produces (Flex with f16 and bf16,
//! wgpu with f16), gradient dtypes, bit-identity with the bare backend under `float32`,
//! burn-nn modules under every policy, `Autodiff<MixedPrecision<B>>`, and the completeness
//! of the forwarding tables against Burn's op traits.

mod common;

use burn::backend::{Autodiff, Flex, Wgpu};
use burn::module::AutodiffModule;
use burn::nn::attention::{MhaInput, MultiHeadAttentionConfig};
use burn::nn::conv::Conv2dConfig;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{EmbeddingConfig, LayerNormConfig, LinearConfig};
use burn::optim::{GradientsParams, Optimizer, SgdConfig};
use burn::tensor::activation::{gelu, log_sigmoid, log_softmax, relu, sigmoid, softmax, softmin};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::module::{
    attention, conv_transpose1d, conv_transpose2d, conv_transpose3d, conv1d, conv2d, conv3d,
    ctc_loss, embedding, linear,
};
use burn::tensor::ops::{AttentionModuleOptions, ConvOptions, ConvTransposeOptions};
use burn::tensor::{Bool, DType, FloatDType, Int, Tensor, TensorData};
use burn_amp::{MixedPrecision, Policy, with_policy};
use common::{Mlp, bytes, det, teacher_batch, values};

use FloatDType::{BF16, F16, F32};

fn mixed(compute: FloatDType) -> Policy {
    Policy::new(F32, compute, F32).unwrap()
}

#[track_caller]
fn assert_dtype<B: Backend, const D: usize>(t: &Tensor<B, D>, dtype: FloatDType, what: &str) {
    assert_eq!(t.dtype(), DType::from(dtype), "{what}");
}

/// An op under test and its name.
type NamedOp<B> = (&'static str, fn(Tensor<B, 2>) -> Tensor<B, 2>);

/// A parameter and its gradient are both in `dtype`, and the gradient is finite.
#[track_caller]
fn check_grad<B: AutodiffBackend, const D: usize>(
    name: &str,
    param: Tensor<B, D>,
    grads: &B::Gradients,
    dtype: FloatDType,
) {
    assert_dtype(&param, dtype, name);
    let grad = param
        .grad(grads)
        .unwrap_or_else(|| panic!("{name}: no gradient"));
    // Read in f32 under every policy: 16-bit variables' gradients are widened as read.
    assert_dtype(&grad, F32, name);
    assert!(
        values(grad).iter().all(|g| g.is_finite()),
        "{name}: non-finite gradient"
    );
}

/// Compute class: f32 inputs come out in the compute dtype.
fn compute_class<B: Backend>(device: &B::Device, c: FloatDType) {
    with_policy(mixed(c), || {
        let a = det::<B, 2>([4, 6], 1, 1.0, device);
        let b = det::<B, 2>([6, 5], 2, 1.0, device);
        assert_dtype(&a.clone().matmul(b.clone()), c, "matmul");
        let bias = det::<B, 1>([5], 3, 1.0, device);
        assert_dtype(&linear(a.clone(), b.clone(), Some(bias)), c, "linear");

        let x1 = det::<B, 3>([1, 2, 8], 4, 1.0, device);
        let w1 = det::<B, 3>([3, 2, 3], 5, 1.0, device);
        assert_dtype(
            &conv1d(
                x1.clone(),
                w1.clone(),
                None,
                ConvOptions::new([1], [1], [1], 1),
            ),
            c,
            "conv1d",
        );
        let wt1 = det::<B, 3>([2, 3, 3], 6, 1.0, device);
        assert_dtype(
            &conv_transpose1d(
                x1,
                wt1,
                None,
                ConvTransposeOptions::new([1], [0], [0], [1], 1),
            ),
            c,
            "conv_transpose1d",
        );
        let x2 = det::<B, 4>([1, 2, 6, 6], 7, 1.0, device);
        let w2 = det::<B, 4>([3, 2, 3, 3], 8, 1.0, device);
        assert_dtype(
            &conv2d(
                x2.clone(),
                w2,
                None,
                ConvOptions::new([1, 1], [1, 1], [1, 1], 1),
            ),
            c,
            "conv2d",
        );
        let wt2 = det::<B, 4>([2, 3, 3, 3], 9, 1.0, device);
        assert_dtype(
            &conv_transpose2d(
                x2,
                wt2,
                None,
                ConvTransposeOptions::new([1, 1], [0, 0], [0, 0], [1, 1], 1),
            ),
            c,
            "conv_transpose2d",
        );
        let x3 = det::<B, 5>([1, 2, 4, 4, 4], 10, 1.0, device);
        let w3 = det::<B, 5>([3, 2, 3, 3, 3], 11, 1.0, device);
        assert_dtype(
            &conv3d(
                x3.clone(),
                w3,
                None,
                ConvOptions::new([1, 1, 1], [1, 1, 1], [1, 1, 1], 1),
            ),
            c,
            "conv3d",
        );
        let wt3 = det::<B, 5>([2, 3, 3, 3, 3], 12, 1.0, device);
        assert_dtype(
            &conv_transpose3d(
                x3,
                wt3,
                None,
                ConvTransposeOptions::new([1, 1, 1], [0, 0, 0], [0, 0, 0], [1, 1, 1], 1),
            ),
            c,
            "conv_transpose3d",
        );
        let q = det::<B, 4>([1, 2, 4, 8], 13, 1.0, device);
        let out = attention(
            q.clone(),
            q.clone(),
            q,
            None,
            None,
            AttentionModuleOptions::default(),
        );
        assert_dtype(&out, c, "attention");
        let table = det::<B, 2>([10, 4], 14, 1.0, device);
        let ids = Tensor::<B, 2, Int>::from_ints([[1, 2], [3, 9]], device);
        assert_dtype(&embedding(table, ids), c, "embedding");
    });
}

/// Float32 class: inputs in the compute dtype come out in f32.
fn f32_class<B: Backend>(device: &B::Device, c: FloatDType) {
    with_policy(mixed(c), || {
        let x = det::<B, 2>([4, 6], 20, 0.9, device).cast(c);
        let pos = x.clone().abs().add_scalar(0.5);
        let unary: [NamedOp<B>; 11] = [
            ("softmax", |t| softmax(t, 1)),
            ("log_softmax", |t| log_softmax(t, 1)),
            ("softmin", |t| softmin(t, 1)),
            ("log_sigmoid", log_sigmoid),
            ("exp", |t| t.exp()),
            ("tan", |t| t.tan()),
            ("cosh", |t| t.cosh()),
            ("sinh", |t| t.sinh()),
            ("acos", |t| t.acos()),
            ("asin", |t| t.asin()),
            ("recip", |t| t.recip()),
        ];
        for (name, op) in unary {
            assert_dtype(&op(x.clone()), F32, name);
        }
        let positive: [NamedOp<B>; 6] = [
            ("log", |t| t.log()),
            ("log1p", |t| t.log1p()),
            ("powf_scalar", |t| t.powf_scalar(1.5)),
            ("powi_scalar", |t| t.powi_scalar(3)),
            ("powf", |t| t.clone().powf(t)),
            ("sqrt then pow", |t| t.sqrt().powf_scalar(2.0)),
        ];
        for (name, op) in positive {
            assert_dtype(&op(pos.clone()), F32, name);
        }
        let reductions: [NamedOp<B>; 7] = [
            ("sum_dim", |t| t.sum_dim(1)),
            ("mean_dim", |t| t.mean_dim(0)),
            ("prod_dim", |t| t.prod_dim(1)),
            ("cumsum", |t| t.cumsum(1)),
            ("cumprod", |t| t.cumprod(1)),
            ("var", |t| t.var(1)),
            ("powi", |t| t.clone().powi(t.ones_like().mul_scalar(2.0))),
        ];
        for (name, op) in reductions {
            assert_dtype(&op(pos.clone()), F32, name);
        }
        assert_dtype(&x.clone().sum(), F32, "sum");
        assert_dtype(&x.clone().mean(), F32, "mean");
        assert_dtype(&pos.clone().prod(), F32, "prod");

        let ln = LayerNormConfig::new(6).init::<B>(device);
        assert_dtype(&ln.forward(x.clone()), F32, "layer_norm");

        // CTC loss over log-probabilities in the compute dtype: f32 out.
        let log_probs = log_softmax(det::<B, 3>([5, 1, 4], 21, 1.0, device), 2).cast(c);
        let targets = Tensor::<B, 2, Int>::from_ints([[1, 2]], device);
        let lengths_in = Tensor::<B, 1, Int>::from_ints([5], device);
        let lengths_t = Tensor::<B, 1, Int>::from_ints([2], device);
        assert_dtype(
            &ctc_loss(log_probs, targets, lengths_in, lengths_t, 0),
            F32,
            "ctc_loss",
        );

        // Cross-entropy (log_softmax inside) on low-precision logits: an f32 loss.
        let labels = Tensor::<B, 1, Int>::from_ints([0, 1, 2, 3], device);
        let loss = CrossEntropyLossConfig::new()
            .init(device)
            .forward(x, labels);
        assert_dtype(&loss, F32, "cross_entropy");
    });
}

/// Everything else keeps its input dtype; mixed inputs meet in the widest; writes keep the
/// destination's dtype; f64 is never narrowed.
fn other_classes<B: Backend>(device: &B::Device, c: FloatDType) {
    with_policy(mixed(c), || {
        let low = det::<B, 2>([4, 4], 30, 1.0, device).cast(c);
        let full = det::<B, 2>([4, 4], 31, 1.0, device);
        let same: [NamedOp<B>; 10] = [
            ("relu", relu),
            ("gelu", gelu),
            ("sigmoid", sigmoid),
            ("tanh", |t| t.tanh()),
            ("abs", |t| t.abs()),
            ("neg", |t| t.neg()),
            ("transpose", |t| t.transpose()),
            ("max_dim", |t| t.max_dim(1)),
            ("mul_scalar", |t| t.mul_scalar(3.0)),
            ("clamp", |t| t.clamp(-0.5, 0.5)),
        ];
        for (name, op) in same {
            assert_dtype(&op(low.clone()), c, name);
            assert_dtype(&op(full.clone()), F32, name);
        }
        assert_dtype(&(low.clone() + low.clone()), c, "add same");
        assert_dtype(&(low.clone() + full.clone()), F32, "add mixed");
        assert_dtype(&(full.clone() * low.clone()), F32, "mul mixed");
        assert_dtype(
            &Tensor::cat(vec![low.clone(), full.clone()], 0),
            F32,
            "cat mixed",
        );
        let mask: Tensor<B, 2, Bool> = full.clone().greater_elem(0.0);
        assert_dtype(
            &low.clone().mask_where(mask, full.clone()),
            F32,
            "mask_where mixed",
        );
        assert_eq!(
            low.clone().greater(full.clone()).dims(),
            [4, 4],
            "compare mixed"
        );
        let written = full
            .clone()
            .slice_assign([0..2, 0..2], low.clone().slice([0..2, 0..2]));
        assert_dtype(&written, F32, "slice_assign keeps destination");
        let other = if c == F16 { BF16 } else { F16 };
        if B::supports_dtype(device, other.into()) {
            assert_dtype(&(low.clone() + low.clone().cast(other)), F32, "f16 + bf16");
        }
        if B::supports_dtype(device, DType::F64) {
            let wide = full.clone().cast(FloatDType::F64);
            assert_dtype(
                &wide.clone().matmul(wide.clone()),
                FloatDType::F64,
                "f64 matmul untouched",
            );
            assert_dtype(&softmax(wide, 1), FloatDType::F64, "f64 softmax untouched");
        }
    });
}

#[test]
fn op_classes_on_flex_f16_and_bf16() {
    type B = MixedPrecision<Flex>;
    let device = Default::default();
    for c in [F16, BF16] {
        compute_class::<B>(&device, c);
        f32_class::<B>(&device, c);
        other_classes::<B>(&device, c);
    }
}

#[test]
fn op_classes_on_wgpu_f16() {
    type B = MixedPrecision<Wgpu>;
    let device = Default::default();
    compute_class::<B>(&device, F16);
    f32_class::<B>(&device, F16);
    other_classes::<B>(&device, F16);
}

/// Forward and backward of the MLP: activations in the compute dtype, logits' loss in f32,
/// every parameter gradient in its variable's dtype.
fn gradient_dtypes<B: AutodiffBackend>(device: &B::Device, policy: Policy) {
    with_policy(policy, || {
        let model = Mlp::<MixedPrecision<B>>::new(8, 16, 4, device);
        let (x, y) = teacher_batch::<MixedPrecision<B>>(0, 6, 8, 4, device);
        let hidden = model.act.forward(model.fc1.forward(x.clone()));
        assert_dtype(
            &hidden,
            policy.compute_dtype(),
            "activation saved for backward",
        );
        let logits = model.forward(x);
        assert_dtype(&logits, policy.compute_dtype(), "logits");
        let loss = CrossEntropyLossConfig::new()
            .init(device)
            .forward(logits, y);
        assert_dtype(&loss, F32, "loss");
        let grads = loss.backward();
        let v = policy.variable_dtype();
        check_grad("fc1.weight", model.fc1.weight.val(), &grads, v);
        check_grad("fc2.weight", model.fc2.weight.val(), &grads, v);
        check_grad("out.weight", model.out.weight.val(), &grads, v);
        check_grad(
            "out.bias",
            model.out.bias.as_ref().unwrap().val(),
            &grads,
            v,
        );
    });
}

#[test]
fn gradients_come_back_in_f32_and_parameters_stay_in_the_variable_dtype() {
    let flex = Default::default();
    for policy in [
        "float32",
        "float16",
        "bfloat16",
        "mixed_float16",
        "mixed_bfloat16",
    ] {
        gradient_dtypes::<Autodiff<Flex>>(&flex, policy.parse().unwrap());
    }
    let wgpu = Default::default();
    for policy in ["float32", "float16", "mixed_float16"] {
        gradient_dtypes::<Autodiff<Wgpu>>(&wgpu, policy.parse().unwrap());
    }
}

/// Three SGD steps of the MLP on `B` and on `MixedPrecision<B>` under `float32`: every
/// loss, logit and parameter byte is the same.
fn float32_is_bit_identical<B: AutodiffBackend>(device: &B::Device) {
    fn run<A: AutodiffBackend>(device: &A::Device) -> Vec<Vec<u8>> {
        let mut model = Mlp::<A>::new(8, 16, 4, device);
        let mut optim = SgdConfig::new().init::<A, Mlp<A>>();
        let mut out = Vec::new();
        for step in 0..3 {
            let (x, y) = teacher_batch::<A>(step, 6, 8, 4, device);
            let logits = model.forward(x);
            out.push(bytes(logits.clone()));
            let loss = CrossEntropyLossConfig::new()
                .init(device)
                .forward(logits, y);
            out.push(bytes(loss.clone()));
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(0.1, model, grads);
        }
        out.push(bytes(model.fc1.weight.val()));
        out.push(bytes(model.valid().out.weight.val()));
        out
    }
    let bare = run::<B>(device);
    let decorated = with_policy(Policy::float32(), || run::<MixedPrecision<B>>(device));
    assert_eq!(bare.len(), decorated.len());
    for (i, (a, b)) in bare.iter().zip(&decorated).enumerate() {
        assert_eq!(a, b, "output {i} differs");
    }
}

#[test]
fn float32_policy_is_bit_identical_to_the_bare_backend() {
    float32_is_bit_identical::<Autodiff<Flex>>(&Default::default());
    float32_is_bit_identical::<Autodiff<Wgpu>>(&Default::default());
}

/// burn-nn's Linear, Conv2d, LayerNorm, Embedding and MultiHeadAttention, unchanged, under
/// `policy`: forward, backward, and the dtypes the op table promises.
fn nn_modules<B: AutodiffBackend>(device: &B::Device, policy: Policy) {
    type M<B> = MixedPrecision<B>;
    with_policy(policy, || {
        let c = policy.compute_dtype();
        let v = policy.variable_dtype();
        let linear = LinearConfig::new(16, 16).init::<M<B>>(device);
        let conv = Conv2dConfig::new([2, 4], [3, 3]).init::<M<B>>(device);
        let norm = LayerNormConfig::new(16).init::<M<B>>(device);
        let embed = EmbeddingConfig::new(20, 16).init::<M<B>>(device);
        let mha = MultiHeadAttentionConfig::new(16, 4).init::<M<B>>(device);

        let ids = Tensor::<M<B>, 2, Int>::from_data(
            TensorData::new(vec![1i64, 5, 7, 19, 0, 3], [2, 3]),
            device,
        );
        let e = embed.forward(ids);
        assert_dtype(&e, c, "Embedding");
        let l = linear.forward(e);
        assert_dtype(&l, c, "Linear");
        let a = mha.forward(MhaInput::self_attn(l)).context;
        assert_dtype(&a, c, "MultiHeadAttention");
        let n = norm.forward(a);
        assert_dtype(&n, F32, "LayerNorm");
        let img = det::<M<B>, 4>([2, 2, 5, 5], 40, 1.0, device);
        let k = conv.forward(img);
        assert_dtype(&k, c, "Conv2d");

        // Burn's attention op under autodiff (decomposed, softmax in f32).
        let q = det::<M<B>, 4>([1, 2, 3, 8], 41, 1.0, device).require_grad();
        let att = attention(
            q.clone(),
            q.clone(),
            q.clone(),
            None,
            None,
            AttentionModuleOptions::default(),
        );
        assert_dtype(&att, c, "attention under autodiff");

        let loss = n.sum() + k.sum() + att.sum();
        assert_dtype(&loss, F32, "loss");
        let grads = loss.backward();
        check_grad("linear", linear.weight.val(), &grads, v);
        check_grad("conv", conv.weight.val(), &grads, v);
        check_grad("norm", norm.gamma.val(), &grads, v);
        check_grad("embed", embed.weight.val(), &grads, v);
        check_grad("mha.query", mha.query.weight.val(), &grads, v);
        let q_grad = q.grad(&grads).expect("attention input has a gradient");
        assert!(
            values(q_grad).iter().all(|g| g.is_finite()),
            "attention: non-finite gradient"
        );
    });
}

#[test]
fn burn_nn_modules_run_unchanged_under_every_policy() {
    let flex = Default::default();
    for policy in [
        "float32",
        "float16",
        "bfloat16",
        "mixed_float16",
        "mixed_bfloat16",
    ] {
        nn_modules::<Autodiff<Flex>>(&flex, policy.parse().unwrap());
    }
    let wgpu = Default::default();
    for policy in ["float32", "float16", "mixed_float16"] {
        nn_modules::<Autodiff<Wgpu>>(&wgpu, policy.parse().unwrap());
    }
}

#[test]
fn inner_backend_runs_validation_under_the_same_policy() {
    type B = MixedPrecision<Autodiff<Flex>>;
    let device = Default::default();
    with_policy(Policy::mixed_bfloat16(), || {
        let model = Mlp::<B>::new(8, 16, 4, &device);
        let (x, _) = teacher_batch::<B>(0, 4, 8, 4, &device);
        let inner = model.valid(); // Mlp<MixedPrecision<Flex>>
        let logits = inner.forward(x.inner());
        assert_dtype(&logits, BF16, "valid() logits");
        assert_eq!(
            <MixedPrecision<Flex> as Backend>::name(&device),
            "mixed_precision<flex>"
        );
    });
}

/// `Autodiff<MixedPrecision<B>>` (the decorator inside autodiff) trains, but autodiff does
/// not see the casts, so gradients come back in the compute dtype, not the variable dtype.
/// The README documents this; `MixedPrecision<Autodiff<B>>` is the supported order.
#[test]
fn autodiff_outside_the_decorator_trains_with_gradients_in_compute_dtype() {
    type A = Autodiff<MixedPrecision<Flex>>;
    let device = Default::default();
    with_policy(Policy::mixed_float16(), || {
        let mut model = Mlp::<A>::new(8, 16, 4, &device);
        let mut optim = SgdConfig::new().init::<A, Mlp<A>>();
        let loss_of = |model: &Mlp<A>| {
            let (x, y) = teacher_batch::<A>(0, 32, 8, 4, &device);
            CrossEntropyLossConfig::new()
                .init(&device)
                .forward(model.forward(x), y)
        };
        let first = loss_of(&model);
        let grads = first.backward();
        let grad = model.fc1.weight.grad(&grads).unwrap();
        assert_dtype(
            &grad,
            F16,
            "gradient of an f32 variable under Autodiff<MixedPrecision<_>>",
        );
        let first = values(first)[0];
        for _ in 0..20 {
            let loss = loss_of(&model);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(0.1, model, grads);
        }
        assert_dtype(
            &model.fc1.weight.val(),
            F32,
            "parameters stay f32 after updates",
        );
        let last = values(loss_of(&model))[0];
        assert!(last < 0.8 * first, "loss {first} -> {last}");
    });
}

/// Every method of Burn's seven op traits, as `(trait, method)`, read from the sources of
/// the burn-backend version in Cargo.lock.
fn burn_op_methods() -> Vec<(&'static str, String)> {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock")).unwrap();
    let version = lock
        .split("[[package]]")
        .find(|p| p.contains("name = \"burn-backend\""))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .map(|v| v.trim_end_matches('"').to_string())
        .expect("burn-backend in Cargo.lock");
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cargo")
        });
    let ops_dir = std::fs::read_dir(cargo_home.join("registry/src"))
        .expect("the cargo registry holds Burn's sources")
        .map(|e| {
            e.unwrap()
                .path()
                .join(format!("burn-backend-{version}/src/backend/ops"))
        })
        .find(|p| p.is_dir())
        .expect("burn-backend's sources in the cargo registry");
    let traits = [
        ("tensor.rs", "FloatTensorOps"),
        ("int_tensor.rs", "IntTensorOps"),
        ("bool_tensor.rs", "BoolTensorOps"),
        ("modules/base.rs", "ModuleOps"),
        ("activation.rs", "ActivationOps"),
        ("qtensor.rs", "QTensorOps"),
        ("transaction.rs", "TransactionOps"),
    ];
    let mut methods = Vec::new();
    for (file, name) in traits {
        let src = std::fs::read_to_string(ops_dir.join(file)).unwrap();
        let start = src.find(&format!("pub trait {name}")).unwrap();
        let body = &src[start..];
        let body = &body[..body.find("\n}\n").unwrap()];
        for line in body.lines() {
            let Some(rest) = line
                .strip_prefix("    fn ")
                .or_else(|| line.strip_prefix("    async fn "))
            else {
                continue;
            };
            let method: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            methods.push((name, method));
        }
    }
    assert!(methods.len() > 400, "parsed only {} methods", methods.len());
    methods
}

/// Every method of Burn's seven op traits is written in `src/backend/ops/` (forwarded or
/// intercepted), so a fast path of the inner backend is never replaced by Burn's default.
#[test]
fn forwarding_tables_cover_every_op_of_burns_traits() {
    let ours: String = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/backend/ops"))
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let missing: Vec<String> = burn_op_methods()
        .into_iter()
        .filter(|(_, method)| !ours.contains(&format!("fn {method}(")))
        .map(|(name, method)| format!("{name}::{method}"))
        .collect();
    assert!(missing.is_empty(), "not forwarded: {missing:?}");
}

/// The cost report's class table has one row for every op of Burn's traits, and no other.
#[test]
fn every_op_of_burns_traits_has_one_row_in_the_class_table() {
    let table = burn_amp::op_classes();
    let methods = burn_op_methods();
    let missing: Vec<String> = methods
        .iter()
        .filter(|(_, m)| !table.iter().any(|(name, _)| name == m))
        .map(|(t, m)| format!("{t}::{m}"))
        .collect();
    assert!(missing.is_empty(), "ops without a row: {missing:?}");
    let stray: Vec<&str> = table
        .iter()
        .map(|(name, _)| *name)
        .filter(|name| !methods.iter().any(|(_, m)| m == name))
        .collect();
    assert!(stray.is_empty(), "rows of no Burn op: {stray:?}");
    let twice: Vec<&str> = table
        .windows(2)
        .filter(|w| w[0].0 == w[1].0)
        .map(|w| w[0].0)
        .collect();
    assert!(twice.is_empty(), "ops with two rows: {twice:?}");
}

/// What the cost report counts in a real step is what the class table says of each op:
/// every op it counted has the class of its row.
#[test]
fn the_cost_report_counts_each_op_in_the_class_of_its_row() {
    use burn_amp::cost::{self, Counted};
    let device = Default::default();
    let table = burn_amp::op_classes();
    for name in ["mixed_bfloat16", "mixed_float16", "float16"] {
        let policy: Policy = name.parse().unwrap();
        let (_, cost) = cost::record(|| nn_modules::<Autodiff<Flex>>(&device, policy));
        let mut seen = Vec::new();
        for (class, op, _, _) in cost.ops() {
            let row = table.iter().find(|(n, _)| *n == op).map(|(_, how)| *how);
            assert_eq!(row, Some(Counted::Op(class)), "{op} under {name}");
            seen.push(op);
        }
        for op in [
            "linear",
            "conv2d",
            "embedding",
            "float_matmul",
            "softmax",
            "layer_norm",
        ] {
            assert!(
                seen.contains(&op),
                "{op} not counted under {name}: {seen:?}"
            );
        }
    }
}

#[test]
fn a_synced_profile_syncs_around_every_op_and_not_inside_its_own_sync() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use burn_amp::cost::{profile, profile_synced};

    type B = MixedPrecision<Flex>;
    let device = Default::default();
    let x = Tensor::<B, 2>::ones([4, 4], &device);
    let syncs = Arc::new(AtomicUsize::new(0));
    let counted = syncs.clone();
    // A sync that runs an op of the decorator itself: it must not be synced again.
    let sync = move || {
        counted.fetch_add(1, Ordering::Relaxed);
        let _ = Tensor::<B, 1>::ones([1], &Default::default()).exp();
    };
    let (_, synced) = profile_synced(sync, || x.clone().matmul(x).exp().sum());
    // The sync's own ops (`float_ones`, `float_exp`) are recorded too; these are not its.
    let calls = |op: &str| {
        synced
            .entries()
            .filter(|e| e.op == op)
            .map(|e| e.calls)
            .sum::<u64>()
    };
    assert_eq!(
        (calls("float_matmul"), calls("float_sum")),
        (1, 1),
        "{synced}"
    );
    // Once before the profile, before and after each of the three ops, once at its end;
    // none around the ops a sync runs.
    assert_eq!(syncs.load(Ordering::Relaxed), 8, "{synced}");
    // Unsynced, the same work calls nothing.
    let before = syncs.load(Ordering::Relaxed);
    let _ = profile(|| Tensor::<B, 2>::ones([4, 4], &device).exp());
    assert_eq!(syncs.load(Ordering::Relaxed), before);
}
