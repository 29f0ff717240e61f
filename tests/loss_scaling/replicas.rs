//! Data parallelism across processes under MPI: `mpirun -n 2` runs this test binary twice,
//! each process a replica training the MLP on its own shard with a `LossScaleOptimizer` that
//! reduces through an `MpiCollective`, an overflow injected on one replica only. Both must
//! skip that step, halve to the same scale, and end 20 steps with bit-identical parameters;
//! under FP8 delayed scaling both amax histories must equal, step by step, the maximum of
//! what each replica saw; under APS the same. A replica that hangs gives the other a typed
//! error naming the step within its timeout; one that dies ends the job within it.
//!
//! Each test is its own launcher: run without `BURN_AMP_REPLICA` it runs `mpirun -n 2` on
//! this test binary, filtered to the same test, with `BURN_AMP_REPLICA` set; run with it, the
//! test is a replica: it writes its report to a file and exits. Needs `mpirun` (Open MPI or
//! MPICH) on the `PATH`; `./scripts/test.sh` installs Open MPI.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::backend::{Autodiff, Flex};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::{AdamConfig, GradientsParams};
use burn_amp::collective::{Collective, MpiCollective};
use burn_amp::{LossScaleConfig, LossScaleError, MixedPrecision, Policy, with_policy};

use super::common::{Mlp, bytes, teacher_batch};

type M = MixedPrecision<Autodiff<Flex>>;

/// Set in a replica process: `case,report directory`.
const ENV: &str = "BURN_AMP_REPLICA";
const STEPS: usize = 20;
const POISONED_RANK: usize = 1;
const POISONED_STEP: usize = 5;
/// Replica 1 of the "dies" case exits before this step; of the "hangs" case, sleeps.
const DIES_AT: usize = 3;
/// How long a replica waits for its peer in the "dies" and "hangs" cases (after both have
/// started: see `replica`).
const SHORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a launcher waits for its replicas.
const LAUNCHER_TIMEOUT: Duration = Duration::from_secs(240);
/// How long the job may take to end once a replica died or timed out: the timeout and 5 s.
const FAILURE_BOUND: Duration = Duration::from_secs(SHORT_TIMEOUT.as_secs() + 5);

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
fn a_replica_that_dies_ends_the_job_naming_it_in_bounded_time() {
    let [a, b] = launch(
        "dies",
        "a_replica_that_dies_ends_the_job_naming_it_in_bounded_time",
    );
    // Open MPI's mpirun ends the job as soon as a rank exits with a non-zero status, naming
    // it, before replica 0's own timeout runs out.
    assert_ne!(a.status, Some(0), "the job should have failed");
    assert!(
        b.output
            .contains(&format!("replica 1 leaves at step {DIES_AT}")),
        "replica 1 did not report leaving: {}\nmpirun: {}",
        b.output,
        a.launcher
    );
    // Open MPI names a process `[[job,1],rank]`; MPICH says `rank N`.
    let named = a.launcher.contains("],1]") || a.launcher.contains("rank 1");
    assert!(
        named && a.launcher.contains('3'),
        "mpirun did not name rank 1 and its exit code 3: {}",
        a.launcher
    );
    let took = a.ended_at.saturating_sub(b.at);
    assert!(
        b.at > 0 && took <= FAILURE_BOUND.as_millis() as u64,
        "the job ended {took} ms after replica 1 left (bound {FAILURE_BOUND:?})"
    );
}

#[test]
fn a_replica_that_hangs_gives_the_other_a_timeout_naming_the_step() {
    let [a, b] = launch(
        "hangs",
        "a_replica_that_hangs_gives_the_other_a_timeout_naming_the_step",
    );
    assert_ne!(a.status, Some(0), "the job should have failed");
    assert!(
        b.output
            .contains(&format!("replica 1 hangs at step {DIES_AT}")),
        "replica 1 did not report its hang: {}\nmpirun: {}",
        b.output,
        a.launcher
    );
    let expected = format!("data-parallel step {} failed", DIES_AT + 1);
    assert!(
        a.output.contains(&expected) && a.output.contains("no result after"),
        "replica 0 should have timed out at step {}: {}\nmpirun: {}",
        DIES_AT + 1,
        a.output,
        a.launcher
    );
    // Replica 0 fails within its timeout (plus 5 s) of replica 1's hang, and the job ends
    // within the same bound.
    let failed = a.failed_at.saturating_sub(b.at);
    let ended = a.ended_at.saturating_sub(b.at);
    assert!(
        b.at > 0 && failed >= SHORT_TIMEOUT.as_millis() as u64 / 2,
        "replica 0 failed {failed} ms after replica 1 began to hang: before any timeout?"
    );
    assert!(
        failed <= FAILURE_BOUND.as_millis() as u64 && ended <= FAILURE_BOUND.as_millis() as u64,
        "replica 0 failed {failed} ms and the job ended {ended} ms after the hang \
         (bound {FAILURE_BOUND:?})"
    );
}

/// What a replica reported, and how the job ended.
#[derive(Debug, Default)]
struct Report {
    /// mpirun's exit status (the same for both replicas).
    status: Option<i32>,
    /// What mpirun printed itself (and the replicas' stderr).
    launcher: String,
    /// When mpirun ended, and when the replica left or began to hang / got its error
    /// (milliseconds since the epoch).
    ended_at: u64,
    at: u64,
    failed_at: u64,
    /// The replica's report file.
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

/// Runs `mpirun -n 2` on this test binary filtered to `test`; the replicas' reports.
fn launch(case: &str, test: &str) -> [Report; 2] {
    if let Ok(spec) = std::env::var(ENV) {
        replica(&spec);
    }
    let exe = std::env::current_exe().expect("test binary");
    let dir = std::env::temp_dir().join(format!("burn-amp-{case}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("report directory");
    let started = Instant::now();
    let mut child = mpirun(2, &dir)
        .args(["-x", ENV])
        .arg(&exe)
        .args([
            format!("replicas::{test}").as_str(),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ENV, format!("{case},{}", dir.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mpirun (Open MPI or MPICH) on the PATH: ./scripts/test.sh installs Open MPI");
    let deadline = started + LAUNCHER_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mpirun still running after {LAUNCHER_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let ended_at = now_ms();
    let output = child.wait_with_output().expect("mpirun's output");
    let launcher = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let reports: Vec<Report> = (0..2)
        .map(|rank| {
            let file = report_path(&dir, rank);
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            let mut report = parse(status.code(), text);
            report.launcher = launcher.clone();
            report.ended_at = ended_at;
            report
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    reports.try_into().expect("two reports")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
}

/// `mpirun -n ranks` as it runs anywhere: as root too (containers), with more ranks than
/// cores, and without the shared-memory single-copy mechanism containers lack.
/// `mpirun -n ranks`, its temporary files under `tmp`: Open MPI's session directory is
/// otherwise `/tmp/ompi.<host>.<uid>` for every job, and two jobs the harness starts at once
/// can race to create it ("mkdir ... File exists"), which fails one of them.
fn mpirun(ranks: usize, tmp: &Path) -> Command {
    let mut command = Command::new("mpirun");
    command
        .args(["--allow-run-as-root", "--oversubscribe", "-n"])
        .arg(ranks.to_string())
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("TMPDIR", tmp);
    command
}

fn report_path(dir: &Path, rank: usize) -> PathBuf {
    dir.join(format!("replica-{rank}.txt"))
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
            "at" => report.at = value.parse().expect("at"),
            "failed_at" => report.failed_at = value.parse().expect("failed_at"),
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

/// Appends lines to this replica's report file.
struct Out(std::fs::File);

impl Out {
    fn line(&mut self, line: impl AsRef<str>) {
        use std::io::Write as _;
        writeln!(self.0, "{}", line.as_ref()).expect("report file");
        self.0.flush().expect("report file");
    }
}

/// A replica's whole life: join, train `STEPS` steps, report, exit.
fn replica(spec: &str) -> ! {
    let Some((case, dir)) = spec.split_once(',') else {
        panic!("bad {ENV}: {spec}");
    };
    let timeout = if matches!(case, "dies" | "hangs") {
        SHORT_TIMEOUT
    } else {
        Duration::from_secs(60)
    };
    let group = Arc::new(MpiCollective::world(timeout).expect("MPI"));
    let (rank, world) = (group.rank(), group.world_size());
    assert_eq!(world, 2, "run by mpirun -n 2");
    let mut out = Out(std::fs::File::create(report_path(Path::new(dir), rank)).expect("report"));
    // Both replicas started before any step's timeout runs: a blocking broadcast (no
    // timeout) as a barrier, so that a slow process start under load is not taken for a hang.
    group.broadcast(0, &mut [0u8]);
    let device = Default::default();
    let policy: Policy = case_policy(case).parse().expect("policy");
    let code = with_policy(policy, || {
        let mut model = Mlp::<M>::new(8, 16, 4, &device);
        let mut optim = LossScaleConfig::new()
            .init(AdamConfig::new().init())
            .expect("optimizer")
            .with_collective::<Flex>(group.clone() as Arc<dyn Collective<Flex>>);
        for step in 0..STEPS {
            if case == "dies" && rank == 1 && step == DIES_AT {
                out.line(format!("replica 1 leaves at step {step}"));
                out.line(format!("REPORT at={}", now_ms()));
                std::process::exit(3);
            }
            if case == "hangs" && rank == 1 && step == DIES_AT {
                // Stuck (outside any collective call) for longer than replica 0 waits.
                out.line(format!("replica 1 hangs at step {step}"));
                out.line(format!("REPORT at={}", now_ms()));
                std::thread::sleep(SHORT_TIMEOUT * 10);
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
                out.line(format!("REPORT local={}", hex(&newest_amaxes(&history))));
            }
            model = match optim.try_step(1e-2, model, grads) {
                Ok(model) => model,
                Err(err @ LossScaleError::Collective { .. }) => {
                    out.line(format!("REPORT failed_at={}", now_ms()));
                    out.line(format!("replica {rank}: {err}"));
                    return 2;
                }
                Err(err) => panic!("{err}"),
            };
            if !history.is_empty() {
                out.line(format!("REPORT reduced={}", hex(&newest_amaxes(&history))));
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
        out.line(format!("REPORT skipped={}", optim.skipped_steps()));
        out.line(format!("REPORT total={}", optim.total_steps()));
        out.line(format!("REPORT scale={}", optim.loss_scale()));
        out.line(format!("REPORT params={params}"));
        let sites = optim
            .fp8_history()
            .sites::<burn::backend::flex::FlexDevice>(&device);
        let histories: Vec<String> = sites
            .iter()
            .flat_map(|s| s.roles.values())
            .map(|r| hex(&r.history.iter().map(|a| a.to_bits()).collect::<Vec<_>>()))
            .collect();
        out.line(format!("REPORT history={}", histories.join(";")));
        0
    });
    if code == 0 {
        // MPI_Finalize (the last reference to the collective) before a clean exit: Open MPI
        // counts a rank that exits without it as failed.
        drop(group);
        std::process::exit(0);
    }
    // A failed collective leaves MPI unusable: exit without finalising; mpirun ends the job.
    std::process::exit(code);
}
