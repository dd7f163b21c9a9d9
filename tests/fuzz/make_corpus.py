#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/).

Seeds are small (a few KB) valid or nearly valid inputs, so the fuzzer starts from the
structure real files have. Run from anywhere: python3 tests/fuzz/make_corpus.py
Reads tests/fixtures (never ../shared/data: shared test data stays out of the repo).
"""
import json
import os
import struct
import zlib

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

# ---- image: pictures (and preprocessor_config.json, an input starting with "{") ------------
put("image", "small.png", read(os.path.join(FIXTURES, "tiny-tied", "small.png")))
put("image", "wide_truncated.png", read(os.path.join(FIXTURES, "tiny-tied", "wide.png"))[:6000])
put("image", "ppm_p6_3x2", b"P6\n3 2\n255\n" + bytes(range(0, 18 * 14, 14)))
put("image", "pgm_p5_4x4", b"P5 4 4 255 " + bytes(range(0, 256, 16)))
put("image", "ppm_giant", b"P6\n65535 2700\n255\n" + b"\x80" * 64)  # 177 Mpixels: under the limit
put("image", "ppm_bomb", b"P6\n20000 20000\n255\n" + b"\0" * 16)


def bmp24(w, h):
    row = (w * 3 + 3) & ~3
    pix = b"".join(bytes((x * 40 + y * 9) & 0xFF for x in range(w * 3)) + b"\0" * (row - w * 3)
                   for y in range(h))
    return (b"BM" + struct.pack("<IHHI", 54 + len(pix), 0, 0, 54)
            + struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(pix), 2835, 2835, 0, 0) + pix)


put("image", "bmp_5x3", bmp24(5, 3))
# 2x2 GIF87a: a 4-colour global table, one image block, LZW min code size 2.
put("image", "gif_2x2", b"GIF87a" + struct.pack("<HHBBB", 2, 2, 0x81, 0, 0)
    + bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255])
    + b"," + struct.pack("<HHHHB", 0, 0, 2, 2, 0) + bytes([2, 3, 0x84, 0x1D, 0x05, 0]) + b";")
put("image", "gif_header_huge", b"GIF89a" + struct.pack("<HHBBB", 65535, 65535, 0, 0, 0) + b";")
# An 8x4 JPEG (stb_image_write, quality 50) with an EXIF APP1 holding orientation 6 after SOI.
JPEG_8x4 = bytes.fromhex(
    "ffd8ffe000104a46494600010100000100010000ffdb008400100b0c0e0c0a100e0d0e1211101318281a181616183123251d283a333d3c3933383740485c4e404457453738506d51575f626768673e4d71797064785c656763011112121815182f1a1a2f634238426363636363636363636363636363636363636363636363636363636363636363636363636363636363636363636363636363ffc00011080004000803012200021101031101ffc401a20000010501010101010100000000000000000102030405060708090a0b100002010303020403050504040000017d01020300041105122131410613516107227114328191a1082342b1c11552d1f02433627282090a161718191a25262728292a3435363738393a434445464748494a535455565758595a636465666768696a737475767778797a838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae1e2e3e4e5e6e7e8e9eaf1f2f3f4f5f6f7f8f9fa0100030101010101010101010000000000000102030405060708090a0b1100020102040403040705040400010277000102031104052131061241510761711322328108144291a1b1c109233352f0156272d10a162434e125f11718191a262728292a35363738393a434445464748494a535455565758595a636465666768696a737475767778797a82838485868788898a92939495969798999aa2a3a4a5a6a7a8a9aab2b3b4b5b6b7b8b9bac2c3c4c5c6c7c8c9cad2d3d4d5d6d7d8d9dae2e3e4e5e6e7e8e9eaf2f3f4f5f6f7f8f9faffda000c03010002110311003f004f0d7ee74d9a58ced7485994fa100e299fdbfaa7fcfdb7fdf0bfe14ff0ff00fc822e7feb83ff00e826b2ab9b129368f6f29a54e70939c53d7aa3ffd9")


def exif_app1(orientation, le=True):
    e = "<" if le else ">"
    tiff = (b"II" if le else b"MM") + struct.pack(e + "HI", 42, 8) + struct.pack(e + "H", 1)
    tiff += struct.pack(e + "HHIHH", 0x0112, 3, 1, orientation, 0) + struct.pack(e + "I", 0)
    seg = b"Exif\0\0" + tiff
    return b"\xff\xe1" + struct.pack(">H", len(seg) + 2) + seg


put("image", "jpeg_8x4", JPEG_8x4)
put("image", "jpeg_exif6_le", JPEG_8x4[:2] + exif_app1(6) + JPEG_8x4[2:])
put("image", "jpeg_exif7_be", JPEG_8x4[:2] + exif_app1(7, le=False) + JPEG_8x4[2:])
put("image", "jpeg_truncated", JPEG_8x4[:400])
# A few of the Pillow parity pictures (scripts/make_image_fixtures.py): WebP, interlaced and
# 16-bit PNG, an offset transparent interlaced GIF, CMYK and progressive JPEG, a rescaled PPM.
for name in ["webp_lossy.webp", "webp_lossless_alpha.webp", "webp_animated.webp",
             "webp_exif6.webp", "gif_offset_transparent_interlaced.gif", "png_interlaced_rgb8.png",
             "png_grey16.png", "jpeg_cmyk.jpg", "jpeg_progressive_420.jpg",
             "pnm_rgb_maxval1000.ppm"]:
    with open(os.path.join(FIXTURES, "images", name), "rb") as f:
        put("image", "fixture_" + name, f.read())
# Orientation from XMP and PNG text (Pillow's rules): iTXt, compressed iTXt, Raw profile type
# exif in zTXt, EXIF against XMP, JPEG APP1 XMP, WebP XMP.
for name in ["png_xmp_itxt_element8_zip.png", "png_raw_profile_ztxt3.png", "png_exif1_xmp6.png",
             "jpeg_xmp_attr6.jpg", "jpeg_exif_no_tag_xmp5.jpg", "webp_exif8_xmp5.webp"]:
    put("image", "fixture_" + name, read(os.path.join(FIXTURES, "images", name)))


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_1x1_with(chunks_before, chunks_after=()):
    """A 1x1 grey PNG with extra (type, data) chunks before and after its pixels."""
    ihdr = png_chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    idat = png_chunk(b"IDAT", zlib.compress(b"\0\x4d"))
    extra = lambda cs: b"".join(png_chunk(k, d) for k, d in cs)
    return (b"\x89PNG\r\n\x1a\n" + ihdr + extra(chunks_before) + idat + extra(chunks_after) +
            png_chunk(b"IEND", b""))


def jpeg_empty_scans(w, h, ac_scans):
    """A progressive grey JPEG: one DC scan (every block level 128), then ac_scans AC scans that
    code only end-of-band runs over every block (see tests/test_image_bombs.c)."""
    out = bytearray(b"\xff\xd8\xff\xdb\x00\x43\x00" + b"\x01" * 64)
    out += b"\xff\xc2" + struct.pack(">HBHHBBBB", 11, 8, h, w, 1, 1, 0x11, 0)
    out += b"\xff\xc4" + struct.pack(">HB", 20, 0x00) + bytes([1] + [0] * 15) + b"\x00"
    out += b"\xff\xc4" + struct.pack(">HB", 34, 0x10) + bytes([0, 0, 0, 15] + [0] * 12)
    out += bytes(r << 4 for r in range(15))
    blocks = (w // 8) * (h // 8)

    def scan(bits):
        bits += "1" * (-len(bits) % 8)
        data = bytearray()
        for i in range(0, len(bits), 8):
            data.append(int(bits[i:i + 8], 2))
            if data[-1] == 0xFF:
                data.append(0)
        return bytes(data)

    out += b"\xff\xda\x00\x08\x01\x01\x00\x00\x00\x00" + scan("0" * blocks)
    for _ in range(ac_scans):
        bits, left = "", blocks
        while left:
            r = min(14, left.bit_length() - 1)
            run = min(left, (2 << r) - 1)
            bits += format(r, "04b") + (format(run - (1 << r), "0%db" % r) if r else "")
            left -= run
        out += b"\xff\xda\x00\x08\x01\x01\x00\x01\x3f\x00" + scan(bits)
    return bytes(out + b"\xff\xd9")


# PNG text: small zTXt/iTXt/tEXt chunks around the pixels (the text-chunk rules); JPEG: a
# progressive file of a dozen empty scans (the scan budget).
put("image", "png_text_chunks", png_1x1_with(
    [(b"zTXt", b"Comment\0\0" + zlib.compress(b"z" * 3000)),
     (b"iTXt", b"XML:com.adobe.xmp\0\1\0\0\0" + zlib.compress(b'<x tiff:Orientation="6"/>')),
     (b"tEXt", b"Raw profile type exif\0\nexif\n      8\n4d4d002a00000008\n")],
    [(b"iTXt", b"XML:com.adobe.xmp\0\0\0\0\0<tiff:Orientation>3</tiff:Orientation>")]))
put("image", "jpeg_empty_scans", jpeg_empty_scans(64, 48, 12))
# Regressions pinning the limits: a zTXt inflating past 1 MiB (refused), a 2048x2048 progressive
# JPEG of 200 empty scans (past the work budget, refused).
put_regression = lambda name, data: put("../regressions/image", name, data)
put_regression("png_ztxt_past_1mib", png_1x1_with(
    [(b"zTXt", b"Comment\0\0" + zlib.compress(b"a" * ((1 << 20) + 1), 9))]))
put_regression("jpeg_200_empty_scans_2048", jpeg_empty_scans(2048, 2048, 200))

put("image", "preprocessor_config.json",
    read(os.path.join(FIXTURES, "tiny-tied", "preprocessor_config.json")))
put("image", "preprocessor_config_old.json",
    '{"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "merge_size": 2,'
    ' "temporal_patch_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],'
    ' "image_std": 0.26862954, "rescale_factor": 0.00392156862745098}')

# ---- model.safetensors.index.json (shards model-0000{1,2}-of-00002.safetensors exist) -------
put("weights_index", "two_shards.json", json.dumps({
    "metadata": {"total_size": 512},
    "weight_map": {"model.language_model.norm.weight": "model-00001-of-00002.safetensors",
                   "lm_head.weight": "model-00002-of-00002.safetensors"}}, indent=2))
put("weights_index", "wrong_shard.json", json.dumps({"weight_map": {
    "model.language_model.norm.weight": "model-00002-of-00002.safetensors",
    "lm_head.weight": "model-00002-of-00002.safetensors",
    "model.visual.merger.norm.weight": "model-00003-of-00003.safetensors"}}))
put("weights_index", "escapes.json", json.dumps({"weight_map": {
    "a": "../model.safetensors", "b": "/etc/passwd", "c": "..", "d": 5}}))
put("weights_index", "duplicate.json",
    '{"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors",'
    ' "lm_head.weight": "model-00002-of-00002.safetensors"}}')
