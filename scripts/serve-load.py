#!/usr/bin/env python3
"""Load test of qvl serve: R chat completions from C concurrent clients, bounded in count and
time; checks that none is lost or duplicated and prints p50/p99 latency and tokens/s.

usage:
  scripts/serve-load.py --port N [options]                 a server already running on loopback
  scripts/serve-load.py --qvl QVL -m MODEL_DIR [options]   starts qvl serve -m MODEL_DIR itself
  scripts/serve-load.py --qvl QVL --shared DIR [options]   ... with the tiny random-weight model
                                                           made around DIR's Qwen3-VL tokenizer
options: --requests R (200) --clients C (16) --max-tokens N (32) --time-limit S (600: clients
take no new request after S seconds; what is left is reported lost). For a server it starts:
--parallel P (4; a list such as 1,4,8 runs one server per count, one after the other)
--backend NAME, -t/--threads N, --serve-arg ARG (repeatable: any other qvl serve flag).

Each run ends with one line to compare runs by, e.g.
  summary: parallel 4, 200/200 answered, p50 0.518 s, p99 0.769 s, 937.9 tokens/s, ok
and with several counts a last line with each count's tokens/s against the first's.

Every request carries a marker: request i's prompt is "marker" followed by i one-token words,
so its usage.prompt_tokens must be the first request's plus i: an answer that came back to the
wrong client, twice, or not at all is caught. The server's own counters (/metrics) must have
grown by exactly R requests and by the completion tokens the clients received.
Exit 0 when everything checks, 1 otherwise, 77 when --shared has no tokenizer."""
import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import serve_util as u  # noqa: E402


def percentile(sorted_values, p):
    """Nearest-rank percentile of a sorted list."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, int(round(p / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def run_load(port, n_requests, n_clients, max_tokens, time_limit):
    """Returns (problems, report lines, summary figures)."""
    status, body = u.chat(port, {"messages": u.user("marker"), "max_tokens": 1})
    if status != 200:
        return (["the probe request failed: %s %s" % (status, body)], [],
                {"answered": 0, "requests": n_requests, "p50": float("nan"),
                 "p99": float("nan"), "tokens_per_s": 0.0})
    base = body["usage"]["prompt_tokens"]
    before_req = u.metric(port, "qvl_requests_total")
    before_tok = u.metric(port, "qvl_completion_tokens_total")
    split_names = ("qvl_prefill_seconds_total", "qvl_prefill_tokens_total",
                   "qvl_decode_seconds_total", "qvl_decode_tokens_total", "qvl_decode_steps_total")
    split_before = [u.metric(port, n) for n in split_names]

    todo = list(range(n_requests))
    results, lock = {}, threading.Lock()
    stop_at = time.time() + time_limit

    def client():
        while True:
            with lock:
                if not todo or time.time() > stop_at:
                    return
                i = todo.pop(0)
            t0 = time.time()
            try:
                status, body = u.chat(port, {"messages": u.user("marker" + " apple" * i),
                                             "max_tokens": max_tokens, "temperature": 0},
                                      timeout=max(1.0, stop_at - t0 + 30))
            except OSError as e:
                status, body = None, str(e)
            with lock:
                results.setdefault(i, []).append((status, body, time.time() - t0))

    t_start = time.time()
    threads = [threading.Thread(target=client) for _ in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t_start

    problems = []
    lost = [i for i in range(n_requests) if i not in results]
    if lost:
        problems.append("%d request(s) not answered within the time limit (first: %s)"
                        % (len(lost), lost[:5]))
    twice = [i for i, v in results.items() if len(v) != 1]
    if twice:
        problems.append("answered more than once: %s" % twice[:5])
    latencies, completion, ids = [], 0, set()
    for i, v in sorted(results.items()):
        status, body, seconds = v[0]
        if status != 200 or not isinstance(body, dict):
            problems.append("request %d: status %s %s" % (i, status, str(body)[:200]))
            continue
        if body["usage"]["prompt_tokens"] != base + i:
            problems.append("request %d: answer for a prompt of %d tokens, not %d (another "
                            "request's answer)" % (i, body["usage"]["prompt_tokens"], base + i))
        if body["id"] in ids:
            problems.append("request %d: response id %s seen before" % (i, body["id"]))
        ids.add(body["id"])
        latencies.append(seconds)
        completion += body["usage"]["completion_tokens"]
    after_req = u.metric(port, "qvl_requests_total")
    after_tok = u.metric(port, "qvl_completion_tokens_total")
    if None not in (before_req, after_req) and after_req - before_req != n_requests:
        problems.append("the server ran %d requests, not %d" % (after_req - before_req, n_requests))
    if None not in (before_tok, after_tok) and after_tok - before_tok != completion:
        problems.append("the server generated %d tokens, the clients received %d"
                        % (after_tok - before_tok, completion))
    latencies.sort()
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    report = [
        "requests %d, clients %d, max_tokens %d: %d answered in %.2f s (%.2f requests/s)"
        % (n_requests, n_clients, max_tokens, len(latencies), wall, len(latencies) / wall),
        "latency p50 %.3f s, p99 %.3f s, max %.3f s" % (p50, p99, latencies[-1] if latencies
                                                        else float("nan")),
        "tokens generated %d: %.1f tokens/s in total" % (completion, completion / wall),
    ]
    # Where the wall time went, by the server's own counters: a decode step's tok/s is what
    # qvl-bench --parallel measures; the rest is prefill and the engine's work between steps.
    split_after = [u.metric(port, n) for n in split_names]
    if None not in split_before and None not in split_after:
        pre_s, pre_t, dec_s, dec_t, steps = (b - a for a, b in zip(split_before, split_after))
        report.append(
            "server time: prefill %.2f s (%d tokens, %.0f tok/s), decode steps %.2f s (%d steps, "
            "%.1f rows each, %.1f tok/s), the rest %.2f s of the wall time"
            % (pre_s, pre_t, pre_t / pre_s if pre_s > 0 else 0.0, dec_s, steps,
               dec_t / steps if steps else 0.0, dec_t / dec_s if dec_s > 0 else 0.0,
               wall - pre_s - dec_s))
    summary = {"answered": len(latencies), "requests": n_requests, "p50": p50, "p99": p99,
               "tokens_per_s": completion / wall}
    return problems, report, summary


def summary_line(label, s, problems):
    return ("summary: %s, %d/%d answered, p50 %.3f s, p99 %.3f s, %.1f tokens/s, %s"
            % (label, s["answered"], s["requests"], s["p50"], s["p99"], s["tokens_per_s"],
               "ok" if not problems else "%d problem(s)" % len(problems)))


def run_one(a, model, tmp, parallel):
    """Start a server with `parallel` slots (or use --port), load it; (problems, summary)."""
    server = None
    try:
        port = a.port
        if port is None:
            args = ["-m", model, "--parallel", str(parallel), "--queue", str(a.clients)]
            if a.backend:
                args += ["--backend", a.backend]
            if a.threads is not None:
                args += ["-t", str(a.threads)]
            server = u.Server(a.qvl, tmp, "load-%d" % parallel, args + a.serve_arg)
            if not server.wait_ready(600):
                return ["the server did not get ready: " + server.text()[-2000:]], None
            port = server.port
            print("server: %s, --parallel %d, pid %d, port %d"
                  % (os.path.basename(model.rstrip("/")), parallel, server.proc.pid, port))
        problems, report, summary = run_load(port, a.requests, a.clients, a.max_tokens,
                                             a.time_limit)
        for line in report:
            print(line)
        if server is not None:
            rc = server.stop()
            log = server.text()
            server = None
            if rc != 0 or not u.sanitizer_clean(log):
                problems.append("the server exited with %s: %s" % (rc, log[-2000:]))
        return problems, summary
    finally:
        if server is not None:
            server.stop()


def main():
    ap = argparse.ArgumentParser(description="qvl serve load test (see the file's docstring)")
    ap.add_argument("--port", type=int)
    ap.add_argument("--qvl")
    ap.add_argument("-m", "--model")
    ap.add_argument("--shared")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--parallel", default="4")
    ap.add_argument("--backend")
    ap.add_argument("-t", "--threads", type=int)
    ap.add_argument("--time-limit", type=float, default=600)
    ap.add_argument("--serve-arg", action="append", default=[])
    a = ap.parse_args()
    if a.requests < 1 or a.clients < 1 or a.max_tokens < 1 or a.time_limit <= 0:
        ap.error("--requests, --clients, --max-tokens and --time-limit must be positive")
    if a.port is None and not (a.qvl and (a.model or a.shared)):
        ap.error("give --port of a running server, or --qvl with -m MODEL_DIR or --shared DIR")
    try:
        counts = [int(x) for x in a.parallel.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        ap.error("--parallel takes slot counts >= 1, e.g. 4 or 1,4,8")
    if a.port is not None and len(counts) > 1:
        ap.error("with --port the server is already running: one --parallel value only")

    tmp = tempfile.mkdtemp(prefix="qvl-load-")
    try:
        model = a.model
        if a.port is None and not model:
            tok = u.tokenizer_path(a.shared)
            if not os.path.isfile(tok):
                print("skip: %s absent (the tiny model needs the real tokenizer)" % tok)
                return 77
            model = u.make_tiny_model(a.qvl, tmp, tok)
        all_problems, done = [], []
        for p in counts:
            problems, summary = run_one(a, model, tmp, p)
            for msg in problems:
                print("FAIL " + msg)
            if summary is not None:
                label = "parallel %d" % p if a.port is None else "port %d" % a.port
                print(summary_line(label, summary, problems), flush=True)
                done.append((p, summary["tokens_per_s"]))
            all_problems += problems
        if len(done) > 1 and done[0][1] > 0:
            print("tokens/s against --parallel %d: %s" % (done[0][0], ", ".join(
                "%d slots %.2fx" % (p, t / done[0][1]) for p, t in done[1:])))
        print("ok: nothing lost or duplicated" if not all_problems
              else "%d problem(s)" % len(all_problems))
        return 0 if not all_problems else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
