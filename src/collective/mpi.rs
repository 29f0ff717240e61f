//! [`Collective`] over MPI (feature `mpi`): the engine CPU clusters and their schedulers
//! already run (`mpirun`, `srun`), through rsmpi.

use core::time::Duration;
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use ::mpi::Threading;
use ::mpi::collective::SystemOperation;
use ::mpi::datatype::Equivalence;
use ::mpi::environment::Universe;
use ::mpi::topology::SimpleCommunicator;
use ::mpi::traits::{Communicator, CommunicatorCollectives, Root};
use burn_tensor::backend::Backend;
use burn_tensor::{Tensor, TensorData};

use super::{Collective, CollectiveError};
use crate::cost;

/// Data-parallel replicas as the processes of an MPI communicator: this process is replica
/// `rank` of `world_size`, as MPI numbers them. Launch the program with `mpirun -n N` (or
/// `srun`), one process per replica, on one machine or several.
///
/// A sum is one `MPI_Allreduce` of a host f32 buffer (the tensor read back once; on a GPU
/// backend the cost report counts the read); the maximum is an exact `MPI_MAX` over the
/// values' IEEE 754 total order (NaN above infinity), so every rank gets the same bits
/// whatever order the MPI library combines them in.
///
/// Every wait is bounded: each call first meets the other ranks in a non-blocking barrier
/// polled until the timeout, after which it returns [`CollectiveError::Timeout`] (a peer
/// hangs, or died without the launcher noticing); the reduction then runs as MPI's blocking
/// one, its fastest. After an error the communicator is unusable: end the process with a
/// non-zero status, and `mpirun` ends the other ranks. When a rank exits first, `mpirun`
/// usually ends the job itself and names that rank.
///
/// MPI is initialised once per process: [`world`](Self::world) does it (and finalises it
/// when the collective is dropped); an application that runs MPI already passes its own
/// communicator to [`new`](Self::new).
///
/// ```no_run
/// use std::sync::Arc;
/// use std::time::Duration;
/// use burn::backend::{Autodiff, Flex};
/// use burn::nn::Linear;
/// use burn::optim::AdamWConfig;
/// use burn_amp::collective::{Collective, MpiCollective};
/// use burn_amp::{LossScaleConfig, MixedPrecision};
///
/// type B = MixedPrecision<Autodiff<Flex>>;
/// // Run as: mpirun -n 2 ./train
/// let group = Arc::new(MpiCollective::world(Duration::from_secs(60))?);
/// println!("replica {} of {}", group.rank(), group.world_size());
/// let optim = LossScaleConfig::new()
///     .init(AdamWConfig::new().init::<B, Linear<B>>())?
///     .with_collective::<Flex>(group);
/// # drop(optim);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MpiCollective {
    /// Behind a lock: MPI is called from one thread at a time (MPI_THREAD_SERIALIZED).
    comm: Mutex<Comm>,
    /// The last sum's input buffer, the next one's output.
    spare: Mutex<Vec<f32>>,
    rank: usize,
    world: usize,
    timeout: Duration,
    /// Finalises MPI when dropped, if [`world`](Self::world) initialised it. Declared after
    /// `comm`, so it is dropped after it.
    _universe: Option<Universe>,
}

/// The communicator, made `Send`: rsmpi's handle is a raw pointer, and the lock around it
/// keeps calls from two threads at once apart.
struct Comm(SimpleCommunicator);

// SAFETY: MPI is initialised with (at least) MPI_THREAD_SERIALIZED by `world`, and `new`
// documents that requirement; every use of the handle goes through the mutex.
unsafe impl Send for Comm {}

impl core::fmt::Debug for MpiCollective {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MpiCollective")
            .field("rank", &self.rank)
            .field("world", &self.world)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl MpiCollective {
    /// Initialises MPI and takes the world communicator: every process `mpirun` started.
    /// Each collective call waits at most `timeout` for the others.
    ///
    /// # Errors
    /// [`CollectiveError::InvalidConfig`] when MPI was initialised already in this process
    /// (use [`new`](Self::new) with that communicator) or cannot run calls from more than one
    /// thread.
    pub fn world(timeout: Duration) -> Result<Self, CollectiveError> {
        let (universe, threading) = ::mpi::initialize_with_threading(Threading::Serialized)
            .ok_or_else(|| {
                CollectiveError::InvalidConfig(
                    "MPI is initialised already in this process: pass its communicator to \
                     MpiCollective::new"
                        .into(),
                )
            })?;
        if threading < Threading::Serialized {
            return Err(CollectiveError::InvalidConfig(format!(
                "the MPI library offers {threading:?} threading; burn-amp needs Serialized"
            )));
        }
        let comm = universe.world();
        Ok(Self::with(comm, timeout, Some(universe)))
    }

    /// Over `comm`, a communicator of an application that initialised MPI itself (with
    /// `MPI_THREAD_SERIALIZED` or more if its training loop runs on another thread than
    /// `MPI_Init`'s). Its processes are the replicas.
    pub fn new(comm: SimpleCommunicator, timeout: Duration) -> Self {
        Self::with(comm, timeout, None)
    }

    fn with(comm: SimpleCommunicator, timeout: Duration, universe: Option<Universe>) -> Self {
        let (rank, world) = (comm.rank() as usize, comm.size() as usize);
        Self {
            comm: Mutex::new(Comm(comm)),
            spare: Mutex::new(Vec::new()),
            rank,
            world,
            timeout,
            _universe: universe,
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The processes in the communicator.
    pub fn world_size(&self) -> usize {
        self.world
    }

    /// The MPI library's name and version (`MPI_Get_library_version`), for reports.
    pub fn library_version() -> String {
        ::mpi::environment::library_version()
            .map(|v| {
                let first = v.lines().next().unwrap_or_default();
                first
                    .split(',')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_string()
            })
            .unwrap_or_else(|_| "unknown MPI library".into())
    }

    /// The element-wise sum of `values` over the ranks, waiting at most the timeout.
    ///
    /// # Errors
    /// [`CollectiveError::Timeout`] when some rank did not take part in time.
    pub fn all_reduce_sum_host(&self, values: Vec<f32>) -> Result<Vec<f32>, CollectiveError> {
        // The result goes to a buffer kept from the previous call (its pages already mapped),
        // and `values` is kept for the next: no allocation in a steady run.
        let mut reduced = core::mem::take(&mut *self.spare());
        self.all_reduce_into(
            &values,
            &mut reduced,
            SystemOperation::sum(),
            "all_reduce_sum",
        )?;
        *self.spare() = values;
        Ok(reduced)
    }

    /// The element-wise maximum of `values` over the ranks (NaN above infinity), waiting at
    /// most the timeout.
    ///
    /// # Errors
    /// As [`all_reduce_sum_host`](Self::all_reduce_sum_host).
    pub fn all_reduce_max_host(&self, values: Vec<f32>) -> Result<Vec<f32>, CollectiveError> {
        let keys: Vec<i32> = values.into_iter().map(total_order_key).collect();
        let mut max = Vec::new();
        self.all_reduce_into(&keys, &mut max, SystemOperation::max(), "all_reduce_max")?;
        Ok(max.into_iter().map(from_total_order_key).collect())
    }

    /// Copies rank `root`'s `bytes` into every rank's (an NCCL id, a seed), blocking.
    pub fn broadcast(&self, root: usize, bytes: &mut [u8]) {
        let comm = self.lock();
        comm.0.process_at_rank(root as i32).broadcast_into(bytes);
    }

    fn spare(&self) -> MutexGuard<'_, Vec<f32>> {
        self.spare.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock(&self) -> MutexGuard<'_, Comm> {
        self.comm.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits, at most the timeout, until every rank has called: a non-blocking barrier
    /// polled against the deadline.
    fn arrive(&self, comm: &Comm, name: &'static str) -> Result<(), CollectiveError> {
        let mut request = comm.0.immediate_barrier();
        let deadline = Instant::now() + self.timeout;
        loop {
            match request.test() {
                Ok(_) => return Ok(()),
                Err(pending) if Instant::now() >= deadline => {
                    // An MPI request cannot be cancelled: it is left to the process's end,
                    // which the caller brings about.
                    core::mem::forget(pending);
                    return Err(CollectiveError::Timeout {
                        op: name,
                        rank: self.rank,
                        world: self.world,
                        after: self.timeout,
                    });
                }
                Err(pending) => {
                    request = pending;
                    std::thread::yield_now();
                }
            }
        }
    }

    /// One all-reduce once every rank has arrived, into `reduced` (resized to fit): the
    /// bounded wait is the barrier's; the reduction itself is MPI's blocking one, its fastest
    /// (a rank that dies during it ends the job through the launcher).
    fn all_reduce_into<T>(
        &self,
        values: &[T],
        reduced: &mut Vec<T>,
        op: SystemOperation,
        name: &'static str,
    ) -> Result<(), CollectiveError>
    where
        T: Equivalence + Copy + Default,
    {
        reduced.resize(values.len(), T::default());
        if self.world == 1 {
            reduced.copy_from_slice(values);
            return Ok(());
        }
        let comm = self.lock();
        self.arrive(&comm, name)?;
        comm.0.all_reduce_into(values, &mut reduced[..], op);
        Ok(())
    }
}

/// `x`'s position in IEEE 754's total order as an `i32`: integer comparison of keys is the
/// total order of floats (-NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN).
fn total_order_key(x: f32) -> i32 {
    let bits = x.to_bits() as i32;
    bits ^ (((bits >> 31) as u32) >> 1) as i32
}

fn from_total_order_key(key: i32) -> f32 {
    // The map is its own inverse: the sign bit is unchanged by it.
    f32::from_bits(total_order_key(f32::from_bits(key as u32)).cast_unsigned())
}

impl<R: Backend> Collective<R> for MpiCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce_sum(&self, tensor: Tensor<R, 1>) -> Result<Tensor<R, 1>, CollectiveError> {
        let (values, device) = to_host(tensor)?;
        let sum = self.all_reduce_sum_host(values)?;
        Ok(from_host(sum, &device))
    }

    fn all_reduce_max(&self, tensor: Tensor<R, 1>) -> Result<Tensor<R, 1>, CollectiveError> {
        let (values, device) = to_host(tensor)?;
        let max = self.all_reduce_max_host(values)?;
        Ok(from_host(max, &device))
    }
}

fn to_host<R: Backend>(tensor: Tensor<R, 1>) -> Result<(Vec<f32>, R::Device), CollectiveError> {
    let device = tensor.device();
    let values = cost::read(|| tensor.into_data())
        .convert::<f32>()
        .into_vec::<f32>()
        .map_err(|e| CollectiveError::Mismatch(format!("not an f32 vector: {e:?}")))?;
    Ok((values, device))
}

fn from_host<R: Backend>(values: Vec<f32>, device: &R::Device) -> Tensor<R, 1> {
    let n = values.len();
    Tensor::from_data(TensorData::new(values, [n]), device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_order_key_orders_like_ieee_total_order_and_round_trips() {
        let xs = [
            -f32::NAN,
            f32::NEG_INFINITY,
            -1.0,
            -f32::MIN_POSITIVE,
            -0.0,
            0.0,
            1e-45,
            1.0,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
        ];
        for pair in xs.windows(2) {
            assert!(
                total_order_key(pair[0]) < total_order_key(pair[1]),
                "{pair:?}"
            );
            assert_eq!(pair[0].total_cmp(&pair[1]), core::cmp::Ordering::Less);
        }
        for x in xs {
            assert_eq!(
                from_total_order_key(total_order_key(x)).to_bits(),
                x.to_bits()
            );
        }
    }
}
