#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

Seeds are small (a few KB) valid or nearly valid inputs, so the fuzzer starts from the
structure real files have. Run from anywhere: python3 tests/fuzz/make_corpus.py
Reads tests/fixtures (never ../shared/data: shared test data stays out of the repo).
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- safetensors ----------------------------------------------------------------------------
ELEM = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "U8": 1}


def safetensors(tensors, metadata=None, pad_to=8, extra=b""):
    """tensors: list of (name, dtype, shape); data is a counting byte pattern."""
    header, blob = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = ELEM[dtype]
        for s in shape:
            n *= s
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(blob), len(blob) + n]}
        blob += bytes((len(blob) + i) & 0xFF for i in range(n))
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % pad_to)
    return struct.pack("<Q", len(h)) + h + blob + extra


put("safetensors", "one_f32", safetensors([("w", "F32", [2, 3])], {"format": "pt"}))
put("safetensors", "mixed", safetensors([("a.weight", "BF16", [4, 2]), ("a.bias", "F16", [4]),
                                         ("scalar", "F32", []), ("empty", "F32", [0, 5])]))
put("safetensors", "rank8", safetensors([("r8", "F16", [1, 2, 1, 2, 1, 1, 1, 2])]))
put("safetensors", "unsupported_dtype", safetensors([("ids", "I64", [3])]))
put("safetensors", "empty_header", struct.pack("<Q", 2) + b"{}")
put("safetensors", "no_padding", safetensors([("x", "F32", [1])], pad_to=1))
put("safetensors", "trailing_data", safetensors([("x", "BF16", [3])], extra=b"\0" * 6))
# The fixture's real header (Qwen3-VL tensor names, 5-D patch embedding) with every dimension
# shrunk to at most 2, so the data stays tiny.
fx = read(os.path.join(FIXTURES, "tiny-tied", "model.safetensors"))
(hlen,) = struct.unpack("<Q", fx[:8])
hdr = json.loads(fx[8:8 + hlen])
shrunk = [(k, v["dtype"], [min(s, 2) for s in v["shape"]])
          for k, v in hdr.items() if k != "__metadata__"]
put("safetensors", "fixture_shrunk", safetensors(shrunk[:40], hdr.get("__metadata__")))
put("safetensors", "fixture_truncated", fx[:8 + 2048])

# ---- config.json / generation_config.json ---------------------------------------------------
for d in ("tiny-tied", "tiny-untied"):
    put("config", d + "_config.json", read(os.path.join(FIXTURES, d, "config.json")))
    put("gen_config", d + "_generation_config.json",
        read(os.path.join(FIXTURES, d, "generation_config.json")))
# (../shared/data is never copied into the repo: the fixtures' configs have the same structure.)
put("gen_config", "all_keys.json", json.dumps({
    "eos_token_id": [1, 2, 2, 3], "bos_token_id": 0, "pad_token_id": None, "do_sample": True,
    "temperature": 0.7, "top_k": 20, "top_p": 0.8, "min_p": 0.05, "repetition_penalty": 1.05,
    "presence_penalty": 1.5, "max_new_tokens": 128}))
put("gen_config", "scalar_eos.json", '{"eos_token_id": 151645}')

# ---- tokenizer.json --------------------------------------------------------------------------
def byte_chars():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
              r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def tokenizer(vocab, merges, added=(), normalizer={"type": "NFC"}, merges_as_pairs=False):
    return json.dumps({
        "version": "1.0",
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": s}
                         for i, c, s in added],
        "normalizer": normalizer,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_REGEX}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
             "use_regex": False}]},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "vocab": vocab,
                  "merges": [list(m) for m in merges] if merges_as_pairs
                  else [" ".join(m) for m in merges]},
    }, ensure_ascii=True)


bc = byte_chars()
full = {bc[b]: b for b in range(256)}
full.update({"ab": 256, "abc": 257, "\u0120a": 258, "aa": 259})
merges = [("a", "b"), ("ab", "c"), ("\u0120", "a"), ("a", "a")]
added = [(300, "<|im_start|>", True), (301, "<|im_end|>", True), (302, "<think>", False)]
put("tokenizer_load", "bytes_bpe.json", tokenizer(full, merges, added))
put("tokenizer_load", "pair_merges.json", tokenizer(full, merges, added, merges_as_pairs=True))
small = {"a": 0, "b": 1, "c": 2, "ab": 3, "bc": 4, "\u0120": 5}
put("tokenizer_load", "small_no_norm.json",
    tokenizer(small, [("a", "b"), ("b", "c")], [(10, "<|x|>", True)], normalizer=None))

# ---- tokenizer encode: text ------------------------------------------------------------------
texts = {
    "hello": "Hello, world! How are you?",
    "chat": "<|im_start|>user\nDescribe this.<|im_end|>\n<|im_start|>assistant\n",
    "unicode": "нещо на Български \u00e9\u0301 \U0001f999 \u4e2d\u6587 \u0645\u0631\u062d\u0628\u0627",
    "digits": "3333333 33333 1234567890 ½ 4 months",
    "spaces": "   \t\n\n  \r\n x  ",
    "code": "int main(void) { return printf(\"%d\\n\", 42); }",
    "contractions": "I'm sure they'LL say it's 'd fine",
}
for k, v in texts.items():
    put("tokenizer_encode", k, v)
put("tokenizer_encode", "invalid_utf8", b"ok \xff\xfe \xc3 \xe2\x82 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf end")
put("tokenizer_encode", "nul_bytes", b"a\0b\0\0<|im_end|>\0")
put("tokenizer_encode", "run_request", b"\xffa\x0f")  # "a" repeated 65536 times
put("tokenizer_encode", "run_request_space", b"\xff \x03")  # " " repeated 16384 times

# ---- chat: records separated by 0x01, op = first byte % 6 ------------------------------------
SYS, USER, ASSIST, TEXT, IMAGE, VID = (bytes([i]) for i in range(6))
def chat(*records, last=b""):
    return b"\x01".join(records) + last
put("chat", "simple", chat(SYS + b"You are helpful.", USER + b"Hi!", last=b"\x01\x02\x80"))
put("chat", "images", chat(VID + b"\x01", USER + b"Look:", IMAGE, TEXT + b"and", IMAGE,
                           ASSIST + b"<think>\n</think>\nTwo cats.", USER + b"More?", last=b"\x01\x02\x84"))
put("chat", "late_system", chat(USER + b"a", SYS + b"not first", ASSIST + b"b"))
put("chat", "empty_parts", chat(ASSIST, TEXT, IMAGE, IMAGE, USER, last=b"\x01\x05\x83"))

# ---- plugins.yaml ----------------------------------------------------------------------------
put("plugins_yaml", "repo_plugins.yaml", read(os.path.join(ROOT, "plugins.yaml")))
put("plugins_yaml", "readme.yaml", """backends:
  - name: cuda_sm61
    library: build/backends/cuda_sm61/libqvl-cuda_sm61.so   # relative to this file, or absolute
    priority: 100
    options: { device: 0 }
  - name: cpu_avx2
    priority: 50
    options: { threads: 0 }        # 0 = all cores
  - name: reference
    priority: 0
""")
put("plugins_yaml", "flow_style.yaml",
    '{backends: [{name: a, library: /abs/liba.so, required: true, priority: -5},'
    ' {name: "b", options: {x: "1", y: 2}}]}\n')
put("plugins_yaml", "anchors.yaml", "x: &a {name: ref}\nbackends:\n  - *a\n  - name: r2\n    priority: 9\n")

# ---- --ids -----------------------------------------------------------------------------------
put("ids", "commas", "151644,872,198")
put("ids", "blanks", "1 2\t3\n4 , 5,,6")
put("ids", "limits", "0 2147483647")
put("ids", "bad", "12,-3,x")
