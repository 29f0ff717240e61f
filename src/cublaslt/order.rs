//! How burn-amp's cuBLASLt stream and CubeCL's stream are ordered, as values: each group of
//! products is one handshake, the [`Step`]s [`Protocol::handshake`] returns, which the CUDA
//! executor carries out one by one, and which [`simulate`] runs on the host against the
//! CubeCL work around it, so the ordering is tested on any machine.
//!
//! One handshake with counter `v` (a fresh value per handshake, per thread and device):
//!
//! | stream | step |
//! |---|---|
//! | CubeCL's | [`Step::Signal`]: a one-thread kernel stores `v` into the flag, after every kernel before it, those that wrote the products' inputs included |
//! | burn-amp's | [`Step::Wait`]: a stream wait-value until the flag reaches `v` |
//! | burn-amp's | [`Step::Product`] for each product of the group |
//! | burn-amp's | [`Step::Write`]: a stream write-value of `v` into the done counter |
//! | CubeCL's | [`Step::Spin`]: a one-thread kernel that polls the done counter until it reaches `v`, with every buffer the products read or write bound to it |
//!
//! **Why it cannot deadlock.** burn-amp's stream waits only for a signal, and the signal is
//! enqueued on CubeCL's stream before the spin of the same handshake, from the same thread,
//! so it never stands behind a spin that waits for burn-amp's stream. The products wait on
//! nothing else, and the write follows them whatever they do: a product that fails to
//! enqueue still leaves the write and the spin in place (its error is reported after them),
//! and where the write itself cannot be enqueued no spin is launched (the executor waits
//! for burn-amp's stream on the host instead). The spin holds one thread of one block, so
//! the products always find the rest of the GPU. Counters only grow and are compared in
//! CUDA's wrapping order (`(i32)(seen - v) >= 0`), so a handshake never passes on a stale
//! value, also past 2^32 handshakes.
//!
//! **Why no buffer is freed or reused too early.** The products run after the signal, so
//! after every CubeCL kernel enqueued before them (their inputs' writers, and the last
//! readers of a reused output buffer); every CubeCL kernel enqueued after them runs after
//! the spin, so after the products. The buffers' handles are bound to the spin kernel, so
//! CubeCL hands their memory out again only after a kernel later on its stream, which runs
//! after the spin.
//!
//! **Fusion.** A fused backend's tensors are handles of a deferred graph: before a product
//! takes a buffer, the tensor is resolved (its graph executed) into a CubeCL tensor, whose
//! handle is what the signal orders after and the spin binds.

use std::collections::{HashMap, HashSet};

/// A buffer, as the ordering sees it: an identity (its device address, say).
pub type BufferId = u64;

/// The buffers one product reads and writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProductIo {
    /// Operands, bias, scales.
    pub reads: Vec<BufferId>,
    /// Outputs.
    pub writes: Vec<BufferId>,
}

/// One step of a handshake, on the stream that runs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// CubeCL's stream: the flag is set to `value`.
    Signal {
        /// The handshake's counter.
        value: u32,
    },
    /// burn-amp's stream: waits until the flag reaches `value`.
    Wait {
        /// The handshake's counter.
        value: u32,
    },
    /// burn-amp's stream: product `index` of the group.
    Product {
        /// Its index in the group.
        index: usize,
    },
    /// burn-amp's stream: the done counter is set to `value`.
    Write {
        /// The handshake's counter.
        value: u32,
    },
    /// CubeCL's stream: waits until the done counter reaches `value`, binding `bound`.
    Spin {
        /// The handshake's counter.
        value: u32,
        /// Every buffer the group's products read or write, once each.
        bound: Vec<BufferId>,
    },
}

/// Whether a counter that reads `seen` has reached `value`, in the wrapping order of CUDA's
/// stream wait-value `GEQ` (and of the spin kernel).
pub fn reached(seen: u32, value: u32) -> bool {
    seen.wrapping_sub(value) as i32 >= 0
}

/// The counters of one thread's handshakes on one device: each takes the next value.
///
/// ```
/// use burn_amp::cublaslt::order::{ProductIo, Protocol, Step};
///
/// let mut protocol = Protocol::new();
/// let linear_backward = [
///     ProductIo { reads: vec![1, 2], writes: vec![3] }, // dx = g W
///     ProductIo { reads: vec![1, 4], writes: vec![5] }, // dW = g^T x
/// ];
/// let steps = protocol.handshake(&linear_backward);
/// assert_eq!(steps[0], Step::Signal { value: 1 });
/// assert_eq!(steps[4], Step::Write { value: 1 });
/// assert_eq!(steps[5], Step::Spin { value: 1, bound: vec![1, 2, 3, 4, 5] });
/// ```
#[derive(Clone, Debug, Default)]
pub struct Protocol {
    last: u32,
}

impl Protocol {
    /// Counters from 0 (the flag and done buffers start at 0; the first handshake is 1).
    pub fn new() -> Self {
        Self::default()
    }

    /// Counters whose last handshake was `last` (to test the wrap past `u32::MAX`).
    pub fn after(last: u32) -> Self {
        Self { last }
    }

    /// The last counter handed out.
    pub fn last(&self) -> u32 {
        self.last
    }

    /// The steps of one handshake over `group` (products that share it: a linear's two
    /// gradients, attention's projections).
    pub fn handshake(&mut self, group: &[ProductIo]) -> Vec<Step> {
        self.last = self.last.wrapping_add(1);
        let value = self.last;
        let mut steps = vec![Step::Signal { value }, Step::Wait { value }];
        steps.extend((0..group.len()).map(|index| Step::Product { index }));
        steps.push(Step::Write { value });
        let mut bound: Vec<BufferId> = group
            .iter()
            .flat_map(|p| p.reads.iter().chain(&p.writes))
            .copied()
            .collect();
        bound.sort_unstable();
        bound.dedup();
        steps.push(Step::Spin { value, bound });
        steps
    }
}

/// What a host thread enqueues, in its order: CubeCL kernels of its own, and handshakes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Issued {
    /// A CubeCL kernel (an elementwise op, a reduction) and the buffers it touches.
    Cube(ProductIo),
    /// A handshake: its steps and the products they run.
    Handshake(Vec<Step>, Vec<ProductIo>),
    /// A buffer's handle dropped on the host: CubeCL may hand its memory to the next
    /// allocation (the next `Cube` or product writing it is then another tensor's).
    Free(BufferId),
}

/// Runs what one thread `issued` on a model of the two streams (each in order; a wait or a
/// spin runs once its counter is reached; any runnable head may go next, the model tries
/// the order least favourable to the ordering) and checks the invariants: both streams
/// finish (no deadlock); every product runs after every CubeCL kernel issued before its
/// handshake and before every CubeCL kernel issued after it; every buffer a product reads
/// or writes is bound to its handshake's spin and not freed before the spin was issued;
/// counters grow in the wrapping order.
///
/// # Errors
/// The first invariant broken, in words.
pub fn simulate(issued: &[Issued]) -> Result<(), String> {
    // Issue order of each CubeCL kernel and each product, to check the happens-before.
    let mut cube_queue: Vec<Op> = Vec::new();
    let mut lt_queue: Vec<Op> = Vec::new();
    let mut cube_issue: Vec<usize> = Vec::new();
    let mut products: Vec<(usize, ProductIo)> = Vec::new();
    let mut last: Option<u32> = None;
    let mut freed: HashSet<BufferId> = HashSet::new();
    for (at, item) in issued.iter().enumerate() {
        match item {
            Issued::Cube(io) => {
                // A kernel writing a freed buffer's memory: it belongs to a new tensor now.
                for w in &io.writes {
                    freed.remove(w);
                }
                cube_queue.push(Op::Cube(cube_issue.len()));
                cube_issue.push(at);
            }
            Issued::Free(buffer) => {
                freed.insert(*buffer);
            }
            Issued::Handshake(steps, group) => {
                let value = match steps.first() {
                    Some(Step::Signal { value }) => *value,
                    _ => return Err(format!("handshake {at}: it does not begin with a signal")),
                };
                if let Some(last) = last
                    && (value == last || !reached(value, last))
                {
                    return Err(format!(
                        "handshake {at}: counter {value} does not follow {last}"
                    ));
                }
                last = Some(value);
                let mut seen_write = false;
                for step in steps {
                    match step {
                        Step::Signal { value: v } => cube_queue.push(Op::Signal(*v)),
                        Step::Wait { value: v } => lt_queue.push(Op::Wait(*v)),
                        Step::Product { index } => {
                            let io = group.get(*index).ok_or_else(|| {
                                format!("handshake {at}: product {index} is not in its group")
                            })?;
                            if let Some(b) = io
                                .reads
                                .iter()
                                .chain(&io.writes)
                                .find(|b| freed.contains(b))
                            {
                                return Err(format!(
                                    "handshake {at}: product {index} uses buffer {b} after it was freed"
                                ));
                            }
                            lt_queue.push(Op::Product(products.len()));
                            products.push((at, io.clone()));
                        }
                        Step::Write { value: v } => {
                            seen_write = true;
                            lt_queue.push(Op::Write(*v));
                        }
                        Step::Spin { value: v, bound } => {
                            if !seen_write {
                                return Err(format!("handshake {at}: a spin before the write"));
                            }
                            for io in group {
                                if let Some(b) = io
                                    .reads
                                    .iter()
                                    .chain(&io.writes)
                                    .find(|b| !bound.contains(b))
                                {
                                    return Err(format!(
                                        "handshake {at}: buffer {b} is not bound to the spin"
                                    ));
                                }
                            }
                            cube_queue.push(Op::Spin(*v));
                        }
                    }
                }
            }
        }
    }
    // The counters start one before the first handshake's value.
    let start = issued
        .iter()
        .find_map(|i| match i {
            Issued::Handshake(steps, _) => match steps.first() {
                Some(Step::Signal { value }) => Some(value.wrapping_sub(1)),
                _ => None,
            },
            _ => None,
        })
        .unwrap_or(0);
    // Either stream first whenever both can run: burn-amp's first is the order in which a
    // missing wait lets a product overtake its inputs, CubeCL's first the one in which a
    // missing spin lets a later kernel overtake a product.
    for prefer_lt in [true, false] {
        let (cube_done, product_done) = run(&cube_queue, &lt_queue, start, prefer_lt)?;
        for (p, (at, _)) in products.iter().enumerate() {
            let t = product_done[&p];
            for (k, issued_at) in cube_issue.iter().enumerate() {
                let finished = cube_done[&k];
                if *issued_at < *at && finished > t {
                    return Err(format!(
                        "product {p} ran before the CubeCL kernel issued at {issued_at} finished"
                    ));
                }
                if *issued_at > *at && finished < t {
                    return Err(format!(
                        "the CubeCL kernel issued at {issued_at} ran before product {p} finished"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// One step of a stream in the model.
#[derive(Clone)]
enum Op {
    Cube(usize),
    Signal(u32),
    Spin(u32),
    Wait(u32),
    Product(usize),
    Write(u32),
}

/// When each CubeCL kernel and each product finished.
type Finished = (HashMap<usize, usize>, HashMap<usize, usize>);

/// Runs the two queues to their ends, the counters starting at `start`.
fn run(
    cube_queue: &[Op],
    lt_queue: &[Op],
    start: u32,
    prefer_lt: bool,
) -> Result<Finished, String> {
    let (mut flag, mut done) = (start, start);
    let (mut ci, mut li, mut clock) = (0usize, 0usize, 0usize);
    let mut cube_done: HashMap<usize, usize> = HashMap::new();
    let mut product_done: HashMap<usize, usize> = HashMap::new();
    while ci < cube_queue.len() || li < lt_queue.len() {
        let lt_ready = match lt_queue.get(li) {
            Some(Op::Wait(v)) => reached(flag, *v),
            Some(_) => true,
            None => false,
        };
        let cube_ready = match cube_queue.get(ci) {
            Some(Op::Spin(v)) => reached(done, *v),
            Some(_) => true,
            None => false,
        };
        if lt_ready && (prefer_lt || !cube_ready) {
            match &lt_queue[li] {
                Op::Product(p) => {
                    product_done.insert(*p, clock);
                }
                Op::Write(v) => done = *v,
                _ => {}
            }
            li += 1;
        } else if cube_ready {
            match &cube_queue[ci] {
                Op::Cube(k) => {
                    cube_done.insert(*k, clock);
                }
                Op::Signal(v) => flag = *v,
                _ => {}
            }
            ci += 1;
        } else {
            return Err(format!(
                "deadlock: CubeCL's stream at step {ci}, burn-amp's at step {li}"
            ));
        }
        clock += 1;
    }
    Ok((cube_done, product_done))
}
