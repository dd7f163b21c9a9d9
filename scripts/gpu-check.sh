#!/usr/bin/env bash
# Checks the cuda_sm61 backend on a machine with an NVIDIA GPU, in one go:
#   1. configure (Release) and build the whole tree;
#   2. qvl-backend-ops (the conformance suite): every op and fused op on cuda_sm61 against the
#      reference backend; test_cuda_backend: what only cuda_sm61 has (graph replay, the upload
#      ring, launch groups, tiles);
#   3. test_parity, test_vision_parity: Hugging Face parity fixtures (text, images) on every
#      backend that loads, which must include cuda_sm61 here;
#   4. qvl-graph --cross-check reference,cuda_sm61 on tests/fixtures/tiny-tied (text-prefill,
#      text-decode, vision; fused and --no-fuse; a few odd sizes);
#   5. compute-sanitizer --tool memcheck on the conformance suite and test_cuda_backend.
# Each step prints one line (PASS / FAIL / SKIP and why); a failing step also prints the end
# of its log. A summary comes last; the exit status is 0 only when nothing failed.
#
# Usage: scripts/gpu-check.sh [build-dir]     (default: build-gpu; run from anywhere)
# QVL_CUDA_SO_PREBUILT=LIB tests LIB instead of the cuda_sm61 just built (scripts/gpu-check-pascal.sh).
# On a GPU machine without the Debian -dev packages, first: . scripts/device-deps.sh env
# (after `bash scripts/device-deps.sh fetch` on a Debian machine, carrying .devdeps along).
# Logs: <build-dir>/gpu-check/*.log, also copied to $OUT/gpu-check when $OUT is set.
set -u

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$SRC/build-gpu}"
LOGS="$BUILD/gpu-check"
JOBS="${QVL_JOBS:-$(nproc 2>/dev/null || echo 4)}"
CONFIG="$SRC/tests/fixtures/tiny-tied/config.json"
mkdir -p "$LOGS"

declare -a SUMMARY=()
FAILED=0

now() { date +%s; }

# record NAME STATUS DETAIL
record() {
    SUMMARY+=("$(printf '%-4s  %-44s %s' "$2" "$1" "$3")")
    printf '[%s] %s: %s\n' "$2" "$1" "$3"
    if [ "$2" = FAIL ]; then FAILED=$((FAILED + 1)); fi
}

show_tail() { # the end of a failing step's log
    echo "----- last lines of $1 -----"
    tail -n "${2:-25}" "$1"
    echo "-----"
}

# step NAME LOGFILE COMMAND...: runs COMMAND, logs everything, PASS on exit status 0.
step() {
    local name="$1" log="$2"
    shift 2
    local t0
    t0=$(now)
    "$@" >"$log" 2>&1
    local rc=$?
    local dt=$(($(now) - t0))
    if [ $rc -eq 0 ]; then
        record "$name" PASS "${dt}s"
    else
        record "$name" FAIL "exit status $rc after ${dt}s (log: $log)"
        show_tail "$log"
    fi
    return $rc
}

echo "== qvl gpu-check: cuda_sm61 backend =="
echo "source: $SRC"
echo "build:  $BUILD"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader |
        sed 's/^/gpu:    /'
else
    echo "gpu:    nvidia-smi not found (the CUDA steps will say whether a device is usable)"
fi
command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -n 1 | sed 's/^/nvcc:   /'

# ---- 1. configure and build ------------------------------------------------------------------
# QVL_CMAKE_ARGS adds configure options (e.g. "-DQVL_WERROR=ON"); QVL_JOBS caps the build jobs.
# shellcheck disable=SC2206
CMAKE_ARGS=(-S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release ${QVL_CMAKE_ARGS:-})
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    CMAKE_ARGS+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
if ! step "configure (Release)" "$LOGS/configure.log" cmake "${CMAKE_ARGS[@]}"; then
    echo "RESULT: configure failed; nothing else can run."
    exit 1
fi
grep -E "qvl: (CUDA|cuda_sm61|no sm_61)" "$LOGS/configure.log" | sed 's/^-- /       /'
if ! step "build (all targets, -j$JOBS)" "$LOGS/build.log" cmake --build "$BUILD" -j "$JOBS"; then
    grep -E "error|Error" "$LOGS/build.log" | head -n 20
    echo "RESULT: build failed; nothing else can run."
    exit 1
fi
SO="$BUILD/backends/cuda_sm61/libqvl-cuda_sm61.so"
if [ -f "$SO" ]; then
    record "libqvl-cuda_sm61.so built" PASS "$SO"
else
    record "libqvl-cuda_sm61.so built" FAIL "missing: $SO"
fi
# QVL_CUDA_SO_PREBUILT: a cuda_sm61 library built elsewhere (the Pascal build, carried by
# scripts/gpu-check-pascal.sh) takes the place of the one just built, so every step below (and
# the plugins.yaml of the build tree) uses it. Nothing rebuilds it afterwards.
if [ -n "${QVL_CUDA_SO_PREBUILT:-}" ]; then
    if cp "$QVL_CUDA_SO_PREBUILT" "$SO"; then
        record "prebuilt cuda_sm61 in place" PASS "$QVL_CUDA_SO_PREBUILT -> $SO"
    else
        record "prebuilt cuda_sm61 in place" FAIL "cannot copy $QVL_CUDA_SO_PREBUILT"
        echo "RESULT: FAILED: the library to test is not in place"
        exit 1
    fi
fi

# ---- 2. op tests (they also tell whether cuda_sm61 initialises here at all) -------------------
CONF="$BUILD/tests/qvl-backend-ops"
REF_SO="$BUILD/backends/reference/libqvl-reference.so"
CUDA_TEST="$BUILD/tests/test_cuda_backend"
CUDA_OK=1
if [ -x "$CONF" ]; then
    # exit 77: cuda_sm61 did not initialise (passing by skipping is a failure here)
    step "qvl-backend-ops reference vs cuda_sm61" "$LOGS/conformance.log" \
        "$CONF" --unavailable-exit 77 "$REF_SO" "$SO"
    rc=$?
    if [ $rc -eq 77 ]; then
        CUDA_OK=0
        show_tail "$LOGS/conformance.log" 5
    elif [ $rc -ne 0 ]; then
        grep -E "MISMATCH|mismatch|FAIL|error" "$LOGS/conformance.log" | head -n 20
    fi
else
    record "qvl-backend-ops" FAIL "not built: $CONF"
fi
if [ -x "$CUDA_TEST" ] && [ $CUDA_OK -eq 1 ]; then
    if step "test_cuda_backend (graph replay, uploads, groups)" "$LOGS/test_cuda_backend.log" \
        "$CUDA_TEST"; then
        grep -q "skipped" "$LOGS/test_cuda_backend.log" &&
            record "test_cuda_backend ran on a GPU" FAIL "$(grep -m1 skipped "$LOGS/test_cuda_backend.log")"
    else
        grep -E "^\[  (ERROR|FAILED) |error:|Failure" "$LOGS/test_cuda_backend.log" | head -n 20
    fi
fi

if [ $CUDA_OK -eq 0 ]; then
    # Every later step would fail with the same reason: say it once and stop.
    echo "cuda_sm61 does not initialise on this machine, so the parity, cross-check and"
    echo "compute-sanitizer steps cannot run (reason above)."
    echo
    echo "== summary =="
    for line in "${SUMMARY[@]}"; do echo "$line"; done
    echo "RESULT: FAILED: no usable CUDA device for cuda_sm61"
    exit 1
fi

# ---- 3. parity ---------------------------------------------------------------------------
parity() { # test name, what it checks
    local bin="$BUILD/tests/$1" log="$LOGS/$1.log"
    if [ ! -x "$bin" ]; then
        record "$1" FAIL "not built: $bin"
        return
    fi
    step "$1 ($2)" "$log" "$bin"
    if grep -q "skipping .*cuda_sm61" "$log"; then
        record "$1 covered cuda_sm61" FAIL "$(grep -m1 'skipping .*cuda_sm61' "$log")"
    else
        record "$1 covered cuda_sm61" PASS "cuda_sm61 was not skipped"
    fi
}
parity test_parity "HF text fixtures, every backend"
parity test_vision_parity "HF image fixtures, every backend"
# the minimal backend and the reference with fused_ops: false (ctest sets their plugins files)
step "parity on minimal and unfused reference" "$LOGS/parity-ctest.log" \
    ctest --test-dir "$BUILD" -R "parity_(minimal|reference_unfused)|cli_qvl_minimal" --output-on-failure

# ---- 4. whole-graph cross-checks ---------------------------------------------------------------
GRAPH="$BUILD/tools/qvl-graph"
xcheck() { # label, then qvl-graph arguments
    local label="$1"
    shift
    local log="$LOGS/xcheck-${label//[^A-Za-z0-9_.-]/_}.log"
    if step "cross-check $label" "$log" "$GRAPH" --config "$CONFIG" --cross-check reference,cuda_sm61 "$@"; then
        # the line naming the worst node, for the record
        grep -m1 "^cross-check .*worst" "$log" | sed 's/^/       /'
    fi
}
if [ -x "$GRAPH" ]; then
    xcheck text-prefill --graph text-prefill
    xcheck text-prefill-7tok --graph text-prefill --tokens 7
    xcheck text-prefill-nofuse --graph text-prefill --no-fuse
    xcheck text-decode --graph text-decode
    xcheck text-decode-kv37 --graph text-decode --kv 37
    xcheck text-decode-nofuse --graph text-decode --no-fuse
    xcheck vision --graph vision
    xcheck vision-2img --graph vision --grid 16x24 --grid 8x8
    xcheck vision-nofuse --graph vision --no-fuse
else
    record "qvl-graph" FAIL "not built: $GRAPH"
fi

# ---- 5. compute-sanitizer ---------------------------------------------------------------------
SAN="$(command -v compute-sanitizer || true)"
[ -z "$SAN" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && SAN=/usr/local/cuda/bin/compute-sanitizer
if [ -n "$SAN" ] && [ -x "$CONF" ]; then
    if step "compute-sanitizer memcheck qvl-backend-ops" "$LOGS/memcheck-conformance.log" \
        "$SAN" --tool memcheck --leak-check full --error-exitcode 3 "$CONF" "$REF_SO" "$SO"; then
        grep -m1 "ERROR SUMMARY" "$LOGS/memcheck-conformance.log" | sed 's/^/       /'
    fi
    if step "compute-sanitizer memcheck test_cuda_backend" "$LOGS/memcheck.log" \
        "$SAN" --tool memcheck --leak-check full --error-exitcode 3 "$CUDA_TEST"; then
        grep -m1 "ERROR SUMMARY" "$LOGS/memcheck.log" | sed 's/^/       /'
    fi
else
    record "compute-sanitizer memcheck" SKIP "compute-sanitizer not found"
fi

# ---- summary ---------------------------------------------------------------------------------
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    mkdir -p "$OUT/gpu-check" && cp "$LOGS"/*.log "$OUT/gpu-check/" 2>/dev/null
fi
echo
echo "== summary =="
for line in "${SUMMARY[@]}"; do echo "$line"; done
if [ $FAILED -eq 0 ]; then
    echo "RESULT: ALL PASS"
    exit 0
fi
echo "RESULT: $FAILED step(s) FAILED (logs in $LOGS)"
exit 1
