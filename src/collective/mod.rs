//! Data-parallel replicas agreeing on a few numbers: the [`Collective`] seam.
//!
//! Replicas of a data-parallel run (threads, GPUs or processes) each compute gradients on
//! their shard. To stay identical they must apply the same gradients and take the same
//! decisions: the loss scaler's skip and scale, FP8 delayed scaling's amax history, APS's
//! per-layer scale. [`Collective`] is what burn-amp needs from a distributed engine for
//! that: the sum of a small f32 vector over the replicas (the maximum is derived from it,
//! see [`Collective::all_reduce_max`]). Implementations:
//!
//! - `MpiCollective` (feature `mpi`): replicas as the processes of an MPI job (`mpirun`,
//!   `srun`), on one machine or a cluster, every wait bounded in time, so a replica that
//!   hangs gives the others a [`CollectiveError`] instead of a silent hang.
//! - `DdpCollective` (feature `ddp`): the replicas of Burn's own DDP strategy, one per
//!   device in one process, on Burn's all-reduce.
//! - `NcclCollective` (feature `nccl`): processes that each own a GPU, reducing the CUDA
//!   backend's device buffers with NCCL (the NCCL id sent over MPI or any rendezvous).
//! - [`SingleReplica`]: one replica, every reduction the identity (tests, and code that
//!   runs with or without data parallelism).
//!
//! A [`LossScaleOptimizer`](crate::LossScaleOptimizer) given one
//! ([`with_collective`](crate::LossScaleOptimizer::with_collective)) reduces each step's
//! gradients itself (after APS, before the overflow check, so every replica checks the same
//! sums) and the FP8 amax histories (MAX over replicas, Transformer Engine's
//! `reduce_amax`).
//!
//! ```
//! use burn::backend::Flex;
//! use burn::tensor::Tensor;
//! use burn_amp::collective::{Collective, SingleReplica};
//!
//! let device = Default::default();
//! let one = SingleReplica;
//! let x = Tensor::<Flex, 1>::from_floats([1.0, -2.0, 3.0], &device);
//! let max = one.all_reduce_max(x.clone())?;
//! assert_eq!(max.into_data().to_vec::<f32>().unwrap(), vec![1.0, -2.0, 3.0]);
//! assert_eq!((one.rank(), one.world_size()), (0, 1));
//! # Ok::<(), burn_amp::collective::CollectiveError>(())
//! ```

#[cfg(feature = "ddp")]
mod ddp;
mod error;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(feature = "nccl")]
mod nccl;

#[cfg(feature = "mpi")]
pub use self::mpi::MpiCollective;
#[cfg(feature = "ddp")]
pub use ddp::DdpCollective;
pub use error::CollectiveError;
#[cfg(feature = "nccl")]
pub use nccl::{NcclCollective, NcclId};

use burn_tensor::backend::Backend;
use burn_tensor::{DType, FloatDType, Tensor};

/// Sums small f32 vectors over the replicas of a data-parallel run; `R` is the backend the
/// tensors live on (the raw backend under `MixedPrecision<Autodiff<R>>`).
///
/// Every replica must make the same calls in the same order with tensors of the same
/// length; the results are then the same on every replica, bit for bit.
pub trait Collective<R: Backend>: Send + Sync {
    /// This replica's number, `0..world_size()`.
    fn rank(&self) -> usize;

    /// How many replicas take part.
    fn world_size(&self) -> usize;

    /// The element-wise sum over the replicas of a 1-D f32 tensor.
    ///
    /// # Errors
    /// The engine's failure, a peer that did not answer in time, or tensors of different
    /// lengths on different replicas.
    fn all_reduce_sum(&self, tensor: Tensor<R, 1>) -> Result<Tensor<R, 1>, CollectiveError>;

    /// The element-wise maximum over the replicas of a 1-D f32 tensor.
    ///
    /// Engines with only sum and mean (Burn's `DistributedBackend`) get it, by default, as a gather: each replica writes its values into its own row of a zero matrix
    /// `[world, n]`, the matrices are summed (each entry is one replica's value plus zeros:
    /// exact, infinities and NaN included) and the rows' maximum taken on the device. The
    /// traffic is `world` times the vector's, for the few scalars this carries.
    ///
    /// # Errors
    /// As [`all_reduce_sum`](Self::all_reduce_sum).
    fn all_reduce_max(&self, tensor: Tensor<R, 1>) -> Result<Tensor<R, 1>, CollectiveError> {
        max_by_gather(tensor, self.rank(), self.world_size(), |t| {
            self.all_reduce_sum(t)
        })
    }
}

/// The maximum over `world` replicas as the exact gather over a sum (`sum`), this replica
/// writing row `rank`: see [`Collective::all_reduce_max`].
pub(crate) fn max_by_gather<R: Backend>(
    tensor: Tensor<R, 1>,
    rank: usize,
    world: usize,
    sum: impl FnOnce(Tensor<R, 1>) -> Result<Tensor<R, 1>, CollectiveError>,
) -> Result<Tensor<R, 1>, CollectiveError> {
    if world == 1 {
        return Ok(tensor);
    }
    let n = tensor.dims()[0];
    let device = tensor.device();
    let tensor = tensor.cast(FloatDType::F32);
    let rows: Vec<Tensor<R, 1>> = (0..world)
        .map(|r| {
            if r == rank {
                tensor.clone()
            } else {
                Tensor::zeros([n], (&device, DType::F32))
            }
        })
        .collect();
    let gathered = sum(Tensor::cat(rows, 0))?;
    Ok(gathered.reshape([world, n]).max_dim(0).reshape([n]))
}

/// One replica: every reduction returns its input.
///
/// ```
/// use burn::backend::Flex;
/// use burn::tensor::{Tensor, TensorData};
/// use burn_amp::collective::{Collective, SingleReplica};
///
/// let x = Tensor::<Flex, 1>::from_data(TensorData::from([1.0f32, 2.0]), &Default::default());
/// let sum = SingleReplica.all_reduce_sum(x.clone())?;
/// assert_eq!(sum.into_data(), x.into_data());
/// # Ok::<(), burn_amp::collective::CollectiveError>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SingleReplica;

impl SingleReplica {
    /// Always 0.
    pub fn rank(&self) -> usize {
        0
    }

    /// Always 1.
    pub fn world_size(&self) -> usize {
        1
    }
}

impl<R: Backend> Collective<R> for SingleReplica {
    fn rank(&self) -> usize {
        0
    }

    fn world_size(&self) -> usize {
        1
    }

    fn all_reduce_sum(&self, tensor: Tensor<R, 1>) -> Result<Tensor<R, 1>, CollectiveError> {
        Ok(tensor)
    }
}

/// Sums several 1-D f32 tensors over the replicas in one call: concatenated, reduced and
/// split again (one message instead of one per tensor).
///
/// # Errors
/// As [`Collective::all_reduce_sum`].
pub(crate) fn all_reduce_sum_all<R: Backend>(
    collective: &dyn Collective<R>,
    tensors: Vec<Tensor<R, 1>>,
) -> Result<Vec<Tensor<R, 1>>, CollectiveError> {
    let lengths: Vec<usize> = tensors.iter().map(|t| t.dims()[0]).collect();
    if tensors.is_empty() || collective.world_size() == 1 {
        return Ok(tensors);
    }
    let total = collective.all_reduce_sum(Tensor::cat(tensors, 0))?;
    let mut start = 0;
    Ok(lengths
        .into_iter()
        .map(|n| {
            let part = total.clone().slice(start..start + n);
            start += n;
            part
        })
        .collect())
}
