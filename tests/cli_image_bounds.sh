#!/usr/bin/env bash
# Pictures sized to fit, decided before any work: --image-max-tokens (default 4096) and
# --image-min-tokens resize as the processor would with N x (patch x merge)^2 pixel bounds, the
# bounds' errors name the flags given, and a prompt that cannot fit the context is refused in
# one line before any picture is decoded (checked with a picture whose pixel data is noise: only
# its headers are ever read).
# usage: cli_image_bounds.sh QVL_BINARY SOURCE_DIR
set -u
qvl=$1; src=$2
fx=$(cd "$src" && pwd)/tests/fixtures/tiny-untied
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail, write_tiny_config
# pads N: N copies of the fixture's image_token_id, comma-terminated.
pad=$(tr -d ' \n' < "$fx/config.json" | sed -E 's/.*"image_token_id":([0-9]+).*/\1/')
pads() { local i; for ((i = 0; i < $1; i++)); do printf '%s,' "$pad"; done; }

# The fixture's model with Qwen3-VL's own processor bounds (65,536 .. 16,777,216 pixels).
mkdir "$tmp/m"
for f in config.json model.safetensors generation_config.json; do ln -s "$fx/$f" "$tmp/m/$f"; done
sed -e 's/"shortest_edge": *[0-9]*/"shortest_edge": 65536/' \
    -e 's/"longest_edge": *[0-9]*/"longest_edge": 16777216/' "$fx/preprocessor_config.json" \
    > "$tmp/m/preprocessor_config.json"
grep -q 16777216 "$tmp/m/preprocessor_config.json" || { echo "FAIL cannot write the bounds"; exit 1; }

# A phone photo: 4032x3024 (binary PPM, random pixels), and a PNG of that size whose headers
# are sound but whose compressed pixels are noise (it can be sized, never decoded): signature,
# IHDR 4032x3024 8-bit RGB with its CRC, 512 KiB of random IDAT, IEND.
{ printf 'P6\n4032 3024\n255\n'; head -c $((4032 * 3024 * 3)) /dev/urandom; } > "$tmp/photo.ppm"
{ printf '\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52\x00\x00\x0f\xc0\x00\x00\x0b\xd0\x08\x02\x00\x00\x00\x4f\x97\x59\xf7'
  printf '\x00\x08\x00\x00IDAT'; head -c 524288 /dev/urandom; printf '\x00\x00\x00\x00'
  printf '\x00\x00\x00\x00IEND\xae\x42\x60\x82'; } > "$tmp/cut.png"

# Default: capped at 4096 tokens. smart_resize(3024, 4032, factor 32, max 4096 x 32^2):
# beta = sqrt(4032*3024 / 4194304), 3024/beta/32 -> 55, 4032/beta/32 -> 73: 55 x 73 = 4015.
"$qvl" run -m "$tmp/m" --ids 1,2 --image "$tmp/photo.ppm" --print-ids >"$tmp/out" 2>"$tmp/err"
grep -q "^image 1: 4032x3024 -> grid 110x146, 4015 tokens (scaled down to fit the default --image-max-tokens 4096 (4194304 pixels))$" "$tmp/err" \
  && grep -q "but the 1 image(s) need 4015" "$tmp/err" \
  && ok "default --image-max-tokens 4096 caps the photo" || bad "default cap: $(cat "$tmp/err")"

# The prompt does not fit --ctx: one line, and the cut pixels are never decoded.
t0=$(date +%s%N)
expect_fail "photo over --ctx: refused before decoding" 1 \
  "the prompt is 4017 tokens (4015 of them for 1 image(s)) but the context holds 2048: raise --ctx (-c) or lower --image-max-tokens" \
  -- "$qvl" run -m "$tmp/m" --ids "1,$(pads 4015)2" --image "$tmp/cut.png" --print-ids -q -c 2048
echo "     (refused in $(( ($(date +%s%N) - t0) / 1000000 )) ms)"
# Within the context, the same cut picture reaches the decoder, which names it.
expect_fail "cut pixels are found when decoding" 1 "cut.png" \
  -- "$qvl" run -m "$tmp/m" --ids "1,$(pads 4015)2" --image "$tmp/cut.png" --print-ids -q

# A 35-byte GIF declaring an 8192x8192 canvas (a 2x2 frame whose LZW codes are garbage): its
# 4096 tokens are weighed against --ctx from the header alone, so it is refused without the
# canvas ever being allocated (201 MB of RGB); within the context the decoder
# reaches the frame and names the file.
printf 'GIF89a\x00\x20\x00\x20\x80\x00\x00\x00\x00\x00\xff\xff\xff,\x00\x00\x00\x00\x02\x00\x02\x00\x00\x02\x02\xff\xff\x00;' \
  > "$tmp/canvas.gif"
expect_fail "GIF canvas over --ctx: refused from its header" 1 \
  "the prompt is 4098 tokens (4096 of them for 1 image(s)) but the context holds 2048" \
  -- "$qvl" run -m "$tmp/m" --ids "1,$(pads 4096)2" --image "$tmp/canvas.gif" --print-ids -q -c 2048
expect_fail "GIF canvas within --ctx: the decoder names it" 1 "canvas.gif: cannot decode GIF (" \
  -- "$qvl" run -m "$tmp/m" --ids "1,$(pads 4096)2" --image "$tmp/canvas.gif" --print-ids -q -c 8192

# A token bound is the pixel bound N x 32^2: the same grid either way.
"$qvl" run -m "$tmp/m" --ids 1 --image "$tmp/cut.png" --image-max-tokens 16 --print-ids 2>"$tmp/a" >/dev/null
"$qvl" run -m "$tmp/m" --ids 1 --image "$tmp/cut.png" --max-pixels 16384 --print-ids 2>"$tmp/b" >/dev/null
grep -q "^image 1: 4032x3024 -> grid 6x8, 12 tokens (scaled down to fit --image-max-tokens 16 (16384 pixels))$" "$tmp/a" \
  && grep -q "^image 1: 4032x3024 -> grid 6x8, 12 tokens (scaled down to fit --max-pixels 16384)$" "$tmp/b" \
  && ok "--image-max-tokens N = --max-pixels N x 1024" || bad "token bound: $(cat "$tmp/a" "$tmp/b")"
# The tighter of --max-pixels and --image-max-tokens wins.
"$qvl" run -m "$tmp/m" --ids 1 --image "$tmp/cut.png" --image-max-tokens 16 --max-pixels 1000000 --print-ids 2>"$tmp/a" >/dev/null
grep -q "12 tokens (scaled down to fit --image-max-tokens 16" "$tmp/a" && ok "tighter bound wins" \
  || bad "tighter bound: $(cat "$tmp/a")"
# --image-min-tokens raises a small picture: 40x40 with at least 100 tokens.
"$qvl" run -m "$tmp/m" --ids 1 --image "$fx/small.png" --image-min-tokens 100 --print-ids 2>"$tmp/a" >/dev/null
grep -q "^image 1: 40x40 -> grid 20x20, 100 tokens$" "$tmp/a" && ok "--image-min-tokens" \
  || bad "--image-min-tokens: $(cat "$tmp/a")"

# The whole run with a capped photo: 12 tokens, an answer.
"$qvl" run -m "$tmp/m" --ids "1,$(pads 12)2" --image "$tmp/photo.ppm" --image-max-tokens 16 \
  --print-ids -n 2 --temp 0 --backend reference >"$tmp/out" 2>"$tmp/err" \
  && [ "$(wc -w < "$tmp/out")" -eq 2 ] && ok "capped photo answers" || bad "capped run: $(cat "$tmp/err")"

# A bound the user gives wins over the file's: the other side follows it (no complaint about a
# flag they never gave); two bounds the user gave that contradict are one error naming both.
"$qvl" run -m "$tmp/m" --ids 1 --image "$fx/small.png" --max-pixels 100 --print-ids 2>"$tmp/a" >/dev/null
grep -q "^image 1: 40x40 -> grid 2x2, 1 tokens$" "$tmp/a" && ok "--max-pixels below the file's minimum" \
  || bad "--max-pixels 100: $(cat "$tmp/a")"
"$qvl" run -m "$tmp/m" --ids 1 --image "$fx/small.png" --image-min-tokens 5000 --print-ids 2>"$tmp/a" >/dev/null
grep -q "^image 1: 40x40 -> grid 142x142, 5041 tokens$" "$tmp/a" && ok "--image-min-tokens over the default maximum" \
  || bad "--image-min-tokens 5000: $(cat "$tmp/a")"
expect_fail "minimum and maximum given, contradicting" 1 \
  "--min-pixels 5000 exceeds --image-max-tokens 2 (2048 pixels)$" \
  -- "$qvl" run -m "$tmp/m" --ids 1 --image "$fx/small.png" --min-pixels 5000 --image-max-tokens 2 --print-ids
expect_fail "--image-max-tokens 0" 2 "--image-max-tokens" -- "$qvl" run -m "$tmp/m" --ids 1 --image-max-tokens 0
"$qvl" run --help | grep -q -- "--image-max-tokens N" && "$qvl" run --help | grep -q -- "--image-min-tokens N" \
  && ok "run --help lists the token bounds" || bad "help lists the token bounds"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
