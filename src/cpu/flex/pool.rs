//! Tensor memory kept for the next step. The large buffers of the tensors the CPU kernels
//! write come back here when Burn drops the tensor, and the next tensor of the same size
//! and alignment takes one instead of asking the allocator: a training step makes the same
//! tensors every step, and memory fresh from the OS costs a page fault per page and its
//! zeroing at the first write (a small CNN's ReLU outputs took four times as long to write
//! as memory already used on a 2-core VM). The pool holds at most [`LIMIT`] bytes; beyond
//! that the oldest buffers go back to the allocator, and [`empty_cache`] returns them all.

use core::mem::MaybeUninit;
use core::ptr::NonNull;
use std::alloc::Layout;
use std::collections::BTreeMap;
use std::sync::Mutex;

use burn_amp_kernels::cpu::pages;
use burn_tensor::{AllocationProperty, Bytes};
use cubecl::bytes::AllocationController;

/// Buffers from this size up are kept (smaller ones come from the allocator's own free
/// lists, already touched). Kept from 256 KiB, a small GPT's 196 KiB activations still came
/// fresh from the OS every step (glibc trims the top of its heap past 128 KiB free): from
/// 64 KiB its `mixed_bfloat16` step took 15% less time on a 2-core VM.
const SMALLEST: usize = 64 << 10;

/// Bytes the pool keeps at most.
const LIMIT: usize = 1 << 30;

// Tensors are dropped on whatever thread Burn drops them, and a buffer freed on one thread
// serves the next tensor of its size on any other: one pool per process, as the allocator.
static POOL: Mutex<Free> = Mutex::new(Free {
    lists: BTreeMap::new(),
    bytes: 0,
    clock: 0,
});

/// The buffers kept, a list per size and alignment (each oldest first, stamped with the
/// order they came back in), and their bytes. A list per layout: a step takes and returns
/// hundreds of buffers, and finding one of a size is then a lookup among the sizes kept,
/// not a search through every buffer (thousands once several models have run). No list is
/// kept empty.
struct Free {
    lists: BTreeMap<(usize, usize), Vec<(u64, Block)>>,
    bytes: usize,
    clock: u64,
}

impl Free {
    /// The newest buffer of `layout`, if one is kept.
    fn take(&mut self, layout: Layout) -> Option<Block> {
        let key = (layout.size(), layout.align());
        let list = self.lists.get_mut(&key)?;
        let (_, block) = list.pop()?;
        if list.is_empty() {
            self.lists.remove(&key);
        }
        self.bytes -= layout.size();
        Some(block)
    }

    /// Keeps `block`, and hands back the oldest buffers beyond `limit` bytes.
    fn keep(&mut self, block: Block, limit: usize) -> Vec<Block> {
        let layout = block.layout;
        self.clock += 1;
        self.bytes += layout.size();
        let key = (layout.size(), layout.align());
        self.lists.entry(key).or_default().push((self.clock, block));
        let mut evicted = Vec::new();
        while self.bytes > limit {
            let Some((&key, _)) = self.lists.iter().min_by_key(|(_, list)| list[0].0) else {
                break;
            };
            let list = self.lists.get_mut(&key).expect("the list just found");
            let (_, oldest) = list.remove(0);
            if list.is_empty() {
                self.lists.remove(&key);
            }
            self.bytes -= oldest.layout.size();
            evicted.push(oldest);
        }
        evicted
    }

    /// Every buffer kept, handed back.
    fn drain(&mut self) -> Vec<Block> {
        self.bytes = 0;
        core::mem::take(&mut self.lists)
            .into_values()
            .flatten()
            .map(|(_, b)| b)
            .collect()
    }
}

/// A buffer from the global allocator, `layout` in size and alignment, every byte of it
/// initialized.
struct Block {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: a block is owned memory with no thread affinity; whoever holds it alone uses it.
unsafe impl Send for Block {}

/// Returns the CPU tensor memory burn-amp keeps for reuse to the allocator, and says how
/// many bytes that was.
///
/// On the CPU (Flex), the large buffers of tensors burn-amp's kernels write are not freed
/// when Burn drops the tensor but kept, up to 1 GiB, for the next tensor of the same size:
/// a training step makes the same tensors every step, and memory fresh from the operating
/// system costs a page fault per page at its first write. Call this after training, or
/// between phases whose tensor sizes differ, to hand that memory back (like PyTorch's
/// `torch.cuda.empty_cache` for its GPU allocator). Tensors alive are not touched.
///
/// ```
/// let released = burn_amp::empty_cache();
/// assert_eq!(burn_amp::empty_cache(), 0, "nothing kept right after");
/// println!("{released} bytes handed back");
/// ```
pub fn empty_cache() -> usize {
    let blocks = POOL.lock().unwrap_or_else(|e| e.into_inner()).drain();
    let mut released = 0;
    for b in blocks {
        released += b.layout.size();
        // SAFETY: allocated by the global allocator with this layout, ours alone.
        unsafe { std::alloc::dealloc(b.ptr.as_ptr(), b.layout) };
    }
    released
}

/// A vector of `len` values for a caller that writes every one: a kept buffer of its size
/// (holding some earlier tensor's values) where there is one, else zeros from fresh
/// memory.
pub(super) fn to_fill<T: bytemuck::Pod>(len: usize) -> Vec<T> {
    taken(len).unwrap_or_else(|| fresh(len))
}

/// A vector of `len` zeros: a kept buffer of its size cleared, or fresh zero pages.
pub(super) fn zeros<T: bytemuck::Pod>(len: usize) -> Vec<T> {
    match taken::<T>(len) {
        Some(mut v) => {
            v.fill(T::zeroed());
            v
        }
        None => fresh(len),
    }
}

/// `len` zeros in new memory: zero pages from the OS for a large vector, touched first by
/// whoever fills them, huge where the OS offers them.
fn fresh<T: bytemuck::Pod>(len: usize) -> Vec<T> {
    let mut v = bytemuck::zeroed_vec(len);
    pages::advise_huge(&mut v);
    v
}

/// A kept buffer for exactly `len` values of `T`.
fn taken<T: bytemuck::Pod>(len: usize) -> Option<Vec<T>> {
    let layout = Layout::array::<T>(len).ok()?;
    if layout.size() < SMALLEST {
        return None;
    }
    let block = POOL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take(layout)?;
    // SAFETY: the block was allocated by the global allocator with `layout`, which is
    // `[T; len]`'s; its bytes are initialized and any bits are a valid `T` (`Pod`); it is
    // ours alone, and the vector frees it with the same layout.
    Some(unsafe { Vec::from_raw_parts(block.ptr.as_ptr().cast::<T>(), len, len) })
}

/// `values` as a tensor's bytes, whose buffer comes back to the pool when the tensor is
/// dropped (a small or partly filled vector is handed over as it is).
pub(super) fn bytes<T: bytemuck::NoUninit + Send + Sync>(values: Vec<T>) -> Bytes {
    let layout = Layout::for_value(values.as_slice());
    if values.len() != values.capacity() || layout.size() < SMALLEST {
        return Bytes::from_elems(values);
    }
    let mut values = core::mem::ManuallyDrop::new(values);
    let ptr = NonNull::new(values.as_mut_ptr().cast::<u8>()).expect("a vector's buffer");
    let size = layout.size();
    // SAFETY: the vector's buffer, `layout` exactly (length = capacity), every byte
    // initialized, now owned by the controller.
    unsafe { Bytes::from_controller(Box::new(Kept(Some(Block { ptr, layout }))), size) }
}

/// The controller of a tensor's bytes that keeps its buffer on drop. `None` once
/// detached into a vector (then whoever holds that frees it).
struct Kept(Option<Block>);

impl AllocationController for Kept {
    fn alloc_align(&self) -> usize {
        self.0.as_ref().map_or(1, |b| b.layout.align())
    }

    fn property(&self) -> AllocationProperty {
        AllocationProperty::Native
    }

    unsafe fn memory_mut(&mut self) -> &mut [MaybeUninit<u8>] {
        match &self.0 {
            // SAFETY: the block is ours and `layout.size()` bytes long.
            Some(b) => unsafe {
                core::slice::from_raw_parts_mut(b.ptr.as_ptr().cast(), b.layout.size())
            },
            None => &mut [],
        }
    }

    fn memory(&self) -> &[MaybeUninit<u8>] {
        match &self.0 {
            // SAFETY: as in `memory_mut`.
            Some(b) => unsafe {
                core::slice::from_raw_parts(b.ptr.as_ptr().cast(), b.layout.size())
            },
            None => &[],
        }
    }

    fn try_detach(&mut self) -> Option<NonNull<u8>> {
        // The buffer is the global allocator's, with the layout `alloc_align` reports.
        self.0.take().map(|b| b.ptr)
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let Some(block) = self.0.take() else { return };
        let evicted = POOL
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .keep(block, LIMIT);
        for b in evicted {
            // SAFETY: allocated by the global allocator with this layout, ours alone.
            unsafe { std::alloc::dealloc(b.ptr.as_ptr(), b.layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_tensor_buffer_serves_the_next_of_its_size() {
        // A size no other test asks for, so the pool's block of it is this test's.
        let len = (SMALLEST / 4) * 3 + 5;
        let v: Vec<f32> = (0..len).map(|i| i as f32).collect();
        let ptr = v.as_ptr();
        let kept = bytes(v);
        assert_eq!(kept.len(), len * 4);
        assert_eq!(
            bytemuck::cast_slice::<u8, f32>(&kept)[len - 1],
            (len - 1) as f32
        );
        drop(kept);
        let again = to_fill::<f32>(len);
        assert_eq!(again.as_ptr(), ptr, "the kept buffer");
        assert_eq!(again[len - 1], (len - 1) as f32, "its values, as left");
        drop(bytes(again));
        let cleared = zeros::<f32>(len);
        assert_eq!(cleared.as_ptr(), ptr);
        assert!(
            cleared.iter().all(|&x| x == 0.0),
            "zeros clears a kept buffer"
        );
        // Another size or alignment does not take it.
        drop(bytes(cleared));
        let other = to_fill::<half::bf16>(len * 2);
        assert_ne!(other.as_ptr().cast::<f32>(), ptr);
        assert!(
            other.iter().all(|x| x.to_f32() == 0.0),
            "fresh memory is zeros"
        );
        // Emptied, the pool hands back at least this test's buffer (others' too, maybe).
        drop(bytes(other));
        assert!(empty_cache() >= len * 4);
    }

    /// A buffer of `size` bytes from the global allocator.
    fn block(size: usize) -> Block {
        let layout = Layout::from_size_align(size, 8).expect("a valid layout");
        // SAFETY: a layout of non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) }).expect("memory");
        Block { ptr, layout }
    }

    fn free(blocks: Vec<Block>) -> Vec<usize> {
        blocks
            .into_iter()
            .map(|b| {
                // SAFETY: allocated by `block` with this layout, ours alone.
                unsafe { std::alloc::dealloc(b.ptr.as_ptr(), b.layout) };
                b.layout.size()
            })
            .collect()
    }

    #[test]
    fn the_newest_buffer_of_a_layout_is_taken_and_the_oldest_evicted_past_the_limit() {
        let mut pool = Free {
            lists: BTreeMap::new(),
            bytes: 0,
            clock: 0,
        };
        let (a, b, c) = (block(64), block(64), block(128));
        let b_ptr = b.ptr;
        assert!(pool.keep(a, 256).is_empty());
        assert!(pool.keep(b, 256).is_empty());
        assert!(pool.keep(c, 256).is_empty());
        assert_eq!(pool.bytes, 256);
        // A fourth buffer goes past 256 bytes: the oldest (a, 64 bytes) goes back.
        assert_eq!(free(pool.keep(block(32), 256)), [64]);
        assert_eq!(pool.bytes, 224);
        let newest = pool.take(Layout::from_size_align(64, 8).unwrap());
        assert_eq!(newest.as_ref().map(|b| b.ptr), Some(b_ptr), "the newest 64");
        assert!(pool.take(Layout::from_size_align(64, 8).unwrap()).is_none());
        assert_eq!(pool.lists.len(), 2, "the emptied list of 64 is gone");
        assert!(
            pool.take(Layout::from_size_align(128, 16).unwrap())
                .is_none(),
            "alignment"
        );
        assert_eq!(pool.bytes, 160);
        free(newest.into_iter().collect());
        let mut rest = free(pool.drain());
        rest.sort();
        assert_eq!(rest, [32, 128]);
        assert_eq!(pool.bytes, 0);
    }

    #[test]
    fn small_or_partly_filled_vectors_are_not_kept() {
        let small = bytes(vec![1u16; 16]);
        assert_eq!(small.len(), 32);
        let mut partial = Vec::<u32>::with_capacity(SMALLEST);
        partial.extend(0..10);
        let b = bytes(partial);
        assert_eq!(b.len(), 40);
        assert_eq!(bytemuck::cast_slice::<u8, u32>(&b)[9], 9);
    }

    #[test]
    fn a_detached_buffer_becomes_a_vector() {
        let len = SMALLEST / 2 + 7;
        let b = bytes(vec![3u16; len]);
        let v = b.try_into_vec::<u16>().expect("a kept buffer detaches");
        assert_eq!(v.len(), len);
        assert!(v.iter().all(|&x| x == 3));
    }
}
