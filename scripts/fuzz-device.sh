#!/bin/bash
# Fuzz every parser of qvl on a machine with many cores, all targets at once, from binaries built
# elsewhere. Two steps:
#
#   here (clang, the -dev packages):   scripts/fuzz-device.sh pack [-i]
#       builds build-fuzz (clang, -DQVL_FUZZ=ON, ASan+UBSan; with -i build-fuzz-img, linked
#       against picture libraries built with the sanitizers: scripts/fuzz-image-libs.sh, as
#       scripts/fuzz.sh -i does) and writes .fuzzbin/qvl-fuzz.tar.gz:
#       the fuzz_<target> programs, libqvl-core.so, every other shared library they load that is
#       not part of glibc (libyaml, cJSON, pcre2, utf8proc, the image libraries, libstdc++), and the Qwen3-VL
#       tokenizer.json when the shared data is present. Nothing has to be installed there.
#   there (carry .fuzzbin):   scripts/fuzz-device.sh run [-t SECONDS] [-o DIR] [-c TAR] [TARGET...]
#       runs every target (default: all eleven) in parallel, each for SECONDS of wall-clock time
#       (default 600; start-up included, so the whole run takes about SECONDS + 20), seeded
#       with the committed corpus/<target> and regressions/<target>, and prints one line per
#       target: executions, exec/s, coverage (cov: edges, ft: features), corpus size, findings.
#
# `run` writes into DIR (default $OUT when set, else ./fuzz-out): summary.txt, logs/<target>.log,
# findings/<target>/ (crash-, leak-, timeout-, oom- files: reproduce with
# build-fuzz/tests/fuzz_<target> FILE here, fix, copy FILE to tests/fuzz/regressions/<target>/)
# and corpus.tar.gz (the grown corpora, corpus/<target>/: minimise and merge new inputs with
# `fuzz_<target> -merge=1 tests/fuzz/corpus/<target> corpus/<target>`). -c TAR starts from such
# a corpus.tar.gz of an earlier run (e.g. copied into .fuzzbin/), so a campaign longer than one
# command may run can be split in parts.
# A target that finds something is restarted with the time it has left (at most 8 findings per
# target), so one early crash does not end its campaign. Exit status 1 when anything was found.
set -u

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
all_targets="safetensors gguf config gen_config tokenizer_load tokenizer_encode chat plugins_yaml ids image weights_index serve_request"
usage() { sed -n '2,26p' "${BASH_SOURCE[0]}"; exit 2; }

# Inputs larger than the seeds matter for the tokenizer (long texts), safetensors and images.
max_len() {
    case $1 in
    tokenizer_load | safetensors | gguf | tokenizer_encode | image) echo 16384 ;;
    *) echo 4096 ;;
    esac
}

pack() {
    local build=$root/build-fuzz dest=$root/.fuzzbin stage
    command -v clang-14 >/dev/null || { echo "fuzz-device.sh: clang-14 is needed" >&2; exit 2; }
    if [ "${1:-}" = -i ]; then # the picture libraries instrumented too (static, inside the programs)
        build=$root/build-fuzz-img
        local pc
        pc=$("$root/scripts/fuzz-image-libs.sh" "$build/image-libs") || exit 1
        export PKG_CONFIG_PATH=$pc${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
    fi
    CC=clang-14 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQVL_FUZZ=ON \
        -DQVL_SANITIZE=ON >/dev/null || exit 1
    local t args=()
    for t in $all_targets; do args+=(--target "fuzz_$t"); done
    cmake --build "$build" -j 2 "${args[@]}" >/dev/null || exit 1
    stage=$(mktemp -d)
    mkdir -p "$stage/qvl-fuzz/bin" "$stage/qvl-fuzz/lib"
    for t in $all_targets; do cp "$build/tests/fuzz_$t" "$stage/qvl-fuzz/bin/"; done
    # Every library the programs load, except glibc's own (the machine there has its own).
    ldd "$stage"/qvl-fuzz/bin/* | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
        grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
        while read -r lib; do cp -L "$lib" "$stage/qvl-fuzz/lib/"; done
    local tok=$root/../shared/data/qwen3-vl-2b-instruct/tokenizer.json
    [ -f "$tok" ] && cp "$tok" "$stage/qvl-fuzz/"
    mkdir -p "$dest"
    tar -C "$stage" -czf "$dest/qvl-fuzz.tar.gz" qvl-fuzz || exit 1
    rm -rf "$stage"
    ls -l "$dest/qvl-fuzz.tar.gz"
}

# One target for `seconds`, restarted after a finding with the time left. Appends to its log.
fuzz_one() {
    local t=$1 seconds=$2 out=$3 bin=$4
    local corpus=$out/corpus/$t findings=$out/findings/$t log=$out/logs/$t.log
    local start now left before seeds=("$root/tests/fuzz/corpus/$t")
    [ -d "$root/tests/fuzz/regressions/$t" ] && seeds+=("$root/tests/fuzz/regressions/$t")
    mkdir -p "$corpus" "$findings"
    start=$(date +%s)
    : >"$log"
    for _ in 1 2 3 4 5 6 7 8; do
        now=$(date +%s)
        left=$((seconds - (now - start)))
        [ "$left" -ge 5 ] || break
        before=$(find "$findings" -type f | wc -l)
        # New units go to the first directory only; the committed seeds are read, never written.
        # -timeout: an input running 10 s is a hang; -rss_limit_mb bounds memory per input.
        # libFuzzer checks -max_total_time only once fuzzing runs, not while it loads the seeds:
        # SIGINT (final stats are still printed) keeps the wall-clock budget.
        timeout -s INT -k 10 $((left + 5)) \
        "$bin/fuzz_$t" -max_total_time="$left" -timeout=10 -rss_limit_mb=2048 \
            -max_len="$(max_len "$t")" -print_final_stats=1 -artifact_prefix="$findings/" \
            "$corpus" "${seeds[@]}" >>"$log" 2>&1
        # Stopped without a finding: the time is up (or libFuzzer itself failed; see the log).
        [ "$(find "$findings" -type f | wc -l)" -gt "$before" ] || break
    done
    echo $(($(date +%s) - start)) >"$out/logs/$t.seconds"
}

summary_line() {
    local t=$1 out=$2 execs secs rate last cov ft size found log=$2/logs/$1.log
    # Each run's stats: executions and libFuzzer's average exec/s (over its own fuzzing time,
    # seed loading excluded); the rate shown is over all runs of the target.
    read -r execs rate < <(awk '/^stat::number_of_executed_units:/ { n = $2; e += n }
        /^stat::average_exec_per_sec:/ { if ($2 > 0) t += n / $2 }
        END { printf "%d %s\n", e, (t > 0 ? int(e / t) : "?") }' "$log")
    secs=$(cat "$out/logs/$t.seconds" 2>/dev/null || echo 0)
    last=$(grep -E '^#[0-9]+' "$log" | grep 'cov:' | tail -1)
    cov=$(echo "$last" | grep -o 'cov: [0-9]*' | cut -d' ' -f2)
    ft=$(echo "$last" | grep -o 'ft: [0-9]*' | cut -d' ' -f2)
    size=$(find "$out/corpus/$t" -type f | wc -l)
    found=$(find "$out/findings/$t" -type f | wc -l)
    printf '%-17s %11s %8s %6s %7s %7s %5s %8s\n' "$t" "$execs" "$rate" "${cov:-?}" "${ft:-?}" \
        "$size" "$secs" "$found"
}

run() {
    local seconds=600 out=${OUT:-$PWD/fuzz-out} resume= opt
    OPTIND=1
    while getopts t:o:c:h opt; do
        case $opt in
        t) seconds=$OPTARG ;;
        o) out=$OPTARG ;;
        c) resume=$OPTARG ;;
        *) usage ;;
        esac
    done
    shift $((OPTIND - 1))
    local targets=${*:-$all_targets} pkg=$root/.fuzzbin/qvl-fuzz.tar.gz work t
    [ -f "$pkg" ] || { echo "fuzz-device.sh: $pkg is missing: run 'scripts/fuzz-device.sh pack' here first" >&2; exit 2; }
    work=$(mktemp -d)
    tar -C "$work" -xzf "$pkg" || exit 1
    local bin=$work/qvl-fuzz/bin
    # A previous run's corpora carry on where it stopped: its inputs are copied in as seeds.
    if [ -n "$resume" ]; then
        mkdir -p "$out/corpus" && tar -C "$out" -xzf "$resume" corpus || exit 1
    fi
    export LD_LIBRARY_PATH=$work/qvl-fuzz/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    [ -f "$work/qvl-fuzz/tokenizer.json" ] && export QVL_FUZZ_TOKENIZER=$work/qvl-fuzz/tokenizer.json
    if ldd "$bin"/fuzz_* | grep -q 'not found'; then
        echo "fuzz-device.sh: libraries missing:" >&2
        ldd "$bin"/fuzz_* | grep 'not found' | sort -u >&2
        exit 2
    fi
    mkdir -p "$out/logs"
    # LeakSanitizer stops the world with ptrace, which some sandboxes refuse: check once, and
    # fuzz without leak detection (said in the summary) rather than report every input.
    local leaks=1 probe
    probe=$(ASAN_OPTIONS=detect_leaks=1 "$bin/fuzz_ids" -runs=1 2>&1)
    if echo "$probe" | grep -q 'LeakSanitizer has encountered a fatal error\|LeakSanitizer does not work'; then
        leaks=0
        echo "fuzz-device.sh: LeakSanitizer does not work on this machine: leaks not checked" >&2
    fi
    export ASAN_OPTIONS=detect_leaks=$leaks:allocator_may_return_null=1
    export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
    echo "fuzz-device.sh: $(echo $targets | wc -w) targets for ${seconds}s each on $(nproc) cores; logs in $out/logs" >&2
    for t in $targets; do
        [ -x "$bin/fuzz_$t" ] || { echo "fuzz-device.sh: no target $t" >&2; exit 2; }
        fuzz_one "$t" "$seconds" "$out" "$bin" &
    done
    wait
    local summary=$out/summary.txt status=0
    {
        echo "# $(date -u +%FT%TZ) $(nproc) cores, ${seconds}s per target, leak detection $([ $leaks = 1 ] && echo on || echo off)"
        [ -n "${QVL_FUZZ_TOKENIZER:-}" ] || echo "# tokenizer_encode used its built-in tokenizer (no tokenizer.json in the package)"
        printf '%-17s %11s %8s %6s %7s %7s %5s %8s\n' target execs exec/s cov ft corpus secs findings
        for t in $targets; do summary_line "$t" "$out"; done
    } >"$summary"
    cat "$summary"
    [ "$(find "$out/findings" -type f | wc -l)" -eq 0 ] || status=1
    tar -C "$out" -czf "$out/corpus.tar.gz" corpus && rm -rf "$out/corpus"
    rm -rf "$work"
    return $status
}

case ${1:-} in
pack) shift; pack "$@" ;;
run) shift; run "$@" ;;
*) usage ;;
esac
