//! What the mnist and gpt examples' command lines share: the `--backend` flag and the run on
//! the backend it names, numbers with the flag in their error, and how `main` reports a bad
//! command line or a failed run.

use std::str::FromStr;

use burn::backend::{Autodiff, Flex, NdArray, Wgpu};
use burn::tensor::backend::AutodiffBackend;

/// The backends `--backend` names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BackendKind {
    Flex,
    Wgpu,
    Cuda,
    NdArray,
}

impl FromStr for BackendKind {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        match name {
            "flex" => Ok(Self::Flex),
            "wgpu" => Ok(Self::Wgpu),
            "cuda" => Ok(Self::Cuda),
            "ndarray" => Ok(Self::NdArray),
            other => Err(format!(
                "--backend: unknown backend {other:?}; use flex, wgpu, cuda or ndarray"
            )),
        }
    }
}

/// A run generic over the backend, started by [`BackendKind::run`].
pub trait Job {
    type Output;

    fn run<B: AutodiffBackend>(&self) -> Result<Self::Output, String>;
}

impl BackendKind {
    /// Runs `job` on this backend (under `Autodiff`), after checking that the backend starts
    /// here: a CUDA build without a GPU names what is missing instead of panicking.
    pub fn run<J: Job>(self, job: &J) -> Result<J::Output, String> {
        fn on<B: AutodiffBackend, J: Job>(job: &J) -> Result<J::Output, String> {
            burn_amp::probe_backend::<B>(&Default::default()).map_err(|e| e.to_string())?;
            job.run::<B>()
        }
        match self {
            Self::Flex => on::<Autodiff<Flex>, J>(job),
            Self::Wgpu => on::<Autodiff<Wgpu>, J>(job),
            Self::NdArray => on::<Autodiff<NdArray>, J>(job),
            #[cfg(feature = "cuda")]
            Self::Cuda => on::<Autodiff<burn::backend::Cuda>, J>(job),
            #[cfg(not(feature = "cuda"))]
            Self::Cuda => {
                Err("this build has no CUDA backend: rebuild with `--features cuda`".into())
            }
        }
    }
}

/// `value` parsed as a number, or an error naming `flag`.
pub fn number<T: FromStr>(flag: &str, value: String) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag}: {value:?} is not a valid number"))
}

/// The parsed command line; with `--help` (an empty error) prints `usage` and exits 0, on a
/// bad command line prints the error and `usage` and exits 2.
pub fn parsed_or_exit<T>(parsed: Result<T, String>, usage: &str) -> T {
    match parsed {
        Ok(parsed) => parsed,
        Err(message) if message.is_empty() => {
            println!("{usage}");
            std::process::exit(0);
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{usage}");
            std::process::exit(2);
        }
    }
}

/// The run's result, or its error printed and exit code 2.
pub fn succeeded_or_exit<T>(result: Result<T, String>) -> T {
    result.unwrap_or_else(|message| {
        eprintln!("error: {message}");
        std::process::exit(2);
    })
}
