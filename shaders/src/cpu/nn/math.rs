//! The transcendental functions of the `nn` kernels, for one f32 lane, written without
//! branches or table lookups so that LLVM vectorises the loops that call them; each is
//! `#[inline(always)]` so that it takes the instruction set of the kernel that calls it.
//! Their error bounds are tested against f64's functions (this crate's `tests/cpu/nn.rs`).

const LOG2_E: f32 = core::f32::consts::LOG2_E;
/// ln 2 in two parts: the high one has few enough bits that `n * LN2_HI` is exact.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// Below this, `exp` returns 0 (the true value is below f32's smallest normal, 1.2e-38).
const EXP_MIN: f32 = -87.5;
/// Above this, `exp` is infinite.
const EXP_MAX: f32 = 88.8;

/// `e^x`, within 2 ulp for results in f32's normal range; 0 below `e^-87.5` (subnormal
/// results are flushed), `inf` above f32's range, NaN for NaN.
///
/// `e^x = 2^n e^r` with `n = round(x / ln 2)`, `|r| <= ln 2 / 2`, `e^r` by Cephes' degree-7
/// polynomial; `2^n` is applied as two normal powers of two so that `n = 128` still gives
/// a finite result where it should.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let xc = x.clamp(EXP_MIN, EXP_MAX);
    let n = (xc * LOG2_E).round_ties_even();
    let r = (-n).mul_add(LN2_HI, xc);
    let r = (-n).mul_add(LN2_LO, r);
    let mut p = 1.987_569_2e-4_f32;
    p = p.mul_add(r, 1.398_2e-3);
    p = p.mul_add(r, 8.333_452e-3);
    p = p.mul_add(r, 4.166_579_6e-2);
    p = p.mul_add(r, 1.666_666_5e-1);
    p = p.mul_add(r, 0.5);
    let er = (p * r).mul_add(r, r) + 1.0;
    let n = small_int(n);
    let half = n >> 1;
    let y = er * pow2(half) * pow2(n.wrapping_sub(half));
    if x < EXP_MIN { 0.0 } else { y }
}

/// `n`, a whole number with `|n| < 2^22`, as an `i32`: the low bits of `n + 1.5 * 2^23`,
/// whose last mantissa bit is worth 1. (`as i32` saturates and sends NaN to 0, which x86
/// has no vector instruction for: LLVM converted lane by lane, in scalar code, and GELU's
/// backward pass, whose `exp` this is, took 1.7 times as long.) Any other input (a NaN, a
/// fraction, a larger number) gives some `i32` without panicking: callers pass such lanes
/// only where the result is discarded or, for a NaN, multiplies the NaN that keeps the
/// result NaN (the FP8 encoder computes every lane and selects the ones in range).
#[inline(always)]
pub(crate) fn small_int(n: f32) -> i32 {
    const SHIFT: f32 = 12_582_912.0;
    ((n + SHIFT).to_bits() as i32).wrapping_sub(SHIFT.to_bits() as i32)
}

/// `2^n` for `n` in f32's normal exponent range.
#[inline(always)]
fn pow2(n: i32) -> f32 {
    f32::from_bits((n.wrapping_add(127) as u32) << 23)
}

/// `erf(x)`, within 4e-7 of the true value (Eigen's and XLA's rational approximation on
/// `[-3.92, 3.92]`, `+-1` beyond, where f32's erf rounds to it); NaN for NaN.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    let xc = x.clamp(-4.0, 4.0);
    let x2 = xc * xc;
    let mut p = -2.726_142_3e-10_f32;
    p = p.mul_add(x2, 2.770_681_4e-8);
    p = p.mul_add(x2, -2.101_024e-6);
    p = p.mul_add(x2, -5.692_506_4e-5);
    p = p.mul_add(x2, -7.349_906_3e-4);
    p = p.mul_add(x2, -2.954_6e-3);
    p = p.mul_add(x2, -1.609_603_3e-2);
    let mut q = -1.456_607_2e-5_f32;
    q = q.mul_add(x2, -2.133_740_6e-4);
    q = q.mul_add(x2, -1.682_827e-3);
    q = q.mul_add(x2, -7.373_329e-3);
    q = q.mul_add(x2, -1.426_473_9e-2);
    let y = (xc * p / q).clamp(-1.0, 1.0);
    // From 3.92 on, erf rounds to 1 in f32 (erfc(3.92) < 2^-25).
    if xc.abs() >= 3.92 {
        1f32.copysign(xc)
    } else {
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps(a: f32, b: f64) -> f64 {
        let b32 = b as f32;
        let ulp = (f32::from_bits(b32.abs().to_bits() + 1) - b32.abs()) as f64;
        (a as f64 - b).abs() / ulp
    }

    #[test]
    fn exp_is_within_two_ulp_over_the_normal_range() {
        let mut worst = 0f64;
        let mut x = -87.3f32;
        while x < 88.7 {
            worst = worst.max(ulps(exp(x), (x as f64).exp()));
            x += 0.000_731;
        }
        assert!(worst <= 2.0, "worst {worst} ulp");
    }

    #[test]
    fn exp_edges() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-100.0), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert!(exp(88.7).is_finite());
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn erf_is_within_4e7() {
        let mut worst = 0f64;
        let mut x = -6.0f32;
        while x < 6.0 {
            let want = libm::erf(x as f64);
            worst = worst.max((erf(x) as f64 - want).abs());
            x += 0.000_37;
        }
        assert!(worst <= 4e-7, "worst {worst}");
        assert!(erf(f32::NAN).is_nan());
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
    }
}
