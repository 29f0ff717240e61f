//! Checkpoints: `DIR/step-NNNNNN/` holds the model, the optimizer (AdamW's moments and the
//! loss scale with its counters) and the training state (step, sampler RNG, loss history);
//! `DIR/latest` names the newest complete one, replaced atomically after it is written.

use std::path::{Path, PathBuf};

use burn::config::Config;
use burn::module::Module;
use burn::optim::Optimizer;
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, Recorder};
use burn::tensor::backend::AutodiffBackend;

use crate::config::TrainConfig;
use crate::data::Rng;
use crate::model::{Gpt, GptRecord};

/// Everything but the tensors: enough to continue exactly where the run stopped.
#[derive(Config, Debug)]
pub struct TrainState {
    /// The policy's name; a checkpoint resumes only under the policy that wrote it.
    pub policy: String,
    pub config: TrainConfig,
    pub seed: u64,
    /// Steps done.
    pub step: usize,
    /// The batch sampler (its state is the data position).
    pub rng: Rng,
    /// The loss of every step done, in order.
    pub train_losses: Vec<f32>,
    /// `(step, validation loss)` of every validation done.
    pub valid_losses: Vec<(usize, f32)>,
}

fn recorder() -> NamedMpkFileRecorder<FullPrecisionSettings> {
    NamedMpkFileRecorder::new()
}

/// Writes a checkpoint of step `state.step`, then points `DIR/latest` at it and removes
/// all but the previous one.
pub fn save<B, O>(dir: &Path, model: &Gpt<B>, optim: &O, state: &TrainState) -> Result<(), String>
where
    B: AutodiffBackend,
    O: Optimizer<Gpt<B>, B>,
{
    let name = format!("step-{:06}", state.step);
    let path = dir.join(&name);
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        format!("checkpoint {}: {what}: {e}", path.display())
    };
    std::fs::create_dir_all(&path).map_err(|e| fail("create", &e))?;
    model
        .clone()
        .save_file(path.join("model"), &recorder())
        .map_err(|e| fail("model", &e))?;
    recorder()
        .record(optim.to_record(), path.join("optimizer"))
        .map_err(|e| fail("optimizer", &e))?;
    state
        .save(path.join("state.json"))
        .map_err(|e| fail("state", &e))?;
    let previous = latest(dir);
    let tmp = dir.join("latest.tmp");
    std::fs::write(&tmp, &name).map_err(|e| fail("latest", &e))?;
    std::fs::rename(&tmp, dir.join("latest")).map_err(|e| fail("latest", &e))?;
    // Keep this checkpoint and the one before it.
    for entry in std::fs::read_dir(dir)
        .map_err(|e| fail("list", &e))?
        .flatten()
    {
        let entry = entry.path();
        let keep = entry == path || Some(&entry) == previous.as_ref();
        let is_step = entry
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("step-"));
        if is_step && !keep {
            let _ = std::fs::remove_dir_all(entry);
        }
    }
    Ok(())
}

/// The newest complete checkpoint in `dir`, if any.
pub fn latest(dir: &Path) -> Option<PathBuf> {
    let name = std::fs::read_to_string(dir.join("latest")).ok()?;
    Some(dir.join(name.trim()))
}

/// A loaded checkpoint, checked against the run it is resumed into.
pub struct Checkpoint<B: AutodiffBackend, R> {
    pub model: GptRecord<B>,
    pub optimizer: R,
    pub state: TrainState,
}

/// Loads the newest checkpoint in `dir` (`None` when there is none). A checkpoint written
/// under another policy, model or schedule is refused: its losses would not continue the
/// run asked for.
pub fn load<B, O>(
    dir: &Path,
    policy: &str,
    config: &TrainConfig,
    seed: u64,
    device: &B::Device,
) -> Result<Option<Checkpoint<B, O::Record>>, String>
where
    B: AutodiffBackend,
    O: Optimizer<Gpt<B>, B>,
{
    let Some(path) = latest(dir) else {
        return Ok(None);
    };
    let fail = |what: &str, e: &dyn std::fmt::Display| {
        format!("checkpoint {}: {what}: {e}", path.display())
    };
    let state = TrainState::load(path.join("state.json")).map_err(|e| fail("state.json", &e))?;
    if state.policy != policy || &state.config != config || state.seed != seed {
        return Err(format!(
            "checkpoint {} was written by a run with policy {}, seed {} and {:?}; this run has \
             policy {policy}, seed {seed} and {config:?} (use another --checkpoint-dir)",
            path.display(),
            state.policy,
            state.seed,
            state.config
        ));
    }
    if state.step > config.steps || state.train_losses.len() != state.step {
        return Err(fail("state.json", &"step count and loss history disagree"));
    }
    let model = recorder()
        .load(path.join("model"), device)
        .map_err(|e| fail("model", &e))?;
    let optimizer = recorder()
        .load(path.join("optimizer"), device)
        .map_err(|e| fail("optimizer", &e))?;
    Ok(Some(Checkpoint {
        model,
        optimizer,
        state,
    }))
}
