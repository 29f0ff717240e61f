//! The errors a policy can give: a name that is not a policy, or a policy a device cannot run.

use burn_tensor::FloatDType;

use super::Policy;
use super::names::{FP8_NAMES, SPEC_EXAMPLE, SPEC_HELP, VALID_NAMES};

/// Why a policy could not be built or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The string is neither a policy name nor a `params=…,compute=…,output=…` spec.
    #[error(
        "unknown dtype policy {name:?}{}: valid names are {}, {}, or a spec such as \"{}\"",
        did_you_mean(suggestion),
        VALID_NAMES.join(", "),
        FP8_NAMES.join(", "),
        SPEC_EXAMPLE
    )]
    UnknownName {
        /// The string that was given.
        name: String,
        /// The valid name closest to it, if one is close (a typo, another case, `-` for `_`).
        suggestion: Option<&'static str>,
    },
    /// A `params=…,compute=…,output=…` spec that is malformed. The message lists the valid
    /// keys, dtype spellings and policy names.
    #[error(
        "invalid dtype policy spec {spec:?}: {reason}; {SPEC_HELP}; or use a policy name: {}, {}",
        VALID_NAMES.join(", "),
        FP8_NAMES.join(", ")
    )]
    InvalidSpec {
        /// The spec that was given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The backend cannot run one of the policy's dtypes on the device.
    #[error(
        "backend {backend} cannot run dtype policy {policy} on device {device}: \
         it does not support {dtype:?}; policy {suggestion} runs there"
    )]
    Unsupported {
        /// The backend's name (`Backend::name`).
        backend: String,
        /// The device, as `Debug` prints it.
        device: String,
        /// The policy that was asked for.
        policy: Policy,
        /// The first dtype of the policy that the device lacks.
        dtype: FloatDType,
        /// The nearest policy the device can run.
        suggestion: Policy,
    },
    /// An FP8 policy on a backend burn-amp has no FP8 operations registered for.
    #[error(
        "backend {backend} cannot run FP8 policy {policy}: burn-amp has no FP8 operations \
         registered for it; call `burn_amp::register::<B>()` once with the inner \
         backend (it must implement `burn_amp::KernelBackend`), or use {suggestion}"
    )]
    Fp8Unavailable {
        /// The backend's name (`Backend::name`).
        backend: String,
        /// The policy that was asked for.
        policy: Policy,
        /// The same policy without FP8.
        suggestion: Policy,
    },
}

fn did_you_mean(suggestion: &Option<&'static str>) -> String {
    suggestion
        .map(|name| format!(" (did you mean {name:?}?)"))
        .unwrap_or_default()
}
