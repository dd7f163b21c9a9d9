#!/usr/bin/env python3
"""qvl serve's `tojson` (tools/serve/serve_pyjson.c) against Python's: a request body parsed and
printed by qvl-pyjson must equal json.dumps(json.loads(body), ensure_ascii=False), which is
what transformers' chat template renders for the tools a client sends. Numbers are the point:
json.loads makes an int of an integer lexeme (any size) and a float of any other, and
json.dumps writes floats as repr does ("1.0", "100000.0", "1e-07", "-0.0", "1e+16").

usage: serve_pyjson_test.py QVL_PYJSON"""
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

PYJSON = sys.argv[1]
failures = 0


def render(body):
    with tempfile.NamedTemporaryFile("wb", suffix=".json", delete=False) as f:
        f.write(body.encode("utf-8"))
        path = f.name
    try:
        p = subprocess.run([PYJSON, path], capture_output=True, timeout=60)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        return None, p.stderr.decode("utf-8", "replace").strip()
    return p.stdout.decode("utf-8"), None


def check(name, body):
    """One body: qvl's rendering = Python's; on a difference, the numbers that differ."""
    global failures
    want = json.dumps(json.loads(body), ensure_ascii=False)
    got, why = render(body)
    if got == want:
        print("ok   " + name)
        return
    failures += 1
    print("FAIL " + name + (": refused: " + why if why else ""))
    if got is not None and len(got) < 400:
        print("  python: " + want + "\n  qvl:    " + got)
    elif got is not None:
        bad = [(w, g) for w, g in zip(want.split(", "), got.split(", ")) if w != g]
        print("  python vs qvl: " + repr(bad[:10]))


# A tool as clients send it, numbers written in every form, nested in its parameters.
TOOL = '''{"tools": [{"type": "function", "function": {"name": "set_lights",
  "description": "Lights, at a level", "parameters": {"type": "object", "properties": {
  "level": {"type": "number", "minimum": 0.0, "maximum": 2.50, "default": 1.0,
            "multipleOf": 1e-2, "examples": [1e5, 1E-7, -0.0, 0.1, 1.5e-7, 1e16, 1e15, 0.0001,
                                             1e-05, 123.456e3, -2E+2, 5e-324, 1.7976931348623157e308]},
  "count": {"type": "integer", "minimum": -0, "maximum": 12345678901234567890,
            "default": 10, "enum": [0, -1, 9007199254740993, -98765432109876543210123]}},
  "required": ["level"]}}}], "n": [1.0, 2.50, 1e5, 1E-7, -0.0, 12345678901234567890]}'''
check("numbers nested in a tool's parameters", TOOL)
check("numbers in strings stay strings", '{"a": "1.0 1e5 -0", "b\\"1": [1, "2.0", 3.0]}')

# Random doubles written as repr, %.17g, %e and %E (an uppercase E, an explicit sign), and
# random integers of every size: one body, compared number by number.
rng = random.Random(38)
texts = []
for _ in range(3000):
    d = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
    if d != d or d in (float("inf"), float("-inf")):
        continue
    texts += [repr(d), "%.17g" % d, "%.3e" % d, "%.6E" % d, "%.0e" % d]
for _ in range(1000):
    x = rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-12, 20)
    texts += [repr(x), repr(round(x, rng.randint(0, 4))), "%.2f" % x]
for _ in range(500):
    texts.append(str(rng.randint(-10 ** rng.randint(1, 30), 10 ** rng.randint(1, 30))))
texts = [t for t in texts if "inf" not in t and "nan" not in t]
check("%d random numbers" % len(texts), '{"n": [' + ", ".join(texts) + "]}")

print("%d checks failed" % failures if failures else "every rendering is Python's")
sys.exit(1 if failures else 0)
