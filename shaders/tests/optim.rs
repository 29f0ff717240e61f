//! The fused AdamW kernel on wgpu (lavapipe in CI) against the CPU kernel, its reference:
//! the same step within a few f32 roundings (a GPU compiler may fuse a multiply and an add,
//! and computes `beta^t` with `powf`), a skipped step bit for bit, the step count on the
//! device, f16 gradients, an empty parameter.

use burn_amp_kernels::cpu::Isa;
use burn_amp_kernels::cpu::optim::{AdamwStep, adamw as cpu_adamw};
use burn_amp_kernels::optim::{AdamwBuffers, adamw};
use cubecl::prelude::*;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};
use half::f16;

type R = WgpuRuntime;

fn client() -> ComputeClient<R> {
    R::client(&WgpuDevice::default())
}

fn read_f32(client: &ComputeClient<R>, handle: cubecl::server::Handle, len: usize) -> Vec<f32> {
    f32::from_bytes(&client.read_one_unchecked(handle))[..len].to_vec()
}

/// Reproducible values in `[-scale, scale)` (a 64-bit LCG).
fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

struct State {
    p: Vec<f32>,
    m: Vec<f32>,
    v: Vec<f32>,
}

fn state(n: usize) -> State {
    State {
        p: values(n, 1, 1.0),
        m: values(n, 2, 1e-2),
        v: values(n, 3, 1e-4).iter().map(|x| x.abs()).collect(),
    }
}

struct Out {
    state: State,
    time: f32,
}

fn run_gpu<G: Float + CubeElement>(
    client: &ComputeClient<R>,
    s: &State,
    grad: &[G],
    time: f32,
    found: Option<f32>,
    step: &AdamwStep,
) -> Out {
    let n = s.p.len();
    let buffers = AdamwBuffers {
        param: client.create_from_slice(f32::as_bytes(&s.p)),
        grad: client.create_from_slice(G::as_bytes(grad)),
        m: client.create_from_slice(f32::as_bytes(&s.m)),
        v: client.create_from_slice(f32::as_bytes(&s.v)),
        time: client.create_from_slice(f32::as_bytes(&[time])),
        len: n as u32,
    };
    let found = found.map(|f| client.create_from_slice(f32::as_bytes(&[f])));
    let out = adamw::<R, G>(client, buffers, found, step).expect("a valid launch");
    Out {
        state: State {
            p: read_f32(client, out.param, n),
            m: read_f32(client, out.m, n),
            v: read_f32(client, out.v, n),
        },
        time: read_f32(client, out.time, 1)[0],
    }
}

/// `|got - want| <= 2^-20 * (|want| + floor)`, element by element.
fn assert_close(got: &[f32], want: &[f32], floor: f32, what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let bound = (w.abs() + floor) * 2f32.powi(-20);
        assert!(
            (g - w).abs() <= bound,
            "{what}[{i}]: {g:e} vs {w:e} (bound {bound:e})"
        );
    }
}

fn reference<G: burn_amp_kernels::cpu::cast::CpuFloat>(
    s: &State,
    grad: &[G],
    t: u32,
    step: &AdamwStep,
) -> State {
    let (mut p, mut m, mut v) = (s.p.clone(), s.m.clone(), s.v.clone());
    cpu_adamw(
        Isa::detect(),
        &mut p,
        grad,
        &mut m,
        &mut v,
        &step.at(t),
        None,
    )
    .unwrap();
    State { p, m, v }
}

#[test]
fn a_step_matches_the_cpu_kernel_and_counts_on_the_device() {
    let client = client();
    // Past one cube of 256 units and not a multiple of it.
    let n = 100_003;
    let s = state(n);
    let grad = values(n, 4, 0.5);
    for (found, wd) in [(None, 0.0), (Some(0.0), 0.1)] {
        let step = AdamwStep::new(1e-3, 0.9, 0.999, 1e-8, wd);
        let out = run_gpu(&client, &s, &grad, 4.0, found, &step);
        assert_eq!(out.time, 5.0);
        let want = reference(&s, &grad, 5, &step);
        assert_close(&out.state.p, &want.p, 1e-2, "param");
        assert_close(&out.state.m, &want.m, 1e-6, "m");
        assert_close(&out.state.v, &want.v, 1e-10, "v");
        assert!(out.state.p.iter().zip(&s.p).any(|(a, b)| a != b));
    }
}

#[test]
fn a_step_with_non_finite_gradients_counted_leaves_everything_bit_identical() {
    let client = client();
    let n = 1_000;
    let s = state(n);
    let mut grad = values(n, 5, 0.5);
    grad[7] = f32::NAN;
    grad[9] = f32::INFINITY;
    let step = AdamwStep::new(1e-3, 0.9, 0.999, 1e-8, 0.1);
    let out = run_gpu(&client, &s, &grad, 12.0, Some(2.0), &step);
    assert_eq!(out.time, 12.0, "a skipped step is not counted");
    for (got, want, what) in [
        (&out.state.p, &s.p, "param"),
        (&out.state.m, &s.m, "m"),
        (&out.state.v, &s.v, "v"),
    ] {
        let same = got
            .iter()
            .zip(want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "{what} changed on a skipped step");
    }
}

#[test]
fn f16_gradients_step_like_their_f32_values() {
    let client = client();
    let n = 4_099;
    let s = state(n);
    let grad: Vec<f16> = values(n, 6, 0.5).into_iter().map(f16::from_f32).collect();
    let step = AdamwStep::new(3e-4, 0.9, 0.99, 1e-5, 0.0);
    let out = run_gpu(&client, &s, &grad, 0.0, None, &step);
    assert_eq!(out.time, 1.0);
    let want = reference(&s, &grad, 1, &step);
    assert_close(&out.state.p, &want.p, 1e-2, "param");
    assert_close(&out.state.m, &want.m, 1e-6, "m");
}

#[test]
fn an_empty_parameter_still_counts_its_step() {
    let client = client();
    let s = state(0);
    let step = AdamwStep::new(1e-3, 0.9, 0.999, 1e-8, 0.0);
    let out = run_gpu::<f32>(&client, &s, &[], 2.0, Some(0.0), &step);
    assert_eq!(out.time, 3.0);
    assert!(out.state.p.is_empty());
}
