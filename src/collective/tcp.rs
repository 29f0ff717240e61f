//! [`Collective`] between processes over TCP: a star around replica 0, on one machine or
//! several, with nothing but the standard library.

use core::time::Duration;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use burn_tensor::backend::Backend;
use burn_tensor::{Tensor, TensorData};

use super::{Collective, CollectiveError};
use crate::cost;

/// The first bytes of every hello: "BAMP" and the protocol's version.
const MAGIC: [u8; 4] = *b"BAMP";
const VERSION: u32 = 1;
/// The longest vector a frame may announce (a guard against a corrupted length): 2^30 values.
const MAX_VALUES: u64 = 1 << 30;

/// Data-parallel replicas in separate processes, meeting over TCP: this process is replica
/// `rank` of `world`; replica 0 listens on the root address and the others connect to it.
///
/// A sum gathers every replica's vector on replica 0, adds them in rank order in f32 and
/// sends the result back, so every replica gets the same bits. The values travel through
/// host memory (one read back per call on a GPU backend; the cost report counts it).
///
/// Every wait is bounded by the timeout given to [`join`](Self::join): a
/// replica that died, hangs or never joined gives the others a
/// [`CollectiveError::Timeout`] or [`CollectiveError::PeerLost`] instead of a silent hang.
/// Replicas that call in a different order or with different lengths get
/// [`CollectiveError::Mismatch`]. After an error the group is broken: end the process.
///
/// ```
/// use std::net::{SocketAddr, TcpListener};
/// use std::time::Duration;
/// use burn::backend::Flex;
/// use burn::tensor::Tensor;
/// use burn_amp::collective::{Collective, TcpCollective};
///
/// // Two replicas as two threads here; in a real run, two processes (or machines).
/// let root: SocketAddr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
/// let replica = |rank: usize| {
///     std::thread::spawn(move || {
///         let group = TcpCollective::join(rank, 2, root, Duration::from_secs(10))?;
///         let x = Tensor::<Flex, 1>::from_floats([rank as f32, 10.0], &Default::default());
///         let sum = group.all_reduce_sum(x)?.into_data().to_vec::<f32>().unwrap();
///         Ok::<_, burn_amp::collective::CollectiveError>(sum)
///     })
/// };
/// let (a, b) = (replica(0), replica(1));
/// assert_eq!(a.join().unwrap()?, vec![1.0, 20.0]);
/// assert_eq!(b.join().unwrap()?, vec![1.0, 20.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct TcpCollective {
    rank: usize,
    world: usize,
    timeout: Duration,
    links: Mutex<Links>,
}

#[derive(Debug)]
struct Links {
    /// Replica 0: a stream per other replica, by rank (index `r - 1`). Others: one, to 0.
    streams: Vec<TcpStream>,
    /// Calls so far: replicas must make the same ones in the same order.
    calls: u64,
}

impl TcpCollective {
    /// Joins a group of `world` replicas whose replica 0 listens on `root` (replica 0 binds
    /// it; the others connect, retrying until it listens). Returns once every replica
    /// joined, or after `timeout`.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use burn_amp::collective::TcpCollective;
    ///
    /// // In each of two processes, with its own rank (0 or 1):
    /// let rank = std::env::var("RANK")?.parse()?;
    /// let group = TcpCollective::join(rank, 2, "127.0.0.1:29500".parse()?, Duration::from_secs(60))?;
    /// assert_eq!((group.rank(), group.world_size()), (rank, 2));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`CollectiveError::InvalidConfig`] for a rank outside `0..world`;
    /// [`CollectiveError::Timeout`] when the group is not complete in time;
    /// [`CollectiveError::PeerLost`] for a socket error (the root address taken, say);
    /// [`CollectiveError::Mismatch`] when a peer announces another group size or a rank
    /// twice, or is not a burn-amp replica.
    pub fn join(
        rank: usize,
        world: usize,
        root: SocketAddr,
        timeout: Duration,
    ) -> Result<Self, CollectiveError> {
        if world == 0 || rank >= world {
            return Err(CollectiveError::InvalidConfig(format!(
                "rank {rank} of {world} replicas: the rank must be below the replica count"
            )));
        }
        let mut group = Self {
            rank,
            world,
            timeout,
            links: Mutex::new(Links {
                streams: Vec::new(),
                calls: 0,
            }),
        };
        let streams = match (world, rank) {
            (1, _) => Vec::new(),
            (_, 0) => group.accept_all(root)?,
            _ => vec![group.connect(root)?],
        };
        group
            .links
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .streams = streams;
        Ok(group)
    }

    /// This replica's number, `0..world_size()`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many replicas take part.
    pub fn world_size(&self) -> usize {
        self.world
    }

    fn configure(&self, stream: &TcpStream) -> io::Result<()> {
        stream.set_nonblocking(false)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))
    }

    /// Replica 0: accepts the others, each announcing its rank.
    fn accept_all(&self, root: SocketAddr) -> Result<Vec<TcpStream>, CollectiveError> {
        let listener = TcpListener::bind(root).map_err(|e| self.lost(0, "listen", &e))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| self.lost(0, "listen", &e))?;
        let deadline = Instant::now() + self.timeout;
        let mut slots: Vec<Option<TcpStream>> = (1..self.world).map(|_| None).collect();
        while slots.iter().any(Option::is_none) {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    self.configure(&stream)
                        .map_err(|e| self.lost(0, "join", &e))?;
                    let peer = self.read_hello(&mut stream)?;
                    if slots[peer - 1].is_some() {
                        return Err(CollectiveError::Mismatch(format!(
                            "two replicas announced rank {peer}"
                        )));
                    }
                    stream
                        .write_all(&[0])
                        .map_err(|e| self.lost(peer, "join", &e))?;
                    slots[peer - 1] = Some(stream);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        return Err(self.timed_out("join"));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => return Err(self.lost(0, "join", &e)),
            }
        }
        Ok(slots.into_iter().flatten().collect())
    }

    fn read_hello(&self, stream: &mut TcpStream) -> Result<usize, CollectiveError> {
        let mut hello = [0u8; 24];
        stream
            .read_exact(&mut hello)
            .map_err(|e| self.io_error(0, "join", &e))?;
        let version = u32::from_le_bytes(hello[4..8].try_into().expect("4 bytes"));
        let rank = u64::from_le_bytes(hello[8..16].try_into().expect("8 bytes")) as usize;
        let world = u64::from_le_bytes(hello[16..24].try_into().expect("8 bytes")) as usize;
        if hello[..4] != MAGIC || version != VERSION {
            return Err(CollectiveError::Mismatch(
                "a connection to the root that is not a burn-amp replica of this version".into(),
            ));
        }
        if world != self.world || rank == 0 || rank >= world {
            return Err(CollectiveError::Mismatch(format!(
                "a replica announced rank {rank} of {world}; this group has {} replicas",
                self.world
            )));
        }
        Ok(rank)
    }

    /// Another replica: connects to replica 0 (retrying until it listens) and announces
    /// its rank.
    fn connect(&self, root: SocketAddr) -> Result<TcpStream, CollectiveError> {
        let deadline = Instant::now() + self.timeout;
        let mut stream = loop {
            match TcpStream::connect_timeout(&root, self.timeout) {
                Ok(stream) => break stream,
                Err(e) if Instant::now() > deadline => return Err(self.io_error(0, "join", &e)),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        self.configure(&stream)
            .map_err(|e| self.lost(0, "join", &e))?;
        let mut hello = Vec::with_capacity(24);
        hello.extend_from_slice(&MAGIC);
        hello.extend_from_slice(&VERSION.to_le_bytes());
        hello.extend_from_slice(&(self.rank as u64).to_le_bytes());
        hello.extend_from_slice(&(self.world as u64).to_le_bytes());
        stream
            .write_all(&hello)
            .map_err(|e| self.io_error(0, "join", &e))?;
        let mut ack = [0u8; 1];
        stream
            .read_exact(&mut ack)
            .map_err(|e| self.io_error(0, "join", &e))?;
        Ok(stream)
    }

    fn lock(&self) -> MutexGuard<'_, Links> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The element-wise sum of every replica's `values`, the same bits on each.
    fn sum(&self, values: Vec<f32>) -> Result<Vec<f32>, CollectiveError> {
        let mut links = self.lock();
        links.calls += 1;
        let call = links.calls;
        if self.rank == 0 {
            let mut total = values;
            let mut failure = None;
            let mut received = Vec::with_capacity(links.streams.len());
            for (i, stream) in links.streams.iter_mut().enumerate() {
                let peer = i + 1;
                let (peer_call, peer_values) = self.read_frame(stream, peer)?;
                if peer_call != call || peer_values.len() != total.len() {
                    failure.get_or_insert(format!(
                        "replica {peer} sent call {peer_call} with {} values, replica 0 call \
                         {call} with {}: the replicas do not make the same calls",
                        peer_values.len(),
                        total.len()
                    ));
                }
                received.push(peer_values);
            }
            if let Some(message) = failure {
                for (i, stream) in links.streams.iter_mut().enumerate() {
                    let _ = self.write_reply(stream, i + 1, Err(&message));
                }
                return Err(CollectiveError::Mismatch(message));
            }
            // In rank order, so every run adds the same way.
            for peer_values in received {
                for (t, v) in total.iter_mut().zip(peer_values) {
                    *t += v;
                }
            }
            for (i, stream) in links.streams.iter_mut().enumerate() {
                self.write_reply(stream, i + 1, Ok(&total))?;
            }
            Ok(total)
        } else {
            let stream = &mut links.streams[0];
            self.write_frame(stream, call, &values)?;
            self.read_reply(stream)
        }
    }

    fn write_frame(
        &self,
        stream: &mut TcpStream,
        call: u64,
        values: &[f32],
    ) -> Result<(), CollectiveError> {
        let mut frame = Vec::with_capacity(16 + 4 * values.len());
        frame.extend_from_slice(&call.to_le_bytes());
        frame.extend_from_slice(&(values.len() as u64).to_le_bytes());
        frame.extend(values.iter().flat_map(|v| v.to_le_bytes()));
        stream
            .write_all(&frame)
            .map_err(|e| self.io_error(0, "all_reduce", &e))
    }

    fn read_frame(
        &self,
        stream: &mut TcpStream,
        peer: usize,
    ) -> Result<(u64, Vec<f32>), CollectiveError> {
        let mut header = [0u8; 16];
        stream
            .read_exact(&mut header)
            .map_err(|e| self.io_error(peer, "all_reduce", &e))?;
        let call = u64::from_le_bytes(header[..8].try_into().expect("8 bytes"));
        let n = u64::from_le_bytes(header[8..].try_into().expect("8 bytes"));
        let values = self.read_values(stream, peer, n)?;
        Ok((call, values))
    }

    fn read_values(
        &self,
        stream: &mut TcpStream,
        peer: usize,
        n: u64,
    ) -> Result<Vec<f32>, CollectiveError> {
        if n > MAX_VALUES {
            return Err(CollectiveError::Mismatch(format!(
                "replica {peer} announced {n} values (at most 2^30)"
            )));
        }
        let mut bytes = vec![0u8; 4 * n as usize];
        stream
            .read_exact(&mut bytes)
            .map_err(|e| self.io_error(peer, "all_reduce", &e))?;
        Ok(bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect())
    }

    fn write_reply(
        &self,
        stream: &mut TcpStream,
        peer: usize,
        reply: Result<&[f32], &str>,
    ) -> Result<(), CollectiveError> {
        let mut frame = Vec::new();
        match reply {
            Ok(values) => {
                frame.push(0);
                frame.extend_from_slice(&(values.len() as u64).to_le_bytes());
                frame.extend(values.iter().flat_map(|v| v.to_le_bytes()));
            }
            Err(message) => {
                frame.push(1);
                frame.extend_from_slice(&(message.len() as u64).to_le_bytes());
                frame.extend_from_slice(message.as_bytes());
            }
        }
        stream
            .write_all(&frame)
            .map_err(|e| self.io_error(peer, "all_reduce", &e))
    }

    fn read_reply(&self, stream: &mut TcpStream) -> Result<Vec<f32>, CollectiveError> {
        let mut header = [0u8; 9];
        stream
            .read_exact(&mut header)
            .map_err(|e| self.io_error(0, "all_reduce", &e))?;
        let n = u64::from_le_bytes(header[1..].try_into().expect("8 bytes"));
        if header[0] == 0 {
            return self.read_values(stream, 0, n);
        }
        let mut message = vec![0u8; n.min(1 << 16) as usize];
        stream
            .read_exact(&mut message)
            .map_err(|e| self.io_error(0, "all_reduce", &e))?;
        Err(CollectiveError::Mismatch(
            String::from_utf8_lossy(&message).into_owned(),
        ))
    }

    fn timed_out(&self, op: &'static str) -> CollectiveError {
        CollectiveError::Timeout {
            op,
            rank: self.rank,
            world: self.world,
            after: self.timeout,
        }
    }

    fn lost(&self, peer: usize, op: &'static str, error: &io::Error) -> CollectiveError {
        let reason = match error.kind() {
            io::ErrorKind::UnexpectedEof => "it closed the connection".to_string(),
            _ => error.to_string(),
        };
        CollectiveError::PeerLost {
            op,
            rank: self.rank,
            peer,
            reason,
        }
    }

    /// A timeout where the socket says so, a lost peer otherwise.
    fn io_error(&self, peer: usize, op: &'static str, error: &io::Error) -> CollectiveError {
        match error.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => self.timed_out(op),
            _ => self.lost(peer, op, error),
        }
    }
}

impl<R: Backend> Collective<R> for TcpCollective {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn all_reduce_sum(&self, tensor: Tensor<R, 1>) -> Result<Tensor<R, 1>, CollectiveError> {
        if self.world == 1 {
            return Ok(tensor);
        }
        let device = tensor.device();
        let values = cost::read(|| tensor.into_data())
            .convert::<f32>()
            .to_vec::<f32>()
            .map_err(|e| CollectiveError::Mismatch(format!("not an f32 vector: {e:?}")))?;
        let n = values.len();
        let total = self.sum(values)?;
        Ok(Tensor::from_data(TensorData::new(total, [n]), &device))
    }
}

#[cfg(test)]
mod tests {
    use burn::backend::Flex;

    use super::*;

    fn root() -> SocketAddr {
        TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
    }

    /// Runs `f` as each of `world` replicas on threads; their results by rank.
    fn group<T: Send + 'static>(
        world: usize,
        timeout: Duration,
        f: impl Fn(usize, Result<TcpCollective, CollectiveError>) -> T + Send + Sync + 'static,
    ) -> Vec<T> {
        let root = root();
        let f = std::sync::Arc::new(f);
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let f = f.clone();
                std::thread::spawn(move || f(rank, TcpCollective::join(rank, world, root, timeout)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("replica"))
            .collect()
    }

    fn vector(values: &[f32]) -> Tensor<Flex, 1> {
        Tensor::from_floats(values, &Default::default())
    }

    fn host(t: Tensor<Flex, 1>) -> Vec<f32> {
        t.into_data().to_vec::<f32>().expect("f32")
    }

    #[test]
    fn three_replicas_sum_and_max_the_same_bits() {
        let out = group(3, Duration::from_secs(10), |rank, g| {
            let g = g.expect("join");
            let r = rank as f32;
            let x = vector(&[
                r,
                -r,
                0.1 * (r + 1.0),
                if rank == 2 { f32::INFINITY } else { 1.0 },
            ]);
            let sum = host(Collective::<Flex>::all_reduce_sum(&g, x.clone()).expect("sum"));
            let max = host(Collective::<Flex>::all_reduce_max(&g, x).expect("max"));
            (sum, max)
        });
        let expected_sum = vec![3.0, -3.0, 0.1f32 + 0.2 + 0.3, f32::INFINITY];
        for (sum, max) in &out {
            assert_eq!(sum, &expected_sum);
            assert_eq!(max, &vec![2.0, 0.0, 0.3, f32::INFINITY]);
        }
    }

    #[test]
    fn replicas_that_disagree_on_the_length_get_a_mismatch() {
        let out = group(2, Duration::from_secs(10), |rank, g| {
            let g = g.expect("join");
            let x = vector(&vec![1.0; rank + 1]);
            Collective::<Flex>::all_reduce_sum(&g, x).map(host)
        });
        for result in out {
            assert!(
                matches!(result, Err(CollectiveError::Mismatch(_))),
                "{result:?}"
            );
        }
    }

    #[test]
    fn a_replica_that_never_joins_times_out() {
        let start = Instant::now();
        let err = TcpCollective::join(0, 2, root(), Duration::from_millis(300)).unwrap_err();
        assert!(
            matches!(err, CollectiveError::Timeout { op: "join", .. }),
            "{err}"
        );
        assert!(start.elapsed() < Duration::from_secs(5));
        let err = TcpCollective::join(1, 2, root(), Duration::from_millis(300)).unwrap_err();
        assert!(
            matches!(
                err,
                CollectiveError::Timeout { .. } | CollectiveError::PeerLost { .. }
            ),
            "{err}"
        );
    }

    #[test]
    fn bad_ranks_are_refused() {
        for (rank, world) in [(2, 2), (0, 0)] {
            let err =
                TcpCollective::join(rank, world, root(), Duration::from_millis(10)).unwrap_err();
            assert!(matches!(err, CollectiveError::InvalidConfig(_)), "{err}");
        }
    }

    #[test]
    fn one_replica_is_the_identity() {
        let g = TcpCollective::join(0, 1, root(), Duration::from_millis(10)).expect("join");
        let x = vector(&[1.5, -2.0]);
        assert_eq!(
            host(Collective::<Flex>::all_reduce_max(&g, x).expect("max")),
            vec![1.5, -2.0]
        );
    }
}
