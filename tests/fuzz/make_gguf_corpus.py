#!/usr/bin/env python3
"""Writes the seed corpus of the `gguf` fuzz target (tests/fuzz/corpus/gguf/).

Small GGUF files (a few KB) built with the standard library alone: every metadata value type,
nested arrays, versions 2 and 3, a custom alignment, one small tensor of every type qvl reads
(random bytes with finite f16 scales) and one it refuses, plus a few nearly valid files.
Run from anywhere: python3 tests/fuzz/make_gguf_corpus.py
"""
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus", "gguf")

# value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?",
          U64: "Q", I64: "q", F64: "d"}

# ggml type: (id, block values, block bytes, byte offsets of f16 scale fields)
TYPES = {
    "F32": (0, 1, 4, ()), "F16": (1, 1, 2, ()), "BF16": (30, 1, 2, ()),
    "Q4_0": (2, 32, 18, (0,)), "Q4_1": (3, 32, 20, (0, 2)), "Q5_0": (6, 32, 22, (0,)),
    "Q5_1": (7, 32, 24, (0, 2)), "Q8_0": (8, 32, 34, (0,)), "Q2_K": (10, 256, 84, (80, 82)),
    "Q3_K": (11, 256, 110, (108,)), "Q4_K": (12, 256, 144, (0, 2)),
    "Q5_K": (13, 256, 176, (0, 2)), "Q6_K": (14, 256, 210, (208,)),
    "IQ4_NL": (20, 32, 18, (0,)), "IQ4_XS": (23, 256, 136, (0,)), "I32": (26, 1, 4, ()),
    "IQ2_XXS": (16, 256, 66, ()),
}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(vtype, v):
    if vtype == STRING:
        return gstr(v)
    if vtype == ARRAY:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        return out + b"".join(value(etype, x) for x in items)
    return struct.pack("<" + SCALAR[vtype], v)


def block_bytes(rng, name, n_blocks):
    _, _, size, scales = TYPES[name]
    out = bytearray(rng.getrandbits(8) for _ in range(size * n_blocks))
    for b in range(n_blocks):
        for off in scales:  # a finite f16 scale between 2^-10 and 2^3
            h = (rng.randrange(5, 18) << 10) | rng.randrange(1024) | (rng.randrange(2) << 15)
            out[b * size + off:b * size + off + 2] = struct.pack("<H", h)
    if name in ("F32", "F16", "BF16"):
        out = bytearray()
        for _ in range(n_blocks):
            x = rng.uniform(-2, 2)
            out += struct.pack("<f", x) if name == "F32" else (
                struct.pack("<e", x) if name == "F16" else struct.pack("<f", x)[2:])
    return bytes(out)


def gguf(kvs, tensors, version=3, align=32, magic=b"GGUF"):
    """kvs: [(key, vtype, value)]; tensors: [(name, type name, ne list, data bytes)]."""
    head = magic + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for key, vtype, v in kvs:
        head += gstr(key) + struct.pack("<I", vtype) + value(vtype, v)
    data, infos = b"", b""
    for name, tname, ne, blob in tensors:
        data += b"\0" * ((-len(data)) % align)
        infos += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", TYPES[tname][0], len(data))
        data += blob
    head += infos
    head += b"\0" * ((-len(head)) % align)
    return head + data


def put(name, data):
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = random.Random(20261205)
    every_value = [
        ("general.architecture", STRING, "qwen3vl"), ("a.u8", U8, 7), ("a.i8", I8, -7),
        ("a.u16", U16, 65535), ("a.i16", I16, -2), ("a.u32", U32, 1 << 31), ("a.i32", I32, -5),
        ("a.f32", F32, 1.5), ("a.bool", BOOL, True), ("a.u64", U64, 1 << 63),
        ("a.i64", I64, -(1 << 40)), ("a.f64", F64, 2.5e-300),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, ["<|im_start|>", "\u0120the", "", "a"])),
        ("tokenizer.ggml.token_type", ARRAY, (I32, [1, 3, 1, 1])),
        ("a.nested", ARRAY, (ARRAY, [(STRING, ["x", "y"]), (U8, [1, 2, 3]), (ARRAY, [(BOOL, [0])])])),
    ]
    put("every_value", gguf(every_value, []))
    put("version2", gguf(every_value[:3], [("w", "F32", [4, 2], block_bytes(rng, "F32", 8))], version=2))
    put("empty", gguf([], []))
    for tname, (_, blk, _, _) in TYPES.items():
        ne = [blk * (2 if blk < 256 else 1), 2] if blk > 1 else [8, 3]
        n_blocks = ne[0] * ne[1] // blk
        kvs = [("general.alignment", U32, 64)] if tname == "Q4_K" else []
        put("type_" + tname.lower(), gguf(kvs, [("blk.0." + tname.lower(), tname, ne,
                                                  block_bytes(rng, tname, n_blocks))],
                                          align=64 if kvs else 32))
    put("two_tensors", gguf([("general.alignment", U32, 16)],
                            [("a", "F16", [16], block_bytes(rng, "F16", 16)),
                             ("b", "Q8_0", [32, 1], block_bytes(rng, "Q8_0", 1))], align=16))
    put("big_endian", b"GGUF" + struct.pack(">IQQ", 3, 0, 0))
    put("bad_magic", gguf([], [], magic=b"GGML"))
    valid = gguf(every_value[:2], [("w", "Q4_0", [32], block_bytes(rng, "Q4_0", 1))])
    put("truncated", valid[:-5])


if __name__ == "__main__":
    main()
