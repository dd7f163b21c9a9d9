#!/usr/bin/env python3
"""llama-server's surface of qvl serve (issue #39, item 2), on a random-weight model with the
real Qwen3-VL tokenizer:

  the llama-server flags (-np, -c, -a, --kv-type with -ctk/-ctv, -fa, --metrics, --slots,
  --cors) as GET /props, /slots and /v1/models/{id} report them, and the one-line errors of
  contradicting ones; POST /tokenize and /detokenize (pieces, round trips, bad ids);
  POST /v1/completions: a raw prompt (no chat template: the rendered chat prompt sent as text
  gives the chat's answer), token ids = the same text, streamed = whole, legacy logprobs, the
  official OpenAI client; unsupported fields refused with a 400 naming them, neutral values and
  ignored fields accepted, llama-server's grammar and n_predict honoured; CORS off by default,
  on with --cors.

usage: serve_llama_test.py QVL_BINARY SHARED_DATA_DIR WORK_DIR
Skips (77) without the tokenizer; the OpenAI client check is skipped (said so) without it."""
import http.client
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), ".pydeps"))
import serve_util as u  # noqa: E402

QVL, SHARED, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
check = u.Checks()
ORIGIN = "https://app.example"
# <|endoftext|> and <|im_end|> banned: answers run exactly max_tokens tokens.
NO_END = {"151643": -100, "151645": -100}
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def post(s, path, body, headers=None):
    status, h, data = s.request("POST", path, body, headers=headers)
    try:
        return status, h, json.loads(data)
    except ValueError:
        return status, h, data


def error_names(body, param, code):
    e = body.get("error") if isinstance(body, dict) else None
    return isinstance(e, dict) and e.get("param") == param and e.get("code") == code


def sse(s, path, body):
    """(status, parsed events, saw [DONE])."""
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    try:
        conn.request("POST", path, body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            return r.status, [json.loads(r.read())], False
        events, done = u.read_events(r)
        return r.status, events, done
    finally:
        conn.close()


def test_flag_errors(model):
    """Flags that contradict each other or name what qvl does not have: exit 2, one line."""
    cases = [(["-ctk", "f16", "-ctv", "q8_0"], "-ctv q8_0"),
             (["--kv-type", "f32", "-ctk", "f16"], "-ctk f16"),
             (["-ctk", "bf16"], "-ctk bf16"),
             (["-fa", "maybe"], "-fa maybe"),
             (["--slots", "--no-slots"], "--no-slots")]
    for args, names in cases:
        r = subprocess.run([QVL, "serve", "-m", model] + args, capture_output=True, text=True,
                           timeout=60)
        err = r.stderr.strip()
        check("flags %s: exit 2 with one line naming %s" % (" ".join(args), names),
              r.returncode == 2 and "\n" not in err and names in err, (r.returncode, err))
    # The type reaches the model: q8_0 needs a head_dim of 32k, the tiny model's is 16.
    for args in (["--kv-type", "q8_0"], ["-ctk", "q8_0", "-ctv", "q8_0"]):
        r = subprocess.run([QVL, "serve", "-m", model, "--port", "0"] + args,
                           capture_output=True, text=True, timeout=60)
        check("%s reaches the model (its q8_0 refusal)" % " ".join(args),
              r.returncode == 1 and "q8_0" in r.stderr and "head_dim" in r.stderr,
              (r.returncode, r.stderr))


def test_props_and_models(s):
    status, _, props = s.request("GET", "/props")
    props = json.loads(props) if status == 200 else {}
    gen = props.get("default_generation_settings", {})
    check("/props: total_slots (-np 2), n_ctx (-c 2048), model_alias (-a), model_path",
          status == 200 and props.get("total_slots") == 2 and gen.get("n_ctx") == 2048 and
          props.get("model_alias") == "qwen-tiny" and props.get("model_path", "").endswith("tiny"),
          (status, props))
    check("/props: chat_template from the model's chat_template.jinja",
          props.get("chat_template") == TEMPLATE, props.get("chat_template"))
    check("/props: modalities vision, no audio; params; build_info",
          props.get("modalities") == {"vision": True, "audio": False} and
          isinstance(gen.get("params", {}).get("temperature"), (int, float)) and
          props.get("build_info", "").startswith("qvl "), props)
    status, _, slots = s.request("GET", "/slots")
    slots = json.loads(slots) if status == 200 else []
    check("/slots (--slots): two slots of 2048", status == 200 and len(slots) == 2 and
          all(sl["n_ctx"] == 2048 for sl in slots), (status, slots))
    status, _, m = s.request("GET", "/v1/models/qwen-tiny")
    check("/v1/models/{id}: the model object", status == 200 and
          json.loads(m) == {"id": "qwen-tiny", "object": "model", "created": json.loads(m)["created"],
                            "owned_by": "qvl"}, (status, m))
    status, _, m = s.request("GET", "/v1/models/gpt-4")
    check("/v1/models/{other}: 404 model_not_found", status == 404 and
          error_names(json.loads(m), "model", "model_not_found"), (status, m))


def test_tokenize(s):
    text = "Hello <|im_start|>wörld 🦙 tokens"
    status, _, body = post(s, "/tokenize", {"content": text})
    ids = body.get("tokens") if status == 200 else None
    check("/tokenize: ids, the added token by its id", isinstance(ids, list) and 151644 in ids,
          (status, body))
    status, _, body = post(s, "/tokenize", {"content": text, "with_pieces": True,
                                            "add_special": True})
    pieces = body.get("tokens", []) if status == 200 else []
    joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
                      for p in pieces)
    check("/tokenize with_pieces: the same ids, pieces (text or bytes) joined = the text",
          [p["id"] for p in pieces] == ids and joined == text.encode(), (status, pieces))
    status, _, body = post(s, "/detokenize", {"tokens": ids})
    check("/detokenize: round trip", status == 200 and body == {"content": text}, (status, body))
    for bad, what in [([1, 10 ** 7], "an id past the vocabulary"), ([-1], "a negative id"),
                      ([1.5], "a fraction"), ("12", "not a list")]:
        status, _, body = post(s, "/detokenize", {"tokens": bad})
        check("/detokenize %s: 400 naming tokens" % what,
              status == 400 and body["error"]["param"] == "tokens", (status, body))
    status, _, body = post(s, "/tokenize", {"content": "x", "parse_special": False})
    check("/tokenize parse_special false: 400", status == 400 and
          error_names(body, "parse_special", "unsupported_parameter"), (status, body))
    status, _, body = post(s, "/tokenize", {"text": "x"})
    check("/tokenize without content: 400", status == 400 and
          body["error"]["param"] == "content", (status, body))
    return ids


def completion(s, body):
    status, _, out = post(s, "/v1/completions", body)
    return status, out


def text_of(out):
    try:
        return out["choices"][0]["text"]
    except (KeyError, IndexError, TypeError):
        return None


def test_completions(s):
    base = {"max_tokens": 8, "temperature": 0, "logit_bias": NO_END}
    chat_status, _, chat = s.chat(dict(base, messages=u.user("Describe a llama.")))
    rendered = "<|im_start|>user\nDescribe a llama.<|im_end|>\n<|im_start|>assistant\n"
    status, out = completion(s, dict(base, prompt=rendered))
    check("/v1/completions: the chat prompt as raw text gives the chat's answer and usage",
          status == 200 and chat_status == 200 and text_of(out) == u.content_of(chat) and
          out["usage"]["prompt_tokens"] == chat["usage"]["prompt_tokens"], (status, out, chat))
    check("/v1/completions: text_completion shape", out.get("object") == "text_completion" and
          out.get("id", "").startswith("cmpl-") and out["choices"][0]["finish_reason"] == "length"
          and out["choices"][0]["index"] == 0 and "logprobs" in out["choices"][0], out)
    _, _, tok = post(s, "/tokenize", {"content": "Once upon a time"})
    status, by_text = completion(s, dict(base, prompt="Once upon a time"))
    check("/v1/completions: no template (prompt_tokens = the prompt's tokens)",
          status == 200 and by_text["usage"]["prompt_tokens"] == len(tok["tokens"]), by_text)
    status, by_ids = completion(s, dict(base, prompt=tok["tokens"]))
    check("/v1/completions: token ids give the text's answer", status == 200 and
          text_of(by_ids) == text_of(by_text), (by_ids, by_text))
    status, listed = completion(s, dict(base, prompt=["Once upon a time"]))
    check("/v1/completions: a list of one prompt", status == 200 and
          text_of(listed) == text_of(by_text), listed)
    status, events, done = sse(s, "/v1/completions", dict(base, prompt="Once upon a time",
                                                          stream=True))
    streamed = "".join(e["choices"][0]["text"] for e in events if e.get("choices"))
    check("/v1/completions streamed: text chunks = the whole answer, finish_reason, [DONE]",
          status == 200 and done and streamed == text_of(by_text) and
          all(e["object"] == "text_completion" for e in events) and
          events[-1]["choices"][0]["finish_reason"] == "length", (status, events[-2:]))
    status, lp = completion(s, dict(base, prompt="Once upon a time", logprobs=2))
    lps = lp["choices"][0]["logprobs"] if status == 200 else {}
    n = lp["usage"]["completion_tokens"] if status == 200 else -1
    check("/v1/completions logprobs 2: one entry per token, at most 2 alternatives, offsets",
          status == 200 and len(lps["tokens"]) == n == len(lps["token_logprobs"]) ==
          len(lps["top_logprobs"]) == len(lps["text_offset"]) and
          all(len(t) <= 2 for t in lps["top_logprobs"]) and
          all(x <= 0 for x in lps["token_logprobs"]) and lps["text_offset"][0] == 0 and
          lps["text_offset"] == sorted(lps["text_offset"]) and text_of(lp) == text_of(by_text),
          lps)
    for bad, param in [({"prompt": ""}, None), ({"prompt": [10 ** 7]}, None),
                       ({"prompt": "<|image_pad|>"}, "prompt"), ({"prompt": ["a", "b"]}, "prompt"),
                       ({}, "prompt")]:
        status, out = completion(s, dict(base, **bad))
        check("/v1/completions %s: 400" % json.dumps(bad)[:60], status == 400 and
              (param is None or out["error"]["param"] == param), (status, out))
    return text_of(by_text)


def test_openai_client(s, expected):
    try:
        import openai
    except ImportError as e:
        print("skip: the openai client check (%s; scripts/install-pydeps.sh)" % e)
        return
    client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % s.port, api_key="none")
    r = client.completions.create(model="qwen-tiny", prompt="Once upon a time", max_tokens=8,
                                  temperature=0, logit_bias=NO_END)
    check("openai client: completions.create", r.object == "text_completion" and
          r.choices[0].text == expected and r.usage.completion_tokens == 8, r)


def test_fields(s):
    chat = {"messages": u.user("hi"), "max_tokens": 2}
    refused = [("mirostat", 2), ("typical_p", 0.5), ("tfs_z", 0.9), ("dry_multiplier", 0.8),
               ("ignore_eos", True), ("n_probs", 3), ("functions", [{"name": "f"}]),
               ("audio", {"voice": "alloy"}), ("modalities", ["text", "audio"]),
               ("best_of", 3), ("samplers", ["top_k"]), ("chat_template_kwargs", {"x": 1}),
               ("prompt", "x")]
    for name, value in refused:
        status, _, body = s.chat(dict(chat, **{name: value}))
        check("chat %s=%s: 400 naming it" % (name, json.dumps(value)), status == 400 and
              error_names(body, name, "unsupported_parameter"), (status, body))
    status, _, body = s.chat(dict(chat, repeat_penalty=1.3, repeat_last_n=64))
    check("chat repeat_last_n 64 with a penalty: 400", status == 400 and
          error_names(body, "repeat_last_n", "unsupported_parameter"), (status, body))
    neutral = {"mirostat": 0, "typical_p": 1, "tfs_z": 1, "dry_multiplier": 0,
               "xtc_probability": 0, "ignore_eos": False, "n_probs": 0, "modalities": ["text"],
               "best_of": 1, "repeat_last_n": 64, "user": "u1", "store": False,
               "metadata": {"a": "b"}, "service_tier": "auto", "model": "anything",
               "reasoning_effort": "low", "cache_prompt": True, "id_slot": -1, "n_keep": 0}
    status, _, body = s.chat(dict(chat, **neutral))
    check("chat: neutral values and ignored fields pass", status == 200, (status, body))
    base = {"prompt": "x", "max_tokens": 2}
    for name, value in [("echo", True), ("suffix", "end"), ("tools", []), ("messages", [])]:
        status, out = completion(s, dict(base, **{name: value}))
        check("completions %s=%s: 400 naming it" % (name, json.dumps(value)), status == 400 and
              error_names(out, name, "unsupported_parameter"), (status, out))
    status, out = completion(s, dict(base, echo=False, suffix=""))
    check("completions: echo false, suffix \"\" pass", status == 200, (status, out))
    status, _, body = s.chat({"messages": u.user("yes or no?"), "temperature": 1, "seed": 3,
                              "grammar": 'root ::= "yes" | "no"'})
    check("chat grammar (llama-server's GBNF field): the answer follows it",
          status == 200 and u.content_of(body) in ("yes", "no"), (status, body))
    status, out = completion(s, {"prompt": "x", "n_predict": 3, "logit_bias": NO_END})
    check("completions n_predict 3 (llama-server's max_tokens)", status == 200 and
          out["usage"]["completion_tokens"] == 3, (status, out))


def test_cors(s, plain):
    for path, method in [("/v1/chat/completions", "POST"), ("/props", "GET")]:
        status, h, _ = s.request("OPTIONS", path, headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization, content-type"})
        check("--cors: preflight of %s: 204, the origin, %s allowed" % (path, method),
              status == 204 and h.get("access-control-allow-origin") == ORIGIN and
              method in h.get("access-control-allow-methods", "") and
              "Authorization" in h.get("access-control-allow-headers", ""), (status, h))
    status, h, _ = s.request("POST", "/tokenize", {"content": "x"}, headers={"Origin": ORIGIN})
    check("--cors: an answer carries the origin", status == 200 and
          h.get("access-control-allow-origin") == ORIGIN and h.get("vary") == "Origin", h)
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=120)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "x", "max_tokens": 2,
                                                                 "stream": True}),
                     headers={"Content-Type": "application/json", "Origin": ORIGIN})
        r = conn.getresponse()
        r.read()
        check("--cors: a stream carries the origin", r.status == 200 and
              r.getheader("Access-Control-Allow-Origin") == ORIGIN, r.getheaders())
    finally:
        conn.close()
    status, h, _ = s.request("GET", "/health", headers={"Origin": "https://evil.example"})
    check("--cors: another origin gets no allow-origin", status == 200 and
          "access-control-allow-origin" not in h, h)
    status, h, _ = plain.request("OPTIONS", "/v1/chat/completions", headers={"Origin": ORIGIN})
    check("no --cors: a preflight is 405 without CORS headers", status == 405 and
          "access-control-allow-origin" not in h, (status, h))
    status, h, _ = plain.request("GET", "/health", headers={"Origin": ORIGIN})
    check("no --cors: answers carry no CORS headers", "access-control-allow-origin" not in h, h)
    status, _, body = plain.request("GET", "/slots")
    check("--no-slots: GET /slots is 404", status == 404, (status, body))


def main():
    tok = u.tokenizer_path(SHARED)
    if not os.path.exists(tok):
        print(f"skip: {tok} absent")
        return 77
    os.makedirs(WORK, exist_ok=True)
    model = u.make_tiny_model(QVL, WORK, tok)
    with open(os.path.join(model, "chat_template.jinja"), "w") as f:
        f.write(TEMPLATE)
    test_flag_errors(model)
    s = u.Server(QVL, WORK, "llama", ["-m", model, "-np", "2", "-c", "2048", "-a", "qwen-tiny",
                                      "--kv-type", "f16", "-ctk", "f16", "-ctv", "f16", "-fa",
                                      "on", "--metrics", "--slots", "--cors", ORIGIN])
    plain = u.Server(QVL, WORK, "plain", ["-m", model, "--no-slots"])
    try:
        if check("servers ready", s.wait_ready() and plain.wait_ready()):
            test_props_and_models(s)
            test_tokenize(s)
            expected = test_completions(s)
            test_openai_client(s, expected)
            test_fields(s)
            test_cors(s, plain)
    finally:
        rcs = (s.stop(), plain.stop())
    check("clean exits on SIGTERM", rcs == (0, 0), rcs)
    check("no sanitizer report", u.sanitizer_clean(s.text()) and u.sanitizer_clean(plain.text()),
          (s.text() + plain.text())[-3000:])
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
