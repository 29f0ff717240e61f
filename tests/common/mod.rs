//! Helpers shared by the integration tests: deterministic data and a small MLP.
#![allow(dead_code)]

use burn::module::{Module, Param};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

/// A reproducible stream of uniform numbers in [-1, 1) (64-bit LCG, high bits).
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Self(
            seed.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        )
    }

    pub fn next_f32(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    pub fn vec(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.next_f32() * scale).collect()
    }
}

/// A tensor of the given shape with deterministic values in [-scale, scale).
pub fn det<B: Backend, const D: usize>(
    shape: [usize; D],
    seed: u64,
    scale: f32,
    device: &B::Device,
) -> Tensor<B, D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(Lcg::new(seed).vec(n, scale), shape), device)
}

/// A linear layer with deterministic parameters (Kaiming-like scale).
pub fn det_linear<B: Backend>(
    d_in: usize,
    d_out: usize,
    seed: u64,
    device: &B::Device,
) -> Linear<B> {
    let mut layer = LinearConfig::new(d_in, d_out).init::<B>(device);
    let scale = (6.0 / d_in as f32).sqrt();
    layer.weight = Param::from_tensor(det([d_in, d_out], seed, scale, device));
    layer.bias = Some(Param::from_tensor(det([d_out], seed + 1, 0.01, device)));
    layer
}

/// The test MLP: Linear -> ReLU -> Linear -> ReLU -> Linear (logits).
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub fc1: Linear<B>,
    pub fc2: Linear<B>,
    pub out: Linear<B>,
    pub act: Relu,
}

impl<B: Backend> Mlp<B> {
    pub fn new(d_in: usize, hidden: usize, classes: usize, device: &B::Device) -> Self {
        Self {
            fc1: det_linear(d_in, hidden, 11, device),
            fc2: det_linear(hidden, hidden, 22, device),
            out: det_linear(hidden, classes, 33, device),
            act: Relu::new(),
        }
    }

    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        let h = self.act.forward(self.fc1.forward(x));
        let h = self.act.forward(self.fc2.forward(h));
        self.out.forward(h)
    }
}

/// A learnable synthetic classification task: inputs in [-1, 1), labels from a fixed random
/// linear teacher. Returns `(inputs, labels)` for batch `index`.
pub fn teacher_batch<B: Backend>(
    index: usize,
    batch: usize,
    d_in: usize,
    classes: usize,
    device: &B::Device,
) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
    let x = Lcg::new(1000 + index as u64).vec(batch * d_in, 1.0);
    let teacher = Lcg::new(7).vec(d_in * classes, 1.0);
    let labels: Vec<i64> = (0..batch)
        .map(|b| {
            (0..classes)
                .map(|c| {
                    (0..d_in)
                        .map(|i| x[b * d_in + i] * teacher[i * classes + c])
                        .sum::<f32>()
                })
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(&b.1))
                .map(|(c, _)| c as i64)
                .unwrap()
        })
        .collect();
    (
        Tensor::from_data(TensorData::new(x, [batch, d_in]), device),
        Tensor::from_data(TensorData::new(labels, [batch]), device),
    )
}

/// The bytes of a tensor, for bit-exact comparisons.
pub fn bytes<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<u8> {
    t.into_data().as_bytes().to_vec()
}

/// The values of a float tensor as f32, whatever its dtype.
pub fn values<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec::<f32>().unwrap()
}
