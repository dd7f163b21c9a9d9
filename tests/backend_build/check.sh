#!/usr/bin/env bash
# What qvl_add_backend (cmake/QvlBackend.cmake) gives a backend author, checked on this build:
#  - the minimal backend (tests/minimal_backend/CMakeLists.txt, one qvl_add_backend call) is
#    built by it: its target carries the property only qvl_add_backend sets, its library lies in
#    build/backends/minimal/ and exports qvl_backend_entry alone;
#  - each qvl_add_backend folder registers its own conformance test (ctest -N in that folder);
#  - build/plugins.yaml lists the default backends, highest priority first, with their options,
#    and no test-only plugin; qvl reads it (qvl --version);
#  - the list's order and its refusals of bad input (yaml_order.cmake, cmake -P).
# Usage: check.sh CTEST CMAKE BUILD_DIR SOURCE_DIR QVL MINIMAL_SO MINIMAL_BACKEND_NAME
set -u
ctest=$1 cmake=$2 build=$3 src=$4 qvl=$5 minimal_so=$6 minimal_name=$7
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0; passed=0
ok()  { passed=$((passed + 1)); echo "ok   $1"; }
bad() { failures=$((failures + 1)); echo "FAIL $1"; }

[ "$minimal_name" = minimal ] && ok "qvl-minimal is built by qvl_add_backend" ||
  bad "qvl-minimal's QVL_BACKEND_NAME is '$minimal_name': not built by qvl_add_backend"
[ "$minimal_so" = "$build/backends/minimal/libqvl-minimal.so" ] && [ -f "$minimal_so" ] &&
  ok "libqvl-minimal.so in build/backends/minimal/" || bad "qvl-minimal's library is $minimal_so"
exports=$(nm -D --defined-only "$minimal_so" | awk '{print $3}' | tr '\n' ' ')
[ "$exports" = "qvl_backend_entry " ] && ok "libqvl-minimal.so exports qvl_backend_entry only" ||
  bad "libqvl-minimal.so exports: $exports"

# Folder and the one test registered there.
for pair in tests/minimal_backend:minimal tests/linear_backend:linear \
            backends/reference:reference backends/cpu_avx2:cpu_avx2; do
  dir=${pair%%:*} name=${pair##*:}
  "$ctest" --test-dir "$build/$dir" -N > "$tmp/n" 2>&1
  if grep -q "Test *#[0-9]*: conformance_$name\$" "$tmp/n" && grep -q "^Total Tests: 1\$" "$tmp/n"; then
    ok "$dir registers conformance_$name"
  else
    bad "$dir: ctest -N lists $(grep -o 'Test *#.*' "$tmp/n" | tr '\n' ' ')"
  fi
done

# The generated default list, exactly (the comments above it come from cmake/plugins.yaml.in).
sed -n '/^backends:/,$p' "$build/plugins.yaml" > "$tmp/list"
cat > "$tmp/want" <<'YAML'
backends:
  - name: cuda_sm61
    priority: 100
    options: { device: 0 }
  - name: cpu_avx2
    priority: 50
    options: { threads: 0 }        # 0 = all cores
  - name: reference
    priority: 0
YAML
diff "$tmp/want" "$tmp/list" > "$tmp/diff" && ok "build/plugins.yaml lists cuda_sm61, cpu_avx2, reference" ||
  bad "build/plugins.yaml's list differs: $(cat "$tmp/diff")"
grep -q "cmake/plugins.yaml.in" "$build/plugins.yaml" && ok "build/plugins.yaml keeps the template's comments" ||
  bad "build/plugins.yaml has no comment naming its template"
"$qvl" --version > "$tmp/v" 2>&1
if grep -q "^  cuda_sm61  *priority 100" "$tmp/v" && grep -q "^  cpu_avx2  *priority 50" "$tmp/v" &&
   grep -q "^  reference  *priority 0" "$tmp/v" && ! grep -Eq "^  (minimal|linear) " "$tmp/v"; then
  ok "qvl --version reads the generated file"
else
  bad "qvl --version: $(cat "$tmp/v")"
fi

# The list on its own: order, and a one-line error for each bad call.
run_case() { # CASE EXPECTED_RC PATTERN
  (cd "$tmp" && "$cmake" -DQVL_SOURCE_DIR="$src" -DCASE="$1" -P "$src/tests/backend_build/yaml_order.cmake") \
    > "$tmp/out" 2>&1
  local rc=$?
  if { [ "$2" -eq 0 ] && [ $rc -eq 0 ]; } || { [ "$2" -ne 0 ] && [ $rc -ne 0 ]; } &&
     grep -q -- "$3" "$tmp/out"; then ok "yaml_order $1"
  else bad "yaml_order $1 (exit $rc): $(head -c 600 "$tmp/out")"; fi
}
run_case order 0 "order ok"
run_case twice 1 "'same' is listed twice"
run_case bad_priority 1 "PRIORITY 'high' is not an integer"
run_case bad_options 1 "OPTIONS 'threads: 0' is not a one-line YAML flow map"
run_case bad_name 1 "backend name '../evil' may contain only letters, digits"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
