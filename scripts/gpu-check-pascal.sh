#!/usr/bin/env bash
# The GPU suite (scripts/gpu-check.sh: conformance, test_cuda_backend, parity, cross-checks,
# compute-sanitizer) run on the Pascal build of cuda_sm61, which holds sm_61 machine code and
# compute_61 PTX only. A newer GPU cannot run sm_61 machine code, so the driver JIT-compiles the
# compute_61 PTX: the code a Pascal card runs, up to ptxas's register allocation for sm_61.
#
# The GPU machine has CUDA 13 and, usually, no clang, so the library is built on a Debian
# machine and carried:
#   here (Debian):  ./scripts/install-deps.sh --pascal && scripts/gpu-check-pascal.sh --prepare
#                   (builds build-pascal, copies the library to .pascal/gpu/)
#                   bash scripts/device-deps.sh fetch                 (as for gpu-check.sh)
#   there (GPU):    carry .pascal/gpu and .devdeps;
#                   . scripts/device-deps.sh env; bash scripts/gpu-check-pascal.sh [build-dir]
# There the rest of the tree (core, tests, tools) is built with its nvcc as usual, then the
# carried library replaces the nvcc-built one before any test runs (QVL_CUDA_SO_PREBUILT). Where
# clang and .pascal/cuda are present on the GPU machine itself and no library was carried, the
# whole tree is built there with -DQVL_PASCAL_BUILD=ON instead.
# Before the suite, check_pascal_binary.py --pascal-only proves the library under test holds
# nothing but sm_61 SASS and compute_61 PTX.
#
# Usage: scripts/gpu-check-pascal.sh [build-dir]   (default: build-gpu-pascal)
#        scripts/gpu-check-pascal.sh --prepare     (Debian machine: build and stage the library)
set -u
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STAGED="$SRC/.pascal/gpu/libqvl-cuda_sm61.so"
CHECK="$SRC/scripts/check_pascal_binary.py"

if [ "${1:-}" = "--prepare" ]; then
    set -e
    cmake -S "$SRC" -B "$SRC/build-pascal" -DCMAKE_BUILD_TYPE=Release -DQVL_PASCAL_BUILD=ON
    cmake --build "$SRC/build-pascal" -j"$(nproc)" --target qvl-cuda_sm61
    lib="$SRC/build-pascal/backends/cuda_sm61/libqvl-cuda_sm61.so"
    python3 "$CHECK" "$lib" --pascal-only --ptxas-dir "$SRC/build-pascal/backends/cuda_sm61/sm61" \
        --known-spills "$SRC/scripts/pascal-known-spills.txt"
    mkdir -p "$(dirname "$STAGED")"
    cp "$lib" "$STAGED"
    echo "staged $STAGED ($(du -h "$STAGED" | cut -f1)): carry .pascal/gpu to the GPU machine"
    exit 0
fi

BUILD="${1:-$SRC/build-gpu-pascal}"
PY="$(command -v python3 || true)"
if [ -f "$STAGED" ]; then
    echo "== Pascal library: carried $STAGED =="
    if [ -n "$PY" ]; then
        "$PY" "$CHECK" "$STAGED" --pascal-only || { echo "RESULT: FAILED: $STAGED is not Pascal-only"; exit 1; }
    else
        echo "(no python3 here: the fat binary check ran when --prepare staged it)"
    fi
    QVL_CUDA_SO_PREBUILT="$STAGED" exec bash "$SRC/scripts/gpu-check.sh" "$BUILD"
fi
if command -v clang++ >/dev/null 2>&1 && [ -x "$SRC/.pascal/cuda/bin/ptxas" ]; then
    echo "== Pascal library: built here (clang, $SRC/.pascal/cuda) =="
    QVL_CMAKE_ARGS="-DQVL_PASCAL_BUILD=ON ${QVL_CMAKE_ARGS:-}" bash "$SRC/scripts/gpu-check.sh" "$BUILD"
    rc=$?
    # gpu-check.sh built it; check what ran (a failure here overrides a passing suite)
    lib="$BUILD/backends/cuda_sm61/libqvl-cuda_sm61.so"
    if [ -f "$lib" ] && [ -n "$PY" ]; then
        "$PY" "$CHECK" "$lib" --pascal-only --ptxas-dir "$BUILD/backends/cuda_sm61/sm61" \
            --known-spills "$SRC/scripts/pascal-known-spills.txt" || rc=1
    fi
    exit $rc
fi
echo "gpu-check-pascal: no Pascal library: carry .pascal/gpu (run scripts/gpu-check-pascal.sh --prepare on a Debian machine first)" >&2
exit 1
