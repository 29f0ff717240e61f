//! The benchmarked workloads: the Keras guide's MLP, a linear stack, a burn-nn Transformer
//! encoder, a small CNN and the GPT example's decoder, each with a training step (forward,
//! backward, optimizer step, device sync).

use burn::module::{AutodiffModule, Module};
use burn::nn::attention::generate_autoregressive_mask;
use burn::nn::conv::{Conv2d, Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{
    BatchNorm, BatchNormConfig, Embedding, EmbeddingConfig, LayerNorm, LayerNormConfig, Linear,
    LinearConfig, PaddingConfig2d, Relu,
};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, Int, Tensor};
use burn_amp::{FusedAdamWConfig, LossScaleOptimizer, MixedPrecision};
use std::time::Instant;

#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    l1: Linear<B>,
    l2: Linear<B>,
    l3: Linear<B>,
    relu: Relu,
}

impl<B: Backend> Mlp<B> {
    pub fn new(width: usize, device: &B::Device) -> Self {
        Self {
            l1: LinearConfig::new(784, width).init(device),
            l2: LinearConfig::new(width, width).init(device),
            l3: LinearConfig::new(width, 10).init(device),
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let x = self.relu.forward(self.l1.forward(x));
        self.l3.forward(self.relu.forward(self.l2.forward(x)))
    }
}

/// A matmul-heavy stack: `layers` square linear layers with ReLU, then a 10-way head.
#[derive(Module, Debug)]
pub struct Stack<B: Backend> {
    layers: Vec<Linear<B>>,
    head: Linear<B>,
    relu: Relu,
}

impl<B: Backend> Stack<B> {
    pub fn new(width: usize, layers: usize, device: &B::Device) -> Self {
        Self {
            layers: (0..layers)
                .map(|_| LinearConfig::new(width, width).init(device))
                .collect(),
            head: LinearConfig::new(width, 10).init(device),
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let x = self
            .layers
            .iter()
            .fold(x, |x, l| self.relu.forward(l.forward(x)));
        self.head.forward(x)
    }
}

#[derive(Module, Debug)]
pub struct Encoder<B: Backend> {
    embed: Linear<B>,
    encoder: TransformerEncoder<B>,
    head: Linear<B>,
}

impl<B: Backend> Encoder<B> {
    pub fn new(d_model: usize, layers: usize, device: &B::Device) -> Self {
        Self {
            embed: LinearConfig::new(32, d_model).init(device),
            encoder: TransformerEncoderConfig::new(d_model, 4 * d_model, 8, layers).init(device),
            head: LinearConfig::new(d_model, 10).init(device),
        }
    }

    fn forward(&self, x: Tensor<B, 3>) -> Tensor<B, 2> {
        let h = self
            .encoder
            .forward(TransformerEncoderInput::new(self.embed.forward(x)));
        self.head.forward(h.mean_dim(1).squeeze_dim::<2>(1))
    }
}

/// A small CNN on 32x32 RGB images: three 3x3 convolutions (3 -> 32, then 32 -> 64 and
/// 64 -> 64 with stride 2), ReLU after each, and a linear head on the 64 x 8 x 8 features.
#[derive(Module, Debug)]
pub struct Cnn<B: Backend> {
    convs: Vec<Conv2d<B>>,
    head: Linear<B>,
    relu: Relu,
}

impl<B: Backend> Cnn<B> {
    pub fn new(device: &B::Device) -> Self {
        let conv = |c_in, c_out, stride| {
            Conv2dConfig::new([c_in, c_out], [3, 3])
                .with_stride([stride, stride])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(device)
        };
        Self {
            convs: vec![conv(3, 32, 1), conv(32, 64, 2), conv(64, 64, 2)],
            head: LinearConfig::new(64 * 8 * 8, 10).init(device),
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self
            .convs
            .iter()
            .fold(x, |x, conv| self.relu.forward(conv.forward(x)));
        let [batch, ..] = x.dims();
        self.head.forward(x.reshape([batch, 64 * 8 * 8]))
    }
}

/// A CNN as image models are usually written, with the layers the plain `Cnn` leaves out:
/// a 3x3 convolution (3 -> 32) and batch norm, a depthwise 3x3 convolution (groups 32) and
/// a pointwise one (32 -> 64) with batch norm, a 2x2 max pool, a 2x2 transposed
/// convolution of stride 2 (64 -> 32), a 3x3 convolution (32 -> 32), ReLU after each
/// block, a global average pool and a linear head.
#[derive(Module, Debug)]
pub struct NormCnn<B: Backend> {
    stem: Conv2d<B>,
    stem_norm: BatchNorm<B>,
    depthwise: Conv2d<B>,
    pointwise: Conv2d<B>,
    block_norm: BatchNorm<B>,
    pool: MaxPool2d,
    up: ConvTranspose2d<B>,
    conv: Conv2d<B>,
    gap: AdaptiveAvgPool2d,
    head: Linear<B>,
    relu: Relu,
}

impl<B: Backend> NormCnn<B> {
    pub fn new(device: &B::Device) -> Self {
        let same = PaddingConfig2d::Explicit(1, 1, 1, 1);
        Self {
            stem: Conv2dConfig::new([3, 32], [3, 3])
                .with_padding(same.clone())
                .init(device),
            stem_norm: BatchNormConfig::new(32).init(device),
            depthwise: Conv2dConfig::new([32, 32], [3, 3])
                .with_groups(32)
                .with_padding(same.clone())
                .init(device),
            pointwise: Conv2dConfig::new([32, 64], [1, 1]).init(device),
            block_norm: BatchNormConfig::new(64).init(device),
            pool: MaxPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            up: ConvTranspose2dConfig::new([64, 32], [2, 2])
                .with_stride([2, 2])
                .init(device),
            conv: Conv2dConfig::new([32, 32], [3, 3])
                .with_padding(same)
                .init(device),
            gap: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            head: LinearConfig::new(32, 10).init(device),
            relu: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 2> {
        let x = self
            .relu
            .forward(self.stem_norm.forward(self.stem.forward(x)));
        let x = self.pointwise.forward(self.depthwise.forward(x));
        let x = self
            .pool
            .forward(self.relu.forward(self.block_norm.forward(x)));
        let x = self.relu.forward(self.up.forward(x));
        let x = self.relu.forward(self.conv.forward(x));
        self.head.forward(self.gap.forward(x).flatten(1, 3))
    }
}

/// The GPT example's decoder (its `cpu` preset's shape): token and position embeddings, a
/// pre-norm GELU Transformer encoder under a causal mask, a final `LayerNorm`, a linear head
/// without bias over the 256 byte values.
#[derive(Module, Debug)]
pub struct Gpt<B: Backend> {
    tokens: Embedding<B>,
    positions: Embedding<B>,
    blocks: TransformerEncoder<B>,
    norm: LayerNorm<B>,
    head: Linear<B>,
}

impl<B: Backend> Gpt<B> {
    pub fn new(
        d_model: usize,
        layers: usize,
        heads: usize,
        seq: usize,
        device: &B::Device,
    ) -> Self {
        Self {
            tokens: EmbeddingConfig::new(VOCAB, d_model).init(device),
            positions: EmbeddingConfig::new(seq, d_model).init(device),
            blocks: TransformerEncoderConfig::new(d_model, 4 * d_model, heads, layers)
                .with_norm_first(true)
                .with_dropout(0.0)
                .init(device),
            norm: LayerNormConfig::new(d_model).init(device),
            head: LinearConfig::new(d_model, VOCAB)
                .with_bias(false)
                .init(device),
        }
    }

    /// The next-byte logits of tokens `[batch, time]`, flattened to `[batch * time, 256]`.
    fn forward(&self, inputs: Tensor<B, 2, Int>) -> Tensor<B, 2> {
        let device = inputs.device();
        let [batch, time] = inputs.dims();
        let positions = Tensor::<B, 1, Int>::arange(0..time as i64, &device).reshape([1, time]);
        let x = self.tokens.forward(inputs) + self.positions.forward(positions);
        let mask = generate_autoregressive_mask::<B>(batch, time, &device);
        let x = self
            .blocks
            .forward(TransformerEncoderInput::new(x).mask_attn(mask));
        self.head
            .forward(self.norm.forward(x))
            .reshape([batch * time, VOCAB])
    }
}

/// The GPT example's vocabulary: byte values.
const VOCAB: usize = 256;

/// The sizes of a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    Mlp {
        width: usize,
        batch: usize,
    },
    /// The GPU suite, which shares this file, does not train it.
    #[allow(dead_code)]
    Stack {
        width: usize,
        layers: usize,
        batch: usize,
    },
    Encoder {
        d_model: usize,
        layers: usize,
        seq: usize,
        batch: usize,
    },
    /// The GPU suite, which shares this file, does not train it.
    #[allow(dead_code)]
    Cnn {
        batch: usize,
    },
    /// The GPU suite, which shares this file, does not train it.
    #[allow(dead_code)]
    NormCnn {
        batch: usize,
    },
    /// The GPU suite, which shares this file, does not train it.
    #[allow(dead_code)]
    Gpt {
        d_model: usize,
        layers: usize,
        heads: usize,
        seq: usize,
        batch: usize,
    },
}

impl Workload {
    /// The GPT example's default (`cpu`) preset: d_model 128, 4 layers, 4 heads, context
    /// 64, batch 12.
    #[allow(dead_code)]
    pub const GPT_CPU: Workload = Workload::Gpt {
        d_model: 128,
        layers: 4,
        heads: 4,
        seq: 64,
        batch: 12,
    };

    /// A GPT-shaped burn-nn decoder of sizes no kernel was tuned for, as users write one
    /// (d_model 200, 3 layers, 4 heads of 50, context 100, batch 24): odd head sizes and
    /// sequence lengths, widths that are not multiples of the GEMM's tiles.
    #[allow(dead_code)]
    pub const GPT_200: Workload = Workload::Gpt {
        d_model: 200,
        layers: 3,
        heads: 4,
        seq: 100,
        batch: 24,
    };

    /// The parameters of the workload's model.
    pub fn params(&self) -> usize {
        match *self {
            Workload::Mlp { width, .. } => {
                784 * width + width + width * width + width + width * 10 + 10
            }
            Workload::Stack { width, layers, .. } => {
                layers * (width * width + width) + width * 10 + 10
            }
            Workload::Encoder {
                d_model, layers, ..
            } => layers * d_model * d_model * 12,
            Workload::Cnn { .. } => {
                3 * 32 * 9 + 32 + 32 * 64 * 9 + 64 + 64 * 64 * 9 + 64 + 64 * 64 * 10 + 10
            }
            Workload::NormCnn { .. } => {
                (3 * 32 * 9 + 32)
                    + 2 * 32
                    + (32 * 9 + 32)
                    + (32 * 64 + 64)
                    + 2 * 64
                    + (64 * 32 * 4 + 32)
                    + (32 * 32 * 9 + 32)
                    + (32 * 10 + 10)
            }
            Workload::Gpt {
                d_model,
                layers,
                seq,
                ..
            } => {
                (VOCAB + seq) * d_model
                    + layers * (12 * d_model + 13) * d_model
                    + 2 * d_model
                    + d_model * VOCAB
            }
        }
    }

    pub fn describe(&self) -> String {
        match *self {
            Self::Mlp { width, batch } => format!("MLP 784-{width}-{width}-10, batch {batch}"),
            Self::Stack {
                width,
                layers,
                batch,
            } => format!("linear stack {width} x{layers}, batch {batch}"),
            Self::Encoder {
                d_model,
                layers,
                seq,
                batch,
            } => {
                format!("Transformer encoder d={d_model} x{layers}, seq {seq}, batch {batch}")
            }
            Self::Cnn { batch } => format!("CNN 3x3 convs 32-64-64 on 32x32x3, batch {batch}"),
            Self::NormCnn { batch } => format!(
                "CNN with batch norm, depthwise, max pool and transposed convs on 32x32x3, batch {batch}"
            ),
            Self::Gpt {
                d_model,
                layers,
                heads,
                seq,
                batch,
            } => {
                let what = if *self == Self::GPT_CPU {
                    "GPT example, cpu preset: decoder"
                } else {
                    "GPT-shaped burn-nn decoder"
                };
                format!("{what} d={d_model} x{layers}, {heads} heads, context {seq}, batch {batch}")
            }
        }
    }
}

/// One training step, ready to run again and again.
pub trait Step: Send {
    fn step(&mut self) {
        self.phases();
    }

    /// One step, timed by phase: forward (to the loss), backward (to the gradients),
    /// optimizer step; seconds, the device synced after each.
    fn phases(&mut self) -> [f64; 3];
}

struct Trainer<B: AutodiffBackend, M, O> {
    model: Option<M>,
    optim: O,
    forward: fn(&M, &Tensor<B, 3>) -> Tensor<B, 2>,
    x: Tensor<B, 3>,
    y: Tensor<B, 1, Int>,
}

impl<B, M, O> Step for Trainer<B, M, O>
where
    B: AutodiffBackend,
    M: AutodiffModule<B>,
    O: Optimizer<M, B>,
{
    fn phases(&mut self) -> [f64; 3] {
        let device = self.x.device();
        let sync = || {
            let _ = B::sync(&device);
        };
        let t0 = Instant::now();
        let model = self.model.take().unwrap();
        let logits = (self.forward)(&model, &self.x);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits, self.y.clone());
        sync();
        let t1 = Instant::now();
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        sync();
        let t2 = Instant::now();
        self.model = Some(self.optim.step(1e-4, model, grads));
        sync();
        let t3 = Instant::now();
        [t1 - t0, t2 - t1, t3 - t2].map(|d| d.as_secs_f64())
    }
}

fn data<B: Backend>(workload: Workload, device: &B::Device) -> (Tensor<B, 3>, Tensor<B, 1, Int>) {
    let (shape, batch) = match workload {
        Workload::Mlp { batch, .. } => ([batch, 1, 784], batch),
        Workload::Stack { width, batch, .. } => ([batch, 1, width], batch),
        Workload::Encoder { seq, batch, .. } => ([batch, seq, 32], batch),
        Workload::Cnn { batch } | Workload::NormCnn { batch } => ([batch, 3, 32 * 32], batch),
        Workload::Gpt { seq, batch, .. } => {
            // Byte tokens (carried as floats, as every workload's input is) and a next byte
            // for every position.
            let bytes = Distribution::Uniform(0.0, VOCAB as f64 - 0.01);
            let x = Tensor::<B, 3>::random([batch, seq, 1], bytes, device);
            let y = Tensor::<B, 1>::random([batch * seq], bytes, device).int();
            return (x, y);
        }
    };
    let x = Tensor::random(shape, Distribution::Default, device);
    let y = Tensor::<B, 1>::random([batch], Distribution::Uniform(0.0, 9.99), device).int();
    (x, y)
}

fn mlp_forward<B: Backend>(m: &Mlp<B>, x: &Tensor<B, 3>) -> Tensor<B, 2> {
    m.forward(x.clone().squeeze_dim::<2>(1))
}

fn stack_forward<B: Backend>(m: &Stack<B>, x: &Tensor<B, 3>) -> Tensor<B, 2> {
    m.forward(x.clone().squeeze_dim::<2>(1))
}

fn encoder_forward<B: Backend>(m: &Encoder<B>, x: &Tensor<B, 3>) -> Tensor<B, 2> {
    m.forward(x.clone())
}

fn cnn_forward<B: Backend>(m: &Cnn<B>, x: &Tensor<B, 3>) -> Tensor<B, 2> {
    let [batch, ..] = x.dims();
    m.forward(x.clone().reshape([batch, 3, 32, 32]))
}

fn norm_cnn_forward<B: Backend>(m: &NormCnn<B>, x: &Tensor<B, 3>) -> Tensor<B, 2> {
    let [batch, ..] = x.dims();
    m.forward(x.clone().reshape([batch, 3, 32, 32]))
}

fn gpt_forward<B: Backend>(m: &Gpt<B>, x: &Tensor<B, 3>) -> Tensor<B, 2> {
    m.forward(x.clone().squeeze_dim::<2>(2).int())
}

/// Which optimizer a step trains with: Burn's Adam, or burn-amp's fused one (Adam: no
/// weight decay), the same update.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opt {
    BurnAdam,
    FusedAdam,
}

impl Opt {
    pub fn name(self) -> &'static str {
        match self {
            Opt::BurnAdam => "Burn's Adam",
            Opt::FusedAdam => "FusedAdamW (Adam)",
        }
    }
}

/// One trainer of `$model` on `$x`, `$y`, with the optimizer `$opt` asks for, each
/// optimizer made by `$make` (which wraps it, or not).
macro_rules! trainer {
    ($opt:expr, $backend:ty, $module:ident, $model:expr, $forward:expr, $x:expr, $y:expr, $make:expr) => {
        match $opt {
            Opt::BurnAdam => Box::new(Trainer {
                model: Some($model),
                optim: $make(AdamConfig::new().init::<$backend, $module<$backend>>()),
                forward: $forward,
                x: $x,
                y: $y,
            }) as Box<dyn Step>,
            Opt::FusedAdam => Box::new(Trainer {
                model: Some($model),
                optim: $make(FusedAdamWConfig::adam().init::<$backend, $module<$backend>>()),
                forward: $forward,
                x: $x,
                y: $y,
            }),
        }
    };
}

/// A training step on the bare backend `B` (Burn's Adam).
#[allow(dead_code)]
pub fn bare<B: AutodiffBackend>(workload: Workload, device: &B::Device) -> Box<dyn Step> {
    bare_with::<B>(workload, device, Opt::BurnAdam)
}

/// A training step on the bare backend `B` with optimizer `opt`.
pub fn bare_with<B: AutodiffBackend>(
    workload: Workload,
    device: &B::Device,
    opt: Opt,
) -> Box<dyn Step> {
    B::seed(device, 1);
    let (x, y) = data::<B>(workload, device);
    match workload {
        Workload::Mlp { width, .. } => {
            trainer!(
                opt,
                B,
                Mlp,
                Mlp::<B>::new(width, device),
                mlp_forward::<B>,
                x,
                y,
                core::convert::identity
            )
        }
        Workload::Stack { width, layers, .. } => trainer!(
            opt,
            B,
            Stack,
            Stack::<B>::new(width, layers, device),
            stack_forward::<B>,
            x,
            y,
            core::convert::identity
        ),
        Workload::Encoder {
            d_model, layers, ..
        } => trainer!(
            opt,
            B,
            Encoder,
            Encoder::<B>::new(d_model, layers, device),
            encoder_forward::<B>,
            x,
            y,
            core::convert::identity
        ),
        Workload::Cnn { .. } => trainer!(
            opt,
            B,
            Cnn,
            Cnn::<B>::new(device),
            cnn_forward::<B>,
            x,
            y,
            core::convert::identity
        ),
        Workload::NormCnn { .. } => trainer!(
            opt,
            B,
            NormCnn,
            NormCnn::<B>::new(device),
            norm_cnn_forward::<B>,
            x,
            y,
            core::convert::identity
        ),
        Workload::Gpt {
            d_model,
            layers,
            heads,
            seq,
            ..
        } => trainer!(
            opt,
            B,
            Gpt,
            Gpt::<B>::new(d_model, layers, heads, seq, device),
            gpt_forward::<B>,
            x,
            y,
            core::convert::identity
        ),
    }
}

/// A training step on `MixedPrecision<B>` under the device's policy (Burn's Adam wrapped in
/// a `LossScaleOptimizer`, as a user would under any policy).
#[allow(dead_code)]
pub fn mixed<B: AutodiffBackend>(workload: Workload, device: &B::Device) -> Box<dyn Step> {
    mixed_with::<B>(workload, device, Opt::BurnAdam)
}

/// A training step on `MixedPrecision<B>` with `opt` wrapped in a `LossScaleOptimizer`.
pub fn mixed_with<B: AutodiffBackend>(
    workload: Workload,
    device: &B::Device,
    opt: Opt,
) -> Box<dyn Step> {
    type M<B> = MixedPrecision<B>;
    <M<B> as Backend>::seed(device, 1);
    let (x, y) = data::<M<B>>(workload, device);
    match workload {
        Workload::Mlp { width, .. } => trainer!(
            opt,
            M<B>,
            Mlp,
            Mlp::<M<B>>::new(width, device),
            mlp_forward::<M<B>>,
            x,
            y,
            LossScaleOptimizer::new
        ),
        Workload::Stack { width, layers, .. } => trainer!(
            opt,
            M<B>,
            Stack,
            Stack::<M<B>>::new(width, layers, device),
            stack_forward::<M<B>>,
            x,
            y,
            LossScaleOptimizer::new
        ),
        Workload::Encoder {
            d_model, layers, ..
        } => trainer!(
            opt,
            M<B>,
            Encoder,
            Encoder::<M<B>>::new(d_model, layers, device),
            encoder_forward::<M<B>>,
            x,
            y,
            LossScaleOptimizer::new
        ),
        Workload::Cnn { .. } => trainer!(
            opt,
            M<B>,
            Cnn,
            Cnn::<M<B>>::new(device),
            cnn_forward::<M<B>>,
            x,
            y,
            LossScaleOptimizer::new
        ),
        Workload::NormCnn { .. } => trainer!(
            opt,
            M<B>,
            NormCnn,
            NormCnn::<M<B>>::new(device),
            norm_cnn_forward::<M<B>>,
            x,
            y,
            LossScaleOptimizer::new
        ),
        Workload::Gpt {
            d_model,
            layers,
            heads,
            seq,
            ..
        } => trainer!(
            opt,
            M<B>,
            Gpt,
            Gpt::<M<B>>::new(d_model, layers, heads, seq, device),
            gpt_forward::<M<B>>,
            x,
            y,
            LossScaleOptimizer::new
        ),
    }
}
