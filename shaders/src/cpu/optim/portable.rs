//! The reference: Burn's AdamW, one value at a time.

use super::Scalars;
use crate::cpu::cast::CpuFloat;

/// One value's update; `g` is the gradient as f32.
#[inline(always)]
pub(super) fn update(p: &mut f32, g: f32, m: &mut f32, v: &mut f32, s: &Scalars) {
    let g = if s.scaled { g / s.scale } else { g };
    *m = *m * s.b1 + g * s.one_minus_b1;
    *v = *v * s.b2 + (g * g) * s.one_minus_b2;
    let delta = (*m / s.c1) / ((*v / s.c2).sqrt() + s.eps);
    *p = *p * s.decay - delta * s.lr;
}

pub(super) fn adamw<G: CpuFloat>(
    p: &mut [f32],
    g: &[G],
    m: &mut [f32],
    v: &mut [f32],
    s: &Scalars,
) {
    for (((p, g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
        update(p, g.to_f32(), m, v, s);
    }
}

pub(super) fn unscale(values: &mut [f32], scale: f32) {
    values.iter_mut().for_each(|x| *x /= scale);
}
