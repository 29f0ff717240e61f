//! `--bench-allreduce`: the gradient bucket's all-reduce as a data-parallel step makes it (a
//! Flex tensor through `MpiCollective`, read to the host and back) against a bare blocking
//! `MPI_Allreduce` of the same f32 values, timed alternately on every rank.

use std::sync::Arc;
use std::time::Instant;

use burn::backend::Flex;
use burn::module::Module;
use burn::tensor::{Tensor, TensorData};
use burn_amp::collective::{Collective, MpiCollective};
use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::CommunicatorCollectives;

use crate::Options;
use crate::config::TrainConfig;
use crate::model::Gpt;
use crate::section;

const ROUNDS: usize = 40;

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Median milliseconds of the collective's and the bare call's all-reduce of `n` values.
fn time(group: &MpiCollective, world: &SimpleCommunicator, n: usize) -> Result<(f64, f64), String> {
    let device = Default::default();
    let values: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 1e-3).collect();
    let mut recv = vec![0.0f32; n];
    let (mut ours, mut bare) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS + 3 {
        // A bucket of its own each time, as a step's (the gradients concatenated).
        let tensor = Tensor::<Flex, 1>::from_data(TensorData::new(values.clone(), [n]), &device);
        world.barrier();
        let start = Instant::now();
        let sum = Collective::<Flex>::all_reduce_sum(group, tensor).map_err(|e| e.to_string())?;
        // Wait for the result the way a step does: the next op reads it.
        let _ = sum.slice(0..1).into_data();
        let a = start.elapsed().as_secs_f64() * 1e3;
        world.barrier();
        let start = Instant::now();
        world.all_reduce_into(&values[..], &mut recv[..], SystemOperation::sum());
        let b = start.elapsed().as_secs_f64() * 1e3;
        if round >= 3 {
            ours.push(a);
            bare.push(b);
        }
    }
    Ok((median(ours), median(bare)))
}

pub fn run(options: &Options, group: &Arc<MpiCollective>) -> Result<(), String> {
    let world = SimpleCommunicator::world();
    let mut rows = Vec::new();
    let mut buckets = Vec::new();
    for preset in ["tiny", "cpu"] {
        let config = TrainConfig::preset(preset)?;
        let model: Gpt<Flex> = config.model.init(&Default::default());
        buckets.push((format!("GPT `{preset}`"), model.num_params()));
    }
    buckets.push(("8M parameters".to_string(), 8 << 20));
    for (name, n) in buckets {
        let (ours, bare) = time(group, &world, n)?;
        rows.push(format!(
            "| {name}: {n} f32 ({:.1} MB) | {ours:.3} ms | {bare:.3} ms | {:.2}x |",
            n as f64 * 4.0 / 1e6,
            ours / bare
        ));
    }
    if group.rank() != 0 {
        return Ok(());
    }
    let command = format!(
        "cargo build --release --features mpi --example ddp && mpirun -n {} \
         target/release/examples/ddp --bench-allreduce --write BENCHMARKS.md",
        group.world_size()
    );
    let body = format!(
        "Machine: {} (the cores a rank sees: mpirun binds each to one); {}; {} ranks on this \
         machine; {}.\n\n\
         | gradient bucket | `MpiCollective` in a step | bare `MPI_Allreduce` | ratio |\n\
         |---|---|---|---|\n{}\n\n\
         Median of {ROUNDS} calls each, alternated, after a barrier. The collective's column \
         is what a data-parallel step pays for its bucket: the Flex tensor read to the host (no copy: \
         its buffer), a non-blocking barrier polled against the timeout, MPI's blocking \
         all-reduce into a buffer kept from the previous call, the sum made a tensor again.\n",
        section::machine(),
        MpiCollective::library_version(),
        group.world_size(),
        section::date(),
        rows.join("\n")
    );
    println!("{body}");
    if let Some(path) = &options.write {
        section::write_section(path, "allreduce", &command, &body).map_err(|e| e.to_string())?;
        println!("wrote section `allreduce` of {}", path.display());
    }
    Ok(())
}
