#!/usr/bin/env python3
"""qvl serve stopping with every slot busy and a request queued (issue #39, item 3): SIGTERM
while one streamed and one non-streamed request generate in the two slots of --parallel 2 and
two more wait in the queue. Every non-streamed client must get a 503 with an OpenAI error body
(code shutting_down), every streamed one either that 503 (still queued: no headers sent yet)
or, once streaming, an error event followed by data: [DONE]; and the server must exit 0.

Nothing here waits for time: SIGTERM goes once the stream's first text chunk has arrived, both
slots report is_processing in GET /slots and qvl_queue_length says 2. The answers cannot end by
themselves first: the end tokens are banned with logit_bias and max_tokens fills a large
context.

Usage: serve_shutdown_test.py QVL SHARED_DATA_DIR WORK_DIR"""
import http.client
import json
import os
import signal
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_util as u  # noqa: E402

QVL, SHARED, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
CTX = 16384
# <|endoftext|> and <|im_end|>: the tiny model's end tokens; banned, so nothing ends early.
NO_END = {"151643": -100, "151645": -100}


def payload(text, stream):
    return {"messages": u.user(text), "max_tokens": CTX - 64, "temperature": 0,
            "logit_bias": NO_END, "stream": stream}


class Client(threading.Thread):
    """One request on its own connection; status, parsed error or events, [DONE] seen."""

    def __init__(self, port, text, stream, first_chunk=None):
        super().__init__()
        self.port, self.body, self.stream = port, payload(text, stream), stream
        self.first_chunk = first_chunk
        self.status, self.error, self.events, self.done, self.exc = None, None, [], False, None

    def run(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        try:
            conn.request("POST", "/v1/chat/completions", body=json.dumps(self.body),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            self.status = r.status
            if r.status != 200 or not self.stream:
                self.error = json.loads(r.read())
                return
            for raw in r:
                line = raw.decode("utf-8").rstrip("\n")
                if line == "data: [DONE]":
                    self.done = True
                elif line.startswith("data: "):
                    ev = json.loads(line[6:])
                    self.events.append(ev)
                    text = (ev.get("choices") or [{}])[0].get("delta", {}).get("content")
                    if text and self.first_chunk:
                        self.first_chunk.set()
        except Exception as e:  # noqa: BLE001 - reported as a failed check
            self.exc = repr(e)
        finally:
            conn.close()
            if self.first_chunk:
                self.first_chunk.set()  # never leave the main thread waiting


def is_shutdown_error(body):
    e = body.get("error") if isinstance(body, dict) else None
    return (isinstance(e, dict) and e.get("code") == "shutting_down"
            and e.get("type") == "service_unavailable_error" and bool(e.get("message")))


def wait_for(server, what):
    """Polls until what() holds (each poll is a request the server answers); False when the
    server died first."""
    while server.proc.poll() is None:
        if what():
            return True
    return False


def slots_busy(server):
    status, _, data = server.request("GET", "/slots", timeout=30)
    return status == 200 and all(sl["is_processing"] for sl in json.loads(data))


def main():
    check = u.Checks()
    tok = u.tokenizer_path(SHARED)
    if not os.path.exists(tok):
        print(f"skip: {tok} absent")
        return 77
    os.makedirs(WORK, exist_ok=True)
    model = u.make_tiny_model(QVL, WORK, tok)
    s = u.Server(QVL, WORK, "shutdown", ["-m", model, "--parallel", "2", "--queue", "4",
                                         "--ctx", str(CTX)])
    if not check("server ready", s.wait_ready()):
        s.stop()
        return check.summary()
    first = threading.Event()
    streamed = Client(s.port, "a streamed answer", True, first)
    streamed.start()
    first.wait()  # set by the first text chunk, or when the client ends
    check("the stream's first text chunk arrived", streamed.events and streamed.exc is None,
          (streamed.status, streamed.exc, streamed.error))
    whole = Client(s.port, "a whole answer", False)
    whole.start()
    check("both slots busy", wait_for(s, lambda: slots_busy(s)))
    queued = [Client(s.port, "a queued whole answer", False),
              Client(s.port, "a queued stream", True)]
    for q in queued:
        q.start()
    check("two requests queued", wait_for(s, lambda: s.metric("qvl_queue_length") == 2))
    s.proc.send_signal(signal.SIGTERM)
    for t in [streamed, whole] + queued:
        t.join()
    rc = s.stop()

    errors = [ev for ev in streamed.events if "error" in ev]
    check("streamed: an error event, code shutting_down", len(errors) == 1 and
          is_shutdown_error(errors[0]), streamed.events[-3:])
    check("streamed: the error event is the last event, then [DONE]",
          streamed.events and streamed.events[-1] is (errors[0] if errors else None)
          and streamed.done, (streamed.events[-2:], streamed.done, streamed.exc))
    check("non-streamed in a slot: 503 with the error body",
          whole.status == 503 and is_shutdown_error(whole.error),
          (whole.status, whole.error, whole.exc))
    check("queued non-streamed: 503 with the error body",
          queued[0].status == 503 and is_shutdown_error(queued[0].error),
          (queued[0].status, queued[0].error, queued[0].exc))
    check("queued stream: 503 with the error body (no headers were sent)",
          queued[1].status == 503 and is_shutdown_error(queued[1].error),
          (queued[1].status, queued[1].error, queued[1].exc))
    check("the server exits 0", rc == 0, (rc, s.text()[-2000:]))
    check("no sanitizer report", u.sanitizer_clean(s.text()), s.text()[-3000:])
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
