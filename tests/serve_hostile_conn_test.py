#!/usr/bin/env python3
"""qvl serve under hostile connections (issue 32: findings 2, 8 and 12's HTTP parts), on loopback.

usage: serve_hostile_conn_test.py QVL_BINARY SHARED_DATA_DIR
Exit 77 (skip) when SHARED_DATA_DIR has no Qwen3-VL tokenizer.json.

Raw sockets send what Python's HTTP client would not. The loopback range gives several client
addresses: attackers bind 127.0.0.2 or 127.0.0.3 as their source, the well-behaved client uses
127.0.0.1.
- slowloris: of 8 connections held open from 127.0.0.2, the 4 over --max-connections-per-ip are
  closed at once; /health from 127.0.0.1 answers while the other 4 are held (on a server whose
  --max-connections they would otherwise fill);
- --receive-timeout: a request whose headers or body trickle in a byte at a time gets 408 and
  is closed; one whose request line never completes is closed;
- a client that sends a request and 64 KiB of a next one, then leaves, is noticed: its job is
  cancelled (qvl_requests_cancelled_total) and the one slot answers the next request (there is
  no queue, so a slot still busy would answer 429); the same for a stream;
- Content-Length that is not one plain decimal number: one clean 400 (or 413), no doubled
  headers; two Content-Length headers, or one with Transfer-Encoding: 400;
- Host: loopback names are answered, others get 403 with an OpenAI error body that names
  --allow-host; --allow-host adds names."""
import json
import os
import select
import shutil
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util as u  # noqa: E402

QVL, SHARED = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
PATIENCE = 120  # seconds to wait for an event that must come (bounds the test, not a speed)
check = u.Checks()


def connect(port, source="127.0.0.1"):
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def read_all(s, seconds=PATIENCE):
    """Everything the server sends until it closes (or resets) the connection."""
    s.settimeout(seconds)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    s.close()
    return data


def exchange(port, raw, source="127.0.0.1"):
    s = connect(port, source)
    s.sendall(raw)
    return read_all(s)


def parse_one(data):
    """(status, lower-cased headers, body, bytes after the body) of one HTTP response."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        return None, {}, b"", data
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return None, {}, b"", data
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    n = int(headers.get("content-length", len(rest)))
    return status, headers, rest[:n], rest[n:]


def openai_error(body):
    try:
        e = json.loads(body)["error"]
        return e if isinstance(e.get("message"), str) and "type" in e else None
    except (ValueError, KeyError, TypeError):
        return None


def closed_now(sockets, want, seconds=PATIENCE):
    """Waits until `want` of the sockets have been closed (or reset) by the server; returns the
    closed ones (fewer if the bound passes first)."""
    closed, deadline = [], time.time() + seconds
    open_ = list(sockets)
    while len(closed) < want and open_ and time.time() < deadline:
        readable, _, _ = select.select(open_, [], [], max(0.0, deadline - time.time()))
        for s in readable:
            try:
                gone = s.recv(4096) == b""
            except ConnectionResetError:
                gone = True
            if gone:
                closed.append(s)
                open_.remove(s)
    return closed


def trickle(port, first, source):
    """Sends `first`, then one more byte each time 0.2 s pass without an answer, until the
    server closes the connection; returns what it sent back (None: still open after PATIENCE)."""
    s = connect(port, source)
    s.sendall(first)
    s.settimeout(0.2)
    data, deadline = b"", time.time() + PATIENCE
    while time.time() < deadline:
        try:
            chunk = s.recv(65536)
            if not chunk:
                s.close()
                return data
            data += chunk
        except socket.timeout:
            try:
                s.sendall(b"a")
            except OSError:
                s.close()
                return data
        except ConnectionResetError:
            s.close()
            return data
    s.close()
    return None


def test_slowloris(tmp, model):
    srv = u.Server(QVL, tmp, "perip", ["-m", model, "--max-connections", "8",
                                       "--max-connections-per-ip", "4", "--timeout", "600",
                                       "--receive-timeout", "600"])
    try:
        check("per-ip server ready", srv.wait_ready(), srv.text()[-2000:])
        held = []
        for _ in range(8):
            s = connect(srv.port, "127.0.0.2")
            try:
                s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            except OSError:
                pass  # already closed by the listener: counted below
            held.append(s)
        closed = closed_now(held, 4)
        check("4 of 8 connections from 127.0.0.2 are closed (--max-connections-per-ip 4)",
              len(closed) == 4, len(closed))
        try:
            status = u.http_request(srv.port, "GET", "/health", timeout=PATIENCE)[0]
        except OSError as e:
            status = repr(e)
        check("/health from 127.0.0.1 answers while 127.0.0.2 holds its connections",
              status == 200, status)
        still = [s for s in held if s not in closed]
        readable, _, _ = select.select(still, [], [], 0)
        check("the 4 connections within the limit are still held (no deadline for 600 s)",
              len(still) == 4 and not readable, (len(still), len(readable)))
        for s in held:
            s.close()
    finally:
        rc = srv.stop()
    check("per-ip server exits 0", rc == 0 and u.sanitizer_clean(srv.text()), (rc, srv.text()[-2000:]))


def test_receive_deadline(tmp, model):
    srv = u.Server(QVL, tmp, "deadline", ["-m", model, "--receive-timeout", "2"])
    try:
        check("deadline server ready", srv.wait_ready(), srv.text()[-2000:])
        for what, first in [
                ("headers", b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "),
                ("body", b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")]:
            data = trickle(srv.port, first, "127.0.0.3")
            status, headers, body, after = parse_one(data or b"")
            check("slow %s, a byte every 0.2 s: 408 with an OpenAI error, then closed" % what,
                  data is not None and status == 408 and openai_error(body) is not None and
                  after == b"", data)
        data = trickle(srv.port, b"GET /", "127.0.0.3")
        check("a request line that never ends: closed by the deadline", data is not None, data)
        check("/health answers after the slow clients",
              u.http_request(srv.port, "GET", "/health")[0] == 200)
        _, _, text = srv.request("GET", "/metrics")
        check("the 408s are counted", b'qvl_http_responses_total{code="408"} 2' in text,
              text.decode()[-1500:])
    finally:
        rc = srv.stop()
    check("deadline server exits 0", rc == 0 and u.sanitizer_clean(srv.text()),
          (rc, srv.text()[-2000:]))


def wait_metric(srv, name, above):
    deadline = time.time() + PATIENCE * 2
    while time.time() < deadline:
        v = srv.metric(name)
        if v is not None and v > above:
            return v
        time.sleep(0.02)
    return srv.metric(name)


def wait_idle(srv):
    deadline = time.time() + PATIENCE
    while time.time() < deadline:
        if srv.metric("qvl_slots_busy") == 0 and srv.metric("qvl_queue_length") == 0:
            return True
        time.sleep(0.02)
    return False


def test_pipelined_departure(tmp, model):
    # One slot, no queue: a request that finds the slot busy is answered 429 at once.
    srv = u.Server(QVL, tmp, "pipeline", ["-m", model, "--ctx", "16384", "--parallel", "1",
                                          "--queue", "0"])
    try:
        check("pipeline server ready", srv.wait_ready(), srv.text()[-2000:])
        next_request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n" +
                        b" " * 65536)
        for stream in (False, True):
            body = json.dumps({"messages": u.user("tell a long story"), "max_tokens": 15000,
                               "temperature": 0, "stream": stream}).encode()
            before_total = srv.metric("qvl_requests_total")
            before_cancelled = srv.metric("qvl_requests_cancelled_total")
            s = connect(srv.port)
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) +
                      body + next_request)
            s.close()
            # The job ends either way (15000 tokens end too); only a noticed departure cancels.
            total = wait_metric(srv, "qvl_requests_total", before_total)
            cancelled = srv.metric("qvl_requests_cancelled_total")
            kind = "stream" if stream else "answer"
            check("%s: a client that pipelined 64 KiB and left has its job cancelled" % kind,
                  total == before_total + 1 and cancelled == before_cancelled + 1,
                  (before_total, total, before_cancelled, cancelled))
            check("%s: the slot is free again" % kind, wait_idle(srv))
            status, _, reply = srv.chat({"messages": u.user("hi"), "max_tokens": 4})
            check("%s: the next request gets the slot (200, not 429)" % kind, status == 200,
                  (status, reply))
    finally:
        rc = srv.stop()
    check("pipeline server exits 0", rc == 0 and u.sanitizer_clean(srv.text()),
          (rc, srv.text()[-2000:]))


def post_with_length(port, length_headers, body):
    return exchange(port, b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Connection: close\r\nContent-Type: application/json\r\n" +
                    length_headers + b"\r\n" + body)


def test_content_length(srv):
    # A request that is fine in itself: only its framing is wrong (the old server answered 200
    # to the duplicate and Transfer-Encoding cases, reading one of the lengths).
    good = json.dumps({"messages": u.user("hi"), "max_tokens": 1}).encode()
    n = len(good)
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (n, good)
    cases = [(b"Content-Length: -1\r\n", good, 400), (b"Content-Length: +%d\r\n" % n, good, 400),
             (b"Content-Length: 0x%x\r\n" % n, good, 400),
             (b"Content-Length: %d, %d\r\n" % (n, n), good, 400),
             (b"Content-Length: \r\n", good, 400), (b"Content-Length: %dx\r\n" % n, good, 400),
             (b"Content-Length: 99999999999999999999999\r\n", good, 413),
             (b"Content-Length: %d\r\nContent-Length: %d\r\n" % (n, n + 5), good + b"     ", 400),
             (b"Content-Length: %d\r\nContent-Length: %d\r\n" % (n, n), good, 400),
             (b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % n, chunked, 400)]
    for headers, body, want in cases:
        data = post_with_length(srv.port, headers, body)
        status, h, reply, after = parse_one(data)
        check("%r: one clean %d with an OpenAI error" % (headers.decode().strip(), want),
              status == want and openai_error(reply) is not None and after == b"" and
              data.count(b"HTTP/1.1 ") == 1, data[:600])
    data = post_with_length(srv.port, b"Content-Length: %d\r\n" % n, good)
    check("the same request with one plain Content-Length: 200", parse_one(data)[0] == 200,
          data[:600])
    data = post_with_length(srv.port, b"Transfer-Encoding: chunked\r\n", chunked)
    check("... and chunked without Content-Length: 200", parse_one(data)[0] == 200, data[:600])


def host_status(port, host, path=b"/health"):
    data = exchange(port, b"GET " + path + b" HTTP/1.1\r\nHost: " + host +
                    b"\r\nConnection: close\r\n\r\n")
    return parse_one(data)


def test_host(srv, allow_srv):
    port = str(srv.port).encode()
    for host in [b"127.0.0.1:" + port, b"localhost:" + port, b"localhost", b"LocalHost",
                 b"127.0.0.5", b"[::1]:" + port, b"app.localhost:" + port]:
        status = host_status(srv.port, host)[0]
        check("Host %s is answered" % host.decode(), status == 200, status)
    for host in [b"evil.example:" + port, b"localhost.evil.example", b"127.1", b"0.0.0.0",
                 b"10.0.0.1", b"[::2]", b"localhost:x"]:
        status, _, body, _ = host_status(srv.port, host)
        e = openai_error(body)
        check("Host %s gets 403 naming --allow-host" % host.decode(),
              status == 403 and e is not None and "--allow-host" in e["message"], (status, body))
    status, _, body, _ = host_status(srv.port, b"evil.example", b"/v1/models")
    check("the Host check comes before everything (403 on /v1/models too)", status == 403, status)
    data = exchange(srv.port, b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
    check("HTTP/1.1 without Host: 400", parse_one(data)[0] == 400, data[:300])
    data = exchange(srv.port, b"GET /health HTTP/1.0\r\n\r\n")
    check("HTTP/1.0 without Host is answered", parse_one(data)[0] == 200, data[:300])
    check("--allow-host names are answered",
          host_status(allow_srv.port, b"qvl.example:8080")[0] == 200 and
          host_status(allow_srv.port, b"Other.Example")[0] == 200)
    check("... and others still get 403", host_status(allow_srv.port, b"evil.example")[0] == 403)


def main():
    tok = u.tokenizer_path(SHARED)
    if not os.path.isfile(tok):
        print("skip: %s absent (qvl serve tests need the real tokenizer)" % tok)
        return 77
    tmp = tempfile.mkdtemp(prefix="qvl-hostile-conn-")
    try:
        model = u.make_tiny_model(QVL, tmp, tok)
        test_slowloris(tmp, model)
        test_receive_deadline(tmp, model)
        test_pipelined_departure(tmp, model)
        srv = u.Server(QVL, tmp, "plain", ["-m", model])
        allow_srv = u.Server(QVL, tmp, "allow", ["-m", model, "--allow-host",
                                                 "qvl.example, other.example"])
        try:
            check("servers ready", srv.wait_ready() and allow_srv.wait_ready(), srv.text()[-2000:])
            test_content_length(srv)
            test_host(srv, allow_srv)
        finally:
            rc, rc2 = srv.stop(), allow_srv.stop()
        check("servers exit 0", rc == 0 and rc2 == 0 and u.sanitizer_clean(srv.text()) and
              u.sanitizer_clean(allow_srv.text()), (rc, rc2, srv.text()[-2000:]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
