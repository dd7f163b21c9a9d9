#!/usr/bin/env bash
# qvl run's llama.cpp sampling and context flags on the tiny model (greedy, so every answer is
# fixed): --frequency-penalty with the --repeat-last-n window it counts in, and -c 0 (the
# model's trained context, capped by memory, said in one line).
# usage: cli_sampling_flags.sh QVL_BINARY SOURCE_DIR SHARED_DATA_DIR
set -u
qvl=$1; src=$2
fx=$src/tests/fixtures/tiny-tied
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail
run=(run -m "$fx" --ids 1,2,3 --print-ids -n 40 --temp 0 --backend reference)

# repeats WINDOW IDS...: how many ids equal one of the WINDOW ids before them (0: the whole
# answer before them).
repeats() {
  local w=$1; shift
  echo "$@" | awk -v w="$w" '{ n = 0; for (i = 2; i <= NF; i++) for (j = (w > 0 && i - w > 1 ? i - w : 1); j < i; j++) if ($j == $i) { n++; break } print n }'
}

plain=$("$qvl" "${run[@]}" 2>"$tmp/err") || bad "plain greedy run: $(cat "$tmp/err")"
[ "$(repeats 0 $plain)" -gt 0 ] && ok "without penalties the greedy answer repeats tokens" \
  || bad "the plain answer repeats nothing, so the penalty checks below prove nothing: $plain"

whole=$("$qvl" "${run[@]}" --frequency-penalty 100 --repeat-last-n -1 2>"$tmp/err")
[ $? -eq 0 ] && [ "$(echo $whole | wc -w)" -eq 40 ] && [ "$(repeats 0 $whole)" -eq 0 ] \
  && ok "--frequency-penalty 100 --repeat-last-n -1: no token twice in the answer" \
  || bad "whole-context frequency penalty: '$whole' $(cat "$tmp/err")"

two=$("$qvl" "${run[@]}" --frequency-penalty 100 --repeat-last-n 2 2>"$tmp/err")
[ "$(repeats 2 $two)" -eq 0 ] && ok "--repeat-last-n 2: no token repeats within two" \
  || bad "--repeat-last-n 2: '$two'"
[ "$(repeats 0 $two)" -gt 0 ] && ok "--repeat-last-n 2: a token comes back once it left the window" \
  || bad "--repeat-last-n 2 penalised beyond its window: '$two'"

off=$("$qvl" "${run[@]}" --frequency-penalty 100 --presence-penalty 5 --repeat-penalty 3 \
      --repeat-last-n 0 2>"$tmp/err")
[ "$off" = "$plain" ] && ok "--repeat-last-n 0: no penalty at all (the plain answer)" \
  || bad "--repeat-last-n 0: '$off' vs '$plain'"

# The default window is 64 tokens, longer than this answer: the same as the whole context.
dflt=$("$qvl" "${run[@]}" --frequency-penalty 100 2>"$tmp/err")
[ "$dflt" = "$whole" ] && ok "default --repeat-last-n 64 covers a 43-token history" \
  || bad "default window: '$dflt' vs '$whole'"

# qvl chat (on the engine) shares the flags and their math: the same greedy text as qvl run.
for pen in "" "--frequency-penalty 100 --repeat-last-n 8" "--frequency-penalty 100 --presence-penalty 1 --repeat-last-n -1"; do
  a=$("$qvl" run -m "$fx" -p hello -n 40 --temp 0 --backend reference $pen 2>"$tmp/err" | od -c)
  b=$(echo hello | "$qvl" chat -m "$fx" -n 40 --temp 0 --backend reference $pen 2>>"$tmp/err" | od -c)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "qvl chat answers as qvl run with '$pen'" \
    || bad "chat vs run with '$pen': $(cat "$tmp/err")"
done
[ "$("$qvl" run -m "$fx" -p hello -n 40 --temp 0 --backend reference 2>/dev/null | od -c)" != \
  "$("$qvl" run -m "$fx" -p hello -n 40 --temp 0 --backend reference --frequency-penalty 100 2>/dev/null | od -c)" ] \
  && ok "the frequency penalty changes the text answer" || bad "--frequency-penalty 100 changed nothing"
echo hello | QVL_MEMORY_AVAILABLE_MIB=1 "$qvl" chat -m "$fx" -n 4 --temp 0 -c 0 >"$tmp/out" 2>"$tmp/err"
grep -q "^context: 1024 tokens (model's trained context 4096, capped by memory" "$tmp/err" \
  && ok "qvl chat -c 0" || bad "qvl chat -c 0: $(cat "$tmp/err")"

expect_fail "--repeat-last-n -2 refused" 2 "repeat-last-n" -- "$qvl" "${run[@]}" --repeat-last-n -2
expect_fail "--frequency-penalty nan refused" 2 "frequency-penalty" -- "$qvl" "${run[@]}" --frequency-penalty nan

# -c 0: the trained context (4096 in the fixture's config), one line on stderr saying so.
"$qvl" "${run[@]}" -n 4 -c 0 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -qx "context: 4096 tokens (model's trained context 4096)" "$tmp/err" \
  && ok "-c 0: the model's trained context" || bad "-c 0: exit $rc: $(cat "$tmp/err")"
# capped by the memory given (1 MiB: half of it holds 1024 tokens of 512 bytes at f16)
QVL_MEMORY_AVAILABLE_MIB=1 "$qvl" "${run[@]}" -n 4 -c 0 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && grep -q "^context: 1024 tokens (model's trained context 4096, capped by memory: a f16 KV cache of 512 B a token in half of the 1.0 MiB " "$tmp/err" \
  && ok "-c 0 capped by memory, and the reason printed" || bad "-c 0 capped: exit $rc: $(cat "$tmp/err")"
QVL_MEMORY_AVAILABLE_MIB=1 "$qvl" "${run[@]}" -n 4 -c 0 --kv-type f32 >"$tmp/out" 2>"$tmp/err"
grep -q "^context: 512 tokens (model's trained context 4096, capped by memory: a f32 KV cache of 1.0 KiB a token" "$tmp/err" \
  && ok "-c 0 counts the --kv-type's bytes" || bad "-c 0 --kv-type f32: $(cat "$tmp/err")"
# -n -1 follows the context -c 0 chose: the answer runs until that context is full (the last
# token is sampled from a full cache and never fed, hence one more than the free positions)
QVL_MEMORY_AVAILABLE_MIB=1 "$qvl" "${run[@]}" --ignore-eos -n -1 -c 0 >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc -eq 0 ] && [ "$(wc -w < "$tmp/out")" -eq $((1024 - 3 + 1)) ] \
  && ok "-c 0 -n -1: the answer fills the 1024 chosen" || bad "-c 0 -n -1: exit $rc, $(wc -w < "$tmp/out") ids: $(cat "$tmp/err")"
expect_fail "-c 0 without memory for 256 tokens" 1 "give --ctx N" -- \
  env QVL_MEMORY_AVAILABLE_MIB=0.1 "$qvl" "${run[@]}" -c 0
"$qvl" "${run[@]}" -n 4 -c 0 -q >"$tmp/out" 2>"$tmp/err"
[ ! -s "$tmp/err" ] && ok "-c 0 -q: no context line" || bad "-c 0 -q: $(cat "$tmp/err")"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
