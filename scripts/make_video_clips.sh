#!/usr/bin/env bash
# Makes the small video files of tests/fixtures/videos/files/ (tests/fixtures/README.md, "Video
# files") with FFmpeg's command-line tool (Debian's ffmpeg package): one clip per container and
# codec qvl decodes, each with its frames as PNG files (<clip>.frames/NNN.png) as FFmpeg's own
# decoder and the same RGB conversion (bilinear, the stream's matrix and range) give them, plus
# the hostile files. Deterministic for one FFmpeg version (-bitexact, one thread).
#
# The source is FFmpeg's testsrc2 pattern, 64x48, 10 frames at 8 fps (1.25 s).
# usage: scripts/make_video_clips.sh [OUT_DIR]   (default tests/fixtures/videos/files)
set -euo pipefail
out=${1:-$(dirname "$0")/../tests/fixtures/videos/files}
mkdir -p "$out"
cd "$out"
ff() { ffmpeg -hide_banner -loglevel error -y -threads 1 "$@"; }
src=(-f lavfi -i "testsrc2=size=64x48:rate=8:duration=1.25")
bx=(-fflags +bitexact -flags:v +bitexact -map_metadata -1)

rm -rf ./*.frames source
mkdir -p source
ff "${src[@]}" -fps_mode passthrough source/%03d.png

# Lossy codecs with a key frame every 4 frames (so that seeking has somewhere to land).
ff -framerate 8 -i source/%03d.png "${bx[@]}" -c:v libx264 -preset veryfast -g 4 -bf 2 \
  -pix_fmt yuv420p -x264-params threads=1 -movflags +faststart h264.mp4
ff -framerate 8 -i source/%03d.png "${bx[@]}" -c:v libvpx-vp9 -g 4 -deadline good -cpu-used 4 \
  -pix_fmt yuv420p vp9.webm
ff -framerate 8 -i source/%03d.png "${bx[@]}" -c:v mjpeg -q:v 3 -pix_fmt yuvj420p mjpeg.avi
# Lossless in RGB: the frames are the source's exactly.
ff -framerate 8 -i source/%03d.png "${bx[@]}" -c:v ffv1 -pix_fmt bgr0 ffv1.mkv
ff -framerate 8 -i source/%03d.png "${bx[@]}" -c:v png -pix_fmt rgb24 png.mov
ff -framerate 8 -i source/%03d.png "${bx[@]}" -c:v libwebp_anim -lossless 1 -loop 0 anim.webp
# GIF: 256 colours per frame (the palette is made from the clip), looping forever.
ff -framerate 8 -i source/%03d.png "${bx[@]}" \
  -vf "split[a][b];[a]palettegen=max_colors=64[p];[b][p]paletteuse=dither=none" -loop 0 anim.gif
# H.264 in MOV turned 90 degrees clockwise by the display matrix (FFmpeg 5 writes no rotation
# of its own, so the track header's matrix is set here: a=0 b=1 c=-1 d=0, x = the height).
ff -framerate 8 -i source/%03d.png "${bx[@]}" -c:v libx264 -preset veryfast -g 4 -pix_fmt yuv420p \
  -x264-params threads=1 rot90.mov
python3 - <<'PY'
import struct
d = bytearray(open("rot90.mov", "rb").read())
box = d.index(b"tkhd") - 4
assert d[box + 8] == 0  # version 0: the matrix sits 48 bytes into the box
struct.pack_into(">9I", d, box + 48, 0, 0x10000, 0, 0xFFFF0000, 0, 0, 48 << 16, 0, 0x40000000)
open("rot90.mov", "wb").write(bytes(d))
PY

# Each clip's frames as FFmpeg decodes them (rotation applied, as ffmpeg's autorotate does).
for clip in h264.mp4 vp9.webm mjpeg.avi ffv1.mkv png.mov anim.gif rot90.mov; do
  mkdir -p "$clip.frames"
  ff -i "$clip" -fps_mode passthrough -sws_flags bilinear -pix_fmt rgb24 "$clip.frames/%03d.png"
done
# FFmpeg 5 cannot decode animated WebP; the lossless clip's frames are the source's.
cp -r source anim.webp.frames
rm -rf source

# Hostile files.
python3 - <<'PY'
import struct
# GIFs whose screen is 16384x16384 (over FFmpeg's own size limit) and 10000x10000 (over qvl's
# pixel cap), one 1x1 image inside: refused from the header.
for name, side in (("huge.gif", 16384), ("big.gif", 10000)):
    gif = (b"GIF89a" + struct.pack("<HHBBB", side, side, 0x80, 0, 0) + b"\0\0\0\xff\xff\xff"
           + b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0) + b"\x02\x02\x44\x01\x00" + b"\x3b")
    open(name, "wb").write(gif)
# The MJPEG AVI with its stream header claiming 50000 frames instead of 10 (an index that lies).
d = bytearray(open("mjpeg.avi", "rb").read())
i = d.index(b"strh")
struct.pack_into("<I", d, i + 8 + 32, 50000)      # dwLength
j = d.index(b"avih")
struct.pack_into("<I", d, j + 8 + 16, 50000)      # dwTotalFrames
open("lying.avi", "wb").write(bytes(d))
# The same headers claiming 288000 frames at 8 fps: ten hours, over the duration cap.
struct.pack_into("<I", d, i + 8 + 32, 288000)
struct.pack_into("<I", d, j + 8 + 16, 288000)
open("ten_hours.avi", "wb").write(bytes(d))
# The H.264 MP4 cut in the middle of its data.
d = open("h264.mp4", "rb").read()
open("truncated.mp4", "wb").write(d[: len(d) * 2 // 3])
PY
ls -la
