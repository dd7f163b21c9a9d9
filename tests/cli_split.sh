#!/usr/bin/env bash
# Graphs split across backends from the command line: --backend cpu_avx2 --cpu-backend
# reference -ngl N gives the tokens of cpu_avx2 alone (text and images), states the placement
# in one line, and bad placements are one-line errors.
# usage: cli_split.sh QVL_BINARY SOURCE_DIR
set -u
qvl=$1; src=$2
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail

if ! "$qvl" run -m "$src/tests/fixtures/tiny-tied" --ids 1 -n 1 --print-ids --backend cpu_avx2 \
     >/dev/null 2>"$tmp/err"; then
  echo "skip: cpu_avx2 does not run here ($(head -c 200 "$tmp/err"))"; exit 77
fi

ids() { "$qvl" run -m "$1" --ids 1,2,3,4 --print-ids -n 12 --temp 0 --ctx 64 "${@:2}" 2>"$tmp/err"; }
for fx in tiny-tied tiny-untied; do
  want=$(ids "$src/tests/fixtures/$fx" --backend cpu_avx2)
  for ngl in 0 1; do
    got=$(ids "$src/tests/fixtures/$fx" --backend cpu_avx2 --cpu-backend reference -ngl "$ngl")
    [ -n "$want" ] && [ "$got" = "$want" ] && ok "$fx -ngl $ngl: the tokens of cpu_avx2 alone" \
      || bad "$fx -ngl $ngl: got '$got' want '$want' ($(cat "$tmp/err"))"
  done
done
ids "$src/tests/fixtures/tiny-tied" --backend cpu_avx2 --cpu-backend reference -ngl 1 >/dev/null
grep -qx "placement: layer 1 + output + vision on cpu_avx2, layer 0 + embedding on reference" "$tmp/err" \
  && ok "-ngl 1 states the placement" || bad "placement line: $(cat "$tmp/err")"
ids "$src/tests/fixtures/tiny-tied" --backend cpu_avx2 --gpu-layers auto >/dev/null
grep -qx "placement: layers 0-1 + embedding + output + vision on cpu_avx2" "$tmp/err" \
  && ok "auto on a CPU backend keeps everything there" || bad "auto: $(cat "$tmp/err")"

# Images: the vision tower on its own backend, the text split; transformers' greedy tokens.
fx=$src/tests/fixtures/tiny-untied
if [ -f "$fx/fixture_images.json" ]; then
  flat=$(tr -d ' \n' < "$fx/fixture_images.json")
  two=$(echo "$flat" | sed -E 's/.*"name":"img_two",//')
  prompt=$(echo "$two" | sed -E 's/.*"prompt_ids":\[([0-9,]*)\].*/\1/')
  greedy=$(echo "$two" | sed -E 's/.*"greedy_ids":\[([0-9,]*)\].*/\1/' | tr ',' ' ')
  got=$("$qvl" run -m "$fx" --ids "$prompt" --image "$fx/tall.png" --image "$fx/small.png" \
        --print-ids -n 10 --temp 0 --backend cpu_avx2 --cpu-backend reference -ngl 1 \
        --vision-backend reference 2>"$tmp/err")
  [ "$got" = "$greedy" ] && ok "images, split text, vision on reference: transformers' tokens" \
    || bad "split image greedy: got '$got' want '$greedy' ($(cat "$tmp/err"))"
fi

tt=$src/tests/fixtures/tiny-tied
expect_fail "-ngl not a number" 1 "--gpu-layers 'many' is not a number of layers, auto or all" -- \
  "$qvl" run -m "$tt" --ids 1 -n 1 --print-ids -ngl many
expect_fail "--cpu-backend that does not load" 1 "--cpu-backend nosuch" -- \
  "$qvl" run -m "$tt" --ids 1 -n 1 --print-ids --backend cpu_avx2 -ngl 1 --cpu-backend nosuch
expect_fail "--vision-backend that does not load" 1 "--vision-backend nosuch" -- \
  "$qvl" run -m "$tt" --ids 1 -n 1 --print-ids --vision-backend nosuch

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
