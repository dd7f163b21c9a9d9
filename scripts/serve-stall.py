#!/usr/bin/env python3
"""The longest wait between two tokens of a running stream while another client's long prompt
arrives, for each --batch-size given: how much chunked prefill protects running answers.

usage: serve-stall.py --qvl build/tools/qvl --tokenizer TOKENIZER_JSON
                      [-m MODEL_DIR] [--batch-sizes 0,512] [--prompt-words 4000] [-- SERVE_ARGS]

Without -m a random model is made with `qvl mkmodel` (tests/serve_util.py's tiny config, or
--hidden/--layers for a larger one). Per batch size: a server with 2 slots; client A streams a
long greedy answer; once A's tokens flow, client B sends a prompt of about --prompt-words
words; the script records the arrival time of every chunk of A's stream and reports the
largest gap while B's prompt was being prefilled, against A's median gap before B came. A's
answers are repeated one after another (a random model's may end early at a stop token)."""
import argparse
import http.client
import json
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import serve_util as u  # noqa: E402


def stream_times(port, payload, times, started, done):
    """A's streams, one after another until done is set (a random model's answer may end at a
    stop token at any point: the next one starts at once, its short prefill a small gap)."""
    while not done.is_set():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        conn.request("POST", "/v1/chat/completions", body=json.dumps(payload),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        for raw in r:
            line = raw.decode("utf-8", "replace")
            if line.startswith("data: ") and '"content"' in line:
                times.append(time.monotonic())
                if len(times) == 20:
                    started.set()
            if done.is_set():
                break
        conn.close()


def measure(qvl, model, batch, words, extra, a_prompt):
    tmp = tempfile.mkdtemp(prefix="qvl-stall-")
    s = u.Server(qvl, tmp, "stall", ["-m", model, "--parallel", "2", "--ctx", str(words * 3),
                                     "--batch-size", str(batch)] + extra)
    if not s.wait_ready(600):
        raise RuntimeError(s.text())
    times, started, done = [], threading.Event(), threading.Event()
    a = threading.Thread(target=stream_times, args=(s.port, {
        "messages": u.user(a_prompt), "max_tokens": 2000, "temperature": 0,
        "stream": True}, times, started, done))
    a.start()
    started.wait(600)
    t0 = time.monotonic()
    status, body = u.chat(s.port, {"messages": u.user("word " * words), "max_tokens": 1,
                                   "temperature": 0}, timeout=600)
    t1 = time.monotonic()
    n_prompt = body.get("usage", {}).get("prompt_tokens") if status == 200 else None
    while not times or times[-1] < t1:  # A's first token after B's prefill closes the window
        time.sleep(0.01)
    done.set()
    a.join()
    s.stop()
    before = [b - a_ for a_, b in zip(times, times[1:]) if b <= t0]
    during = [b - a_ for a_, b in zip(times, times[1:]) if b > t0 and a_ < t1]
    return n_prompt, t1 - t0, statistics.median(before), max(during) if during else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qvl", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("-m", "--model")
    ap.add_argument("--hidden", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--batch-sizes", default="0,512")
    ap.add_argument("--prompt-words", type=int, default=4000)
    ap.add_argument("--a-prompt", default="tell a long story")
    ap.add_argument("extra", nargs="*")
    a = ap.parse_args()
    model = a.model
    if not model:
        text = {"max_position_embeddings": 65536}
        if a.hidden:
            text.update({"hidden_size": a.hidden, "intermediate_size": 3 * a.hidden,
                         "num_attention_heads": a.hidden // 64, "num_key_value_heads":
                         max(1, a.hidden // 256), "head_dim": 64,
                         "rope_scaling": {"rope_type": "default", "mrope_section": [12, 10, 10],
                                          "mrope_interleaved": True}})
        if a.layers:
            text["num_hidden_layers"] = a.layers
        vision = {"out_hidden_size": a.hidden} if a.hidden else None
        model = u.make_tiny_model(a.qvl, tempfile.mkdtemp(prefix="qvl-stall-m-"), a.tokenizer,
                                  text, vision)
    print("| --batch-size | prompt tokens | B's prefill (s) | A's median gap before (ms) | "
          "A's longest gap during B's prefill (ms) |")
    print("|---|---|---|---|---|")
    for b in [int(x) for x in a.batch_sizes.split(",")]:
        n, took, med, worst = measure(a.qvl, model, b, a.prompt_words, a.extra, a.a_prompt)
        print("| %d | %s | %.3f | %.1f | %s |" % (b, n, took, med * 1e3,
                                                  "%.1f" % (worst * 1e3) if worst else "-"))


if __name__ == "__main__":
    main()
