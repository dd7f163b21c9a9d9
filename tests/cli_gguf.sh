#!/usr/bin/env bash
# qvl run on llama.cpp's GGUF files (tests/fixtures/gguf): -m MODEL.gguf --mmproj MMPROJ.gguf
# answers as the directory it was converted from, text and pictures; a directory holding one
# model GGUF and its mmproj works the same; without --mmproj a picture is one line saying the
# vision part is missing; hostile files are one line each.
# usage: cli_gguf.sh QVL_BINARY SOURCE_DIR
set -u
qvl=$1; src=$(cd "$2" && pwd)
fx=$src/tests/fixtures
gg=$fx/gguf
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail
command -v python3 >/dev/null || { echo "skip: python3 is needed to make the hostile files"; exit 77; }

# The GGUF has no preprocessor_config.json: the directory's pixel bounds are given as flags.
px=(--min-pixels 4096 --max-pixels 16384)
run_ids() { "$qvl" run "$@" -n 8 --temp 0 --print-ids 2>"$tmp/err"; }

want=$(run_ids -m "$fx/tiny-tied" -p "Hello there")
for t in f32 bf16; do
  got=$(run_ids -m "$gg/tiny-tied-$t.gguf" -p "Hello there")
  [ -n "$want" ] && [ "$got" = "$want" ] && ok "text: $t GGUF = directory" \
    || bad "text: $t GGUF gave '$got', the directory '$want' ($(cat "$tmp/err"))"
done
want=$(run_ids -m "$fx/tiny-tied" "${px[@]}" --image "$fx/tiny-tied/photo.jpg" -p "Describe")
got=$(run_ids -m "$gg/tiny-tied-f32.gguf" --mmproj "$gg/mmproj-tiny-tied-f16.gguf" "${px[@]}" \
      --image "$fx/tiny-tied/photo.jpg" -p "Describe")
[ -n "$want" ] && [ "$got" = "$want" ] && ok "image: GGUF + mmproj = directory" \
  || bad "image: GGUF gave '$got', the directory '$want' ($(cat "$tmp/err"))"

tok_want=$("$qvl" tokenize -m "$fx/tiny-untied" "Hello <|im_start|>user, 你好 🦙" 2>&1)
tok_got=$("$qvl" tokenize -m "$gg/tiny-untied-q8_0.gguf" "Hello <|im_start|>user, 你好 🦙" 2>&1)
[ -n "$tok_want" ] && [ "$tok_got" = "$tok_want" ] && ok "qvl tokenize: GGUF = tokenizer.json" \
  || bad "qvl tokenize: GGUF gave '$tok_got', tokenizer.json '$tok_want'"

# A directory with exactly one model GGUF and one mmproj GGUF.
mkdir "$tmp/pair"
ln -s "$gg/tiny-tied-bf16.gguf" "$tmp/pair/Tiny-BF16.gguf"
ln -s "$gg/mmproj-tiny-tied-f16.gguf" "$tmp/pair/mmproj-Tiny-F16.gguf"
got=$(run_ids -m "$tmp/pair" "${px[@]}" --image "$fx/tiny-tied/photo.jpg" -p "Describe")
[ "$got" = "$want" ] && ok "a directory of GGUF files = directory" \
  || bad "GGUF directory gave '$got', want '$want' ($(cat "$tmp/err"))"

# config.json makes a directory a Hugging Face one, a GGUF file beside it or not.
mkdir "$tmp/hf"
for f in "$fx/tiny-tied"/*; do ln -s "$f" "$tmp/hf/"; done
ln -s "$gg/tiny-untied-f32.gguf" "$tmp/hf/stray.gguf"
got=$(run_ids -m "$tmp/hf" -p "Hello there")
want_text=$(run_ids -m "$fx/tiny-tied" -p "Hello there")
[ "$got" = "$want_text" ] && ok "a directory with config.json loads its safetensors" \
  || bad "directory with config.json and a GGUF gave '$got', want '$want_text'"

expect_fail "text-only GGUF with a picture" 1 "vision part of the model is missing (pass --mmproj" \
  -- "$qvl" run -m "$gg/tiny-tied-bf16.gguf" --image "$fx/tiny-tied/photo.jpg" -p hi -n 1
ln -s "$gg/tiny-tied-f32.gguf" "$tmp/pair/Tiny-F32.gguf"
expect_fail "a directory with two model GGUFs" 1 "more than one model GGUF file" \
  -- "$qvl" run -m "$tmp/pair" -p hi -n 1
expect_fail "--mmproj with a Hugging Face directory" 1 "mmproj goes with a GGUF model" \
  -- "$qvl" run -m "$fx/tiny-tied" --mmproj "$gg/mmproj-tiny-tied-f16.gguf" -p hi -n 1

# patch SRC DST OLD NEW [AFTER]: DST is SRC with the first OLD (after the bytes AFTER, when given)
# replaced by NEW of the same length.
patch() {
  python3 - "$@" <<'PY'
import sys
src, dst, old, new = sys.argv[1:5]
after = sys.argv[5].encode() if len(sys.argv) > 5 else b""
data = bytearray(open(src, "rb").read())
start = data.index(after) + len(after) if after else 0
at = data.index(old.encode(), start)
assert len(old) == len(new)
data[at:at + len(old)] = new.encode()
open(dst, "wb").write(bytes(data))
PY
}
patch "$gg/tiny-tied-bf16.gguf" "$tmp/arch.gguf" qwen3vl llama3x general.architecture
expect_fail "another architecture" 1 "general.architecture is 'llama3x', not qwen3vl" \
  -- "$qvl" run -m "$tmp/arch.gguf" -p hi -n 1
patch "$gg/tiny-tied-bf16.gguf" "$tmp/missing.gguf" blk.1.attn_q.weight blk.1.attn_X.weight
expect_fail "a missing tensor" 1 "tensor 'blk.1.attn_q.weight' is missing" \
  -- "$qvl" run -m "$tmp/missing.gguf" -p hi -n 1
# feed_forward_length 160 -> 128 (u32 little-endian after the key and its type): the FFN
# tensors then disagree with the keys.
python3 - "$gg/tiny-tied-bf16.gguf" "$tmp/shape.gguf" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
key = b"qwen3vl.feed_forward_length"
at = data.index(key) + len(key)
assert struct.unpack_from("<II", data, at) == (4, 160)
struct.pack_into("<I", data, at + 4, 128)
open(sys.argv[2], "wb").write(bytes(data))
PY
expect_fail "a shape that disagrees with the keys" 1 "is \[160, 64\], the model's keys imply \[128, 64\]" \
  -- "$qvl" run -m "$tmp/shape.gguf" -p hi -n 1
patch "$gg/mmproj-tiny-tied-f16.gguf" "$tmp/mmproj-other.gguf" qwen3vl_merger qwen2vl_merger
expect_fail "an mmproj of another projector" 1 "clip.projector_type is 'qwen2vl_merger', not qwen3vl_merger" \
  -- "$qvl" run -m "$gg/tiny-tied-bf16.gguf" --mmproj "$tmp/mmproj-other.gguf" -p hi -n 1
expect_fail "an mmproj of another model" 1 "belongs to another model" \
  -- "$qvl" run -m "$gg/tiny-tied-bf16.gguf" --mmproj "$gg/mmproj-tiny-untied-f16.gguf" -p hi -n 1
expect_fail "a text GGUF given as mmproj" 1 "clip.projector_type" \
  -- "$qvl" run -m "$gg/tiny-tied-bf16.gguf" --mmproj "$gg/tiny-tied-f16.gguf" -p hi -n 1
head -c 1000 "$gg/tiny-tied-bf16.gguf" > "$tmp/cut.gguf"
expect_fail "a truncated GGUF" 1 "cut.gguf" -- "$qvl" run -m "$tmp/cut.gguf" -p hi -n 1

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
