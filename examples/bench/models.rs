//! The benchmarked workloads: the Keras guide's MLP and a burn-nn Transformer encoder, each
//! with a training step (forward, backward, optimizer step, device sync).

use burn::module::{AutodiffModule, Module};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::nn::transformer::{
    TransformerEncoder, TransformerEncoderConfig, TransformerEncoderInput,
};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{Distribution, Int, Tensor};
use burn_amp::{LossScaleOptimizer, MixedPrecision};

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

/// The sizes of a workload.
#[derive(Clone, Copy, Debug)]
pub enum Workload {
    Mlp {
        width: usize,
        batch: usize,
    },
    Encoder {
        d_model: usize,
        layers: usize,
        seq: usize,
        batch: usize,
    },
}

impl Workload {
    pub fn describe(&self) -> String {
        match *self {
            Self::Mlp { width, batch } => format!("MLP 784-{width}-{width}-10, batch {batch}"),
            Self::Encoder {
                d_model,
                layers,
                seq,
                batch,
            } => {
                format!("Transformer encoder d={d_model} x{layers}, seq {seq}, batch {batch}")
            }
        }
    }
}

/// One training step, ready to run again and again.
pub trait Step {
    fn step(&mut self);
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
    fn step(&mut self) {
        let model = self.model.take().unwrap();
        let logits = (self.forward)(&model, &self.x);
        let loss = CrossEntropyLossConfig::new()
            .init(&logits.device())
            .forward(logits, self.y.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        self.model = Some(self.optim.step(1e-4, model, grads));
        let _ = B::sync(&self.x.device());
    }
}

fn data<B: Backend>(workload: Workload, device: &B::Device) -> (Tensor<B, 3>, Tensor<B, 1, Int>) {
    let (shape, batch) = match workload {
        Workload::Mlp { batch, .. } => ([batch, 1, 784], batch),
        Workload::Encoder { seq, batch, .. } => ([batch, seq, 32], batch),
    };
    let x = Tensor::random(shape, Distribution::Default, device);
    let y = Tensor::<B, 1>::random([batch], Distribution::Uniform(0.0, 9.99), device).int();
    (x, y)
}

fn mlp_forward<B: Backend>(m: &Mlp<B>, x: &Tensor<B, 3>) -> Tensor<B, 2> {
    m.forward(x.clone().squeeze_dim::<2>(1))
}

fn encoder_forward<B: Backend>(m: &Encoder<B>, x: &Tensor<B, 3>) -> Tensor<B, 2> {
    m.forward(x.clone())
}

/// A training step on the bare backend `B` (Adam).
pub fn bare<B: AutodiffBackend>(workload: Workload, device: &B::Device) -> Box<dyn Step> {
    B::seed(device, 1);
    let (x, y) = data::<B>(workload, device);
    match workload {
        Workload::Mlp { width, .. } => Box::new(Trainer {
            model: Some(Mlp::<B>::new(width, device)),
            optim: AdamConfig::new().init::<B, Mlp<B>>(),
            forward: mlp_forward::<B>,
            x,
            y,
        }),
        Workload::Encoder {
            d_model, layers, ..
        } => Box::new(Trainer {
            model: Some(Encoder::<B>::new(d_model, layers, device)),
            optim: AdamConfig::new().init::<B, Encoder<B>>(),
            forward: encoder_forward::<B>,
            x,
            y,
        }),
    }
}

/// A training step on `MixedPrecision<B>` under the device's policy (Adam wrapped in a
/// `LossScaleOptimizer`, as a user would under any policy).
pub fn mixed<B: AutodiffBackend>(workload: Workload, device: &B::Device) -> Box<dyn Step> {
    type M<B> = MixedPrecision<B>;
    <M<B> as Backend>::seed(device, 1);
    let (x, y) = data::<M<B>>(workload, device);
    match workload {
        Workload::Mlp { width, .. } => Box::new(Trainer {
            model: Some(Mlp::<M<B>>::new(width, device)),
            optim: LossScaleOptimizer::new(AdamConfig::new().init::<M<B>, Mlp<M<B>>>()),
            forward: mlp_forward::<M<B>>,
            x,
            y,
        }),
        Workload::Encoder {
            d_model, layers, ..
        } => Box::new(Trainer {
            model: Some(Encoder::<M<B>>::new(d_model, layers, device)),
            optim: LossScaleOptimizer::new(AdamConfig::new().init::<M<B>, Encoder<M<B>>>()),
            forward: encoder_forward::<M<B>>,
            x,
            y,
        }),
    }
}
