#!/bin/sh
# The shared data directory at test time: shared_data_link.sh points the link at
# $QVL_SHARED_DATA_DIR over the configured directory and says whether the data is there, and
# scripts/ctest-skips.sh lists skipped tests with the reason they printed (here on a
# two-test ctest project of its own, so the real build's link is never touched).
# usage: shared_data_test.sh SOURCE_DIR
set -u
src=$(cd "$1" && pwd)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failures=0
ok()  { echo "ok   $1"; }
bad() { failures=$((failures + 1)); echo "FAIL $1"; }

mkdir -p "$tmp/configured/qwen3-vl-2b-instruct" "$tmp/other"
echo '{}' >"$tmp/configured/qwen3-vl-2b-instruct/config.json"
link=$tmp/shared-data

env -u QVL_SHARED_DATA_DIR sh "$src/tests/shared_data_link.sh" "$tmp/configured" "$link" >"$tmp/out"
[ "$(readlink "$link")" = "$tmp/configured" ] && grep -q "^shared test data: $tmp/configured (configured)$" "$tmp/out" \
  && ok "without the variable: the configured directory" || bad "configured: $(readlink "$link"): $(cat "$tmp/out")"

QVL_SHARED_DATA_DIR=$tmp/other sh "$src/tests/shared_data_link.sh" "$tmp/configured" "$link" >"$tmp/out"
[ "$(readlink "$link")" = "$tmp/other" ] && [ ! -e "$link/qwen3-vl-2b-instruct" ] \
  && grep -qF "(from \$QVL_SHARED_DATA_DIR) is absent: the tests that need it skip" "$tmp/out" \
  && ok "\$QVL_SHARED_DATA_DIR wins, and its absence is said" || bad "override: $(readlink "$link"): $(cat "$tmp/out")"

env -u QVL_SHARED_DATA_DIR sh "$src/tests/shared_data_link.sh" "$tmp/configured" "$link" >/dev/null
(cd "$tmp" && QVL_SHARED_DATA_DIR=other sh "$src/tests/shared_data_link.sh" "$tmp/configured" "$link" >/dev/null)
[ "$(readlink "$link")" = "$tmp/other" ] && ok "a relative \$QVL_SHARED_DATA_DIR is made absolute" \
  || bad "relative: $(readlink "$link")"

if command -v ctest >/dev/null && command -v cmake >/dev/null && command -v python3 >/dev/null; then
  mkdir -p "$tmp/proj"
  cat >"$tmp/proj/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.16)
project(skips NONE)
enable_testing()
add_test(NAME needs_data COMMAND sh -c "echo 'skip: /x/qwen3-vl-2b-instruct is absent'; exit 77")
set_tests_properties(needs_data PROPERTIES SKIP_RETURN_CODE 77)
add_test(NAME runs COMMAND sh -c "echo fine")
CM
  cmake -S "$tmp/proj" -B "$tmp/proj/b" >/dev/null 2>&1
  sh "$src/scripts/ctest-skips.sh" "$tmp/proj/b" >"$tmp/skips" 2>&1; rc=$?
  [ "$rc" -eq 0 ] && grep -q "^  needs_data: skip: /x/qwen3-vl-2b-instruct is absent$" "$tmp/skips" \
    && ! grep -q "^  runs:" "$tmp/skips" && ok "ctest-skips.sh: the skipped test and its reason" \
    || bad "ctest-skips.sh (exit $rc): $(cat "$tmp/skips")"
else
  echo "(cmake, ctest or python3 missing: ctest-skips.sh not checked)"
fi

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all passed"
