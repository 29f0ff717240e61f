//! The model's shape and the training presets: `cpu` (the default, minutes on 2 cores) and
//! `gpu` (a GPT-2-small-sized model for one GPU).

use burn::config::Config;

/// The decoder's shape. Byte-level: the vocabulary is the 256 byte values.
#[derive(Config, Debug, PartialEq)]
pub struct GptConfig {
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    /// The context length in bytes.
    pub seq_len: usize,
    #[config(default = 256)]
    pub vocab: usize,
    #[config(default = 0.0)]
    pub dropout: f64,
}

/// How long and how fast to train.
#[derive(Config, Debug, PartialEq)]
pub struct TrainConfig {
    pub model: GptConfig,
    pub batch_size: usize,
    pub steps: usize,
    /// The peak learning rate (AdamW), reached after `warmup` steps, then cosine decay to a
    /// tenth of it at `steps`.
    pub lr: f64,
    pub warmup: usize,
    /// Validation every this many steps (and after the last one).
    pub eval_every: usize,
    /// Validation batches: the same held-out windows every time, for every policy.
    pub eval_batches: usize,
}

impl TrainConfig {
    /// The default: the shape of nanoGPT's CPU configuration of its Shakespeare model (4
    /// layers, 4 heads, d_model 128, context 64, batch 12, no dropout), trained 800 steps
    /// instead of 2,000 so that `--compare`'s five policies fit in half an hour on 2 cores.
    pub fn cpu() -> Self {
        Self::new(GptConfig::new(128, 4, 4, 64), 12, 800, 1e-3, 50, 100, 20)
    }

    /// For a GPU: d_model 768, 12 layers, 12 heads, context 1,024 (GPT-2 small's shape).
    pub fn gpu() -> Self {
        Self::new(
            GptConfig::new(768, 12, 12, 1024).with_dropout(0.1),
            16,
            3000,
            6e-4,
            200,
            250,
            20,
        )
    }

    /// A few-second run for tests: 2 layers of width 32, context 32.
    pub fn tiny() -> Self {
        Self::new(GptConfig::new(32, 2, 2, 32), 8, 40, 3e-3, 5, 20, 4)
    }

    /// `cpu`, `gpu` or `tiny`.
    pub fn preset(name: &str) -> Result<Self, String> {
        match name {
            "cpu" => Ok(Self::cpu()),
            "gpu" => Ok(Self::gpu()),
            "tiny" => Ok(Self::tiny()),
            other => Err(format!("unknown preset {other:?}; use cpu, gpu or tiny")),
        }
    }

    /// The learning rate of step `step` (0-based): linear warmup, then cosine to lr / 10.
    pub fn lr_at(&self, step: usize) -> f64 {
        let min = self.lr / 10.0;
        if step < self.warmup {
            return self.lr * (step + 1) as f64 / self.warmup as f64;
        }
        let span = self.steps.saturating_sub(self.warmup).max(1) as f64;
        let progress = ((step - self.warmup) as f64 / span).min(1.0);
        min + 0.5 * (self.lr - min) * (1.0 + (std::f64::consts::PI * progress).cos())
    }

    /// Bytes of text one step trains on.
    pub fn tokens_per_step(&self) -> usize {
        self.batch_size * self.model.seq_len
    }

    pub fn check(&self) -> Result<(), String> {
        let m = &self.model;
        if m.d_model == 0 || m.n_heads == 0 || !m.d_model.is_multiple_of(m.n_heads) {
            return Err(format!(
                "d_model {} must be a positive multiple of n_heads {}",
                m.d_model, m.n_heads
            ));
        }
        if m.n_layers == 0 || m.seq_len < 2 || self.batch_size == 0 || self.steps == 0 {
            return Err(
                "layers, batch size and steps must be at least 1, seq_len at least 2".into(),
            );
        }
        if self.eval_every == 0 || self.eval_batches == 0 {
            return Err("--eval-every and eval batches must be at least 1".into());
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err("--lr must be a positive number".into());
        }
        if !(0.0..1.0).contains(&m.dropout) {
            return Err("dropout must be in [0, 1)".into());
        }
        Ok(())
    }
}
