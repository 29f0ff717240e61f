//! A training step timed by phase (forward, backward, optimizer), two steps alternately.

use crate::stats::Summary;

/// A step's phases (forward, backward, optimizer), each summarized over the runs.
#[derive(Clone, Copy, Debug)]
pub struct Phases {
    pub total: Summary,
    pub forward: Summary,
    pub backward: Summary,
    pub optimizer: Summary,
}

impl Phases {
    fn of(runs: &[[f64; 3]]) -> Self {
        let col = |i: usize| Summary::of(runs.iter().map(|r| r[i]).collect());
        Self {
            total: Summary::of(runs.iter().map(|r| r.iter().sum()).collect()),
            forward: col(0),
            backward: col(1),
            optimizer: col(2),
        }
    }
}

/// Times two steps alternately (ABAB...) by phase.
pub fn time_pair_phases(
    warmup: usize,
    runs: usize,
    a: impl FnMut() -> [f64; 3],
    b: impl FnMut() -> [f64; 3],
) -> (Phases, Phases) {
    time_pair_phases_between(warmup, runs, a, b, || {})
}

/// [`time_pair_phases`], with `between` (untimed here; another program's step, say) after
/// each timed pair: A B between A B between...
pub fn time_pair_phases_between(
    warmup: usize,
    runs: usize,
    mut a: impl FnMut() -> [f64; 3],
    mut b: impl FnMut() -> [f64; 3],
    mut between: impl FnMut(),
) -> (Phases, Phases) {
    for _ in 0..warmup {
        a();
        b();
    }
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        ta.push(a());
        tb.push(b());
        between();
    }
    (Phases::of(&ta), Phases::of(&tb))
}
