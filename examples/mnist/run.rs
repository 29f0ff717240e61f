//! What a training run needs: its options, the evaluation, and the run itself (shared by
//! `main.rs` and the accuracy test in `tests/mnist.rs`).

use std::path::PathBuf;

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_amp::{MixedPrecision, Policy};

use crate::data::{self, Digit, DigitBatcher, TRAIN};
use crate::model::KerasMlp;
use crate::{custom_loop, learner};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    CustomLoop,
    Learner,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub policy: Policy,
    pub epochs: usize,
    pub batch_size: usize,
    pub lr: f64,
    pub seed: u64,
    pub mode: Mode,
    pub data: PathBuf,
    /// Train on the first this many of the 8,000 training digits (for quick measurements).
    pub train_size: usize,
    /// `--numerics`: where the FP8 numerics histogram of the last step goes.
    pub numerics: Option<PathBuf>,
    /// `--cost`: print what the last training step cost (`burn_amp::cost`).
    pub cost: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            policy: Policy::mixed_float16(),
            epochs: 5,
            batch_size: 128,
            lr: 1e-3,
            seed: 42,
            mode: Mode::CustomLoop,
            data: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/data/mnist-10k"),
            train_size: TRAIN,
            numerics: None,
            cost: false,
        }
    }
}

/// What a run ends with.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub accuracy: f64,
    /// The last epoch's time (the custom loop's; the Learner keeps its own).
    pub last_epoch_seconds: Option<f64>,
    /// The whole run, data loading included.
    pub seconds: f64,
    /// The loss scale at the end, under policies that scale the loss.
    pub loss_scale: Option<f32>,
    pub skipped: u64,
}

/// The share of `test` digits the model classifies right.
pub fn test_accuracy<B: Backend>(
    model: &KerasMlp<B>,
    test: &[Digit],
    batch_size: usize,
    device: &B::Device,
) -> f64 {
    let correct: usize = test
        .chunks(batch_size)
        .map(|chunk| model.correct(DigitBatcher.batch(chunk.to_vec(), device)))
        .sum();
    correct as f64 / test.len() as f64
}

/// Trains the Keras model on backend `B` under `options.policy`; returns the test accuracy
/// with the run's times and loss-scale state.
pub fn run<B: AutodiffBackend>(device: B::Device, options: &Options) -> Result<Outcome, String> {
    let start = std::time::Instant::now();
    // The policy, checked against the device: a typed error when the backend cannot run it.
    MixedPrecision::<B>::set_policy(&device, options.policy).map_err(|e| e.to_string())?;
    <MixedPrecision<B> as Backend>::seed(&device, options.seed);
    let digits = data::load(&options.data)?;
    let (train, test) = digits.split_at(TRAIN.min(digits.len()));
    let train = &train[..options.train_size.min(train.len())];
    println!(
        "burn-amp mnist: policy {}  backend {}  mode {:?}  epochs {}  batch {}  train {}  test {}",
        options.policy,
        <MixedPrecision<B> as Backend>::name(&device),
        options.mode,
        options.epochs,
        options.batch_size,
        train.len(),
        test.len()
    );
    let mut outcome = match options.mode {
        Mode::CustomLoop => {
            let last = custom_loop::train::<B>(&device, options, train, test);
            Outcome {
                accuracy: last.test_accuracy,
                last_epoch_seconds: Some(last.seconds),
                seconds: 0.0,
                loss_scale: last.loss_scale,
                skipped: last.skipped,
            }
        }
        Mode::Learner => Outcome {
            accuracy: learner::train::<B>(&device, options, train, test),
            last_epoch_seconds: None,
            seconds: 0.0,
            loss_scale: None,
            skipped: 0,
        },
    };
    outcome.seconds = start.elapsed().as_secs_f64();
    MixedPrecision::<B>::clear_policy(&device);
    Ok(outcome)
}
