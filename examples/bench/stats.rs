//! Repeated measurements and their summary: median, min, max.

use std::time::Instant;

#[derive(Clone, Copy, Debug)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Summary {
    pub fn of(mut xs: Vec<f64>) -> Self {
        xs.sort_by(f64::total_cmp);
        let n = xs.len();
        let median = if n % 2 == 1 {
            xs[n / 2]
        } else {
            (xs[n / 2 - 1] + xs[n / 2]) / 2.0
        };
        Self {
            median,
            min: xs[0],
            max: xs[n - 1],
        }
    }

    /// Milliseconds, as `median (min-max)`.
    pub fn ms(&self) -> String {
        format!(
            "{:.1} ({:.1}-{:.1})",
            self.median * 1e3,
            self.min * 1e3,
            self.max * 1e3
        )
    }
}

/// Times `a` and `b` alternately (ABAB...), so drift in the machine's speed hits both alike.
pub fn time_pair(
    warmup: usize,
    runs: usize,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (Summary, Summary) {
    for _ in 0..warmup {
        a();
        b();
    }
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        let start = Instant::now();
        a();
        ta.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        b();
        tb.push(start.elapsed().as_secs_f64());
    }
    (Summary::of(ta), Summary::of(tb))
}
