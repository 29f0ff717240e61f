//! Random tensors from a counter-based generator, Philox4x32-10 (Salmon et al., SC'11; the
//! generator of cuRAND and of PyTorch's GPU dropout): value `i` of a tensor is a pure
//! function of the key and `i`, so the tensor is split over threads freely and comes out
//! the same whatever the number of threads. Each call takes a fresh 64-bit key (the glue
//! draws it from the backend's own generator, so `Backend::seed` makes runs repeatable).

use crate::cpu::Isa;
use crate::cpu::cast::{self, CpuFloat};
use crate::cpu::erased::{FloatsMut, typed_mut};
use crate::cpu::parallel;

use crate::cpu::multiversion::multiversion;

const M0: u64 = 0xD251_1F53;
const M1: u64 = 0xCD9E_8D57;
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// Philox4x32 with 10 rounds: four 32-bit words from a 128-bit counter and a 64-bit key.
#[inline(always)]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let [mut c0, mut c1, mut c2, mut c3] = counter;
    let [mut k0, mut k1] = key;
    for round in 0..10 {
        if round > 0 {
            k0 = k0.wrapping_add(W0);
            k1 = k1.wrapping_add(W1);
        }
        let p0 = M0 * c0 as u64;
        let p1 = M1 * c2 as u64;
        (c0, c1, c2, c3) = (
            (p1 >> 32) as u32 ^ c1 ^ k0,
            p1 as u32,
            (p0 >> 32) as u32 ^ c3 ^ k1,
            p0 as u32,
        );
    }
    [c0, c1, c2, c3]
}

/// Counters a block of the vectorised loop works on, side by side.
const LANES: usize = 16;

/// Values a block yields: four words of each of its counters.
const BLOCK: usize = 4 * LANES;

multiversion! {
    /// The words of counters `first..first + 16` (counter `c` is `[c as u32, c >> 32, 0,
    /// 0]`): word `j` of counter `first + i` at `out[16 * j + i]`, so that each word is one
    /// vector of lanes and nothing is transposed.
    fn philox_block(first: u64, key: [u32; 2], out: &mut [u32; BLOCK]) {
        let mut c = [[0u32; LANES]; 4];
        let (lo, rest) = c.split_at_mut(1);
        for (i, (lo, hi)) in lo[0].iter_mut().zip(rest[0].iter_mut()).enumerate() {
            let n = first + i as u64;
            *lo = n as u32;
            *hi = (n >> 32) as u32;
        }
        let [mut k0, mut k1] = key;
        for round in 0..10 {
            if round > 0 {
                k0 = k0.wrapping_add(W0);
                k1 = k1.wrapping_add(W1);
            }
            let mut next = [[0u32; LANES]; 4];
            for i in 0..LANES {
                let p0 = M0 * c[0][i] as u64;
                let p1 = M1 * c[2][i] as u64;
                next[0][i] = (p1 >> 32) as u32 ^ c[1][i] ^ k0;
                next[1][i] = p1 as u32;
                next[2][i] = (p0 >> 32) as u32 ^ c[3][i] ^ k1;
                next[3][i] = p0 as u32;
            }
            c = next;
        }
        for (j, word) in c.iter().enumerate() {
            out[j * LANES..(j + 1) * LANES].copy_from_slice(word);
        }
    }
}

/// Values a task fills: many blocks, few enough that two cores share a dropout mask.
const CHUNK: usize = 1 << 15;

/// Runs `f` on each block of `out` with the block's words of the stream of `key`: value
/// `v` of the tensor takes word `(v / 16) % 4` of counter `16 * (v / 64) + v % 16`, a pure
/// function of the key and `v`.
fn fill<T: CpuFloat>(
    isa: Isa,
    key: [u32; 2],
    out: &mut [T],
    f: impl Fn(&[u32; BLOCK], &mut [T]) + Sync,
) {
    parallel::chunks(out, CHUNK, |c, chunk| {
        let mut words = [0u32; BLOCK];
        for (b, values) in chunk.chunks_mut(BLOCK).enumerate() {
            let first = ((c * CHUNK + b * BLOCK) / BLOCK * LANES) as u64;
            philox_block(isa, first, key, &mut words);
            f(&words, values);
        }
    });
}

/// Fills `out` with Bernoulli(`p`) draws, 1 with probability `p` and 0 otherwise: value `v`
/// is 1 when its 32-bit word of the stream of `key` (see `fill`) is below `p * 2^32`.
///
/// # Panics
/// When `p` is not in `[0, 1]`.
pub fn bernoulli<T: CpuFloat>(isa: Isa, key: [u32; 2], p: f64, out: &mut [T]) {
    bernoulli_erased(isa, key, p, T::floats_mut(out))
}

/// [`bernoulli`] for any type: not generic, so compiled here (`erased`).
fn bernoulli_erased(isa: Isa, key: [u32; 2], p: f64, out: FloatsMut<'_>) {
    typed_mut!(out, |out| bernoulli_typed(isa, key, p, out))
}

fn bernoulli_typed<T: CpuFloat>(isa: Isa, key: [u32; 2], p: f64, out: &mut [T]) {
    assert!((0.0..=1.0).contains(&p), "a Bernoulli probability of {p}");
    let (one, zero) = (T::from_f32(1.0), T::from_f32(0.0));
    if p == 1.0 {
        out.fill(one);
        return;
    }
    // Below 2^32: p < 1 and the rounding stays under it.
    let threshold = ((p * 4_294_967_296.0).round() as u64).min(u32::MAX as u64) as u32;
    fill(isa, key, out, |words, values| {
        for (v, w) in values.iter_mut().zip(words) {
            *v = if *w < threshold { one } else { zero };
        }
    });
}

/// Fills `out` with draws uniform on `[0, 1)`: value `v` is the top 24 bits of its word of
/// the stream of `key` (see `fill`) times 2^-24 (every value a multiple of 2^-24, as
/// PyTorch's), then rounded to `T` (for bf16 and f16 a draw just below 1 rounds to 1).
pub fn uniform<T: CpuFloat>(isa: Isa, key: [u32; 2], out: &mut [T]) {
    uniform_erased(isa, key, T::floats_mut(out))
}

/// [`uniform`] for any type: not generic, so compiled here (`erased`).
fn uniform_erased(isa: Isa, key: [u32; 2], out: FloatsMut<'_>) {
    typed_mut!(out, |out| uniform_typed(isa, key, out))
}

fn uniform_typed<T: CpuFloat>(isa: Isa, key: [u32; 2], out: &mut [T]) {
    fill(isa, key, out, |words, values| {
        let mut wide = [0f32; BLOCK];
        for (v, w) in wide.iter_mut().zip(words) {
            *v = (w >> 8) as f32 * (1.0 / 16_777_216.0);
        }
        let n = values.len();
        cast::convert_block(isa, &wide[..n], values);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random123's known-answer vectors for Philox4x32-10.
    #[test]
    fn philox_known_answers() {
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344],
                [0xa4093822, 0x299f31d0]
            ),
            [0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1]
        );
    }

    #[test]
    fn blocks_are_the_scalar_generator_on_every_isa() {
        let key = [0x1234_5678, 0x9abc_def0];
        for isa in Isa::available() {
            let mut out = [0u32; BLOCK];
            let first = (1u64 << 32) - 3; // counters crossing into the high word
            philox_block(isa, first, key, &mut out);
            for i in 0..LANES {
                let n = first + i as u64;
                let want = philox4x32_10([n as u32, (n >> 32) as u32, 0, 0], key);
                let got: Vec<u32> = (0..4).map(|j| out[j * LANES + i]).collect();
                assert_eq!(got, want, "{isa}, counter {n}");
            }
        }
    }
}
