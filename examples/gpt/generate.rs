//! Text from a trained model: sampled byte by byte at temperature 0.8 from a fixed seed,
//! starting after a newline.

use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

use crate::data::Rng;
use crate::model::Gpt;

const PROMPT: &[u8] = b"\n";
const TEMPERATURE: f64 = 0.8;

/// `len` bytes continuing [`PROMPT`], each drawn from the softmax of the last position's
/// logits divided by [`TEMPERATURE`]; the context is the last `seq_len` bytes.
pub fn sample<B: Backend>(
    model: &Gpt<B>,
    len: usize,
    seq_len: usize,
    seed: u64,
    device: &B::Device,
) -> String {
    let (prompt, temperature) = (PROMPT, TEMPERATURE);
    let mut rng = Rng(seed);
    let mut text = prompt.to_vec();
    for _ in 0..len {
        let context: Vec<i64> = text[text.len().saturating_sub(seq_len)..]
            .iter()
            .map(|&c| c as i64)
            .collect();
        let t = context.len();
        let inputs = Tensor::<B, 2, Int>::from_data(TensorData::new(context, [1, t]), device);
        let logits = model
            .forward(inputs)
            .slice([0..1, t - 1..t])
            .flatten::<1>(0, 2);
        let logits: Vec<f32> = logits.into_data().convert::<f32>().to_vec().unwrap();
        text.push(draw(&logits, temperature, &mut rng));
    }
    String::from_utf8_lossy(&text[prompt.len()..]).into_owned()
}

fn draw(logits: &[f32], temperature: f64, rng: &mut Rng) -> u8 {
    let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let weights: Vec<f64> = logits
        .iter()
        .map(|&l| ((l as f64 - max) / temperature).exp())
        .collect();
    let mut target = rng.unit() * weights.iter().sum::<f64>();
    for (byte, w) in weights.iter().enumerate() {
        if target < *w {
            return byte as u8;
        }
        target -= w;
    }
    (weights.len() - 1) as u8
}
