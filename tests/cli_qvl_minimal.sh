#!/usr/bin/env bash
# The same greedy ids from qvl on the default reference backend (fused graphs), on the
# reference with `fused_ops: false` (primitive graphs) and on the minimal backend written from
# docs/writing-a-backend.md; and the minimal backend's dtype table refusing q8_0 weights.
# usage: cli_qvl_minimal.sh QVL_BINARY SOURCE_DIR MINIMAL_PLUGINS_YAML UNFUSED_PLUGINS_YAML
set -u
qvl=$1; src=$2; minimal=$3; unfused=$4
fx=$src/tests/fixtures/tiny-tied
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail, write_tiny_config

run_ids() { "$qvl" run -m "$fx" --ids 1,2,3 --print-ids -n 8 --temp 0 -v "$@" 2>"$tmp/err"; }

want=$(run_ids --backend reference)
[ -n "$want" ] && ok "default reference: $want" || bad "default reference: no ids ($(cat "$tmp/err"))"

for variant in "reference $unfused" "minimal $minimal"; do
  set -- $variant
  got=$(run_ids --plugins "$2")
  # -v names the backend the model runs on: the ids must come from the one listed in the file.
  if ! grep -q "backend $1" "$tmp/err"; then bad "$1 ($2): not the backend that ran ($(cat "$tmp/err"))"
  elif [ "$got" = "$want" ]; then ok "$1 ($2): same ids"
  else bad "$1 ($2): got '$got', the default reference gave '$want'"; fi
done

# q8_0 is not in the minimal backend's dtype table: a clear refusal, not a crash.
"$qvl" run -m "$fx" --ids 1,2,3 --print-ids -n 2 --temp 0 --weights q8_0 --plugins "$minimal" \
  >/dev/null 2>"$tmp/err"; rc=$?
if [ "$rc" -ne 0 ] && grep -q "minimal: .*q8_0, which this backend does not read there" "$tmp/err"; then
  ok "minimal refuses q8_0 weights"
else bad "minimal with q8_0 weights: exit $rc ($(head -c 400 "$tmp/err"))"; fi

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
