#!/usr/bin/env bash
# The test suite under valgrind memcheck, with leak checking: a test fails on any memcheck error
# or a leak "definitely lost". Three steps:
#  1. the CMocka tests and fuzz-corpus replays of a Debug build (ctest -T memcheck);
#  2. tests/image_decode_parity.sh with each `qvl decode` under memcheck (the image decoders
#     are where valgrind has found uninitialised reads before);
#  3. the tests in $DIRECT, their ctest commands run directly under valgrind with no time
#     limit: memcheck makes them outlast their ctest TIMEOUT (600 or 900 s), which ctest cannot
#     stretch. The backend conformance suites (thousands of op cases) are the slowest.
# Left out, because memcheck would check an interpreter instead of qvl: the CLI shell tests
# (cli_*: bash), check_layers (a cmake script) and the HTTP server tests (serve*: Python
# drivers whose deadlines valgrind's slowdown would also break). The CUDA tests are left out
# too: the driver is not valgrind-clean, and there is no GPU here. Prints each step's summary
# and wall time; the full logs are in BUILD/Testing/Temporary/: MemoryChecker.*.log (step 1),
# decode.*.log (step 2, only those with an error) and direct.*.log (step 3).
#
# Usage: scripts/valgrind.sh [build-dir]   (default build-valgrind; configured here if needed)
set -uo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$SRC/build-valgrind}"
JOBS="${QVL_JOBS:-$(nproc)}"
VG="$(command -v valgrind)" || { echo "valgrind.sh: valgrind is not installed" >&2; exit 1; }
VG_OPTS="--leak-check=full --errors-for-leak-kinds=definite --error-exitcode=1 --track-origins=no"
# No CUDA backend: its tests are left out, and nvcc would double the build time.
cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DQVL_WITH_CUDA=OFF >/dev/null || exit 1
cmake --build "$BUILD" -j"$JOBS" || exit 1
# PCRE2's JIT code is invisible to valgrind (false "uninitialised" reports): interpreter only.
export QVL_PCRE2_JIT=0
SKIP='^cli_|cuda|^check_layers$|^serve|^image_decode_parity$'
DIRECT='test_quant_model conformance_reference conformance_cpu_avx2 conformance_minimal conformance_linear'
status=0

memcheck() { # ctest arguments selecting the tests
    ctest --test-dir "$BUILD" -j"$JOBS" -T memcheck "$@" \
        --overwrite MemoryCheckCommand="$VG" --overwrite MemoryCheckCommandOptions="$VG_OPTS" \
        --timeout 5400 || status=1
}

start=$SECONDS
memcheck -E "$SKIP|^(${DIRECT// /|})\$"
echo "valgrind.sh: step 1 (tests) took $((SECONDS - start)) s"

start=$SECONDS
wrapper="$BUILD/qvl-memcheck"
rm -f "$BUILD"/Testing/Temporary/decode.*.log
printf '#!/bin/sh\nexec "%s" -q %s --error-exitcode=99 --log-file="%s/Testing/Temporary/decode.%%p.log" "%s/tools/qvl" "$@"\n' \
    "$VG" "${VG_OPTS/--error-exitcode=1/}" "$BUILD" "$BUILD" >"$wrapper"
chmod +x "$wrapper"
if "$SRC/tests/image_decode_parity.sh" "$wrapper" "$SRC/tests/fixtures/images"; then
    echo "valgrind.sh: image_decode_parity under memcheck passed"
else
    echo "valgrind.sh: image_decode_parity under memcheck FAILED (status 99 = a memcheck error)"
    status=1
fi
find "$BUILD/Testing/Temporary" -name 'decode.*.log' -empty -delete
echo "valgrind.sh: step 2 (decode) took $((SECONDS - start)) s"

# One direct run: prints its result line; status 1 on a memcheck error or a failing test.
direct() {
    local t=$1 start=$SECONDS log="$BUILD/Testing/Temporary/direct.$1.log" cmd rc
    cmd=$(ctest --test-dir "$BUILD" -N -V -R "^$t\$" | sed -n 's/^[0-9]*: Test command: //p')
    if [ -z "$cmd" ]; then echo "valgrind.sh: $t: not in this build"; return 0; fi
    eval "set -- $cmd" # ctest quotes each argument
    (cd "$BUILD/tests" && "$VG" $VG_OPTS --log-file="$log" "$@" >"$log.out" 2>&1)
    rc=$?
    case $rc in
        0) echo "valgrind.sh: $t under memcheck passed ($((SECONDS - start)) s)" ;;
        77) echo "valgrind.sh: $t skipped: its backend is unavailable here" ;;
        *) echo "valgrind.sh: $t under memcheck FAILED, status $rc ($((SECONDS - start)) s):" \
                "see $log and $log.out"
           return 1 ;;
    esac
}
start=$SECONDS
running=0
for t in $DIRECT; do # $JOBS at a time
    direct "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$JOBS" ]; then wait -n || status=1; running=$((running - 1)); fi
done
while [ "$running" -gt 0 ]; do wait -n || status=1; running=$((running - 1)); done
echo "valgrind.sh: step 3 (direct runs) took $((SECONDS - start)) s"
exit $status
