#!/usr/bin/env bash
# Bad input at the CLI's edges, each refused in one line before it costs anything: what
# `qvl tokenize -f` will read (regular files bounded by their size, pipes and terminals streamed
# up to the limit, devices and directories never read), --decode of an id past the vocabulary,
# <|image_pad|> typed into a prompt with no picture for it, and weights whose F16/BF16 label
# contradicts config.json's dtype (docs/hostile-input.md).
# usage: cli_hostile.sh QVL_BINARY SOURCE_DIR
set -u
qvl=$1; src=$2
fx=$(cd "$src" && pwd)/tests/fixtures/tiny-untied
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail
[ -f "$fx/tokenizer.json" ] || { echo "skip: $fx/tokenizer.json absent"; exit 77; }

# ---- qvl tokenize -f ----------------------------------------------------------------------
want=$("$qvl" tokenize -m "$fx" "hello there" 2>&1)
expect_fail "tokenize -f /dev/zero: a device is never read" 1 \
  "/dev/zero: not a regular file (a character device)" -- "$qvl" tokenize -m "$fx" -f /dev/zero
expect_fail "tokenize -f DIR" 1 "not a regular file (a directory)" -- "$qvl" tokenize -m "$fx" -f "$tmp"
expect_fail "tokenize -f - from a device" 1 "stdin: not a file, pipe or terminal" -- \
  bash -c "exec \"\$0\" tokenize -m \"\$1\" -f - < /dev/zero" "$qvl" "$fx"
# A sparse 100 MiB file: refused from its size, nothing read (or allocated).
truncate -s 100M "$tmp/big.txt"
expect_fail "tokenize -f of a file over the limit" 1 "big.txt: larger than the limit of 67108864 bytes" \
  -- "$qvl" tokenize -m "$fx" -f "$tmp/big.txt"
expect_fail "tokenize -f - of a file over the limit" 1 "stdin: larger than 67108864 bytes" -- \
  bash -c "exec \"\$0\" tokenize -m \"\$1\" -f - < \"\$2\"" "$qvl" "$fx" "$tmp/big.txt"
# Pipes are read: a FIFO (as a shell's <(...) gives), stdin from a pipe.
mkfifo "$tmp/fifo"
(printf 'hello there' > "$tmp/fifo" &)
out=$("$qvl" tokenize -m "$fx" -f "$tmp/fifo" 2>&1)
[ "$out" = "$want" ] && ok "tokenize -f FIFO" || bad "tokenize -f FIFO: '$out' (want '$want')"
out=$(printf 'hello there' | "$qvl" tokenize -m "$fx" -f - 2>&1)
[ "$out" = "$want" ] && ok "tokenize -f - from a pipe" || bad "tokenize -f - pipe: '$out'"
# An endless pipe stops at the limit.
expect_fail "tokenize -f - of an endless pipe" 1 "stdin: larger than 67108864 bytes" -- \
  bash -c "head -c 70000000 /dev/zero | exec \"\$0\" tokenize -m \"\$1\" -f -" "$qvl" "$fx"

# ---- qvl tokenize --decode ------------------------------------------------------------------
n_vocab=$(( $(tr -d ' \n' < "$fx/tokenizer.json" | grep -o '"id":[0-9]*' | cut -d: -f2 | sort -n | tail -1) ))
expect_fail "--decode of an id past the vocabulary" 1 \
  "--decode: no token has id 999999 (the vocabulary's ids are 0 to $n_vocab)" -- \
  "$qvl" tokenize -m "$fx" --decode "5,999999"

# ---- <|image_pad|> typed as text ----------------------------------------------------------
pad=$(tr -d ' \n' < "$fx/config.json" | sed -E 's/.*"image_token_id":([0-9]+).*/\1/')
expect_fail "a typed <|image_pad|> without --image" 1 \
  "the prompt holds 1 <|image_pad|> token(s) (id $pad) typed as text, with no picture for them" -- \
  "$qvl" run -m "$fx" -p "what is <|image_pad|> here?" -n 1 --backend reference
expect_fail "a typed <|image_pad|> beside a real picture" 1 \
  "the prompt holds 1 <|image_pad|> token(s) (id $pad) typed as text" -- \
  "$qvl" run -m "$fx" --image "$fx/small.png" -p "<image> and <|image_pad|>?" -n 1 -q --backend reference
"$qvl" run -m "$fx" --image "$fx/small.png" -p "<image> what is it?" -n 1 --temp 0 \
  --backend reference >/dev/null 2>"$tmp/err" && ok "a picture placed with <image> runs" \
  || bad "<image> run: $(cat "$tmp/err")"
"$qvl" run -m "$fx" -p "the text <|image|> and <image>" -n 1 --temp 0 --backend reference \
  >/dev/null 2>"$tmp/err" && ok "look-alike text without pictures runs" || bad "look-alike: $(cat "$tmp/err")"

# ---- F16 / BF16 labels against config.json's dtype -------------------------------------------
# relabel FILE FROM TO: rewrite a safetensors header's dtype FROM as TO, the data untouched.
relabel() {
  python3 - "$@" <<'PY'
import json, struct, sys
path, a, b = sys.argv[1:]
d = open(path, 'rb').read()
n = struct.unpack('<Q', d[:8])[0]
h = json.loads(d[8:8 + n])
for k, v in h.items():
    if k != '__metadata__' and v['dtype'] == a:
        v['dtype'] = b
hb = json.dumps(h).encode()
hb += b' ' * (-len(hb) % 8)
open(path, 'wb').write(struct.pack('<Q', len(hb)) + hb + d[8 + n:])
PY
}
if command -v python3 >/dev/null; then
  for dt in bfloat16 float16; do
    sed -e "s/^{/{\"torch_dtype\": \"$dt\", /" "$fx/config.json" > "$tmp/config_$dt.json"
  done
  grep -q '"torch_dtype": "bfloat16"' "$tmp/config_bfloat16.json" || bad "cannot write the config"
  mk() { "$qvl" mkmodel --config "$tmp/config_$1.json" --out "$tmp/$2" --dtype "$3" --std "$4" \
           --tokenizer "$fx/tokenizer.json" 2>/dev/null || bad "mkmodel $2"; }
  # Deliberately converted weights load: f16 values under a config saying bfloat16, at any scale.
  for std in 0.02 1; do
    mk bfloat16 "conv$std" f16 $std
    "$qvl" run -m "$tmp/conv$std" -p hi -n 1 --temp 0 --backend reference >/dev/null 2>"$tmp/err" \
      && ok "f16 weights (std $std) under a bfloat16 config load" || bad "converted: $(cat "$tmp/err")"
  done
  # BF16 bits labelled F16 (and the reverse) are refused, naming the tensor.
  for std in 0.02 1; do
    mk bfloat16 "bf$std" bf16 $std
    relabel "$tmp/bf$std/model.safetensors" BF16 F16
    expect_fail "BF16 bits labelled F16 (std $std)" 1 \
      "embed_tokens.weight is labelled F16 but holds bfloat16 bit patterns (config.json's dtype is bfloat16)" \
      -- "$qvl" run -m "$tmp/bf$std" -p hi -n 1 --backend reference
  done
  mk float16 f16 f16 0.02
  relabel "$tmp/f16/model.safetensors" F16 BF16
  expect_fail "F16 bits labelled BF16" 1 \
    "is labelled BF16 but holds float16 bit patterns (config.json's dtype is float16)" \
    -- "$qvl" run -m "$tmp/f16" -p hi -n 1 --backend reference
  # The same relabelled file without a dtype in its config: nothing to check against.
  cp "$fx/config.json" "$tmp/bf0.02/config.json"
  "$qvl" run -m "$tmp/bf0.02" -p hi -n 1 --temp 0 --backend reference >/dev/null 2>"$tmp/err" \
    && ok "no dtype in config.json: labels are taken as they are" || bad "no dtype: $(cat "$tmp/err")"
else
  echo "skip: python3 absent (dtype label checks)"
fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
