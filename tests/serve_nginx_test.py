#!/usr/bin/env python3
"""scripts/serve-replicas.sh end to end: 2 replicas of qvl serve behind nginx on loopback.

usage: serve_nginx_test.py QVL_BINARY SOURCE_DIR SHARED_DATA_DIR
Exit 77 (skip) when nginx is not installed (scripts/install-deps.sh installs it) or when
SHARED_DATA_DIR has no Qwen3-VL tokenizer.json.

At least 32 requests from 8 clients through nginx, each with its own prompt length (its marker,
read back from usage.prompt_tokens); both replicas serve some (their own /metrics); one replica
is killed (SIGKILL) while it is generating; every request is still answered, by the survivor.
The clients keep sending until the kill has happened (however fast or slow the machine), then
16 more, so the kill never depends on how long the first 32 take.
Then a streamed answer passes through nginx, a foreign Host is refused through it (403), and
SIGTERM stops nginx and both replicas and removes the script's directory."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util as u  # noqa: E402

QVL, SRC = sys.argv[1], sys.argv[2]
SHARED = sys.argv[3] if len(sys.argv) > 3 else ""
# Short answers, so the run stays well inside ctest's limit under the sanitizers beside other
# tests; the end tokens are banned so every answer takes its MAX_TOKENS steps (a replica is busy
# long enough for its /metrics to show it). MAX_ISSUED bounds the run if the kill never comes
# (prompts stay inside --ctx 1024).
N_REQUESTS, N_CLIENTS, MAX_TOKENS, AFTER_KILL, MAX_ISSUED = 32, 8, 48, 16, 400
NO_END = {"151643": -100, "151645": -100}  # <|endoftext|>, <|im_end|>
check = u.Checks()


def find_nginx():
    return shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by the script) counts as gone.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class Replicas:
    def __init__(self, tmp, model, nginx):
        self.base = u.free_ports(3)
        self.port = self.base
        self.log_path = os.path.join(tmp, "replicas.log")
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(
            [os.path.join(SRC, "scripts", "serve-replicas.sh"), "-m", model, "-k", "2",
             "--port", str(self.base), "--qvl", QVL, "--nginx", nginx, "--request-timeout", "120",
             "--", "--parallel", "2", "--ctx", "1024"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.ready = False
        # Until the script says so or exits (ctest's timeout bounds a hang).
        while self.proc.poll() is None:
            if "ready:" in self.text():
                self.ready = True
                break
            time.sleep(0.05)
        self.replicas = [(int(m.group(1)), int(m.group(2))) for m in
                         re.finditer(r"replica \d+: pid (\d+) at http://127\.0\.0\.1:(\d+)", self.text())]
        m = re.search(r"nginx: pid (\d+)", self.text())
        self.nginx_pid = int(m.group(1)) if m else None
        m = re.search(r"config (\S+)/nginx\.conf", self.text())
        self.dir = m.group(1) if m else None

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_for(self, line):
        """True once the script's output holds line (it polls its replicas every 0.5 s, so a
        death is reported a little after it happens); False if the script exits without it.
        ctest's timeout bounds a hang."""
        while True:
            if line in self.text():
                return True
            if self.proc.poll() is not None:
                return line in self.text()
            time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            rc = "hung"
        self.log.close()
        return rc


def requests_total(port):
    v = u.metric(port, "qvl_requests_total")
    return int(v) if v is not None else None


def main():
    nginx = find_nginx()
    if not nginx:
        print("skip: nginx is not installed (scripts/install-deps.sh installs it)")
        return 77
    tok = u.tokenizer_path(SHARED)
    if not os.path.isfile(tok):
        print("skip: %s absent (qvl serve tests need the real tokenizer)" % tok)
        return 77
    tmp = tempfile.mkdtemp(prefix="qvl-nginx-")
    r = None
    try:
        model = u.make_tiny_model(QVL, tmp, tok)
        r = Replicas(tmp, model, nginx)
        if not check("2 replicas and nginx start", r.ready and len(r.replicas) == 2 and
                     r.nginx_pid is not None, r.text()[-3000:]):
            return check.summary()
        (pid0, port0), (pid1, port1) = r.replicas
        # The marker: i extra one-token words, so request i's prompt_tokens is base + i.
        status, body = u.chat(r.port, {"messages": u.user("marker"), "max_tokens": 1})
        check("a request through nginx", status == 200, body)
        base = body["usage"]["prompt_tokens"] if status == 200 else 0

        results, lock = {}, threading.Lock()
        issue = {"next": 0, "end": None}  # end: how many to send in all, fixed at the kill
        served_before_kill = {}

        def client():
            while True:
                with lock:
                    i = issue["next"]
                    if i >= (issue["end"] if issue["end"] is not None else MAX_ISSUED):
                        return
                    issue["next"] += 1
                t0 = time.time()
                try:
                    status, body = u.chat(r.port, {"messages": u.user("marker" + " apple" * i),
                                                   "max_tokens": MAX_TOKENS, "temperature": 0,
                                                   "logit_bias": NO_END}, timeout=300)
                except OSError as e:
                    status, body = None, str(e)
                with lock:
                    results.setdefault(i, []).append((status, body, time.time() - t0))

        threads = [threading.Thread(target=client) for _ in range(N_CLIENTS)]
        for t in threads:
            t.start()
        # Kill replica 1 while it is generating, once both replicas have finished some requests:
        # the clients keep sending until then, so this waits for the event, not for luck.
        killed_busy = None
        while any(t.is_alive() for t in threads):
            a, b = requests_total(port0), requests_total(port1)
            busy = u.metric(port1, "qvl_slots_busy")
            if a and b and a >= 3 and b >= 3 and busy and busy > 0:
                served_before_kill = {0: a, 1: b}
                killed_busy = busy
                os.kill(pid1, signal.SIGKILL)
                with lock:
                    issue["end"] = max(N_REQUESTS, issue["next"] + AFTER_KILL)
                break
            time.sleep(0.02)
        with lock:
            done_at_kill = len(results)
        for t in threads:
            t.join(timeout=300)
        n_sent = issue["next"]
        check("both replicas served before the kill (their /metrics)",
              served_before_kill.get(0, 0) > 0 and served_before_kill.get(1, 0) > 0,
              served_before_kill)
        if not check("replica 1 killed (SIGKILL) while generating, mid-run",
                     killed_busy is not None and 0 < done_at_kill < n_sent,
                     (killed_busy, done_at_kill, n_sent)):
            return check.summary()
        answers = {i: v for i, v in results.items()}
        lost = [i for i in range(n_sent) if i not in answers]
        dup = [i for i, v in answers.items() if len(v) != 1]
        bad = [(i, v[0][0], str(v[0][1])[:200]) for i, v in answers.items()
               if v[0][0] != 200 or v[0][1]["usage"]["prompt_tokens"] != base + i or
               not isinstance(u.content_of(v[0][1]), str)]
        check("all %d requests answered 200 once, each with its own marker" % n_sent,
              not lost and not dup and not bad, (lost, dup, bad))
        after = requests_total(port0)
        check("the survivor answered the rest", after is not None and
              after > served_before_kill.get(0, 0), (served_before_kill, after))
        reported = r.wait_for("replica pid %d exited" % pid1)
        check("the killed replica is gone, the script still runs", not alive(pid1) and
              r.proc.poll() is None and reported, r.text()[-2000:])

        status, events, done = u.stream(r.port, {"messages": u.user("stream please"),
                                                 "max_tokens": 8, "stream": True, "temperature": 0})
        check("a streamed answer through nginx (after the kill)", status == 200 and done and
              events and events[-1]["choices"][0]["finish_reason"] == "length", (status, events[-1:]))

        # nginx passes the client's Host on, so a rebinding page gets no further through it.
        status = u.http_request(r.port, "GET", "/v1/models", headers={"Host": "evil.example"})[0]
        check("a foreign Host through nginx: 403 from the replica", status == 403, status)

        rc = r.stop()
        check("SIGTERM: the script exits 0", rc == 0, (rc, r.text()[-2000:]))
        # The script reaped nginx and the replicas before it exited.
        check("nginx and the replicas are stopped", not alive(pid0) and not alive(r.nginx_pid),
              (alive(pid0), alive(r.nginx_pid)))
        check("its temporary directory is removed", r.dir is not None and not os.path.exists(r.dir),
              r.dir)
        check("the surviving replica exits 0 on SIGTERM (no crash or sanitizer report)",
              "replica pid %d stopped with status" % pid0 not in r.text(), r.text()[-2000:])
    finally:
        if r is not None and r.proc.poll() is None:
            os.killpg(r.proc.pid, signal.SIGKILL)
        shutil.rmtree(tmp, ignore_errors=True)
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
