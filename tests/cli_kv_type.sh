#!/usr/bin/env bash
# --kv-type and the plugins.yaml option kv_type: f32 and f16 give the same greedy ids on the
# fixture (on every backend named), -v states the cache's dtype and bytes, --kv-type wins over
# the option; q8_0 (34/32 bytes per value) gives the f32 ids on this fixture, alone and split;
# q8_0 where a head is not whole blocks or attention is not fused, or a bad name, is one line.
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
  # q8_0: 34 bytes per 32 values, 2 x 2 x 64 x 2 x 32 values = 512 blocks. The same 8 greedy ids
  # as f32 on this fixture is what was measured (docs/QUANT.md), not what q8_0 promises.
  got=$(run_ids --backend "$be" --kv-type q8_0)
  grep -q "KV cache on $be: q8_0, 64 tokens x 2 layers, 17408 bytes" "$tmp/err" \
    && ok "$be: q8_0 cache is 34/32 bytes per value" || bad "$be q8_0: $(grep -i 'kv' "$tmp/err")"
  [ -n "$want" ] && [ "$got" = "$want" ] && ok "$be: q8_0 ids = f32 ids ($got)" \
    || bad "$be: q8_0 gave '$got', f32 '$want' ($(tail -1 "$tmp/err"))"
  # a split between two backends (decoder layer 1 here, layer 0 on the reference)
  got=$(run_ids --backend "$be" --cpu-backend reference -ngl 1 --kv-type q8_0)
  [ -n "$want" ] && [ "$got" = "$want" ] && ok "$be + reference split, q8_0: same ids" \
    || bad "$be split q8_0 gave '$got', f32 '$want' ($(tail -1 "$tmp/err"))"
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
# tiny-untied's head_dim is 16: half a q8_0 block
fx_untied=$src/tests/fixtures/tiny-untied
expect_error_m() { # name pattern model args...
  local name=$1 pattern=$2 model=$3; shift 3
  "$qvl" run -m "$model" --ids 1,2,3 --print-ids -n 2 --temp 0 "$@" >/dev/null 2>"$tmp/err"; rc=$?
  if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "$pattern" "$tmp/err"; then ok "$name"
  else bad "$name: exit $rc ($(head -c 400 "$tmp/err"))"; fi
}
expect_error_m "--kv-type q8_0 with head_dim 16 is one line" \
  "kv-type q8_0: the model's head_dim 16 is not a multiple of 32" "$fx_untied" --backend reference --kv-type q8_0
printf 'backends:\n  - name: reference\n    options: { fused_ops: false }\n' >"$tmp/nofuse.yaml"
expect_error "--kv-type q8_0 on a backend without fused attention is one line" \
  "kv-type q8_0: backend reference does not run fused attention over a q8_0 cache" \
  --plugins "$tmp/nofuse.yaml" --kv-type q8_0
expect_error "--kv-type bf8 is a bad name" "kv-type 'bf8' is not one of f32, f16, q8_0" \
  --backend reference --kv-type bf8
printf 'backends:\n  - name: reference\n    options: { kv_type: f64 }\n' >"$tmp/bad.yaml"
expect_error "kv_type: f64 in plugins.yaml names the option" \
  "plugins.yaml option kv_type 'f64' is not one of" --plugins "$tmp/bad.yaml"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
