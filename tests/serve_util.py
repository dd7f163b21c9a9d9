"""Helpers for the qvl serve tests and scripts that start servers on loopback: the tiny
random-weight model around the real Qwen3-VL tokenizer, a started `qvl serve` process, and
HTTP requests with Python's standard library only."""
import atexit
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time

# Real token ids for the ChatML and vision tokens, tiny layers: fast on any backend, and the
# prompts tokenize as they would for the real model.
TINY_CONFIG = {
    "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
    "vision_end_token_id": 151653, "tie_word_embeddings": True,
    "text_config": {
        "vocab_size": 151936, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "hidden_act": "silu",
        "rms_norm_eps": 1e-06, "rope_theta": 5000000,
        "rope_scaling": {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": True},
        "max_position_embeddings": 16384, "attention_bias": False, "bos_token_id": 151643,
        "eos_token_id": 151645, "tie_word_embeddings": True},
    "vision_config": {
        "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
        "hidden_act": "gelu_pytorch_tanh", "patch_size": 16, "temporal_patch_size": 2,
        "spatial_merge_size": 2, "in_channels": 3, "out_hidden_size": 32,
        "num_position_embeddings": 16, "deepstack_visual_indexes": [0, 1]},
}


def tokenizer_path(shared):
    return os.path.join(shared, "qwen3-vl-2b-instruct", "tokenizer.json")


def make_tiny_model(qvl, tmp, tokenizer, text=None, vision=None):
    """Writes the tiny model under tmp (text, vision: text_config and vision_config values laid
    over TINY_CONFIG's); returns its directory, or raises with mkmodel's error."""
    config = json.loads(json.dumps(TINY_CONFIG))
    config["text_config"].update(text or {})
    config["vision_config"].update(vision or {})
    cfg = os.path.join(tmp, "config.json")
    with open(cfg, "w") as f:
        json.dump(config, f)
    model = os.path.join(tmp, "tiny")
    r = subprocess.run([qvl, "mkmodel", "--config", cfg, "--tokenizer", tokenizer, "--out", model,
                        "--std", "0.5"], capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("qvl mkmodel failed: " + r.stderr.decode(errors="replace"))
    return model


def free_ports(n):
    """n consecutive TCP ports free on 127.0.0.1 right now (there is a window before they are
    bound in which another program may take one; callers start promptly)."""
    for _ in range(200):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        base = probe.getsockname()[1]
        probe.close()
        if base + n > 65535:
            continue
        socks, ok = [], True
        try:
            for p in range(base, base + n):
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    s.close()
                    break
                socks.append(s)
        finally:
            for s in socks:
                s.close()
        if ok:
            return base
    raise RuntimeError("no %d consecutive free ports on 127.0.0.1" % n)


def http_request(port, method, path, body=None, headers=None, timeout=120):
    """(status, lower-cased headers, body bytes)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = dict(headers or {})
    if body is not None and not isinstance(body, (bytes, str)):
        body = json.dumps(body)
        h.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        conn.close()


def chat(port, payload, timeout=120):
    """(status, parsed JSON body or raw bytes)."""
    status, _, data = http_request(port, "POST", "/v1/chat/completions", payload, timeout=timeout)
    try:
        return status, json.loads(data)
    except ValueError:
        return status, data


def read_events(r):
    """(parsed data events, saw [DONE]) of a Server-Sent Events response body."""
    events, done = [], False
    for raw in r:
        line = raw.decode("utf-8").rstrip("\n")
        if line == "data: [DONE]":
            done = True
        elif line.startswith("data: "):
            events.append(json.loads(line[6:]))
    return events, done


def stream(port, payload, timeout=120):
    """(status, parsed events, saw [DONE]) of a streamed chat completion."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/chat/completions", body=json.dumps(payload),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return r.status, [json.loads(r.read())], False
        events, done = read_events(r)
        return r.status, events, done
    finally:
        conn.close()


def metric(port, name):
    """One unlabelled series of GET /metrics, or None."""
    try:
        _, _, data = http_request(port, "GET", "/metrics", timeout=10)
    except OSError:
        return None
    m = re.search(r"^" + re.escape(name) + r" ([0-9.e+-]+)$", data.decode(), re.M)
    return float(m.group(1)) if m else None


def content_of(body):
    try:
        return body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        return None


def user(text):
    return [{"role": "user", "content": text}]


def run_concurrently(worker, n):
    """Calls worker(0) .. worker(n - 1) on n threads at once and waits for all of them."""
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


_OWN_KEY = object()  # Server methods' default: the server's own API key


_STARTED = []  # every Server's process: the ones still running are killed when Python exits


@atexit.register
def _kill_leftovers():
    """A test that stops on an exception must not leave its servers running."""
    for proc in _STARTED:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class Server:
    """`qvl serve` on a free loopback port (or the one given), its output in tmp/NAME.log.
    key: the server's --api-key (the caller passes the flag in args too); request, chat,
    stream and metric send it unless told key=None (no Authorization) or another key."""

    def __init__(self, qvl, tmp, name, args, port=0, key=None):
        self.key = key
        self.log_path = os.path.join(tmp, name + ".log")
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen([qvl, "serve"] + args + ["--port", str(port)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        _STARTED.append(self.proc)
        self.port = None
        deadline = time.time() + 60
        while time.time() < deadline and self.port is None:
            m = re.search(r"listening on http://[^ ]*:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                break
            else:
                time.sleep(0.01)
        if self.port is None:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError("server did not start: " + self.text())

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def wait_ready(self, seconds=120):
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                if http_request(self.port, "GET", "/health", timeout=5)[0] == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def _headers(self, headers, key):
        h = dict(headers or {})
        key = self.key if key is _OWN_KEY else key
        if key:
            h.setdefault("Authorization", "Bearer " + key)
        return h

    def request(self, method, path, body=None, headers=None, key=_OWN_KEY, timeout=120):
        """(status, lower-cased headers, body bytes)."""
        return http_request(self.port, method, path, body, self._headers(headers, key), timeout)

    def chat(self, payload, key=_OWN_KEY, timeout=120):
        """(status, headers, parsed JSON body or raw bytes)."""
        status, headers, data = self.request("POST", "/v1/chat/completions", payload, key=key,
                                             timeout=timeout)
        try:
            return status, headers, json.loads(data)
        except ValueError:
            return status, headers, data

    def stream(self, payload, key=_OWN_KEY, timeout=120):
        """(status, content type, parsed events, saw [DONE]); the parsed error body instead of
        the events when the status is not 200."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("POST", "/v1/chat/completions", body=json.dumps(payload),
                         headers=self._headers({"Content-Type": "application/json"}, key))
            r = conn.getresponse()
            if r.status != 200:
                return r.status, r.getheader("Content-Type"), json.loads(r.read()), False
            events, done = read_events(r)
            return r.status, r.getheader("Content-Type"), events, done
        finally:
            conn.close()

    def metric(self, name, key=_OWN_KEY):
        """One unlabelled series of GET /metrics, or None when absent."""
        _, _, data = self.request("GET", "/metrics", key=key, timeout=10)
        m = re.search(r"^" + re.escape(name) + r" ([0-9.e+-]+)$", data.decode(), re.M)
        return float(m.group(1)) if m else None

    def stop(self):
        """SIGTERM, then the exit status ("hung" when it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = "hung"
        self.log.close()
        return rc


def sanitizer_clean(log):
    return "Sanitizer" not in log and "runtime error" not in log


class Checks:
    """ok/FAIL lines and a count, as the other serve tests print them."""

    def __init__(self):
        self.passed = self.failed = 0

    def __call__(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok   " + name, flush=True)
        else:
            self.failed += 1
            print("FAIL " + name + (": " + str(detail)[:800] if detail != "" else ""), flush=True)
        return ok

    def summary(self):
        print("%d passed, %d failed" % (self.passed, self.failed))
        return 0 if self.failed == 0 else 1


def run_on_tiny_model(qvl, shared, work, name, args, check, body):
    """The frame of a server test on a random-weight model around the real tokenizer: skip
    (77) without the tokenizer, start `qvl serve -m MODEL ARGS`, run body(server, model) once it
    is ready, then stop it and check a clean exit with no sanitizer report. Returns the exit
    status for sys.exit."""
    tok = tokenizer_path(shared)
    if not os.path.exists(tok):
        print(f"skip: {tok} absent")
        return 77
    os.makedirs(work, exist_ok=True)
    model = make_tiny_model(qvl, work, tok)
    s = Server(qvl, work, name, ["-m", model] + args)
    try:
        if not check("server ready", s.wait_ready()):
            return 1
        body(s, model)
    finally:
        rc = s.stop()
    check("clean exit on SIGTERM", rc == 0, rc)
    check("no sanitizer report", sanitizer_clean(s.text()), s.text()[-2000:])
    return check.summary()
