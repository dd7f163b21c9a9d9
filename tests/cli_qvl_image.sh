#!/usr/bin/env bash
# qvl run with --image on the HF image fixtures: the greedy answer equals transformers', the
# picture's token count is printed, and bad pictures or pad counts give one clear error line.
# usage: cli_qvl_image.sh QVL_BINARY SOURCE_DIR SHARED_DATA_DIR
set -u
qvl=$1; src=$2; shared=${3:-}
fx=$src/tests/fixtures/tiny-untied
[ -f "$fx/fixture_images.json" ] || { echo "skip: no $fx/fixture_images.json"; exit 77; }
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail, write_tiny_config

# The img_two case: two pictures, prompt ids with their pads, transformers' greedy tokens.
flat=$(tr -d ' \n' < "$fx/fixture_images.json")
two=$(echo "$flat" | sed -E 's/.*"name":"img_two",//')
prompt=$(echo "$two" | sed -E 's/.*"prompt_ids":\[([0-9,]*)\].*/\1/')
greedy=$(echo "$two" | sed -E 's/.*"greedy_ids":\[([0-9,]*)\].*/\1/' | tr ',' ' ')
got=$("$qvl" run -m "$fx" --ids "$prompt" --image "$fx/tall.png" --image="$fx/small.png" \
      --print-ids -n 10 --temp 0 --backend reference 2>"$tmp/err")
[ "$got" = "$greedy" ] && ok "--image x2 --ids greedy = transformers" \
  || bad "--image greedy: got '$got' want '$greedy' ($(cat "$tmp/err"))"
grep -q "^image 1: 64x96 -> grid 6x4, 6 tokens$" "$tmp/err" && grep -q "^image 2: 40x40 -> grid 4x4, 4 tokens$" "$tmp/err" \
  && ok "prints each picture's grid and tokens" || bad "picture summary: $(cat "$tmp/err")"

# --max-pixels changes the token count, so the same ids no longer fit: after the pictures'
# summary lines, one error line.
"$qvl" run -m "$fx" --ids "$prompt" --image "$fx/tall.png" --image "$fx/small.png" \
  --max-pixels 1024 --min-pixels 1024 --print-ids -n 1 >"$tmp/out" 2>"$tmp/err"; rc=$?
errs=$(grep -v '^image [0-9]*: ' "$tmp/err")
if [ "$rc" -eq 1 ] && [ "$(echo "$errs" | grep -c .)" -eq 1 ] \
   && echo "$errs" | grep -q "holds 10 image pad ids (380) but the 2 image(s) need 2" \
   && grep -q "^image 1: 64x96 -> grid 2x2, 1 tokens (scaled down to fit --max-pixels 1024)$" "$tmp/err"; then ok "pad count mismatch"
else bad "pad count mismatch (exit $rc: $(cat "$tmp/err"))"; fi
expect_fail "missing picture" 1 "cannot open" -- "$qvl" run -m "$fx" --ids 1 --image "$tmp/nope.png" --print-ids -n 1
printf 'not a picture' > "$tmp/bad.png"
expect_fail "not a picture" 1 "not a PNG, JPEG" -- "$qvl" run -m "$fx" --ids 1 --image "$tmp/bad.png" --print-ids -n 1
head -c 300 "$fx/wide.png" > "$tmp/cut.png"
# The header is intact (so the plan holds: 6 tokens), the pixels are not.
"$qvl" run -m "$fx" --ids 1,380,380,380,380,380,380 --image "$tmp/cut.png" --print-ids -n 1 \
  >"$tmp/out" 2>"$tmp/err"; rc=$?
errs=$(grep -v '^image [0-9]*: ' "$tmp/err")
[ "$rc" -eq 1 ] && [ "$(echo "$errs" | grep -c .)" -eq 1 ] && echo "$errs" | grep -q "cut.png" \
  && ok "truncated picture" || bad "truncated picture (exit $rc: $(cat "$tmp/err"))"
expect_fail "--image without a file" 2 "needs a FILE" -- "$qvl" run -m "$fx" --ids 1 --image
"$qvl" run --help | grep -q -- "--image" && ok "run --help lists --image" || bad "run --help lists --image"

# --- the whole pipeline with the chat template and the real tokenizer -----------------------------
tokjson=$shared/qwen3-vl-2b-instruct/tokenizer.json
if [ -f "$tokjson" ]; then
  write_tiny_config "$tmp/config.json" 2
  "$qvl" mkmodel --config "$tmp/config.json" --tokenizer "$tokjson" --out "$tmp/m" --std 0.5 2>/dev/null \
    && ok "mkmodel" || bad "mkmodel"
  # No preprocessor_config.json: the Qwen3-VL defaults (min 65536 pixels: 40x40 -> 256x256).
  "$qvl" run -m "$tmp/m" --image "$fx/small.png" -p "What is in this picture?" -n 4 --seed 1 \
    --backend reference >"$tmp/out" 2>"$tmp/err" && grep -q "^image 1: 40x40 -> grid 16x16, 64 tokens$" "$tmp/err" \
    && ok "run --image -p (defaults)" || bad "run --image -p: $(cat "$tmp/err")"
  "$qvl" run -m "$tmp/m" --image "$fx/small.png" --image "$fx/wide.png" -p "<image> and <image>: same?" \
    -n 4 --seed 1 --min-pixels 4096 --max-pixels 16384 --backend reference >"$tmp/out" 2>"$tmp/err" \
    && grep -q "^image 2: 96x64 -> grid 4x6, 6 tokens$" "$tmp/err" \
    && ok "run with <image> markers and --min/--max-pixels" || bad "markers: $(cat "$tmp/err")"
  expect_fail "markers and pictures disagree" 1 "1 <image> markers but 2 --image" -- \
    "$qvl" run -m "$tmp/m" --image "$fx/small.png" --image "$fx/small.png" -p "<image> what?" -n 1
  printf 'Describe it\nAnd now?\n' | "$qvl" chat -m "$tmp/m" --image "$fx/small.png" -n 3 --seed 3 \
    --backend reference >"$tmp/out" 2>"$tmp/err" && ok "chat --image, two turns" || bad "chat --image: $(cat "$tmp/err")"
else
  echo "skip: $tokjson absent (chat-template checks)"
fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
