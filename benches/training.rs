//! A training step of a small MLP on Flex: bare backend, the decorator under float32 (its
//! overhead), and the mixed policies. `cargo bench --bench training`; the full-size
//! figures are in BENCHMARKS.md (`cargo run --release --example bench`).

use burn::backend::{Autodiff, Flex};
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, Int, Tensor};
use burn_amp::{MixedPrecision, Policy, with_policy};
use criterion::{Criterion, criterion_group, criterion_main};

#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    l1: Linear<B>,
    l2: Linear<B>,
    relu: Relu,
}

fn steps<B: AutodiffBackend>(count: usize) {
    let device = Default::default();
    let mut model = Mlp::<B> {
        l1: LinearConfig::new(256, 512).init(&device),
        l2: LinearConfig::new(512, 10).init(&device),
        relu: Relu::new(),
    };
    let mut optim = AdamConfig::new().init::<B, Mlp<B>>();
    let x = Tensor::<B, 2>::random([64, 256], Distribution::Default, &device);
    let y = Tensor::<B, 1, Int>::zeros([64], &device);
    for _ in 0..count {
        let logits = model
            .l2
            .forward(model.relu.forward(model.l1.forward(x.clone())));
        let loss = CrossEntropyLossConfig::new()
            .init(&device)
            .forward(logits, y.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(1e-3, model, grads);
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("training step, MLP 256-512-10, batch 64 (Flex)");
    group.sample_size(20);
    group.bench_function("Autodiff<Flex>", |b| b.iter(|| steps::<Autodiff<Flex>>(1)));
    for policy in ["float32", "mixed_float16", "mixed_bfloat16"] {
        let policy: Policy = policy.parse().unwrap();
        group.bench_function(format!("MixedPrecision, {policy}"), |b| {
            b.iter(|| with_policy(policy, || steps::<MixedPrecision<Autodiff<Flex>>>(1)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
