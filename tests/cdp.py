"""A small Chrome DevTools Protocol client on Python's standard library: headless Chromium
started with --remote-debugging-port=0, a WebSocket (RFC 6455, client side: text frames out,
masked; text, continuation, ping and close frames in) and CDP commands and events over it, with
one page target attached in flat mode. Enough to drive a page from a test; nothing else."""
import base64
import hashlib
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import threading
import time
from urllib.parse import urlsplit

_WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def find_chromium():
    """The Chromium binary ($QVL_CHROMIUM, else chromium or chromium-browser on PATH), or None."""
    env = os.environ.get("QVL_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


class WebSocket:
    def __init__(self, url, timeout):
        u = urlsplit(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n"
                           % (u.path or "/", u.hostname, u.port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the DevTools socket closed during the handshake")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        if " 101 " not in lines[0] + " ":
            raise ConnectionError("no WebSocket upgrade: " + lines[0])
        accept = base64.b64encode(hashlib.sha1((key + _WS_GUID).encode()).digest()).decode()
        if not any(l.lower().startswith("sec-websocket-accept:") and l.split(":", 1)[1].strip() == accept
                   for l in lines[1:]):
            raise ConnectionError("wrong Sec-WebSocket-Accept in the upgrade")

    def _frame(self, opcode, payload):
        n = len(payload)
        head = bytes([0x80 | opcode])
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 1 << 16:
            head += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)  # a client masks every frame (RFC 6455, 5.3)
        body = bytes(b ^ mask[i & 3] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + body)

    def send_text(self, text):
        self._frame(0x1, text.encode())

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self.buf)))
            if not chunk:
                raise ConnectionError("the DevTools socket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv_text(self, timeout):
        """The next whole text message; socket.timeout when none arrives within timeout."""
        self.sock.settimeout(max(timeout, 0.001))
        parts = []
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            mask = self._read(4) if b1 & 0x80 else None
            data = self._read(n)
            if mask:
                data = bytes(b ^ mask[i & 3] for i, b in enumerate(data))
            if opcode == 0x8:
                raise ConnectionError("the browser closed the DevTools socket")
            if opcode == 0x9:
                self._frame(0xA, data)
                continue
            if opcode in (0x1, 0x0):
                parts.append(data)
                if b0 & 0x80:
                    return b"".join(parts).decode()

    def close(self):
        try:
            self._frame(0x8, b"")
        except OSError:
            pass
        self.sock.close()


class CdpError(RuntimeError):
    pass


class Browser:
    """Headless Chromium with one page attached; its stderr goes to log_path."""

    def __init__(self, chromium, profile_dir, log_path, timeout=60, size=(1100, 900)):
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--remote-debugging-port=0", "--user-data-dir=" + profile_dir,
             "--no-sandbox",  # CI runs as root, where Chromium's sandbox cannot start
             "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--window-size=%d,%d" % size, "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.ws_url = None
        found = threading.Event()
        threading.Thread(target=self._read_stderr, args=(found,), daemon=True).start()
        if not found.wait(timeout) or not self.ws_url:
            self.kill()
            raise RuntimeError("Chromium printed no 'DevTools listening on' line (see %s)" % log_path)
        self.ws = WebSocket(self.ws_url, timeout)
        self.next_id = 0
        self.events = []  # every event received so far, in order: (method, params)
        self.session = None
        target = self.call("Target.createTarget", {"url": "about:blank"}, timeout)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 timeout, browser=True)["sessionId"]

    def _read_stderr(self, found):
        """Copies Chromium's stderr to the log, noting the DevTools address when it appears."""
        for raw in self.proc.stderr:
            line = raw.decode(errors="replace")
            self.log.write(line)
            self.log.flush()
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m and not found.is_set():
                self.ws_url = m.group(1)
                found.set()
        found.set()  # exited without the line

    def _receive(self, deadline):
        msg = json.loads(self.ws.recv_text(deadline - time.time()))
        if "method" in msg:
            self.events.append((msg["method"], msg.get("params", {})))
        return msg

    def call(self, method, params=None, timeout=60, browser=False):
        """Runs one command on the page (or the browser) and returns its result."""
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if self.session and not browser:
            msg["sessionId"] = self.session
        self.ws.send_text(json.dumps(msg))
        deadline = time.time() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise CdpError("%s: %s" % (method, reply["error"].get("message")))
                return reply.get("result", {})

    def wait_event(self, method, timeout=60, start=0):
        """The params of the first event `method` at or after index start of self.events."""
        deadline = time.time() + timeout
        i = start
        while True:
            while i < len(self.events):
                if self.events[i][0] == method:
                    return self.events[i][1]
                i += 1
            self._receive(deadline)

    def evaluate(self, expression, timeout=60):
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True}, timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise CdpError("page exception: %s" % d.get("exception", {}).get("description", d.get("text")))
        return r["result"].get("value")

    def wait_for(self, condition, timeout=120):
        """The value of the JavaScript expression `condition` once it is truthy. The page checks
        it again on every change of its document (a MutationObserver), so this reacts to the
        page's own events; CdpError when timeout passes first."""
        js = ("new Promise((resolve, reject) => {"
              " let obs = null;"
              " const timer = setTimeout(() => { if (obs) obs.disconnect();"
              "   reject(new Error('timed out waiting for: ' + %s)); }, %d);"
              " const check = () => { const v = (%s); if (v) { clearTimeout(timer);"
              "   if (obs) obs.disconnect(); resolve(v); } return v; };"
              " if (!check()) { obs = new MutationObserver(check);"
              "   obs.observe(document, {subtree: true, childList: true, attributes: true,"
              "                          characterData: true}); } })"
              % (json.dumps(condition), int(timeout * 1000), condition))
        return self.evaluate(js, timeout + 5)

    def close(self):
        """Asks the browser to quit; kills it when it does not within 30 s."""
        try:
            self.call("Browser.close", timeout=10, browser=True)
        except (OSError, ConnectionError, CdpError, ValueError):
            pass
        try:
            self.ws.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()
        self.log.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
