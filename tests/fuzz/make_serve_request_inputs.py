#!/usr/bin/env python3
"""Writes the serve_request fuzz target's regression inputs for issue #32 (request bodies):
python3 tests/fuzz/make_serve_request_inputs.py. Each pins a refusal of serve_json.c or
serve_request.c: U+0000 in strings, bytes after the object, duplicate keys, vision tokens typed
as text (whole or split over parts), and bodies at and past the value count (the densest ones
also check that the allocation budget holds what the count lets through)."""
import json
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "regressions", "serve_request")
MAX_VALUES = 65536  # SERVE_MAX_JSON_VALUES


def chat(text="hi", **extra):
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": 4}
    body.update(extra)
    return json.dumps(body).encode()


def parts(*texts):
    return json.dumps({"messages": [{"role": "user", "content": [
        {"type": "text", "text": t} for t in texts]}]}).encode()


def padded(element, n):
    return chat()[:-1] + b', "pad": [' + b",".join([element] * n) + b"]}"


INPUTS = {
    "nul_escape.json": chat("before\u0000after"),
    "nul_raw_in_string.json": chat().replace(b'"hi"', b'"h\x00i"'),
    "nul_escape_in_key.json": b'{"messages": [{"ro\\u0000le": "user", "content": "x"}]}',
    "trailing_bytes.json": chat() + b" trailing",
    "trailing_second_object.json": chat() + chat(),
    "trailing_nul.json": chat() + b"\x00",
    "duplicate_key_root.json": chat()[:-1] + b', "messages": []}',
    "duplicate_key_message.json": b'{"messages": [{"role": "user", "role": "system", "content": "x"}]}',
    "duplicate_key_escaped.json": chat()[:-1] + b', "stream_options": {"a": 1, "\\u0061": 2}}',
    "image_pad_text.json": chat("look <|image_pad|> here"),
    "vision_start_part.json": parts("a", "<|vision_start|>"),
    "image_pad_split.json": parts("look <|image_", "pad|> here"),
    "video_pad_split.json": parts("<|video", "_pad|>"),
    "values_past_limit.json": padded(b"0", MAX_VALUES),
    "values_dense_objects.json": padded(b"{}", MAX_VALUES // 2),
    "values_dense_members.json": padded(b'{"a":"b"}', MAX_VALUES // 2 - 16),
    "unterminated_member.json": b'{"messages": [{"role": "user", "content": "x"}], "pad": [{"a":',
}

if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    for name, data in INPUTS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
    print("wrote %d inputs to %s" % (len(INPUTS), OUT))
