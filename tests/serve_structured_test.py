#!/usr/bin/env python3
"""qvl serve's structured output end to end, on a random-weight model with the real Qwen3-VL
tokenizer (the full vocabulary), with Python's standard library as the client:

  response_format json_schema over a dozen schemas and json_object, at temperature 0 and 1,
  streamed and not: every answer parses and validates (python-jsonschema from .pydeps);
  an unsupported schema keyword is a 400 naming it;
  logit_bias: -100 bans the greedy token, +100 forces one, and the grammar still wins over it;
  logprobs / top_logprobs: sorted, the top one the maximum, the chosen token's logprob in the
  list when it ranks in the top k, probabilities summing to at most 1, streamed = not streamed;
  n > 1: n choices with their index, streamed chunks carrying it.

usage: serve_structured_test.py QVL_BINARY SHARED_DATA_DIR WORK_DIR
Skips (77) without the tokenizer or jsonschema."""
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), ".pydeps"))
import serve_util  # noqa: E402

try:
    import jsonschema
except ImportError as e:
    print(f"skip: jsonschema is not installed ({e}); run scripts/install-deps.sh")
    sys.exit(77)

QVL, SHARED, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
check = serve_util.Checks()

S = {"type": "string", "maxLength": 8}
SCHEMAS = [
    {"type": "object", "properties": {"name": S, "age": {"type": "integer", "minimum": 0,
                                                         "maximum": 150}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5},
     "minItems": 1, "maxItems": 4},
    {"enum": ["red", "green", "blue", 3, None]},
    {"type": "boolean"},
    {"type": "object", "properties": {"ok": {"type": "boolean"},
                                      "tags": {"type": "array", "items": S, "maxItems": 3}},
     "required": ["ok", "tags"], "additionalProperties": False},
    {"type": "object", "properties": {"d": {"type": "string", "format": "date"},
                                      "t": {"type": "string", "format": "time"}},
     "required": ["d", "t"], "additionalProperties": False},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}\\d{3}$"},
                                      "id": {"type": "string", "format": "uuid"}},
     "required": ["code", "id"], "additionalProperties": False},
    {"$defs": {"leaf": {"anyOf": [{"type": "integer", "minimum": -9, "maximum": 9},
                                  {"const": "none"}]}},
     "type": "object", "properties": {"a": {"$ref": "#/$defs/leaf"}, "b": {"$ref": "#/$defs/leaf"}},
     "required": ["a", "b"], "additionalProperties": False},
    {"type": "object", "properties": {"v": {"type": ["integer", "null"], "minimum": 10,
                                            "maximum": 99}},
     "required": ["v"], "additionalProperties": False},
    {"type": "object", "properties": {"inner": {"type": "object", "properties": {"x": S},
                                                "required": ["x"], "additionalProperties": False},
                                      "n": {"type": "number", "minimum": 0}},
     "required": ["inner"], "additionalProperties": False},
    {"oneOf": [{"type": "string", "minLength": 2, "maxLength": 4},
               {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}]},
    {"type": "array", "items": {"type": "object", "properties": {"k": {"enum": ["a", "b"]}},
                                "required": ["k"], "additionalProperties": False},
     "maxItems": 2},
]


def ask(s, payload, stream=False):
    """(status, contents per choice, finish reasons per choice, logprobs content per choice or
    None, the body or events) of a chat completion, streamed or not."""
    payload = dict(payload)
    if not stream:
        status, _, body = s.chat(payload)
        if status != 200:
            return status, None, None, None, body
        ch = sorted(body["choices"], key=lambda c: c["index"])
        lps = [c["logprobs"]["content"] if c.get("logprobs") else None for c in ch]
        return status, [c["message"]["content"] for c in ch], [c["finish_reason"] for c in ch], \
            lps, body
    payload["stream"] = True
    status, _, events, done = s.stream(payload)
    if status != 200 or not done:
        return status, None, None, None, events
    texts, finish, lps = {}, {}, {}
    for ev in events:
        for c in ev.get("choices", []):
            i = c["index"]
            texts[i] = texts.get(i, "") + (c["delta"].get("content") or "")
            if c.get("finish_reason"):
                finish[i] = c["finish_reason"]
            if c.get("logprobs"):
                lps.setdefault(i, []).extend(c["logprobs"]["content"])
    idx = sorted(texts)
    return status, [texts[i] for i in idx], [finish.get(i) for i in idx], \
        [lps.get(i) for i in idx], events


def schema_payload(schema, temp, seed):
    return {"messages": serve_util.user("Answer in JSON."), "temperature": temp, "seed": seed,
            "max_tokens": 400, "response_format": {"type": "json_schema", "json_schema": {
                "name": "answer", "schema": schema, "strict": True}}}


def test_schemas(s):
    varied = 0
    for i, schema in enumerate(SCHEMAS):
        validator = jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        outs = set()
        for temp, seed, stream in [(0, 1, False), (0, 1, True), (1, 2, False), (1, 3, True)]:
            name = f"schema {i} temperature {temp} seed {seed}{' streamed' if stream else ''}"
            status, texts, finish, _, body = ask(s, schema_payload(schema, temp, seed), stream)
            if not check(name + ": 200 and finish stop", status == 200 and finish == ["stop"],
                         (status, finish, body)):
                continue
            try:
                value = json.loads(texts[0])
            except ValueError as e:
                check(name + ": JSON", False, (e, texts[0]))
                continue
            errors = list(validator.iter_errors(value))
            check(f"{name}: {texts[0]} validates", not errors, errors[:1])
            outs.add(texts[0])
        varied += len(outs) >= 2
    # a small schema's few answers may repeat; over all of them sampling must show
    check("temperature 1 gives answers greedy does not (most schemas)",
          varied >= len(SCHEMAS) // 2, varied)
    masks = s.metric("qvl_grammar_masks_total") or 0
    seconds = s.metric("qvl_grammar_mask_seconds_total") or 0
    waited = s.metric("qvl_grammar_mask_wait_seconds_total")
    check("/metrics counts the grammar masks: %.3f ms per constrained token over %d tokens, "
          "%.3f ms of it on the engine thread's path" % (
              1000 * seconds / max(masks, 1), masks, 1000 * (waited or 0) / max(masks, 1)),
          masks > 0 and seconds > 0 and waited is not None and 0 <= waited, (masks, seconds))
    # greedy streamed = greedy whole
    a = ask(s, schema_payload(SCHEMAS[0], 0, 1))
    b = ask(s, schema_payload(SCHEMAS[0], 0, 1), True)
    check("streamed greedy answer = the whole one", a[1] == b[1], (a[1], b[1]))
    # json_object: any object
    for temp in [0, 1]:
        status, texts, finish, _, body = ask(s, {"messages": serve_util.user("JSON please"),
                                                 "temperature": temp, "seed": 4, "max_tokens": 600,
                                                 "response_format": {"type": "json_object"}})
        ok = status == 200
        if ok and finish == ["stop"]:
            try:
                ok = isinstance(json.loads(texts[0]), dict)
            except ValueError:
                ok = False
        elif ok:  # cut by max_tokens: still an object's beginning
            ok = texts[0].startswith("{")
        check(f"json_object at temperature {temp}: an object", ok, (status, texts, body))


def test_schema_errors(s):
    bad = {"type": "object", "properties": {"a": {"type": "string", "contentMediaType": "x"}}}
    status, _, body = s.chat(schema_payload(bad, 0, 1))
    check("unsupported schema keyword: 400 naming it", status == 400 and
          "contentMediaType" in body["error"]["message"] and
          body["error"]["param"] == "response_format.json_schema.schema", (status, body))
    for name, rf, param in [
            ("json_schema without an object", {"type": "json_schema", "json_schema": 3},
             "response_format.json_schema"),
            ("schema without a name", {"type": "json_schema", "json_schema": {"schema": {}}},
             "response_format.json_schema.name"),
            ("schema not an object", {"type": "json_schema", "json_schema": {
                "name": "x", "schema": [1]}}, "response_format.json_schema.schema")]:
        status, _, body = s.chat({"messages": serve_util.user("hi"), "response_format": rf})
        check(name + ": 400", status == 400 and body["error"]["param"] == param, (status, body))


def vocabulary():
    """token bytes -> id, from tokenizer.json (byte-level BPE: each byte is a printable
    character in the vocabulary's spelling)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    to_byte = {chr(c): b for b, c in zip(bs, cs)}
    with open(serve_util.tokenizer_path(SHARED), encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    return {bytes(to_byte[ch] for ch in tok): i for tok, i in vocab.items()}


def test_logit_bias(s):
    ids = vocabulary()
    base = {"messages": serve_util.user("Say something."), "max_tokens": 4, "temperature": 0,
            "logprobs": True}
    status, texts, _, lps, body = ask(s, base)
    if not check("greedy answer with logprobs", status == 200 and lps[0], body):
        return
    first = bytes(lps[0][0]["bytes"])
    banned = ids.get(first)
    if not check("the greedy first token is in the vocabulary", banned is not None, first):
        return
    status, _, _, lps2, body = ask(s, dict(base, logit_bias={str(banned): -100}))
    check("logit_bias -100 bans the greedy token",
          status == 200 and all(bytes(t["bytes"]) != first for t in lps2[0]), (first, body))
    status, _, _, lps3, body = ask(s, dict(base, logit_bias={str(banned): -1}))
    check("a small negative bias is added, not a ban: greedy may keep it",
          status == 200 and lps3[0], body)
    forced = ids[b" forced"] if b" forced" in ids else ids[b"x"]
    want = [k for k, v in ids.items() if v == forced][0]
    for temp in [0, 1]:
        status, _, _, lps4, body = ask(s, dict(base, temperature=temp, seed=7,
                                               logit_bias={str(forced): 100}))
        ok = status == 200 and len(lps4[0]) == 4 and \
            all(bytes(t["bytes"]) == want and t["logprob"] > -1e-3 for t in lps4[0])
        check(f"logit_bias +100 forces the token at temperature {temp}", ok, body)
    # the grammar mask comes after the bias: a forced token the schema refuses never appears
    status, texts, finish, _, body = ask(s, dict(schema_payload(SCHEMAS[1], 1, 5),
                                                 logit_bias={str(forced): 100}))
    ok = status == 200 and finish == ["stop"]
    if ok:
        try:
            jsonschema.validate(json.loads(texts[0]), SCHEMAS[1])
        except (ValueError, jsonschema.ValidationError):
            ok = False
    check("with a schema, +100 on a token the grammar refuses: still valid", ok, body)
    status, _, body = s.chat(dict(base, logit_bias={"999999": 1}))
    check("logit_bias id past the vocabulary: 400", status == 400 and
          body["error"]["param"] == "logit_bias", (status, body))


def check_logprobs(name, lps, k, greedy, grammar=False):
    """Every entry: sorted top list of at most k, its first the maximum, the chosen token in it
    when it ranks within the top k, sum of probabilities <= 1."""
    problems = []
    for n, t in enumerate(lps):
        top = t["top_logprobs"]
        vals = [a["logprob"] for a in top]
        if len(top) != k and not grammar:
            problems.append((n, "top_logprobs has %d, not %d" % (len(top), k)))
        if vals != sorted(vals, reverse=True):
            problems.append((n, "not sorted", vals))
        if top and t["logprob"] > vals[0] + 1e-6:
            problems.append((n, "chosen above the top", t["logprob"], vals[0]))
        if greedy and top and abs(t["logprob"] - vals[0]) > 1e-6:
            problems.append((n, "greedy did not take the most probable token"))
        inside = [a for a in top if a["bytes"] == t["bytes"]]
        if top and t["logprob"] > vals[-1] + 1e-6 and not inside:
            problems.append((n, "chosen token ranks in the top k but is missing"))
        if inside and abs(inside[0]["logprob"] - t["logprob"]) > 1e-6:
            problems.append((n, "chosen token's two logprobs differ"))
        if sum(math.exp(v) for v in vals) > 1 + 1e-5 or t["logprob"] > 1e-6:
            problems.append((n, "probabilities over 1"))
        if t["token"].encode() != bytes(t["bytes"]) and "\ufffd" not in t["token"]:
            problems.append((n, "token and bytes disagree"))
    check(name, not problems and lps, problems[:3])


def test_logprobs(s):
    for temp, k in [(0, 5), (1, 20), (0.7, 1)]:
        p = {"messages": serve_util.user("Tell me"), "max_tokens": 12, "temperature": temp,
             "seed": 11, "logprobs": True, "top_logprobs": k}
        status, texts, _, lps, body = ask(s, p)
        if not check(f"logprobs at temperature {temp}: 200", status == 200 and lps[0], body):
            continue
        check_logprobs(f"logprobs at temperature {temp}, top {k}: consistent", lps[0], k, temp == 0)
        check("logprobs: one entry per completion token",
              len(lps[0]) == body["usage"]["completion_tokens"], body["usage"])
        check("logprobs: the tokens spell the answer",
              b"".join(bytes(t["bytes"]) for t in lps[0]).decode("utf-8", "replace") == texts[0])
        status, texts2, _, lps2, ev = ask(s, p, stream=True)
        check(f"streamed logprobs at temperature {temp} = whole ones",
              status == 200 and lps2 == lps and texts2 == texts, (lps2, lps))
    # with a grammar: the masked tokens have no probability, so the list may be shorter
    # (a boolean: "t", "tr", "fal", ... fewer than 20 tokens can start it)
    status, _, _, lps, body = ask(s, dict(schema_payload(SCHEMAS[3], 1, 3), logprobs=True,
                                          top_logprobs=20))
    ok = status == 200 and lps[0] and all(len(t["top_logprobs"]) < 20 for t in lps[0])
    ok = ok and sum(math.exp(a["logprob"]) for a in lps[0][0]["top_logprobs"]) > 0.999
    check("logprobs under a grammar: the allowed tokens hold all the probability", ok, body)
    status, _, _, lps, body = ask(s, {"messages": serve_util.user("x"), "max_tokens": 3,
                                      "logprobs": True})
    check("logprobs without top_logprobs: empty lists", status == 200 and
          all(t["top_logprobs"] == [] for t in lps[0]), body)


def test_n(s):
    p = {"messages": serve_util.user("Pick"), "max_tokens": 6, "temperature": 1, "seed": 21,
         "n": 3}
    status, texts, finish, _, body = ask(s, p)
    ok = status == 200 and [c["index"] for c in body["choices"]] == [0, 1, 2]
    check("n = 3: three choices indexed 0..2", ok, body)
    check("n = 3: the choices differ", ok and len(set(texts)) > 1, texts)
    check("n = 3: usage counts every choice's tokens",
          ok and body["usage"]["completion_tokens"] == 18, body.get("usage"))
    status, texts2, finish2, _, events = ask(s, p, stream=True)
    check("n = 3 streamed: the same three answers, by index", status == 200 and texts2 == texts,
          (texts2, texts))
    idx = {c["index"] for ev in events for c in ev.get("choices", [])}
    check("n = 3 streamed: chunks carry each index", idx == {0, 1, 2}, idx)
    roles = [c["index"] for ev in events for c in ev.get("choices", [])
             if c["delta"].get("role")]
    check("n = 3 streamed: one role chunk per choice", sorted(roles) == [0, 1, 2], roles)
    # n with a schema: each choice validates
    status, texts, finish, _, body = ask(s, dict(schema_payload(SCHEMAS[0], 1, 8), n=2), True)
    ok = status == 200 and finish == ["stop", "stop"]
    for t in texts or []:
        try:
            jsonschema.validate(json.loads(t), SCHEMAS[0])
        except (ValueError, jsonschema.ValidationError):
            ok = False
    check("n = 2 streamed with a schema: both validate", ok, texts)


def main():
    def body(s, model):
        test_schema_errors(s)
        test_schemas(s)
        test_logit_bias(s)
        test_logprobs(s)
        test_n(s)
    return serve_util.run_on_tiny_model(QVL, SHARED, WORK, "structured",
                                        ["--backend", "reference", "--parallel", "3", "--ctx", "1024"], check, body)


if __name__ == "__main__":
    sys.exit(main())
