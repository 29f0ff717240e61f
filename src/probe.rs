//! Whether a backend can start on this machine, as a typed error that names the missing piece
//! (the NVIDIA driver, NVRTC, the CUDA headers, a Vulkan driver) instead of a panic from deep
//! inside a driver loader.
//!
//! Burn's CUDA backend loads `libcuda` and NVRTC when its first tensor is made, and reports a
//! missing library by panicking, often on a device thread (the caller then sees only a closed
//! channel). [`probe_backend`] makes one tiny tensor, catches that panic and reads every
//! thread's message.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, PoisonError};

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

/// Why a backend could not start here; every variant keeps the loader's own first line in
/// `detail`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BackendUnavailable {
    /// `libcuda.so.1` (the NVIDIA driver's library) is not on the loader's path.
    #[error(
        "the CUDA driver library (libcuda.so.1, from the NVIDIA driver) could not be loaded: \
         is an NVIDIA driver installed and its library on the loader's path? ({detail})"
    )]
    CudaDriver {
        /// The loader's message.
        detail: String,
    },
    /// NVRTC (`libnvrtc.so`, from the CUDA toolkit), which compiles the kernels, is missing.
    #[error(
        "NVRTC (libnvrtc.so, from the CUDA toolkit) could not be loaded: install the CUDA \
         toolkit or put its lib64 folder on LD_LIBRARY_PATH ({detail})"
    )]
    Nvrtc {
        /// The loader's message.
        detail: String,
    },
    /// The kernels' compiler did not find the CUDA headers.
    #[error(
        "the CUDA headers were not found: set CUDA_PATH to the toolkit (with include/) ({detail})"
    )]
    CudaHeaders {
        /// The compiler's message.
        detail: String,
    },
    /// wgpu found no adapter: no Vulkan loader, or no driver (ICD) for it.
    #[error(
        "no GPU adapter: the Vulkan loader (libvulkan.so.1) or a driver's ICD is missing \
         ({detail})"
    )]
    NoAdapter {
        /// wgpu's message.
        detail: String,
    },
    /// The backend failed in a way the probe does not recognise.
    #[error("the backend did not start ({detail})")]
    Failed {
        /// The backend's message.
        detail: String,
    },
}

impl BackendUnavailable {
    /// Sorts a backend's panic message into the piece it says is missing.
    ///
    /// ```
    /// use burn_amp::BackendUnavailable;
    ///
    /// let why = BackendUnavailable::from_message("Unable to dynamically load the \"cuda\" shared library");
    /// assert!(matches!(why, BackendUnavailable::CudaDriver { .. }));
    /// assert!(why.to_string().contains("libcuda.so.1"));
    /// ```
    pub fn from_message(message: &str) -> Self {
        let lower = message.to_lowercase();
        let detail = message.lines().next().unwrap_or("").to_string();
        if lower.contains("nvrtc") {
            Self::Nvrtc { detail }
        } else if lower.contains("cuda shared library")
            || lower.contains("\"cuda\" shared library")
            || lower.contains("libcuda")
        {
            Self::CudaDriver { detail }
        } else if lower.contains("cuda_fp16.h")
            || lower.contains("cuda_bf16.h")
            || lower.contains("include path")
            || lower.contains("cannot open source file")
        {
            Self::CudaHeaders { detail }
        } else if lower.contains("adapter") || lower.contains("vulkan") {
            Self::NoAdapter { detail }
        } else {
            Self::Failed { detail }
        }
    }
}

/// Starts `B` on `device` with one tiny reduction: `Ok` when the backend works here, a
/// [`BackendUnavailable`] naming what is missing otherwise. Call it once before training
/// (a CUDA binary on a machine without a GPU then says so instead of panicking).
///
/// While it runs it replaces the process's panic hook (restored before it returns), so that
/// it can read a panic on a device thread; panics elsewhere in the process during those
/// moments are collected instead of printed.
///
/// ```
/// use burn::backend::Flex;
///
/// burn_amp::probe_backend::<Flex>(&Default::default())?;
/// # Ok::<(), burn_amp::BackendUnavailable>(())
/// ```
pub fn probe_backend<B: Backend>(device: &B::Device) -> Result<(), BackendUnavailable> {
    catch_start(|| {
        Tensor::<B, 1>::ones([4], device).sum().into_scalar();
    })
}

/// Runs `start`; a panic in it, or on any thread while it runs, becomes the
/// [`BackendUnavailable`] its messages describe.
fn catch_start(start: impl FnOnce()) -> Result<(), BackendUnavailable> {
    // Global: the panic hook is the process's; probes take turns swapping it.
    static PROBING: Mutex<()> = Mutex::new(());
    let _turn = PROBING.lock().unwrap_or_else(PoisonError::into_inner);

    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let previous = std::panic::take_hook();
    let sink = seen.clone();
    std::panic::set_hook(Box::new(move |info| {
        let message = panic_message(info.payload());
        sink.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(message);
    }));
    let outcome = catch_unwind(AssertUnwindSafe(start));
    std::panic::set_hook(previous);
    outcome.map_err(|panic| {
        let mut messages = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if messages.is_empty() {
            messages.push(panic_message(&*panic));
        }
        // A message that names a missing piece wins over "channel closed" and the like.
        messages
            .iter()
            .map(|m| BackendUnavailable::from_message(m))
            .find(|why| !matches!(why, BackendUnavailable::Failed { .. }))
            .unwrap_or_else(|| BackendUnavailable::from_message(&messages.join(" | ")))
    })
}

/// A panic payload's text (`panic!` with a literal gives `&str`, with arguments `String`).
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_missing_piece() {
        let cases = [
            (
                "Unable to dynamically load the \"cuda\" shared library - searched for library names: [\"cuda\", \"nvcuda\"]",
                "CudaDriver",
            ),
            (
                "Unable to dynamically load the \"nvrtc\" shared library",
                "Nvrtc",
            ),
            (
                "catastrophic error: cannot open source file \"cuda_fp16.h\"",
                "CudaHeaders",
            ),
            ("No possible adapter available for backend", "NoAdapter"),
            ("channel closed", "Failed"),
        ];
        for (message, expected) in cases {
            let why = BackendUnavailable::from_message(message);
            assert!(
                format!("{why:?}").starts_with(expected),
                "{message:?} -> {why:?}, expected {expected}"
            );
            assert!(why.to_string().contains(message.lines().next().unwrap()));
        }
    }

    /// A loader that panics on a device thread, the caller then panicking on the closed
    /// channel (what Burn's CUDA backend does without a driver): the device thread's message
    /// is the one reported.
    #[test]
    fn a_panic_on_a_device_thread_is_the_one_reported() {
        let why = catch_start(|| {
            let device = std::thread::spawn(|| {
                panic!("Unable to dynamically load the \"cuda\" shared library");
            });
            if device.join().is_err() {
                panic!("channel closed");
            }
        })
        .unwrap_err();
        assert!(
            matches!(why, BackendUnavailable::CudaDriver { .. }),
            "{why:?}"
        );
        assert!(catch_start(|| ()).is_ok());
    }

    #[test]
    fn flex_starts() {
        assert_eq!(
            probe_backend::<burn::backend::Flex>(&Default::default()),
            Ok(())
        );
    }
}
