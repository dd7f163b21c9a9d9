#!/usr/bin/env python3
"""qvl chat as a user meets it: /image, /clear, /help, /exit, unknown /commands, Ctrl-C while
answering and at the prompt, Ctrl-D, the context filling up, line editing and history. The
terminal cases run qvl under a pseudo-terminal (the pty module; Ctrl-C is the 0x03 byte, which
the terminal turns into SIGINT for the foreground group); the rest pipe stdin and compare the
answers' token ids (--print-ids: one line of ids per answer, greedy).

usage: cli_chat.py QVL_BINARY SOURCE_DIR SHARED_DATA_DIR   (exit 77: skipped)"""
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

qvl, src, shared = sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""
tokjson = os.path.join(shared, "qwen3-vl-2b-instruct", "tokenizer.json")
if not os.path.isfile(tokjson):
    print(f"skipped: {tokjson} not found (the tiny chat model needs a real tokenizer)")
    sys.exit(77)

# A tiny random model with the real vocabulary (as tests/cli_qvl.sh makes it).
CONFIG = """{"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
 "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
 "vision_end_token_id": 151653, "tie_word_embeddings": true,
 "text_config": {"vocab_size": 151936, "hidden_size": 32, "intermediate_size": 64,
   "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
   "hidden_act": "silu", "rms_norm_eps": 1e-06, "rope_theta": 5000000,
   "rope_scaling": {"rope_type": "default", "mrope_section": [4, 2, 2], "mrope_interleaved": true},
   "max_position_embeddings": 4096, "attention_bias": false, "bos_token_id": 151643,
   "eos_token_id": 151645, "tie_word_embeddings": true},
 "vision_config": {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
   "hidden_act": "gelu_pytorch_tanh", "patch_size": 16, "temporal_patch_size": 2,
   "spatial_merge_size": 2, "in_channels": 3, "out_hidden_size": 32,
   "num_position_embeddings": 16, "deepstack_visual_indexes": [0]}}"""

tmp = tempfile.mkdtemp()
failures = 0
passed = 0


def ok(name):
    global passed
    passed += 1
    print(f"ok   {name}")


def bad(name, why):
    global failures
    failures += 1
    print(f"FAIL {name}: {why}")


def check(name, cond, why=""):
    ok(name) if cond else bad(name, why)


with open(os.path.join(tmp, "config.json"), "w") as f:
    f.write(CONFIG)
model = os.path.join(tmp, "m")
r = subprocess.run([qvl, "mkmodel", "--config", os.path.join(tmp, "config.json"), "--tokenizer",
                    tokjson, "--out", model, "--std", "0.5"], capture_output=True, text=True)
if r.returncode != 0:
    print(f"FAIL mkmodel: {r.stderr}")
    sys.exit(1)

BASE = [qvl, "chat", "-m", model, "--temp", "0", "--backend", "reference", "-q"]
image = os.path.join(src, "tests", "fixtures", "images", "png_palette.png")


def piped(lines, *flags, timeout=120):
    """qvl chat with lines on stdin: (exit status, answers as lists of ids, stderr)."""
    r = subprocess.run(BASE + ["--print-ids", *flags], input="".join(l + "\n" for l in lines),
                       capture_output=True, text=True, timeout=timeout)
    answers = [l.split() for l in r.stdout.splitlines() if l.strip()]
    return r.returncode, answers, r.stderr


# --- commands (stdin piped) ---------------------------------------------------------------------
rc, plain, err = piped(["Hello", "Hello", "Hello"], "-n", "8")
check("three answers", rc == 0 and len(plain) == 3, f"rc {rc}, {len(plain)} answers: {err}")
rc, got, err = piped(["Hello", "/help", "/frobnicate now", "Hello", "Hello"], "-n", "8")
check("/help lists the commands", all(c in err for c in ("/image PATH", "/clear", "/help", "/exit")),
      err)
hint = [l for l in err.splitlines() if "/frobnicate" in l]
check("unknown /command: a one-line hint", len(hint) == 1 and "unknown command" in hint[0]
      and "/help" in hint[0], err)
check("commands are not sent to the model", got == plain, f"{got} vs {plain}")
rc, got, err = piped(["Hello", "Hello", "/clear", "Hello"], "-n", "8")
check("/clear: the next answer is the first one again", rc == 0 and len(got) == 3
      and got[2] == plain[0] and "cleared" in err, f"{got} vs {plain}: {err}")
check("(without /clear the third answer differs)", plain[2] != plain[0], "the model repeats itself: the /clear check cannot fail")
rc, got, err = piped(["Hello", "/exit", "Hello"], "-n", "8")
check("/exit ends the chat", rc == 0 and len(got) == 1, f"rc {rc}, {got}")
rc, got, err = piped(["//Hello"], "-n", "8")
r = subprocess.run([qvl, "run", "-m", model, "--temp", "0", "--backend", "reference", "-q",
                    "--print-ids", "-n", "8", "-p", "/Hello"], capture_output=True, text=True)
check("// sends a line starting with /", got and got[0] == r.stdout.split(), f"{got} vs {r.stdout}")

# --- /image --------------------------------------------------------------------------------------
r = subprocess.run([qvl, "run", "-m", model, "--temp", "0", "--backend", "reference", "-q",
                    "--print-ids", "-n", "8", "--image", image, "-p", "What is this?"],
                   capture_output=True, text=True)
want = r.stdout.split()
rc, got, err = piped([f"/image {image}", "What is this?"], "-n", "8")
check("/image: the answer of qvl run --image", rc == 0 and len(got) == 1 and got[0] == want
      and want, f"rc {rc}: {got} vs {want}: {err}")
rc, got, err = piped([f"/image '{image}'", "What is this?", "What is this?"], "-n", "8")
check("/image 'quoted path', for the next message only", rc == 0 and len(got) == 2
      and got[0] == want and got[1] != want, f"{got}: {err}")
rc, got, err = piped([f"/image {tmp}/missing.png", "Hello"], "-n", "8")
lines = [l for l in err.splitlines() if "missing.png" in l]
check("/image of a missing file: one line, the chat goes on", rc == 0 and len(lines) == 1
      and got == plain[:1], f"rc {rc}, {got}: {err}")
rc, got, err = piped([f"/image {image}", "Hello"], "-n", "8", "-c", "64", "--image-min-tokens", "100")
lines = [l for l in err.splitlines() if "do not fit the context" in l]
check("/image too large for --ctx: refused before any work", rc == 0 and len(lines) == 1
      and got == plain[:1], f"rc {rc}, {got}: {err}")

rc, got, err = piped(["look <|image_pad|> here", "Hello"], "-n", "8")
lines = [l for l in err.splitlines() if "typed as text" in l]
check("a picture's special token typed in a message: one line, not sent, the chat goes on",
      rc == 0 and len(lines) == 1 and "<|image_pad|>" in lines[0] and got == plain[:1],
      f"rc {rc}, {got}: {err}")

# --- the engine: prefix reuse --------------------------------------------------------------------
# Each turn submits the whole conversation; -v prints one line per engine job with its prompt
# tokens, how many the slot's cache already held and how many pictures were encoded.
JOB = re.compile(r"job (\d+): (\d+) prompt tokens, (\d+) cached, (\d+) of (\d+) picture\(s\) encoded")
rc, got, err = piped([f"/image {image}", "What is this?", "And now?"], "-n", "8", "-v")
jobs = [tuple(int(x) for x in m.groups()) for m in JOB.finditer(err)]
check("engine: two turns, two jobs", rc == 0 and len(got) == 2 and len(jobs) == 2,
      f"rc {rc}, {got}, {jobs}: {err}")
if len(jobs) == 2:
    (_, p1, c1, e1, n1), (_, p2, c2, e2, n2) = jobs
    check("engine: the first turn is prefilled whole, its picture encoded",
          c1 == 0 and (e1, n1) == (1, 1), f"{jobs}")
    check("engine: the second turn reuses the first turn's prompt from the cache",
          c2 >= p1 and p2 > c2, f"{jobs}")
    check("engine: the picture is not encoded again", (e2, n2) == (0, 1), f"{jobs}")
check("engine: the first answer is qvl run's", got[:1] == [want], f"{got} vs {want}")
# The second answer against one cold prompt: qvl run given the conversation's rendering (the
# template writes the user message around the text, so the text carries the turns between).
r = subprocess.run(BASE + ["-n", "8", f"--image={image}"], input=b"What is this?\n",
                   capture_output=True)
reply = r.stdout[:-1].decode("utf-8", errors="strict") if r.returncode == 0 else None
if reply is not None and "\0" not in reply:
    convo = f"What is this?<|im_end|>\n<|im_start|>assistant\n{reply}<|im_end|>\n<|im_start|>user\nAnd now?"
    r = subprocess.run([qvl, "run", "-m", model, "--temp", "0", "--backend", "reference", "-q",
                        "--print-ids", "-n", "8", "--image", image, "-p", convo],
                       capture_output=True, text=True)
    check("engine: the second answer (prefix reused) is that of the whole conversation "
          "prefilled at once", r.returncode == 0 and len(got) == 2 and got[1] == r.stdout.split(),
          f"{got[1:]} vs {r.stdout.split()}: {r.stderr}")
else:
    bad("engine: the first reply as text", f"rc {r.returncode}: {r.stderr!r}")

# --- a full context ------------------------------------------------------------------------------
msgs = ["Hello there", "Second message", "Third one here", "Fourth", "Fifth message"]
rc, got, err = piped(msgs, "-n", "12", "-c", "96", "-sys", "Be brief.")
shift = [l for l in err.splitlines() if "oldest exchange" in l]
check("full context before a message: the oldest turns go, the chat goes on",
      rc == 0 and len(got) == 5 and shift and all("system prompt is kept" in l for l in shift),
      f"rc {rc}, {len(got)} answers: {err}")
# Until the first shift the conversation is the one a large context holds.
rc2, big, _ = piped(msgs, "-n", "12", "-c", "4096", "-sys", "Be brief.")
check("answers before the first shift are unchanged", got[:2] == big[:2], f"{got[:2]} vs {big[:2]}")
rc, got, err = piped(["Hi", "Tell me more"], "-n", "70", "-c", "100")
mid = [l for l in err.splitlines() if "oldest exchange" in l]
check("full context in the middle of an answer: it goes on after the shift",
      rc == 0 and len(got) == 2 and len(mid) == 1 and (len(got[1]) == 70), f"rc {rc}, "
      f"{[len(a) for a in got]}: {err}")
rc, got, err = piped(["Hello there"], "-n", "500", "-c", "48")
check("one answer longer than the context: it stops with one line",
      rc == 0 and len(got) == 1 and "the answer stops here" in err, f"rc {rc}: {err}")
rc, got, err = piped(["word " * 80, "Hello"], "-n", "8", "-c", "48")
check("a message over the context: one line, not sent, the chat goes on",
      rc == 0 and len(got) == 1 and got[0] == plain[0] and "it is not sent" in err,
      f"rc {rc}, {got}: {err}")


# --- the terminal ---------------------------------------------------------------------------------
class Term:
    """qvl chat on a pseudo-terminal (stdin, stdout and stderr all the pty)."""

    def __init__(self, *flags, quiet=True):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.environ["TERM"] = "xterm"
            os.execv(qvl, (BASE if quiet else [a for a in BASE if a != "-q"]) + list(flags))
        self.out = b""

    def read(self, seconds):
        end = time.time() + seconds
        while time.time() < end:
            r, _, _ = select.select([self.fd], [], [], 0.05)
            if r:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    return
                if not chunk:
                    return
                self.out += chunk

    def wait_for(self, pattern, seconds=60, start=0):
        """True once pattern (bytes regex) shows after offset start."""
        end = time.time() + seconds
        while time.time() < end:
            if re.search(pattern, self.out[start:]):
                return True
            self.read(0.1)
        return bool(re.search(pattern, self.out[start:]))

    def send(self, data):
        os.write(self.fd, data)

    def exit_status(self, seconds=30):
        end = time.time() + seconds
        while time.time() < end:
            self.read(0.1)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)
        return None


def ids_lines(data):
    return [l.split() for l in data.decode(errors="replace").replace("\r", "").splitlines()
            if re.fullmatch(r"[0-9 ]+", l.strip() or "x")]


t = Term("--print-ids", "-n", "8")
check("terminal: the prompt shows", t.wait_for(rb"> "), t.out)
t.send(b"\x04")
rc = t.exit_status()
check("Ctrl-D: exit 0 and a newline after the prompt", rc == 0 and t.out.endswith(b"\n"),
      f"rc {rc}, {t.out[-40:]!r}")

# A message with a picture: the progress line names the picture being encoded, then the
# prefill's tokens done / total (each drawn at once; the share done follows at the redraws).
t = Term("--print-ids", "-n", "8", quiet=False)
t.wait_for(rb"> ")
t.send(f"/image {image}\r".encode())
t.wait_for(rb"> ", 30, 1)
at = len(t.out)
t.send(b"What is this?\r")
check("terminal: the picture's encoding on the progress line",
      t.wait_for(rb"prefill \d+ tokens: encoding image 1/1 \(\d+ tokens\)", 60, at), t.out[at:])
check("terminal: the prefill's tokens done / total", t.wait_for(rb"prefill 0/\d+ tokens", 60, at),
      t.out[at:])
t.wait_for(rb"> ", 60, len(t.out) - 1)
t.send(b"\x04")
t.exit_status()

t = Term("--print-ids", "-n", "8")
t.wait_for(rb"> ")
t.send(b"\x03")
rc = t.exit_status()
check("Ctrl-C at the prompt ends the chat (status 130)", rc == 130, f"rc {rc}, {t.out[-80:]!r}")

# Ctrl-C in the middle of a long answer: back to the prompt, the chat goes on.
t = Term("-n", "1000000", "-c", "200000")
t.wait_for(rb"> ")
at = len(t.out)
t.send(b"Hello\r")
started = t.wait_for(rb"\S{20}", 60, at + 8)
time.sleep(0.5)
t.send(b"\x03")
back = t.wait_for(rb"\n> $", 30, at + 8)
check("Ctrl-C while answering: back at the prompt", started and back, f"{t.out[-200:]!r}")
at = len(t.out)
t.send(b"/exit\r")
rc = t.exit_status()
check("... and the chat goes on (/exit: status 0)", rc == 0, f"rc {rc}, {t.out[-200:]!r}")

t = Term("-n", "1000000", "-c", "200000")
t.wait_for(rb"> ")
at = len(t.out)
t.send(b"Hello\r")
t.wait_for(rb"\S{20}", 60, at + 8)
t.send(b"\x03")
t.wait_for(rb"\n> $", 30, at + 8)
at = len(t.out)
t.send(b"\x03")
rc = t.exit_status()
check("a second Ctrl-C, at the prompt, ends it", rc == 130, f"rc {rc}, {t.out[-200:]!r}")

# Line editing (cursor left, insert) and history (up arrow) give the same messages.
t = Term("--print-ids", "-n", "8")
t.wait_for(rb"> ")
t.send(b"Helo\x1b[Dl\r")
t.wait_for(rb"\n[0-9 ]+\r?\n.*> ", 60)
at = len(t.out)
t.send(b"\x1b[A\r")
t.wait_for(rb"\n[0-9 ]+\r?\n.*> ", 60, at)
t.send(b"/exit\r")
rc = t.exit_status()
got = ids_lines(t.out)
check("line editing and history", rc == 0 and got == plain[:2], f"rc {rc}: {got} vs {plain[:2]}: "
      f"{t.out[-300:]!r}")

shutil.rmtree(tmp, ignore_errors=True)
print(f"{passed} passed, {failures} failed")
sys.exit(1 if failures else 0)
