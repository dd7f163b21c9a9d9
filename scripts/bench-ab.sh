#!/usr/bin/env bash
# Before/after speed in one sitting: runs qvl-bench from two build trees alternately on the
# same model, ROUNDS times each (default 2), and prints each run's prefill / decode lines,
# labelled. Alternating spreads the machine's drift over both sides.
#
# Usage: scripts/bench-ab.sh OLD_BUILD NEW_BUILD MODEL_DIR [qvl-bench args...]
#   e.g. scripts/bench-ab.sh ../old/build build /tmp/q2b --backend cpu_avx2 -t 4 -p 64 -n 16
# ROUNDS=N in the environment sets the rounds.
set -u
if [ $# -lt 3 ]; then
    echo "usage: $0 OLD_BUILD NEW_BUILD MODEL_DIR [qvl-bench args...]" >&2
    exit 2
fi
old="$1" new="$2" model="$3"
shift 3
for b in "$old" "$new"; do
    [ -x "$b/tools/qvl-bench" ] || { echo "bench-ab: no $b/tools/qvl-bench" >&2; exit 1; }
done
status=0
for r in $(seq 1 "${ROUNDS:-2}"); do
    for side in old new; do
        b=$old
        [ $side = new ] && b=$new
        out=$("$b/tools/qvl-bench" -m "$model" --no-profile --no-probe "$@" 2>&1) || status=1
        echo "$out" | grep -E "^ *(prefill|decode|vision)" | sed "s/^/[$side round $r] /"
    done
done
exit $status
