//! Parallel loops in which the calling thread works too.
//!
//! Rayon runs a parallel loop called from outside its pool (a training loop's own thread)
//! by handing the whole loop to a worker and putting the caller to sleep until the loop
//! is done: every loop waits for a worker to wake and then for the caller to wake again,
//! two wake-ups of tens of microseconds on a virtual machine's cores, as long as many of a
//! small model's ops take in all. Here the caller claims tasks from a shared counter
//! itself, and the pool's workers, asked to help as the loop starts, claim the rest as
//! they wake; a worker that wakes after the last task was claimed leaves without touching
//! the loop. The caller then waits only for tasks already running. Inside the pool (a
//! rayon task, or a pool the user installed), the loop is rayon's own, on that pool's
//! threads.
//!
//! Each task runs exactly once whichever thread claims it, so a loop whose tasks write
//! disjoint outputs gives the same bits however the work falls.
//!
//! ```
//! use burn_amp_kernels::cpu::parallel;
//!
//! let x: Vec<f32> = (0..100_000).map(|i| i as f32).collect();
//! let mut y = vec![0f32; x.len()];
//! // y = 2x, 16384 values a task; chunk `c` of `y` beside chunk `c` of `x`.
//! parallel::chunks(&mut y, 1 << 14, |c, y| {
//!     let x = parallel::chunk(&x, 1 << 14, c);
//!     y.iter_mut().zip(x).for_each(|(y, x)| *y = 2.0 * x);
//! });
//! assert!(y.iter().zip(&x).all(|(y, x)| *y == 2.0 * x));
//! // Per-task results come back in task order, whichever thread ran them.
//! let sums = parallel::map(4, |t| parallel::chunk(&x, 25_000, t).iter().sum::<f32>());
//! assert_eq!(sums.len(), 4);
//! ```

use core::marker::PhantomData;
use core::sync::atomic::{AtomicUsize, Ordering};
use std::any::Any;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};
use std::thread::Thread;

use rayon::prelude::*;

/// How the caller waits, once its own tasks are done, for the ones still running: it
/// checks `SPINS` times, then yields its core between checks `YIELDS` times, then sleeps
/// until the last task's thread wakes it (a task of a large product may run for
/// milliseconds).
const SPINS: u32 = 64;
const YIELDS: u32 = 64;

/// `body(t)` for every `t` in `0..tasks`, on the calling thread and the pool's workers.
/// A panic in a task is raised again on the caller once every claimed task has finished.
pub fn for_each(tasks: usize, body: impl Fn(usize) + Sync) {
    match tasks {
        0 => {}
        1 => body(0),
        _ if IN_TASK.get() => (0..tasks).for_each(body),
        _ if rayon::current_thread_index().is_some() => {
            (0..tasks).into_par_iter().for_each(&body);
        }
        _ => joined(tasks, &body),
    }
}

// Whether this thread is running a task of a loop started outside the pool: a loop inside
// one runs on that thread alone. A thread-local, as rayon's own worker state is: the caller
// and `help`ers each run their tasks with it set. The pool's threads are all at work on the
// outer loop's tasks (the caller asks for one fewer than the pool has), so a nested loop
// that asked for more would wake the one left idle and run more threads than cores (a
// convolution's per-thread runs, each splitting its columns, took about 10% longer).
thread_local! {
    static IN_TASK: core::cell::Cell<bool> = const { core::cell::Cell::new(false) };
}

/// The state one loop shares with its helpers. `body` is the caller's closure with its
/// lifetime erased: a thread calls it only for a task it claimed (`next` below `tasks`),
/// and the caller returns only once `done` counts every task, so it is alive then.
struct Loop {
    next: AtomicUsize,
    done: AtomicUsize,
    tasks: usize,
    /// Helpers asked for so far, and how many the loop wants.
    asked: AtomicUsize,
    helpers: usize,
    body: *const (dyn Fn(usize) + Sync + 'static),
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// The caller, woken by the thread that finishes the last task.
    caller: Thread,
}

// SAFETY: `body` is `Sync` and called only while the caller waits (see `Loop`); the rest
// are atomics and a mutex.
unsafe impl Send for Loop {}
// SAFETY: as above.
unsafe impl Sync for Loop {}

impl Loop {
    /// A helper's part: asks for up to two more helpers while tasks are left (so that
    /// waking the pool's sleeping threads is spread over the threads already awake, as
    /// rayon's own splitting spreads it, not left to the caller one by one), then works.
    fn help(self: Arc<Self>) {
        for _ in 0..2 {
            self.ask();
        }
        self.work();
    }

    /// Spawns one more helper onto the pool, if the loop wants more and has tasks left.
    fn ask(self: &Arc<Self>) {
        if self.next.load(Ordering::Relaxed) < self.tasks
            && self.asked.fetch_add(1, Ordering::Relaxed) < self.helpers
        {
            let shared = Arc::clone(self);
            rayon::spawn(move || shared.help());
        }
    }

    /// Claims and runs tasks until none is left.
    fn work(&self) {
        loop {
            let t = self.next.fetch_add(1, Ordering::Relaxed);
            if t >= self.tasks {
                return;
            }
            // SAFETY: task `t` is claimed and not yet counted done, so the caller still
            // waits and its closure is alive (see `Loop`).
            let body = unsafe { &*self.body };
            let outer = IN_TASK.replace(true);
            let ran = panic::catch_unwind(AssertUnwindSafe(|| body(t)));
            IN_TASK.set(outer);
            if let Err(payload) = ran {
                let mut first = self.panic.lock().unwrap_or_else(|e| e.into_inner());
                first.get_or_insert(payload);
            }
            if self.done.fetch_add(1, Ordering::Release) + 1 == self.tasks {
                self.caller.unpark();
            }
        }
    }
}

/// [`for_each`] from outside the pool: helpers asked for, the caller working alongside.
fn joined(tasks: usize, body: &(dyn Fn(usize) + Sync)) {
    let body: *const (dyn Fn(usize) + Sync + '_) = body;
    // SAFETY: only the lifetime changes; see `Loop` for why the pointer is not used after
    // this function returns.
    let body: *const (dyn Fn(usize) + Sync + 'static) = unsafe { core::mem::transmute(body) };
    let shared = Arc::new(Loop {
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
        tasks,
        asked: AtomicUsize::new(0),
        // The caller is one of the threads: as many helpers as the pool has threads, less
        // one, and no more than the tasks the caller leaves.
        helpers: rayon::current_num_threads()
            .saturating_sub(1)
            .min(tasks - 1),
        body,
        panic: Mutex::new(None),
        caller: std::thread::current(),
    });
    shared.ask();
    shared.work();
    let mut checks = 0;
    while shared.done.load(Ordering::Acquire) < tasks {
        match checks {
            c if c < SPINS => core::hint::spin_loop(),
            c if c < SPINS + YIELDS => std::thread::yield_now(),
            // Woken by the last task's thread (or spuriously: the loop checks again).
            _ => std::thread::park(),
        }
        checks = checks.saturating_add(1);
    }
    let payload = shared
        .panic
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take();
    if let Some(payload) = payload {
        panic::resume_unwind(payload);
    }
}

/// A mutable slice cut into chunks of `size` values (the last one shorter) that tasks take
/// by index.
struct Chunks<'a, T> {
    ptr: *mut T,
    len: usize,
    size: usize,
    _slice: PhantomData<&'a mut [T]>,
}

// SAFETY: tasks take disjoint chunks of the slice (see `Chunks::get`), as
// `par_chunks_mut` hands them out: `T: Send` is what that needs.
unsafe impl<T: Send> Sync for Chunks<'_, T> {}

impl<'a, T> Chunks<'a, T> {
    fn new(slice: &'a mut [T], size: usize) -> Self {
        assert!(size > 0, "a chunk holds at least one value");
        Chunks {
            ptr: slice.as_mut_ptr(),
            len: slice.len(),
            size,
            _slice: PhantomData,
        }
    }

    fn count(&self) -> usize {
        self.len.div_ceil(self.size)
    }

    /// Chunk `c`.
    ///
    /// # Safety
    /// `c < self.count()`, and no other reference to chunk `c` is alive.
    #[allow(clippy::mut_from_ref)]
    unsafe fn get(&self, c: usize) -> &'a mut [T] {
        let start = c * self.size;
        let len = self.size.min(self.len - start);
        // SAFETY: `start + len <= self.len`, inside the slice; exclusive by the contract.
        unsafe { core::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

/// `body(c, chunk)` for each chunk of `size` values of `out` (the last one shorter), as
/// [`for_each`] runs tasks: `par_chunks_mut(size).enumerate()` with the caller working.
pub fn chunks<T: Send>(out: &mut [T], size: usize, body: impl Fn(usize, &mut [T]) + Sync) {
    let out = Chunks::new(out, size);
    for_each(out.count(), |c| {
        // SAFETY: `for_each` runs each task once, so each chunk has one reference.
        let chunk = unsafe { out.get(c) };
        body(c, chunk)
    });
}

/// [`chunks`] of two slices side by side, chunk `c` of each (of `a.1` and `b.1` values)
/// handed to task `c`.
///
/// # Panics
/// When the two slices do not cut into the same number of chunks.
pub fn chunks2<T: Send, U: Send>(
    (a, a_size): (&mut [T], usize),
    (b, b_size): (&mut [U], usize),
    body: impl Fn(usize, &mut [T], &mut [U]) + Sync,
) {
    let (a, b) = (Chunks::new(a, a_size), Chunks::new(b, b_size));
    assert_eq!(
        a.count(),
        b.count(),
        "slices cut into different numbers of chunks"
    );
    for_each(a.count(), |c| {
        // SAFETY: as in `chunks`, for each slice.
        let (a, b) = unsafe { (a.get(c), b.get(c)) };
        body(c, a, b)
    });
}

/// [`chunks2`] of three slices.
///
/// # Panics
/// When the three slices do not cut into the same number of chunks.
pub fn chunks3<T: Send, U: Send, V: Send>(
    (a, a_size): (&mut [T], usize),
    (b, b_size): (&mut [U], usize),
    (c, c_size): (&mut [V], usize),
    body: impl Fn(usize, &mut [T], &mut [U], &mut [V]) + Sync,
) {
    let (a, b, c) = (
        Chunks::new(a, a_size),
        Chunks::new(b, b_size),
        Chunks::new(c, c_size),
    );
    assert!(
        a.count() == b.count() && a.count() == c.count(),
        "slices cut into different numbers of chunks"
    );
    for_each(a.count(), |t| {
        // SAFETY: as in `chunks`, for each slice.
        let (a, b, c) = unsafe { (a.get(t), b.get(t), c.get(t)) };
        body(t, a, b, c)
    });
}

/// `body(k, row)` for each row `k` of `width` values of `out`, `per_task` rows a task (the
/// last task's fewer): `par_chunks_mut(width).enumerate().with_min_len(per_task)` with the
/// caller working.
pub fn rows<T: Send>(
    out: &mut [T],
    width: usize,
    per_task: usize,
    body: impl Fn(usize, &mut [T]) + Sync,
) {
    if width == 0 {
        return;
    }
    let per_task = per_task.max(1);
    chunks(out, width * per_task, |t, block| {
        for (i, row) in block.chunks_mut(width).enumerate() {
            body(t * per_task + i, row);
        }
    });
}

/// `f(t)` for every `t` in `0..tasks`, in order, computed as [`for_each`] runs tasks.
pub fn map<R: Send>(tasks: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let mut out: Vec<Option<R>> = (0..tasks).map(|_| None).collect();
    chunks(&mut out, 1, |t, slot| slot[0] = Some(f(t)));
    out.into_iter()
        .map(|r| r.expect("every task ran"))
        .collect()
}

/// `f(item)` for each of `items`, each item a task, the results in the items' order:
/// `into_par_iter().map(f).collect()` with the caller working.
pub fn map_each<T: Send, R: Send>(items: Vec<T>, f: impl Fn(T) -> R + Sync) -> Vec<R> {
    let mut items: Vec<Option<T>> = items.into_iter().map(Some).collect();
    let mut out: Vec<Option<R>> = (0..items.len()).map(|_| None).collect();
    chunks2((&mut items, 1), (&mut out, 1), |_, item, slot| {
        slot[0] = item[0].take().map(&f);
    });
    out.into_iter()
        .map(|r| r.expect("every task ran"))
        .collect()
}

/// Chunk `c` of `size` values of `input` (the last one shorter): the input beside a chunk
/// of [`chunks`].
pub fn chunk<T>(input: &[T], size: usize, c: usize) -> &[T] {
    let start = c * size;
    &input[start..input.len().min(start + size)]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// Every task once, on any pool size, from outside and from inside a pool.
    #[test]
    fn every_task_runs_once() {
        for tasks in [0, 1, 2, 3, 17, 1000] {
            let seen: Vec<AtomicU32> = (0..tasks).map(|_| AtomicU32::new(0)).collect();
            for_each(tasks, |t| {
                seen[t].fetch_add(1, Ordering::Relaxed);
            });
            assert!(
                seen.iter().all(|s| s.load(Ordering::Relaxed) == 1),
                "{tasks} tasks"
            );
            for threads in [1, 2, 5] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                pool.install(|| {
                    for_each(tasks, |t| {
                        seen[t].fetch_add(1, Ordering::Relaxed);
                    })
                });
            }
            assert!(
                seen.iter().all(|s| s.load(Ordering::Relaxed) == 4),
                "{tasks} tasks"
            );
        }
    }

    /// The chunks partition the slices as `par_chunks_mut` does, the last one short.
    #[test]
    fn chunks_cover_the_slices_like_par_chunks_mut() {
        let mut a = vec![0usize; 1001];
        let mut b = vec![0u8; 11];
        let mut c = vec![0u32; 31];
        chunks3((&mut a, 100), (&mut b, 1), (&mut c, 3), |t, a, b, c| {
            assert_eq!(a.len(), if t == 10 { 1 } else { 100 });
            assert_eq!((b.len(), c.len()), (1, if t == 10 { 1 } else { 3 }));
            a.iter_mut().for_each(|x| *x = t);
            b[0] = t as u8;
            c.iter_mut().for_each(|x| *x = t as u32 + 1);
        });
        assert!(a.iter().enumerate().all(|(i, &x)| x == i / 100));
        assert!(b.iter().enumerate().all(|(i, &x)| x as usize == i));
        assert!(c.iter().enumerate().all(|(i, &x)| x as usize == i / 3 + 1));
        let input: Vec<usize> = (0..1001).collect();
        let mut out = vec![0usize; 1001];
        chunks(&mut out, 64, |t, out| {
            out.copy_from_slice(chunk(&input, 64, t))
        });
        assert_eq!(out, input);
        let squares = map(300, |t| t * t);
        assert!(squares.iter().enumerate().all(|(t, &s)| s == t * t));
        let owned: Vec<String> = (0..50).map(|i| i.to_string()).collect();
        let lengths = map_each(owned.clone(), |s| s.len());
        assert!(lengths.iter().zip(&owned).all(|(n, s)| *n == s.len()));
    }

    #[test]
    #[should_panic(expected = "different numbers of chunks")]
    fn slices_of_other_chunk_counts_are_refused() {
        chunks2((&mut [0u8; 10], 5), (&mut [0u8; 10], 2), |_, _, _| {});
    }

    /// A task's panic reaches the caller with its message, after the other tasks ran.
    #[test]
    fn a_panic_in_a_task_reaches_the_caller() {
        let ran = AtomicU32::new(0);
        let caught = panic::catch_unwind(AssertUnwindSafe(|| {
            for_each(64, |t| {
                ran.fetch_add(1, Ordering::Relaxed);
                if t == 40 {
                    panic!("task forty");
                }
            })
        }));
        let payload = caught.expect_err("the panic is raised again");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"task forty"));
        assert_eq!(ran.load(Ordering::Relaxed), 64);
    }

    /// Tasks that outlast the caller's spins and yields: it sleeps, is woken by the last
    /// one, and sees every task's writes.
    #[test]
    fn the_caller_waits_for_long_tasks() {
        for _ in 0..5 {
            let mut out = vec![0u64; 6];
            chunks(&mut out, 1, |t, slot| {
                std::thread::sleep(std::time::Duration::from_millis(3 + t as u64));
                slot[0] = t as u64 + 1;
            });
            assert_eq!(out, [1, 2, 3, 4, 5, 6]);
        }
    }

    /// A loop inside a task of a loop started outside the pool stays on the task's thread.
    #[test]
    fn a_nested_loop_runs_on_its_tasks_thread() {
        let nested = AtomicUsize::new(0);
        for_each(8, |_| {
            let outer = std::thread::current().id();
            for_each(16, |_| {
                assert_eq!(std::thread::current().id(), outer);
                nested.fetch_add(1, Ordering::Relaxed);
            });
        });
        assert_eq!(nested.load(Ordering::Relaxed), 8 * 16);
    }

    /// Loops inside loops, and many loops in a row from several threads at once.
    #[test]
    fn nested_and_concurrent_loops_finish() {
        let total = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for _ in 0..200 {
                        for_each(4, |_| {
                            for_each(3, |_| {
                                total.fetch_add(1, Ordering::Relaxed);
                            })
                        });
                    }
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 3 * 200 * 12);
    }
}
