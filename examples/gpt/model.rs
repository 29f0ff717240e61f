//! A decoder-only transformer written the way a Burn user writes one: token and position
//! embeddings, burn-nn's `TransformerEncoder` (pre-norm, GELU) under a causal mask, a final
//! `LayerNorm` and a linear head over the 256 byte values. Nothing in it knows about mixed
//! precision.

use burn::module::Module;
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear, LinearConfig};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Int, Tensor};
use burn::train::{ClassificationOutput, InferenceStep, TrainOutput, TrainStep};

use crate::config::GptConfig;
use crate::data::TextBatch;

#[derive(Module, Debug)]
pub struct Gpt<B: Backend> {
    tokens: Embedding<B>,
    positions: Embedding<B>,
    blocks: TransformerEncoder<B>,
    norm: LayerNorm<B>,
    head: Linear<B>,
}

impl GptConfig {
    pub fn init<B: Backend>(&self, device: &B::Device) -> Gpt<B> {
        Gpt {
            tokens: EmbeddingConfig::new(self.vocab, self.d_model).init(device),
            positions: EmbeddingConfig::new(self.seq_len, self.d_model).init(device),
            blocks: TransformerEncoderConfig::new(
                self.d_model,
                4 * self.d_model,
                self.n_heads,
                self.n_layers,
            )
            .with_norm_first(true)
            .with_dropout(self.dropout)
            .init(device),
            norm: LayerNormConfig::new(self.d_model).init(device),
            head: LinearConfig::new(self.d_model, self.vocab)
                .with_bias(false)
                .init(device),
        }
    }
}

impl<B: Backend> Gpt<B> {
    /// The next-byte logits `[batch, time, 256]` of byte sequences `[batch, time]`.
    pub fn forward(&self, inputs: Tensor<B, 2, Int>) -> Tensor<B, 3> {
        let device = inputs.device();
        let [batch, time] = inputs.dims();
        let positions = Tensor::<B, 1, Int>::arange(0..time as i64, &device).reshape([1, time]);
        let x = self.tokens.forward(inputs) + self.positions.forward(positions);
        let mask = generate_autoregressive_mask::<B>(batch, time, &device);
        let x = self
            .blocks
            .forward(TransformerEncoderInput::new(x).mask_attn(mask));
        self.head.forward(self.norm.forward(x))
    }

    /// The mean cross-entropy of the next byte, with the logits and targets flattened to
    /// `[batch * time, ..]` (the softmax runs in f32 under every policy).
    pub fn output(&self, batch: TextBatch<B>) -> ClassificationOutput<B> {
        let logits = self.forward(batch.inputs);
        let [b, t, v] = logits.dims();
        let logits = logits.reshape([b * t, v]);
        let targets = batch.targets.reshape([b * t]);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits.clone(), targets.clone());
        ClassificationOutput::new(loss, logits, targets)
    }

    pub fn loss(&self, batch: TextBatch<B>) -> Tensor<B, 1> {
        self.output(batch).loss
    }
}

impl<B: AutodiffBackend> TrainStep for Gpt<B> {
    type Input = TextBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: TextBatch<B>) -> TrainOutput<ClassificationOutput<B>> {
        let item = self.output(batch);
        TrainOutput::new(self, item.loss.backward(), item)
    }
}

impl<B: Backend> InferenceStep for Gpt<B> {
    type Input = TextBatch<B>;
    type Output = ClassificationOutput<B>;

    fn step(&self, batch: TextBatch<B>) -> ClassificationOutput<B> {
        self.output(batch)
    }
}
