#!/usr/bin/env bash
# Runs burn-amp's test suite on any Linux machine, GPU or not.
#
# wgpu needs a Vulkan driver. On a machine without one (CI has no GPU) this installs Mesa's
# software driver, lavapipe (Debian/Ubuntu package `mesa-vulkan-drivers`), so the wgpu
# tests run on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."

has_vulkan_driver() {
    compgen -G "/usr/share/vulkan/icd.d/*.json" >/dev/null ||
        compgen -G "/etc/vulkan/icd.d/*.json" >/dev/null ||
        [ -n "${VK_DRIVER_FILES:-}${VK_ICD_FILENAMES:-}" ]
}

if ! has_vulkan_driver; then
    echo "test.sh: no Vulkan driver found; installing Mesa's lavapipe (mesa-vulkan-drivers)"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends mesa-vulkan-drivers >/dev/null
fi

# The data-parallel tests run replicas under `mpirun`, and the `mpi` feature builds against
# an MPI library (bindgen reads its headers with libclang). Open MPI is installed where no
# MPI is found (Debian/Ubuntu packages).
if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
    echo "test.sh: no MPI found; installing Open MPI (openmpi-bin libopenmpi-dev libclang-dev)"
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends openmpi-bin libopenmpi-dev \
        libclang-dev >/dev/null
fi
# Containers lack the kernel's cross-memory attach Open MPI's shared memory uses by default.
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"

# wgpu warns when XDG_RUNTIME_DIR is unset; any writable directory will do.
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
    export XDG_RUNTIME_DIR="${TMPDIR:-/tmp}/burn-amp-xdg"
    mkdir -p "$XDG_RUNTIME_DIR"
fi

# `cuda` and `nccl` compile the CUDA backend's code (cuBLASLt, NCCL, the CUDA kernels' hosts)
# without needing CUDA: their libraries load at run time, and no test here needs a GPU (the
# GPU suite, `scripts/gpu-suite.sh`, runs on one). With them, the dependencies built here are
# the ones the GPU suite's build needs too.
features="slow-tests,ndarray,mpi,cuda,nccl"
cargo test --workspace --all-targets --features "$features" "$@"
# Which CPU kernels the tests above held to their references on this machine (the AVX-512
# BF16 one only where the CPU has it): the same build, one test, its line printed.
cargo test --workspace --features "$features" --test kernels -q -- --nocapture \
    cpu_kernels_report_what_runs_here 2>&1 | grep "CPU kernels:" || true
# The same features as above, so the doc tests reuse that build instead of another one.
cargo test --workspace --doc --features "$features"
