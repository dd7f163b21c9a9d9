#!/usr/bin/env bash
# Progress and timings: on a terminal (run here under a pseudo-terminal) qvl shows a progress
# line for loading, the pictures' encoding (vision tokens done / total) and the prefill
# (tokens done / total, reaching the total, and how many the running step adds), erased
# before the answer, then the timings summary; --quiet silences both; with stderr not a
# terminal nothing of it is printed (unless -v asks for the timings).
# usage: cli_progress.sh QVL_BINARY SOURCE_DIR SHARED_DATA_DIR
set -u
qvl=$1; src=$2
fx=$src/tests/fixtures/tiny-untied
command -v python3 >/dev/null || { echo "skip: python3 (its pty module) is needed"; exit 77; }
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail, write_tiny_config

# in_pty OUT CMD...: run CMD with stdin, stdout and stderr on a pseudo-terminal; its bytes go to
# OUT; the exit status is CMD's.
in_pty() {
  local out=$1; shift
  python3 - "$out" "$@" <<'PY'
import os, pty, sys
out = sys.argv[1]
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
data = b""
while True:
    try:
        chunk = os.read(fd, 65536)
    except OSError:
        break
    if not chunk:
        break
    data += chunk
_, status = os.waitpid(pid, 0)
open(out, "wb").write(data)
sys.exit(os.waitstatus_to_exitcode(status))
PY
}

img=$(tr -d ' \n' < "$fx/fixture_images.json" | sed -E 's/.*"name":"img_two",//')
prompt=$(echo "$img" | sed -E 's/.*"prompt_ids":\[([0-9,]*)\].*/\1/')
greedy=$(echo "$img" | sed -E 's/.*"greedy_ids":\[([0-9,]*)\].*/\1/' | tr ',' ' ')
n_prompt=$(echo "$prompt" | tr ',' '\n' | grep -c .)
head=$(( (n_prompt - 1) / 4 * 4 )) # -b 4: full batches, then the last one samples the answer
args=(run -m "$fx" --ids "$prompt" --image "$fx/tall.png" --image "$fx/small.png" --print-ids -n 10
      --temp 0 --backend reference -b 4)

in_pty "$tmp/tty" "$qvl" "${args[@]}"; rc=$?
[ "$rc" -eq 0 ] && ok "runs under a terminal" || bad "exit $rc: $(cat -v "$tmp/tty")"
for want in "loading $fx ..." "vision 0/10 tokens: encoding image 1/2 (6 tokens) ..." "vision 6/10 tokens: encoding image 2/2 (4 tokens) ..." "vision 10/10 tokens ..." \
            "prefill 0/$n_prompt tokens, 4 in this step ..." "prefill 4/$n_prompt tokens, 4 in this step ..." "prefill $head/$n_prompt tokens, $((n_prompt - head)) in this step ..." "prefill $n_prompt/$n_prompt tokens ..."; do
  grep -qF -- "$want" "$tmp/tty" && ok "progress: '$want'" || bad "no progress '$want': $(cat -v "$tmp/tty")"
done
# Each progress line is erased (CR, erase-line) before anything else is printed: the answer
# line itself carries no progress text.
tr '\r' '\n' < "$tmp/tty" | sed 's/\x1b\[K//g' | grep -qx "$greedy" && ok "the answer stands on its own line" \
  || bad "answer line: $(cat -v "$tmp/tty")"
grep -q $'\033\\[K' "$tmp/tty" && ok "progress lines are erased" || bad "no erase sequence"
for want in "timings: load " "timings: vision " "image 1: " "image 2: " "timings: prefill " \
            ", $n_prompt tokens (" "timings: first token " "timings: decode " "10 tokens generated" \
            "timings: memory " "peak resident "; do
  grep -qF -- "$want" "$tmp/tty" && ok "summary: '$want'" || bad "summary lacks '$want': $(cat -v "$tmp/tty")"
done

in_pty "$tmp/quiet" "$qvl" "${args[@]}" --quiet
grep -q "timings\|loading\|prefill\|encoding\|^image" "$tmp/quiet" && bad "--quiet: $(cat -v "$tmp/quiet")" \
  || ok "--quiet on a terminal: no progress, no timings"
tr -d '\r' < "$tmp/quiet" | grep -qx "$greedy" && ok "--quiet keeps the answer" || bad "--quiet answer: $(cat -v "$tmp/quiet")"

# Not a terminal: no progress, no timings; -v adds the timings only.
"$qvl" "${args[@]}" >"$tmp/out" 2>"$tmp/err"
[ "$(cat "$tmp/out")" = "$greedy" ] && ! grep -q $'\r\|timings\|loading\|prefill' "$tmp/err" \
  && ok "no terminal: no progress or timings" || bad "no terminal: $(cat -v "$tmp/err")"
"$qvl" "${args[@]}" -v >"$tmp/out" 2>"$tmp/err"
grep -q "^timings: decode " "$tmp/err" && ! grep -q $'\r' "$tmp/err" \
  && ok "no terminal, -v: timings without progress" || bad "-v: $(cat -v "$tmp/err")"
! grep -q "^timings: mask " "$tmp/err" && ok "-v without a grammar: no mask line" || bad "mask line: $(cat "$tmp/err")"
# With a grammar, -v says what its masks cost: one set per constrained token (the end included).
"$qvl" "${args[@]}" --json -v >"$tmp/out" 2>"$tmp/err"
gen=$(sed -n 's/^timings: decode .* \([0-9]*\) tokens generated.*/\1/p' "$tmp/err")
sets=$(sed -n 's/^timings: mask .* \([0-9]*\) sets (.*ms each), .* waited for (.*% of decode)$/\1/p' "$tmp/err")
[ -n "$gen" ] && [ -n "$sets" ] && [ "$sets" -ge "$gen" ] && [ "$sets" -le $((gen + 1)) ] \
  && ok "--json -v: $sets mask sets for $gen tokens" || bad "--json -v mask line: $(cat "$tmp/err")"

# --weights converts at load: the progress line counts the tensors, and -v (or a conversion
# slower than 3 s) ends with the tip that qvl quantize does it once.
in_pty "$tmp/conv" "$qvl" "${args[@]}" --weights f16 -v
n_conv=$(tr '\r' '\n' < "$tmp/conv" | sed 's/\x1b\[K//g' | sed -n 's/^tip: qvl quantize -m .* --weights f16 --out DIR2 saves this step (\([0-9]*\) tensors converted in .*/\1/p')
[ -n "$n_conv" ] && [ "$n_conv" -gt 0 ] && ok "-v: the qvl quantize tip ($n_conv tensors)" \
  || bad "no tip: $(cat -v "$tmp/conv")"
grep -qF "converting weights to f16: 1/$n_conv tensors ..." "$tmp/conv" &&
  grep -qF "converting weights to f16: $n_conv/$n_conv tensors ..." "$tmp/conv" \
  && ok "progress: converting weights to f16: done/total tensors" || bad "no conversion progress: $(cat -v "$tmp/conv")"
"$qvl" "${args[@]}" --weights f16 >"$tmp/out" 2>"$tmp/err"
! grep -q "^tip:" "$tmp/err" && ok "a quick conversion without -v: no tip" || bad "tip without -v: $(cat "$tmp/err")"
"$qvl" "${args[@]}" --weights f16 -v -q >"$tmp/out" 2>"$tmp/err"
grep -q "^tip:" "$tmp/err" && bad "-q printed the tip" || ok "-q: no tip"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
