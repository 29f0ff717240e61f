//! The Keras mixed-precision guide's model: Dense(4096, relu) x 2, Dense(10), and the
//! softmax in float32 — an ordinary Burn module, with nothing mixed-precision in it.

use burn::module::Module;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor};
use burn::train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};

use crate::data::{DigitBatch, PIXELS};

#[derive(Module, Debug)]
pub struct KerasMlp<B: Backend> {
    dense1: Linear<B>,
    dense2: Linear<B>,
    dense3: Linear<B>,
    relu: Relu,
}

impl<B: Backend> KerasMlp<B> {
    pub fn new(device: &B::Device) -> Self {
        Self {
            dense1: LinearConfig::new(PIXELS, 4096).init(device),
            dense2: LinearConfig::new(4096, 4096).init(device),
            dense3: LinearConfig::new(4096, 10).init(device),
            relu: Relu::new(),
        }
    }

    /// The logits. The guide's `Activation('softmax', dtype='float32')` needs no code here:
    /// the loss's log-softmax, like every softmax, runs in f32 under any policy.
    pub fn forward(&self, images: Tensor<B, 2>) -> Tensor<B, 2> {
        let x = self.relu.forward(self.dense1.forward(images));
        let x = self.relu.forward(self.dense2.forward(x));
        self.dense3.forward(x)
    }

    pub fn classify(&self, batch: DigitBatch<B>) -> ClassificationOutput<B> {
        let logits = self.forward(batch.images);
        let loss = loss(logits.clone(), batch.labels.clone());
        ClassificationOutput::new(loss, logits, batch.labels)
    }

    /// The number of correct predictions in `batch`.
    pub fn correct(&self, batch: DigitBatch<B>) -> usize {
        let predicted = self.forward(batch.images).argmax(1).squeeze_dim::<1>(1);
        predicted
            .equal(batch.labels)
            .int()
            .sum()
            .into_scalar()
            .to_i64_lossy() as usize
    }
}

pub fn loss<B: Backend>(logits: Tensor<B, 2>, labels: Tensor<B, 1, Int>) -> Tensor<B, 1> {
    CrossEntropyLossConfig::new()
        .init(&logits.device())
        .forward(logits, labels)
}

trait ToI64 {
    fn to_i64_lossy(self) -> i64;
}

impl<E: burn::tensor::ElementConversion> ToI64 for E {
    fn to_i64_lossy(self) -> i64 {
        self.elem::<i64>()
    }
}

impl<B: AutodiffBackend> TrainStep for KerasMlp<B> {
    type Input = DigitBatch<B>;
    type Output = ClassificationOutput<B>;

    /// Burn's usual train step: `loss.backward()`, unchanged under mixed precision.
    fn step(&self, batch: DigitBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let item = self.classify(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl<B: Backend> InferenceStep for KerasMlp<B> {
    type Input = DigitBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: DigitBatch<B>) -> ClassificationOutput<B> {
        self.classify(batch)
    }
}
