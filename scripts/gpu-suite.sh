#!/usr/bin/env bash
# burn-amp's GPU suite: build and pack it here, run it on a GPU machine.
#
#   scripts/gpu-suite.sh pack [--profile release|dev] [DIR]
#       Builds examples/gpu_suite (and bench, gpt) with --features cuda on this x86-64 Linux machine (no GPU
#       and no CUDA toolkit needed: CUDA is loaded at run time), strips and compresses it into
#       DIR (default target/gpu-suite) with this script and the PyTorch companion, and checks
#       that the folder is at most 60 MiB and that the binary links only against system
#       libraries (listed in DIR/MANIFEST.txt).
#
#   DIR/gpu-suite.sh cpu
#       On the GPU machine's host CPU: the benchmark's scaling table (1, 2, 4, ... threads up
#       to its cores) and its CPU rows with PyTorch's in the same run (python3 with torch),
#       then the GPT example's tokens/s under float32, mixed_bfloat16 and FP8 (GPT_STEPS
#       steps each, default 60), written into DIR/cpu-report.md.
#
#   DIR/gpu-suite.sh run [-- SUITE ARGS]
#       On a Linux machine with an NVIDIA driver and a CUDA toolkit (no Rust, no network):
#       names any missing runtime piece (libcuda, NVRTC, CUDA headers, Vulkan loader), unpacks
#       the binary, runs it and writes DIR/report.md; then, if python3 has torch with CUDA,
#       appends PyTorch AMP's speed-ups on the same shapes (not with GPU_SUITE_NO_PYTORCH=1).
#       GPU_SUITE_TIMEOUT=SECONDS bounds the suite's own run (default: none). SUITE ARGS:
#       --checks-only, --profile-only, --products-only (the cuBLASLt checks and rates),
#       --ordered (also the products ordered with CubeCL's stream: their chain hung once on
#       an H100, so give GPU_SUITE_TIMEOUT), --out FILE.
#
#   scripts/gpu-suite.sh record REPORT [FILE [SECTION]]
#       Back here: writes REPORT (the report.md a run wrote) into FILE (default BENCHMARKS.md)
#       between its SECTION markers (default gpu-suite; gpu-products for a --products-only
#       run), headings demoted under the file's GPU section.
#
#   scripts/gpu-suite.sh quick [CARGO ARGS]
#       The suite's quick mode on the CPU (Flex, and wgpu over lavapipe): what CI runs (with
#       the test build's features, so that nothing is rebuilt).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
limit_mib=60
# Libraries every x86-64 glibc Linux has; the binary may link against these and no others.
system_libs="libc.so.6 libm.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2 libdl.so.2 libpthread.so.0 librt.so.1"

die() {
    echo "gpu-suite: $*" >&2
    exit 2
}

pack() {
    local profile=release dir=""
    while [ $# -gt 0 ]; do
        case "$1" in
        --profile) profile="$2"; shift 2 ;;
        *) dir="$1"; shift ;;
        esac
    done
    local root
    root="$(cd "$here/.." && pwd)"
    dir="${dir:-$root/target/gpu-suite}"
    local built="$root/target/$([ "$profile" = dev ] && echo debug || echo "$profile")/examples/gpu_suite"
    echo "gpu-suite: building gpu_suite, bench and gpt (--profile $profile --features cuda,nccl)"
    (cd "$root" && cargo build --profile "$profile" --features cuda,nccl --example gpu_suite \
        --example bench --example gpt)
    mkdir -p "$dir"
    rm -f "$dir"/{gpu_suite,bench,gpt}{,.xz}
    cp "$built" "$dir/gpu_suite"
    cp "$(dirname "$built")/bench" "$dir/bench"
    cp "$(dirname "$built")/gpt" "$dir/gpt"
    strip "$dir/gpu_suite" "$dir/bench" "$dir/gpt"
    local stripped
    stripped=$(stat -c %s "$dir/gpu_suite")
    local needed
    needed=$(readelf -d "$dir/gpu_suite" "$dir/bench" "$dir/gpt" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u)
    xz -6 -T0 -f "$dir/gpu_suite" "$dir/bench" "$dir/gpt"
    cp "$here/gpu-suite.sh" "$dir/gpu-suite.sh"
    cp "$root/benches/pytorch_mlp.py" "$dir/pytorch_mlp.py"
    cp "$root/examples/data/tinyshakespeare/input.txt" "$dir/tinyshakespeare.txt"
    local bad=""
    for lib in $needed; do
        case " $system_libs " in
        *" $lib "*) ;;
        *) bad="$bad $lib" ;;
        esac
    done
    local total
    total=$(du -sb "$dir" | cut -f1)
    {
        echo "burn-amp GPU suite, packed $(date -u +%Y-%m-%dT%H:%MZ) from commit $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
        echo "profile: $profile; features: cuda, nccl (and the default wgpu)"
        echo "binary: $(stat -c %s "$built") bytes built, $stripped stripped, $(stat -c %s "$dir/gpu_suite.xz") with xz -6; bench: $(stat -c %s "$dir/bench.xz") with xz -6"
        echo "links against (NEEDED): $(echo $needed)"
        echo "loaded at run time: libcuda.so.1 (NVIDIA driver), libnvrtc.so (CUDA toolkit) and the CUDA headers (CUDA_PATH), libvulkan.so.1 (wgpu), libnccl.so.2 (NCCL: the nvidia-nccl wheel PyTorch brings is found)"
        echo "folder: $total bytes (limit $limit_mib MiB)"
    } >"$dir/MANIFEST.txt"
    cat "$dir/MANIFEST.txt"
    [ -z "$bad" ] || die "the binary links against non-system libraries:$bad"
    [ "$total" -le $((limit_mib * 1024 * 1024)) ] || die "the pack is $total bytes, over $limit_mib MiB"
    echo "gpu-suite: packed into $dir; copy it to the GPU machine and run: $dir/gpu-suite.sh run"
}

# Finds a library by name on the loader's cache or the given folders.
find_lib() {
    local name="$1"
    shift
    if ldconfig -p 2>/dev/null | grep -q "$name"; then
        return 0
    fi
    local d extra="${LD_LIBRARY_PATH:-}"
    for d in "$@" ${extra//:/ }; do
        compgen -G "$d/$name*" >/dev/null && return 0
    done
    return 1
}

run() {
    [ "${1:-}" = "--" ] && shift
    local dir="$here"
    [ -f "$dir/gpu_suite.xz" ] || die "no gpu_suite.xz beside this script: run 'pack' first and copy its folder"
    [ "$(uname -m)" = x86_64 ] || die "the pack is an x86-64 binary; this machine is $(uname -m)"
    if [ -z "${CUDA_PATH:-}" ]; then
        for d in /usr/local/cuda /opt/cuda; do
            [ -d "$d/include" ] && export CUDA_PATH="$d" && break
        done
    fi
    local missing=0
    if ! find_lib libcuda.so.1 /usr/lib/x86_64-linux-gnu /usr/local/nvidia/lib64; then
        echo "gpu-suite: missing libcuda.so.1: the NVIDIA driver's library is not on the loader's path" >&2
        missing=1
    fi
    if ! find_lib libnvrtc.so "${CUDA_PATH:-/usr/local/cuda}/lib64"; then
        echo "gpu-suite: missing libnvrtc.so: install the CUDA toolkit (NVRTC compiles the kernels) or set CUDA_PATH" >&2
        missing=1
    fi
    if [ ! -f "${CUDA_PATH:-/usr/local/cuda}/include/cuda_fp16.h" ]; then
        echo "gpu-suite: missing the CUDA headers (cuda_fp16.h): set CUDA_PATH to the toolkit's folder" >&2
        missing=1
    fi
    if ! find_lib libvulkan.so.1; then
        echo "gpu-suite: missing libvulkan.so.1 (the Vulkan loader): the wgpu half of the suite will report UNAVAILABLE" >&2
    fi
    [ "$missing" -eq 0 ] || die "CUDA runtime pieces are missing (above); nothing was run"
    if [ -n "${CUDA_PATH:-}" ]; then
        export LD_LIBRARY_PATH="$CUDA_PATH/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    fi
    # NCCL: the system's, else the nvidia-nccl wheel PyTorch installs.
    if ! find_lib libnccl.so.2; then
        local nccl_dir
        nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
        if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/libnccl.so.2" ]; then
            export LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        else
            echo "gpu-suite: no libnccl.so.2 (system or pip nvidia-nccl): the NCCL checks will FAIL naming it" >&2
        fi
    fi
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    local bin
    bin="$(mktemp -d)/gpu_suite"
    xz -dc "$dir/gpu_suite.xz" >"$bin"
    chmod +x "$bin"
    local status=0
    # GPU_SUITE_TIMEOUT (seconds) bounds the suite itself, so that PyTorch's rows still come
    # when a lease is short; a suite stopped early leaves its printed lines, not the report.
    timeout "${GPU_SUITE_TIMEOUT:-0}" "$bin" --out "$dir/report.md" "$@" || status=$?
    if [ -n "${GPU_SUITE_NO_PYTORCH:-}" ]; then
        echo "gpu-suite: GPU_SUITE_NO_PYTORCH set: PyTorch figures skipped" >&2
    elif python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        echo "gpu-suite: PyTorch AMP on the same shapes"
        {
            echo
            echo "## PyTorch AMP, same GPU, same shapes"
            echo
            python3 "$dir/pytorch_mlp.py" --device cuda --workloads mlp-gpu,encoder-gpu
        } >>"$dir/report.md" || echo "gpu-suite: the PyTorch run failed (see above)" >&2
    else
        echo "gpu-suite: no python3 with CUDA-enabled torch: PyTorch figures skipped" >&2
    fi
    echo "gpu-suite: report in $dir/report.md (exit $status)"
    return "$status"
}

cpu() {
    local dir="$here" work
    [ -f "$dir/bench.xz" ] || die "no bench.xz beside this script: run 'pack' first and copy its folder"
    work="$(mktemp -d)"
    xz -dc "$dir/bench.xz" >"$work/bench"
    chmod +x "$work/bench"
    # The benchmark runs PyTorch's companion from benches/, relative to where it runs.
    mkdir -p "$work/benches"
    cp "$dir/pytorch_mlp.py" "$work/benches/"
    lscpu | grep -E "Model name|^CPU\(s\)|Flags" | sed 's/^/gpu-suite: /' | cut -c1-300
    (cd "$work" && ./bench --scaling --out "$dir/cpu-report.md" &&
        ./bench --only cpu --out "$dir/cpu-report.md")
    gpt_cpu "$work"
    echo "gpu-suite: CPU report in $dir/cpu-report.md"
}

# The GPT example's default preset on the CPU under float32, mixed_bfloat16 and FP8
# (GPT_STEPS steps each, default 60), its summary lines appended to the CPU report.
gpt_cpu() {
    local dir="$here" work="$1" policy
    [ -f "$dir/gpt.xz" ] || return 0
    xz -dc "$dir/gpt.xz" >"$work/gpt"
    chmod +x "$work/gpt"
    {
        echo
        echo "## GPT example, default preset, ${GPT_STEPS:-60} steps a policy ($(nproc) threads)"
        echo
        for policy in float32 mixed_bfloat16 float8_from_mixed_bfloat16; do
            "$work/gpt" --policy "$policy" --steps "${GPT_STEPS:-60}" --eval-every 100000 \
                --sample-len 0 --data "$dir/tinyshakespeare.txt" 2>&1 | grep "final validation" |
                sed 's/^/- /'
        done
    } | tee -a "$dir/cpu-report.md"
}

record() {
    local report="${1:-}" root
    root="$(cd "$here/.." && pwd)"
    local file="${2:-$root/BENCHMARKS.md}" section="${3:-gpu-suite}"
    [ -f "$report" ] || die "record: no report at '$report' (the report.md that 'run' wrote)"
    grep -q "^<!-- $section:begin" "$file" && grep -q "^<!-- $section:end -->" "$file" ||
        die "record: $file has no $section:begin/end markers"
    local body
    body=$(mktemp)
    sed -E 's/^#{1,2} /### /' "$report" >"$body"
    awk -v body="$body" -v begin="^<!-- $section:begin" -v end="^<!-- $section:end -->" '
        $0 ~ begin { print; while ((getline line < body) > 0) print line; skip = 1; next }
        $0 ~ end { skip = 0 }
        !skip { print }
    ' "$file" >"$file.tmp"
    mv "$file.tmp" "$file"
    rm -f "$body"
    echo "gpu-suite: $report written into $file"
}

quick() {
    local root
    root="$(cd "$here/.." && pwd)"
    export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/tmp/burn-amp-xdg}"
    mkdir -p "$XDG_RUNTIME_DIR"
    (cd "$root" && cargo run "$@" --example gpu_suite -- --quick --out target/gpu-suite-quick.md)
}

case "${1:-}" in
pack) shift; pack "$@" ;;
run) shift; run "$@" ;;
cpu) shift; cpu "$@" ;;
record) shift; record "$@" ;;
quick) shift; quick "$@" ;;
*)
    awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
