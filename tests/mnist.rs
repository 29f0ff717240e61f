//! The Keras guide's MNIST model trained 5 epochs on the 8,000 training digits: the mixed
//! policies reach the float32 test accuracy within 1.5 points, two standard errors of the
//! difference on the 2,000 test digits.
//! Runs the example's own code (`examples/mnist/`). Long (about 15 minutes on 2 cores), so
//! it needs `--features slow-tests`, which `./scripts/test.sh` and CI turn on.

#[path = "../examples/mnist/custom_loop.rs"]
mod custom_loop;
#[path = "../examples/mnist/data.rs"]
mod data;
#[path = "../examples/mnist/learner.rs"]
mod learner;
#[path = "../examples/mnist/model.rs"]
mod model;
#[path = "../examples/mnist/numerics.rs"]
mod numerics;
#[path = "../examples/mnist/report.rs"]
mod report;
#[path = "../examples/mnist/run.rs"]
mod run;

use std::sync::{Mutex, MutexGuard};

use burn::backend::{Autodiff, Flex};
use burn_amp::Policy;
use run::{Mode, Options};

/// Every run sets the Flex device's policy and binds a loss scale (the Learner's to the
/// device, the custom loop's as the default); both are process-wide, so two runs on the same
/// device at once would train under each other's policy and scale. The tests take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The example's default run (5 epochs, custom loop) under `policy`.
fn outcome(policy: Policy) -> run::Outcome {
    let options = Options {
        policy,
        ..Options::default()
    };
    let outcome = run::run::<Autodiff<Flex>>(Default::default(), &options).unwrap();
    // What `--compare` reports: the custom loop's last epoch, and a loss scale exactly
    // under the policies that scale the loss.
    assert!(outcome.last_epoch_seconds.is_some(), "{outcome:?}");
    assert_eq!(
        outcome.loss_scale.is_some(),
        policy.needs_loss_scaling(),
        "{outcome:?}"
    );
    outcome
}

/// The test accuracy of the example's default run under `policy`.
fn accuracy(policy: Policy) -> f64 {
    outcome(policy).accuracy
}

#[test]
fn mixed_policies_reach_the_float32_accuracy_within_sampling_noise_on_flex() {
    let _serial = serial();
    let float32 = accuracy(Policy::float32());
    let f16_run = outcome(Policy::mixed_float16());
    // The loss scale settles without skipping more than 1% of the 315 steps.
    assert!(
        f16_run.skipped <= 3,
        "mixed_float16 skipped {}",
        f16_run.skipped
    );
    let f16 = f16_run.accuracy;
    let bf16 = accuracy(Policy::mixed_bfloat16());
    eprintln!(
        "test accuracy: float32 {float32:.4}, mixed_float16 {f16:.4}, mixed_bfloat16 {bf16:.4}"
    );
    assert!(
        float32 > 0.94,
        "float32 trains the model to Keras' level: {float32}"
    );
    // No more than 1.5 points below float32. On 2,000 test digits one standard error of an
    // accuracy near 0.96 is 0.44 points, so the difference of two runs has a standard error
    // of about 0.62: 1.5 points is a bit over two of them. The former 0.5-point bar was
    // inside that noise; it passed while a concurrent test changed the device's policy under
    // the float32 run, and failed once the tests took turns (float32 0.9600, mixed_float16
    // 0.9490, mixed_bfloat16 0.9575, 0 skipped steps, scale 32768 throughout).
    for (name, acc) in [("mixed_float16", f16), ("mixed_bfloat16", bf16)] {
        assert!(acc >= float32 - 0.015, "{name}: {acc} vs float32 {float32}");
    }
}

/// FP8 (simulated, on Flex's portable path) costs about 2.5 minutes an epoch in a release
/// build and far more in the test profile, whose burn-amp code is unoptimized: too long for
/// CI, so it runs on request.
#[test]
#[ignore = "about 15 minutes in release: cargo test --release --features slow-tests --test mnist -- --ignored"]
fn float8_from_mixed_bfloat16_reaches_the_float32_accuracy_within_one_point_on_flex() {
    let _serial = serial();
    let float32 = accuracy(Policy::float32());
    let fp8 = accuracy(Policy::float8_from_mixed_bfloat16());
    eprintln!("test accuracy: float32 {float32:.4}, float8_from_mixed_bfloat16 {fp8:.4}");
    assert!(fp8 >= float32 - 0.01, "FP8: {fp8} vs float32 {float32}");
}

#[test]
fn the_learner_path_trains_the_keras_model_under_mixed_float16() {
    let _serial = serial();
    let options = Options {
        epochs: 1,
        mode: Mode::Learner,
        ..Options::default()
    };
    let accuracy = run::run::<Autodiff<Flex>>(Default::default(), &options)
        .unwrap()
        .accuracy;
    assert!(
        accuracy > 0.9,
        "one epoch through burn-train's Learner: {accuracy}"
    );
}
