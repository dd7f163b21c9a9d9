#!/usr/bin/env bash
# Ctrl-C in qvl run: the first SIGINT ends the answer before the next token, with its newline
# and the timings summary, and qvl exits with 130 (llama.cpp's llama-cli status; 128 + SIGINT);
# a second SIGINT exits at once. Every wait here is for an event (output appearing, a signal
# delivered, the process ending), never for a time.
# usage: cli_interrupt.sh QVL_BINARY SOURCE_DIR SHARED_DATA_DIR
set -u
qvl=$1; src=$2
fx=$src/tests/fixtures/tiny-tied
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad

# An answer far longer than the test: 65536 positions of the reference backend.
"$qvl" run -m "$fx" -p hello -n -1 --ignore-eos -c 65536 --temp 0 --backend reference -v \
  >"$tmp/out" 2>"$tmp/err" &
pid=$!
until [ -s "$tmp/out" ] || ! kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
kill -INT "$pid" 2>/dev/null && ok "SIGINT sent while the answer streams" || bad "qvl ended before any SIGINT"
wait "$pid"; rc=$?
[ "$rc" -eq 130 ] && ok "exit status 130" || bad "exit status $rc: $(tail -3 "$tmp/err")"
[ "$(tail -c 1 "$tmp/out" | od -An -c | tr -d ' ')" = '\n' ] && ok "the answer ends with a newline" \
  || bad "no newline at the end: $(tail -c 20 "$tmp/out" | od -c)"
grep -q "^timings: decode .* tokens generated" "$tmp/err" && ok "the timings summary follows" \
  || bad "no timings: $(cat "$tmp/err")"
n=$(grep -o "[0-9]* tokens generated" "$tmp/err" | cut -d' ' -f1)
[ -n "$n" ] && [ "$n" -lt 65000 ] && ok "stopped early ($n tokens)" || bad "did not stop early: $n"
grep -qi "error\|qvl run:" "$tmp/err" && bad "an error line: $(grep -i "error\|qvl run:" "$tmp/err")" \
  || ok "no error line"

# The second press: qvl blocked reading its prompt from a pipe that stays open (the handler
# is in place by then and restarts the read), so the first SIGINT can only set the flag.
[ -r /proc/self/syscall ] || { echo "$passed passed, $failures failed (second press: no /proc/PID/syscall)"; [ "$failures" -eq 0 ]; exit; }
mkfifo "$tmp/in"
"$qvl" run -m "$fx" -p - -n 4 --backend reference <"$tmp/in" >"$tmp/out2" 2>"$tmp/err2" &
pid=$!
exec 7>"$tmp/in" # the writer: qvl's read blocks until it closes
in_read() { [ "$(cut -d' ' -f1 "/proc/$pid/syscall" 2>/dev/null)" = 0 ]; } # 0: read(2) on x86-64 and arm64's 63
[ "$(uname -m)" = aarch64 ] && in_read() { [ "$(cut -d' ' -f1 "/proc/$pid/syscall" 2>/dev/null)" = 63 ]; }
until in_read || ! kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
kill -INT "$pid"
delivered() { ! grep -Eq "^(SigPnd|ShdPnd):\s*0*[1-9a-f]" "/proc/$pid/status" 2>/dev/null; }
until delivered && in_read || ! kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
kill -0 "$pid" 2>/dev/null && ok "a first SIGINT while reading the prompt only marks the run" \
  || bad "the first SIGINT ended qvl: $(cat "$tmp/err2")"
kill -INT "$pid"
wait "$pid"; rc=$?
exec 7>&-
[ "$rc" -eq 130 ] && [ ! -s "$tmp/out2" ] && ok "the second SIGINT exits at once with 130" \
  || bad "second SIGINT: exit $rc, out '$(cat "$tmp/out2")' err '$(cat "$tmp/err2")'"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
