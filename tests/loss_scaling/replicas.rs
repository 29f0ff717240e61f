//! Data parallelism across processes: two replica processes on this machine, each training
//! the MLP on its own shard with a `LossScaleOptimizer` that reduces through a
//! `TcpCollective`, an overflow injected on one
//! replica only. Both must skip that step, halve to the same scale, and end 20 steps with
//! bit-identical parameters; under FP8 delayed scaling both amax histories must equal, step
//! by step, the maximum of what each replica saw; under APS the same. A replica that dies
//! gives the other a typed error within its timeout.
//!
//! Each test is its own launcher: run without `BURN_AMP_REPLICA` it runs this test binary
//! twice more, filtered to the same test, with `BURN_AMP_REPLICA` set; run with it, the test
//! is a replica, prints its report and exits.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::backend::{Autodiff, Flex};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams};
use burn_amp::collective::{Collective, TcpCollective};
use burn_amp::{LossScaleConfig, LossScaleError, MixedPrecision, Policy, with_policy};

use super::common::{Mlp, bytes, teacher_batch};

type M = MixedPrecision<Autodiff<Flex>>;

/// Set in a replica process: `rank,world,root port,case`.
const ENV: &str = "BURN_AMP_REPLICA";
const STEPS: usize = 20;
const POISONED_RANK: usize = 1;
const POISONED_STEP: usize = 5;
/// Replica 1 of the "dies" case exits before this step; of the "hangs" case, sleeps.
const DIES_AT: usize = 3;
/// How long a replica waits for its peer in the "dies" and "hangs" cases.
const SHORT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a launcher waits for its replicas.
const LAUNCHER_TIMEOUT: Duration = Duration::from_secs(240);

const F16: &str = "params=float32,compute=float16,output=float32";

fn case_policy(case: &str) -> String {
    match case {
        "f16" | "dies" | "hangs" => "mixed_float16".into(),
        "delayed" => format!("{F16},fp8=delayed,history=4"),
        "aps" => format!("{F16},grads=aps"),
        other => panic!("unknown case {other}"),
    }
}

#[test]
fn two_processes_mixed_float16_agree_on_the_skip_and_stay_bit_identical() {
    let [a, b] = launch(
        "f16",
        "two_processes_mixed_float16_agree_on_the_skip_and_stay_bit_identical",
    );
    assert_same_run(&a, &b);
}

#[test]
fn two_processes_fp8_delayed_share_the_max_amax_history() {
    let [a, b] = launch(
        "delayed",
        "two_processes_fp8_delayed_share_the_max_amax_history",
    );
    assert_same_run(&a, &b);
    assert!(!a.amax_local.is_empty(), "no FP8 amax recorded");
    let mut differed = 0;
    for (step, ((la, lb), (ra, rb))) in a
        .amax_local
        .iter()
        .zip(&b.amax_local)
        .zip(a.amax_reduced.iter().zip(&b.amax_reduced))
        .enumerate()
    {
        assert_eq!(ra, rb, "step {step}: the replicas' newest amaxes differ");
        assert_eq!(la.len(), ra.len());
        for (i, r) in ra.iter().enumerate() {
            let (x, y) = (f32::from_bits(la[i]), f32::from_bits(lb[i]));
            if x.is_nan() || y.is_nan() {
                // The poisoned step's gradient amax: any NaN is fine, as long as both agree.
                continue;
            }
            let max = x.max(y);
            assert_eq!(
                f32::from_bits(*r),
                max,
                "step {step} entry {i}: not the max"
            );
            differed += usize::from(la[i] != lb[i]);
        }
    }
    // The shards differ, so the replicas saw different amaxes (the reduction did something).
    assert!(
        differed > 0,
        "the replicas saw the same amaxes: the test shows nothing"
    );
    assert_eq!(a.history, b.history, "the final amax histories differ");
}

#[test]
fn two_processes_with_aps_stay_bit_identical() {
    let [a, b] = launch("aps", "two_processes_with_aps_stay_bit_identical");
    assert_same_run(&a, &b);
}

#[test]
fn a_replica_that_dies_gives_the_other_a_typed_error_in_bounded_time() {
    let started = Instant::now();
    let [a, b] = launch(
        "dies",
        "a_replica_that_dies_gives_the_other_a_typed_error_in_bounded_time",
    );
    assert_peer_failed(&a, &b, "data-parallel step failed");
    assert!(started.elapsed() < LAUNCHER_TIMEOUT);
}

#[test]
fn a_replica_that_hangs_gives_the_other_a_timeout() {
    let [a, b] = launch("hangs", "a_replica_that_hangs_gives_the_other_a_timeout");
    assert_peer_failed(&a, &b, "no result after");
}

/// Replica 1 left (exit code 3) and replica 0 failed with an error saying `message`.
fn assert_peer_failed(a: &Report, b: &Report, message: &str) {
    assert_eq!(
        b.status,
        Some(3),
        "replica 1 should have left at step {DIES_AT}"
    );
    assert_eq!(
        a.status,
        Some(2),
        "replica 0 should have failed: {}",
        a.output
    );
    assert!(
        a.output.contains(message),
        "replica 0's error: {}",
        a.output
    );
}

/// What a replica printed.
#[derive(Debug, Default)]
struct Report {
    status: Option<i32>,
    output: String,
    skipped: u64,
    total: u64,
    scale: f32,
    params: String,
    /// Per step, the newest amax of every FP8 role before and after the step's reduction.
    amax_local: Vec<Vec<u32>>,
    amax_reduced: Vec<Vec<u32>>,
    history: String,
}

fn assert_same_run(a: &Report, b: &Report) {
    for r in [a, b] {
        assert_eq!(r.status, Some(0), "a replica failed: {}", r.output);
        assert_eq!((r.total, r.skipped), (STEPS as u64, 1), "{}", r.output);
        assert_eq!(r.scale, 16384.0, "one halving from 2^15");
    }
    assert!(!a.params.is_empty());
    assert_eq!(a.params, b.params, "the replicas' parameters differ");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Starts the orchestrator and two replicas of `test`; their reports once both ended.
fn launch(case: &str, test: &str) -> [Report; 2] {
    if let Ok(spec) = std::env::var(ENV) {
        replica(&spec);
    }
    let root = free_port();
    let exe = std::env::current_exe().expect("test binary");
    let path = format!("replicas::{test}");
    let dir = std::env::temp_dir();
    let mut children: Vec<(Child, PathBuf)> = (0..2)
        .map(|rank| {
            let log = dir.join(format!("burn-amp-{case}-{}-{rank}.log", std::process::id()));
            let file = std::fs::File::create(&log).expect("log file");
            let child = Command::new(&exe)
                .args([path.as_str(), "--exact", "--nocapture", "--test-threads=1"])
                .env(ENV, format!("{rank},2,{root},{case}"))
                .stdout(file.try_clone().expect("log"))
                .stderr(file)
                .stdin(Stdio::null())
                .spawn()
                .expect("replica process");
            (child, log)
        })
        .collect();
    let deadline = Instant::now() + LAUNCHER_TIMEOUT;
    let mut status = [None, None];
    while status.iter().any(Option::is_none) {
        for (i, (child, _)) in children.iter_mut().enumerate() {
            if status[i].is_none()
                && let Some(s) = child.try_wait().expect("wait")
            {
                status[i] = Some(s.code().unwrap_or(-1));
            }
        }
        if Instant::now() > deadline {
            for (child, _) in &mut children {
                let _ = child.kill();
            }
            let logs: Vec<String> = children
                .iter()
                .map(|(_, log)| std::fs::read_to_string(log).unwrap_or_default())
                .collect();
            panic!("replicas still running after {LAUNCHER_TIMEOUT:?}: {logs:#?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let reports: Vec<Report> = children
        .iter()
        .zip(status)
        .map(|((_, log), status)| {
            let output = std::fs::read_to_string(log).unwrap_or_default();
            let _ = std::fs::remove_file(log);
            parse(status, output)
        })
        .collect();
    reports.try_into().expect("two reports")
}

fn parse(status: Option<i32>, output: String) -> Report {
    let mut report = Report {
        status,
        ..Report::default()
    };
    let bits = |v: &str| -> Vec<u32> {
        v.split(',')
            .filter(|x| !x.is_empty())
            .map(|x| u32::from_str_radix(x, 16).expect("hex"))
            .collect()
    };
    for line in output.lines() {
        // The test harness may print its "test ... " on the same line first.
        let Some((key, value)) = line
            .find("REPORT ")
            .and_then(|at| line[at + "REPORT ".len()..].split_once('='))
        else {
            continue;
        };
        match key {
            "skipped" => report.skipped = value.parse().expect("skipped"),
            "total" => report.total = value.parse().expect("total"),
            "scale" => report.scale = value.parse().expect("scale"),
            "params" => report.params = value.to_string(),
            "history" => report.history = value.to_string(),
            "local" => report.amax_local.push(bits(value)),
            "reduced" => report.amax_reduced.push(bits(value)),
            _ => {}
        }
    }
    report.output = output;
    report
}

/// The newest amax of every FP8 role (sites in call order, roles in order), as bits.
fn newest_amaxes(optim_history: &burn_amp::fp8::Fp8History) -> Vec<u32> {
    let device = Default::default();
    optim_history
        .sites::<burn::backend::flex::FlexDevice>(&device)
        .iter()
        .flat_map(|site| site.roles.values())
        .filter_map(|role| role.history.back().map(|a| a.to_bits()))
        .collect()
}

fn hex(values: &[u32]) -> String {
    values.iter().fold(String::new(), |mut s, v| {
        let _ = write!(s, "{v:08x},");
        s
    })
}

/// A replica's whole life: join, train `STEPS` steps, report, exit.
fn replica(spec: &str) -> ! {
    let fields: Vec<&str> = spec.split(',').collect();
    let [rank, world, root, case] = fields[..] else {
        panic!("bad {ENV}: {spec}");
    };
    let (rank, world): (usize, usize) = (rank.parse().unwrap(), world.parse().unwrap());
    let device = Default::default();
    let policy: Policy = case_policy(case).parse().expect("policy");
    let root = format!("127.0.0.1:{root}").parse().expect("address");
    let timeout = if matches!(case, "dies" | "hangs") {
        SHORT_TIMEOUT
    } else {
        Duration::from_secs(60)
    };
    let replica = Arc::new(TcpCollective::join(rank, world, root, timeout).expect("join"));
    let code = with_policy(policy, || {
        let mut model = Mlp::<M>::new(8, 16, 4, &device);
        let mut optim = LossScaleConfig::new()
            .init(AdamConfig::new().init())
            .expect("optimizer")
            .with_collective::<Flex>(replica.clone() as Arc<dyn Collective<Flex>>);
        for step in 0..STEPS {
            if case == "dies" && rank == 1 && step == DIES_AT {
                std::process::exit(3);
            }
            if case == "hangs" && rank == 1 && step == DIES_AT {
                // Stuck (outside any collective call) for longer than replica 0 waits.
                std::thread::sleep(SHORT_TIMEOUT * 3);
                std::process::exit(3);
            }
            // Each replica its own shard: batches 2k and 2k + 1 of the task.
            let (x, y) = teacher_batch::<M>(world * step + rank, 32, 8, 4, &device);
            let logits = model.forward(x);
            let mut loss = CrossEntropyLossConfig::new()
                .init(&device)
                .forward(logits, y);
            if rank == POISONED_RANK && step == POISONED_STEP {
                loss = loss.mul_scalar(f32::INFINITY);
            }
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            let history = optim.fp8_history().clone();
            if !history.is_empty() {
                println!("REPORT local={}", hex(&newest_amaxes(&history)));
            }
            model = match optim.try_step(1e-2, model, grads) {
                Ok(model) => model,
                Err(err @ LossScaleError::Collective(_)) => {
                    println!("replica {rank}: {err}");
                    return 2;
                }
                Err(err) => panic!("{err}"),
            };
            if !history.is_empty() {
                println!("REPORT reduced={}", hex(&newest_amaxes(&history)));
            }
        }
        // The values only: parameter ids are drawn per process.
        let mut values = Vec::new();
        for layer in [&model.fc1, &model.fc2, &model.out] {
            values.extend(bytes(layer.weight.val()));
            values.extend(bytes(layer.bias.as_ref().expect("bias").val()));
        }
        let params: String = values.iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        });
        println!("REPORT skipped={}", optim.skipped_steps());
        println!("REPORT total={}", optim.total_steps());
        println!("REPORT scale={}", optim.loss_scale());
        println!("REPORT params={params}");
        let sites = optim
            .fp8_history()
            .sites::<burn::backend::flex::FlexDevice>(&device);
        let histories: Vec<String> = sites
            .iter()
            .flat_map(|s| s.roles.values())
            .map(|r| hex(&r.history.iter().map(|a| a.to_bits()).collect::<Vec<_>>()))
            .collect();
        println!("REPORT history={}", histories.join(";"));
        0
    });
    std::process::exit(code);
}
