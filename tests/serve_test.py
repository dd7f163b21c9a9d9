#!/usr/bin/env python3
"""qvl serve, end to end on loopback: a random-weight model with the real Qwen3-VL tokenizer,
driven with Python's standard library only.

usage: serve_test.py QVL_BINARY SOURCE_DIR SHARED_DATA_DIR
Exit 77 (skip) when SHARED_DATA_DIR has no Qwen3-VL tokenizer.json.

Checked: greedy answers equal `qvl run` on the same prompt (text and with a picture), streaming
(chunks, finish_reason, usage, [DONE]) equals the whole answer, stop strings, seeds, prefix
reuse (cached_tokens), concurrent clients equal one-at-a-time answers, n = 3 choices sharing
one prefill (/metrics), images by data: URL and
under --image-dir, every error status with OpenAI's error shape, the API key, /health,
/v1/models, /metrics, a client leaving mid-stream, a full queue (429), slow and oversized
clients, and a clean exit on SIGTERM (no sanitizer report)."""
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

import serve_util

QVL, SRC, SHARED = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""
TOKENIZER = os.path.join(SHARED, "qwen3-vl-2b-instruct", "tokenizer.json")
FIXTURES = os.path.join(SRC, "tests", "fixtures", "tiny-tied")
KEY = "sekrit-key"

passed, failures = 0, 0


def check(name, ok, detail=""):
    global passed, failures
    if ok:
        passed += 1
        print("ok   " + name)
    else:
        failures += 1
        print("FAIL " + name + (": " + str(detail)[:600] if detail != "" else ""))
    sys.stdout.flush()
    return ok


# The model: real token ids for the ChatML and vision tokens, tiny layers (serve_util.py).
CONFIG = serve_util.TINY_CONFIG


def Server(tmp, name, args):
    """Requests carry KEY unless a check says otherwise (key=None or another key); a server
    started without --api-key ignores it."""
    return serve_util.Server(QVL, tmp, name, args, key=KEY)


def is_error(body, status_type=None, code=None):
    if not isinstance(body, dict) or set(body) != {"error"}:
        return False
    e = body["error"]
    if set(e) != {"message", "type", "param", "code"} or not e["message"]:
        return False
    if status_type and e["type"] != status_type:
        return False
    return code is None or e["code"] == code


user = serve_util.user
content_of = serve_util.content_of
run_concurrently = serve_util.run_concurrently
sanitizer_clean = serve_util.sanitizer_clean


def run_qvl(model, prompt, n, image=None):
    cmd = [QVL, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0"]
    if image:
        cmd += ["--image", image]
    out = subprocess.run(cmd, capture_output=True, timeout=120)
    return out.stdout.decode("utf-8")[:-1] if out.returncode == 0 else None  # its final '\n'


def test_basics(s, model):
    status, _, body = s.request("GET", "/health", key=None)
    check("/health ok without a key", status == 200 and json.loads(body) == {"status": "ok"}, body)
    status, _, body = s.request("GET", "/v1/models")
    ids = [m.get("id") for m in json.loads(body).get("data", [])] if status == 200 else []
    check("/v1/models lists the model", ids == [os.path.basename(model)], body)
    status, _, body = s.request("GET", "/v1/models", key=None)
    check("401 without a key", status == 401 and is_error(json.loads(body), "authentication_error"), body)
    status, _, body = s.request("GET", "/v1/models", key="wrong")
    check("401 with a wrong key", status == 401 and is_error(json.loads(body)), body)
    status, _, body = s.request("GET", "/metrics", key=None)
    check("/metrics needs the key", status == 401, status)


def test_greedy(s, model):
    want = run_qvl(model, "Hello there", 12)
    status, _, body = s.chat({"model": "x", "messages": user("Hello there"), "max_tokens": 12,
                              "temperature": 0})
    got = content_of(body)
    check("greedy answer = qvl run", status == 200 and want is not None and got == want,
          "%s vs %r" % (body, want))
    ok_shape = (status == 200 and body.get("object") == "chat.completion" and
                body["id"].startswith("chatcmpl-") and body["choices"][0]["finish_reason"] == "length"
                and body["usage"]["completion_tokens"] == 12 and
                body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 12)
    check("completion shape, usage and finish_reason length", ok_shape, body)
    status, _, body2 = s.chat({"messages": user("Hello there"), "max_completion_tokens": 12,
                               "temperature": 0})
    check("max_completion_tokens and prefix reuse give the same answer",
          status == 200 and content_of(body2) == got, body2)
    cached = body2.get("usage", {}).get("prompt_tokens_details", {}).get("cached_tokens")
    check("same prompt again: all but the last prompt token come from the cache",
          cached == body["usage"]["prompt_tokens"] - 1, body2.get("usage"))
    return got, body["usage"]["prompt_tokens"]


def test_stream(s, want):
    payload = {"messages": user("Hello there"), "max_tokens": 12, "temperature": 0,
               "stream": True, "stream_options": {"include_usage": True}}
    status, ctype, events, done = s.stream(payload)
    check("stream: 200 text/event-stream", status == 200 and ctype.startswith("text/event-stream"),
          (status, ctype))
    choices = [e for e in events if e.get("choices")]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in choices)
    check("stream: first chunk has the role", bool(choices) and
          choices[0]["choices"][0]["delta"].get("role") == "assistant", events[:1])
    check("stream: all chunks are chat.completion.chunk with one id",
          all(e["object"] == "chat.completion.chunk" for e in events) and
          len({e["id"] for e in events}) == 1, events[:2])
    check("stream: text = the whole answer", text == want, repr(text))
    check("stream: finish_reason length at the end",
          choices and choices[-1]["choices"][0]["finish_reason"] == "length" and
          all(c["choices"][0]["finish_reason"] is None for c in choices[:-1]), choices[-1:])
    last = events[-1] if events else {}
    check("stream: usage in a last chunk without choices", last.get("choices") == [] and
          last.get("usage", {}).get("completion_tokens") == 12, last)
    check("stream: [DONE] at the end", done)
    status, _, events, done = s.stream({"messages": user("Hello there"), "max_tokens": 3,
                                        "stream": True, "temperature": 0})
    check("stream without include_usage: no usage chunk",
          status == 200 and done and all("usage" not in e for e in events), events)


def test_stop_and_seed(s, want):
    # A stop string taken from the middle of the greedy answer cuts it there.
    cut = max(1, len(want) // 2)
    stop = want[cut:cut + 3]
    expect = want[:want.find(stop)]
    status, _, body = s.chat({"messages": user("Hello there"), "max_tokens": 12,
                              "temperature": 0, "stop": [stop, "zzzz-never"]})
    check("stop string cuts the answer, finish_reason stop",
          status == 200 and content_of(body) == expect and
          body["choices"][0]["finish_reason"] == "stop", (body, stop, expect))
    status, _, events, done = s.stream({"messages": user("Hello there"), "max_tokens": 12,
                                        "temperature": 0, "stop": stop, "stream": True})
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
    check("stream with stop: same cut, no stop text leaked", text == expect and done and
          events[-1]["choices"][0]["finish_reason"] == "stop", repr(text))
    p = {"messages": user("Tell me a story"), "max_tokens": 16, "temperature": 1.0, "seed": 1234,
         "top_p": 0.95, "top_k": 50, "min_p": 0.01, "presence_penalty": 0.5,
         "frequency_penalty": 0.5}
    a, b = s.chat(p)[2], s.chat(p)[2]
    check("same seed, same sampled answer", content_of(a) is not None and
          content_of(a) == content_of(b), (a, b))


def png_bytes(w, h):
    """A grey w x h RGB PNG (compresses to little)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + b"\x80" * (3 * w) for _ in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def test_images(s, model, image_dir):
    png = os.path.join(FIXTURES, "small.png")
    url = "data:image/png;base64," + base64.b64encode(open(png, "rb").read()).decode()
    want = run_qvl(model, "What is in the picture?", 8, image=png)
    msg = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                        {"type": "text", "text": "What is in the picture?"}]}]
    status, _, body = s.chat({"messages": msg, "max_tokens": 8, "temperature": 0})
    check("image by data: URL = qvl run --image", status == 200 and want is not None and
          content_of(body) == want, (body, want))
    check("image: its 64 tokens count in prompt_tokens", status == 200 and
          body["usage"]["prompt_tokens"] > 64, body.get("usage"))
    for name, ref in (("relative name", "small.png"),
                      ("file:// URL", "file://" + os.path.join(image_dir, "small.png"))):
        m = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": ref}},
                                          {"type": "text", "text": "What is in the picture?"}]}]
        status, _, b = s.chat({"messages": m, "max_tokens": 8, "temperature": 0})
        check("image under --image-dir by " + name, status == 200 and content_of(b) == want, b)
    # Multi-turn: the second turn reuses the picture and the first answer from the cache.
    first = body["usage"]["prompt_tokens"] if status == 200 else 0
    turn2 = msg + [{"role": "assistant", "content": content_of(body) or ""},
                   {"role": "user", "content": "And the colours?"}]
    status, _, b = s.chat({"messages": turn2, "max_tokens": 4, "temperature": 0})
    cached = b.get("usage", {}).get("prompt_tokens_details", {}).get("cached_tokens", 0) if status == 200 else 0
    check("second turn: the picture and the history come from the cache",
          status == 200 and cached >= first, b.get("usage") if isinstance(b, dict) else b)
    warm_turn2 = ({"messages": turn2, "max_tokens": 4, "temperature": 0}, content_of(b))
    two = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                        {"type": "image_url", "image_url": url},
                                        {"type": "text", "text": "Same?"}]}]
    status, _, b = s.chat({"messages": two, "max_tokens": 2})
    check("two images in one message", status == 200 and b["usage"]["prompt_tokens"] > 128, b)
    # Two 2048x2048 pictures take 2 x 4096 tokens, more than --ctx 8192 leaves: the second is
    # refused from its header, before it is decoded.
    big = "data:image/png;base64," + base64.b64encode(png_bytes(2048, 2048)).decode()
    m = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": big}}] * 3}]
    status, _, b = s.chat({"messages": m})
    check("400 pictures that overflow the context", status == 400 and is_error(b) and
          "--ctx" in b["error"]["message"] and b["error"]["param"] == "messages[0].content[1]", b)
    bad = [
        ("http URL refused, no fetch", "http://127.0.0.1:9/x.png", "network"),
        ("https URL refused", "https://example.com/cat.jpg", "network"),
        ("file outside --image-dir", "file:///etc/passwd", "no such file"),
        ("../ escape from --image-dir", "../" * 8 + "etc/passwd", "no such file"),
        ("missing file", "nope.png", "no such file"),
        ("bad base64", "data:image/png;base64,@@@@", "base64"),
        ("base64 that is not a picture", "data:image/png;base64," +
         base64.b64encode(b"not a picture at all").decode(), "image_url"),
        ("data: URL without base64", "data:image/png,abc", "base64"),
        ("data: URL of another media type", "data:text/plain;base64,aGVsbG8=", "image/"),
    ]
    for name, ref, word in bad:
        m = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": ref}}]}]
        status, _, b = s.chat({"messages": m})
        check("400 " + name, status == 400 and is_error(b, "invalid_request_error") and
              word in b["error"]["message"], (status, b))
    return warm_turn2


def test_errors(s):
    def post_raw(body, ctype="application/json", headers=None):
        h = {"Content-Type": ctype} if ctype else {}
        h.update(headers or {})
        status, _, data = s.request("POST", "/v1/chat/completions", body, headers=h)
        try:
            return status, json.loads(data)
        except ValueError:
            return status, data

    cases = [
        ("malformed JSON", b'{"messages": [', 400, None),
        ("JSON that is not an object", b'[1, 2]', 400, None),
        ("deep JSON", b'[' * 100000 + b']' * 100000, 400, None),
        ("empty body", b'', 400, None),
        ("no messages", {"model": "m"}, 400, "messages"),
        ("empty messages", {"messages": []}, 400, "messages"),
        ("n = 0", {"messages": user("hi"), "n": 0}, 400, "n"),
        ("n too large", {"messages": user("hi"), "n": 17}, 400, "n"),
        ("temperature not a number", {"messages": user("hi"), "temperature": "hot"}, 400, "temperature"),
        ("temperature out of range", {"messages": user("hi"), "temperature": 9}, 400, "temperature"),
        ("top_p out of range", {"messages": user("hi"), "top_p": 1.5}, 400, "top_p"),
        ("max_tokens 0", {"messages": user("hi"), "max_tokens": 0}, 400, "max_tokens"),
        ("max_tokens not an integer", {"messages": user("hi"), "max_tokens": 2.5}, 400, "max_tokens"),
        ("stop not a string", {"messages": user("hi"), "stop": 5}, 400, "stop"),
        ("unknown role", {"messages": [{"role": "function", "content": "x"}]}, 400, "messages[0]"),
        ("system message not first", {"messages": user("hi") + [{"role": "system", "content": "s"}]},
         400, "messages[1]"),
        ("content part of unknown type", {"messages": [{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {}}]}]}, 400, "messages[0].content[0]"),
        ("top_logprobs out of range", {"messages": user("hi"), "logprobs": True, "top_logprobs": 21},
         400, "top_logprobs"),
        ("top_logprobs without logprobs", {"messages": user("hi"), "top_logprobs": 2}, 400,
         "top_logprobs"),
        ("logit_bias out of range", {"messages": user("hi"), "logit_bias": {"5": 101}}, 400,
         "logit_bias"),
        ("logit_bias key not a token id", {"messages": user("hi"), "logit_bias": {"x": 1}}, 400,
         "logit_bias"),
        ("response_format of unknown type", {"messages": user("hi"), "response_format": {
            "type": "yaml"}}, 400, "response_format.type"),
        ("prompt longer than the context", {"messages": user("word " * 9000)}, 400, None),
    ]
    for name, body, want, param in cases:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        status, b = post_raw(raw)
        ok = status == want and is_error(b, "invalid_request_error")
        if ok and param:
            ok = b["error"]["param"] == param
        check("400 %s" % name, ok, (status, b))
    status, b = post_raw(json.dumps({"messages": user("word " * 9000)}).encode())
    check("context overflow has code context_length_exceeded",
          status == 400 and b["error"]["code"] == "context_length_exceeded", b)
    status, b = post_raw(b'{"messages": []}', ctype="text/plain")
    check("415 wrong content type", status == 415 and is_error(b), (status, b))
    status, b = post_raw(b'{"messages": []}', ctype=None)
    check("415 no content type", status == 415 and is_error(b), (status, b))
    # The answer comes after the headers, before the body is read (as curl's Expect: 100-continue
    # would wait for); the body is then never read.
    c = raw_socket(s)
    c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" % (2 << 20))
    reply = b""
    try:
        while b"}}" not in reply:
            part = c.recv(4096)
            if not part:
                break
            reply += part
    except (ConnectionResetError, socket.timeout):
        pass
    c.close()
    head, _, body = reply.partition(b"\r\n\r\n")
    body = body[body.find(b"{"):body.rfind(b"}") + 1] if b"{" in body else body
    try:
        b = json.loads(body)
    except ValueError:
        b = body
    check("413 body over --max-body", head.startswith(b"HTTP/1.1 413") and is_error(b), reply[:300])
    status, _, data = s.request("GET", "/v1/nothing-here")
    check("404 unknown path", status == 404 and is_error(json.loads(data)), data)
    status, headers, data = s.request("GET", "/v1/chat/completions")
    check("405 GET on chat completions, Allow: POST", status == 405 and
          headers.get("allow") == "POST" and is_error(json.loads(data)), (status, headers, data))
    status, _, data = s.request("POST", "/health", b"{}", headers={"Content-Type": "application/json"})
    check("405 POST on /health", status == 405 and is_error(json.loads(data)), data)
    status, headers, data = s.request("PUT", "/v1/chat/completions", b"{}",
                                      headers={"Content-Type": "application/json"})
    check("405 PUT on chat completions", status == 405 and is_error(json.loads(data)), data)
    status, b = post_raw(b'{"messages": []}', headers={"Authorization": "Bearer nope"})
    check("401 on chat completions with a wrong key", status == 401 and
          is_error(b, "authentication_error", "invalid_api_key"), b)


def raw_socket(s):
    return socket.create_connection(("127.0.0.1", s.port), timeout=30)


def test_hostile(s, timeout):
    # Slowloris: a request that never finishes its headers is closed after --timeout, and
    # others are served meanwhile.
    slow = raw_socket(s)
    slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
    status, _, _ = s.request("GET", "/health")
    check("served while a client stalls", status == 200)
    slow.settimeout(timeout + 20)
    t0 = time.time()
    try:
        closed = slow.recv(4096) == b""
    except (ConnectionResetError, socket.timeout):
        closed = False
    check("a stalled client is closed after --timeout", closed and time.time() - t0 < timeout + 15,
          time.time() - t0)
    slow.close()
    # A chunked body without a length that grows past --max-body: the connection is closed.
    c = raw_socket(s)
    c.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + KEY.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"a" * 65536
    reply = None
    try:
        for _ in range(64):  # 4 MiB against --max-body 1 MiB
            c.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        c.settimeout(10)
        reply = c.recv(4096)  # b"": closed
    except (BrokenPipeError, ConnectionResetError):
        reply = b""
    except socket.timeout:
        reply = None  # still open and silent: the body was swallowed
    c.close()
    closed = reply == b""
    check("oversized chunked body stopped", closed)
    # Garbage instead of HTTP.
    c = raw_socket(s)
    c.sendall(b"\x00\x01\x02 nonsense \r\n\r\n")
    try:
        c.settimeout(10)
        reply = c.recv(4096)
    except (ConnectionResetError, socket.timeout):
        reply = b""
    c.close()
    check("garbage request line: 400 or closed", reply == b"" or reply.startswith(b"HTTP/1.1 400"), reply[:80])
    status, _, _ = s.request("GET", "/health")
    check("healthy after the hostile clients", status == 200)


def test_concurrent(s):
    prompts = ["Count to five", "Name a colour", "What is rain?", "Say hello"]
    alone = {p: content_of(s.chat({"messages": user(p), "max_tokens": 10, "temperature": 0})[2])
             for p in prompts}
    results = {}

    def worker(i):
        p = prompts[i % len(prompts)]
        results[i] = (p, content_of(s.chat({"messages": user(p), "max_tokens": 10, "temperature": 0})[2]))

    run_concurrently(worker, 6)
    check("6 concurrent clients get the one-at-a-time answers",
          len(results) == 6 and all(alone[p] is not None and got == alone[p] for p, got in results.values()),
          (alone, results))


def test_n_shared_prefill(s):
    """n = 3 on 2 slots: the prompt is prefilled once; the other choices copy it (the third
    once a slot is free, from a slot that still holds it) and run only its last token."""
    names = ["qvl_prefills_total", "qvl_prefill_tokens_total", "qvl_prompt_tokens_cached_total"]
    before = {n: s.metric(n) for n in names}
    # A salt of its own: nothing of an earlier request's cache is reused by the first choice.
    status, _, body = s.chat({"messages": user("Tell me about the sea"), "max_tokens": 8,
                              "temperature": 0, "n": 3, "cache_salt": "n-shared"})
    after = {n: s.metric(n) for n in names}
    texts = [c["message"]["content"] for c in body["choices"]] if status == 200 else []
    check("n = 3 at temperature 0: three equal answers", len(texts) == 3 and
          len(set(texts)) == 1, body)
    prompt = body["usage"]["prompt_tokens"] if status == 200 else 0
    check("n = 3: the first choice prefilled the whole prompt",
          status == 200 and body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, body)
    delta = {n: after[n] - before[n] for n in names if after[n] is not None and before[n] is not None}
    check("n = 3: choices 2 and 3 reused all but the last prompt token",
          delta.get("qvl_prompt_tokens_cached_total") == 2 * (prompt - 1), (prompt, delta))
    check("n = 3: the prompt was prefilled once (the others ran its last token)",
          delta.get("qvl_prefills_total") == 3 and
          delta.get("qvl_prefill_tokens_total") == prompt + 2, (prompt, delta))


def test_sixteen_clients(tmp, model):
    """16 clients at once on 4 slots (12 wait in the queue): answers that end at different
    steps keep changing which sequences share a batched step; each greedy answer must still
    be the one the request gets alone."""
    s = Server(tmp, "sixteen", ["-m", model, "--parallel", "4", "--queue", "16", "--ctx", "4096"])
    check("16 clients: server ready", s.wait_ready(), s.text())
    prompts = ["Hi", "Count to five", "Name a colour please", "What is rain and where does it come from?",
               "Say hello", "Tell me about the sea", "One word", "List three animals that live in cold places"]
    payload = lambda i: {"messages": user(prompts[i % 8]), "max_tokens": 6 + i % 8, "temperature": 0}
    alone = [content_of(s.chat(payload(i))[2]) for i in range(8)]
    results = {}

    def worker(i):
        status, _, body = s.chat(payload(i))
        results[i] = (status, content_of(body))

    run_concurrently(worker, 16)
    check("16 concurrent clients get the one-at-a-time answers",
          len(results) == 16 and all(a is not None for a in alone) and
          all(results[i] == (200, alone[i % 8]) for i in range(16)), (alone, results))
    rc = s.stop()
    check("16 clients: exit 0, no sanitizer report", rc == 0 and sanitizer_clean(s.text()),
          (rc, s.text()[-3000:]))


def open_stream(s, max_tokens, key=KEY):
    """Start a streaming request on a raw socket and read until its first content chunk."""
    c = raw_socket(s)
    body = json.dumps({"messages": user("Write a very long story"), "max_tokens": max_tokens,
                       "temperature": 0, "stream": True}).encode()
    head = ("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n" % len(body))
    if key:
        head += "Authorization: Bearer %s\r\n" % key
    c.sendall(head.encode() + b"\r\n" + body)
    got = b""
    while got.count(b"data: ") < 3:
        part = c.recv(4096)
        if not part:
            break
        got += part
    return c, got


def wait_metric(s, name, pred, seconds=20):
    deadline = time.time() + seconds
    v = None
    while time.time() < deadline:
        v = s.metric(name)
        if v is not None and pred(v):
            return v
        time.sleep(0.05)
    return v


def test_disconnect(s):
    before = s.metric("qvl_requests_cancelled_total")
    toks_before = s.metric("qvl_completion_tokens_total")
    c, got = open_stream(s, 6000)
    check("long stream started", got.startswith(b"HTTP/1.1 200") and b"data: " in got, got[:200])
    c.close()
    v = wait_metric(s, "qvl_requests_cancelled_total", lambda v: v >= before + 1)
    check("client leaving mid-stream cancels the generation", v is not None and v >= before + 1, v)
    toks = s.metric("qvl_completion_tokens_total") - toks_before
    check("cancelled well before max_tokens", toks < 6000, toks)
    check("slots idle after the cancel", wait_metric(s, "qvl_slots_busy", lambda v: v == 0) == 0)


def test_queue_full(s):
    a, got = open_stream(s, 6000, key=None)  # holds the only slot
    check("queue test: first stream holds the slot", b"data: " in got, got[:200])
    queued = {}

    def second():
        queued["r"] = s.chat({"messages": user("queued"), "max_tokens": 3}, key=None)

    t = threading.Thread(target=second)
    t.start()
    q = wait_metric(s, "qvl_queue_length", lambda v: v == 1)
    check("second request waits in the queue", q == 1, q)
    status, headers, body = s.chat({"messages": user("third"), "max_tokens": 3}, key=None)
    check("429 when the queue is full", status == 429 and is_error(body, "rate_limit_error", "queue_full"),
          (status, body))
    a.close()  # frees the slot: the queued request runs
    t.join(timeout=60)
    r = queued.get("r")
    check("queued request answered once the slot is free", r is not None and r[0] == 200, r)


def test_metrics(s):
    _, headers, data = s.request("GET", "/metrics")
    text = data.decode()
    names = ["qvl_requests_total", "qvl_prompt_tokens_total", "qvl_completion_tokens_total",
             "qvl_queue_length", "qvl_slots_busy", "qvl_slots_total", "qvl_prefill_tokens_per_second",
             "qvl_decode_tokens_per_second", "qvl_prompt_tokens_cached_total"]
    missing = [n for n in names if not re.search(r"^%s [0-9.e+-]+$" % n, text, re.M)]
    check("/metrics: Prometheus text with every series", headers.get("content-type", "").startswith(
        "text/plain") and not missing, missing)
    check("/metrics: tokens counted", s.metric("qvl_completion_tokens_total") > 0 and
          s.metric("qvl_decode_tokens_per_second") > 0 and s.metric("qvl_prefill_tokens_per_second") > 0)
    check("/metrics: 4xx responses counted",
          re.search(r'^qvl_http_responses_total\{code="400"\} [1-9]', text, re.M) is not None)
    # test_concurrent ran two requests at once on two slots: some step decoded both
    steps = s.metric("qvl_decode_steps_total")
    two = re.search(r'^qvl_decode_batch_rows_bucket\{le="2"\} ([0-9]+)$', text, re.M)
    one = re.search(r'^qvl_decode_batch_rows_bucket\{le="1"\} ([0-9]+)$', text, re.M)
    check("/metrics: decode steps and their batch sizes", steps > 0 and one and two and
          int(two.group(1)) == steps and int(one.group(1)) < steps and
          s.metric("qvl_decode_batch_rows_count") == steps and s.metric("qvl_prefills_total") > 0,
          (steps, one and one.group(0), two and two.group(0)))


def test_slots(s):
    status, _, _ = s.request("GET", "/slots", key=None)
    check("/slots needs the key", status == 401, status)
    status, headers, data = s.request("GET", "/slots")
    slots = json.loads(data) if status == 200 else None
    check("/slots: one entry per slot in llama-server's shape", status == 200 and
          isinstance(slots, list) and len(slots) == 2 and
          all(set(["id", "n_ctx", "is_processing", "n_prompt_tokens", "n_cached_tokens",
                   "next_token"]) <= set(x) for x in slots) and
          [x["id"] for x in slots] == [0, 1] and all(x["n_ctx"] == 8192 for x in slots),
          (status, data[:300]))
    check("/slots: idle, with the last prompts cached", slots is not None and
          not any(x["is_processing"] for x in slots) and
          any(x["n_cached_tokens"] > 0 for x in slots), slots)


def test_loading(tmp, model):
    """/health says loading (503) before the model is ready, and completions get a 503 error;
    many slots make the loading window wide enough to observe."""
    s = Server(tmp, "loading", ["-m", model, "--parallel", "48", "--ctx", "32"])
    status, _, body = s.request("GET", "/health", key=None)
    status2, _, body2 = s.chat({"messages": user("hi")}, key=None)
    if status == 200:
        print("note: the model loaded before the first /health poll; 503 not observed")
    else:
        check("/health while loading: 503 loading", status == 503 and
              json.loads(body) == {"status": "loading"}, (status, body))
        if status2 != 200:
            check("completion while loading: 503 in OpenAI's shape",
                  status2 == 503 and is_error(body2), (status2, body2))
    check("loads 48 slots", s.wait_ready())
    check("clean exit (48 slots)", s.stop() == 0)


def test_openai_client(s, want):
    """The official OpenAI Python client, unchanged, when it is installed (not a dependency of
    qvl: this part is skipped without it)."""
    try:
        import openai
    except ImportError:
        print("note: the openai package is not installed; OpenAI client checks skipped")
        return
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key=KEY, max_retries=0)
    r = client.chat.completions.create(model="tiny", messages=user("Hello there"), max_tokens=12,
                                       temperature=0)
    check("openai client: completion", r.choices[0].message.content == want and
          r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 12, r)
    text, usage = "", None
    for chunk in client.chat.completions.create(model="tiny", messages=user("Hello there"),
                                                max_tokens=12, temperature=0, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    check("openai client: stream with usage", text == want and usage is not None and
          usage.completion_tokens == 12, (text, usage))
    models = [m.id for m in client.models.list()]
    check("openai client: models.list", models == ["tiny"], models)
    r = client.chat.completions.create(model="tiny", messages=user("hi"), n=2, max_tokens=3)
    check("openai client: n=2 gives two choices", [c.index for c in r.choices] == [0, 1], r)
    try:
        client.chat.completions.create(model="tiny", messages=user("hi"), n=0)
        check("openai client: n=0 raises BadRequestError", False)
    except openai.BadRequestError as e:
        check("openai client: n=0 raises BadRequestError", e.status_code == 400, e)
    bad = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="wrong", max_retries=0)
    try:
        bad.models.list()
        check("openai client: wrong key raises AuthenticationError", False)
    except openai.AuthenticationError as e:
        check("openai client: wrong key raises AuthenticationError", e.status_code == 401, e)


def main():
    if not os.path.isfile(TOKENIZER):
        print("skip: %s absent (qvl serve tests need the real tokenizer)" % TOKENIZER)
        return 77
    tmp = tempfile.mkdtemp(prefix="qvl-serve-")
    try:
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(CONFIG, f)
        model = os.path.join(tmp, "tiny")
        r = subprocess.run([QVL, "mkmodel", "--config", os.path.join(tmp, "config.json"),
                            "--tokenizer", TOKENIZER, "--out", model, "--std", "0.5"],
                           capture_output=True)
        if not check("mkmodel", r.returncode == 0, r.stderr):
            return 1
        image_dir = os.path.join(tmp, "pictures")
        os.mkdir(image_dir)
        shutil.copy(os.path.join(FIXTURES, "small.png"), image_dir)
        timeout = 3
        s = Server(tmp, "main", ["-m", model, "--parallel", "2", "--queue", "4", "--ctx", "8192",
                                 "--api-key", KEY, "--image-dir", image_dir,
                                 "--max-body", str(1 << 20), "--timeout", str(timeout)])
        check("server ready", s.wait_ready(), s.text())
        test_basics(s, model)
        want, _ = test_greedy(s, model)
        test_stream(s, want)
        test_stop_and_seed(s, want)
        warm_turn2 = test_images(s, model, image_dir)
        test_errors(s)
        test_concurrent(s)
        test_n_shared_prefill(s)
        test_disconnect(s)
        test_hostile(s, timeout)
        test_metrics(s)
        test_slots(s)
        test_openai_client(s, want)
        status, _, body = s.chat({"messages": user("Hello there"), "max_tokens": 12, "temperature": 0})
        check("still answering after everything", status == 200 and content_of(body) == want, body)
        rc = s.stop()
        log = s.text()
        check("SIGTERM: exit 0", rc == 0, (rc, log[-2000:]))
        check("no sanitizer report", sanitizer_clean(log), log[-3000:])

        q = Server(tmp, "queue", ["-m", model, "--parallel", "1", "--queue", "1", "--ctx", "8192"])
        check("queue server ready", q.wait_ready(), q.text())
        # The first request of a fresh server prefills everything: the same answer as the
        # second turn that reused the picture and the history from a slot's cache.
        status, _, b = q.chat(warm_turn2[0], key=None)
        check("second turn: answer from a cold cache = answer with reuse", status == 200 and
              b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0 and
              content_of(b) == warm_turn2[1], (b, warm_turn2[1]))
        test_queue_full(q)
        rc = q.stop()
        check("queue server: exit 0, no sanitizer report", rc == 0 and sanitizer_clean(q.text()),
              (rc, q.text()[-3000:]))

        test_sixteen_clients(tmp, model)
        test_loading(tmp, model)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failures))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
