#!/usr/bin/env python3
"""The hostile-client soak (docs/hostile-input.md, "The soak"): well-behaved clients keep asking
`qvl serve` questions while hostile clients run one attack at a time; the report says, per
phase, what the good clients saw (answers, failures, p50/p99 latency) and the server's RSS.

    python3 scripts/soak/soak_hostile.py --qvl build/tools/qvl --shared ../shared/data \
        [--seconds 60] [--clients 16] [--parallel 4] [--only NAME,...]

It is a measurement, not a test: it prints a table and exits 1 only when a good client lost
an answer (a status other than 200, or a connection error) or the server died. Latency and RSS
are judged by the reader against the issue's bar (p99 within 2x of the quiet phase, RSS back
within 10% after the attacks), since they depend on the machine. Loopback only; every attack
loop stops when its phase ends."""
import argparse
import json
import multiprocessing
import os
import socket
import sys
import tempfile
import threading
import time
import zlib
import base64
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))
import serve_util  # noqa: E402
import bombs  # noqa: E402


def data_url(mime, raw):
    return "data:%s;base64,%s" % (mime, base64.b64encode(raw).decode())


def small_png(w=64, h=48):
    rows = b"".join(b"\0" + bytes((x * 7 + y * 3) & 255 for x in range(w * 3)) for y in range(h))
    chunk = lambda k, d: struct.pack(">I", len(d)) + k + d + struct.pack(">I", zlib.crc32(k + d))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def raw_send(port, data, src="127.0.0.2", read=True, timeout=30):
    """Sends bytes from a loopback source address; returns the answer's first line or ''."""
    s = socket.socket()
    s.settimeout(timeout)
    try:
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        s.sendall(data)
        if not read:
            return ""
        got = s.recv(256)
        return got.split(b"\r\n", 1)[0].decode(errors="replace")
    except OSError:
        return ""
    finally:
        s.close()


def post_bytes(body, host="127.0.0.1", extra=b""):
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: " + host.encode() +
            b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
            b"\r\n" + extra + b"\r\n" + body)


def chat_body(messages, **kw):
    d = {"messages": messages, "max_tokens": kw.pop("max_tokens", 8), "temperature": 0}
    d.update(kw)
    return json.dumps(d).encode()


# ---- attacks: each runs until `stop` is set --------------------------------------------------

def attack_json_tree(port, stop):
    """Finding 1: a valid request padded with small values up to 8 MiB."""
    pad = b"0," * (4 << 20)
    body = b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"pad":[' + pad + b'0]}'
    while not stop.is_set():
        raw_send(port, post_bytes(body))


def attack_slowloris(port, stop):
    """Finding 2: many connections, one header byte every second."""
    socks = []
    for _ in range(64):
        try:
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.settimeout(2)
            s.connect(("127.0.0.1", port))
            socks.append(s)
        except OSError:
            pass
    text = b"GET /health HTTP/1.1\r\nX-Slow: " + b"a" * 10000
    i = 0
    while not stop.wait(1.0):
        for s in list(socks):
            try:
                s.send(text[i % len(text):i % len(text) + 1])
            except OSError:
                socks.remove(s)
        i += 1
    for s in socks:
        s.close()


def attack_png_text(port, stop):
    """Finding 3: a PNG whose text chunks inflate to 512 MiB."""
    body = chat_body([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url("image/png", bombs.png_text_bomb(64, 8))}},
        {"type": "text", "text": "?"}]}], max_tokens=1)
    while not stop.is_set():
        raw_send(port, post_bytes(body))


def attack_jpeg_scans(port, stop):
    """Finding 4: progressive-JPEG scan bombs sent and abandoned."""
    body = chat_body([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url("image/jpeg", bombs.jpeg_scan_bomb())}},
        {"type": "text", "text": "?"}]}], max_tokens=1)
    while not stop.is_set():
        raw_send(port, post_bytes(body), read=False)
        stop.wait(0.5)


def attack_prefix_probe(port, stop):
    """Finding 5: guessing another client's system prompt through cached_tokens."""
    d = 0
    while not stop.is_set():
        body = chat_body([{"role": "system", "content": "The code is %04d" % d},
                          {"role": "user", "content": "hi"}], max_tokens=1)
        raw_send(port, post_bytes(body))
        d = (d + 1) % 10000


def attack_pipeline_leave(port, stop):
    """Finding 8: a request with 32 KiB of a next one behind it, then gone."""
    first = post_bytes(chat_body([{"role": "user", "content": "tell me a long story"}],
                                 max_tokens=4000))
    junk = post_bytes(b"{" + b" " * 32768 + b"}")
    while not stop.is_set():
        raw_send(port, first + junk, read=False)
        stop.wait(0.2)


def attack_queued_pictures(port, stop):
    """Finding 9: small requests whose pictures decode to large pixel arrays, kept queued."""
    body = chat_body([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": data_url("image/gif", bombs.tiny_gif())}},
        {"type": "text", "text": "describe"}]}], max_tokens=64)
    threads = []

    def one():
        while not stop.is_set():
            raw_send(port, post_bytes(body), timeout=120)
    for _ in range(17):
        t = threading.Thread(target=one)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()


def attack_malformed(port, stop):
    """Finding 12: the small things, in a loop."""
    cases = [
        post_bytes(chat_body([{"role": "user", "content": "<|image_pad|> hi"}])),
        post_bytes(b'{"messages":[{"role":"user","content":"a\\u0000b"}]}'),
        post_bytes(chat_body([{"role": "user", "content": "hi"}]) + b"trailing"),
        post_bytes(b'{"messages":[],"messages":[{"role":"user","content":"hi"}]}'),
        post_bytes(b"{}", extra=b"Content-Length: 5\r\n"),
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n",
        post_bytes(chat_body([{"role": "user", "content": "hi"}]), host="evil.example"),
    ]
    i = 0
    while not stop.is_set():
        raw_send(port, cases[i % len(cases)], timeout=10)
        i += 1


ATTACKS = [("json_tree", attack_json_tree, 4), ("slowloris", attack_slowloris, 1),
           ("png_text", attack_png_text, 2), ("jpeg_scans", attack_jpeg_scans, 3),
           ("prefix_probe", attack_prefix_probe, 1), ("pipeline_leave", attack_pipeline_leave, 2),
           ("queued_pictures", attack_queued_pictures, 1), ("malformed", attack_malformed, 2)]


def run_attack(attack, port, stop, niceness):
    if niceness:
        os.nice(niceness)
    attack(port, stop)


# ---- the good clients -----------------------------------------------------------------------

class Good:
    def __init__(self, port, n):
        self.port, self.n = port, n
        self.lock = threading.Lock()
        self.samples = []  # (end time, latency s, ok, detail)
        self.stop = threading.Event()
        self.png = data_url("image/png", small_png())

    def one(self, i, k):
        if k % 4 == 3:
            content = [{"type": "image_url", "image_url": {"url": self.png}},
                       {"type": "text", "text": "What is in picture %d?" % i}]
        else:
            content = "Client %d asks question %d." % (i, k)
        t0 = time.time()
        try:
            status, body = serve_util.chat(self.port, {"messages": [{"role": "user",
                                           "content": content}], "max_tokens": 8,
                                           "temperature": 0}, timeout=300)
            ok, detail = status == 200, "" if status == 200 else "%d %s" % (status, str(body)[:200])
        except OSError as e:
            ok, detail = False, repr(e)
        with self.lock:
            self.samples.append((time.time(), time.time() - t0, ok, detail))

    def run(self, i):
        k = 0
        while not self.stop.is_set():
            self.one(i, k)
            k += 1

    def start(self):
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(self.n)]
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()

    def window(self, t0, t1):
        with self.lock:
            return [s for s in self.samples if t0 <= s[0] < t1]


def pct(values, p):
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--qvl", required=True)
    ap.add_argument("--shared", required=True, help="the shared data directory (tokenizer)")
    ap.add_argument("--seconds", type=float, default=60, help="length of each phase")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--only", default="", help="comma-separated attack names")
    ap.add_argument("--serve-arg", action="append", default=[], help="extra qvl serve argument")
    ap.add_argument("--attacker-nice", type=int, default=0,
                    help="niceness of the attacking processes (19: they take only idle CPU, so the "
                    "figures show what the server spends rather than the attacker's own work)")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="qvl-soak-")
    model = serve_util.make_tiny_model(a.qvl, tmp, serve_util.tokenizer_path(a.shared))
    srv = serve_util.Server(a.qvl, tmp, "soak", ["-m", model, "--parallel", str(a.parallel),
                            "--queue", "64", "--max-connections", "256"] + a.serve_arg)
    if not srv.wait_ready():
        print("server not ready:\n" + srv.text())
        return 1
    good = Good(srv.port, a.clients)
    good.start()
    time.sleep(min(10.0, a.seconds / 3))  # warm-up: every slot has run, arenas are allocated
    rows = []

    def phase(name, attack=None, workers=0):
        # The attackers run in processes of their own, at --attacker-nice, so that the two can
        # be told apart on a small machine: what the server spends on an attack, and what the
        # attacking client's own CPU takes from the same cores.
        # "spawn", not fork: a forked attacker would hold copies of the good clients' open
        # sockets, keeping those connections (and their per-address slots) open after the
        # clients close them.
        mp = multiprocessing.get_context("spawn")
        stop = mp.Event()
        ps = [mp.Process(target=run_attack, args=(attack, srv.port, stop, a.attacker_nice))
              for _ in range(workers)]
        t0 = time.time()
        for p in ps:
            p.start()
        time.sleep(a.seconds)
        stop.set()
        for p in ps:
            p.join()
        t1 = time.time()
        s = good.window(t0, t1)
        lat = [x[1] for x in s if x[2]]
        fails = [x[3] for x in s if not x[2]]
        rows.append((name, len(s), len(fails), pct(lat, 50), pct(lat, 99),
                     rss_kib(srv.proc.pid) / 1024.0, fails[:3]))
        print("%-16s answers %5d  lost %3d  p50 %6.3f s  p99 %6.3f s  rss %7.1f MiB" % rows[-1][:6],
              flush=True)

    phase("quiet")
    only = set(filter(None, a.only.split(",")))
    for name, fn, workers in ATTACKS:
        if only and name not in only:
            continue
        phase(name, fn, workers)
        if srv.proc.poll() is not None:
            break
    phase("quiet-after")
    good.finish()
    alive = srv.proc.poll() is None
    rc = srv.stop()
    quiet_p99, quiet_rss = rows[0][4], rows[0][5]
    print("\nphase            answers lost  p99/quiet  rss/quiet")
    for r in rows:
        print("%-16s %7d %4d  %8.2fx  %8.2fx" % (r[0], r[1], r[2], r[4] / quiet_p99, r[5] / quiet_rss))
        for f in r[6]:
            print("    lost: " + f)
    lost = sum(r[2] for r in rows)
    print("server %s, exit %s; log %s" % ("alive" if alive else "DIED", rc, srv.log_path))
    return 0 if lost == 0 and alive else 1


if __name__ == "__main__":
    sys.exit(main())
