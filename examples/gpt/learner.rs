//! `--learner`: the same model and data through burn-train's `Learner`. On a terminal Burn's
//! own dashboard shows the loss, learning rate, loss scale and skipped steps; otherwise a line
//! every 5% of the run shows the same metrics. The model's `TrainStep` calls
//! `loss.backward()` as usual.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Instant;

use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::InMemDataset;
use burn::lr_scheduler::LrScheduler;
use burn::optim::LearningRate;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::train::metric::{
    AccuracyMetric, LearningRateMetric, LossMetric, MetricDefinition, MetricId, NumericEntry,
};
use burn::train::renderer::{
    EvaluationName, EvaluationProgress, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining, ProgressType, TrainingProgress,
};
use burn::train::{Learner, SupervisedTraining};
use burn_amp::{LossScaleMetric, MixedPrecision, SkippedStepsMetric};

use crate::config::TrainConfig;
use crate::custom_loop::{optimizer, validation_loss};
use crate::data::{self, Corpus, Rng, TextBatcher};
use crate::generate;
use crate::model::Gpt;
use crate::run::{Options, Summary, label};

/// The custom loop's schedule (warmup, cosine) as a Burn `LrScheduler`.
#[derive(Clone)]
struct Schedule {
    config: TrainConfig,
    step: usize,
}

impl LrScheduler for Schedule {
    type Record<B: Backend> = usize;

    fn step(&mut self) -> LearningRate {
        let lr = self.config.lr_at(self.step);
        self.step += 1;
        lr
    }

    fn to_record<B: Backend>(&self) -> usize {
        self.step
    }

    fn load_record<B: Backend>(mut self, step: usize) -> Self {
        self.step = step;
        self
    }
}

pub fn train<B: AutodiffBackend>(
    device: &B::Device,
    options: &Options,
    corpus: &Corpus,
) -> Result<Summary, String> {
    type M<B> = MixedPrecision<B>;
    let config = &options.train;
    let seq_len = config.model.seq_len;
    let dir = std::env::temp_dir().join(format!("burn-amp-gpt-{}", std::process::id()));

    // One pass over `steps x batch` random windows (the same generator as the custom loop),
    // then validation on the fixed held-out windows.
    let mut rng = Rng(options.seed);
    let starts = data::random_starts(
        &mut rng,
        corpus.train.len(),
        seq_len,
        config.steps * config.batch_size,
    );
    let windows = corpus.validation_windows(config);
    let (train_batcher, valid_batcher) = TextBatcher::pair(corpus, seq_len);
    let train_loader = DataLoaderBuilder::<M<B>, _, _>::new(train_batcher)
        .batch_size(config.batch_size)
        .build(InMemDataset::new(starts));
    let valid_loader = DataLoaderBuilder::<M<B::InnerBackend>, _, _>::new(valid_batcher.clone())
        .batch_size(config.batch_size)
        .build(InMemDataset::new(windows.concat()));

    let model: Gpt<M<B>> = config.model.init(device);
    let optim = optimizer::<B>(options, device)?;
    let handle = optim.handle();
    let schedule = Schedule {
        config: config.clone(),
        step: 0,
    };

    let start = Instant::now();
    let mut training = SupervisedTraining::new(&dir, train_loader, valid_loader)
        .metrics((LossMetric::new(), AccuracyMetric::new()))
        .metric_train_numeric(LearningRateMetric::new())
        .metric_train_numeric(LossScaleMetric::new(handle.clone()))
        .metric_train_numeric(SkippedStepsMetric::new(handle.clone()))
        .num_epochs(1);
    if !std::io::stdout().is_terminal() {
        training = training.renderer(Lines::default());
    }
    let result = training.launch(Learner::new(model, optim, schedule));
    let tokens_per_second =
        (config.steps * config.tokens_per_step()) as f64 / start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&dir);

    let valid = validation_loss(&result.model, &valid_batcher, &windows, device);
    let scaled = options.policy.needs_loss_scaling();
    let sample = generate::sample(
        &result.model,
        options.sample_len,
        seq_len,
        options.seed,
        device,
    );
    println!(
        "{} (Learner): validation loss {valid:.4}  {:.0} tok/s (validation included)  skipped {}  loss scale {}",
        label(&options.policy),
        tokens_per_second,
        handle.skipped_steps(),
        if scaled {
            handle.scale().to_string()
        } else {
            "-".into()
        }
    );
    if !sample.is_empty() {
        println!("--- sample ({}) ---\n{sample}\n---", label(&options.policy));
    }
    Ok(Summary {
        policy: options.policy,
        train_losses: Vec::new(),
        valid_losses: vec![(config.steps, valid)],
        tokens_per_second,
        peak_heap_bytes: 0,
        skipped_steps: handle.skipped_steps(),
        loss_scale: scaled.then(|| handle.scale()),
        scale_changes: 0,
        sample,
        costs: Vec::new(),
    })
}

/// Off a terminal: the latest value of each training metric, a line every 5% of the run.
#[derive(Default)]
struct Lines {
    names: HashMap<MetricId, String>,
    latest: Vec<(String, f64)>,
    printed: usize,
}

impl Lines {
    fn record(&mut self, state: MetricState) {
        let MetricState::Numeric(entry, value) = state else {
            return;
        };
        let value = match value {
            NumericEntry::Value(v) => v,
            NumericEntry::Aggregated {
                aggregated_value, ..
            } => aggregated_value,
        };
        let name = self
            .names
            .get(&entry.metric_id)
            .cloned()
            .unwrap_or_default();
        match self.latest.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.latest.push((name, value)),
        }
    }
}

impl MetricsRendererTraining for Lines {
    fn update_train(&mut self, state: MetricState) {
        self.record(state);
    }

    fn update_valid(&mut self, _: MetricState) {}

    fn render_train(&mut self, item: TrainingProgress, _: Vec<ProgressType>) {
        let Some(p) = item.progress else { return };
        let twentieth = p.items_processed * 20 / p.items_total.max(1);
        if twentieth > self.printed {
            self.printed = twentieth;
            let metrics: Vec<String> = self
                .latest
                .iter()
                .map(|(name, value)| format!("{name} {value:.4}"))
                .collect();
            println!(
                "  Learner [{}/{} windows]  {}",
                p.items_processed,
                p.items_total,
                metrics.join("  ")
            );
        }
    }

    fn render_valid(&mut self, _: TrainingProgress, _: Vec<ProgressType>) {}
}

impl MetricsRendererEvaluation for Lines {
    fn update_test(&mut self, _: EvaluationName, _: MetricState) {}
    fn render_test(&mut self, _: EvaluationProgress, _: Vec<ProgressType>) {}
}

impl MetricsRenderer for Lines {
    fn manual_close(&mut self) {}

    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names.insert(definition.metric_id, definition.name);
    }
}
