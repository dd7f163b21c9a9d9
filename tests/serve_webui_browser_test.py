#!/usr/bin/env python3
"""qvl serve's chat page in a real browser: headless Chromium driven over the Chrome DevTools
Protocol (tests/cdp.py), against a server with --api-key on a random-weight model with the real
Qwen3-VL tokenizer. The page loads without the key and says a key is needed; a send without it
shows the 401 message and gives the message back; with the key entered, a question with a
picture attached through the file input streams an answer that equals the API's own answer to
the same request at temperature 0 (and the page's request is that request, stream: true); a
second turn sends the history and again matches the API; the timings line carries the API's
token count; Stop ends a long answer and the server cancels it; pasted and dropped pictures are
attached; New chat during an answer starts an empty conversation. Every request the page made
went to the server, and the page logged no script or policy error.

The screenshot of the page after the two turns is WORK_DIR/webui.png (in the build tree:
build/tests/serve_webui_browser/webui.png); Chromium's log is WORK_DIR/chromium.log.

usage: serve_webui_browser_test.py QVL_BINARY SOURCE_DIR SHARED_DATA_DIR WORK_DIR
Skips (77) without Chromium or the tokenizer."""
import base64
import json
import os
import re
import sys
import tempfile
import time

import cdp
import serve_util

QVL, SRC, SHARED, WORK = sys.argv[1:5]
PICTURE = os.path.join(SRC, "tests", "fixtures", "tiny-tied", "small.png")
KEY = "webui-browser-key"
MAX_TOKENS = 24
# Long enough that Stop, pressed as soon as the first text shows, comes well before the end.
LONG_MAX_TOKENS = 3000
check = serve_util.Checks()

CHROMIUM = cdp.find_chromium()
if not CHROMIUM:
    print("skip: Chromium is not installed (Debian: apt-get install chromium, which "
          "scripts/install-deps.sh does; or set QVL_CHROMIUM to its path)")
    sys.exit(77)

LAST = "[...document.querySelectorAll('.msg.assistant')].pop()"


def set_value(b, element_id, value):
    b.evaluate("(() => { const e = document.getElementById(%s); e.value = %s;"
               " e.dispatchEvent(new Event('change')); })()" % (json.dumps(element_id), json.dumps(value)))


def click(b, element_id):
    b.evaluate("document.getElementById(%s).click()" % json.dumps(element_id))


def ask(b, text):
    """Sends text (with whatever is attached) and waits for the answer to end; its final state,
    text, timings line and token count."""
    n = b.evaluate("document.querySelectorAll('.msg.assistant').length")
    set_value(b, "prompt", text)
    click(b, "send")
    b.wait_for("document.querySelectorAll('.msg.assistant').length > %d && "
               "['done', 'error', 'stopped'].includes(%s.dataset.state)" % (n, LAST), 300)
    return b.evaluate("(() => { const m = %s; const t = m.querySelector('.timings');"
                      " return {state: m.dataset.state, text: m.querySelector('.content').textContent,"
                      " timings: t ? t.textContent : '', tokens: m.dataset.completionTokens || null,"
                      " error: m.querySelector('.error') ? m.querySelector('.error').textContent : ''}; })()"
                      % LAST)


def chat_requests(b):
    """The bodies the page POSTed to /v1/chat/completions, in order."""
    out = []
    for method, p in b.events:
        if method != "Network.requestWillBeSent":
            continue
        req = p["request"]
        if req["method"] != "POST" or not req["url"].endswith("/v1/chat/completions"):
            continue
        data = req.get("postData")
        if data is None and req.get("hasPostData"):
            data = b.call("Network.getRequestPostData", {"requestId": p["requestId"]})["postData"]
        out.append(json.loads(data) if data else None)
    return out


def api_answer(s, messages):
    status, _, r = s.chat({"messages": messages, "temperature": 0, "max_tokens": MAX_TOKENS}, key=KEY)
    if status != 200:
        return None, None
    return serve_util.content_of(r), r["usage"]["completion_tokens"]


def run_page(s, b):
    origin = "http://127.0.0.1:%d" % s.port
    for domain in ("Page", "Runtime", "Network", "Log", "DOM"):
        b.call(domain + ".enable")
    b.call("Emulation.setDeviceMetricsOverride",
           {"width": 1100, "height": 900, "deviceScaleFactor": 1, "mobile": False})
    start = len(b.events)
    b.call("Page.navigate", {"url": origin + "/"})
    b.wait_event("Page.loadEventFired", 60, start)
    ready = b.wait_for("document.body.dataset.ready === '1'", 30)
    check("the page's script ran (its CSP hash matched)", ready)

    # No key yet: the model list answers 401 and the page says what to do.
    note = b.wait_for("document.getElementById('notice').textContent", 30)
    check("without a key the page asks for it", "API key" in note and "401" in note, note)
    set_value(b, "prompt", "hello")
    click(b, "send")
    b.wait_for("document.getElementById('notice').textContent.includes('401') && "
               "!document.getElementById('send').disabled && "
               "document.querySelectorAll('.msg').length === 0", 60)
    kept = b.evaluate("document.getElementById('prompt').value")
    check("a send without the key: the 401 message, the message given back", kept == "hello", kept)

    set_value(b, "api-key", KEY)
    model = b.wait_for("document.getElementById('model').textContent", 60)
    check("with the key the page shows the model", model == "tiny", model)
    set_value(b, "temperature", "0")
    set_value(b, "max_tokens", str(MAX_TOKENS))

    # A picture through the file input, as a person choosing a file would give it.
    root = b.call("DOM.getDocument")["root"]["nodeId"]
    node = b.call("DOM.querySelector", {"nodeId": root, "selector": "#file"})["nodeId"]
    b.call("DOM.setFileInputFiles", {"nodeId": node, "files": [PICTURE]})
    n_pics = b.wait_for("document.querySelectorAll('#attachments img').length", 30)
    check("the picture is attached", n_pics == 1, n_pics)

    question = "What is in the picture?"
    first = ask(b, question)
    url = "data:image/png;base64," + base64.b64encode(open(PICTURE, "rb").read()).decode()
    turn1 = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                           {"type": "text", "text": question}]}]
    sent = chat_requests(b)
    want_req = {"messages": turn1, "stream": True, "stream_options": {"include_usage": True},
                "temperature": 0, "max_tokens": MAX_TOKENS}
    check("the page sent the question with the picture, streamed, temperature 0",
          len(sent) == 2 and sent[1] == want_req, sent[1:] and json.dumps(sent[-1])[:600])
    want, want_tokens = api_answer(s, turn1)
    check("first answer: done", first["state"] == "done", first)
    check("first answer: not empty", want is not None and len(first["text"]) > 0, first)
    check("first answer = the API's answer at temperature 0", first["text"] == want,
          (first["text"], want))
    check("first answer: the timings line carries the API's token count",
          first["tokens"] == str(want_tokens) and
          re.search(r"\b%d tokens in [0-9.]+ s" % (want_tokens or -1), first["timings"]) and
          "prompt tokens" in first["timings"], (first, want_tokens))
    streamed = [p for m, p in b.events if m == "Network.responseReceived" and
                p["response"]["url"].endswith("/v1/chat/completions") and
                p["response"]["status"] == 200]
    check("the answer came as an event stream",
          streamed and streamed[-1]["response"]["mimeType"] == "text/event-stream", streamed[-1:])

    follow = "And what colour is it?"
    second = ask(b, follow)
    turn2 = turn1 + [{"role": "assistant", "content": want}, {"role": "user", "content": follow}]
    sent = chat_requests(b)
    check("the second turn sent the whole conversation",
          len(sent) == 3 and sent[2]["messages"] == turn2, sent[-1:] and json.dumps(sent[-1])[:600])
    want2, _ = api_answer(s, turn2)
    check("second answer = the API's answer to the same conversation",
          second["state"] == "done" and second["text"] == want2, (second, want2))

    shot = b.call("Page.captureScreenshot", {"format": "png"})["data"]
    path = os.path.join(WORK, "webui.png")
    with open(path, "wb") as f:
        f.write(base64.b64decode(shot))
    print("screenshot: " + path, flush=True)
    check("screenshot saved", os.path.getsize(path) > 1000)

    # Stop: a long answer, stopped as soon as its first text shows.
    cancelled = s.metric("qvl_requests_cancelled_total", key=KEY) or 0
    set_value(b, "max_tokens", str(LONG_MAX_TOKENS))
    set_value(b, "prompt", "Tell me a long story.")
    n = b.evaluate("document.querySelectorAll('.msg.assistant').length")
    click(b, "send")
    b.wait_for("document.querySelectorAll('.msg.assistant').length > %d && "
               "%s.querySelector('.content').textContent.length > 0" % (n, LAST), 120)
    state = b.evaluate("(() => { const m = %s; if (m.dataset.state === 'streaming')"
                       " document.getElementById('stop').click(); return m.dataset.state; })()" % LAST)
    check("Stop pressed while the answer streamed", state == "streaming", state)
    end = b.wait_for("['done', 'error', 'stopped'].includes(%s.dataset.state) && %s.dataset.state"
                     % (LAST, LAST), 60)
    check("the answer shows as stopped, its text kept", end == "stopped", end)
    check("the server cancelled the stopped request",
          wait_metric(s, "qvl_requests_cancelled_total", cancelled + 1), cancelled)

    # Paste and drop: the picture as a File in a clipboard event and in a drop event, as the
    # browser hands them to the page.
    b.evaluate("(() => { const bytes = Uint8Array.from(atob(%s), (c) => c.charCodeAt(0));"
               " const files = () => { const dt = new DataTransfer();"
               "   dt.items.add(new File([bytes], 'small.png', {type: 'image/png'})); return dt; };"
               " document.getElementById('prompt').dispatchEvent(new ClipboardEvent('paste',"
               "   {clipboardData: files(), bubbles: true, cancelable: true}));"
               " document.getElementById('messages').dispatchEvent(new DragEvent('drop',"
               "   {dataTransfer: files(), bubbles: true, cancelable: true})); })()"
               % json.dumps(url.split(",", 1)[1]))
    srcs = b.wait_for("document.querySelectorAll('#attachments img').length === 2 &&"
                      " [...document.querySelectorAll('#attachments img')].map((i) => i.src)", 30)
    check("a pasted and a dropped picture are attached", srcs == [url, url], srcs and len(srcs))
    b.evaluate("document.querySelector('#attachments button').click()")
    b.evaluate("document.querySelector('#attachments button').click()")
    left = b.evaluate("document.querySelectorAll('#attachments img').length")
    check("the remove buttons take them off", left == 0, left)

    # New chat while an answer streams: the page empties, and the next question goes alone.
    set_value(b, "prompt", "Tell me another long story.")
    n = b.evaluate("document.querySelectorAll('.msg.assistant').length")
    click(b, "send")
    b.wait_for("document.querySelectorAll('.msg.assistant').length > %d && "
               "%s.querySelector('.content').textContent.length > 0" % (n, LAST), 120)
    click(b, "new-chat")
    left = b.wait_for("!document.getElementById('send').disabled && "
                      "String(document.querySelectorAll('.msg').length)", 60)
    check("New chat during an answer clears the conversation", left == "0", left)
    set_value(b, "max_tokens", str(MAX_TOKENS))
    alone = ask(b, "Hello again.")
    sent = chat_requests(b)
    check("the question after New chat is sent alone", alone["state"] == "done" and
          sent[-1]["messages"] == [{"role": "user", "content": "Hello again."}],
          json.dumps(sent[-1])[:400])

    foreign = [p["request"]["url"] for m, p in b.events if m == "Network.requestWillBeSent" and
               not (p["request"]["url"].startswith(origin + "/") or
                    p["request"]["url"].startswith("data:"))]
    check("every request the page made went to the server", not foreign, foreign)
    errors = [p["entry"] for m, p in b.events if m == "Log.entryAdded" and
              p["entry"]["level"] == "error" and p["entry"]["source"] != "network"]
    errors += [p["exceptionDetails"] for m, p in b.events if m == "Runtime.exceptionThrown"]
    check("no script error or policy violation in the page", not errors, errors)


def wait_metric(s, name, at_least, seconds=60):
    """True once the server's metric reaches at_least (the engine notes a cancellation at its
    next step, after the connection saw the client leave)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if (s.metric(name, key=KEY) or 0) >= at_least:
            return True
        time.sleep(0.05)
    return False


def body(s, model):
    with tempfile.TemporaryDirectory() as profile:
        b = cdp.Browser(CHROMIUM, profile, os.path.join(WORK, "chromium.log"))
        try:
            run_page(s, b)
        except (cdp.CdpError, OSError, ConnectionError) as e:
            # A wait that timed out or a lost browser: the step that was running fails.
            check("the page session ran to its end", False, e)
        finally:
            b.close()


sys.exit(serve_util.run_on_tiny_model(QVL, SHARED, WORK, "webui-browser", ["--api-key", KEY],
                                      check, body))
