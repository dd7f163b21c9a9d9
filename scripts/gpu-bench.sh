#!/usr/bin/env bash
# The cuda_sm61 benchmarks on a machine with an NVIDIA GPU, after scripts/gpu-check.sh has
# built the tree: a full-size random Qwen3-VL-2B from `qvl mkmodel`, then qvl-bench on
# cuda_sm61 with the shapes of docs/BENCHMARKS.md (pp512, tg128, batch 1) for each weight
# storage dtype, with a 4096-token KV cache (so the device memory figure includes a long
# context's cache), and one 1024x768 picture through the vision tower. Figures go to stdout and, when $OUT is set, to
# $OUT/gpu-bench/*.txt.
#
# Usage: scripts/gpu-bench.sh [build-dir] [config.json]
#   build-dir   default build-gpu (as gpu-check.sh); config default .scratch/config-2b.json
# QVL_BENCH_WEIGHTS overrides the dtypes (default "bf16 f16 q8_0"); QVL_BENCH_ARGS adds flags.
set -u

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$SRC/build-gpu}"
CONFIG="${2:-$SRC/.scratch/config-2b.json}"
MODEL="${QVL_BENCH_MODEL:-/tmp/q2b}"
LOGS="${OUT:-$BUILD}/gpu-bench"
mkdir -p "$LOGS"

if [ ! -x "$BUILD/tools/qvl-bench" ] || [ ! -x "$BUILD/tools/qvl" ]; then
    echo "gpu-bench: $BUILD has no tools/qvl-bench (run scripts/gpu-check.sh first)" >&2
    exit 1
fi
if [ ! -f "$MODEL/model.safetensors" ]; then
    if [ ! -f "$CONFIG" ]; then
        echo "gpu-bench: no model at $MODEL and no config at $CONFIG" >&2
        exit 1
    fi
    echo "== qvl mkmodel: random full-size model from $CONFIG -> $MODEL"
    t0=$(date +%s.%N)
    "$BUILD/tools/qvl" mkmodel --config "$CONFIG" --out "$MODEL" || exit 1
    echo "   $(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $t0}") s"
fi
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>/dev/null |
    sed 's/^/gpu: /'

status=0
for w in ${QVL_BENCH_WEIGHTS:-bf16 f16 q8_0}; do
    extra=()
    # The vision figure once (bf16, as stored): one 1024x768 picture, first and warm.
    [ "$w" = bf16 ] && extra=(--image 1024x768)
    echo "== cuda_sm61, weights $w: -p 512 -n 128 -r 3 --ctx 4096 ${extra[*]}"
    # shellcheck disable=SC2086
    "$BUILD/tools/qvl-bench" -m "$MODEL" --backend cuda_sm61 --weights "$w" -p 512 -n 128 -r 3 \
        --ctx 4096 "${extra[@]}" ${QVL_BENCH_ARGS:-} 2>&1 | tee "$LOGS/bench-$w.txt"
    [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
exit $status
