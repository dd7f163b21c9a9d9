#!/usr/bin/env bash
# Per-op fallback from the command line, with the linear test plugin (MATMUL only, a thread
# pool) at top priority and the reference after it:
#  - qvl run gives the reference's greedy ids, text and image, and -v shows both backends;
#  - qvl-graph --stats shows the nodes per backend and the bytes that cross per run;
#  - the process exits cleanly 20 times in a row (the plugin's threads are joined at release
#    and its library stays mapped until exit);
#  - `fallback: false` on the plugin: the old one-line refusal, exit 1.
# usage: cli_fallback.sh QVL QVL_GRAPH SOURCE_DIR LINEAR_PLUGINS_YAML STRICT_PLUGINS_YAML
set -u
qvl=$1; qvl_graph=$2; src=$3; linear=$4; strict=$5
fx=$src/tests/fixtures/tiny-tied
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad

run_ids() { "$qvl" run -m "$fx" --ids 1,2,3 --print-ids -n 8 --temp 0 "$@"; }

want=$(run_ids --backend reference 2>"$tmp/err")
[ -n "$want" ] && ok "reference: $want" || bad "reference: no ids ($(cat "$tmp/err"))"

got=$(run_ids --plugins "$linear" -v 2>"$tmp/err"); rc=$?
if [ "$rc" -ne 0 ]; then bad "linear + reference: exit $rc ($(head -c 400 "$tmp/err"))"
elif [ "$got" != "$want" ]; then bad "linear + reference: got '$got', the reference gave '$want'"
else ok "linear + reference: the reference's ids"; fi
if grep -q "decode step: [0-9]* nodes on linear, [0-9]* nodes on reference; .* bytes cross" "$tmp/err"
then ok "-v: nodes per backend and bytes that cross"
else bad "-v names no split over linear and reference ($(grep -i 'nodes on' "$tmp/err" | head -3))"; fi

# Two pictures (the img_two fixture case): transformers' greedy ids, the vision tower's linear
# layers on the plugin too.
ifx=$src/tests/fixtures/tiny-untied
flat=$(tr -d ' \n' < "$ifx/fixture_images.json")
two=$(echo "$flat" | sed -E 's/.*"name":"img_two",//')
prompt=$(echo "$two" | sed -E 's/.*"prompt_ids":\[([0-9,]*)\].*/\1/')
greedy=$(echo "$two" | sed -E 's/.*"greedy_ids":\[([0-9,]*)\].*/\1/' | tr ',' ' ')
got=$("$qvl" run -m "$ifx" --ids "$prompt" --image "$ifx/tall.png" --image="$ifx/small.png" \
      --print-ids -n 10 --temp 0 --plugins "$linear" -v 2>"$tmp/err")
if [ -n "$greedy" ] && [ "$got" = "$greedy" ] &&
   grep -q "vision graph placed: [1-9][0-9]* nodes on linear, [1-9][0-9]* nodes on reference" "$tmp/err"
then ok "two images: transformers' greedy ids, the vision tower on both backends"
else bad "two images: got '$got', want '$greedy' ($(grep -i 'placed\|error' "$tmp/err" | head -c 400))"; fi

"$qvl_graph" --config "$fx/config.json" --graph text-decode --stats --plugins "$linear" \
  --backend linear >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ "$rc" -eq 0 ] && grep -q "placement per op .*: [1-9][0-9]* nodes on linear, [1-9][0-9]* nodes on reference" "$tmp/out" &&
   grep -q "bytes copied between backends per run: [1-9]" "$tmp/out"
then ok "qvl-graph --stats: two backends"
else bad "qvl-graph --stats: exit $rc ($(head -c 300 "$tmp/out") $(head -c 300 "$tmp/err"))"; fi

clean=0
for i in $(seq 20); do
  got=$(run_ids --plugins "$linear" 2>"$tmp/err"); rc=$?
  if [ "$rc" -eq 0 ] && [ "$got" = "$want" ] && [ ! -s "$tmp/err" ]; then clean=$((clean + 1))
  else bad "run $i: exit $rc, ids '$got' ($(head -c 300 "$tmp/err"))"; break; fi
done
[ "$clean" -eq 20 ] && ok "20 runs in a row exit 0 with the same ids and nothing on stderr"

"$qvl" run -m "$fx" --ids 1,2,3 --print-ids -n 2 --temp 0 --plugins "$strict" >/dev/null 2>"$tmp/err"; rc=$?
lines=$(grep -c . "$tmp/err")
if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && grep -q "backend linear does not support .* (node " "$tmp/err"; then
  ok "fallback: false: one-line refusal ($(head -c 120 "$tmp/err"))"
else bad "fallback: false: exit $rc, $lines lines ($(head -c 400 "$tmp/err"))"; fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
