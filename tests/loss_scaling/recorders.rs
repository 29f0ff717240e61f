//! Every record the crate defines goes through every recorder Burn 0.21 ships (bincode,
//! named MessagePack, pretty JSON, gzipped JSON and the rest; full and half precision
//! settings) in the states users reach: fresh, mid-training, right after a skipped step
//! under every policy, and right after a streak of overflowing steps under FP8 delayed
//! scaling (whose gradient role then has observed non-finite amaxes). With full precision
//! the loaded optimizer continues bit for bit as the one never saved; with half precision
//! (moments stored in f16) it loads and keeps the loss scale and the FP8 state. And a
//! refused record is a typed error that changes nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use burn::module::{Module, ParamId};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, AdamWConfig, GradientsParams, Optimizer};
use burn::record::{
    BinBytesRecorder, BinFileRecorder, BinGzFileRecorder, FileRecorder, FullPrecisionSettings,
    HalfPrecisionSettings, JsonGzFileRecorder, NamedMpkBytesRecorder, NamedMpkFileRecorder,
    NamedMpkGzFileRecorder, PrettyJsonFileRecorder, Record, Recorder,
};
use burn_amp::fp8::{AmaxCompute, DelayedScaling, Fp8Cast, Fp8Format};
use burn_amp::optim::RecordError;
use burn_amp::{
    FusedAdamWConfig, LossScaleConfig, LossScaleError, LossScaleOptimizer,
    LossScaleOptimizerRecord, Policy, with_policy,
};

use super::common::{Mlp, teacher_batch};
use super::matrix::POLICIES;
use super::{Fx, FxDevice, per_param_bytes, serial};

/// The FP8 policy whose gradient role sees the overflows: delayed scaling, f16 compute.
const FP8_DELAYED_F16: &str = "params=float32,compute=float16,output=float32,fp8=delayed";

/// One training step: a plain one, one whose loss is infinite (skipped under every policy),
/// or one whose loss is 1e30 times larger (its f16 gradients overflow: skipped, and the FP8
/// gradient role observes an infinite amax).
#[derive(Clone, Copy, Debug)]
enum Step {
    Plain,
    Poisoned,
    Overflowing,
}

/// The states a checkpoint is taken in, as the steps before it. A policy without a loss
/// scale (`float32`, the bf16 ones) skips no step: its `LossScaleOptimizer` passes every
/// gradient through, and an infinite loss makes a diverged run, whose non-finite moments
/// `FusedAdamW` refuses to load (tested in `records.rs`); such a policy is checkpointed
/// mid-training instead.
fn states(policy: &str) -> Vec<(&'static str, Vec<Step>)> {
    use Step::*;
    let skips = policy.parse::<Policy>().unwrap().needs_loss_scaling();
    let mut states = vec![("fresh", vec![]), ("mid-training", vec![Plain; 4])];
    states.push(if skips {
        ("after a skipped step", vec![Plain, Plain, Plain, Poisoned])
    } else {
        ("mid-training, no step to skip", vec![Plain; 4])
    });
    if policy == FP8_DELAYED_F16 || policy == "mixed_float16" {
        states.push((
            "after five overflowing steps",
            vec![
                Plain,
                Plain,
                Plain,
                Overflowing,
                Overflowing,
                Overflowing,
                Overflowing,
                Overflowing,
            ],
        ));
    }
    states
}

/// Steps after the checkpoint.
const AFTER: usize = 4;

fn train<O: Optimizer<Mlp<Fx>, Fx>>(
    mut model: Mlp<Fx>,
    optim: &mut O,
    steps: &[Step],
    first: usize,
    device: &FxDevice,
) -> Mlp<Fx> {
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    for (i, step) in steps.iter().enumerate() {
        let (x, y) = teacher_batch::<Fx>((first + i) % 5, 16, 8, 4, device);
        let loss = loss_fn.forward(model.forward(x), y);
        let loss = match step {
            Step::Plain => loss,
            Step::Poisoned => loss.mul_scalar(f32::INFINITY),
            Step::Overflowing => loss.mul_scalar(1e30),
        };
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        model = optim.step(3e-3, model, grads);
    }
    model
}

/// A fresh path in the temporary directory (the recorder adds its extension).
fn scratch() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "burn-amp-recorders-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

fn bytes<R, Rc>(recorder: Rc, record: R, device: &FxDevice) -> Result<R, String>
where
    R: Record<Fx>,
    Rc: Recorder<Fx, RecordArgs = (), RecordOutput = Vec<u8>, LoadArgs = Vec<u8>>,
{
    let bytes = recorder.record(record, ()).map_err(|e| e.to_string())?;
    recorder.load(bytes, device).map_err(|e| e.to_string())
}

fn file<R: Record<Fx>, Rc: FileRecorder<Fx>>(
    recorder: Rc,
    record: R,
    device: &FxDevice,
) -> Result<R, String> {
    let path = scratch();
    recorder
        .record(record, path.clone())
        .map_err(|e| e.to_string())?;
    let loaded = recorder
        .load(path.clone(), device)
        .map_err(|e| e.to_string());
    let _ = std::fs::remove_file(path.with_extension(<Rc as FileRecorder<Fx>>::file_extension()));
    loaded
}

/// Whether a recorder keeps every value (full precision) or rounds floats to f16.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Precision {
    Full,
    Half,
}

/// `record` saved and loaded back by each of Burn's recorders.
fn through_every_recorder<R: Record<Fx> + Clone>(
    record: &R,
    device: &FxDevice,
) -> Vec<(String, Precision, Result<R, String>)> {
    let mut out: Vec<(String, Precision, Result<R, String>)> = Vec::new();
    macro_rules! with_settings {
        ($settings:ty, $precision:expr) => {
            let p = $precision;
            let r = || record.clone();
            out.push((
                "BinBytesRecorder".into(),
                p,
                bytes(BinBytesRecorder::<$settings>::default(), r(), device),
            ));
            out.push((
                "NamedMpkBytesRecorder".into(),
                p,
                bytes(NamedMpkBytesRecorder::<$settings>::default(), r(), device),
            ));
            out.push((
                "BinFileRecorder".into(),
                p,
                file(BinFileRecorder::<$settings>::default(), r(), device),
            ));
            out.push((
                "BinGzFileRecorder".into(),
                p,
                file(BinGzFileRecorder::<$settings>::default(), r(), device),
            ));
            out.push((
                "NamedMpkFileRecorder".into(),
                p,
                file(NamedMpkFileRecorder::<$settings>::default(), r(), device),
            ));
            out.push((
                "NamedMpkGzFileRecorder".into(),
                p,
                file(NamedMpkGzFileRecorder::<$settings>::default(), r(), device),
            ));
            out.push((
                "PrettyJsonFileRecorder".into(),
                p,
                file(PrettyJsonFileRecorder::<$settings>::default(), r(), device),
            ));
            out.push((
                "JsonGzFileRecorder".into(),
                p,
                file(JsonGzFileRecorder::<$settings>::default(), r(), device),
            ));
        };
    }
    with_settings!(FullPrecisionSettings, Precision::Full);
    with_settings!(HalfPrecisionSettings, Precision::Half);
    for (name, precision, _) in &mut out {
        name.push_str(if *precision == Precision::Full {
            "<Full>"
        } else {
            "<Half>"
        });
    }
    out
}

/// A `LossScaleOptimizer` record as values to compare: the inner state's bytes per
/// parameter (none for a fresh optimizer), and the scale, counters, schedule and FP8 state
/// as `Debug` prints them.
pub(super) fn state_of<R: Record<Fx>>(
    record: LossScaleOptimizerRecord<impl IntoIterator<Item = (ParamId, R)>>,
) -> (Vec<(String, Vec<u8>)>, String) {
    let LossScaleOptimizerRecord {
        inner,
        scale,
        good_steps,
        skipped_steps,
        total_steps,
        min_scale_schedule,
        fp8,
    } = record;
    let inner: Vec<(ParamId, R)> = inner.into_iter().collect();
    let inner = if inner.is_empty() {
        Vec::new()
    } else {
        per_param_bytes(inner)
    };
    (
        inner,
        format!(
            "{scale:?} {good_steps} {skipped_steps} {total_steps} {min_scale_schedule:?} {fp8:?}"
        ),
    )
}

fn params(model: &Mlp<Fx>) -> Vec<u8> {
    let record = model.clone().into_record();
    BinBytesRecorder::<FullPrecisionSettings>::default()
        .record(record, ())
        .expect("saved")
}

/// Trains `before` then `AFTER` steps straight; then `before`, a checkpoint through every
/// recorder, a fresh optimizer loading it, `AFTER` more: with full precision the model and
/// the optimizer's state are the bytes of the run never saved.
fn resumes_through_every_recorder<O, R>(
    what: &str,
    make: impl Fn() -> LossScaleOptimizer<O>,
    before: &[Step],
    recorders: impl Fn(&str) -> bool,
) where
    O: Optimizer<Mlp<Fx>, Fx, Record = hashbrown::HashMap<ParamId, R>>,
    R: Record<Fx> + Clone,
    LossScaleOptimizer<O>: Optimizer<Mlp<Fx>, Fx, Record = LossScaleOptimizerRecord<O::Record>>,
{
    let device = FxDevice::default();
    let after: Vec<Step> = vec![Step::Plain; AFTER];
    let start = Mlp::<Fx>::new(8, 16, 4, &device);
    let (straight_model, straight_state) = {
        let mut optim = make();
        let model = train(start.clone(), &mut optim, before, 0, &device);
        let model = train(model, &mut optim, &after, before.len(), &device);
        (params(&model), state_of(optim.to_record()))
    };
    let (checkpoint_model, record) = {
        let mut optim = make();
        let model = train(start, &mut optim, before, 0, &device);
        let overflowed = before.iter().filter(|s| !matches!(s, Step::Plain)).count() as u64;
        assert_eq!(
            optim.skipped_steps(),
            overflowed,
            "{what}: the steps skipped"
        );
        if what.starts_with(FP8_DELAYED_F16) && overflowed == 5 {
            // The state the checkpoint must survive: observed non-finite amaxes.
            let sites = optim.fp8_history().sites(&device);
            let non_finite = sites
                .iter()
                .flat_map(|s| s.roles.values())
                .flat_map(|r| r.history.iter())
                .filter(|a| !a.is_finite())
                .count();
            assert!(
                non_finite > 0,
                "{what}: no non-finite amax before the checkpoint"
            );
        }
        (model, optim.to_record())
    };
    let saved = state_of(record.clone());
    for (recorder, precision, loaded) in through_every_recorder(&record, &device) {
        if !recorders(&recorder) {
            continue;
        }
        let what = format!("{what}, {recorder}");
        let loaded = loaded.unwrap_or_else(|e| panic!("{what}: the record does not load: {e}"));
        let mut optim = make();
        if let Err(e) = optim.try_load_record::<Mlp<Fx>, Fx>(loaded) {
            panic!("{what}: the loaded record is refused: {e}");
        }
        if precision == Precision::Half {
            // Moments rounded to f16: the loss scale and the FP8 state come back as saved.
            assert_eq!(
                state_of(optim.to_record()).1,
                saved.1,
                "{what}: the loss scale's state"
            );
            continue;
        }
        let model = train(
            checkpoint_model.clone(),
            &mut optim,
            &after,
            before.len(),
            &device,
        );
        let state = state_of(optim.to_record());
        assert!(
            params(&model) == straight_model,
            "{what}: the parameters differ from the run never saved"
        );
        assert_eq!(state.1, straight_state.1, "{what}: the loss scale's state");
        assert!(
            state.0 == straight_state.0,
            "{what}: the inner optimizer's state"
        );
    }
}

fn lso_adam()
-> LossScaleOptimizer<burn::optim::adaptor::OptimizerAdaptor<burn::optim::Adam, Mlp<Fx>, Fx>> {
    LossScaleConfig::new()
        .init(AdamConfig::new().init())
        .expect("bound")
}

fn lso_fused() -> LossScaleOptimizer<burn_amp::FusedAdamW<Mlp<Fx>, Fx>> {
    LossScaleConfig::new()
        .init(FusedAdamWConfig::new().init())
        .expect("bound")
}

#[test]
fn loss_scale_optimizer_records_resume_exactly_through_every_recorder() {
    let _serial = serial();
    for spec in [
        "mixed_float16",
        FP8_DELAYED_F16,
        "params=float32,compute=bfloat16,output=float32,fp8=bias",
    ] {
        let policy: Policy = spec.parse().unwrap();
        with_policy(policy, || {
            for (state, before) in states(spec) {
                let what = format!("{spec}, {state}");
                resumes_through_every_recorder(
                    &format!("{what}, LossScaleOptimizer(Adam)"),
                    lso_adam,
                    &before,
                    |_| true,
                );
                resumes_through_every_recorder(
                    &format!("{what}, LossScaleOptimizer(FusedAdamW)"),
                    lso_fused,
                    &before,
                    |_| true,
                );
            }
        });
    }
}

#[test]
fn after_a_skipped_step_every_policy_resumes_exactly_through_json_and_messagepack() {
    // (A policy without a loss scale skips nothing: checkpointed mid-training, see `states`.)
    let _serial = serial();
    let chosen =
        |r: &str| r == "PrettyJsonFileRecorder<Full>" || r == "NamedMpkBytesRecorder<Full>";
    for spec in POLICIES {
        let policy: Policy = spec.parse().unwrap();
        let (_, before) = states(spec).remove(2);
        with_policy(policy, || {
            let what = format!("{spec}, {}", states(spec)[2].0);
            resumes_through_every_recorder(
                &format!("{what}, LossScaleOptimizer(Adam)"),
                lso_adam,
                &before,
                chosen,
            );
            resumes_through_every_recorder(
                &format!("{what}, LossScaleOptimizer(FusedAdamW)"),
                lso_fused,
                &before,
                chosen,
            );
        });
    }
}

#[test]
fn fused_adamw_and_delayed_scaling_records_go_through_every_recorder() {
    let _serial = serial();
    let device = FxDevice::default();
    with_policy(Policy::mixed_bfloat16(), || {
        let after = vec![Step::Plain; AFTER];
        let start = Mlp::<Fx>::new(8, 16, 4, &device);
        let straight = {
            let mut optim = FusedAdamWConfig::new().init::<Fx, Mlp<Fx>>();
            let model = train(start.clone(), &mut optim, &after, 0, &device);
            params(&train(model, &mut optim, &after, AFTER, &device))
        };
        let mut optim = FusedAdamWConfig::new().init::<Fx, Mlp<Fx>>();
        let checkpoint = train(start, &mut optim, &after, 0, &device);
        let record = optim.to_record();
        for (recorder, precision, loaded) in through_every_recorder(&record, &device) {
            let loaded = loaded.unwrap_or_else(|e| panic!("FusedAdamW, {recorder}: {e}"));
            let mut optim = FusedAdamWConfig::new().init::<Fx, Mlp<Fx>>();
            optim
                .try_load_record(loaded)
                .unwrap_or_else(|e| panic!("FusedAdamW, {recorder}: refused: {e}"));
            let model = train(checkpoint.clone(), &mut optim, &after, AFTER, &device);
            if precision == Precision::Full {
                assert!(
                    params(&model) == straight,
                    "FusedAdamW, {recorder}: differs from the run never saved"
                );
            }
        }
    });

    // Delayed scaling right after an overflowing step (an infinite amax, a NaN one): every
    // recorder keeps it, and the loaded scaling moves its scale as the one never saved.
    let cast = Fp8Cast::new(Fp8Format::E4M3);
    let mut scaling = DelayedScaling::new(4, 0, AmaxCompute::Max).unwrap();
    for amax in [3.0, f32::INFINITY, f32::NAN, 12.0] {
        scaling.record(amax, cast);
    }
    assert!(
        scaling.history().all(f32::is_finite),
        "non-finite amaxes are kept as 0"
    );
    for (recorder, _, loaded) in through_every_recorder(&scaling, &device) {
        let mut loaded = loaded.unwrap_or_else(|e| panic!("DelayedScaling, {recorder}: {e}"));
        assert_eq!(loaded, scaling, "DelayedScaling, {recorder}");
        let mut never_saved = scaling.clone();
        for amax in [0.5, f32::INFINITY, 0.25, 0.125, 0.0625] {
            loaded.record(amax, cast);
            never_saved.record(amax, cast);
            assert_eq!(
                loaded.scale(),
                never_saved.scale(),
                "DelayedScaling, {recorder}"
            );
        }
    }
}

/// An optimizer that refuses every record it is given, as Burn's `load_record` does: by
/// panicking.
#[derive(Clone)]
struct Picky(burn::optim::adaptor::OptimizerAdaptor<burn::optim::Adam, Mlp<Fx>, Fx>);

impl Optimizer<Mlp<Fx>, Fx> for Picky {
    type Record =
        <burn::optim::adaptor::OptimizerAdaptor<burn::optim::Adam, Mlp<Fx>, Fx> as Optimizer<
            Mlp<Fx>,
            Fx,
        >>::Record;

    fn step(&mut self, lr: f64, module: Mlp<Fx>, grads: GradientsParams) -> Mlp<Fx> {
        self.0.step(lr, module, grads)
    }

    fn step_multi(
        &mut self,
        lr: f64,
        module: Mlp<Fx>,
        grads: burn::optim::MultiGradientsParams,
    ) -> Mlp<Fx> {
        self.0.step_multi(lr, module, grads)
    }

    fn to_record(&self) -> Self::Record {
        self.0.to_record()
    }

    fn load_record(self, _record: Self::Record) -> Self {
        panic!("this optimizer takes no record");
    }
}

#[test]
fn a_refused_inner_record_is_a_typed_error_and_changes_nothing() {
    let _serial = serial();
    let device = FxDevice::default();
    with_policy(FP8_DELAYED_F16.parse::<Policy>().unwrap(), || {
        let plain = vec![Step::Plain; 3];
        // A Burn AdamW record with AMSGrad state, which FusedAdamW does not fuse.
        let amsgrad = {
            let mut optim = AdamWConfig::new().with_amsgrad(true).init::<Fx, Mlp<Fx>>();
            train(
                Mlp::<Fx>::new(8, 16, 4, &device),
                &mut optim,
                &plain,
                0,
                &device,
            );
            optim.to_record()
        };
        let mut optim = lso_fused();
        train(
            Mlp::<Fx>::new(8, 16, 4, &device),
            &mut optim,
            &plain,
            0,
            &device,
        );
        let before = state_of(optim.to_record());
        // Everything else in the record differs from the optimizer's, so a partial load shows.
        let mut record = optim.to_record();
        record.inner = amsgrad;
        record.scale /= 2.0;
        record.total_steps += 1;
        record.fp8 = Default::default();
        let err = optim
            .try_load_record::<Mlp<Fx>, Fx>(record)
            .expect_err("an AMSGrad record is refused");
        assert!(
            matches!(err, LossScaleError::Record(RecordError::Amsgrad { .. })),
            "{err}"
        );
        assert_eq!(state_of(optim.to_record()), before, "the optimizer changed");
        drop(optim);

        // An inner optimizer whose `load_record` panics: the panic is the error.
        let mut optim = LossScaleConfig::new()
            .init(Picky(AdamConfig::new().init()))
            .expect("bound");
        train(
            Mlp::<Fx>::new(8, 16, 4, &device),
            &mut optim,
            &plain,
            0,
            &device,
        );
        let before = state_of(optim.to_record());
        let mut record = optim.to_record();
        record.scale /= 2.0;
        let err = optim
            .try_load_record::<Mlp<Fx>, Fx>(record)
            .expect_err("refused by the inner optimizer");
        assert!(
            matches!(err, LossScaleError::InvalidRecord { field: "inner", .. }),
            "{err}"
        );
        assert!(err.to_string().contains("takes no record"), "{err}");
        assert_eq!(state_of(optim.to_record()), before, "the optimizer changed");
    });
}

#[test]
fn a_delayed_scaling_item_is_checked_before_it_is_used() {
    let scaling = DelayedScaling::new(4, 0, AmaxCompute::Max).unwrap();
    let item = |f: &dyn Fn(&mut serde_json::Value)| {
        let record =
            <DelayedScaling as Record<Fx>>::into_item::<FullPrecisionSettings>(scaling.clone());
        let mut value = serde_json::to_value(record).unwrap();
        f(&mut value);
        serde_json::from_value::<burn_amp::fp8::DelayedScalingItem>(value).unwrap()
    };
    assert!(DelayedScaling::try_from_item(item(&|_| {})).is_ok());
    for (name, bad) in [
        ("length", item(&|v| v["length"] = 0.into())),
        (
            "history",
            item(&|v| v["history"] = serde_json::json!([1.0, 2.0, 3.0, 4.0, 5.0])),
        ),
        (
            "history",
            item(&|v| v["history"] = serde_json::json!([-1.0])),
        ),
        ("scale", item(&|v| v["scale"] = 0.0.into())),
        ("margin", item(&|v| v["margin"] = 1000.into())),
    ] {
        let err = DelayedScaling::try_from_item(bad).expect_err(name);
        assert!(err.to_string().contains(name), "{name}: {err}");
    }
}
