//! The handshake that orders burn-amp's cuBLASLt stream with CubeCL's, run on the host's
//! model of the two streams for every product the plan tests build, alone and in groups,
//! between CubeCL kernels, with buffers freed and their memory reused: no deadlock, every
//! product after its inputs' writers and before their later readers, every buffer bound
//! until the product is done, counters that only grow, across the wrap at 2^32. And each
//! invariant, broken on purpose, is caught.

use burn_amp::cublaslt::GemmPlan;
use burn_amp::cublaslt::order::{BufferId, Issued, ProductIo, Protocol, Step, reached, simulate};

use super::gemm_plans::every_plan;

/// A training-step-like stream of work around the products of `plans`: for each, a CubeCL
/// kernel writes its input, the product (a linear's forward), a kernel reads its output,
/// then the two gradient products share one handshake; the input is freed and its memory
/// reused by the next tensor.
fn step_like(plans: &[GemmPlan], protocol: &mut Protocol) -> Vec<Issued> {
    let mut issued = Vec::new();
    let mut next: BufferId = 100;
    let mut fresh = || {
        next += 1;
        next
    };
    let weight = fresh();
    let mut reused: Option<BufferId> = None;
    for _ in plans {
        let x = reused.take().unwrap_or_else(&mut fresh);
        let (y, g, dx, dw) = (fresh(), fresh(), fresh(), fresh());
        issued.push(Issued::Cube(ProductIo {
            reads: vec![],
            writes: vec![x],
        }));
        let forward = vec![ProductIo {
            reads: vec![x, weight],
            writes: vec![y],
        }];
        issued.push(Issued::Handshake(protocol.handshake(&forward), forward));
        issued.push(Issued::Cube(ProductIo {
            reads: vec![y],
            writes: vec![g],
        }));
        let backward = vec![
            ProductIo {
                reads: vec![g, weight],
                writes: vec![dx],
            },
            ProductIo {
                reads: vec![x, g],
                writes: vec![dw],
            },
        ];
        issued.push(Issued::Handshake(protocol.handshake(&backward), backward));
        issued.push(Issued::Free(x));
        issued.push(Issued::Cube(ProductIo {
            reads: vec![dw],
            writes: vec![weight],
        }));
        // The freed input's memory is the next input (as CubeCL's pool hands it out).
        reused = Some(x);
    }
    issued
}

#[test]
fn the_handshake_orders_every_planned_product_without_deadlock() {
    let plans = every_plan();
    assert!(
        plans.len() >= 15,
        "the plan tests build {} plans",
        plans.len()
    );
    let mut protocol = Protocol::new();
    let issued = step_like(&plans, &mut protocol);
    simulate(&issued).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        protocol.last() as usize,
        2 * plans.len(),
        "one handshake per group"
    );
    // Each handshake's steps in the stream order the executor runs them.
    for item in &issued {
        if let Issued::Handshake(steps, group) = item {
            assert!(matches!(steps[0], Step::Signal { .. }));
            assert!(matches!(steps[1], Step::Wait { .. }));
            assert_eq!(steps.len(), group.len() + 4);
        }
    }
}

#[test]
fn counters_wrap_past_u32_max_in_cudas_order() {
    let plans = every_plan();
    let mut protocol = Protocol::after(u32::MAX - 3);
    let issued = step_like(&plans[..4], &mut protocol);
    simulate(&issued).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        protocol.last() < 10,
        "the counter wrapped: {}",
        protocol.last()
    );
    assert!(reached(2, u32::MAX) && !reached(u32::MAX, 2));
    assert!(reached(7, 7) && !reached(6, 7));
}

/// `issued` with the steps of its first handshake changed by `edit`.
fn broken(issued: &[Issued], edit: impl Fn(&mut Vec<Step>)) -> Vec<Issued> {
    let mut issued = issued.to_vec();
    let first = issued
        .iter_mut()
        .find_map(|i| match i {
            Issued::Handshake(steps, _) => Some(steps),
            _ => None,
        })
        .expect("a handshake");
    edit(first);
    issued
}

#[test]
fn each_broken_invariant_is_caught() {
    let plans = every_plan();
    let issued = step_like(&plans[..3], &mut Protocol::new());
    simulate(&issued).unwrap();
    let no_wait = broken(&issued, |s| s.retain(|x| !matches!(x, Step::Wait { .. })));
    let err = simulate(&no_wait).expect_err("a product without its wait");
    assert!(err.contains("before the CubeCL kernel"), "{err}");
    let no_spin = broken(&issued, |s| s.retain(|x| !matches!(x, Step::Spin { .. })));
    let err = simulate(&no_spin).expect_err("a product without its spin");
    assert!(err.contains("ran before product"), "{err}");
    let unbound = broken(&issued, |s| {
        if let Some(Step::Spin { bound, .. }) = s.last_mut() {
            bound.pop();
        }
    });
    let err = simulate(&unbound).expect_err("a buffer left unbound");
    assert!(err.contains("not bound"), "{err}");
    let no_write = broken(&issued, |s| s.retain(|x| !matches!(x, Step::Write { .. })));
    let err = simulate(&no_write).expect_err("a spin with no write");
    assert!(err.contains("spin before the write"), "{err}");
    let stale = broken(&issued, |s| {
        if let Some(Step::Wait { value }) = s.get_mut(1) {
            *value += 5;
        }
    });
    let err = simulate(&stale).expect_err("a wait for a signal that never comes");
    assert!(err.contains("deadlock"), "{err}");
    // A counter handed out twice.
    let mut repeated = issued.clone();
    let first = repeated[1].clone();
    repeated.insert(2, first);
    let err = simulate(&repeated).expect_err("a repeated counter");
    assert!(err.contains("does not follow"), "{err}");
    // A product on a buffer freed before its handshake.
    let mut freed = issued.clone();
    if let Issued::Handshake(_, group) = &freed[1] {
        let x = group[0].reads[0];
        freed.insert(1, Issued::Free(x));
    }
    let err = simulate(&freed).expect_err("a freed buffer");
    assert!(err.contains("after it was freed"), "{err}");
}
