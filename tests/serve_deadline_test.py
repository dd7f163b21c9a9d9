#!/usr/bin/env python3
"""qvl serve --request-timeout: the per-request deadline, end to end on loopback.

usage: serve_deadline_test.py QVL_BINARY SHARED_DATA_DIR
Exit 77 (skip) when SHARED_DATA_DIR has no Qwen3-VL tokenizer.json.

One slot, the tiny model (thousands of tokens take well over the deadline, any CPU):
- a long answer is cut at the deadline with finish_reason "length" (whole and streamed), never
  before it;
- a request queued behind one that uses its whole deadline still gets its answer;
- a request whose deadline passes before a slot is free gets 503 `timeout`, nothing generated
  (made certain by a long prefill ahead of it, run whole with --batch-size 0);
- a request whose deadline passes while its long prompt is prefilled in chunks (the default)
  stops between two chunks: 503 `timeout`, nothing generated;
- the server answers normally afterwards and exits cleanly.

The checks wait for events (a slot busy, a request queued, answers) and assert no upper bound
on time: a loaded machine only makes the cut later and the blocking prefill longer, which the
orderings here tolerate (the expiry case runs on its own server with a 1 s deadline behind a
prefill of 24,000 tokens that takes several seconds even on a fast machine)."""
import os
import subprocess
import sys
import tempfile
import threading
import time
import shutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util as u  # noqa: E402

QVL, SHARED = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
DEADLINE = 4
EXPIRY_DEADLINE = 1
LONG = 15000  # tokens: far more than the deadline lets the tiny model make
PATIENCE = 500  # seconds a client of the expiry test waits for its answer (ctest allows 600)
check = u.Checks()


def long_stream(port, word, out):
    """Streams a long answer in a thread; out gets (seconds, status, events, done)."""
    def run():
        t0 = time.time()
        status, events, done = u.stream(port, {"messages": u.user(word + " tell a long story"),
                                               "max_tokens": LONG, "temperature": 0, "stream": True,
                                               "stream_options": {"include_usage": True}})
        out.append((time.time() - t0, status, events, done))
    t = threading.Thread(target=run)
    t.start()
    return t


def wait_idle(port):
    """No slot busy and nothing queued: what the gauges say once the previous test's requests
    have ended (they lag the answers), so that the next busy/queued reading is this test's."""
    deadline = time.time() + 30
    while time.time() < deadline:
        if u.metric(port, "qvl_slots_busy") == 0 and u.metric(port, "qvl_queue_length") == 0:
            return True
        time.sleep(0.01)
    return False


def wait_busy(port):
    deadline = time.time() + 30
    while time.time() < deadline:
        if u.metric(port, "qvl_slots_busy") == 1:
            return True
        time.sleep(0.01)
    return False


def timed_chat(port, payload, out, timeout=120):
    """out gets (seconds taken, status, body, time answered); status None and the exception
    as body when the request failed (so a check fails instead of the script)."""
    def run():
        t0 = time.time()
        try:
            status, body = u.chat(port, payload, timeout=timeout)
        except OSError as e:
            status, body = None, repr(e)
        out.append((time.time() - t0, status, body, time.time()))
    t = threading.Thread(target=run)
    t.start()
    return t


def finish_of(body):
    try:
        return body["choices"][0]["finish_reason"]
    except (KeyError, IndexError, TypeError):
        return None


def test_cut(port):
    t0 = time.time()
    status, body = u.chat(port, {"messages": u.user("alpha tell a long story"), "max_tokens": LONG,
                                 "temperature": 0})
    took = time.time() - t0
    n = body.get("usage", {}).get("completion_tokens", -1) if status == 200 else -1
    check("deadline: a long answer is cut with finish_reason length",
          status == 200 and finish_of(body) == "length" and 0 < n < LONG and
          isinstance(u.content_of(body), str), (status, body if status != 200 else body["usage"]))
    check("deadline: not cut before %d s" % DEADLINE, took >= DEADLINE - 0.2, took)

    out = []
    long_stream(port, "beta", out).join()
    took, status, events, done = out[0]
    choices = [e for e in events if e.get("choices")]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in choices)
    usage = events[-1].get("usage", {}) if events else {}
    check("deadline, streamed: last choice chunk has finish_reason length, then usage and [DONE]",
          status == 200 and done and choices and
          choices[-1]["choices"][0]["finish_reason"] == "length" and
          0 < usage.get("completion_tokens", 0) < LONG and len(text) > 0, (status, events[-2:]))
    check("deadline, streamed: not cut before %d s" % DEADLINE, took >= DEADLINE - 0.2, took)


def test_no_starvation(port):
    """A short request that arrives while a long one holds the only slot is answered in full
    once the long one reaches its deadline. It arrives three quarters of a deadline after the
    long one took the slot, so it still has most of its own deadline when the slot frees."""
    long_out, short_out = [], []
    check("no starvation: starts with the server idle", wait_idle(port))
    t = long_stream(port, "gamma", long_out)
    check("no starvation: the long request holds the slot", wait_busy(port))
    time.sleep(DEADLINE * 0.75)
    s = timed_chat(port, {"messages": u.user("delta say hi"), "max_tokens": 5, "temperature": 0},
                   short_out)
    t.join()
    s.join()
    took, status, body, _ = short_out[0]
    n = body.get("usage", {}).get("completion_tokens") if status == 200 else None
    check("no starvation: the queued short request gets its whole answer",
          status == 200 and (n == 5 or finish_of(body) == "stop"), (status, body))


def test_expired_in_queue(port):
    """On a server with a 1 s deadline: B, a prompt of 24,000 tokens, takes the idle slot and
    prefills for seconds (a prefill is not interrupted); C arrives while B prefills, and its
    deadline passes in the queue. B ends with length, C gets 503 timeout."""
    b_out, c_out = [], []
    check("expiry: starts with the server idle", wait_idle(port))
    b = timed_chat(port, {"messages": u.user("apple " * 24000), "max_tokens": LONG,
                          "temperature": 0}, b_out, timeout=PATIENCE)
    check("expiry: the long prompt holds the slot", wait_busy(port))
    c = timed_chat(port, {"messages": u.user("eta say hi"), "max_tokens": 5, "temperature": 0},
                   c_out, timeout=PATIENCE)
    for t in (b, c):
        t.join()
    _, status, body, _ = b_out[0]
    check("expiry: the request whose prefill ran past its deadline ends with length",
          status == 200 and finish_of(body) == "length" and
          body["usage"]["completion_tokens"] < LONG, (status, body))
    _, status, body, _ = c_out[0]
    check("expiry: deadline passed in the queue: 503 timeout in OpenAI's shape",
          status == 503 and isinstance(body, dict) and
          body.get("error", {}).get("code") == "timeout" and
          "--request-timeout" in body["error"].get("message", ""), (status, body))


def test_expired_in_prefill(port):
    """On a server with a 1 s deadline and chunked prefill: a prompt of 24,000 tokens, whose
    prefill takes seconds, stops between two chunks once its deadline has passed."""
    out = []
    check("prefill expiry: starts with the server idle", wait_idle(port))
    t = timed_chat(port, {"messages": u.user("apple " * 24000), "max_tokens": LONG,
                          "temperature": 0}, out, timeout=PATIENCE)
    t.join()
    _, status, body, _ = out[0]
    check("prefill expiry: 503 timeout, nothing generated, the prefill named",
          status == 503 and isinstance(body, dict) and
          body.get("error", {}).get("code") == "timeout" and
          "prefilled" in body["error"].get("message", ""), (status, body))


def finish(s, timed_out):
    """The deadline counter, a normal answer afterwards, idle gauges, a clean SIGTERM."""
    check("/metrics counts every request the deadline stopped",
          u.metric(s.port, "qvl_requests_timed_out_total") == timed_out,
          u.metric(s.port, "qvl_requests_timed_out_total"))
    status, body = u.chat(s.port, {"messages": u.user("theta say hi"), "max_tokens": 5,
                                   "temperature": 0})
    check("still answering after the deadlines", status == 200 and
          (body["usage"]["completion_tokens"] == 5 or finish_of(body) == "stop"), body)
    check("slots idle, queue empty", wait_idle(s.port))
    rc = s.stop()
    log = s.text()
    check("SIGTERM: exit 0, no sanitizer report", rc == 0 and u.sanitizer_clean(log),
          (rc, log[-3000:]))


def main():
    tok = u.tokenizer_path(SHARED)
    if not os.path.isfile(tok):
        print("skip: %s absent (qvl serve tests need the real tokenizer)" % tok)
        return 77
    tmp = tempfile.mkdtemp(prefix="qvl-deadline-")
    try:
        model = u.make_tiny_model(QVL, tmp, tok)
        r = subprocess.run([QVL, "serve", "-m", model, "--request-timeout", "-1"],
                           capture_output=True, timeout=60)
        err = r.stderr.decode()
        check("--request-timeout -1: exit 2 with one line naming the option",
              r.returncode == 2 and err.count("\n") == 1 and "request-timeout" in err, err)
        s = u.Server(QVL, tmp, "deadline", ["-m", model, "--parallel", "1", "--queue", "4",
                                            "--ctx", "16384", "--request-timeout", str(DEADLINE)])
        check("server ready", s.wait_ready(), s.text())
        test_cut(s.port)
        test_no_starvation(s.port)
        # cut: 2, starvation: 1 (the long one)
        finish(s, 3)
        # 8 attention heads (the tiny model has 2): attention over 24,000 tokens makes B's
        # prefill last several seconds, many times the 1 s deadline, while decode stays fast.
        os.makedirs(os.path.join(tmp, "heads8"))
        model8 = u.make_tiny_model(QVL, os.path.join(tmp, "heads8"), tok,
                                   {"num_attention_heads": 8, "num_key_value_heads": 2,
                                    "max_position_embeddings": 32768})
        if os.environ.get("QVL_SANITIZED"):
            # A 24,000-token prefill run whole takes many minutes in a sanitizer (Debug) build,
            # past ctest's limit; the Release run checks the queue expiry behind it.
            print("skip expiry in the queue: a whole 24,000-token prefill is too slow under "
                  "the sanitizers (checked in the Release build)")
        else:
            s = u.Server(QVL, tmp, "expiry", ["-m", model8, "--parallel", "1", "--queue", "4",
                                              "--ctx", "32768", "--request-timeout",
                                              str(EXPIRY_DEADLINE), "--batch-size", "0"])
            check("expiry server ready", s.wait_ready(), s.text())
            test_expired_in_queue(s.port)
            finish(s, 2)  # B and C
        s = u.Server(QVL, tmp, "chunked", ["-m", model8, "--parallel", "1", "--queue", "4",
                                           "--ctx", "32768", "--request-timeout",
                                           str(EXPIRY_DEADLINE)])
        check("chunked server ready", s.wait_ready(), s.text())
        test_expired_in_prefill(s.port)
        finish(s, 1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
