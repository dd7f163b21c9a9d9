#!/usr/bin/env bash
# The test suite under valgrind memcheck: every CMocka test and corpus replay of a
# Debug build, with leak checking; a test fails on any memcheck error or a leak "definitely
# lost". The CLI shell tests (they would check bash) and the CUDA op test (the driver is not
# valgrind-clean, and there is no GPU here) are left out. Prints ctest's summary; the full
# logs are in BUILD/Testing/Temporary/MemoryChecker.*.log.
#
# Usage: scripts/valgrind.sh [build-dir]   (default build-valgrind; configured here if needed)
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$SRC/build-valgrind}"
command -v valgrind >/dev/null || { echo "valgrind.sh: valgrind is not installed" >&2; exit 1; }
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build "$BUILD" -j"${QVL_JOBS:-$(nproc)}"
# PCRE2's JIT code is invisible to valgrind (false "uninitialised" reports): interpreter only.
QVL_PCRE2_JIT=0 ctest --test-dir "$BUILD" -j"${QVL_JOBS:-$(nproc)}" -E '^cli_|cuda' -T memcheck \
    --overwrite MemoryCheckCommand="$(command -v valgrind)" \
    --overwrite MemoryCheckCommandOptions="--leak-check=full --errors-for-leak-kinds=definite --error-exitcode=1 --track-origins=no" \
    --timeout 3000
