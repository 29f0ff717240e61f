//! Training with Burn's `Learner` (`SupervisedTraining`): the model's `TrainStep` calls
//! `loss.backward()` as usual; the only changes are the backend type and the wrapped
//! optimizer. The loss scale and skipped steps are Learner metrics.

use std::collections::HashMap;
use std::time::Instant;

use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::InMemDataset;
use burn::tensor::backend::AutodiffBackend;
use burn::train::metric::{AccuracyMetric, LossMetric, MetricDefinition, MetricId};
use burn::train::renderer::{
    EvaluationProgress, MetricState, MetricsRenderer, MetricsRendererEvaluation,
    MetricsRendererTraining, ProgressType, TrainingProgress,
};
use burn::train::{Learner, SupervisedTraining};
use burn_amp::{
    FusedAdamWConfig, LossScale, LossScaleConfig, LossScaleMetric, MixedPrecision,
    SkippedStepsMetric,
};

use crate::data::{Digit, DigitBatcher};
use crate::model::KerasMlp;
use crate::report::{EpochLine, Progress};
use crate::run::{Options, test_accuracy};

pub fn train<B: AutodiffBackend>(
    device: &B::Device,
    options: &Options,
    train: &[Digit],
    test: &[Digit],
) -> f64 {
    type M<B> = MixedPrecision<B>;
    let dir = std::env::temp_dir().join(format!("burn-amp-mnist-{}", std::process::id()));
    let train_loader = DataLoaderBuilder::<M<B>, _, _>::new(DigitBatcher)
        .batch_size(options.batch_size)
        .shuffle(options.seed)
        .build(InMemDataset::new(train.to_vec()));
    let valid_loader = DataLoaderBuilder::<M<B::InnerBackend>, _, _>::new(DigitBatcher)
        .batch_size(options.batch_size)
        .build(InMemDataset::new(test.to_vec()));

    let model = KerasMlp::<M<B>>::new(device);
    // Bound to the device the Learner trains on: its backward passes apply this scale.
    let optim = LossScaleConfig::new()
        .init_on(
            FusedAdamWConfig::adam().init::<M<B>, KerasMlp<M<B>>>(),
            core::slice::from_ref(device),
        )
        .expect("no other automatic LossScaleOptimizer is bound to the device");
    let handle = optim.handle();
    let renderer = EpochRenderer::new(
        options.policy.needs_loss_scaling().then(|| handle.clone()),
        options.epochs,
    );

    let result = SupervisedTraining::new(&dir, train_loader, valid_loader)
        .metrics((AccuracyMetric::new(), LossMetric::new()))
        .metric_train_numeric(LossScaleMetric::new(handle.clone()))
        .metric_train_numeric(SkippedStepsMetric::new(handle))
        .renderer(renderer)
        .num_epochs(options.epochs)
        .launch(Learner::new(model, optim, options.lr));
    let _ = std::fs::remove_dir_all(&dir);
    test_accuracy(&result.model, test, options.batch_size, device)
}

/// Running means of the numeric metrics of one split, by name.
#[derive(Default)]
struct Means(HashMap<String, (f64, usize)>);

impl Means {
    fn add(&mut self, name: &str, state: &MetricState) {
        if let MetricState::Numeric(_, entry) = state {
            let (value, count) = match entry {
                burn::train::metric::NumericEntry::Value(v) => (*v, 1),
                burn::train::metric::NumericEntry::Aggregated {
                    aggregated_value,
                    count,
                } => (*aggregated_value, *count),
            };
            let slot = self.0.entry(name.to_string()).or_default();
            slot.0 += value * count as f64;
            slot.1 += count;
        }
    }

    fn mean(&self, name: &str) -> f64 {
        self.0
            .get(name)
            .map(|(s, c)| s / *c.max(&1) as f64)
            .unwrap_or(f64::NAN)
    }
}

/// Prints one line per epoch (after its validation pass) and progress in between.
struct EpochRenderer {
    names: HashMap<MetricId, String>,
    handle: Option<LossScale>,
    epochs: usize,
    train: Means,
    valid: Means,
    progress: Progress,
    epoch: usize,
    start: Instant,
}

impl EpochRenderer {
    fn new(handle: Option<LossScale>, epochs: usize) -> Self {
        Self {
            names: HashMap::new(),
            handle,
            epochs,
            train: Means::default(),
            valid: Means::default(),
            progress: Progress::new(),
            epoch: 0,
            start: Instant::now(),
        }
    }

    fn name(&self, state: &MetricState) -> String {
        let entry = match state {
            MetricState::Generic(e) | MetricState::Numeric(e, _) => e,
        };
        self.names
            .get(&entry.metric_id)
            .cloned()
            .unwrap_or_default()
    }
}

impl MetricsRendererTraining for EpochRenderer {
    fn update_train(&mut self, state: MetricState) {
        let name = self.name(&state);
        self.train.add(&name, &state);
    }

    fn update_valid(&mut self, state: MetricState) {
        let name = self.name(&state);
        self.valid.add(&name, &state);
    }

    fn render_train(&mut self, item: TrainingProgress, _: Vec<ProgressType>) {
        let epoch = item.global_progress.items_processed;
        if epoch != self.epoch {
            self.epoch = epoch;
            self.start = Instant::now();
            self.progress = Progress::new();
        }
        if let Some(p) = item.progress {
            let loss = Some(self.train.mean("Loss"));
            self.progress
                .update(epoch, p.items_processed, p.items_total, loss);
        }
    }

    fn render_valid(&mut self, item: TrainingProgress, _: Vec<ProgressType>) {
        let Some(p) = item.progress else { return };
        if p.items_processed < p.items_total {
            return;
        }
        EpochLine {
            epoch: self.epoch,
            epochs: self.epochs,
            loss: self.train.mean("Loss"),
            train_accuracy: self.train.mean("Accuracy") / 100.0,
            test_accuracy: self.valid.mean("Accuracy") / 100.0,
            loss_scale: self.handle.as_ref().map(|h| h.scale()),
            skipped: self.handle.as_ref().map_or(0, |h| h.skipped_steps()),
            seconds: self.start.elapsed().as_secs_f64(),
        }
        .print();
        self.train = Means::default();
        self.valid = Means::default();
    }
}

impl MetricsRendererEvaluation for EpochRenderer {
    fn update_test(&mut self, _: burn::train::renderer::EvaluationName, _: MetricState) {}
    fn render_test(&mut self, _: EvaluationProgress, _: Vec<ProgressType>) {}
}

impl MetricsRenderer for EpochRenderer {
    fn manual_close(&mut self) {}

    fn register_metric(&mut self, definition: MetricDefinition) {
        self.names.insert(definition.metric_id, definition.name);
    }
}
