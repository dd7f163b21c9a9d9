#!/usr/bin/env bash
# llama.cpp's spellings in qvl: -t/--threads, -c/--ctx-size, -sys/--system-prompt, -f/--file,
# -p - (stdin), -cnv/-i, -b/--batch-size, --version, `qvl -m ...` without a command, and
# qvl --help listing them.
# usage: cli_aliases.sh QVL_BINARY SOURCE_DIR SHARED_DATA_DIR
set -u
qvl=$1; src=$2; shared=${3:-}
fx=$src/tests/fixtures/tiny-untied
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail, write_tiny_config

# --- help and version ---------------------------------------------------------------------------
"$qvl" --help > "$tmp/help"
for f in "-t, --threads" "-c, --ctx" "--ctx-size" "-sys, --system-prompt" "-f, --file" "-p - reads" \
         "-cnv, --conversation" "-i, --interactive" "--version" "--image-max-tokens" "-b, --batch-size"; do
  grep -q -- "$f" "$tmp/help" && ok "qvl --help lists '$f'" || bad "qvl --help lacks '$f'"
done
"$qvl" --version > "$tmp/v" 2>&1; rc=$?
[ "$rc" -eq 0 ] && grep -q "^qvl [0-9][0-9.]* (commit [0-9a-f]*\|^qvl [0-9][0-9.]* (commit unknown" "$tmp/v" \
  && grep -q "^built with " "$tmp/v" && grep -q "^  reference .* found: " "$tmp/v" \
  && ok "--version: version, commit, compiler, backends" || bad "--version: $(cat "$tmp/v")"
# A backend that cannot load is listed with its reason.
cat > "$tmp/plugins.yaml" <<YAML
backends:
  - name: not_built_anywhere
    priority: 10
  - name: reference
YAML
"$qvl" --version --plugins "$tmp/plugins.yaml" > "$tmp/v" 2>&1
grep -q "^  not_built_anywhere .*skipped: libqvl-not_built_anywhere.so not found" "$tmp/v" \
  && grep -q "^  reference .*found: .*used by default" "$tmp/v" \
  && ok "--version says why a backend is skipped" || bad "--version skipped: $(cat "$tmp/v")"
expect_fail "--version with a stray argument" 2 "unexpected argument" -- "$qvl" --version --bogus

# --- run flags on the HF fixture (ids in, ids out) ------------------------------------------------
flat=$(tr -d ' \n' < "$fx/fixture.json")
case1=$(echo "$flat" | sed -E 's/.*"name":"case1",//')
prompt=$(echo "$case1" | sed -E 's/^"prompt_ids":\[([0-9,]*)\].*/\1/')
greedy=$(echo "$case1" | sed -E 's/^"prompt_ids":\[[0-9,]*\],"greedy_ids":\[([0-9,]*)\].*/\1/' | tr ',' ' ')
got=$("$qvl" -m "$fx" --ids "$prompt" --print-ids -n 10 --temp 0 --backend reference 2>"$tmp/err")
[ "$got" = "$greedy" ] && ok "qvl -m ... without a command runs" || bad "no command: '$got' ($(cat "$tmp/err"))"
n_prompt=$(echo "$prompt" | tr ',' '\n' | grep -c .)
expect_fail "-c" 1 "context holds 4: raise --ctx" -- "$qvl" run -m "$fx" --ids "$prompt" --print-ids -c 4
expect_fail "--ctx-size" 1 "context holds 4: raise --ctx" -- "$qvl" run -m "$fx" --ids "$prompt" --print-ids --ctx-size 4
expect_fail "--ctx-size=N" 1 "context holds 5: raise --ctx" -- "$qvl" run -m "$fx" --ids "$prompt" --print-ids --ctx-size=5
expect_fail "-c takes a number" 2 "--ctx" -- "$qvl" run -m "$fx" --ids 1 --print-ids -c many
# -n -1 (llama.cpp's "no limit"): the answer runs until its end or a full context, which then
# ends it with a note instead of an error; the first tokens are the greedy ones.
got=$("$qvl" run -m "$fx" --ids "$prompt" --print-ids -n -1 -c $((n_prompt + 12)) --temp 0 --backend reference 2>"$tmp/err"); rc=$?
first=$(echo "$got" | cut -d' ' -f1-10)
[ "$rc" -eq 0 ] && [ "$first" = "$greedy" ] && [ "$(echo "$got" | wc -w)" -le 13 ] \
  && { grep -q "context of $((n_prompt + 12)) tokens is full" "$tmp/err" || [ "$(echo "$got" | wc -w)" -lt 13 ]; } \
  && ok "-n -1: until the context is full ($(echo "$got" | wc -w) tokens)" || bad "-n -1: rc $rc '$got' ($(cat "$tmp/err"))"
# --ignore-eos: a sampled answer that ended at the end token (id 1 here) goes on to -n; its
# first tokens are the same, then the end token itself.
found=""
for sd in $(seq 1 30); do
  short=$("$qvl" run -m "$fx" --ids 5,6 --print-ids -n 300 -c 400 --temp 1 --seed "$sd" --backend reference 2>/dev/null)
  n=$(echo "$short" | wc -w)
  [ "$n" -ge 1 ] && [ "$n" -lt 300 ] && { found=$sd; break; }
done
if [ -n "$found" ]; then
  long=$("$qvl" run -m "$fx" --ids 5,6 --print-ids -n 300 -c 400 --temp 1 --seed "$found" --ignore-eos --backend reference 2>"$tmp/err")
  k=$(echo "$short" | wc -w)
  [ "$(echo "$long" | wc -w)" -eq 300 ] && [ "$(echo "$long" | cut -d' ' -f1-"$k")" = "$short" ] \
    && [ "$(echo "$long" | cut -d' ' -f$((k + 1)))" = "1" ] \
    && ok "--ignore-eos: on past the end token (seed $found, $k -> 300 tokens)" || bad "--ignore-eos: '$long' ($(cat "$tmp/err"))"
else bad "no seed in 1-30 ended before 300 tokens"; fi
expect_fail "--ignore-eos in a chat" 2 "ignore-eos" -- "$qvl" chat -m "$fx" --ignore-eos
expect_fail "-n 0" 2 "0 is not a budget" -- "$qvl" run -m "$fx" --ids 1 --print-ids -n 0
expect_fail "-n -2" 2 "n-predict" -- "$qvl" run -m "$fx" --ids 1 --print-ids -n -2
# Prefill in batches of 3 tokens gives transformers' greedy tokens (images split across batches).
img=$(echo "$(tr -d ' \n' < "$fx/fixture_images.json")" | sed -E 's/.*"name":"img_two",//')
iprompt=$(echo "$img" | sed -E 's/.*"prompt_ids":\[([0-9,]*)\].*/\1/')
igreedy=$(echo "$img" | sed -E 's/.*"greedy_ids":\[([0-9,]*)\].*/\1/' | tr ',' ' ')
for b in 3 7; do
  got=$("$qvl" run -m "$fx" --ids "$iprompt" --image "$fx/tall.png" --image "$fx/small.png" -b $b \
        --print-ids -n 10 --temp 0 --backend reference 2>"$tmp/err")
  [ "$got" = "$igreedy" ] && ok "-b $b: batched prefill = transformers" || bad "-b $b: '$got' vs '$igreedy' ($(cat "$tmp/err"))"
done
"$qvl" run -m "$fx" --ids "$prompt" -b 2 --print-ids -n 1 --dump-logits "$tmp/l2" --backend reference >/dev/null 2>&1
"$qvl" run -m "$fx" --ids "$prompt" --print-ids -n 1 --dump-logits "$tmp/l1" --backend reference >/dev/null 2>&1
[ -s "$tmp/l1" ] && [ "$(stat -c %s "$tmp/l1")" -eq $((n_prompt * 384 * 4)) ] && [ "$(stat -c %s "$tmp/l2")" -eq "$(stat -c %s "$tmp/l1")" ] \
  && ok "--dump-logits with batches: every prompt row" || bad "--dump-logits with -b"

# -t sets the backend's threads option (cpu_avx2 names its thread count).
if "$qvl" run -m "$fx" --ids 1 --print-ids -n 1 --backend cpu_avx2 -v >/dev/null 2>"$tmp/err"; then
  for t in 1 3; do
    "$qvl" run -m "$fx" --ids 1 --print-ids -n 1 --backend cpu_avx2 -v -t $t >/dev/null 2>"$tmp/err"
    grep -q "timings: load .*cpu_avx2: .* $t threads)" "$tmp/err" && ok "-t $t" || bad "-t $t: $(cat "$tmp/err")"
  done
  "$qvl" run -m "$fx" --ids 1 --print-ids -n 1 --backend cpu_avx2 -v --threads 2 >/dev/null 2>"$tmp/err"
  grep -q "cpu_avx2: .* 2 threads)" "$tmp/err" && ok "--threads" || bad "--threads: $(cat "$tmp/err")"
else
  echo "skip: cpu_avx2 does not load here (-t checks)"
fi

# --- text flags with a real tokenizer ---------------------------------------------------------------
tokjson=$shared/qwen3-vl-2b-instruct/tokenizer.json
if [ -f "$tokjson" ]; then
  write_tiny_config "$tmp/config.json" 1
  "$qvl" mkmodel --config "$tmp/config.json" --tokenizer "$tokjson" --out "$tmp/m" --std 0.5 2>/dev/null
  run() { "$qvl" run -m "$tmp/m" -n 6 --seed 5 --print-ids -v --backend reference "$@" 2>"$tmp/err"; }
  tokens() { sed -nE 's/^timings: prefill .*, ([0-9]+) tokens .*/\1/p' "$tmp/err"; }
  want=$(run -p "Describe the sky"); n_plain=$(tokens)
  printf 'Describe the sky\n' > "$tmp/prompt.txt"
  [ -n "$want" ] && [ "$(run -f "$tmp/prompt.txt")" = "$want" ] && ok "-f FILE" || bad "-f: $(cat "$tmp/err")"
  [ "$(run --file "$tmp/prompt.txt")" = "$want" ] && ok "--file FILE" || bad "--file"
  [ "$(printf 'Describe the sky\n' | run -p -)" = "$want" ] && ok "-p - reads stdin" || bad "-p -: $(cat "$tmp/err")"
  a=$(run -p "Describe the sky" -sys "Be brief."); n_sys=$(tokens)
  b=$(run -p "Describe the sky" --system-prompt "Be brief.")
  c=$(run -p "Describe the sky" --system "Be brief.")
  [ "$a" = "$c" ] && [ "$b" = "$c" ] && [ "$n_sys" -gt "$n_plain" ] \
    && ok "-sys / --system-prompt = --system" || bad "-sys: '$a' '$b' '$c' ($n_sys vs $n_plain tokens)"
  expect_fail "-f missing file" 1 "nope.txt" -- "$qvl" run -m "$tmp/m" -f "$tmp/nope.txt"
  expect_fail "-p and -f" 2 "exclude each other" -- "$qvl" run -m "$tmp/m" -p hi -f "$tmp/prompt.txt"
  for flag in -cnv -i --conversation --interactive; do
    printf 'Hi\nAgain\n' | "$qvl" run -m "$tmp/m" $flag -n 3 --seed 3 --backend reference >"$tmp/out" 2>"$tmp/err" \
      && [ "$(grep -c . "$tmp/out")" -ge 1 ] && ok "run $flag chats" || bad "run $flag: $(cat "$tmp/err")"
  done
else
  echo "skip: $tokjson absent (-f, -p -, -sys, -cnv checks)"
fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
