//! Why a collective operation failed.

use core::time::Duration;

/// Why replicas could not agree on a reduction.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum CollectiveError {
    /// No result within the time allowed: a peer died, hangs, or never joined.
    #[error(
        "collective {op} on replica {rank} of {world}: no result after {after:?} (a peer \
         died, hangs or never joined)"
    )]
    Timeout {
        /// The operation (`join`, `all_reduce`).
        op: &'static str,
        /// This replica.
        rank: usize,
        /// The replicas expected.
        world: usize,
        /// The time allowed.
        after: Duration,
    },
    /// The connection to a peer broke (it exited or crashed), or could not be made.
    #[error("collective {op} on replica {rank}: replica {peer} is gone ({reason})")]
    PeerLost {
        /// The operation.
        op: &'static str,
        /// This replica.
        rank: usize,
        /// The peer (replica 0 for a replica other than 0).
        peer: usize,
        /// The system's error.
        reason: String,
    },
    /// A setting that cannot work (a rank outside the world, a world of 0).
    #[error("invalid collective setting: {0}")]
    InvalidConfig(String),
    /// The engine itself failed or is missing (its library not found, a GPU error).
    #[error("{engine}: {message}")]
    Engine {
        /// The engine (`NCCL`, `MPI`).
        engine: &'static str,
        /// What it said, and what to do where known.
        message: String,
    },
    /// The replicas' state differs in shape where it must match.
    #[error("replicas disagree: {0}")]
    Mismatch(String),
}
