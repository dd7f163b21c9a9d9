#!/usr/bin/env python3
"""qvl serve under hostile request bodies (issue #32, findings 1 and 12), on loopback with the
tiny random-weight model around the real Qwen3-VL tokenizer.

usage: serve_hostile_body_test.py QVL_BINARY SHARED_DATA_DIR
Exit 77 (skip) when SHARED_DATA_DIR has no Qwen3-VL tokenizer.json.

Checked:
  - a body within the default --max-body padded with millions of small values is refused (413,
    naming the limit) and the server's peak memory (VmHWM) barely moves, where building the
    tree took gigabytes; the default --max-body is 24 MiB;
  - memory is given back after big bodies (VmRSS after several concurrent big requests);
  - U+0000 in a string, bytes after the JSON object and duplicate keys are 400 naming the field;
  - a vision special token typed in text is 400 and leaves the slot's prefix cache as it was;
  - with --image-dir, a path outside it, a missing one and symlinks leading out all get the
    same answer."""
import base64
import json
import os
import shutil
import socket
import sys
import tempfile
import time

import serve_util

QVL, SHARED = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
HERE = os.path.dirname(os.path.abspath(__file__))
SMALL_PNG = os.path.join(HERE, "fixtures", "tiny-tied", "small.png")
check = serve_util.Checks()


def proc_status(pid, field):
    """A /proc/PID/status figure in bytes (VmHWM: peak resident memory; VmRSS: now)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field + " not in /proc/%d/status" % pid)


def post(s, raw):
    status, _, data = s.request("POST", "/v1/chat/completions", raw,
                                headers={"Content-Type": "application/json"}, timeout=300)
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data


def error_of(body):
    return body.get("error", {}) if isinstance(body, dict) else {}


HELLO = {"messages": serve_util.user("Tell me a story about a cat"), "max_tokens": 2,
         "temperature": 0}


def padded_body(element, target_bytes):
    """HELLO with an unknown key holding a list of `element`, about target_bytes long."""
    head = json.dumps(HELLO)[:-1] + ', "pad": ['
    n = (target_bytes - len(head) - 2) // (len(element) + 1)
    return (head + ",".join([element] * n) + "]}").encode()


def test_memory(s):
    pid = s.proc.pid
    before = proc_status(pid, "VmHWM")
    for element in ("0", "{}"):
        body = padded_body(element, 23 << 20)  # within the default --max-body (24 MiB)
        status, b = post(s, body)
        e = error_of(b)
        check("413 a %d MB body of '%s' values, naming the limit" % (len(body) >> 20, element),
              status == 413 and "SERVE_MAX_JSON_VALUES" in e.get("message", ""), (status, b))
    grown = proc_status(pid, "VmHWM") - before
    # The bodies themselves are 2 x 23 MB (and the buffer they grow in); their trees would have
    # been gigabytes.
    check("peak memory grew by less than 256 MiB", grown < 256 << 20, "%d MiB" % (grown >> 20))
    # The default --max-body: one byte more than 24 MiB is refused from its Content-Length.
    c = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
              b"\r\nContent-Length: %d\r\n\r\n" % ((24 << 20) + 1))
    reply = b""
    while b"}}" not in reply:
        part = c.recv(4096)
        if not part:
            break
        reply += part
    c.close()
    check("413 a body over the default --max-body of 24 MiB", reply.startswith(b"HTTP/1.1 413")
          and b"25165824" in reply, reply[:300])
    status, _, b = s.chat(HELLO)
    check("answers after the padded bodies", status == 200, b)


def test_memory_given_back(s):
    """Concurrent requests with big strings (an unknown key: parsed, then dropped), then the
    resident memory must come back near where it was: glibc keeps freed memory in each
    connection thread's arena unless it is trimmed."""
    if os.environ.get("QVL_SANITIZED"):
        print("skip memory given back: a sanitizer build's allocator (ASan's quarantine) does "
              "not give memory back through malloc_trim; the Release run checks it")
        return
    pid = s.proc.pid
    status, _, _ = s.chat(HELLO)
    base = proc_status(pid, "VmRSS")
    body = (json.dumps(HELLO)[:-1] + ', "note": "' + "x" * (12 << 20) + '"}').encode()
    results = [None] * 4

    def worker(i):
        results[i] = post(s, body)[0]

    for _ in range(3):
        serve_util.run_concurrently(worker, 4)
    check("big string bodies answered", results == [200] * 4, results)
    # The memory is given back when a connection's request completes, which the server may
    # finish just after the client has read its answer: wait for it (bounded).
    deadline = time.time() + 30
    after = proc_status(pid, "VmRSS")
    while after - base >= 32 << 20 and time.time() < deadline:
        time.sleep(0.05)
        after = proc_status(pid, "VmRSS")
    check("resident memory back within 32 MiB after 12 bodies of 12 MB",
          after - base < 32 << 20, "base %d MiB, after %d MiB" % (base >> 20, after >> 20))


def test_strict_json(s):
    text = json.dumps(HELLO)
    cases = [
        ("U+0000 in content", json.dumps({"messages": serve_util.user("before\u0000after")}),
         "messages[0].content", "U+0000"),
        ("U+0000 in a text part", json.dumps({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b\u0000c"}]}]}),
         "messages[0].content[1].text", "U+0000"),
        ("bytes after the object", text + " trailing", None, "after"),
        ("a second object after the first", text + text, None, "after"),
        ("duplicate top-level key", text[:-1] + ', "messages": []}', "messages", "duplicate"),
        ("duplicate key in a message",
         '{"messages": [{"role": "user", "content": "a", "content": "b"}]}',
         "messages[0].content", "duplicate"),
        ("duplicate key in stream_options",
         text[:-1] + ', "stream_options": {"include_usage": true, "include_usage": false}}',
         "stream_options.include_usage", "duplicate"),
    ]
    for name, raw, param, word in cases:
        status, b = post(s, raw.encode())
        e = error_of(b)
        check("400 " + name, status == 400 and word in e.get("message", "") and
              (param is None or e.get("param") == param), (status, b))
    status, b = post(s, (text + " \r\n\t").encode())
    check("whitespace after the object is fine", status == 200, (status, b))


def test_vision_tokens(s):
    status, _, first = s.chat(HELLO)
    status2, _, again = s.chat(HELLO)
    cached = again.get("usage", {}).get("prompt_tokens_details", {}).get("cached_tokens", 0) \
        if status2 == 200 else 0
    check("the same prompt twice comes from the cache", status == 200 and cached > 0, again)
    for token in ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>", "<|video_pad|>"):
        status, _, b = s.chat({"messages": serve_util.user("look: " + token), "max_tokens": 2})
        e = error_of(b)
        check("400 %s typed as text" % token, status == 400 and token in e.get("message", "") and
              e.get("param") == "messages[0].content", (status, b))
    # Split over two text parts: only the tokenizer sees it whole.
    split = [{"role": "user", "content": [{"type": "text", "text": "look: <|image_"},
                                          {"type": "text", "text": "pad|> here"}]}]
    status, _, b = s.chat({"messages": split, "max_tokens": 2})
    check("400 <|image_pad|> split over two text parts", status == 400 and
          "<|image_pad|>" in error_of(b).get("message", "") and
          error_of(b).get("param") == "messages", (status, b))
    status, _, b = s.chat(HELLO)
    now = b.get("usage", {}).get("prompt_tokens_details", {}).get("cached_tokens", -1) \
        if status == 200 else -1
    check("the slot's cache is as it was after the refusals", now == cached, (cached, b))


def test_image_dir(s, image_dir, outside):
    def answer(ref):
        m = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": ref}},
                                          {"type": "text", "text": "what?"}]}]
        status, _, b = s.chat({"messages": m, "max_tokens": 2})
        return status, json.dumps(b, sort_keys=True)

    status, _ = answer("small.png")
    check("a picture under --image-dir is read", status == 200, status)
    secret = os.path.join(outside, "secret.png")
    refs = {
        "existing file outside": secret,
        "missing file outside": os.path.join(outside, "missing.png"),
        "file:// URL outside": "file://" + secret,
        "../ to an existing file": "../outside/secret.png",
        "../ to a missing file": "../outside/missing.png",
        "symlink to an existing file outside": "to_secret.png",
        "symlink to a missing file outside": "to_missing.png",
        "symlink to a directory outside, file in it": "to_outside/secret.png",
        "a file used as a directory": secret + "/x.png",
        "missing file inside": "nope.png",
    }
    answers = {name: answer(ref) for name, ref in refs.items()}
    first = answers["existing file outside"]
    check("400 for a path outside --image-dir", first[0] == 400, first)
    for name, got in answers.items():
        check("same answer as an existing file outside: " + name, got == first, (got, first))


def main():
    tokenizer = serve_util.tokenizer_path(SHARED)
    if not os.path.isfile(tokenizer):
        print("skip: %s absent (qvl serve tests need the real tokenizer)" % tokenizer)
        return 77
    tmp = tempfile.mkdtemp(prefix="qvl-serve-body-")
    try:
        model = serve_util.make_tiny_model(QVL, tmp, tokenizer)
        image_dir = os.path.join(tmp, "pictures")
        outside = os.path.join(tmp, "outside")
        os.mkdir(image_dir)
        os.mkdir(outside)
        shutil.copy(SMALL_PNG, image_dir)
        shutil.copy(SMALL_PNG, os.path.join(outside, "secret.png"))
        os.symlink(os.path.join(outside, "secret.png"), os.path.join(image_dir, "to_secret.png"))
        os.symlink(os.path.join(outside, "missing.png"), os.path.join(image_dir, "to_missing.png"))
        os.symlink(outside, os.path.join(image_dir, "to_outside"))
        # One slot, so that every request meets the same cache; the default --max-body.
        s = serve_util.Server(QVL, tmp, "body", ["-m", model, "--parallel", "1", "--ctx", "4096",
                                                 "--image-dir", image_dir])
        if not check("server ready", s.wait_ready(), s.text()):
            return 1
        test_memory(s)
        test_strict_json(s)
        test_vision_tokens(s)
        test_image_dir(s, image_dir, outside)
        test_memory_given_back(s)
        rc = s.stop()
        log = s.text()
        check("SIGTERM: exit 0, no sanitizer report", rc == 0 and serve_util.sanitizer_clean(log),
              (rc, log[-3000:]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    check.summary()
    return 0 if check.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
