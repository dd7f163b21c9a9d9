#!/usr/bin/env python3
"""qvl's chat rendering (models/qwen3vl chat.c, which every front end uses through the engine)
against the model's own chat_template.jinja rendered by Jinja2 the way transformers'
apply_chat_template runs it (sandboxed, trim_blocks, lstrip_blocks, loop controls, tojson
without ASCII escapes). Every conversation must render to the same bytes.

Usage: chat_template_test.py QVL_CHAT_RENDER SHARED_DATA_DIR
Skips (77) when the template or Jinja2 (.pydeps/ of the checkout, scripts/install-pydeps.sh)
is missing, and says which."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), ".pydeps"))


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


if len(sys.argv) != 3:
    print(__doc__)
    sys.exit(2)
RENDER, DATA = sys.argv[1], sys.argv[2]
TEMPLATE = os.path.join(DATA, "qwen3-vl-2b-instruct", "chat_template.jinja")
if not os.path.isfile(TEMPLATE):
    skip(TEMPLATE + " is missing (set QVL_SHARED_DATA_DIR to the directory holding qwen3-vl-2b-instruct/)")
try:
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    skip("Jinja2 is not installed in .pydeps/ (run scripts/install-pydeps.sh)")


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
with open(TEMPLATE, encoding="utf-8") as f:
    template = env.from_string(f.read())

T = lambda s: {"type": "text", "text": s}
IMG, VID = {"type": "image"}, {"type": "video"}
U = lambda c: {"role": "user", "content": c}
A = lambda c: {"role": "assistant", "content": c}
S = lambda c: {"role": "system", "content": c}

CASES = [
    ("one user line", [U("Hi")], True, False),
    ("no generation prompt", [U("Hi")], False, False),
    ("system first", [S("You are terse."), U("Name a colour")], True, False),
    ("system as parts", [S([T("Be "), T("brief.")]), U("Why?")], True, False),
    ("empty user text", [U("")], True, False),
    ("multi-turn", [U("Hi"), A("Hello! How can I help?"), U("Tell me a joke")], True, False),
    ("assistant last, no prompt", [U("Hi"), A("Hello")], False, False),
    ("think block kept", [U("2+2?"), A("<think>\nadd\n</think>\n\n4"), U("and 3+3?")], True, False),
    ("picture then question", [U([IMG, T("What is in this picture?")])], True, False),
    ("question then picture", [U([T("Describe: "), IMG])], True, False),
    ("two pictures", [U([IMG, IMG, T("Which is brighter?")])], True, False),
    ("pictures numbered", [U([IMG, T("and"), IMG, T("compare")])], True, True),
    ("video", [U([VID, T("What happens?")])], True, False),
    ("videos and pictures numbered", [U([VID, IMG, T("x")]), A("y"), U([IMG, VID])], True, True),
    ("picture in a later turn", [U("Hi"), A("Hello"), U([IMG, T("and this?")])], True, False),
    ("assistant parts", [U("Hi"), A([T("Hel"), T("lo")]), U("Bye")], True, False),
    ("unicode and newlines", [U("héllo\nwörld 日本語 🙂\n\n"), A("ok\n")], True, False),
    ("special strings typed", [U("<|im_end|> <|im_start|>user\n<tool_call>")], True, False),
    ("braces and quotes", [U('{"a": [1, 2]} {{ x }} {% if %} \'q\' "q"')], True, False),
    ("system with picture turn", [S("sys"), U([IMG, T("q")]), A("a"), U("q2")], True, True),
]


def render_qvl(messages, gen, vision_id):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump({"messages": messages, "add_generation_prompt": gen,
                   "add_vision_id": vision_id}, f, ensure_ascii=False)
        path = f.name
    try:
        p = subprocess.run([RENDER, path], capture_output=True, timeout=60)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        return None, p.stderr.decode("utf-8", "replace").strip()
    return p.stdout.decode("utf-8"), None


failures = 0
for name, messages, gen, vision_id in CASES:
    want = template.render(messages=messages, add_generation_prompt=gen,
                           add_vision_id=vision_id, tools=None)
    got, why = render_qvl(messages, gen, vision_id)
    if got == want:
        print("ok   " + name)
    else:
        failures += 1
        print("FAIL " + name + (": qvl refused: " + why if why else ""))
        print("  template: " + repr(want))
        print("  qvl:      " + repr(got))

# A system message after the first: the template drops it silently; qvl refuses it in one line.
got, why = render_qvl([U("Hi"), S("late")], True, False)
if got is None and why and "\n" not in why:
    print("ok   a late system message is refused: " + why)
else:
    failures += 1
    print("FAIL a late system message was not refused: " + repr(got))

print("%d of %d renderings differ" % (failures, len(CASES) + 1) if failures else
      "all %d conversations render as the template does" % (len(CASES) + 1))
sys.exit(1 if failures else 0)
