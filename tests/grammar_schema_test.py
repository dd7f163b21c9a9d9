#!/usr/bin/env python3
"""JSON Schema -> GBNF (qvl_grammar_from_json_schema), checked against python-jsonschema.

For every schema below, qvl-grammar generates random strings from the compiled grammar (and
checks that its own matcher accepts each); every string must parse as JSON and validate
against the schema with jsonschema's Draft 2020-12 validator and its format checker. Each
schema also lists instances that validate (the matcher must accept them, written compactly as
the grammar writes JSON) and instances that do not (the matcher must refuse them), so a
grammar that is too loose or too tight fails either way. Unsupported keywords must be refused
with a line naming them.

usage: grammar_schema_test.py QVL_GRAMMAR_BINARY WORK_DIR
Needs jsonschema (scripts/install-deps.sh puts it in .pydeps/ of the checkout, searched
first); without it this prints why and exits 77, which ctest counts as skipped.
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

# (schema, valid instances, invalid instances)
CASES = [
    ({"type": "null"}, [None], [0, "null"]),
    ({"type": "boolean"}, [True, False], [0, None]),
    ({"type": "integer"}, [0, -12, 99], [1.5, "1"]),
    ({"type": "number"}, [0, -1.25, 3e5], ["x", None]),
    ({"type": "string"}, ["", "a\"b\\c\n"], [1]),
    ({"type": ["string", "null"]}, ["x", None], [1, True]),
    ({"type": ["integer", "boolean"]}, [3, False], ["3"]),
    ({"type": "integer", "minimum": 0}, [0, 7, 120], [-1]),
    ({"type": "integer", "minimum": 1}, [1, 10], [0, -3]),
    ({"type": "integer", "minimum": -20, "maximum": 35}, [-20, -1, 0, 9, 35], [-21, 36, 100]),
    ({"type": "integer", "minimum": 100, "maximum": 2025}, [100, 999, 2025], [99, 2026, 5000]),
    ({"type": "integer", "maximum": -5}, [-5, -123], [-4, 0, 3]),
    ({"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 17}, [4, 16], [3, 17]),
    ({"type": "integer", "minimum": 7, "maximum": 7}, [7], [6, 8]),
    ({"type": "number", "minimum": 0}, [0, 0.5, 12.25], [-0.5, -3]),
    ({"type": "number", "minimum": 2, "maximum": 10}, [2, 2.5, 9.75, 10], [1.5, 10.5, 11]),
    ({"type": "string", "minLength": 2, "maxLength": 5}, ["ab", "abcde", "\u00e9\u00e8"],
     ["a", "abcdef"]),
    ({"type": "string", "maxLength": 0}, [""], ["a"]),
    ({"type": "string", "minLength": 3}, ["abc", "abcdefgh"], ["ab"]),
    ({"type": "string", "format": "date"}, ["2024-02-28", "1999-12-31"], ["2024-13-01", "24-01-01"]),
    ({"type": "string", "format": "time"}, ["12:34:56Z", "23:59:59.5+02:00"], ["24:00:00Z", "12:34"]),
    ({"type": "string", "format": "date-time"}, ["2020-01-01T00:00:00Z"], ["2020-01-01 00:00:00Z"]),
    ({"type": "string", "format": "uuid"}, ["123e4567-e89b-12d3-a456-426614174000"],
     ["123e4567e89b12d3a456426614174000"]),
    ({"type": "string", "pattern": "^[a-z]+$"}, ["abc"], ["", "aB"]),
    ({"type": "string", "pattern": "^\\d{3}-\\d{4}$"}, ["555-1234"], ["5551234", "55-1234"]),
    ({"type": "string", "pattern": "^(foo|bar)+baz?$"}, ["foobarba", "foobaz"], ["baz", "fo"]),
    ({"type": "string", "pattern": "^[^\\s]{2,4}\\.x$"}, ["ab.x", "a\"b.x"], ["a.x", "a b.x"]),
    ({"type": "string", "pattern": "^(?:[A-F0-9]{2}:){2}[A-F0-9]{2}$"}, ["0A:1B:FF"], ["0a:1b:ff"]),
    ({"type": "string", "pattern": "^a.c$"}, ["abc", "a\"c", "a\\c"], ["a\nc", "ac"]),
    ({"type": "string", "pattern": "\\w+@\\w+"}, ["me@host"], ["@host"]),
    ({"enum": ["red", "green", 3, None, {"a": [1, 2]}]}, ["red", 3, None, {"a": [1, 2]}], ["blue", 4]),
    ({"const": {"k": "v", "n": [True, 1.5]}}, [{"k": "v", "n": [True, 1.5]}], [{"k": "v"}]),
    ({"type": "string", "enum": ["x", "y"]}, ["x"], ["z"]),
    ({"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"type": "string", "maxLength": 1}]},
     [5, "a", ""], [10, "ab"]),
    ({"oneOf": [{"type": "boolean"}, {"type": "array", "items": {"type": "integer"}, "maxItems": 2}]},
     [True, [1, 2], []], [[1, 2, 3], "true"]),
    ({"type": "array"}, [[], [1, "a", None, {"b": []}]], [{}]),
    ({"type": "array", "items": {"type": "string", "maxLength": 3}, "minItems": 1, "maxItems": 3},
     [["a"], ["a", "bb", "ccc"]], [[], ["a", "b", "c", "d"], ["abcd"]]),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 2}, [[1, 2], [1, 2, 3, 4]], [[1]]),
    ({"type": "array", "maxItems": 0}, [[]], [[1]]),
    ({"type": "object"}, [{}, {"a": 1, "b": [None]}], [[]]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
      "required": ["a"], "additionalProperties": False},
     [{"a": 1}, {"a": 1, "b": "x"}], [{}, {"b": "x"}, {"a": 1, "c": 2}]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
                                       "c": {"type": "integer"}}, "additionalProperties": False},
     [{}, {"b": 2}, {"a": 1, "c": 3}, {"a": 1, "b": 2, "c": 3}], [{"d": 1}]),
    ({"type": "object", "properties": {"name": {"type": "string", "maxLength": 4}},
      "additionalProperties": {"type": "integer"}},
     [{"name": "x", "k": 3}, {"zz": 1}], [{"k": "x"}, {"name": 3}]),
    ({"type": "object", "properties": {"id": {"type": "integer", "minimum": 0}},
      "additionalProperties": True, "required": ["id"]},
     [{"id": 3}, {"id": 3, "x": [1]}], [{"x": 1}]),
    ({"type": "object", "required": ["must"], "additionalProperties": {"type": "boolean"}},
     [{"must": True}, {"must": False, "z": True}], [{}, {"must": 1}]),
    ({"properties": {"x": {"type": "number", "minimum": 0}}, "required": ["x"],
      "additionalProperties": False}, [{"x": 1.5}], [{"x": -1}]),
    ({"$defs": {"pos": {"type": "integer", "minimum": 1}},
      "type": "object", "properties": {"n": {"$ref": "#/$defs/pos"}}, "required": ["n"],
      "additionalProperties": False}, [{"n": 4}], [{"n": 0}]),
    ({"definitions": {"leaf": {"type": "string", "maxLength": 2}},
      "type": "array", "items": {"$ref": "#/definitions/leaf"}, "maxItems": 4}, [["ab", "c"]], [["abc"]]),
    ({"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer", "minimum": 0, "maximum": 99},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["v"], "additionalProperties": False}},
      "$ref": "#/$defs/node"},
     [{"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]}], [{"v": 1, "kids": [{}]}]),
    ({"title": "annotated", "description": "d", "$schema": "https://json-schema.org/draft/2020-12/schema",
      "type": "object", "properties": {"q": {"type": "string", "default": "x", "examples": ["y"],
                                             "maxLength": 3}},
      "additionalProperties": False}, [{"q": "abc"}], [{"q": "abcd"}]),
    (True, [1, "x", None], []),
    ({}, [{"a": 1}, [2]], []),
    ({"type": "object", "properties": {"a": {"type": "object", "properties": {
        "b": {"type": "array", "items": {"enum": [1, 2]}, "minItems": 1, "maxItems": 2}},
        "required": ["b"], "additionalProperties": False}}, "required": ["a"],
      "additionalProperties": False}, [{"a": {"b": [1]}}, {"a": {"b": [2, 1]}}], [{"a": {"b": []}}]),
]

UNSUPPORTED = [
    ({"type": "string", "contentEncoding": "base64"}, "contentEncoding"),
    ({"allOf": [{"type": "string"}]}, "allOf"),
    ({"type": "object", "patternProperties": {"^a": {}}}, "patternProperties"),
    ({"type": "array", "prefixItems": [{"type": "integer"}]}, "prefixItems"),
    ({"not": {"type": "string"}}, "not"),
    ({"type": "string", "format": "email"}, "email"),
    ({"type": "number", "maximum": 3}, "number bounds"),
    ({"$ref": "https://example.com/s.json"}, "https://example.com/s.json"),
    ({"type": "string", "pattern": "(?=a)b"}, "pattern"),
    ({"type": "string", "pattern": "a(b)\\1"}, "unsupported escape"),
    ({"type": "object", "properties": {"p": {"type": "integer", "multipleOf": 2}}}, "multipleOf"),
    ({"type": "integer", "minimum": 5, "maximum": 2}, "minimum above maximum"),
    ({"type": "array", "uniqueItems": True}, "uniqueItems"),
    ({"type": "sting"}, "sting"),
]


def run(tool, args, stdin=None):
    return subprocess.run([tool] + args, input=stdin, capture_output=True, timeout=120)


def main():
    tool, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    fmt = jsonschema.Draft202012Validator.FORMAT_CHECKER
    failures = passed = 0

    def bad(msg):
        nonlocal failures
        failures += 1
        print("FAIL:", msg)

    for i, (schema, good, wrong) in enumerate(CASES):
        path = os.path.join(work, f"schema{i}.json")
        with open(path, "w") as f:
            json.dump(schema, f)
        validator = jsonschema.Draft202012Validator(schema, format_checker=fmt)
        r = run(tool, ["gen", "--json-schema", path, "60", str(1000 + i), "48"])
        if r.returncode != 0:
            bad(f"schema {i} {json.dumps(schema)}: gen failed: {r.stderr.decode().strip()}")
            continue
        samples = r.stdout.split(b"\0")[:-1]
        ok = len(samples) == 60
        if not ok:
            bad(f"schema {i}: {len(samples)} samples, not 60")
        for s in samples:
            try:
                value = json.loads(s.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                bad(f"schema {i}: generated {s!r} is not JSON: {e}")
                ok = False
                break
            errors = list(validator.iter_errors(value))
            if errors:
                bad(f"schema {i} {json.dumps(schema)}: generated {s.decode()} does not validate: "
                    f"{errors[0].message}")
                ok = False
                break
        for inst in good + [None] * 0:
            text = json.dumps(inst, separators=(",", ":"), ensure_ascii=False)
            assert validator.is_valid(inst), (i, inst)
            m = run(tool, ["match", "--json-schema", path], text.encode())
            if m.returncode != 0:
                bad(f"schema {i} {json.dumps(schema)}: the grammar refuses valid {text}")
                ok = False
        for inst in wrong:
            text = json.dumps(inst, separators=(",", ":"), ensure_ascii=False)
            assert not validator.is_valid(inst), (i, inst)
            m = run(tool, ["match", "--json-schema", path], text.encode())
            if m.returncode != 1:
                bad(f"schema {i} {json.dumps(schema)}: the grammar accepts invalid {text}")
                ok = False
        if ok:
            passed += 1

    for j, (schema, word) in enumerate(UNSUPPORTED):
        path = os.path.join(work, f"unsupported{j}.json")
        with open(path, "w") as f:
            json.dump(schema, f)
        r = run(tool, ["gbnf", "--json-schema", path])
        err = r.stderr.decode().strip()
        if r.returncode == 0 or word not in err or err.count("\n") != 0:
            bad(f"unsupported {json.dumps(schema)}: rc {r.returncode}, stderr {err!r} "
                f"(want one line naming {word!r})")
        else:
            passed += 1

    print(f"{passed} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
