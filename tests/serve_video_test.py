#!/usr/bin/env python3
"""qvl serve with videos, end to end on loopback, on the tiny-tied fixture model (its own
tokenizer and video_preprocessor_config.json: no shared data needed).

usage: serve_video_test.py QVL_BINARY SOURCE_DIR

Checked: a {"type": "video"} frame list's greedy answer equals `qvl run --video-frames` on the
same frames (alone, after a picture, with the default rate, with the prefill cut into 16-token
chunks inside the video's pads); streamed = not streamed; the video of one turn is reused by the
next (cached_tokens covers it and only the new tokens are prefilled); --max-video-frames,
--max-video-seconds and the context as one-line 400s; hostile frame lists (mixed sizes, bad
data: URLs, a non-image media type, a frame that is not a string, empty, one frame, a bad fps,
a video in an assistant message); a video_url file (data: URL) answers as `qvl run --video` on
the same file, a broken or mislabelled file and the --max-video-seconds cap are one-line 400s,
and a build without FFmpeg says so in one; the OpenAI Python client passes the part through
(when installed); a clean exit."""
import base64
import glob
import os
import subprocess
import sys
import tempfile

import serve_util

QVL, SRC = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(SRC, ".pydeps"))  # the pinned openai client, when installed
MODEL = os.path.join(SRC, "tests", "fixtures", "tiny-tied")
VIDEOS = os.path.join(SRC, "tests", "fixtures", "videos")
FILES = os.path.join(VIDEOS, "files")
check = serve_util.Checks()
content_of = serve_util.content_of


def frames_of(name):
    return sorted(glob.glob(os.path.join(VIDEOS, name, "*.png")))


def data_url(path, media="image/png"):
    with open(path, "rb") as f:
        return "data:%s;base64,%s" % (media, base64.b64encode(f.read()).decode())


def video_part(name, fps=None, urls=None):
    part = {"type": "video", "video": urls if urls is not None else
            [data_url(f) for f in frames_of(name)]}
    if fps is not None:
        part["fps"] = fps
    return part


def run_qvl(args, n=6):
    """qvl run's greedy answer (text) with these media flags, or None."""
    r = subprocess.run([QVL, "run", "-m", MODEL, "-p", " What happens?", "-n", str(n),
                        "--temp", "0"] + args, capture_output=True, timeout=300)
    return r.stdout.decode("utf-8")[:-1] if r.returncode == 0 else None


def ask(s, parts, n=6, **extra):
    payload = {"messages": [{"role": "user", "content": parts}], "max_tokens": n,
               "temperature": 0}
    payload.update(extra)
    return s.chat(payload)


def is_400(status, body, *words):
    if status != 400 or not isinstance(body, dict) or "error" not in body:
        return False
    msg = body["error"].get("message", "")
    return "\n" not in msg and all(w in msg for w in words)


def test_parity(s):
    text = {"type": "text", "text": " What happens?"}
    want = run_qvl(["--video-frames", os.path.join(VIDEOS, "vid_short"), "--video-fps", "4"])
    status, _, body = ask(s, [video_part("vid_short", 4), text])
    check("video frame list: greedy = qvl run --video-frames", status == 200 and
          want is not None and content_of(body) == want, "%s vs %r" % (body, want))
    check("video: the prompt holds the fixture's 71 tokens",
          status == 200 and body["usage"]["prompt_tokens"] == 71, body)
    want = run_qvl(["--image", os.path.join(MODEL, "small.png"), "--video-frames",
                    os.path.join(VIDEOS, "vid_short"), "--video-fps", "4"])
    status, _, body = ask(s, [{"type": "image_url", "image_url": {"url": data_url(
        os.path.join(MODEL, "small.png"))}}, video_part("vid_short", 4), text])
    check("picture then video: greedy = qvl run", status == 200 and want is not None and
          content_of(body) == want, "%s vs %r" % (body, want))
    want = run_qvl(["--video-frames", os.path.join(VIDEOS, "vid_cap")])
    status, _, body = ask(s, [video_part("vid_cap"), text])
    check("no fps: transformers' default rate, as qvl run", status == 200 and
          want is not None and content_of(body) == want, "%s vs %r" % (body, want))
    want = run_qvl(["--video-frames", os.path.join(VIDEOS, "vid_wide"), "--video-fps", "1"], 8)
    parts = [video_part("vid_wide", 1), text]
    status, _, body = ask(s, parts, 8, seed=1)
    check("vid_wide: greedy = qvl run", status == 200 and want is not None and
          content_of(body) == want, "%s vs %r" % (body, want))
    status, _, events, done = s.stream({"messages": [{"role": "user", "content": parts}],
                                        "max_tokens": 8, "temperature": 0, "stream": True,
                                        "stream_options": {"include_usage": True}})
    got = "".join(e["choices"][0]["delta"].get("content", "") for e in events
                  if e.get("choices"))
    usage = [e["usage"] for e in events if e.get("usage")]
    check("streamed video answer = the whole answer", status == 200 and done and
          got == want and usage and usage[-1]["completion_tokens"] == 8, events)


def test_reuse(s):
    parts = [video_part("vid_cap", 2), {"type": "text", "text": " What happens?"}]
    status, _, first = ask(s, parts, cache_salt="reuse")
    reply = content_of(first)
    before = s.metric("qvl_prefill_tokens_total")
    msgs = [{"role": "user", "content": parts}, {"role": "assistant", "content": reply},
            {"role": "user", "content": "And then?"}]
    status2, _, second = s.chat({"messages": msgs, "max_tokens": 4, "temperature": 0,
                                 "cache_salt": "reuse"})
    after = s.metric("qvl_prefill_tokens_total")
    ok = status == 200 and status2 == 200
    p1 = first["usage"]["prompt_tokens"] if ok else 0
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"] if ok else -1
    check("next turn: cached_tokens covers the first turn's prompt (its video included)",
          ok and cached >= p1, (first, second))
    check("next turn: only the new tokens are prefilled",
          ok and after - before == second["usage"]["prompt_tokens"] - cached,
          (before, after, second.get("usage") if ok else second))
    other = [video_part("vid_cap", 3), {"type": "text", "text": " What happens?"}]
    status3, _, third = ask(s, other, cache_salt="reuse")
    cached3 = third["usage"]["prompt_tokens_details"]["cached_tokens"] if status3 == 200 else -1
    check("the same frames at another rate are another video (not reused)",
          status3 == 200 and 0 <= cached3 < 20, third)


def test_limits(s_small):
    urls = [data_url(f) for f in frames_of("vid_cap")]  # 20 frames
    status, _, body = ask(s_small, [video_part(None, 2, urls)])
    check("--max-video-frames: 400 in one line", is_400(status, body, "20 frames",
                                                        "--max-video-frames"), body)
    status, _, body = ask(s_small, [video_part(None, 1, urls[:6])])
    check("--max-video-seconds: 400 in one line", is_400(status, body, "--max-video-seconds"),
          body)
    status, _, body = ask(s_small, [video_part(None, 4, urls[:8])] * 2)
    check("a video over the context: 400 naming --ctx", is_400(status, body, "--ctx"), body)


def test_hostile(s):
    short = [data_url(f) for f in frames_of("vid_short")]
    cap0 = data_url(frames_of("vid_cap")[0])
    cases = [
        ("mixed frame sizes", video_part(None, 4, short[:3] + [cap0]), ["frame 4", "one size"]),
        ("a frame that is not base64", video_part(None, 4, short[:2] + ["data:image/png;base64,@@@"]),
         ["video frame 3", "base64"]),
        ("a frame that is not a picture", video_part(None, 4, short[:2] + [
            "data:image/png;base64," + base64.b64encode(b"not a picture").decode()]),
         ["video frame 3"]),
        ("a frame of another media type", video_part(None, 4, short[:2] + [
            data_url(frames_of("vid_short")[2], "text/plain")]), ["video frame 3", "image/"]),
        ("a frame that is not a string", video_part(None, 4, short[:2] + [7]), ["frame 3"]),
        ("an empty frame list", video_part(None, 4, []), ["empty"]),
        ("one frame", video_part(None, 4, short[:1]), ["at least 2"]),
        ("a frame from the network", video_part(None, 4, short[:2] + ["http://example.com/a.png"]),
         ["network"]),
        ("a local frame without --image-dir", video_part(None, 4, short[:2] + ["000.png"]),
         ["--image-dir"]),
        ("video not a list", {"type": "video", "video": "data:image/png;base64,AAAA"},
         ["list of frames"]),
        ("fps 0", video_part(None, 0, short), ["fps"]),
    ]
    for name, part, words in cases:
        status, _, body = ask(s, [part, {"type": "text", "text": "hi"}])
        check("hostile: " + name + " -> 400", is_400(status, body, *words), body)
    status, _, body = s.chat({"messages": [{"role": "user", "content": "hi"},
                                           {"role": "assistant", "content": [
                                               video_part(None, 4, short)]}], "max_tokens": 2})
    check("hostile: a video in an assistant message -> 400", is_400(status, body, "videos"), body)
    status, _, body = ask(s, [{"type": "text", "text": "<|video_pad|> typed"}])
    check("hostile: <|video_pad|> typed as text -> 400", is_400(status, body, "<|video_pad|>"), body)
    status, _, body = ask(s, [video_part("vid_short", 4), {"type": "text", "text": " What happens?"}])
    check("the server still answers after the hostile requests", status == 200, body)


def has_decoder():
    """Whether this qvl was built with FFmpeg (else --video says how to get it)."""
    r = subprocess.run([QVL, "run", "-m", MODEL, "-p", "x", "-n", "1", "--video",
                        os.path.join(FILES, "h264.mp4")], capture_output=True, timeout=300)
    return b"apt-get install libavformat-dev" not in r.stderr


def test_video_url(s, s_small):
    part = {"type": "video_url", "video_url": {"url": data_url(os.path.join(FILES, "h264.mp4"),
                                                               "video/mp4")}}
    text = {"type": "text", "text": " What happens?"}
    if not has_decoder():
        status, _, body = ask(s, [part, text])
        check("video_url without FFmpeg: 400 in one line", is_400(
            status, body, "not supported by this build"), body)
        return
    want = run_qvl(["--video", os.path.join(FILES, "h264.mp4")])
    status, _, body = ask(s, [part, text])
    check("video_url (data: URL of an MP4): greedy = qvl run --video", status == 200 and
          content_of(body) == want and want is not None, (body, want))
    status, _, body = ask(s, [{"type": "image_url", "image_url": {"url": data_url(
        frames_of("vid_short")[0])}}, part, text])
    check("a picture, then a video_url", status == 200, body)
    cases = [
        ("a broken file", "data:video/mp4;base64," + base64.b64encode(
            b"\0\0\0\x18ftypmp42" + b"\0" * 64).decode(), ["video_url"]),
        ("a truncated file", data_url(os.path.join(FILES, "truncated.mp4"), "video/mp4"),
         ["video_url"]),
        ("a picture's media type", data_url(frames_of("vid_short")[0]), ["video/"]),
    ]
    for name, url, words in cases:
        status, _, body = ask(s, [{"type": "video_url", "video_url": {"url": url}}, text])
        check("video_url: " + name + " -> 400 in one line", is_400(status, body, *words), body)
    long_file = {"type": "video_url", "video_url": {"url": data_url(
        os.path.join(FILES, "ten_hours.avi"), "video/x-msvideo")}}
    status, _, body = ask(s_small, [long_file, text])
    check("video_url: a 10-hour file over --max-video-seconds -> 400 naming it",
          is_400(status, body, "--max-video-seconds"), body)


def test_openai_client(s):
    try:
        import openai
    except ImportError:
        print("note: the openai package is not installed; OpenAI client check skipped")
        return
    want = run_qvl(["--video-frames", os.path.join(VIDEOS, "vid_short"), "--video-fps", "4"])
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="none",
                           max_retries=0)
    r = client.chat.completions.create(model="tiny", max_tokens=6, temperature=0, messages=[
        {"role": "user", "content": [video_part("vid_short", 4),
                                     {"type": "text", "text": " What happens?"}]}])
    check("openai client: a video part passes through, greedy = qvl run",
          r.choices[0].message.content == want, (r, want))
    if has_decoder():
        mp4 = os.path.join(FILES, "h264.mp4")
        want = run_qvl(["--video", mp4])
        r = client.chat.completions.create(model="tiny", max_tokens=6, temperature=0, messages=[
            {"role": "user", "content": [
                {"type": "video_url", "video_url": {"url": data_url(mp4, "video/mp4")}},
                {"type": "text", "text": " What happens?"}]}])
        check("openai client: a video_url MP4 passes through, greedy = qvl run --video",
              want is not None and r.choices[0].message.content == want, (r, want))


def main():
    tmp = tempfile.mkdtemp()
    s = serve_util.Server(QVL, tmp, "video", ["-m", MODEL, "--ctx", "512", "-b", "16"])
    small = serve_util.Server(QVL, tmp, "video_small", ["-m", MODEL, "--ctx", "48",
                                                        "--max-video-frames", "16",
                                                        "--max-video-seconds", "5"])
    try:
        if not check("servers ready", s.wait_ready() and small.wait_ready()):
            return 1
        test_parity(s)
        test_reuse(s)
        test_hostile(s)
        test_video_url(s, small)
        test_openai_client(s)
        test_limits(small)
    finally:
        rc, rc_small = s.stop(), small.stop()
    check("clean exit on SIGTERM", rc == 0 and rc_small == 0, (rc, rc_small))
    check("no sanitizer report", serve_util.sanitizer_clean(s.text()) and
          serve_util.sanitizer_clean(small.text()), s.text()[-2000:])
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
