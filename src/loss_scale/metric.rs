//! The loss scale and the skipped steps as `burn-train` metrics.

use std::sync::Arc;

use burn::train::metric::state::{FormatOptions, NumericMetricState};
use burn::train::metric::{
    Metric, MetricAttributes, MetricMetadata, MetricName, Numeric, NumericAttributes, NumericEntry,
    SerializedEntry,
};

use super::LossScale;

/// Which number of a [`LossScale`] a metric shows.
#[derive(Clone, Copy)]
enum Reading {
    Scale,
    Skipped,
}

#[derive(Clone)]
struct LossScaleReading {
    handle: LossScale,
    reading: Reading,
    name: MetricName,
    state: NumericMetricState,
}

impl LossScaleReading {
    fn new(handle: LossScale, reading: Reading, name: &str) -> Self {
        Self {
            handle,
            reading,
            name: Arc::new(name.to_string()),
            state: NumericMetricState::new(),
        }
    }

    fn update(&mut self) -> SerializedEntry {
        let (value, precision) = match self.reading {
            Reading::Scale => (self.handle.scale() as f64, 0),
            Reading::Skipped => (self.handle.skipped_steps() as f64, 0),
        };
        self.state.update(
            value,
            1,
            FormatOptions::new(self.name.clone()).precision(precision),
        )
    }
}

macro_rules! reading_metric {
    ($(#[$doc:meta])* $name:ident, $reading:expr, $label:literal) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $name(LossScaleReading);

        impl $name {
            /// A metric reading the given optimizer's scale
            /// ([`LossScaleOptimizer::handle`](crate::LossScaleOptimizer::handle)).
            pub fn new(handle: LossScale) -> Self {
                Self(LossScaleReading::new(handle, $reading, $label))
            }
        }

        impl Metric for $name {
            type Input = ();

            fn update(&mut self, _item: &(), _metadata: &MetricMetadata) -> SerializedEntry {
                self.0.update()
            }

            fn clear(&mut self) {
                self.0.state.reset()
            }

            fn name(&self) -> MetricName {
                self.0.name.clone()
            }

            fn attributes(&self) -> MetricAttributes {
                NumericAttributes {
                    unit: None,
                    higher_is_better: false,
                }
                .into()
            }
        }

        impl Numeric for $name {
            fn value(&self) -> NumericEntry {
                self.0.state.current_value()
            }

            fn running_value(&self) -> NumericEntry {
                self.0.state.running_value()
            }
        }
    };
}

reading_metric!(
    /// The current loss scale, as a `burn-train` metric:
    /// `.metric_train_numeric(LossScaleMetric::new(optim.handle()))`.
    LossScaleMetric,
    Reading::Scale,
    "Loss Scale"
);

reading_metric!(
    /// The number of skipped steps so far, as a `burn-train` metric.
    SkippedStepsMetric,
    Reading::Skipped,
    "Skipped Steps"
);
