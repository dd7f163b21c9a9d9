#!/usr/bin/env bash
# qvl quantize --out FILE.gguf [--mmproj-out MM.gguf]: llama.cpp's two-file layout.
#  - from tests/fixtures/tiny-tied at f16 the files equal the converter's (tests/fixtures/gguf)
#    key by key and byte for byte but general.name; at q8_0 and q4_k_m they have its keys, value
#    types, tensor names and shapes (gguf-py reads them: tests/gguf_write_check.py);
#  - from GGUF sources (the converter's files) the same types give the same tensors and keys;
#  - a 256-wide model at f16, q8_0 and q4_k_m (q4_k and q6_k matrices): qvl runs what it wrote
#    with the very same prompt logits as the directory `qvl quantize --out DIR` writes at those
#    weights (with a picture too at f16, where the patch kernels' type is the same), and
#    writing the GGUF again from itself gives the same bytes;
#  - the chat template travels; hostile outputs are one-line errors that leave no file.
# usage: cli_quantize_gguf.sh QVL SOURCE_DIR
set -u
qvl=$1; src=$(cd "$2" && pwd)
fx=$src/tests/fixtures
gg=$fx/gguf
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail
check=$src/tests/gguf_write_check.py
px=(--min-pixels 4096 --max-pixels 16384)

# pycheck NAME ARGS...: gguf_write_check.py; exit 77 (no gguf-py) is a skip.
pycheck() {
  local name=$1; shift
  python3 "$check" "$@" >"$tmp/py.out" 2>&1; local rc=$?
  if [ $rc -eq 77 ]; then echo "skip $name: $(tail -1 "$tmp/py.out")"
  elif [ $rc -eq 0 ]; then ok "$name"
  else bad "$name: $(head -c 600 "$tmp/py.out")"; fi
}

quant() { "$qvl" quantize "$@" >"$tmp/q.out" 2>"$tmp/q.err"; }

# The converter's layout, from the directory the fixtures were converted from.
for m in tied untied; do
  quant -m "$fx/tiny-$m" --weights f16 --out "$tmp/$m-f16.gguf" --mmproj-out "$tmp/$m-mm.gguf" \
    || bad "tiny-$m f16: $(cat "$tmp/q.err")"
  pycheck "tiny-$m f16 = converter (text)" exact "$tmp/$m-f16.gguf" "$gg/tiny-$m-f16.gguf" \
    --skip general.name
  pycheck "tiny-$m f16 = converter (mmproj)" exact "$tmp/$m-mm.gguf" "$gg/mmproj-tiny-$m-f16.gguf" \
    --skip general.name
done
grep -q "^blk.0.ffn_up.weight .* bf16 -> f16 " "$tmp/q.out" && ok "one line per converted tensor" \
  || bad "no per-tensor line: $(head -3 "$tmp/q.out")"
quant -m "$fx/tiny-untied" --weights q8_0 --out "$tmp/untied-q8.gguf" || bad "q8_0: $(cat "$tmp/q.err")"
pycheck "tiny-untied q8_0: the converter's keys, names, shapes" structure "$tmp/untied-q8.gguf" \
  "$gg/tiny-untied-q8_0.gguf" --skip general.name --type output.weight=Q8_0 \
  --type blk.2.ffn_down.weight=Q8_0 --type blk.2.ffn_norm.weight=F32
quant -m "$fx/tiny-tied" --weights q4_k_m --out "$tmp/tied-q4.gguf" --mmproj-out "$tmp/tied-q4-mm.gguf" \
  || bad "q4_k_m: $(cat "$tmp/q.err")"
pycheck "tiny-tied q4_k_m (text)" structure "$tmp/tied-q4.gguf" "$gg/tiny-tied-f16.gguf" \
  --skip general.name --key general.file_type=15 --type blk.0.attn_q.weight=Q8_0
pycheck "tiny-tied q4_k_m (mmproj)" structure "$tmp/tied-q4-mm.gguf" "$gg/mmproj-tiny-tied-f16.gguf" \
  --skip general.name --type v.blk.0.attn_qkv.weight=Q8_0 --type v.patch_embd.weight=F16 \
  --type v.patch_embd.weight.1=F16 --type v.position_embd.weight=F32

# From the converter's own GGUF files: the same type copies every tensor and key as it is.
quant -m "$gg/tiny-tied-f16.gguf" --mmproj "$gg/mmproj-tiny-tied-f16.gguf" --weights f16 \
  --out "$tmp/re-f16.gguf" --mmproj-out "$tmp/re-mm.gguf" || bad "GGUF source: $(cat "$tmp/q.err")"
pycheck "GGUF source f16 = converter (text)" exact "$tmp/re-f16.gguf" "$gg/tiny-tied-f16.gguf"
pycheck "GGUF source f16 = converter (mmproj)" exact "$tmp/re-mm.gguf" "$gg/mmproj-tiny-tied-f16.gguf"
quant -m "$gg/tiny-untied-q8_0.gguf" --weights q8_0 --out "$tmp/re-q8.gguf" \
  || bad "GGUF q8_0 source: $(cat "$tmp/q.err")"
pycheck "GGUF source q8_0 = converter" exact "$tmp/re-q8.gguf" "$gg/tiny-untied-q8_0.gguf"

# A model with 256-wide rows (q4_k, q6_k), with a chat template.
cat >"$tmp/wide.json" <<JSON
{"model_type": "qwen3_vl", "image_token_id": 508, "video_token_id": 509,
 "vision_start_token_id": 506, "vision_end_token_id": 507, "tie_word_embeddings": true,
 "text_config": {"vocab_size": 512, "hidden_size": 256, "intermediate_size": 512,
   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
   "hidden_act": "silu", "rms_norm_eps": 1e-06, "max_position_embeddings": 4096,
   "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [16, 8, 8],
     "mrope_interleaved": true},
   "attention_bias": false, "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": true},
 "vision_config": {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 2,
   "hidden_act": "gelu_pytorch_tanh", "patch_size": 16, "temporal_patch_size": 2,
   "spatial_merge_size": 2, "in_channels": 3, "out_hidden_size": 256,
   "num_position_embeddings": 16, "deepstack_visual_indexes": [1]}}
JSON
"$qvl" mkmodel --config "$tmp/wide.json" --out "$tmp/wide" --std 0.5 \
  --tokenizer "$fx/tiny-tied/tokenizer.json" >/dev/null 2>&1 && ok "mkmodel: the 256-wide model" \
  || bad "mkmodel failed"
printf '{%% for m in messages %%}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%% endfor %%}' \
  >"$tmp/wide/chat_template.jinja"
ids=3,40,41,42,200
logits() { # OUT.f32 MODEL_ARGS... (prompt ids, reference backend)
  local out=$1; shift
  "$qvl" run "$@" --backend reference -n 1 --temp 0 --dump-logits "$out" >/dev/null 2>"$tmp/run.err"
}
for w in f16 q8_0 q4_k_m; do
  quant -m "$tmp/wide" --weights "$w" --out "$tmp/w-$w.gguf" --mmproj-out "$tmp/w-$w-mm.gguf" \
    || { bad "wide $w: $(cat "$tmp/q.err")"; continue; }
  quant -m "$tmp/wide" --weights "$w" --out "$tmp/w-$w" || bad "wide $w directory: $(cat "$tmp/q.err")"
  logits "$tmp/dir.f32" -m "$tmp/w-$w" --ids $ids
  logits "$tmp/gguf.f32" -m "$tmp/w-$w.gguf" --mmproj "$tmp/w-$w-mm.gguf" --ids $ids \
    || bad "wide $w: qvl run on the GGUF: $(cat "$tmp/run.err")"
  [ -s "$tmp/dir.f32" ] && cmp -s "$tmp/dir.f32" "$tmp/gguf.f32" \
    && ok "wide $w: GGUF logits = the directory's at the same weights" \
    || bad "wide $w: GGUF prompt logits differ from the directory's"
  if [ "$w" = f16 ]; then
    logits "$tmp/dir.f32" -m "$tmp/w-$w" "${px[@]}" --image "$fx/tiny-tied/photo.jpg" -p Describe
    logits "$tmp/gguf.f32" -m "$tmp/w-$w.gguf" --mmproj "$tmp/w-$w-mm.gguf" "${px[@]}" \
      --image "$fx/tiny-tied/photo.jpg" -p Describe
    [ -s "$tmp/dir.f32" ] && cmp -s "$tmp/dir.f32" "$tmp/gguf.f32" \
      && ok "wide f16: with a picture, GGUF logits = the directory's" \
      || bad "wide f16: with a picture, the logits differ ($(tail -1 "$tmp/run.err"))"
  fi
  quant -m "$tmp/w-$w.gguf" --mmproj "$tmp/w-$w-mm.gguf" --weights "$w" --out "$tmp/again.gguf" \
    --mmproj-out "$tmp/again-mm.gguf" --force || bad "wide $w again: $(cat "$tmp/q.err")"
  cmp -s "$tmp/again.gguf" "$tmp/w-$w.gguf" && cmp -s "$tmp/again-mm.gguf" "$tmp/w-$w-mm.gguf" \
    && ok "wide $w: written again from itself, the same bytes" \
    || bad "wide $w: the GGUF written from the GGUF differs"
done
pycheck "wide q4_k_m: the recipe's types" structure "$tmp/w-q4_k_m.gguf" "$tmp/w-f16.gguf" \
  --type token_embd.weight=Q6_K --type blk.0.attn_q.weight=Q4_K --type blk.0.attn_v.weight=Q4_K --type blk.1.attn_v.weight=Q6_K \
  --type blk.1.ffn_down.weight=Q6_K --type blk.0.ffn_up.weight=Q4_K --type output_norm.weight=F32 \
  --key-file "tokenizer.chat_template=$tmp/wide/chat_template.jinja"
pycheck "wide q4_k_m mmproj: vision in q8_0, the deepstack layer" structure "$tmp/w-q4_k_m-mm.gguf" \
  "$tmp/w-f16-mm.gguf" --type v.blk.1.attn_qkv.weight=Q8_0 --type v.deepstack.1.fc1.weight=Q8_0 \
  --type v.patch_embd.weight=F16 --key "clip.vision.is_deepstack_layers=[False, True]"

# tokenizer_config.json: its special tokens and flags, and its chat template before the .jinja.
mkdir "$tmp/tc"
for f in "$tmp/wide"/*; do ln -s "$f" "$tmp/tc/"; done
cat >"$tmp/tc/tokenizer_config.json" <<'JSON'
{"eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"}, "bos_token": null,
 "add_bos_token": false, "chat_template": "{{ messages[0].content }}"}
JSON
quant -m "$tmp/tc" --weights f16 --out "$tmp/tc.gguf" || bad "tokenizer_config: $(cat "$tmp/q.err")"
pycheck "tokenizer_config.json's specials and template" options "$tmp/tc.gguf" - --key tokenizer.ggml.eos_token_id=1 --key tokenizer.ggml.padding_token_id=0 \
  --key tokenizer.ggml.bos_token_id=0 --key tokenizer.ggml.add_bos_token=False \
  --key "tokenizer.chat_template={{ messages[0].content }}"

# Hostile and edge cases: one line, nothing written.
echo keep >"$tmp/exists.gguf"
expect_fail "--out exists" 1 "exists.gguf already exists: refusing to replace it without --force" \
  -- "$qvl" quantize -m "$fx/tiny-tied" --weights f16 --out "$tmp/exists.gguf"
[ "$(cat "$tmp/exists.gguf")" = keep ] && ok "the existing file is untouched" || bad "--out was replaced"
expect_fail "--mmproj-out exists" 1 "already exists" -- "$qvl" quantize -m "$fx/tiny-tied" \
  --weights f16 --out "$tmp/new.gguf" --mmproj-out "$tmp/exists.gguf"
[ ! -e "$tmp/new.gguf" ] && ok "nothing written when --mmproj-out is refused" || bad "new.gguf written"
quant -m "$fx/tiny-tied" --weights f16 --out "$tmp/exists.gguf" --force \
  && [ "$(head -c 4 "$tmp/exists.gguf")" = GGUF ] && ok "--force replaces it" \
  || bad "--force: $(cat "$tmp/q.err")"
mkdir "$tmp/dir.gguf"
expect_fail "--out is a directory" 1 "is a directory" \
  -- "$qvl" quantize -m "$fx/tiny-tied" --weights f16 --out "$tmp/dir.gguf"
expect_fail "--out in a missing directory" 1 "no/such/dir/x.gguf" \
  -- "$qvl" quantize -m "$fx/tiny-tied" --weights f16 --out "$tmp/no/such/dir/x.gguf"
expect_fail "--out under a file" 1 "exists.gguf/x.gguf" \
  -- "$qvl" quantize -m "$fx/tiny-tied" --weights f16 --out "$tmp/exists.gguf/x.gguf"
mkdir "$tmp/ro"; chmod 555 "$tmp/ro"
if ! touch "$tmp/ro/probe" 2>/dev/null; then
  expect_fail "--out in an unwritable directory" 1 "ro/x.gguf" \
    -- "$qvl" quantize -m "$fx/tiny-tied" --weights f16 --out "$tmp/ro/x.gguf"
else
  echo "skip unwritable directory: this user writes anywhere (root)"
fi
chmod 755 "$tmp/ro"
expect_fail "--mmproj-out without vision" 1 "--mmproj-out: the model has no vision tower" \
  -- "$qvl" quantize -m "$gg/tiny-tied-f16.gguf" --weights f16 --out "$tmp/nv.gguf" \
  --mmproj-out "$tmp/nv-mm.gguf"
[ ! -e "$tmp/nv.gguf" ] && [ ! -e "$tmp/nv-mm.gguf" ] && ok "nothing written without vision" \
  || bad "files written for a refused --mmproj-out"
cp "$gg/tiny-tied-f16.gguf" "$tmp/src.gguf"
expect_fail "--out is the source" 1 "is a source file" \
  -- "$qvl" quantize -m "$tmp/src.gguf" --weights f16 --out "$tmp/src.gguf" --force
expect_fail "--out and --mmproj-out the same" 1 "name the same file" \
  -- "$qvl" quantize -m "$fx/tiny-tied" --weights f16 --out "$tmp/s.gguf" --mmproj-out "$tmp/s.gguf"
expect_fail "--mmproj-out with a directory output" 2 "goes with --out FILE.gguf" \
  -- "$qvl" quantize -m "$fx/tiny-tied" --weights f16 --out "$tmp/d" --mmproj-out "$tmp/m.gguf"
expect_fail "a GGUF source to a directory" 2 "goes with --out FILE.gguf" \
  -- "$qvl" quantize -m "$gg/tiny-tied-f16.gguf" --weights f16 --out "$tmp/d"
expect_fail "unknown --weights" 1 "is not one of" \
  -- "$qvl" quantize -m "$fx/tiny-tied" --weights q3_k --out "$tmp/w.gguf"
left=$(find "$tmp" -name '*.qvl-*' | head -3)
[ -z "$left" ] && ok "no temporary files left" || bad "temporary files left: $left"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
