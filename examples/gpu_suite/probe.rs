//! Whether a backend can start here, with a message that names the missing piece instead of
//! a panic from deep inside a driver loader.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use burn::tensor::Tensor;
use burn::tensor::backend::Backend;

use crate::checks::panic_message;

/// Starts `B` on its default device with one tiny op; `Err` says what is missing.
pub fn start<B: Backend>(what: &str) -> Result<(), String> {
    // The loaders report a missing library by panicking, often on a device thread (the main
    // thread then only sees a closed channel): collect every thread's message meanwhile.
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let hook = std::panic::take_hook();
    let sink = seen.clone();
    std::panic::set_hook(Box::new(move |info| {
        let message = panic_message(info.payload());
        sink.lock().unwrap_or_else(|e| e.into_inner()).push(message);
    }));
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let device = B::Device::default();
        Tensor::<B, 1>::ones([4], &device).sum().into_scalar();
    }));
    std::panic::set_hook(hook);
    outcome.map_err(|_| {
        let messages = seen.lock().unwrap_or_else(|e| e.into_inner()).join(" | ");
        explain(what, &messages)
    })
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
