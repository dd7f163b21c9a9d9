#!/usr/bin/env bash
# Quiet, precise messages: a backend skipped by design is mentioned only at -v, once, in one
# line; a --backend that fails stays an error; a missing model directory is said first; each
# subcommand's help lists only its own options.
# usage: cli_messages.sh QVL_BINARY SOURCE_DIR SHARED_DATA_DIR
set -u
qvl=$1; src=$2
fx=$src/tests/fixtures/tiny-untied
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail, write_tiny_config

# A higher-priority backend that cannot start here (never built), then the reference.
cat > "$tmp/plugins.yaml" <<YAML
backends:
  - name: not_built_anywhere
    priority: 100
  - name: reference
    priority: 0
YAML
"$qvl" run -m "$fx" --ids 1,2 --print-ids -n 2 --plugins "$tmp/plugins.yaml" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 0 ] && [ ! -s "$tmp/err" ] && ok "skipped backend: nothing on stderr by default" \
  || bad "skipped backend by default: $(cat "$tmp/err")"
"$qvl" run -m "$fx" --ids 1,2 --print-ids -n 2 --plugins "$tmp/plugins.yaml" -v >"$tmp/out" 2>"$tmp/err"
[ "$(grep -c "not_built_anywhere" "$tmp/err")" -eq 1 ] \
  && grep -q "^qvl: info: backend not_built_anywhere skipped: libqvl-not_built_anywhere.so not found" "$tmp/err" \
  && ok "skipped backend: one line at -v" || bad "skipped backend at -v: $(cat "$tmp/err")"
# The program's default list (a GPU backend first) on this machine: no warning either way.
"$qvl" run -m "$fx" --ids 1,2 --print-ids -n 2 >"$tmp/out" 2>"$tmp/err"
[ ! -s "$tmp/err" ] && ok "default plugins.yaml: nothing on stderr" || bad "default plugins: $(cat "$tmp/err")"
expect_fail "--backend that fails is an error" 1 "not_built_anywhere" -- \
  "$qvl" run -m "$fx" --ids 1 --print-ids --plugins "$tmp/plugins.yaml" --backend not_built_anywhere
cat > "$tmp/none.yaml" <<YAML
backends:
  - name: not_built_anywhere
  - name: nor_this_one
YAML
expect_fail "no backend at all: the reasons" 1 \
  "no usable backend (tried: not_built_anywhere, nor_this_one); nor_this_one: libqvl-nor_this_one.so not found" -- \
  "$qvl" run -m "$fx" --ids 1 --print-ids --plugins "$tmp/none.yaml"

# The model directory is checked before anything else (a bad picture, a bad plugins file).
expect_fail "model directory not found" 1 "^qvl run: model directory not found: $tmp/nowhere$" -- \
  "$qvl" run -m "$tmp/nowhere" -p hi --image "$tmp/nope.png" --plugins "$tmp/nope.yaml"
expect_fail "model directory not found (chat)" 1 "^qvl chat: model directory not found: $tmp/nowhere$" -- \
  "$qvl" chat -m "$tmp/nowhere"
expect_fail "-m names a file" 1 "is not a directory" -- "$qvl" run -m "$fx/config.json" -p hi
expect_fail "chat -i" 2 "qvl chat is interactive already" -- "$qvl" chat -m "$fx" -i

# Each subcommand's help lists its own options only.
"$qvl" chat --help > "$tmp/chat_help"
"$qvl" run --help > "$tmp/run_help"
for o in -- "--ids" "--dump-logits" "--prompt" "--file" "--interactive"; do
  [ "$o" = "--" ] && continue
  grep -q -- "$o" "$tmp/run_help" && ! grep -q -- "$o" "$tmp/chat_help" \
    && ok "$o: in run --help only" || bad "$o in the wrong help"
done
for o in "--image" "--temp" "--ctx" "--system" "--quiet"; do
  grep -q -- "$o" "$tmp/chat_help" && ok "$o: in chat --help" || bad "chat --help lacks $o"
done

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
