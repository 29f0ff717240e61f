//! The 10,000 MNIST digits shipped in `examples/data/mnist-10k` (IDX format, gzipped):
//! the first 8,000 for training, the last 2,000 for testing.

use std::io::Read;
use std::path::Path;

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

pub const PIXELS: usize = 28 * 28;
pub const TRAIN: usize = 8_000;

/// One digit: 784 pixels scaled to [0, 1], and its label.
#[derive(Clone, Debug)]
pub struct Digit {
    pub pixels: Vec<f32>,
    pub label: u8,
}

fn read_gz(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: not a gzip file: {e}", path.display()))?;
    Ok(bytes)
}

fn be_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// Reads the images and labels, checking the IDX headers.
pub fn load(dir: &Path) -> Result<Vec<Digit>, String> {
    let images = read_gz(&dir.join("images-idx3-ubyte.gz"))?;
    let labels = read_gz(&dir.join("labels-idx1-ubyte.gz"))?;
    if images.len() < 16 || be_u32(&images, 0) != 2051 {
        return Err("images-idx3-ubyte.gz: not an IDX image file (magic 2051)".into());
    }
    if labels.len() < 8 || be_u32(&labels, 0) != 2049 {
        return Err("labels-idx1-ubyte.gz: not an IDX label file (magic 2049)".into());
    }
    let n = be_u32(&images, 4) as usize;
    let (rows, cols) = (be_u32(&images, 8) as usize, be_u32(&images, 12) as usize);
    if rows * cols != PIXELS || images.len() != 16 + n * PIXELS {
        return Err(format!("images: expected {n} images of 28x28"));
    }
    if be_u32(&labels, 4) as usize != n || labels.len() != 8 + n {
        return Err(format!("labels: expected {n} labels"));
    }
    Ok((0..n)
        .map(|i| Digit {
            pixels: images[16 + i * PIXELS..16 + (i + 1) * PIXELS]
                .iter()
                .map(|&p| p as f32 / 255.0)
                .collect(),
            label: labels[8 + i],
        })
        .collect())
}

/// Turns digits into a batch of tensors.
#[derive(Clone, Default)]
pub struct DigitBatcher;

/// A batch: `[n, 784]` images and `[n]` labels.
#[derive(Clone, Debug)]
pub struct DigitBatch<B: Backend> {
    pub images: Tensor<B, 2>,
    pub labels: Tensor<B, 1, Int>,
}

impl<B: Backend> Batcher<B, Digit, DigitBatch<B>> for DigitBatcher {
    fn batch(&self, items: Vec<Digit>, device: &B::Device) -> DigitBatch<B> {
        let n = items.len();
        let pixels: Vec<f32> = items
            .iter()
            .flat_map(|d| d.pixels.iter().copied())
            .collect();
        let labels: Vec<i64> = items.iter().map(|d| d.label as i64).collect();
        DigitBatch {
            images: Tensor::from_data(TensorData::new(pixels, [n, PIXELS]), device),
            labels: Tensor::from_data(TensorData::new(labels, [n]), device),
        }
    }
}

/// A reproducible shuffle (Fisher-Yates on a 64-bit LCG).
pub fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    for i in (1..n).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (state >> 33) as usize % (i + 1));
    }
    order
}
