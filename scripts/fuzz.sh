#!/bin/sh
# Fuzz every parser of qvl with libFuzzer under ASan+UBSan, one target after the other, and
# print per target: executions, exec/s, coverage (libFuzzer's cov: edges), corpus size and
# findings (crash-/leak-/timeout-/oom- files).
#
#   scripts/fuzz.sh [-t SECONDS] [-b BUILD_DIR] [-j JOBS] [-i] [TARGET...]
#
# -i: link against picture libraries (libjpeg-turbo, libpng, giflib, libwebp) built from
# Debian's sources with the sanitizers and coverage (scripts/fuzz-image-libs.sh, into
# BUILD_DIR/image-libs; needs network the first time), so the image target also finds and checks
# what happens inside the decoders. The default BUILD_DIR is then build-fuzz-img (CMake keeps
# the libraries it found, so the two kinds of build need their own directories).
#
# Targets: safetensors gguf config gen_config tokenizer_load tokenizer_encode chat plugins_yaml
# ids image weights_index
# (default: all). Builds BUILD_DIR (default build-fuzz) with clang and -DQVL_FUZZ=ON
# -DQVL_SANITIZE=ON. The committed seeds (tests/fuzz/corpus/<target>) are copied into
# BUILD_DIR/fuzz-corpus/<target>, where the fuzzer adds what it finds; the committed corpus is
# never written. A finding lands in BUILD_DIR/fuzz-findings/<target>/: reproduce it with
# BUILD_DIR/tests/fuzz_<target> FILE, fix the parser, and copy FILE to
# tests/fuzz/regressions/<target>/ so ctest replays it from then on.
set -eu

seconds=600
build=
jobs=2
instrumented=
while getopts t:b:j:ih opt; do
    case $opt in
    t) seconds=$OPTARG ;;
    b) build=$OPTARG ;;
    j) jobs=$OPTARG ;;
    i) instrumented=1 ;;
    *) sed -n '2,21p' "$0"; exit 2 ;;
    esac
done
[ -n "$build" ] || build=build-fuzz${instrumented:+-img}
shift $((OPTIND - 1))

root=$(cd "$(dirname "$0")/.." && pwd)
case $build in /*) ;; *) build=$root/$build ;; esac
targets=${*:-safetensors gguf config gen_config tokenizer_load tokenizer_encode chat plugins_yaml ids image weights_index serve_request}

command -v clang >/dev/null || { echo "fuzz.sh: clang is needed (apt-get install clang libclang-rt-dev)" >&2; exit 2; }
if [ -n "$instrumented" ]; then
    pc=$(JOBS=$jobs "$root/scripts/fuzz-image-libs.sh" "$build/image-libs")
    PKG_CONFIG_PATH=$pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    export PKG_CONFIG_PATH
fi
CC=clang cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQVL_FUZZ=ON \
    -DQVL_SANITIZE=ON >/dev/null
if [ -n "$instrumented" ] && ! grep -q '^pkgcfg_lib_PNG_png16:FILEPATH=.*/image-libs/prefix/lib/libpng16.a' "$build/CMakeCache.txt"; then
    echo "fuzz.sh: $build was configured with the system's picture libraries; use a new -b" >&2
    exit 2
fi
build_args=
for t in $targets; do build_args="$build_args --target fuzz_$t"; done
# shellcheck disable=SC2086
cmake --build "$build" -j "$jobs" $build_args >/dev/null

# Inputs larger than the seeds matter for the tokenizer (long texts) and safetensors (data).
max_len() {
    case $1 in
    tokenizer_load | safetensors | gguf | tokenizer_encode | image) echo 16384 ;;
    *) echo 4096 ;;
    esac
}

summary=$build/fuzz-summary.txt
printf '%-17s %10s %8s %7s %7s %s\n' target execs exec/s cov corpus findings >"$summary"
status=0
for t in $targets; do
    corpus=$build/fuzz-corpus/$t
    findings=$build/fuzz-findings/$t
    log=$build/fuzz-$t.log
    mkdir -p "$corpus" "$findings"
    cp "$root/tests/fuzz/corpus/$t/"* "$corpus/" 2>/dev/null || true
    echo "fuzz.sh: $t for ${seconds}s (log: $log)" >&2
    # -timeout: an input that runs 10 s is a hang; -rss_limit_mb bounds memory per input.
    ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$build/tests/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -max_len="$(max_len "$t")" -print_final_stats=1 -artifact_prefix="$findings/" \
        "$corpus" >"$log" 2>&1 || status=1
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    size=$(find "$corpus" -type f | wc -l)
    found=$(find "$findings" -type f | wc -l)
    [ "$found" -eq 0 ] || status=1
    printf '%-17s %10s %8s %7s %7s %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "$size" \
        "$found" >>"$summary"
done
cat "$summary"
exit $status
