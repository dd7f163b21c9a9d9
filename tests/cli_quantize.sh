#!/usr/bin/env bash
# qvl quantize: a saved q8_0 / q4_k_m / f16 directory runs with the same greedy ids and the
# very same logits as converting at load (--weights X on the source, same backend), is used in
# place (no conversion: no per-tensor conversion lines at -v, qvl-bench's weights_copied_bytes
# is 0), the command prints each converted tensor's RMS error, and hostile files and output
# directories are one-line errors.
# usage: cli_quantize.sh QVL QVL_BENCH SOURCE_DIR BACKEND...
set -u
qvl=$1; bench=$2; src=$3; shift 3
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail

# tiny-tied's matrices have rows of 64-160 elements, so q4_k_m falls back to q8_0 there; a model
# with 256-wide rows exercises q4_k and q6_k (same vocabulary and special ids as tiny-tied, so
# its tokenizer fits).
cat >"$tmp/wide.json" <<JSON
{"model_type": "qwen3_vl", "image_token_id": 508, "video_token_id": 509,
 "vision_start_token_id": 506, "vision_end_token_id": 507, "tie_word_embeddings": true,
 "text_config": {"vocab_size": 512, "hidden_size": 256, "intermediate_size": 512,
   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
   "hidden_act": "silu", "rms_norm_eps": 1e-06, "max_position_embeddings": 4096,
   "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [16, 8, 8],
     "mrope_interleaved": true},
   "attention_bias": false, "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": true},
 "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
   "hidden_act": "gelu_pytorch_tanh", "patch_size": 16, "temporal_patch_size": 2,
   "spatial_merge_size": 2, "in_channels": 3, "out_hidden_size": 256,
   "num_position_embeddings": 16, "deepstack_visual_indexes": [0]}}
JSON
"$qvl" mkmodel --config "$tmp/wide.json" --out "$tmp/wide" --std 0.5 \
  --tokenizer "$src/tests/fixtures/tiny-tied/tokenizer.json" 2>/dev/null \
  && ok "mkmodel: the 256-wide model" || bad "mkmodel failed"

ids=3,40,41,42,200
check_saved() { # SOURCE_DIR WEIGHTS BACKEND
  local m=$1 w=$2 be=$3 out=$tmp/$(basename "$1")-$2 name
  name="$(basename "$m") $w $be"
  if [ ! -d "$out" ]; then
    "$qvl" quantize -m "$m" --weights "$w" --out "$out" >"$out.txt" 2>"$out.err" \
      || { bad "$name: quantize failed: $(head -c 300 "$out.err")"; return; }
  fi
  local want got
  want=$("$qvl" run -m "$m" --weights "$w" --ids $ids --print-ids -n 8 --temp 0 --backend "$be" \
    -v --dump-logits "$tmp/want.f32" 2>"$tmp/want.err")
  got=$("$qvl" run -m "$out" --ids $ids --print-ids -n 8 --temp 0 --backend "$be" \
    -v --dump-logits "$tmp/got.f32" 2>"$tmp/got.err")
  if [ -z "$want" ] && grep -q "init failed\|not supported\|does not support" "$tmp/want.err"; then
    echo "skip $name: $(tail -1 "$tmp/want.err")"; return
  fi
  [ -n "$got" ] && [ "$got" = "$want" ] && ok "$name: saved = converted at load ($got)" \
    || bad "$name: saved gave '$got' ($(tail -1 "$tmp/got.err")), at load '$want'"
  cmp -s "$tmp/want.f32" "$tmp/got.f32" && ok "$name: identical prompt logits" \
    || bad "$name: prompt logits differ"
  # at load, quantising logs one line per tensor; the saved directory needs none
  if [ "$w" != f16 ]; then
    grep -q " -> $w\| -> q" "$tmp/want.err" && ok "$name: --weights converts at load (-v says so)" \
      || bad "$name: no conversion line at load"
  fi
  grep -q " -> " "$tmp/got.err" && bad "$name: the saved directory was converted at load" \
    || ok "$name: nothing converted at load"
  if "$bench" -m "$out" --backend "$be" -p 4 -n 2 -r 1 --json --probe-mib 16 >"$tmp/b.json" 2>"$tmp/b.err"; then
    grep -q '"weights_copied_bytes": 0,' "$tmp/b.json" && grep -q '"weights_in_place_bytes": [1-9]' "$tmp/b.json" \
      && ok "$name: qvl-bench: all weights in place" \
      || bad "$name: qvl-bench: $(grep -o '"weights_[a-z_]*": [0-9]*' "$tmp/b.json" | tr '\n' ' ')"
  else bad "$name: qvl-bench failed: $(tail -1 "$tmp/b.err")"; fi
}

fx=$src/tests/fixtures/tiny-tied
for be in "$@"; do
  for w in q8_0 q4_k_m f16; do
    check_saved "$fx" "$w" "$be"
    check_saved "$tmp/wide" "$w" "$be"
  done
done

# --- what quantize prints and writes -----------------------------------------------------------
out=$tmp/wide-q4_k_m
# 25 matrices: embedding + 2 layers x 7 in the text model; patch, position, qkv, proj, fc1, fc2
# in the vision block; the merger's and one deepstack merger's fc1 and fc2
n=$(grep -c "RMS error" "$out.txt")
[ "$n" -eq 25 ] && ok "one RMS line per converted matrix ($n)" || bad "RMS lines: $n ($(head -3 "$out.txt"))"
for d in q4_k q6_k q8_0; do
  grep -q "bf16 -> $d  *RMS error 0\.0[0-9]" "$out.txt" && ok "q4_k_m holds $d, with its RMS error" \
    || bad "no $d line: $(head -3 "$out.txt")"
done
# The summary names what the tensors became: its counts add up to the tensor count, and each
# k-quant's count is the number of tensors converted to it.
sum=$(grep "qvl quantize: wrote" "$out.err")
total=$(echo "$sum" | sed -n 's/.*(\([0-9]*\) tensors: .*/\1/p')
mix=$(echo "$sum" | sed -n 's/.*tensors: \([^;]*\);.*/\1/p')
added=$(echo "$mix" | tr ',' '\n' | awk '{s += $1} END {print s + 0}')
[ -n "$total" ] && [ "$added" = "$total" ] && ok "the summary's mix ($mix) adds up to $total tensors" \
  || bad "summary: $sum"
for d in q4_k q6_k q8_0; do
  said=$(echo "$mix" | tr ',' '\n' | awk -v d="$d" '$2 == d {print $1}')
  lines=$(grep -c "bf16 -> $d " "$out.txt")
  [ "${said:-0}" = "$lines" ] && ok "the summary counts $lines $d" || bad "summary says '${said:-0}' $d, $lines converted"
done
# qvl-bench names the mixture the directory holds, not one type.
if "$bench" -m "$out" --backend reference -p 2 -n 1 -r 1 --json --no-probe >"$tmp/mix.json" 2>/dev/null; then
  mixed=$(grep -o '"weights_mix": "[^"]*"' "$tmp/mix.json")
  case "$mixed" in *q4_k*q6_k*|*q6_k*q4_k*) ok "qvl-bench: $mixed" ;; *) bad "qvl-bench weights: $mixed" ;; esac
else bad "qvl-bench on $out failed"; fi
grep -q "embed_tokens.weight .*bf16 -> q6_k" "$out.txt" && ok "tied embedding in q6_k" || bad "embedding: $(grep embed "$out.txt")"
grep -q "bf16 -> f16  *RMS error 0 " "$tmp/tiny-tied-f16.txt" && ok "bf16 -> f16 is exact" \
  || bad "f16: $(head -2 "$tmp/tiny-tied-f16.txt")"
for f in config.json generation_config.json preprocessor_config.json tokenizer.json; do
  cmp -s "$fx/$f" "$tmp/tiny-tied-q8_0/$f" && ok "copied $f" || bad "$f not copied"
done
text=$("$qvl" run -m "$tmp/tiny-tied-q8_0" -p "Hello" -n 8 --temp 0 2>/dev/null)
[ -n "$text" ] && ok "the saved fixture answers a text prompt ('$text')" || bad "no text from the saved fixture"

# --- hostile files -------------------------------------------------------------------------------
# Same-length edits of the saved header keep every offset valid, so only the edit is wrong.
cp -r "$tmp/tiny-tied-q8_0" "$tmp/h1"
perl -0777 -pi -e 's/"q8_0\[512,64\]"/"q8_0[512,96]"/' "$tmp/h1/model.safetensors"
expect_fail "a quantised tensor whose bytes do not match its shape" 1 \
  "embed_tokens.weight': stored as U8 \[512,68\], but q8_0 \[512,96\] is U8 \[512,102\]" -- \
  "$qvl" run -m "$tmp/h1" --ids 1,2 --print-ids -n 1 --backend reference
cp -r "$tmp/tiny-tied-q8_0" "$tmp/h2"
perl -0777 -pi -e 's/"q8_0\[512,64\]"/"q9_9[512,64]"/' "$tmp/h2/model.safetensors"
expect_fail "an unknown qvl dtype in the metadata" 1 "unknown qvl dtype 'q9_9'" -- \
  "$qvl" run -m "$tmp/h2" --ids 1,2 --print-ids -n 1 --backend reference
expect_fail "quantize reads the same checks" 1 "unknown qvl dtype 'q9_9'" -- \
  "$qvl" quantize -m "$tmp/h2" --weights f16 --out "$tmp/h2-out"

# --- bad output directories and arguments --------------------------------------------------------
cp -r "$fx" "$tmp/srccopy"
expect_fail "--out is the source directory" 1 "is the source model directory" -- \
  "$qvl" quantize -m "$tmp/srccopy" --weights q8_0 --out "$tmp/srccopy/."
ln -s "$tmp/srccopy" "$tmp/link-to-src"
expect_fail "--out is a symlink to the source" 1 "is a symbolic link" -- \
  "$qvl" quantize -m "$tmp/srccopy" --weights q8_0 --out "$tmp/link-to-src"
cmp -s "$fx/model.safetensors" "$tmp/srccopy/model.safetensors" && ok "the source is untouched" \
  || bad "the source changed"
mkdir "$tmp/has-link"; ln -s /etc/passwd "$tmp/has-link/config.json"
expect_fail "--out holding a symlink" 1 "holds a symbolic link (config.json)" -- \
  "$qvl" quantize -m "$fx" --weights q8_0 --out "$tmp/has-link"
[ "$(readlink "$tmp/has-link/config.json")" = /etc/passwd ] && [ ! -e "$tmp/has-link/model.safetensors" ] \
  && ok "nothing written beside the link" || bad "has-link was written to"
touch "$tmp/a-file"
expect_fail "--out is a file" 1 "exists and is not a directory" -- \
  "$qvl" quantize -m "$fx" --weights q8_0 --out "$tmp/a-file"
expect_fail "unknown --weights" 1 "--weights 'q5_k' is not one of" -- \
  "$qvl" quantize -m "$fx" --weights q5_k --out "$tmp/q5"
expect_fail "q4_k on rows of 64" 1 "rows of 64 elements cannot be stored as q4_k" -- \
  "$qvl" quantize -m "$fx" --weights q4_k --out "$tmp/q4"
expect_fail "missing model directory" 1 "model directory not found: .*nowhere" -- \
  "$qvl" quantize -m "$tmp/nowhere" --weights q8_0 --out "$tmp/q8"
expect_fail "--out missing" 2 "are required" -- "$qvl" quantize -m "$fx" --weights q8_0
# an existing output directory of an earlier run is replaced only with --force
# (tests/cli_files.sh has the refusals and failures)
"$qvl" quantize -m "$fx" --weights f16 --out "$tmp/tiny-tied-q8_0" --force >/dev/null 2>&1 \
  && "$qvl" run -m "$tmp/tiny-tied-q8_0" --ids 1,2 --print-ids -n 2 --temp 0 --backend reference >/dev/null 2>&1 \
  && ok "re-quantising into an existing output directory with --force" || bad "rewrite of an existing --out"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
