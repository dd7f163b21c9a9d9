#!/usr/bin/env python3
"""qvl serve's chat page at GET / over plain HTTP (the browser test is
serve_webui_browser_test.py): the page is the file tools/serve/webui/index.html byte for byte,
with Content-Type text/html; charset=utf-8, Cache-Control: no-cache and a
Content-Security-Policy that loads nothing from anywhere and allows exactly the page's own
<script> and <style> blocks (their SHA-256, computed here); it loads without the API key while
the API still needs it; HEAD works, POST is 405; the page names no other host; with
--no-webui GET / is 404 as before; the README's command that serves the page on the tiny
fixture works.

usage: serve_webui_test.py QVL_BINARY SOURCE_DIR SHARED_DATA_DIR WORK_DIR
Skips (77) without the tokenizer."""
import base64
import hashlib
import json
import os
import re
import sys

import serve_util

QVL, SRC, SHARED, WORK = sys.argv[1:5]
PAGE = os.path.join(SRC, "tools", "serve", "webui", "index.html")
KEY = "webui-test-key"
check = serve_util.Checks()


def block_hash(page, tag):
    """CSP's hash source for the text between the page's first <tag> and its </tag>."""
    m = re.search(b"<" + tag + b">(.*?)</" + tag + b">", page, re.S)
    return "'sha256-%s'" % base64.b64encode(hashlib.sha256(m.group(1)).digest()).decode()


def csp_directives(header):
    out = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            out[words[0]] = words[1:]
    return out


def external_references(page):
    """Anything in the page that could make a browser load from elsewhere: an http(s) URL, a
    protocol-relative //host in an attribute or url(), an @import."""
    text = page.decode()
    found = re.findall(r"https?://[^\s\"'<>)]*", text, re.I)
    found += re.findall(r"""(?:src|href|action)\s*=\s*["']?\s*//[^\s"'>]*""", text, re.I)
    found += re.findall(r"url\(\s*[\"']?\s*//[^)]*\)", text, re.I)
    found += re.findall(r"@import[^;]*;", text, re.I)
    return found


def body(s, model):
    page = open(PAGE, "rb").read()
    status, headers, data = s.request("GET", "/", key=None)
    check("GET / without a key: 200", status == 200, (status, data[:200]))
    check("the page is index.html byte for byte", data == page, len(data))
    check("Content-Type text/html; charset=utf-8",
          headers.get("content-type") == "text/html; charset=utf-8", headers.get("content-type"))
    check("Cache-Control: no-cache", headers.get("cache-control") == "no-cache",
          headers.get("cache-control"))
    csp = csp_directives(headers.get("content-security-policy", ""))
    check("CSP: default-src 'none'", csp.get("default-src") == ["'none'"], csp)
    check("CSP: connect-src 'self' only", csp.get("connect-src") == ["'self'"], csp)
    check("CSP: img-src data: only", csp.get("img-src") == ["data:"], csp)
    check("CSP: script-src is the page's <script> hash",
          csp.get("script-src") == [block_hash(page, b"script")], csp.get("script-src"))
    check("CSP: style-src is the page's <style> hash",
          csp.get("style-src") == [block_hash(page, b"style")], csp.get("style-src"))
    check("CSP: base-uri, form-action, frame-ancestors 'none'",
          all(csp.get(d) == ["'none'"] for d in ("base-uri", "form-action", "frame-ancestors")), csp)
    check("one <script> and one <style> (the CSP allows the first of each)",
          page.count(b"<script") == 1 and page.count(b"<style") == 1)
    refs = external_references(page)
    check("the page names no other host", not refs, refs)

    status, headers, data = s.request("HEAD", "/", key=None)
    check("HEAD /: 200 with the page's headers", status == 200 and
          headers.get("content-type") == "text/html; charset=utf-8", (status, headers))
    status, headers, data = s.request("POST", "/", body={}, key=None)
    check("POST /: 405", status == 405 and "GET" in headers.get("allow", ""), (status, data[:200]))
    status, _, data = s.request("GET", "/?q=1", key=None)
    check("GET /?q=1: the page (the query is not part of the path)", status == 200 and data == page,
          status)
    status, _, data = s.request("GET", "/index.html", key=None)
    check("GET /index.html: 404 (only / is the page)", status == 404, status)
    status, _, data = s.request("GET", "/v1/models", key=None)
    check("the API still needs the key: GET /v1/models without it is 401", status == 401, status)
    status, _, data = s.request("GET", "/v1/models", key=KEY)
    check("GET /v1/models with the key: 200", status == 200, (status, data[:200]))
    status, _, data = s.request("GET", "/", key=None, headers={"Host": "evil.example"})
    check("the page keeps the Host check (DNS rebinding): 403", status == 403, status)

    off = serve_util.Server(QVL, WORK, "no-webui", ["-m", model, "--no-webui"])
    try:
        status, headers, data = off.request("GET", "/")
        try:
            err = json.loads(data)["error"]
        except (ValueError, KeyError, TypeError):
            err = None
        check("--no-webui: GET / is 404 with a JSON error", status == 404 and err is not None and
              headers.get("content-type") == "application/json", (status, data[:200]))
    finally:
        rc = off.stop()
    check("--no-webui server: clean exit", rc == 0, rc)
    check("--no-webui server: no sanitizer report", serve_util.sanitizer_clean(off.text()),
          off.text()[-2000:])


def readme_command():
    """The README's command that serves the page from a fresh clone, run as written there (the
    port made free, the fixture's path made absolute): the page and a streamed answer to a
    question with a picture, sent as the page sends it."""
    text = open(os.path.join(SRC, "README.md")).read()
    m = re.search(r"^\./build/tools/qvl serve -m (tests/fixtures/\S+) --port 8080\b", text, re.M)
    if not check("the README has the command that serves the page", m):
        return
    s = serve_util.Server(QVL, WORK, "readme", ["-m", os.path.join(SRC, m.group(1))])
    try:
        check("README's server ready", s.wait_ready())
        status, _, data = s.request("GET", "/")
        check("README's server: GET / is the page", status == 200 and data == open(PAGE, "rb").read(),
              status)
        png = open(os.path.join(SRC, "tests", "fixtures", "tiny-tied", "small.png"), "rb").read()
        url = "data:image/png;base64," + base64.b64encode(png).decode()
        status, _, events, done = s.stream({
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                      {"type": "text", "text": "What is in it?"}]}],
            "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 8,
            "temperature": 0})
        usage = [e["usage"] for e in events if isinstance(e, dict) and e.get("usage")]
        check("README's server: a picture question streams to [DONE] with usage",
              status == 200 and done and usage and usage[-1]["completion_tokens"] > 0,
              (status, events[-2:]))
    finally:
        rc = s.stop()
    check("README's server: clean exit", rc == 0, rc)
    check("README's server: no sanitizer report", serve_util.sanitizer_clean(s.text()), s.text()[-2000:])


os.makedirs(WORK, exist_ok=True)
readme_command()
if check.failed:
    sys.exit(check.summary())
sys.exit(serve_util.run_on_tiny_model(QVL, SHARED, WORK, "webui", ["--api-key", KEY], check, body))
