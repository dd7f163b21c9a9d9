#!/usr/bin/env bash
# Files qvl writes or copies (docs/hostile-input.md, "Files qvl writes"): an output that is a
# FIFO or device is written as it is (never renamed over), a symlink is followed and stays a
# link, a replaced file keeps its permissions; qvl quantize copies no file that a link leads
# to outside the model directory (the Hugging Face cache's blobs excepted), keeps the source's
# permissions, refuses to replace an existing model without --force and leaves no half-written
# model (an existing one stays intact) when it fails; qvl mkmodel applies the same link rule.
# Every FIFO has its reader started (under timeout) before the writer; a reader that nothing
# will ever write to (a build without the rule) is ended by the failing check itself.
# /dev/null is written only after a private FIFO showed the rule holds, so this script cannot
# replace the machine's /dev/null on a build without it.
# usage: cli_files.sh QVL SOURCE_DIR
set -u
qvl=$1; src=$2
fx=$(cd "$src" && pwd)/tests/fixtures/tiny-tied
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail
pic=$fx/small.png
wh=$("$qvl" decode "$pic" --out "$tmp/want.rgb" 2>"$tmp/err") || bad "decode: $(cat "$tmp/err")"

# no_temp_left DIR WHAT: nothing named *.qvl-* is left in DIR
no_temp_left() {
  local left; left=$(find "$1" -maxdepth 1 -name '*.qvl-*' | head -3)
  [ -z "$left" ] && ok "$2: nothing left beside it" || bad "$2: left behind: $left"
}

# through_fifo NAME FIFO CHECK -- command...: runs the command (which writes into FIFO) while a
# reader drains FIFO into $tmp/got; passes when it exits 0, CHECK (a shell test) holds after,
# and the reader got $tmp/want.
through_fifo() {
  local name=$1 fifo=$2 check=$3; shift 4
  timeout 120 cat "$fifo" >"$tmp/got" & local reader=$!
  timeout 120 "$@" >/dev/null 2>"$tmp/err"; local rc=$?
  if [ "$rc" -eq 0 ] && eval "$check"; then
    wait "$reader"
    cmp -s "$tmp/want" "$tmp/got" && ok "$name" || bad "$name: the reader got other bytes"
  else
    kill "$reader" 2>/dev/null; wait "$reader"
    bad "$name (exit $rc, check '$check' $(eval "$check" && echo held || echo failed): $(head -c 300 "$tmp/err"))"
    return 1
  fi
}

# ---- qvl decode --out --------------------------------------------------------------------------
cp "$tmp/want.rgb" "$tmp/want"
mkfifo "$tmp/fifo"
fifo_ok=0
through_fifo "decode --out FIFO: written into it, still a FIFO" "$tmp/fifo" '[ -p "$tmp/fifo" ]' -- \
  "$qvl" decode "$pic" --out "$tmp/fifo" && fifo_ok=1
ln -s "$tmp/fifo" "$tmp/fifo-link"
through_fifo "decode --out LINK-TO-FIFO: written into the FIFO, the link stays" "$tmp/fifo" \
  '[ -L "$tmp/fifo-link" ] && [ -p "$tmp/fifo" ]' -- "$qvl" decode "$pic" --out "$tmp/fifo-link"
# A link to /dev/null: a build without the rule replaces only the link, never /dev/null itself.
ln -s /dev/null "$tmp/null-link"
"$qvl" decode "$pic" --out "$tmp/null-link" >/dev/null 2>"$tmp/err"
[ -L "$tmp/null-link" ] && [ "$(readlink "$tmp/null-link")" = /dev/null ] && [ -c /dev/null ] \
  && ok "decode --out LINK-TO-/dev/null: the link and the device stay" \
  || bad "decode --out link to /dev/null: $(ls -l "$tmp/null-link") $(cat "$tmp/err")"
# /dev/null and /dev/stdout (a link to the pipe here) only once the FIFO showed the rule holds
if [ "$fifo_ok" = 1 ]; then
  "$qvl" decode "$pic" --out /dev/null >/dev/null 2>"$tmp/err"
  [ -c /dev/null ] && ok "decode --out /dev/null: still a character device" \
    || bad "decode --out /dev/null: /dev/null is now $(stat -c %F /dev/null)"
  if [ -L /dev/stdout ]; then # (where there is none, decode would create a file there)
    "$qvl" decode "$pic" --out /dev/stdout 2>"$tmp/err" | cat >"$tmp/stdout.bin"
    { cat "$tmp/want.rgb"; echo "$wh"; } | cmp -s - "$tmp/stdout.bin" && [ -L /dev/stdout ] \
      && ok "decode --out /dev/stdout: the bytes, then W H, on the pipe" \
      || bad "decode --out /dev/stdout: $(cat "$tmp/err")"
  else echo "skip decode --out /dev/stdout: no /dev/stdout link here"; fi
else bad "decode --out /dev/null and /dev/stdout: not tried, as the FIFO case failed"; fi
# A link to a regular file: the file gets the bytes, the link stays, the mode never widens.
printf old >"$tmp/real.rgb"; chmod 600 "$tmp/real.rgb"; ln -s real.rgb "$tmp/real-link"
"$qvl" decode "$pic" --out "$tmp/real-link" >/dev/null 2>"$tmp/err"
[ -L "$tmp/real-link" ] && cmp -s "$tmp/want.rgb" "$tmp/real.rgb" \
  && ok "decode --out LINK-TO-FILE: written through, the link stays" \
  || bad "decode --out link to a file: $(ls -l "$tmp/real-link") $(cat "$tmp/err")"
[ "$(stat -c %a "$tmp/real.rgb")" = 600 ] && ok "a 0600 file replaced through a link stays 0600" \
  || bad "replaced file mode: $(stat -c %a "$tmp/real.rgb")"
printf old >"$tmp/private.rgb"; chmod 600 "$tmp/private.rgb"
"$qvl" decode "$pic" --out "$tmp/private.rgb" >/dev/null 2>"$tmp/err"
cmp -s "$tmp/want.rgb" "$tmp/private.rgb" && [ "$(stat -c %a "$tmp/private.rgb")" = 600 ] \
  && ok "a replaced 0600 file stays 0600" || bad "replaced 0600 file: $(ls -l "$tmp/private.rgb")"
expect_fail "decode --out DIR" 1 "a directory, not a regular file, FIFO or character device" -- \
  "$qvl" decode "$pic" --out "$tmp"
ln -s "$tmp/nowhere/x.rgb" "$tmp/dangling"
expect_fail "decode --out DANGLING-LINK" 1 "dangling: a symbolic link to nothing" -- \
  "$qvl" decode "$pic" --out "$tmp/dangling"
no_temp_left "$tmp" "decode"

# ---- qvl run --dump-logits --------------------------------------------------------------------
run_args=(run -m "$fx" --ids 1,2,3 -n 1 --temp 0 --backend reference --dump-logits)
if "$qvl" "${run_args[@]}" "$tmp/want" >/dev/null 2>"$tmp/err"; then
  through_fifo "run --dump-logits FIFO" "$tmp/fifo" '[ -p "$tmp/fifo" ]' -- \
    "$qvl" "${run_args[@]}" "$tmp/fifo"
else bad "run --dump-logits: $(tail -1 "$tmp/err")"; fi

# ---- qvl quantize: what it copies --------------------------------------------------------------
# mksrc DIR: a model directory with the fixture's weights and companions
mksrc() {
  mkdir -p "$1"
  for f in model.safetensors config.json generation_config.json preprocessor_config.json tokenizer.json; do
    cp "$fx/$f" "$1/"
  done
}
quantize() { timeout 120 "$qvl" quantize --weights q8_0 "$@"; }
printf 'root:secret\n' >"$tmp/secret"; chmod 600 "$tmp/secret"
mksrc "$tmp/m1"; ln -s ../secret "$tmp/m1/merges.txt"
expect_fail "quantize: merges.txt linked out of the model directory" 1 \
  "m1/merges.txt leads to $tmp/secret, outside the model directory: refusing to copy it" -- \
  quantize -m "$tmp/m1" --out "$tmp/q1"
[ ! -e "$tmp/q1" ] && ok "quantize refused: no output directory" || bad "quantize refused: $tmp/q1 exists"
no_temp_left "$tmp" "a refused quantize"
mksrc "$tmp/m2"; mkfifo "$tmp/m2/vocab.json"
expect_fail "quantize: a FIFO companion, refused without waiting" 1 \
  "m2/vocab.json: a FIFO, not a regular file" -- quantize -m "$tmp/m2" --out "$tmp/q2"
# links that stay inside the directory are copied; the copy keeps a 0600 source's mode
mksrc "$tmp/m3"; mkdir "$tmp/m3/sub"; mv "$tmp/m3/tokenizer.json" "$tmp/m3/sub/"
ln -s sub/tokenizer.json "$tmp/m3/tokenizer.json"; chmod 600 "$tmp/m3/sub/tokenizer.json"
if quantize -m "$tmp/m3" --out "$tmp/q3" >/dev/null 2>"$tmp/err"; then
  [ -f "$tmp/q3/tokenizer.json" ] && [ ! -L "$tmp/q3/tokenizer.json" ] \
    && cmp -s "$fx/tokenizer.json" "$tmp/q3/tokenizer.json" && ok "quantize: a link inside is copied" \
    || bad "quantize: tokenizer.json in the output: $(ls -l "$tmp/q3")"
  [ "$(stat -c %a "$tmp/q3/tokenizer.json")" = 600 ] && ok "quantize: a 0600 companion stays 0600" \
    || bad "quantize: copied mode $(stat -c %a "$tmp/q3/tokenizer.json")"
else bad "quantize with an inside link: $(cat "$tmp/err")"; fi
# The Hugging Face cache: snapshots/<rev>/<file> -> ../../blobs/<hash>
hf=$tmp/hub/models--org--tiny; mkdir -p "$hf/blobs" "$hf/snapshots/rev1"
for f in model.safetensors config.json generation_config.json preprocessor_config.json tokenizer.json; do
  h=$(sha256sum "$fx/$f" | cut -c1-16); cp "$fx/$f" "$hf/blobs/$h"; ln -s "../../blobs/$h" "$hf/snapshots/rev1/$f"
done
if quantize -m "$hf/snapshots/rev1" --out "$tmp/q-hf" >/dev/null 2>"$tmp/err"; then
  cmp -s "$fx/tokenizer.json" "$tmp/q-hf/tokenizer.json" && [ ! -L "$tmp/q-hf/config.json" ] \
    && ok "quantize: a Hugging Face cache snapshot's blobs are copied" || bad "quantize HF: $(ls -l "$tmp/q-hf")"
else bad "quantize of an HF cache snapshot: $(cat "$tmp/err")"; fi

# ---- qvl quantize --out: an existing model -----------------------------------------------------
mksrc "$tmp/m4"
quantize -m "$tmp/m4" --out "$tmp/q4" >/dev/null 2>&1 && cp -r "$tmp/q4" "$tmp/q4-before" \
  || bad "quantize into a new directory"
expect_fail "quantize --out onto an existing model" 1 \
  "q4 already holds 5 file(s), a model perhaps: refusing to replace them without --force" -- \
  quantize -m "$tmp/m4" --out "$tmp/q4"
diff -r "$tmp/q4-before" "$tmp/q4" >/dev/null && ok "the existing model is untouched" || bad "q4 changed"
# --force with a source that fails midway (config.json copied, then merges.txt refused)
ln -s ../secret "$tmp/m4/merges.txt"
expect_fail "quantize --force failing midway" 1 "merges.txt leads to" -- \
  quantize -m "$tmp/m4" --out "$tmp/q4" --force
diff -r "$tmp/q4-before" "$tmp/q4" >/dev/null && ok "a failed --force leaves the old model intact" \
  || bad "a failed --force changed q4"
no_temp_left "$tmp" "a failed --force"
rm "$tmp/m4/merges.txt"
if timeout 120 "$qvl" quantize --weights f16 -m "$tmp/m4" --out "$tmp/q4" --force >/dev/null 2>"$tmp/err"; then
  grep -q '"qvl.weights":"f16"' "$tmp/q4/model.safetensors" \
    && [ "$(ls "$tmp/q4" | wc -l)" -eq 5 ] && ok "quantize --force replaces the model" \
    || bad "quantize --force: $(ls "$tmp/q4"), $(head -c 200 "$tmp/q4/model.safetensors" | tr -d '\0')"
  "$qvl" run -m "$tmp/q4" --ids 1,2 -n 1 --temp 0 --backend reference >/dev/null 2>"$tmp/err" \
    && ok "the replaced model runs" || bad "the replaced model: $(tail -1 "$tmp/err")"
else bad "quantize --force: $(cat "$tmp/err")"; fi
no_temp_left "$tmp" "quantize --force"
mkdir -p "$tmp/q5/sub"
expect_fail "quantize --out holding a subdirectory, even with --force" 1 \
  "q5 holds a directory (sub): not a model directory to replace" -- \
  quantize -m "$tmp/m4" --out "$tmp/q5" --force
[ -d "$tmp/q5/sub" ] && ok "the directory with a subdirectory is untouched" || bad "q5 changed"
mkdir "$tmp/q6"
quantize -m "$tmp/m4" --out "$tmp/q6/" >/dev/null 2>"$tmp/err" && [ -f "$tmp/q6/model.safetensors" ] \
  && ok "quantize into an existing empty directory (named with a slash)" || bad "q6: $(cat "$tmp/err")"

# ---- qvl mkmodel: files found beside the config ------------------------------------------------
mkdir "$tmp/cfg"; cp "$fx/config.json" "$tmp/cfg/"; ln -s ../secret "$tmp/cfg/chat_template.jinja"
expect_fail "mkmodel: a chat template linked out of the config's directory" 1 \
  "cfg/chat_template.jinja leads to $tmp/secret, outside the model directory" -- \
  "$qvl" mkmodel --config "$tmp/cfg/config.json" --out "$tmp/mk"
[ ! -e "$tmp/mk/chat_template.jinja" ] && ok "mkmodel: the secret is not copied" || bad "mkmodel copied it"

# a link at a name mkmodel writes is refused before anything is written (it could lead to the
# user's own files); the file it points at is untouched
mkdir "$tmp/mk2"; printf 'mine\n' >"$tmp/mine.json"; ln -s ../mine.json "$tmp/mk2/generation_config.json"
expect_fail "mkmodel --out holding a link" 1 "holds a symbolic link (generation_config.json)" -- \
  "$qvl" mkmodel --config "$fx/config.json" --out "$tmp/mk2"
[ "$(cat "$tmp/mine.json")" = mine ] && [ ! -e "$tmp/mk2/model.safetensors" ] \
  && ok "mkmodel: nothing written through the link" || bad "mkmodel wrote: $(ls "$tmp/mk2")"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
