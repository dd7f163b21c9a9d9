#!/usr/bin/env bash
# --kv-type and the plugins.yaml option kv_type: f32 and f16 give the same greedy ids on the
# fixture (on every backend named), -v states the cache's dtype and bytes, --kv-type wins over
# the option, and q8_0 or a bad name is a one-line error.
# usage: cli_kv_type.sh QVL_BINARY SOURCE_DIR BACKEND...
set -u
qvl=$1; src=$2; shift 2
fx=$src/tests/fixtures/tiny-tied
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail, write_tiny_config

run_ids() { "$qvl" run -m "$fx" --ids 1,2,3 --print-ids -n 8 --temp 0 --ctx 64 -v "$@" 2>"$tmp/err"; }

for be in "$@"; do
  want=$(run_ids --backend "$be" --kv-type f32)
  if [ -z "$want" ] && grep -q "init failed" "$tmp/err"; then echo "skip $be: $(cat "$tmp/err")"; continue; fi
  # 2 layers x (K, V) x 64 rows x 2 kv heads x 32 head dim x 4 bytes (tiny-tied's config.json)
  grep -q "KV cache on $be: f32, 64 tokens x 2 layers, 65536 bytes" "$tmp/err" \
    && ok "$be: -v states the f32 cache" || bad "$be f32: $(grep -i 'kv' "$tmp/err")"
  got=$(run_ids --backend "$be")
  grep -q "KV cache on $be: f16, 64 tokens x 2 layers, 32768 bytes" "$tmp/err" \
    && ok "$be: f16 is the default, half the bytes" || bad "$be default: $(grep -i 'kv' "$tmp/err")"
  [ -n "$want" ] && [ "$got" = "$want" ] && ok "$be: f16 ids = f32 ids ($got)" \
    || bad "$be: f16 gave '$got', f32 '$want' ($(tail -1 "$tmp/err"))"
done

printf 'backends:\n  - name: reference\n    options: { kv_type: f32 }\n' >"$tmp/f32.yaml"
run_ids --plugins "$tmp/f32.yaml" >/dev/null
grep -q "KV cache on reference: f32" "$tmp/err" && ok "plugins.yaml kv_type: f32" || bad "kv_type option: $(cat "$tmp/err")"
run_ids --plugins "$tmp/f32.yaml" --kv-type f16 >/dev/null
grep -q "KV cache on reference: f16" "$tmp/err" && ok "--kv-type wins over kv_type" || bad "override: $(cat "$tmp/err")"

expect_error() { # name pattern args...
  local name=$1 pattern=$2; shift 2
  "$qvl" run -m "$fx" --ids 1,2,3 --print-ids -n 2 --temp 0 "$@" >/dev/null 2>"$tmp/err"; rc=$?
  if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "$pattern" "$tmp/err"; then ok "$name"
  else bad "$name: exit $rc ($(head -c 400 "$tmp/err"))"; fi
}
expect_error "--kv-type q8_0 is refused as not supported yet" \
  "kv-type q8_0: a q8_0 KV cache is not supported yet" --backend reference --kv-type q8_0
expect_error "--kv-type bf8 is a bad name" "kv-type 'bf8' is not one of f32, f16, q8_0" \
  --backend reference --kv-type bf8
printf 'backends:\n  - name: reference\n    options: { kv_type: f64 }\n' >"$tmp/bad.yaml"
expect_error "kv_type: f64 in plugins.yaml names the option" \
  "plugins.yaml option kv_type 'f64' is not one of" --plugins "$tmp/bad.yaml"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
