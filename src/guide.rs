//! The burn-amp guide, chapters to read in order. Every code block in it is compiled (and
//! most are run) as a doc test.
//!
//! 1. [Getting started](getting_started): the dependency lines, the one changed type, a
//!    complete program, the examples.
//! 2. [The mixed-precision recipe](recipe): policy, f32 output, loss scaling, the Learner.
//! 3. [Policies and casting rules](policies): the policy names and spec strings, which op
//!    runs in which dtype, which backend runs which policy.
//! 4. [FP8](fp8): the FP8 toolbox and FP8 training (scalings, formats, numerics report).
//! 5. [Blocked accumulation](accumulation): sums and matmuls in narrow accumulators.
//! 6. [Performance](performance): burn-amp's CPU kernels, `FusedAdamW`, the step cost report.
//! 7. [Data parallel](data_parallel): several devices, several processes.
//! 8. [Checkpoints and resume](checkpoints): what the records hold and how they are checked.
//! 9. [Backends and GPUs](backends): CUDA, the kernel check without a GPU, the GPU suite.
//! 10. [Troubleshooting](troubleshooting): each error and what to do about it.

#[doc = include_str!("../guide/01-getting-started.md")]
pub mod getting_started {}

#[doc = include_str!("../guide/02-recipe.md")]
pub mod recipe {}

#[doc = include_str!("../guide/03-policies.md")]
pub mod policies {}

#[doc = include_str!("../guide/04-fp8.md")]
pub mod fp8 {}

#[doc = include_str!("../guide/05-accumulation.md")]
pub mod accumulation {}

#[doc = include_str!("../guide/06-performance.md")]
pub mod performance {}

#[doc = include_str!("../guide/07-data-parallel.md")]
pub mod data_parallel {}

#[doc = include_str!("../guide/08-checkpoints.md")]
pub mod checkpoints {}

#[doc = include_str!("../guide/09-backends.md")]
pub mod backends {}

#[doc = include_str!("../guide/10-troubleshooting.md")]
pub mod troubleshooting {}
