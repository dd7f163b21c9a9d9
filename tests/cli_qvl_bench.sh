#!/usr/bin/env bash
# Smoke test of qvl-bench on the tiny fixture: it runs, prints one JSON object with every
# figure, and rejects bad flags with exit status 2.
# usage: cli_qvl_bench.sh QVL_BENCH_BINARY SOURCE_DIR
set -u
bench=$1; src=$2
fx=$src/tests/fixtures/tiny-tied
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0
ok()  { echo "ok   $1"; }
bad() { failures=$((failures + 1)); echo "FAIL $1"; }

"$bench" --help >"$tmp/help" && grep -q -- "--weights" "$tmp/help" && grep -q -- "--json" "$tmp/help" \
  && ok "--help lists the flags" || bad "--help"

for args in "--bogus" "-p 0" "--weights q4" "--image 448" "-r x" "--image 60000x60000" \
            "--image-max-tokens 0"; do
  # shellcheck disable=SC2086
  "$bench" -m "$fx" $args >"$tmp/out" 2>"$tmp/err"; rc=$?
  lines=$(grep -c . "$tmp/err")
  [ "$rc" -eq 2 ] && [ "$lines" -eq 1 ] && ok "bad flag '$args': exit 2, one line" \
    || bad "bad flag '$args': exit $rc, $lines lines: $(head -c 300 "$tmp/err")"
done
"$bench" >/dev/null 2>&1; [ $? -eq 2 ] && ok "no -m: exit 2" || bad "no -m"
"$bench" -m "$tmp/nowhere" -p 2 -n 1 -r 1 --no-probe >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] && grep -q "nowhere" "$tmp/err" && ok "missing model: exit 1 naming it" \
  || bad "missing model: exit $rc: $(head -c 300 "$tmp/err")"

if "$bench" -m "$fx" --backend reference -p 4 -n 2 -r 1 --json --probe-mib 64 --image 64x48 \
     >"$tmp/json" 2>"$tmp/err"; then
  ok "json run exits 0"
else
  bad "json run: $(head -c 300 "$tmp/err")"
fi
for key in '"prefill_tok_s": {"median": ' '"decode_tok_s": {"median": ' '"load": {"seconds": ' \
           '"peak_rss_bytes": {"after_load": ' '"first_token": ' '"profile": {"prefill": ' \
           '"read_probe_gb_s": ' '"peak_gflop_s": ' '"decode_gb_s": ' '"prefill_gflop_s": ' \
           '"backend": "reference"' '"n_prompt": 4' '"image": "64x48"' '"encode_ms": {"median": '; do
  grep -qF -- "$key" "$tmp/json" && ok "json has $key" || bad "json lacks $key"
done
# One object: balanced braces, starting with { and ending with }.
opens=$(tr -cd '{' <"$tmp/json" | wc -c); closes=$(tr -cd '}' <"$tmp/json" | wc -c)
[ "$opens" -eq "$closes" ] && [ "$(head -c 1 "$tmp/json")" = "{" ] \
  && [ "$(tr -d ' \n' <"$tmp/json" | tail -c 1)" = "}" ] && ok "json is one balanced object" \
  || bad "json is not one balanced object"
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["decode_tok_s"]["median"] > 0' \
    "$tmp/json" && ok "python3 parses the json" || bad "python3 cannot parse the json"
fi

# The picture is resized within qvl run's token bound: a 256x192 picture is 12 tokens on the
# fixture (16-pixel patches merged 2x2), and at most 4 under --image-max-tokens 4.
img_tokens() { "$bench" -m "$fx" --backend reference -p 2 -n 1 -r 1 --json --no-probe --no-profile \
  --image 256x192 "$@" 2>"$tmp/err" | grep -oE '"tokens": [0-9]+' | grep -oE '[0-9]+$'; }
t_default=$(img_tokens); t_capped=$(img_tokens --image-max-tokens 4)
[ "${t_default:-0}" -eq 12 ] && [ "${t_capped:-99}" -le 4 ] && [ "${t_capped:-0}" -ge 1 ] \
  && ok "--image-max-tokens bounds the picture ($t_default -> $t_capped tokens)" \
  || bad "--image-max-tokens: '$t_default' -> '$t_capped' tokens: $(head -c 300 "$tmp/err")"

# Text output with a conversion at load and threads passed through.
if "$bench" -m "$fx" --backend reference -p 3 -n 1 -r 2 --weights f32 -t 1 --probe-mib 16 \
     >"$tmp/text" 2>"$tmp/err" && grep -q "weights f32 (from --weights)" "$tmp/text" \
     && grep -q "decode: achieved" "$tmp/text" && grep -q "prefill: .* GFLOP/s / FMA peak" "$tmp/text"; then
  ok "text run with --weights f32 -t 1"
else
  bad "text run: $(head -c 300 "$tmp/err") $(head -c 300 "$tmp/text")"
fi

# q8_0 weights: cpu_avx2's GEMM (prefill of 64 rows, the vision tower) dequantises them to f32
# panels and multiplies with FMAs, so both are measured against the FMA probe, not the int8
# one (against which a q8_0 vision tower read half its share), never over 100% of it.
if "$bench" -m "$fx" --backend cpu_avx2 -p 64 -n 1 -r 1 --weights q8_0 --probe-mib 16 --image 64x48 \
     >"$tmp/q8" 2>"$tmp/err"; then
  grep -q "prefill: .* GFLOP/s / FMA peak [0-9.]* GFLOP/s (" "$tmp/q8" \
    && grep -q "vision: .* GFLOP/s / FMA peak [0-9.]* GFLOP/s (" "$tmp/q8" \
    && ok "q8_0: prefill and vision against the FMA probe" || bad "q8_0 probe lines: $(grep -E 'prefill:|vision:' "$tmp/q8")"
  over=$(cat "$tmp/text" "$tmp/q8" | grep -E "^  (prefill|vision|decode):" | grep -oE "\(([0-9.]+)%" | tr -d '(%' \
         | awk '$1 > 100' | head -1)
  [ -z "$over" ] && ok "no fraction of a probe over 100%" || bad "a fraction of $over%"
else
  grep -q "cpu_avx2" "$tmp/err" && echo "skip: cpu_avx2 cannot run here: $(head -1 "$tmp/err")" \
    || bad "q8_0 run: $(head -c 300 "$tmp/err")"
fi

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all passed"
