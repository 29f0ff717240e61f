//! Checkpoints hold under every policy: a few steps, the model and the optimizer saved with
//! Burn's recorders, loaded into a fresh model and a fresh optimizer, a few more steps: the
//! parameters and the optimizer's state are byte for byte those of the run never
//! interrupted. Every policy README names and the spec strings it shows (the matrix's),
//! `float16` and `bfloat16` included, crossed with Burn's Adam and `FusedAdamW`, each inside
//! a `LossScaleOptimizer` where the policy wants one (a loss scale, or FP8 state to keep).

use burn::module::{Module, ParamId};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams, Optimizer};
use burn::record::{BinBytesRecorder, FullPrecisionSettings, Record, Recorder};
use burn_amp::fp8::{Fp8Formats, Fp8Scaling};
use burn_amp::{
    FusedAdamWConfig, LossScaleConfig, LossScaleOptimizer, LossScaleOptimizerRecord, Policy,
    with_policy,
};

use super::common::{Mlp, teacher_batch};
use super::matrix::POLICIES;
use super::{Fx, FxDevice, per_param_bytes, serial};

/// Steps before the checkpoint, and after it.
const STEPS: usize = 4;

type Recorded = BinBytesRecorder<FullPrecisionSettings>;

/// Whether the policy wants a `LossScaleOptimizer`: for its loss scale, or for the FP8 state
/// (amax histories, exponent biases, format picks) it keeps across steps.
fn wants_scaler(policy: &Policy) -> bool {
    let fp8 = policy.fp8_scaling();
    policy.needs_loss_scaling()
        || fp8.is_some_and(Fp8Scaling::is_stateful)
        || (fp8.is_some() && policy.fp8_formats() == Fp8Formats::Auto)
}

/// `steps` steps of the teacher task.
fn train<O: Optimizer<Mlp<Fx>, Fx>>(
    mut model: Mlp<Fx>,
    optim: &mut O,
    steps: std::ops::Range<usize>,
    device: &FxDevice,
) -> Mlp<Fx> {
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    for step in steps {
        let (x, y) = teacher_batch::<Fx>(step % 5, 16, 8, 4, device);
        let loss = loss_fn.forward(model.forward(x), y);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(3e-3, model, grads);
    }
    model
}

/// A record saved with a recorder and loaded back, as a checkpoint is.
fn through_checkpoint<R: Record<Fx>>(record: R, device: &FxDevice) -> R {
    let bytes = Recorded::default().record(record, ()).expect("saved");
    Recorded::default().load(bytes, device).expect("loaded")
}

/// Per-parameter bytes of an optimizer's state (keyed by parameter id), and what a
/// `LossScaleOptimizer` adds (its scale, counters, schedule and FP8 state, as `Debug`
/// shows them).
type State = (Vec<(String, Vec<u8>)>, String);

/// The model's parameters, by name: their ids (which differ between two models made
/// apart) and their values' bytes, in their own dtype.
fn parameters(model: &Mlp<Fx>) -> Vec<(&'static str, String, Vec<u8>)> {
    let bias = |l: &burn::nn::Linear<Fx>| l.bias.clone().expect("a bias");
    [
        ("fc1.weight", model.fc1.weight.clone().into()),
        ("fc1.bias", bias(&model.fc1).into()),
        ("fc2.weight", model.fc2.weight.clone().into()),
        ("fc2.bias", bias(&model.fc2).into()),
        ("out.weight", model.out.weight.clone().into()),
        ("out.bias", bias(&model.out).into()),
    ]
    .into_iter()
    .map(|(name, p): (_, Param)| (name, p.0, p.1))
    .collect()
}

/// A parameter's id and bytes.
struct Param(String, Vec<u8>);

impl<const D: usize> From<burn::module::Param<burn::tensor::Tensor<Fx, D>>> for Param {
    fn from(p: burn::module::Param<burn::tensor::Tensor<Fx, D>>) -> Self {
        Self(p.id.to_string(), p.val().into_data().bytes.to_vec())
    }
}

/// The optimizer's state of each parameter, keyed by the parameter's name in `model`.
fn by_name(state: &State, model: &Mlp<Fx>) -> Vec<(&'static str, Vec<u8>)> {
    let mut named: Vec<_> = parameters(model)
        .into_iter()
        .map(|(name, id, _)| {
            let entry = state.0.iter().find(|(i, _)| *i == id);
            (
                name,
                entry.map(|(_, bytes)| bytes.clone()).unwrap_or_default(),
            )
        })
        .collect();
    named.sort();
    named
}

/// The state of Burn's Adam or `FusedAdamW` (whose record is Burn's `AdamW` record): one
/// entry per parameter.
fn bare_state<R: Record<Fx>>(record: impl IntoIterator<Item = (ParamId, R)>) -> State {
    (per_param_bytes(record), String::new())
}

fn scaler_state<R, I>(record: LossScaleOptimizerRecord<I>) -> State
where
    R: Record<Fx>,
    I: IntoIterator<Item = (ParamId, R)>,
{
    super::recorders::state_of(record)
}

/// Trains `2 * STEPS` steps straight, then `STEPS`, a checkpoint of the model and the
/// optimizer, a fresh model and optimizer loaded from it (`load`), and `STEPS` more; the
/// parameters and the state (`state`) must be the same bytes.
fn resumes_exactly<O: Optimizer<Mlp<Fx>, Fx>>(
    what: &str,
    make: impl Fn() -> O,
    load: impl Fn(O, O::Record) -> O,
    state: impl Fn(O::Record) -> State,
) {
    let device = FxDevice::default();
    let run = |model, optim: &mut O, steps| train(model, optim, steps, &device);
    let (straight_model, straight_state) = {
        let mut optim = make();
        let model = run(Mlp::new(8, 16, 4, &device), &mut optim, 0..2 * STEPS);
        (model, state(optim.to_record()))
    };
    let (model, optim_record) = {
        let mut optim = make();
        let model = run(Mlp::new(8, 16, 4, &device), &mut optim, 0..STEPS);
        let records = (model.into_record(), optim.to_record());
        through_checkpoint(records, &device)
    };
    let model = Mlp::new(8, 16, 4, &device).load_record(model);
    let mut optim = load(make(), optim_record);
    let resumed_model = run(model, &mut optim, STEPS..2 * STEPS);
    let resumed_state = state(optim.to_record());

    let values = |m: &Mlp<Fx>| -> Vec<u8> {
        parameters(m)
            .into_iter()
            .flat_map(|(_, _, bytes)| bytes)
            .collect()
    };
    let (straight, resumed) = (values(&straight_model), values(&resumed_model));
    let differing = straight
        .iter()
        .zip(&resumed)
        .filter(|(a, b)| a != b)
        .count();
    assert!(
        straight == resumed,
        "{what}: {differing} of {} parameter bytes differ from the run never interrupted",
        straight.len()
    );
    assert_eq!(
        straight_state.1, resumed_state.1,
        "{what}: the loss scale's state"
    );
    let (a, b) = (
        by_name(&straight_state, &straight_model),
        by_name(&resumed_state, &resumed_model),
    );
    for ((name, a), (_, b)) in a.iter().zip(&b) {
        assert!(!a.is_empty(), "{what}: {name} has optimizer state");
        assert!(a == b, "{what}: the optimizer's state of {name}");
    }
}

fn resume_matrix(keep: impl Fn(&Policy) -> bool) {
    let _serial = serial();
    for spec in POLICIES {
        let policy: Policy = spec.parse().unwrap();
        if !keep(&policy) {
            continue;
        }
        with_policy(policy, || {
            if wants_scaler(&policy) {
                // `try_load_record`, as a loop that handles a bad checkpoint does.
                resumes_exactly(
                    &format!("{spec}, LossScaleOptimizer(Adam)"),
                    || {
                        LossScaleConfig::new()
                            .init(AdamConfig::new().init())
                            .unwrap()
                    },
                    |mut o, r| {
                        o.try_load_record::<Mlp<Fx>, Fx>(r).unwrap();
                        o
                    },
                    scaler_state,
                );
                resumes_exactly(
                    &format!("{spec}, LossScaleOptimizer(FusedAdamW)"),
                    || LossScaleOptimizer::new(FusedAdamWConfig::new().init()),
                    Optimizer::<Mlp<Fx>, Fx>::load_record,
                    scaler_state,
                );
            } else {
                resumes_exactly(
                    &format!("{spec}, Adam"),
                    || AdamConfig::new().init(),
                    |o, r| o.load_record(r),
                    bare_state,
                );
                resumes_exactly(
                    &format!("{spec}, FusedAdamW"),
                    || FusedAdamWConfig::new().init(),
                    |mut o, r| {
                        o.try_load_record(r).unwrap();
                        o
                    },
                    bare_state,
                );
            }
        });
    }
}

#[test]
fn a_resumed_run_is_bit_identical_under_the_16_bit_variable_policies() {
    resume_matrix(|p| p.variable_dtype() != burn::tensor::FloatDType::F32);
}

#[test]
fn a_resumed_run_is_bit_identical_under_the_mixed_and_fp8_policies() {
    resume_matrix(|p| p.variable_dtype() == burn::tensor::FloatDType::F32);
}
