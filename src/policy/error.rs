//! The errors a policy can give: a name that is not a policy, or a policy a device cannot run.

use burn_tensor::FloatDType;

use super::Policy;
use super::parse::{SPEC_EXAMPLE, VALID_NAMES};

/// Why a policy could not be built or used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The string is neither a policy name nor a `params=…,compute=…,output=…` spec.
    #[error(
        "unknown dtype policy {name:?}: valid names are {}, or a spec such as \"{}\"",
        VALID_NAMES.join(", "),
        SPEC_EXAMPLE
    )]
    UnknownName {
        /// The string that was given.
        name: String,
    },
    /// A `params=…,compute=…,output=…` spec that is malformed.
    #[error("invalid dtype policy spec {spec:?}: {reason}")]
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
}
