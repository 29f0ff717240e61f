//! Whether a backend can start here, with a message that names the missing piece instead of
//! a panic from deep inside a driver loader.

use std::panic::{AssertUnwindSafe, catch_unwind};

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::checks::panic_message;

/// Starts `B` on its default device with one tiny op; `Err` says what is missing.
pub fn start<B: Backend>(what: &str) -> Result<(), String> {
    // The loaders report a missing library by panicking; silence the default hook meanwhile.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let device = B::Device::default();
        Tensor::<B, 1>::ones([4], &device).sum().into_scalar();
    }));
    std::panic::set_hook(hook);
    outcome.map_err(|panic| explain(what, &panic_message(&*panic)))
}

fn explain(what: &str, message: &str) -> String {
    let lower = message.to_lowercase();
    let missing = if lower.contains("nvrtc") {
        "NVRTC (libnvrtc.so, from the CUDA toolkit) could not be loaded: install the CUDA \
         toolkit or put its lib64 folder on LD_LIBRARY_PATH"
    } else if lower.contains("cuda shared library") || lower.contains("libcuda") {
        "the CUDA driver library (libcuda.so.1, from the NVIDIA driver) could not be loaded: \
         is an NVIDIA driver installed and its library on the loader's path?"
    } else if lower.contains(".h") || lower.contains("include") {
        "the CUDA headers were not found: set CUDA_PATH to the toolkit (with include/)"
    } else if lower.contains("adapter") || lower.contains("vulkan") {
        "no GPU adapter: the Vulkan loader (libvulkan.so.1) or a driver's ICD is missing"
    } else {
        "the backend did not start"
    };
    format!(
        "{what}: {missing} ({})",
        message.lines().next().unwrap_or("")
    )
}
