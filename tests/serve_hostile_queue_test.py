#!/usr/bin/env python3
"""qvl serve under hostile picture and cache use (issue #32, findings 4, 5 and 9), on loopback.

usage: serve_hostile_queue_test.py QVL_BINARY SHARED_DATA_DIR
Exit 77 (skip) when SHARED_DATA_DIR has no Qwen3-VL tokenizer.json.

- Prefix cache partitions: two keys of --api-key-file and two cache_salt values never share a
  prefix (cached_tokens 0 across them) and do share it within one (equal cached_tokens).
- Picture memory budget (--max-image-memory): a queued picture request holds its pixels until
  its prefill; a picture that does not fit beside it waits (qvl_image_memory_waiting) and gets
  through once the earlier one has been prefilled; a client that leaves while waiting stops
  waiting; a picture larger than the whole budget is refused with 400.
- No global decode lock: a small picture is answered while a big one is still decoding.
- A decode whose client left frees its budget and is never queued; deadlines during decodes and
  budget waits give 503 timeout and free the budget; SIGTERM while pictures decode and wait for
  memory exits promptly.
Every wait is for an event (a metric reaching a value, a response, the process exiting), with
a generous bound; nothing depends on how fast the machine is."""
import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util as u  # noqa: E402

QVL, SHARED = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
check = u.Checks()
BOUND = 300  # seconds any awaited event may take (sanitised builds on a loaded machine)

# Pictures are resized to at most 256 x 256 (64 tokens) by the test model's preprocessor, so the
# vision encoder stays cheap while the decoded sizes (what the budget counts) stay large.
MAX_PIXELS, MIN_PIXELS, PATCH, TEMPORAL = 256 * 256, 64 * 64, 16, 2


def png(w, h, shade=0):
    """A w x h RGB PNG whose rows differ (zlib level 1: fast to make, still small)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    base = bytes((i + shade) & 255 for i in range(256)) * ((3 * w + 255) // 256 + 1)
    z = zlib.compressobj(1)
    parts = []
    for y in range(h):
        k = (y * 7) % 256
        parts.append(z.compress(b"\x00" + base[k:k + 3 * w]))
    parts.append(z.flush())
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b""))


def data_url(data):
    return "data:image/png;base64," + base64.b64encode(data).decode()


def smart_size(w, h):
    """The resized size, as smart_resize computes it for these sizes (square, no rounding)."""
    f = PATCH * 2
    if w * h > MAX_PIXELS:
        side = int((MAX_PIXELS ** 0.5) // f * f)
        return side, side
    return max(f, w // f * f), max(f, h // f * f)


def reservation(w, h):
    """Bytes a square w x h picture reserves while decoding (tools/serve/serve_image.c), and
    the part held until its prefill."""
    rw, rh = smart_size(w, h)
    held = (rw // PATCH) * (rh // PATCH) * 3 * TEMPORAL * PATCH * PATCH * 4
    return w * h * 11 + rw * rh * 3 + h * rw * 3 + held, held


def picture_request(url, max_tokens=1):
    return {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": "What is in the picture?"}]}],
        "max_tokens": max_tokens, "temperature": 0}


def wait_for(s, name, pred, seconds=BOUND):
    """The metric's value once pred holds (None if it never did within seconds)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        v = s.metric(name)
        if v is not None and pred(v):
            return v
        time.sleep(0.01)
    return None


def in_thread(fn, *args):
    out = []

    def run():
        try:
            out.append(fn(*args))
        except OSError as e:
            out.append((None, None, repr(e)))
    t = threading.Thread(target=run)
    t.start()
    return t, out


def send_and_leave(s, payload, key=None):
    """Sends a whole request, then closes the connection without reading the answer."""
    body = json.dumps(payload).encode()
    c = socket.create_connection(("127.0.0.1", s.port), timeout=BOUND)
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
            "application/json\r\nContent-Length: %d\r\n" % len(body))
    if key:
        head += "Authorization: Bearer %s\r\n" % key
    c.sendall(head.encode() + b"\r\n" + body)
    return c


def open_long_stream(s, key=None):
    """A streamed answer far longer than any test step: holds the only slot until closed."""
    c = send_and_leave(s, {"messages": u.user("Write a very long story"), "max_tokens": 30000,
                           "temperature": 0, "stream": True}, key)
    got = b""
    while b"data: " not in got:
        part = c.recv(4096)
        if not part:
            break
        got += part
    return c, got


def is_error(body, code=None):
    return (isinstance(body, dict) and isinstance(body.get("error"), dict) and
            isinstance(body["error"].get("message"), str) and
            (code is None or body["error"].get("code") == code))


# ---- prefix cache partitions -----------------------------------------------------------------

SYSTEM = ("You are the front desk of a hotel. The door code of room 12 is 4711; never tell it. "
          "Answer guests politely and briefly. ") * 4


def ask(s, key, salt, question):
    payload = {"messages": [{"role": "system", "content": SYSTEM},
                            {"role": "user", "content": question}],
               "max_tokens": 1, "temperature": 0}
    if salt is not None:
        payload["cache_salt"] = salt
    status, _, body = s.chat(payload, key=key)
    try:
        return status, body["usage"]["prompt_tokens_details"]["cached_tokens"]
    except (KeyError, TypeError):
        return status, body


def test_partitions(tmp, model):
    keys = os.path.join(tmp, "keys.txt")
    with open(keys, "w") as f:
        f.write("# two tenants\nkey-one\n\n  key-two  \n")
    s = u.Server(QVL, tmp, "partitions", ["-m", model, "--parallel", "1", "--ctx", "4096",
                                          "--api-key", "key-zero", "--api-key-file", keys])
    check("partitions: server ready", s.wait_ready())
    # Each question starts with a word of its own, so two of them share exactly the system
    # prompt and the user turn's header: the same prefix length for every "same" pair.
    steps = [("key-one", None, "Breakfast hours?", "fresh"),
             ("key-one", None, "Dinner hours?", "same key"),
             ("key-two", None, "Dinner hours?", "other key"),
             ("key-two", None, "Pool hours?", "same key"),
             ("key-two", "s1", "Pool hours?", "other salt"),
             ("key-two", "s1", "Gym hours?", "same key and salt"),
             ("key-two", "s2", "Gym hours?", "other salt"),
             ("key-zero", "s2", "Gym hours?", "--api-key is a key of its own")]
    got = []
    for key, salt, question, what in steps:
        status, cached = ask(s, key, salt, question)
        got.append((status, cached, what))
    ok_status = all(g[0] == 200 and isinstance(g[1], int) for g in got)
    check("partitions: every request answered", ok_status, got)
    if ok_status:
        shared = [g[1] for g in got if g[2].startswith("same")]
        across = [g[1] for g in got if not g[2].startswith("same")]
        check("partitions: cached_tokens 0 across keys and salts", all(c == 0 for c in across), got)
        check("partitions: within one key and salt the shared prefix is reused, equally",
              shared[0] > 0 and all(c == shared[0] for c in shared), got)
    status, _, body = s.chat({"messages": u.user("hi"), "max_tokens": 1, "cache_salt": 7},
                             key="key-one")
    check("partitions: a cache_salt that is not a string is 400",
          status == 400 and is_error(body) and body["error"].get("param") == "cache_salt",
          (status, body))
    status, _, body = s.chat({"messages": u.user("hi"), "max_tokens": 1}, key="key-three")
    check("partitions: a key in no list is 401", status == 401, (status, body))
    rc = s.stop()
    check("partitions: exit 0, no sanitizer report", rc == 0 and u.sanitizer_clean(s.text()),
          (rc, s.text()[-3000:]))

    empty = os.path.join(tmp, "empty-keys.txt")
    with open(empty, "w") as f:
        f.write("# none yet\n\n")
    r = subprocess.run([QVL, "serve", "-m", model, "--api-key-file", empty, "--port", "0"],
                       capture_output=True, timeout=BOUND)
    err = r.stderr.decode(errors="replace").strip()
    check("partitions: a key file with no key is refused in one line",
          r.returncode == 2 and "holds no key" in err and len(err.splitlines()) == 1, (r.returncode, err))


# ---- picture memory budget -------------------------------------------------------------------

def test_budget_queue(tmp, model):
    side = 1024
    need, held = reservation(side, side)
    # Room for one picture's decode, not for a held picture plus another decode.
    mib = (need >> 20) + 1
    assert need <= mib << 20 < held + need, (need, held, mib)
    s = u.Server(QVL, tmp, "budget", ["-m", model, "--parallel", "1", "--queue", "8", "--ctx",
                                      "32768", "--max-image-memory", str(mib)])
    check("budget: server ready", s.wait_ready())
    status, _, body = s.chat(picture_request(data_url(png(2048, 2048))))
    check("budget: a picture larger than the whole budget is 400 naming --max-image-memory",
          status == 400 and is_error(body) and "--max-image-memory" in body["error"]["message"],
          (status, body))

    stream, got = open_long_stream(s)
    check("budget: a long answer holds the only slot", b"data: " in got, got[:200])
    a_thread, a_out = in_thread(s.chat, picture_request(data_url(png(side, side, 1))))
    check("budget: picture A decoded and queued, holding its pixels",
          wait_for(s, "qvl_queue_length", lambda v: v == 1) == 1 and
          wait_for(s, "qvl_image_memory_bytes", lambda v: v == held) == held)
    b_thread, b_out = in_thread(s.chat, picture_request(data_url(png(side, side, 2))))
    check("budget: picture B waits for memory while A holds its pixels",
          wait_for(s, "qvl_image_memory_waiting", lambda v: v == 1) == 1)
    check("budget: B is not queued while it waits", s.metric("qvl_queue_length") == 1)

    # A third picture whose client leaves while it waits stops waiting.
    leaver = send_and_leave(s, picture_request(data_url(png(side, side, 3))))
    check("budget: a second waiter", wait_for(s, "qvl_image_memory_waiting", lambda v: v == 2) == 2)
    leaver.close()
    check("budget: a waiter whose client left stops waiting",
          wait_for(s, "qvl_image_memory_waiting", lambda v: v == 1) == 1)

    stream.close()  # the slot frees: A is prefilled, its pixels freed, B decodes and runs
    a_thread.join(BOUND)
    b_thread.join(BOUND)
    a, b = (a_out or [None])[0], (b_out or [None])[0]
    check("budget: A answered once the slot was free", a is not None and a[0] == 200, a)
    check("budget: B answered after A's pixels were freed", b is not None and b[0] == 200, b)
    check("budget: all picture memory given back",
          wait_for(s, "qvl_image_memory_bytes", lambda v: v == 0) == 0 and
          s.metric("qvl_image_memory_waiting") == 0)

    # The pixels go as soon as the prefill has used them, not when the answer ends: once a
    # long streamed answer has started, nothing is reserved and the request is still running.
    finished = s.metric("qvl_requests_total")
    payload = picture_request(data_url(png(side, side, 4)), max_tokens=30000)
    payload["stream"] = True
    c = send_and_leave(s, payload)
    got = b""
    while b"data: " not in got:
        part = c.recv(4096)
        if not part:
            break
        got += part
    check("budget: a long answer about a picture has started", b"data: " in got, got[:200])
    check("budget: its pixels were freed after the prefill, while it still generates",
          wait_for(s, "qvl_image_memory_bytes", lambda v: v == 0) == 0 and
          s.metric("qvl_requests_total") == finished,
          (s.metric("qvl_requests_total"), finished))
    c.close()
    rc = s.stop()
    check("budget: exit 0, no sanitizer report", rc == 0 and u.sanitizer_clean(s.text()),
          (rc, s.text()[-3000:]))


def test_decodes_concurrently(tmp, model, big_url, big_need):
    """A big picture decoding (seconds) does not hold up a small one. Should the big one end
    before the small one is answered (a very fast machine), the round proves nothing and runs
    again; three rounds that prove nothing fail (the old global lock never lets it pass)."""
    s = u.Server(QVL, tmp, "concurrent", ["-m", model, "--parallel", "1", "--ctx", "4096"])
    check("concurrent: server ready", s.wait_ready())
    small = data_url(png(64, 64, 5))
    proven, rounds = False, []
    for _ in range(3):
        big_thread, big_out = in_thread(s.chat, picture_request(big_url))
        seen = wait_for(s, "qvl_image_memory_bytes", lambda v: v >= big_need)
        if seen is None:
            big_thread.join(BOUND)
            break
        status, _, body = s.chat(picture_request(small))
        still = s.metric("qvl_image_memory_bytes")
        big_answered = bool(big_out)
        small_ok = status == 200
        big_thread.join(BOUND)
        rounds.append((seen, status, still, big_answered, [r[0] for r in big_out]))
        if small_ok and still is not None and still >= big_need and not big_answered:
            proven = True
            break
        if not small_ok:
            break
    check("concurrent: a small picture is answered while a big one still decodes", proven,
          rounds)

    # A client that leaves during a big decode: the decode is stopped (at the latest when it
    # ends), its memory given back, and nothing is queued for it.
    done_before = s.metric("qvl_requests_total")
    leaver = send_and_leave(s, picture_request(big_url))
    check("leave: the big picture is decoding",
          wait_for(s, "qvl_image_memory_bytes", lambda v: v >= big_need) is not None)
    leaver.close()
    check("leave: its memory is given back",
          wait_for(s, "qvl_image_memory_bytes", lambda v: v == 0) == 0)
    check("leave: it never reached the queue", s.metric("qvl_requests_total") == done_before,
          (done_before, s.metric("qvl_requests_total")))
    status, _, body = s.chat(picture_request(small))
    check("leave: the server answers pictures afterwards", status == 200, (status, body))
    rc = s.stop()
    check("concurrent: exit 0, no sanitizer report", rc == 0 and u.sanitizer_clean(s.text()),
          (rc, s.text()[-3000:]))


def test_deadline(tmp, model, big_url, big_need):
    """Two big pictures, room for one, a 1 s deadline: whether a picture's deadline passes while
    it waits, while it decodes or in the queue, the answer is 200 or 503 timeout, and every byte
    comes back."""
    mib = (big_need >> 20) + 8
    s = u.Server(QVL, tmp, "deadline", ["-m", model, "--parallel", "1", "--ctx", "4096",
                                        "--request-timeout", "1", "--max-image-memory", str(mib)])
    check("deadline: server ready", s.wait_ready())
    threads = [in_thread(s.chat, picture_request(big_url)) for _ in range(2)]
    for t, _ in threads:
        t.join(BOUND)
    results = [(out or [(None, None, None)])[0] for _, out in threads]
    check("deadline: each answered 200 or 503 timeout",
          all(r[0] == 200 or (r[0] == 503 and is_error(r[2], "timeout")) for r in results),
          [(r[0], r[2]) for r in results])
    # Which one runs out of time, and where, depends on the machine's speed: not checked.
    print("     deadline: statuses %s" % [r[0] for r in results], flush=True)
    check("deadline: all picture memory given back",
          wait_for(s, "qvl_image_memory_bytes", lambda v: v == 0) == 0 and
          s.metric("qvl_image_memory_waiting") == 0)
    rc = s.stop()
    check("deadline: exit 0, no sanitizer report", rc == 0 and u.sanitizer_clean(s.text()),
          (rc, s.text()[-3000:]))


def test_sigterm(tmp, model, big_url, big_need):
    """SIGTERM while one big picture decodes and another waits for memory: prompt exit."""
    mib = (big_need >> 20) + 8
    s = u.Server(QVL, tmp, "sigterm", ["-m", model, "--parallel", "1", "--ctx", "4096",
                                       "--max-image-memory", str(mib)])
    check("sigterm: server ready", s.wait_ready())
    threads = [in_thread(s.chat, picture_request(big_url)) for _ in range(2)]
    check("sigterm: one picture decodes, one waits for memory",
          wait_for(s, "qvl_image_memory_waiting", lambda v: v == 1) == 1)
    rc = s.stop()  # SIGTERM, then waits up to 60 s for the exit ("hung" past that)
    check("sigterm: the server exits promptly with 0", rc == 0, (rc, s.text()[-2000:]))
    for t, _ in threads:
        t.join(BOUND)
    results = [(out or [(None, None, None)])[0] for _, out in threads]
    check("sigterm: every client got its answer or 503 or a closed connection",
          all(r[0] in (None, 200, 503) for r in results), [(r[0], r[2]) for r in results])
    check("sigterm: no sanitizer report", u.sanitizer_clean(s.text()), s.text()[-3000:])


def main():
    tok = u.tokenizer_path(SHARED) if SHARED else ""
    if not tok or not os.path.isfile(tok):
        print("skip: no Qwen3-VL tokenizer under %r" % SHARED)
        return 77
    tmp = tempfile.mkdtemp(prefix="qvl-serve-hostile-queue-")
    try:
        model = u.make_tiny_model(QVL, tmp, tok, {"max_position_embeddings": 32768})
        with open(os.path.join(model, "preprocessor_config.json"), "w") as f:
            json.dump({"size": {"longest_edge": MAX_PIXELS, "shortest_edge": MIN_PIXELS},
                       "patch_size": PATCH, "temporal_patch_size": TEMPORAL, "merge_size": 2,
                       "image_mean": [0.5] * 3, "image_std": [0.5] * 3}, f)
        test_partitions(tmp, model)
        test_budget_queue(tmp, model)
        # 8192 x 8192: the largest picture the decoders accept; seconds to decode and resize.
        big_url = data_url(png(8192, 8192, 9))
        big_need, _ = reservation(8192, 8192)
        test_decodes_concurrently(tmp, model, big_url, big_need)
        test_deadline(tmp, model, big_url, big_need)
        test_sigterm(tmp, model, big_url, big_need)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
