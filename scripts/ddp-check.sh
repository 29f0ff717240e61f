#!/usr/bin/env bash
# Data parallel under MPI, end to end: examples/ddp on 2 ranks (mpirun), for four policies
# (mixed_float16; FP8 delayed scaling, whose amax histories the checkpoint holds; bfloat16
# and float16, whose 16-bit parameters sit beside f32 optimizer state):
#   - 8 steps straight, a checkpoint every 4;
#   - 4 steps, then `--resume` to 8 from that checkpoint: the same final digest, bit for bit;
#   - one rank exiting at step 3: the job ends non-zero, mpirun naming the rank, in bounded time.
# Usage: scripts/ddp-check.sh [cargo build flags, e.g. --features mpi]
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --example ddp "$@"
ddp=target/debug/examples/ddp
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
mpirun_2() { mpirun --allow-run-as-root --oversubscribe -n 2 "$ddp" "$@"; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

digest_of() { grep -o "parameters identical on 2 replicas (digest [0-9a-f]*)" "$1"; }

for policy in mixed_float16 "params=float32,compute=float16,output=float32,fp8=delayed" \
    bfloat16 float16; do
    echo "-- policy $policy"
    mpirun_2 --policy "$policy" --steps 8 --checkpoint-every 4 --checkpoint-dir "$dir/straight" \
        | tee "$dir/straight.log"
    mpirun_2 --policy "$policy" --steps 4 --checkpoint-every 4 --checkpoint-dir "$dir/resumed" \
        >/dev/null
    mpirun_2 --policy "$policy" --steps 8 --checkpoint-every 4 --checkpoint-dir "$dir/resumed" \
        --resume | tee "$dir/resumed.log"
    straight=$(digest_of "$dir/straight.log")
    resumed=$(digest_of "$dir/resumed.log")
    if [ "$straight" != "$resumed" ]; then
        echo "ddp-check: resumed run differs: $resumed, straight: $straight" >&2
        exit 1
    fi
    echo "ddp-check: resume bit-identical ($resumed)"
    rm -rf "$dir/straight" "$dir/resumed"
done

echo "-- rank 1 exits at step 3"
start=$(date +%s)
if mpirun_2 --steps 30 --fail-at 3 --fail-rank 1 --timeout 10 --checkpoint-dir "$dir/fail" \
    >"$dir/fail.log" 2>&1; then
    cat "$dir/fail.log"
    echo "ddp-check: the job should have failed" >&2
    exit 1
fi
took=$(($(date +%s) - start))
cat "$dir/fail.log"
# Open MPI names a process [[job,1],rank]; MPICH says "rank N".
if ! grep -q "rank 1: exiting at step 3" "$dir/fail.log" ||
    ! grep -Eq '\],1\]|rank 1 ' "$dir/fail.log"; then
    echo "ddp-check: the failed rank and step are not named" >&2
    exit 1
fi
if [ "$took" -gt 15 ]; then
    echo "ddp-check: the job took ${took}s to end (timeout 10 s + 5)" >&2
    exit 1
fi
echo "ddp-check: the job ended in ${took}s naming rank 1 and step 3"
