#!/usr/bin/env bash
# qvl run --video FILE on the committed clips (tests/fixtures/videos/files): each container and
# codec gives the same greedy answer as its frames given as PNG files (--video-frames at the
# file's rate; the decoded frames equal them exactly, test_video_decode), with a summary line
# naming codec and container; mixing with --image and --video-frames; the rotated clip; the
# hostile files and the caps give one line each. Without FFmpeg: the line that says how to get it.
# usage: cli_qvl_video_file.sh QVL_BINARY SOURCE_DIR
set -u
qvl=$1; src=$2
fx=$src/tests/fixtures/tiny-tied
clips=$src/tests/fixtures/videos/files
. "$(dirname "$0")/cli_lib.sh" # $tmp, ok/bad, expect_fail

answer() { "$qvl" run -m "$fx" -p " What happens?" --print-ids -n 6 --temp 0 "$@"; }

if "$qvl" run --help | grep -q "video FILE" && ! answer --video "$clips/h264.mp4" 2>"$tmp/err" \
    >/dev/null && grep -q "apt-get install libavformat-dev" "$tmp/err"; then
  # A build without FFmpeg: one line saying how to get it; WebP still decodes.
  expect_fail "no FFmpeg: how to get it" 1 "apt-get install libavformat-dev" -- \
    answer --video "$clips/h264.mp4"
  answer --video "$clips/anim.webp" >/dev/null 2>&1 && ok "no FFmpeg: WebP decodes" \
    || bad "no FFmpeg: WebP"
  echo "$passed passed, $failures failed"
  [ "$failures" -eq 0 ]
  exit
fi

greedy_of() { # case name -> transformers' greedy ids (fixture_videos.json), space-separated
  tr -d ' \n' < "$fx/fixture_videos.json" | sed -E "s/.*\"name\":\"$1\",//" \
    | sed -E 's/\},\{"name".*//' | sed -E 's/.*"greedy_ids":\[([0-9,]*)\].*/\1/' | tr ',' ' '
}

# The file case of the parity fixtures: transformers decoded h264.mp4 with PyAV.
want=$(greedy_of vid_file)
got=$(answer --video "$clips/h264.mp4" --backend reference 2>"$tmp/err")
[ -n "$want" ] && [ "$got" = "$want" ] && ok "--video h264.mp4 greedy = transformers (PyAV)" \
  || bad "vid_file greedy: got '$got' want '$want' ($(cat "$tmp/err"))"

# clip, its rate as --video-fps takes it, the summary's "(codec in container...)".
while read -r clip fps what; do
  got=$(answer --video "$clips/$clip" 2>"$tmp/err")
  want=$(answer --video-frames "$clips/$clip.frames" --video-fps "$fps" 2>/dev/null)
  [ -n "$want" ] && [ "$got" = "$want" ] && ok "$clip: greedy = its PNG frames'" \
    || bad "$clip: got '$got' want '$want' ($(cat "$tmp/err"))"
  grep -q "^video 1: .*$clip, 10 frames at [0-9.]* fps ($what) -> 4 kept, " "$tmp/err" \
    && ok "$clip: summary line" || bad "$clip summary: $(cat "$tmp/err")"
done <<'LIST'
h264.mp4 8 h264 in mov
vp9.webm 8 vp9 in matroska
mjpeg.avi 8 mjpeg in avi
ffv1.mkv 8 ffv1 in matroska
png.mov 8 png in mov
anim.gif 7.916666666666667 gif in gif
anim.webp 8 webp in webp
rot90.mov 8 h264 in mov, turned 90
LIST
grep -q "48x64 -> grid" "$tmp/err" && ok "the rotated clip is upright (48x64)" \
  || bad "rotation: $(cat "$tmp/err")"

# A picture, a file and frames, in that order; the endless GIF (loop 0) plays once.
got=$(answer --image "$fx/small.png" --video "$clips/anim.gif" \
      --video-frames "$clips/h264.mp4.frames" --video-fps 8 -b 16 2>"$tmp/err")
[ -n "$got" ] && grep -q "^image 1: " "$tmp/err" && grep -q "^video 2: .*anim.gif, 10 frames" \
  "$tmp/err" && grep -q "^video 3: .*h264.mp4.frames, 10 frames" "$tmp/err" \
  && ok "--image + --video + --video-frames" || bad "mixed media: $(cat "$tmp/err")"

# Hostile files and caps: one line each.
run_video() { "$qvl" run -m "$fx" -p hi -n 1 "$@"; }
expect_fail "16384x16384 GIF" 1 "huge.gif: .*frame size" -- run_video --video "$clips/huge.gif"
expect_fail "10000x10000 GIF over the pixel cap" 1 "big.gif: frames of 10000x10000 exceed" -- \
  run_video --video "$clips/big.gif"
expect_fail "an index that lies" 1 "lying.avi: .*declares 50000" -- \
  run_video --video "$clips/lying.avi"
expect_fail "a 10-hour header" 1 "ten_hours.avi: lasts 36000 s, over 10800 s" -- \
  run_video --video "$clips/ten_hours.avi"
expect_fail "truncated MP4" 1 "truncated.mp4: .*truncated" -- \
  run_video --video "$clips/truncated.mp4"
expect_fail "a picture is no video" 1 "not a video file" -- \
  run_video --video "$fx/small.png"
expect_fail "missing file" 1 "absent.mp4: cannot open" -- run_video --video "$tmp/absent.mp4"
expect_fail "--video-max-duration" 1 "over 1 s" -- \
  run_video --video "$clips/vp9.webm" --video-max-duration 1
expect_fail "--video-fps after --video" 2 "rate is the file's own" -- \
  run_video --video "$clips/h264.mp4" --video-fps 3
expect_fail "--video without a file" 2 "--video needs a FILE" -- run_video --video
expect_fail "--video in a chat" 2 "go with qvl run" -- \
  "$qvl" chat -m "$fx" --video "$clips/h264.mp4"

echo "$passed passed, $failures failed"
[ "$failures" -eq 0 ]
