//! A checkpoint cannot poison training: an invalid record is refused with a typed error and
//! the optimizer, inner state included, is left as it was.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn_amp::{
    LossScaleConfig, LossScaleError, LossScaleOptimizer, LossScaleOptimizerRecord, Policy,
    with_policy,
};

use super::common::{Mlp, teacher_batch};

type Adam = burn::optim::adaptor::OptimizerAdaptor<burn::optim::Adam, Mlp<Fx>, Fx>;
use super::{Fx, FxDevice, per_param_bytes, serial};

/// Each poisoned record, with the field its error must name. The settings allow scales in
/// [1, 2^24].
fn poisoned<R: Clone>(
    good: &LossScaleOptimizerRecord<R>,
) -> Vec<(LossScaleOptimizerRecord<R>, &'static str)> {
    let with = |f: &dyn Fn(&mut LossScaleOptimizerRecord<R>)| {
        let mut r = good.clone();
        f(&mut r);
        r
    };
    vec![
        (with(&|r| r.scale = f32::INFINITY), "scale"),
        (with(&|r| r.scale = f32::NAN), "scale"),
        (with(&|r| r.scale = 0.0), "scale"),
        (with(&|r| r.scale = -1024.0), "scale"),
        (with(&|r| r.scale = 2f32.powi(25)), "scale"),
        (with(&|r| r.scale = 0.5), "scale"),
        (
            with(&|r| r.skipped_steps = r.total_steps + 1),
            "skipped_steps",
        ),
        (
            with(&|r| r.good_steps = r.total_steps - r.skipped_steps + 1),
            "good_steps",
        ),
    ]
}

#[test]
fn invalid_records_are_refused_and_change_nothing() {
    let _serial = serial();
    let device = FxDevice::default();
    with_policy(Policy::mixed_float16(), || {
        let config = LossScaleConfig::new().with_growth_interval(1000);
        let mut optim = config
            .init(AdamConfig::new().init::<Fx, Mlp<Fx>>())
            .unwrap();
        let mut model = Mlp::<Fx>::new(8, 16, 4, &device);
        for step in 0..3 {
            let (x, y) = teacher_batch::<Fx>(step, 16, 8, 4, &device);
            let loss = CrossEntropyLossConfig::new()
                .init(&device)
                .forward(model.forward(x), y);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(1e-2, model, grads);
        }
        let good = Optimizer::<Mlp<Fx>, Fx>::to_record(&optim);
        assert_eq!(good.total_steps, 3);
        // Everything a load could change: the inner moments, the scale and its counters.
        let state = |optim: &LossScaleOptimizer<Adam>| {
            let record = Optimizer::<Mlp<Fx>, Fx>::to_record(optim);
            let counters = (
                record.scale,
                record.good_steps,
                record.skipped_steps,
                record.total_steps,
            );
            (per_param_bytes(record.inner), counters)
        };
        let before = state(&optim);

        for (record, field) in poisoned(&good) {
            let shown = format!(
                "{:?}",
                (record.scale, record.skipped_steps, record.good_steps)
            );
            let mut blank = good.clone();
            blank.inner = Default::default(); // a load that got through would empty the moments
            blank.scale = record.scale;
            blank.good_steps = record.good_steps;
            blank.skipped_steps = record.skipped_steps;
            let err = optim.try_load_record::<Mlp<Fx>, Fx>(blank).unwrap_err();
            match &err {
                LossScaleError::InvalidRecord { field: f, .. } => assert_eq!(*f, field, "{shown}"),
                other => panic!("{shown}: {other:?}"),
            }
            assert!(err.to_string().contains(field), "{err}");
            assert!(state(&optim) == before, "{shown} changed the optimizer");
        }
        // The good record still loads.
        optim.try_load_record::<Mlp<Fx>, Fx>(good).unwrap();
        assert_eq!(optim.total_steps(), 3);
    });
}

/// Burn's `Optimizer::load_record` (what the Learner calls on resume) cannot return an
/// error: it stops with the typed error's message instead of training on from poison.
#[test]
#[should_panic(expected = "invalid loss-scale record: scale = inf")]
fn the_trait_load_record_stops_on_an_invalid_record() {
    let _serial = serial();
    let optim = LossScaleConfig::new()
        .init_manual(AdamConfig::new().init::<Fx, Mlp<Fx>>())
        .unwrap();
    let mut record = Optimizer::<Mlp<Fx>, Fx>::to_record(&optim);
    record.scale = f32::INFINITY;
    let _ = Optimizer::<Mlp<Fx>, Fx>::load_record(optim, record);
}
