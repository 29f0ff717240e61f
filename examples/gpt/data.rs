//! The text: Shakespeare (`examples/data/tinyshakespeare/input.txt`, public domain), read as
//! bytes, the first 90% to train on and the last 10% held out; random windows for training,
//! the same evenly spaced windows for every validation.

use std::path::Path;
use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::Backend;
use burn::tensor::{Int, Tensor, TensorData};

/// The default text.
pub fn default_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/tinyshakespeare/input.txt")
}

pub struct Corpus {
    pub train: Arc<[u8]>,
    pub valid: Arc<[u8]>,
}

impl Corpus {
    /// The held-out windows every validation of a run uses.
    pub fn validation_windows(&self, config: &crate::config::TrainConfig) -> Vec<Vec<usize>> {
        validation_starts(
            self.valid.len(),
            config.model.seq_len,
            config.batch_size,
            config.eval_batches,
        )
    }
}

/// Reads the text and splits it 90/10.
pub fn load(path: &Path, seq_len: usize) -> Result<Corpus, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let split = bytes.len() * 9 / 10;
    let (train, valid) = bytes.split_at(split);
    if valid.len() <= seq_len + 1 {
        return Err(format!(
            "{}: {} bytes is too short for a context of {seq_len}",
            path.display(),
            bytes.len()
        ));
    }
    Ok(Corpus {
        train: train.into(),
        valid: valid.into(),
    })
}

/// SplitMix64: a tiny generator whose whole state is one `u64`, so a checkpoint holds it
/// (as that number).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * n as f64) as usize
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `batch` random window starts in a text of `len` bytes.
pub fn random_starts(rng: &mut Rng, len: usize, seq_len: usize, batch: usize) -> Vec<usize> {
    (0..batch).map(|_| rng.below(len - seq_len - 1)).collect()
}

/// `batches` batches of evenly spaced window starts over the held-out text.
pub fn validation_starts(
    len: usize,
    seq_len: usize,
    batch: usize,
    batches: usize,
) -> Vec<Vec<usize>> {
    let n = batch * batches;
    let span = len - seq_len - 1;
    let starts: Vec<usize> = (0..n).map(|i| i * span / n).collect();
    starts.chunks(batch).map(<[usize]>::to_vec).collect()
}

/// Inputs (bytes `s..s+T`) and targets (bytes `s+1..s+T+1`) of each window.
#[derive(Clone, Debug)]
pub struct TextBatch<B: Backend> {
    pub inputs: Tensor<B, 2, Int>,
    pub targets: Tensor<B, 2, Int>,
}

/// Turns window starts into a [`TextBatch`] (also the Learner's batcher).
#[derive(Clone)]
pub struct TextBatcher {
    pub text: Arc<[u8]>,
    pub seq_len: usize,
}

impl TextBatcher {
    /// The batchers of the training and the held-out text.
    pub fn pair(corpus: &Corpus, seq_len: usize) -> (Self, Self) {
        let batcher = |text: &Arc<[u8]>| Self {
            text: text.clone(),
            seq_len,
        };
        (batcher(&corpus.train), batcher(&corpus.valid))
    }
}

impl<B: Backend> Batcher<B, usize, TextBatch<B>> for TextBatcher {
    fn batch(&self, starts: Vec<usize>, device: &B::Device) -> TextBatch<B> {
        let (b, t) = (starts.len(), self.seq_len);
        let window = |offset: usize| -> Vec<i64> {
            starts
                .iter()
                .flat_map(|&s| {
                    self.text[s + offset..s + offset + t]
                        .iter()
                        .map(|&c| c as i64)
                })
                .collect()
        };
        TextBatch {
            inputs: Tensor::from_data(TensorData::new(window(0), [b, t]), device),
            targets: Tensor::from_data(TensorData::new(window(1), [b, t]), device),
        }
    }
}
