#!/usr/bin/env bash
# End-to-end checks of the qvl CLI: answers, testing hooks, and one clear error line with a
# non-zero exit for each kind of bad input.
# usage: cli_qvl.sh QVL_BINARY SOURCE_DIR SHARED_DATA_DIR
set -u
qvl=$1; src=$2; shared=$3
fx=$src/tests/fixtures/tiny-untied
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail, write_tiny_config

# --- help and flags ---------------------------------------------------------------------------
"$qvl" --help >/dev/null && ok "qvl --help" || bad "qvl --help"
"$qvl" run --help | grep -q -- "--top-p" && ok "run --help lists flags" || bad "run --help lists flags"
expect_fail "unknown flag" 2 "unknown option '--bogus'" -- "$qvl" run -m "$fx" --bogus
expect_fail "unknown command" 2 "unknown command" -- "$qvl" frobnicate
expect_fail "bad number" 2 "--top-p" -- "$qvl" run -m "$fx" -p hi --top-p 2
expect_fail "missing value" 2 "needs a value" -- "$qvl" run -m "$fx" -p

# --- testing hooks on the HF fixture ----------------------------------------------------------
# case1 of tiny-untied: prompt ids and transformers' greedy continuation, read from fixture.json.
flat=$(tr -d ' \n' < "$fx/fixture.json")
case1=$(echo "$flat" | sed -E 's/.*"name":"case1",//')
prompt=$(echo "$case1" | sed -E 's/^"prompt_ids":\[([0-9,]*)\].*/\1/')
greedy=$(echo "$case1" | sed -E 's/^"prompt_ids":\[[0-9,]*\],"greedy_ids":\[([0-9,]*)\].*/\1/' | tr ',' ' ')
got=$("$qvl" run -m "$fx" --ids "$prompt" --print-ids -n 10 --temp 0 --backend reference 2>"$tmp/err")
[ "$got" = "$greedy" ] && ok "--ids --print-ids greedy = transformers" \
  || bad "--ids --print-ids greedy: got '$got' want '$greedy' ($(cat "$tmp/err"))"
"$qvl" run -m "$fx" --ids "$prompt" --print-ids -n 1 --temp 0 --dump-logits "$tmp/logits" >/dev/null 2>&1
n_prompt=$(echo "$prompt" | tr ',' '\n' | grep -c .)
size=$(stat -c %s "$tmp/logits" 2>/dev/null || echo 0)
[ "$size" -eq $((n_prompt * 384 * 4)) ] && ok "--dump-logits size" || bad "--dump-logits size $size"

# --- bad input --------------------------------------------------------------------------------
# (errors from the model itself name reference: with the default list a machine without a GPU
# adds a warning line about skipping cuda_sm61, which is not what these lines check)
cp -r "$fx" "$tmp/notok"; rm "$tmp/notok/tokenizer.json"
expect_fail "no tokenizer without --ids" 1 "tokenizer.json" -- "$qvl" run -m "$tmp/notok" -p "hi"
expect_fail "token id out of vocabulary" 1 "vocabulary" -- "$qvl" run -m "$fx" --ids "5,99999" --print-ids --backend reference
expect_fail "prompt longer than --ctx" 1 "ctx" -- "$qvl" run -m "$fx" --ids "1,2,3,4,5" --print-ids --ctx 4 --backend reference
expect_fail "malformed --ids" 2 "--ids" -- "$qvl" run -m "$fx" --ids "1,x" --print-ids
expect_fail "missing model dir" 1 "model directory not found: .*nowhere" -- "$qvl" run -m "$tmp/nowhere" --ids 1 --print-ids
cp -r "$fx" "$tmp/trunc"; truncate -s 1000 "$tmp/trunc/model.safetensors"
expect_fail "truncated safetensors" 1 "model.safetensors" -- "$qvl" run -m "$tmp/trunc" --ids 1 --print-ids
cp -r "$fx" "$tmp/shape"; sed -i 's/"intermediate_size": 128/"intermediate_size": 136/' "$tmp/shape/config.json"
expect_fail "wrong tensor shape" 1 "mlp" -- "$qvl" run -m "$tmp/shape" --ids 1 --print-ids
expect_fail "missing plugins file" 1 "nope.yaml" -- "$qvl" run -m "$fx" --ids 1 --print-ids --plugins "$tmp/nope.yaml"
expect_fail "unknown backend" 1 "no_such_backend" -- "$qvl" run -m "$fx" --ids 1 --print-ids --backend no_such_backend

# --- the whole text pipeline on a tiny random model with the real tokenizer ---------------------
tokjson=$shared/qwen3-vl-2b-instruct/tokenizer.json
if [ -f "$tokjson" ]; then
  write_tiny_config "$tmp/config.json" 1
  "$qvl" mkmodel --config "$tmp/config.json" --tokenizer "$tokjson" --out "$tmp/m" --std 0.5 2>/dev/null \
    && ok "mkmodel" || bad "mkmodel"
  out=$("$qvl" tokenize -m "$tmp/m" "Hello world" 2>&1)
  [ "$out" = "9707 1879" ] && ok "tokenize" || bad "tokenize: '$out'"
  out=$("$qvl" tokenize -m "$tmp/m" "$(printf '<|im_start|>user\nHello')" 2>&1)
  [ "$out" = "151644 872 198 9707" ] && ok "tokenize special tokens" || bad "tokenize special: '$out'"
  out=$("$qvl" tokenize -m "$tmp/m" --decode "9707,1879" 2>&1)
  [ "$out" = "Hello world" ] && ok "tokenize --decode" || bad "tokenize --decode: '$out'"
  expect_fail "tokenize --decode of an id without a token" 1 "no token has id 999999" -- \
    "$qvl" tokenize -m "$tmp/m" --decode "9707,999999"
  expect_fail "tokenize -f /dev/zero is refused unread" 1 "not a regular file (a character device)" -- \
    "$qvl" tokenize -m "$tmp/m" -f /dev/zero
  printf 'Hello world' > "$tmp/text"
  out=$("$qvl" tokenize -m "$tmp/m" -f - < "$tmp/text" 2>&1)
  [ "$out" = "9707 1879" ] && ok "tokenize -f -" || bad "tokenize -f -: '$out'"
  "$qvl" run -m "$tmp/m" -p "Hello" -n 8 --seed 1 --backend reference >"$tmp/out" 2>"$tmp/err" \
    && ok "run with the chat template" || bad "run: $(cat "$tmp/err")"
  a=$("$qvl" run -m "$tmp/m" -p "Hello" -n 8 --seed 7 --print-ids 2>/dev/null)
  b=$("$qvl" run -m "$tmp/m" -p "Hello" -n 8 --seed 7 --print-ids 2>/dev/null)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "same seed, same tokens" || bad "seeded run: '$a' vs '$b'"
  printf 'Hi\nAnd again\n' | "$qvl" chat -m "$tmp/m" -n 4 --seed 3 >"$tmp/out" 2>"$tmp/err" \
    && ok "chat, two turns" || bad "chat: $(cat "$tmp/err")"
  rm "$tmp/m/tokenizer.json"
  expect_fail "tokenize without tokenizer.json" 1 "tokenizer.json" -- "$qvl" tokenize -m "$tmp/m" "hi"
else
  echo "skip: $tokjson absent (tokenizer and full-pipeline checks)"
fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
