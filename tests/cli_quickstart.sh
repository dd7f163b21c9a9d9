#!/usr/bin/env bash
# The README's quick start ends with `./build/tools/qvl run -m tests/fixtures/tiny-tied -p "Hello"
# -n 8 --temp 0`: run exactly that (from the source tree, with this build's qvl) and check that it
# prints text, and that the fixture tokenizer's special tokens carry the ids the fixtures'
# config.json and generation_config.json give them.
# usage: cli_quickstart.sh QVL SOURCE_DIR
set -u
qvl=$1; src=$2
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail

readme_cmd=$(grep -o '\./build/tools/qvl run -m tests/fixtures/[^`]*' "$src/README.md" | head -1)
[ "$readme_cmd" = './build/tools/qvl run -m tests/fixtures/tiny-tied -p "Hello" -n 8 --temp 0' ] \
  && ok "README quick start: $readme_cmd" || bad "README quick start is now '$readme_cmd'"
out=$(cd "$src" && "$qvl" run -m tests/fixtures/tiny-tied -p "Hello" -n 8 --temp 0 2>"$tmp/err")
rc=$?
[ "$rc" -eq 0 ] && [ -n "$out" ] && ok "it prints text: '$out'" \
  || bad "exit $rc, output '$out' ($(head -c 300 "$tmp/err"))"

# ids by name, read back through qvl tokenize (one id each)
tok_id() { "$qvl" tokenize -m "$1" "$2" 2>/dev/null; }
json_int() { grep -o "\"$2\": *[0-9]*" "$1" | head -1 | grep -o '[0-9]*$'; }
for fx in tiny-tied tiny-untied; do
  d=$src/tests/fixtures/$fx
  [ "$(tok_id "$d" '<|image_pad|>')" = "$(json_int "$d/config.json" image_token_id)" ] \
    && ok "$fx: <|image_pad|> is image_token_id" || bad "$fx: <|image_pad|> $(tok_id "$d" '<|image_pad|>')"
  [ "$(tok_id "$d" '<|vision_start|>')" = "$(json_int "$d/config.json" vision_start_token_id)" ] \
    && [ "$(tok_id "$d" '<|vision_end|>')" = "$(json_int "$d/config.json" vision_end_token_id)" ] \
    && ok "$fx: vision start/end ids" || bad "$fx: vision start/end"
  eos=$(tr -d ' \n' <"$d/generation_config.json" | grep -o '"eos_token_id":\[[0-9]*' | grep -o '[0-9]*$')
  [ "$(tok_id "$d" '<|im_end|>')" = "$eos" ] && ok "$fx: <|im_end|> is generation_config's eos ($eos)" \
    || bad "$fx: <|im_end|> $(tok_id "$d" '<|im_end|>') vs eos $eos"
  n=$(tok_id "$d" '<|im_start|>user
Hello<|im_end|>' | wc -w)
  [ "$n" -ge 4 ] && ok "$fx: the chat template's tokens encode ($n ids)" || bad "$fx: template tokens"
  max=$("$qvl" tokenize -m "$d" "Hello there, why is the sky blue? 日本語 ünïcode" 2>/dev/null | tr ' ' '\n' | sort -n | tail -1)
  vocab=$(json_int "$d/config.json" vocab_size)
  [ -n "$max" ] && [ "$max" -lt "$vocab" ] && ok "$fx: ids below vocab_size $vocab" || bad "$fx: id $max"
  back=$("$qvl" tokenize -m "$d" --decode "$("$qvl" tokenize -m "$d" "Hello there, why is the sky blue? 日本語")" 2>/dev/null)
  [ "$back" = "Hello there, why is the sky blue? 日本語" ] && ok "$fx: encode/decode round trip" \
    || bad "$fx: round trip gave '$back'"
done

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
