#!/usr/bin/env bash
# Compiles every CubeCL kernel of burn-amp to PTX for sm_80 (A100), sm_89 (L4, RTX 40),
# sm_90a (H100, H200) and sm_100a (B200) with NVRTC, on any x86-64 Linux machine: no GPU,
# no CUDA toolkit. NVRTC and the CUDA headers come from NVIDIA's PyPI wheels, installed
# once into target/cuda-wheels (about 150 MB unpacked).
#
#   ./scripts/cuda-check.sh                 # CUDA 13: the table kernel x architecture, then
#                                           # the check's own tests
#   CUDA_MAJOR=12 ./scripts/cuda-check.sh   # the same table with CUDA 12.9's NVRTC
#   ./scripts/cuda-check.sh --list          # every instantiation, one line each
#   ./scripts/cuda-check.sh --source adamw  # the generated CUDA C++ of the matching kernels
#
# Arguments go to examples/cuda_check (shaders/examples/cuda_check.rs). To use a CUDA
# installation instead, set CUDA_PATH, put its NVRTC on LD_LIBRARY_PATH and run
# `cargo run -p burn-amp-kernels --features cuda-check --example cuda_check`.
set -euo pipefail
cd "$(dirname "$0")/.."

major="${CUDA_MAJOR:-13}"
case "$major" in
13)
    # NVRTC, the runtime headers (cuda_fp16.h, cuda_bf16.h, ...) and the crt/ headers that
    # cuda_runtime.h includes; all three unpack into nvidia/cu13.
    packages="nvidia-cuda-nvrtc==13.5.37 nvidia-cuda-runtime==13.5.37 nvidia-cuda-crt==13.5.37"
    headers=nvidia/cu13
    libs=nvidia/cu13/lib
    ;;
12)
    packages="nvidia-cuda-nvrtc-cu12==12.9.86 nvidia-cuda-runtime-cu12==12.9.79"
    headers=nvidia/cuda_runtime
    libs=nvidia/cuda_nvrtc/lib
    ;;
*)
    echo "cuda-check.sh: CUDA_MAJOR must be 12 or 13, not $major" >&2
    exit 2
    ;;
esac
wheels="target/cuda-wheels/cuda$major"
if [ ! -f "$wheels/.installed" ] || [ "$(cat "$wheels/.installed")" != "$packages" ]; then
    echo "cuda-check.sh: installing from PyPI into $wheels: $packages"
    rm -rf "$wheels"
    # shellcheck disable=SC2086 # one word per package
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$wheels" \
        $packages
    echo "$packages" >"$wheels/.installed"
fi
CUDA_PATH="$(cd "$wheels/$headers" && pwd)"
export CUDA_PATH
export LD_LIBRARY_PATH="$(cd "$wheels/$libs" && pwd)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

cargo run -q -p burn-amp-kernels --features cuda-check --example cuda_check -- "$@"
if [ $# -eq 0 ] && [ "$major" = 13 ]; then
    # The check itself must be able to fail: a broken kernel is reported with NVRTC's log.
    cargo test -q -p burn-amp-kernels --features cuda-check --test cuda_check -- --include-ignored
fi
