#!/usr/bin/env bash
# qvl run with --video-frames on the transformers video fixtures: the greedy answer equals
# transformers' (a video alone, and a picture then a video; -b 16 cuts the prefill inside the
# video's pads), each video's summary line is printed, and bad videos are one clear error line.
# usage: cli_qvl_video.sh QVL_BINARY SOURCE_DIR
set -u
qvl=$1; src=$2
fx=$src/tests/fixtures/tiny-tied
vids=$src/tests/fixtures/videos
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail

greedy_of() { # case name -> transformers' greedy ids, space-separated
  tr -d ' \n' < "$fx/fixture_videos.json" | sed -E "s/.*\"name\":\"$1\",//" \
    | sed -E 's/\},\{"name".*//' | sed -E 's/.*"greedy_ids":\[([0-9,]*)\].*/\1/' | tr ',' ' '
}

want=$(greedy_of vid_short)
got=$("$qvl" run -m "$fx" --video-frames "$vids/vid_short" --video-fps 4 -p " What happens?" \
      --print-ids -n 6 --temp 0 --backend reference 2>"$tmp/err")
[ "$got" = "$want" ] && ok "--video-frames DIR greedy = transformers" \
  || bad "vid_short greedy: got '$got' want '$want' ($(cat "$tmp/err"))"
grep -q "^video 1: .*vid_short, 10 frames at 4 fps -> 5 kept, 64x32 -> grid 3x2x4, 6 tokens$" \
  "$tmp/err" && ok "prints the video's summary" || bad "video summary: $(cat "$tmp/err")"

# A picture, then the same video as a list of files, the prefill in batches of 16.
list=$(ls "$vids/vid_short"/*.png | tr '\n' ',' | sed 's/,$//')
want=$(greedy_of vid_mixed)
got=$("$qvl" run -m "$fx" --image "$fx/small.png" --video-frames="$list" --video-fps=4 \
      -p " What happens?" --print-ids -n 6 --temp 0 -b 16 2>"$tmp/err")
[ "$got" = "$want" ] && ok "--image + --video-frames LIST greedy = transformers" \
  || bad "vid_mixed greedy: got '$got' want '$want' ($(cat "$tmp/err"))"

# Bad input: one line each, before any model work.
run_video() { "$qvl" run -m "$fx" -p hi -n 1 "$@"; }
mkdir -p "$tmp/empty" "$tmp/mixed"
expect_fail "no frames" 1 "no picture files" -- run_video --video-frames "$tmp/empty"
cp "$vids/vid_short/000.png" "$vids/vid_short/001.png" "$tmp/mixed/"
cp "$vids/vid_cap/000.png" "$tmp/mixed/002.png"
expect_fail "frames of different sizes" 1 "frames of one size" -- \
  run_video --video-frames "$tmp/mixed" --video-fps 2
printf 'not a picture' > "$tmp/bad.png"
expect_fail "unreadable frame" 1 "bad.png" -- \
  run_video --video-frames "$vids/vid_short/000.png,$tmp/bad.png" --video-fps 1
expect_fail "one frame" 1 "at least 2" -- run_video --video-frames "$vids/vid_short/000.png"
expect_fail "too many frames for the context" 1 "raise --ctx" -- \
  run_video --video-frames "$vids/vid_cap" --video-fps 2 -c 40
expect_fail "--video-max-tokens too small" 1 "--video-max-tokens allows 3" -- \
  run_video --video-frames "$vids/vid_cap" --video-fps 2 --video-max-tokens 3
expect_fail "--video-fps without a video" 2 "must follow its --video-frames" -- \
  run_video --video-fps 3
expect_fail "--video-fps not a rate" 2 "not a frame rate" -- \
  run_video --video-frames "$vids/vid_short" --video-fps 0
expect_fail "<image> marker with a video" 1 "markers do not go with --video-frames" -- \
  "$qvl" run -m "$fx" -q -p "<image> hi" -n 1 --image "$fx/small.png" --video-frames "$vids/vid_short"
expect_fail "video in a chat" 2 "go with qvl run" -- \
  "$qvl" chat -m "$fx" --video-frames "$vids/vid_short"
# The budget: --video-max-tokens 4 gives vid_cap (4 groups) its smallest frames.
"$qvl" run -m "$fx" --video-frames "$vids/vid_cap" --video-fps 2 --video-max-tokens 4 -p hi -n 1 \
  --print-ids >"$tmp/out" 2>"$tmp/err" && grep -q "grid 4x2x2, 4 tokens$" "$tmp/err" \
  && ok "--video-max-tokens shrinks the frames" || bad "--video-max-tokens: $(cat "$tmp/err")"
"$qvl" run -m "$fx" --video-frames "$vids/vid_cap" --video-fps 2 --video-max-frames 4 -p hi -n 1 \
  --print-ids >"$tmp/out" 2>"$tmp/err" && grep -q "20 frames at 2 fps -> 4 kept" "$tmp/err" \
  && ok "--video-max-frames caps the kept frames" || bad "--video-max-frames: $(cat "$tmp/err")"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
