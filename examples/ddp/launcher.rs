//! The launcher: a free port for replica 0, one process per replica, and the wait.

use std::net::TcpListener;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use crate::Options;

/// The replica processes; whatever ends the launcher ends them too (by PID).
struct Replicas(Vec<(usize, Child)>);

impl Drop for Replicas {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// What to say when `rank` failed: which replicas failed how (a peer's death makes the
/// others fail too, within a moment), the ones still running ended by the caller's drop.
fn failed(rank: usize, status: ExitStatus, replicas: &mut [(usize, Child)]) -> String {
    std::thread::sleep(Duration::from_millis(500));
    let mut lines = vec![format!("replica {rank}: {status}")];
    for (other, child) in replicas.iter_mut().filter(|(r, _)| *r != rank) {
        match child.try_wait() {
            Ok(Some(s)) if !s.success() => lines.push(format!("replica {other}: {s}")),
            Ok(Some(_)) => {}
            _ => lines.push(format!("replica {other}: still running, ended")),
        }
    }
    format!("the run failed: {}", lines.join("; "))
}

pub fn run(options: &Options) -> Result<(), String> {
    let root = free_port()?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let forwarded: Vec<String> = std::env::args().skip(1).collect();
    println!(
        "ddp: {} replicas, policy {}, replica 0 listening on port {root}",
        options.workers, options.policy
    );
    std::fs::create_dir_all(&options.checkpoint_dir).map_err(|e| e.to_string())?;
    for rank in 0..options.workers {
        // A digest left by an earlier run must not pass for this one's.
        let _ = std::fs::remove_file(crate::replica::digest_path(options, rank));
    }
    let mut replicas = Replicas(Vec::new());
    for rank in 0..options.workers {
        let child = Command::new(&exe)
            .args(&forwarded)
            .args(["--replica".to_string(), rank.to_string(), root.to_string()])
            .stdin(Stdio::null())
            .spawn()
            .map_err(|e| format!("replica {rank}: {e}"))?;
        replicas.0.push((rank, child));
    }
    // Every collective call of a replica is bounded by --timeout: a dead or hung peer makes
    // the others fail within it, and the first failure ends the run.
    let mut remaining: Vec<usize> = (0..options.workers).collect();
    while !remaining.is_empty() {
        for (rank, child) in &mut replicas.0 {
            if !remaining.contains(rank) {
                continue;
            }
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                remaining.retain(|r| r != rank);
                if !status.success() {
                    return Err(failed(*rank, status, &mut replicas.0));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("ddp: all {} replicas finished", options.workers);
    let digests: Vec<String> = (0..options.workers)
        .map(|rank| {
            std::fs::read_to_string(crate::replica::digest_path(options, rank)).unwrap_or_default()
        })
        .collect();
    if digests.iter().all(|d| !d.is_empty() && *d == digests[0]) {
        println!(
            "ddp: parameters identical on every replica (digest {})",
            digests[0].trim()
        );
        Ok(())
    } else {
        Err(format!("the replicas' parameters differ: {digests:?}"))
    }
}
