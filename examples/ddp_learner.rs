//! Burn's distributed data parallel strategy (`ExecutionStrategy::ddp`, burn-train's `ddp`)
//! over `MixedPrecision<Autodiff<Cuda>>`: one thread and one replica per GPU, gradients
//! all-reduced by Autodiff during `backward`, then each replica's clone of the
//! `LossScaleOptimizer` (its own scale and counters) checks the same reduced gradients and
//! takes the same skip decision; FP8 amax histories are MAX-reduced over the replicas
//! through a `DdpCollective` (Burn's all-reduce).
//!
//! ```sh
//! cargo run --release --features cuda,ddp --example ddp_learner   # every CUDA device
//! ```
//!
//! Needs two or more NVIDIA GPUs to mean anything (one GPU trains as a single device). CI
//! only compiles it (`cargo check --features cuda,ddp --example ddp_learner`): no machine
//! here has two GPUs.

use burn::backend::{Autodiff, Cuda};
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::AdamWConfig;
use burn::tensor::backend::distributed::{DistributedConfig, ReduceOperation};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor, TensorData};
use burn::train::metric::{AccuracyMetric, LossMetric};
use burn::train::{
    ClassificationOutput, ExecutionStrategy, InferenceStep, Learner, SupervisedTraining,
    TrainOutput, TrainStep,
};
use burn_amp::collective::DdpCollective;
use burn_amp::{LossScaleMetric, LossScaleOptimizer, MixedPrecision, SkippedStepsMetric};

type B = MixedPrecision<Autodiff<Cuda>>;

#[derive(Clone, Debug)]
struct Item {
    x: [f32; 16],
    y: i64,
}

#[derive(Clone, Debug)]
struct Batch<B: Backend> {
    x: Tensor<B, 2>,
    y: Tensor<B, 1, Int>,
}

#[derive(Clone, Default)]
struct ItemBatcher;

impl<B: Backend> Batcher<B, Item, Batch<B>> for ItemBatcher {
    fn batch(&self, items: Vec<Item>, device: &B::Device) -> Batch<B> {
        let n = items.len();
        let x: Vec<f32> = items.iter().flat_map(|i| i.x).collect();
        let y: Vec<i64> = items.iter().map(|i| i.y).collect();
        Batch {
            x: Tensor::from_data(TensorData::new(x, [n, 16]), device),
            y: Tensor::from_data(TensorData::new(y, [n]), device),
        }
    }
}

#[derive(Module, Debug)]
struct Classifier<B: Backend> {
    fc1: Linear<B>,
    fc2: Linear<B>,
    act: Relu,
}

impl<B: Backend> Classifier<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            fc1: LinearConfig::new(16, 64).init(device),
            fc2: LinearConfig::new(64, 4).init(device),
            act: Relu::new(),
        }
    }

    fn classify(&self, batch: Batch<B>) -> ClassificationOutput<B> {
        let output = self
            .fc2
            .forward(self.act.forward(self.fc1.forward(batch.x)));
        let loss = CrossEntropyLossConfig::new()
            .init(&output.device())
            .forward(output.clone(), batch.y.clone());
        ClassificationOutput::new(loss, output, batch.y)
    }
}

impl<B: AutodiffBackend> TrainStep for Classifier<B> {
    type Input = Batch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: Batch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let item = self.classify(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl<B: Backend> InferenceStep for Classifier<B> {
    type Input = Batch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: Batch<B>) -> ClassificationOutput<B> {
        self.classify(batch)
    }
}

/// A learnable task: the label is the largest of four fixed sums of the inputs.
fn items(n: usize, seed: u64) -> Vec<Item> {
    let mut state = seed;
    let mut next = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    };
    (0..n)
        .map(|_| {
            let x: [f32; 16] = core::array::from_fn(|_| next());
            let sums: Vec<f32> = (0..4).map(|c| x[c * 4..c * 4 + 4].iter().sum()).collect();
            let y = (0..4)
                .max_by(|a, b| sums[*a].total_cmp(&sums[*b]))
                .unwrap_or(0) as i64;
            Item { x, y }
        })
        .collect()
}

fn main() {
    let count = <Cuda as Backend>::device_count(0).max(1);
    let devices: Vec<_> = (0..count)
        .map(burn::backend::cuda::CudaDevice::new)
        .collect();
    println!("DDP over {count} CUDA device(s), policy mixed_float16");
    for device in &devices {
        B::set_policy(device, "mixed_float16").expect("CUDA runs f16");
    }
    let train = DataLoaderBuilder::<B, _, _>::new(ItemBatcher)
        .batch_size(64)
        .build(InMemDataset::new(items(16_384, 1)));
    let valid = DataLoaderBuilder::<MixedPrecision<Cuda>, _, _>::new(ItemBatcher)
        .batch_size(256)
        .build(InMemDataset::new(items(2_048, 2)));
    // Each replica's clone owns its scale; the handle reports the first replica's.
    let optim = LossScaleOptimizer::new(AdamWConfig::new().init::<B, Classifier<B>>())
        .with_amax_collective::<Cuda>(std::sync::Arc::new(DdpCollective::new(&devices)));
    let handle = optim.handle();
    let strategy = ExecutionStrategy::<B>::ddp(
        devices.clone(),
        DistributedConfig {
            all_reduce_op: ReduceOperation::Mean,
        },
    );
    let dir = std::env::temp_dir().join("burn-amp-ddp-learner");
    let _ = SupervisedTraining::new(&dir, train, valid)
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .metric_train_numeric(LossScaleMetric::new(handle.clone()))
        .metric_train_numeric(SkippedStepsMetric::new(handle.clone()))
        .with_training_strategy(strategy.into())
        .num_epochs(2)
        .launch(Learner::new(Classifier::<B>::new(&devices[0]), optim, 1e-3));
    println!(
        "loss scale {}, {} of {} steps skipped (replica 0's count)",
        handle.scale(),
        handle.skipped_steps(),
        handle.total_steps()
    );
}
