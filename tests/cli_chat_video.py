#!/usr/bin/env python3
"""qvl chat's /video on the tiny-tied fixture model (its own tokenizer and video processor
config): the answer's ids equal transformers' greedy ids (fixture_videos.json) for a directory
at a rate given as PATH@FPS and for a comma list of the same frames; the next turn reuses the
video from the slot's cache (-v's job line: cached tokens, no video encoded again); bad videos
are one line each and the chat goes on; /help lists /video.

usage: cli_chat_video.py QVL_BINARY SOURCE_DIR"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

qvl, src = sys.argv[1], sys.argv[2]
model = os.path.join(src, "tests", "fixtures", "tiny-tied")
videos = os.path.join(src, "tests", "fixtures", "videos")
passed = failures = 0


def check(name, cond, why=""):
    global passed, failures
    if cond:
        passed += 1
        print(f"ok   {name}")
    else:
        failures += 1
        print(f"FAIL {name}: {str(why)[:800]}")


def piped(lines, *flags):
    """(exit status, answers as lists of ids, stderr) of qvl chat fed lines on stdin."""
    r = subprocess.run([qvl, "chat", "-m", model, "--temp", "0", "-q", "--print-ids", *flags],
                       input="".join(l + "\n" for l in lines), capture_output=True, text=True,
                       timeout=300)
    return r.returncode, [l.split() for l in r.stdout.splitlines() if l.strip()], r.stderr


with open(os.path.join(model, "fixture_videos.json")) as f:
    cases = {c["name"]: c for c in json.load(f)["cases"]}
want = [str(i) for i in cases["vid_short"]["greedy_ids"]]
n = str(len(want))

short = os.path.join(videos, "vid_short")
rc, got, err = piped([f"/video {short}@4", " What happens?"], "-n", n)
check("/video DIR@4: greedy ids = transformers", rc == 0 and got == [want], (got, want, err))

frames = ",".join(sorted(glob.glob(os.path.join(short, "*.png"))))
rc, got, err = piped([f"/video '{frames}@4'", " What happens?"], "-n", n)
check("/video F1,F2,...@4 (quoted): the same answer", rc == 0 and got == [want], (got, err))

rc, got, err = piped([f"/video {short}@4", " What happens?", "And then?"], "-n", n, "-v")
jobs = re.findall(r"job (\d+): (\d+) prompt tokens, (\d+) cached, (\d+) of (\d+) picture", err)
ok = rc == 0 and len(got) == 2 and len(jobs) == 2
check("next turn: the video comes from the cache (not encoded again)",
      ok and int(jobs[1][2]) >= int(jobs[0][1]) - 1 and jobs[1][3] == "0" and jobs[1][4] == "1",
      (jobs, err))

# A file through FFmpeg: transformers' greedy ids on h264.mp4 decoded by PyAV (vid_file).
clip = os.path.join(videos, "files", "h264.mp4")
probe = subprocess.run([qvl, "run", "-m", model, "-p", "x", "-n", "1", "--video", clip],
                       capture_output=True, text=True, timeout=300)
has_decoder = "apt-get install libavformat-dev" not in probe.stderr
if has_decoder:
    want_file = [str(i) for i in cases["vid_file"]["greedy_ids"]]
    rc, got, err = piped([f"/video {clip}", " What happens?"], "-n", str(len(want_file)))
    check("/video FILE.mp4: greedy ids = transformers (PyAV)", rc == 0 and got == [want_file],
          (got, want_file, err))
else:
    print("note: this qvl was built without FFmpeg; /video FILE checks only its refusal")

tmp = tempfile.mkdtemp()
mixed = os.path.join(tmp, "mixed")
os.makedirs(mixed)
shutil.copy(os.path.join(short, "000.png"), os.path.join(mixed, "000.png"))
shutil.copy(os.path.join(short, "001.png"), os.path.join(mixed, "001.png"))
shutil.copy(os.path.join(videos, "vid_cap", "000.png"), os.path.join(mixed, "002.png"))
os.makedirs(os.path.join(tmp, "empty"))
with open(os.path.join(tmp, "clip.mp4"), "wb") as f:
    f.write(b"\0\0\0\x18ftypmp42")
bad = [
    (f"/video {mixed}@2", "frames of one size"),
    (f"/video {tmp}/empty", "no picture files"),
    (f"/video {short}@0", "not a frame rate"),
    (f"/video {os.path.join(short, '000.png')}", "at least 2"),
    (f"/video {tmp}/missing.png,{tmp}/missing2.png@1", "missing"),
    (f"/video {tmp}/clip.mp4", "clip.mp4" if has_decoder else "not supported by this build"),
    ("/video", "/video needs a PATH"),
]
for line, words in bad:
    rc, got, err = piped([line, " What happens?"], "-n", "2")
    lines = [l for l in err.splitlines() if l.strip()]
    check(f"{line.replace(tmp, 'TMP').replace(src, 'SRC')}: one line, the chat goes on",
          rc == 0 and len(got) == 1 and len(lines) == 1 and words in lines[0], (rc, got, err))

rc, got, err = piped([f"/video {os.path.join(videos, 'vid_cap')}@2", "hi"], "-n", "2", "-c", "24")
lines = [l for l in err.splitlines() if l.strip()]
check("a video over the context: refused in one line naming --ctx, nothing answered",
      rc == 0 and len(lines) == 1 and "--ctx" in lines[0] and got == [], err)

rc, got, err = piped(["/help"])
check("/help lists /video PATH[@FPS]", "/video PATH[@FPS]" in err, err)

print(f"{passed} passed, {failures} failed")
sys.exit(1 if failures else 0)
