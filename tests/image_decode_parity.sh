#!/usr/bin/env bash
# usage: image_decode_parity.sh QVL_BINARY FIXTURE_DIR
# For each "picture width height" line of FIXTURE_DIR/expected.txt: `qvl decode` prints
# "width height" and writes exactly the bytes of picture.rgb (Pillow's). Then the errors: a
# missing picture, a text file and a cut JPEG give one line on stderr and status 1, a bad
# command line status 2, and no output file is left behind.
set -u
qvl=$1; dir=$2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0; passed=0
ok()  { passed=$((passed + 1)); }
bad() { failures=$((failures + 1)); echo "FAIL $1"; }

count=0
while read -r name w h; do
  case "$name" in ''|'#'*) continue ;; esac
  count=$((count + 1))
  rm -f "$tmp/out.rgb"
  got=$("$qvl" decode "$dir/$name" --out "$tmp/out.rgb" 2>"$tmp/err")
  rc=$?
  if [ $rc -ne 0 ]; then bad "$name: status $rc: $(cat "$tmp/err")"; continue; fi
  [ "$got" = "$w $h" ] && ok || bad "$name: printed '$got', Pillow's size is '$w $h'"
  if cmp -s "$tmp/out.rgb" "$dir/$name.rgb"; then
    ok
  else
    bad "$name: RGB bytes differ from Pillow's ($(cmp "$tmp/out.rgb" "$dir/$name.rgb" 2>&1 | head -1))"
  fi
done <"$dir/expected.txt"
[ $count -ge 50 ] && ok || bad "only $count pictures listed in expected.txt"

one_line_error() { # what, expected status, then the command
  local what=$1 want=$2; shift 2
  "$@" >"$tmp/so" 2>"$tmp/se"; local rc=$?
  if [ $rc -ne "$want" ]; then bad "$what: status $rc, expected $want"; return; fi
  [ "$(wc -l <"$tmp/se")" -eq 1 ] && ok || bad "$what: stderr is not one line: $(cat "$tmp/se")"
  [ ! -s "$tmp/so" ] && ok || bad "$what: printed '$(cat "$tmp/so")'"
}
one_line_error "missing picture" 1 "$qvl" decode "$tmp/none.png" --out "$tmp/x.rgb"
grep -q "none.png" "$tmp/se" && ok || bad "missing picture: error does not name it"
echo "hello" >"$tmp/t.txt"
one_line_error "text file" 1 "$qvl" decode "$tmp/t.txt" --out "$tmp/x.rgb"
head -c 600 "$dir/jpeg_420.jpg" >"$tmp/cut.jpg"
one_line_error "cut JPEG" 1 "$qvl" decode "$tmp/cut.jpg" --out "$tmp/x.rgb"
grep -q "truncated JPEG" "$tmp/se" && ok || bad "cut JPEG: $(cat "$tmp/se")"
[ ! -e "$tmp/x.rgb" ] && ok || bad "a failed decode left $tmp/x.rgb behind"
"$qvl" decode "$dir/jpeg_420.jpg" >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "no --out: not status 2"
"$qvl" decode --out "$tmp/x.rgb" >/dev/null 2>&1; [ $? -eq 2 ] && ok || bad "no picture: not status 2"

echo "image_decode_parity: $passed passed, $failures failed ($count pictures)"
[ $failures -eq 0 ]
