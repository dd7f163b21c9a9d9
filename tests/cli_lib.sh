# shellcheck shell=bash
# What the CLI test scripts share, sourced after they set $qvl: a scratch directory removed on
# exit, the pass/fail counters, and the helpers below.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
failures=0; passed=0
ok()   { passed=$((passed + 1)); echo "ok   $1"; }
bad()  { failures=$((failures + 1)); echo "FAIL $1"; }

# expect_fail NAME EXIT_CODE PATTERN -- command...: fails with that code and ONE stderr line
# that matches PATTERN.
expect_fail() {
  local name=$1 code=$2 pattern=$3; shift 4
  "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  local lines; lines=$(grep -c . "$tmp/err")
  if [ "$rc" -eq "$code" ] && [ "$lines" -eq 1 ] && grep -q -- "$pattern" "$tmp/err"; then ok "$name"
  else bad "$name (exit $rc, $lines stderr lines: $(head -c 300 "$tmp/err"))"; fi
}

# write_tiny_config FILE LAYERS: a Qwen3-VL config.json with the real vocabulary size (so the
# real tokenizer's ids fit) and LAYERS (1 or 2) decoder layers and vision blocks, each vision
# block feeding a deepstack merger.
write_tiny_config() {
  local file=$1 layers=$2 taps="[0]"
  [ "$layers" -eq 2 ] && taps="[0, 1]"
  cat > "$file" <<JSON
{"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
 "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
 "vision_end_token_id": 151653, "tie_word_embeddings": true,
 "text_config": {"vocab_size": 151936, "hidden_size": 32, "intermediate_size": 64,
   "num_hidden_layers": $layers, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
   "hidden_act": "silu", "rms_norm_eps": 1e-06, "rope_theta": 5000000,
   "rope_scaling": {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": true},
   "max_position_embeddings": 4096, "attention_bias": false, "bos_token_id": 151643,
   "eos_token_id": 151645, "tie_word_embeddings": true},
 "vision_config": {"depth": $layers, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
   "hidden_act": "gelu_pytorch_tanh", "patch_size": 16, "temporal_patch_size": 2,
   "spatial_merge_size": 2, "in_channels": 3, "out_hidden_size": 32,
   "num_position_embeddings": 16, "deepstack_visual_indexes": $taps}}
JSON
}
