//! One training run: its options, what it reports, and the run itself (shared by `main.rs`,
//! `--compare` and the tests in `tests/gpt.rs`).

use std::path::PathBuf;

use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_amp::fp8::Fp8Scaling;
use burn_amp::{LossScaleConfig, MixedPrecision, Policy};

use crate::config::TrainConfig;
use crate::data::{self, Corpus};
use crate::{custom_loop, learner};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    CustomLoop,
    Learner,
}

#[derive(Clone, Debug)]
pub struct Options {
    pub policy: Policy,
    pub train: TrainConfig,
    pub seed: u64,
    pub data: PathBuf,
    pub mode: Mode,
    /// Write a checkpoint every this many steps (0: never).
    pub checkpoint_every: usize,
    pub checkpoint_dir: PathBuf,
    /// Continue from the newest checkpoint in `checkpoint_dir`, if there is one.
    pub resume: bool,
    /// Stop after this many steps, as if the run were killed there (to show `--resume`).
    pub stop_after: Option<usize>,
    /// The loss scaling of policies that need it (`mixed_float16`).
    pub loss_scale: LossScaleConfig,
    /// Bytes of text generated at the end (0: none).
    pub sample_len: usize,
    /// Count what each training step costs (`burn_amp::cost`; the custom loop only).
    pub cost: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            policy: Policy::mixed_bfloat16(),
            train: TrainConfig::cpu(),
            seed: 1337,
            data: data::default_path(),
            mode: Mode::CustomLoop,
            checkpoint_every: 0,
            checkpoint_dir: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("target/gpt/checkpoints"),
            resume: false,
            stop_after: None,
            loss_scale: LossScaleConfig::new(),
            sample_len: 300,
            cost: false,
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug)]
pub struct Summary {
    pub policy: Policy,
    /// The loss of every step, resumed steps included.
    pub train_losses: Vec<f32>,
    /// `(step, validation loss)`.
    pub valid_losses: Vec<(usize, f32)>,
    /// Training throughput of the steps this process ran (validation and checkpoints not
    /// counted).
    pub tokens_per_second: f64,
    /// The most heap in use during the run (Flex and NdArray keep tensors there; other
    /// backends keep them on the device and this is 0 without the example's allocator).
    pub peak_heap_bytes: usize,
    pub skipped_steps: u64,
    /// The loss scale at the end, under policies that need one.
    pub loss_scale: Option<f32>,
    /// Loss-scale changes (up or down) during the steps this process ran.
    pub scale_changes: usize,
    /// Generated text.
    pub sample: String,
    /// What each training step cost, under `--cost` (custom loop).
    pub costs: Vec<burn_amp::cost::StepCost>,
}

impl Summary {
    pub fn final_valid_loss(&self) -> f32 {
        self.valid_losses.last().map_or(f32::NAN, |v| v.1)
    }
}

/// A short label for tables and plots.
pub fn label(policy: &Policy) -> String {
    match policy.fp8_scaling() {
        Some(Fp8Scaling::Blockwise) => {
            let base = policy.without_fp8();
            format!("float8_from_{base} (blockwise)")
        }
        _ => policy.to_string(),
    }
}

/// The five policies `--compare` trains.
pub fn compared_policies() -> Vec<Policy> {
    vec![
        Policy::float32(),
        Policy::mixed_bfloat16(),
        Policy::mixed_float16(),
        Policy::float8_from_mixed_bfloat16(),
        Policy::float8_from_mixed_bfloat16().with_fp8_scaling(Fp8Scaling::Blockwise),
    ]
}

/// Trains the model on backend `B` under `options.policy`.
pub fn run<B: AutodiffBackend>(device: B::Device, options: &Options) -> Result<Summary, String> {
    options.train.check()?;
    MixedPrecision::<B>::set_policy(&device, options.policy).map_err(|e| e.to_string())?;
    <MixedPrecision<B> as Backend>::seed(&device, options.seed);
    let corpus: Corpus = data::load(&options.data, options.train.model.seq_len)?;
    let m = &options.train.model;
    println!(
        "burn-amp gpt: policy {}  backend {}  {:?}  d_model {}  layers {}  heads {}  context {}  batch {}  steps {}  text {} + {} bytes",
        label(&options.policy),
        <MixedPrecision<B> as Backend>::name(&device),
        options.mode,
        m.d_model,
        m.n_layers,
        m.n_heads,
        m.seq_len,
        options.train.batch_size,
        options.train.steps,
        corpus.train.len(),
        corpus.valid.len()
    );
    let summary = match options.mode {
        Mode::CustomLoop => custom_loop::train::<B>(&device, options, &corpus),
        Mode::Learner => learner::train::<B>(&device, options, &corpus),
    };
    MixedPrecision::<B>::clear_policy(&device);
    summary
}
