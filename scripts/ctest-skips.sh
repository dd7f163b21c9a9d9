#!/bin/sh
# ctest, then one line per test it skipped with the reason the test printed: ctest itself
# shows only "***Skipped" (tests print their reason, e.g. "skip: ... absent", but ctest shows
# a test's output for failures alone). Any ctest arguments pass through; exits with ctest's
# status.
# usage: scripts/ctest-skips.sh BUILD_DIR [ctest args...]
set -u
[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [ctest args...]" >&2; exit 2; }
build=$1; shift
report=$(mktemp) || exit 1
trap 'rm -f "$report"' EXIT
ctest --test-dir "$build" --output-junit "$report" "$@"
rc=$?
command -v python3 >/dev/null || { echo "ctest-skips: python3 is needed to read the report" >&2; exit "$rc"; }
python3 - "$report" <<'PY'
import sys
import xml.etree.ElementTree as ET
try:
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
except (ET.ParseError, OSError) as e:
    sys.exit("ctest-skips: no report to read (%s)" % e)
skipped = []
for case in cases:
    if case.find("skipped") is None:
        continue
    out = (case.findtext("system-out") or "").splitlines()
    # the line that says why: one naming a skip, else the last thing printed
    why = next((l for l in out if "skip" in l.lower()), out[-1] if out else "(printed nothing)")
    skipped.append("  %s: %s" % (case.get("name"), why.strip()))
if skipped:
    print("Skipped tests and why:")
    print("\n".join(skipped))
PY
exit "$rc"
