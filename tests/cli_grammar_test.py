#!/usr/bin/env python3
"""qvl run --json-schema / --grammar / --json end to end on a random-weight model with the real
Qwen3-VL tokenizer (qvl mkmodel): at temperature 0 and 1 and several seeds the answer must parse
as JSON and validate against the schema (python-jsonschema), or be a string of the GBNF
grammar; and bad flags, grammars and schemas must each give one line and a non-zero exit.

usage: cli_grammar_test.py QVL QVL_GRAMMAR SOURCE_DIR SHARED_DATA_DIR WORK_DIR
Skips (77) when the tokenizer or jsonschema is missing.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), ".pydeps"))
try:
    import jsonschema
except ImportError as e:
    print(f"skip: jsonschema is not installed ({e}); run scripts/install-deps.sh")
    sys.exit(77)

SCHEMAS = [
    {"type": "object",
     "properties": {"name": {"type": "string", "maxLength": 12},
                    "age": {"type": "integer", "minimum": 0, "maximum": 150},
                    "tags": {"type": "array", "items": {"enum": ["x", "y", "z"]}, "maxItems": 3},
                    "ok": {"type": "boolean"}},
     "required": ["name", "age", "ok"], "additionalProperties": False},
    {"type": "array", "items": {"type": "object",
                                "properties": {"d": {"type": "string", "format": "date"},
                                               "code": {"type": "string", "pattern": "^[A-Z]{2}\\d{2}$"},
                                               "v": {"type": ["number", "null"], "minimum": 0, "maximum": 5}},
                                "required": ["d", "code"], "additionalProperties": False},
     "minItems": 1, "maxItems": 2},
    {"$defs": {"leaf": {"anyOf": [{"type": "integer", "minimum": -9, "maximum": 9},
                                  {"const": "none"}]}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/leaf"},
                                      "b": {"type": "string", "minLength": 1, "maxLength": 6}},
     "required": ["a"], "additionalProperties": False},
]

GRAMMAR = """# a date-like line, written for this test
root ::= year "/" month ( " " word ){1,3}
year ::= "19" [0-9] [0-9] | "20" [0-2] [0-9]
month ::= "0" [1-9] | "1" [0-2]
word ::= [a-z]{1,5}
"""

passed = failed = 0


def ok(name):
    global passed
    passed += 1
    print("ok:", name)


def bad(name, why):
    global failed
    failed += 1
    print("FAIL:", name, "-", why)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, timeout=300, **kw)


def expect_fail(name, want, cmd):
    r = run(cmd)
    err = r.stderr.decode().strip()
    if r.returncode == 0 or want not in err or "\n" in err:
        bad(name, f"rc {r.returncode}, stderr {err!r}, wanted one line with {want!r}")
    else:
        ok(name)


def main():
    qvl, tool, src, shared, work = sys.argv[1:6]
    tokjson = os.path.join(shared, "qwen3-vl-2b-instruct", "tokenizer.json")
    if not os.path.exists(tokjson):
        print(f"skip: {tokjson} absent")
        return 77
    os.makedirs(work, exist_ok=True)
    cfg = os.path.join(work, "config.json")
    subprocess.run(["bash", "-c", f'. "{HERE}/cli_lib.sh" >/dev/null; write_tiny_config "{cfg}" 1'],
                   check=True)
    model = os.path.join(work, "m")
    r = run([qvl, "mkmodel", "--config", cfg, "--tokenizer", tokjson, "--out", model, "--std", "0.5"])
    if r.returncode != 0:
        bad("mkmodel", r.stderr.decode())
        return 1
    base = [qvl, "run", "-m", model, "--backend", "reference", "-p", "Answer in JSON", "-n", "300"]

    for i, schema in enumerate(SCHEMAS):
        path = os.path.join(work, f"schema{i}.json")
        with open(path, "w") as f:
            json.dump(schema, f)
        validator = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        outs = set()
        for temp, seed in [("0", 1), ("1", 1), ("1", 2), ("1", 3), ("1", 4), ("0.7", 5)]:
            name = f"schema {i} temp {temp} seed {seed}"
            r = run(base + ["--json-schema", path, "--temp", temp, "--seed", str(seed)])
            out = r.stdout.decode("utf-8", "replace").strip("\n")
            if r.returncode != 0:
                bad(name, r.stderr.decode().strip())
                continue
            try:
                value = json.loads(out)
            except json.JSONDecodeError as e:
                bad(name, f"not JSON ({e}): {out!r}")
                continue
            errors = list(validator.iter_errors(value))
            if errors:
                bad(name, f"{out} does not validate: {errors[0].message}")
            else:
                ok(f"{name}: {out}")
            outs.add(out)
        if len(outs) < 2:
            bad(f"schema {i}", "every seed and temperature gave the same answer")

    gpath = os.path.join(work, "date.gbnf")
    with open(gpath, "w") as f:
        f.write(GRAMMAR)
    for flag in ["--grammar", "--grammar-file"]:
        for seed in [1, 2, 3]:
            r = run(base + [flag, gpath, "--temp", "1", "--seed", str(seed)])
            m = run([tool, "match", "--grammar", gpath], input=r.stdout.rstrip(b"\n"))
            if r.returncode != 0 or m.returncode != 0:
                bad(f"{flag} seed {seed}", f"rc {r.returncode}/{m.returncode}: {r.stdout!r} {r.stderr!r}")
            else:
                ok(f"{flag} seed {seed}: {r.stdout.decode().strip()}")
    # --json: any value; a short budget may cut it, but every byte must be a JSON prefix
    r = run(base[:-2] + ["-n", "12", "--json", "--temp", "1", "--seed", "9"])
    m = run([tool, "match", "--json", "--prefix"], input=r.stdout.rstrip(b"\n"))
    if r.returncode != 0 or m.returncode != 0 or not r.stdout.strip():
        bad("--json", f"rc {r.returncode}/{m.returncode}: {r.stdout!r} {r.stderr!r}")
    else:
        ok(f"--json: {r.stdout.decode().strip()}")

    # the mask benchmark runs over the real vocabulary and follows its own strings
    r = run([tool, "bench", "--json-schema", os.path.join(work, "schema0.json"), tokjson, "2", "1"])
    out = r.stdout.decode()
    if r.returncode != 0 or "masks:" not in out or "trie: 0 nodes" in out:
        bad("qvl-grammar bench", f"rc {r.returncode}: {out!r} {r.stderr!r}")
    else:
        ok(f"qvl-grammar bench: {out.strip()}")

    # bad input: one line each
    with open(os.path.join(work, "bad.gbnf"), "w") as f:
        f.write('root ::= "a" |\n  "b" (\n')
    expect_fail("bad grammar names line:col", "grammar:2:7: unclosed '('",
                base + ["--grammar", os.path.join(work, "bad.gbnf")])
    with open(os.path.join(work, "undef.gbnf"), "w") as f:
        f.write('root ::= "a" thing\n')
    expect_fail("undefined rule", "undefined rule 'thing'", base + ["--grammar", os.path.join(work, "undef.gbnf")])
    with open(os.path.join(work, "bad.json"), "w") as f:
        json.dump({"type": "object", "properties": {"a": {"type": "string", "contentMediaType": "x"}}}, f)
    expect_fail("unsupported keyword", "contentMediaType", base + ["--json-schema", os.path.join(work, "bad.json")])
    with open(os.path.join(work, "notjson.json"), "w") as f:
        f.write("{nope")
    expect_fail("schema not JSON", "not valid JSON", base + ["--json-schema", os.path.join(work, "notjson.json")])
    expect_fail("missing grammar file", "nowhere.gbnf", base + ["--grammar", os.path.join(work, "nowhere.gbnf")])
    expect_fail("two grammar flags", "exclude each other", base + ["--json", "--grammar", gpath])
    expect_fail("qvl chat: a missing schema", "nowhere.json",
                [qvl, "chat", "-m", model, "--json-schema", os.path.join(work, "nowhere.json")])
    expect_fail("qvl chat: two grammar flags", "exclude each other",
                [qvl, "chat", "-m", model, "--json", "--grammar", gpath])

    # qvl chat: every answer of the conversation follows the schema (each turn its own job)
    schema = SCHEMAS[0]
    validator = jsonschema.Draft202012Validator(schema)
    for temp, seed in [("0", 1), ("1", 2)]:
        r = run([qvl, "chat", "-m", model, "--backend", "reference", "-q", "--json-schema",
                 os.path.join(work, "schema0.json"), "--temp", temp, "--seed", str(seed), "-n", "300"],
                input=b"Answer in JSON\nAnd again\nOnce more\n")
        lines = r.stdout.decode("utf-8", "replace").strip("\n").split("\n")
        good = r.returncode == 0 and len(lines) == 3
        for line in lines if good else []:
            try:
                good = good and not list(validator.iter_errors(json.loads(line)))
            except json.JSONDecodeError:
                good = False
        if good:
            ok(f"qvl chat --json-schema temp {temp}: {lines}")
        else:
            bad(f"qvl chat --json-schema temp {temp}", f"rc {r.returncode}: {r.stdout!r} {r.stderr!r}")
    r = run([qvl, "chat", "-m", model, "--backend", "reference", "-q", "--grammar", gpath,
             "--temp", "1", "--seed", "4"], input=b"a date\nanother\n")
    lines = r.stdout.rstrip(b"\n").split(b"\n")
    matched = [run([tool, "match", "--grammar", gpath], input=line).returncode == 0 for line in lines]
    if r.returncode == 0 and len(lines) == 2 and all(matched):
        ok(f"qvl chat --grammar: {lines}")
    else:
        bad("qvl chat --grammar", f"rc {r.returncode}: {r.stdout!r} {r.stderr!r} {matched}")

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
