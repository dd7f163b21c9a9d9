#!/usr/bin/env python3
"""Writes the GGUF file that test_gguf_dequant checks qvl's reader and dequantisers against.

Usage: python3 tests/gguf_dequant_make.py OUT.gguf [TEST_PROGRAM]
  With TEST_PROGRAM, runs it on OUT.gguf afterwards and exits with its status (the ctest).

Needs gguf-py and numpy (scripts/install-deps.sh puts them in .pydeps/ of the checkout, which is
searched first); without them it prints why and exits 77, which ctest counts as skipped.

For every tensor type qvl reads (qvl/ggml_types.h) the file holds a tensor "T" of that type and
"T.expect", gguf-py's dequantisation of it in F32; the C side dequantises "T" and compares bit
for bit. Where gguf-py has a quantiser (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) "T" is
random normal data quantised by it; for the others it is random valid blocks: random bytes with
every f16 scale field set to a random finite value (log-uniform magnitudes, f16 subnormals
included), so every quant, sub-scale and min bit pattern occurs. The metadata holds one value
of every value type and nested arrays, which the C side reads back (test_gguf_dequant.c keeps
the same values).
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), ".pydeps"))

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q, GGUFValueType as V
except ImportError as e:
    print(f"skipped: gguf-py and numpy are needed ({e}); run scripts/install-deps.sh, or "
          "pip install gguf numpy")
    sys.exit(77)

ROWS = 3
COLS = 512  # whole 256-value super-blocks

# f16 fields (byte offsets in a block) of the types written as random blocks
F16_FIELDS = {
    Q.Q2_K: (80, 82),
    Q.Q3_K: (108,),
    Q.Q4_K: (0, 2),
    Q.Q5_K: (0, 2),
    Q.Q6_K: (208,),
    Q.IQ4_NL: (0,),
    Q.IQ4_XS: (0,),
}
QUANTISED = (Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1)


def random_scales(rng, n):
    mag = np.exp(rng.uniform(np.log(1e-7), np.log(1e2), n)).astype(np.float16)
    sign = np.where(rng.random(n) < 0.5, -1, 1).astype(np.float16)
    return mag * sign


def random_blocks(rng, qtype):
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = ROWS * COLS // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = random_scales(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(ROWS, COLS // block * size)


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[2])
        return 2
    out = sys.argv[1]
    rng = np.random.default_rng(20261205)
    w = gguf.GGUFWriter(out, arch="qvltest")
    # one value of each type, as test_gguf_dequant.c expects them
    w.add_key_value("test.u8", 200, V.UINT8)
    w.add_key_value("test.i8", -100, V.INT8)
    w.add_key_value("test.u16", 60000, V.UINT16)
    w.add_key_value("test.i16", -30000, V.INT16)
    w.add_key_value("test.u32", 4000000000, V.UINT32)
    w.add_key_value("test.i32", -2000000000, V.INT32)
    w.add_key_value("test.f32", 0.15625, V.FLOAT32)
    w.add_key_value("test.bool", True, V.BOOL)
    w.add_key_value("test.string", "Qwen3-VL \u00e9\u4e2d", V.STRING)
    w.add_key_value("test.u64", 2**63 + 5, V.UINT64)
    w.add_key_value("test.i64", -(2**62), V.INT64)
    w.add_key_value("test.f64", -1.0e300, V.FLOAT64)
    w.add_key_value("test.strings", ["a", "", "\u0120the", "x y"], V.ARRAY, sub_type=V.STRING)
    w.add_key_value("test.ints", [1, -2, 3], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("test.floats", [0.5, -2.25], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("test.nested", [["p", "q"], ["r"]], V.ARRAY, sub_type=V.ARRAY)
    w.add_key_value("test.rows", ROWS, V.UINT32)
    w.add_key_value("test.cols", COLS, V.UINT32)

    types = list(QUANTISED) + [Q.Q4_K, Q.Q6_K, Q.Q2_K, Q.Q3_K, Q.Q5_K, Q.IQ4_NL, Q.IQ4_XS]
    names = []
    for qtype in types:
        name = qtype.name.lower()
        if qtype in QUANTISED:
            data = rng.standard_normal((ROWS, COLS)).astype(np.float32)
            if qtype in (Q.F16, Q.BF16):  # also the extremes: subnormal, max, Inf, -0
                data[0, :6] = [6e-8, -3e-6, 65504.0, np.inf, -0.0, 1e38]
            with np.errstate(over="ignore"):  # 1e38 becomes f16 Inf on purpose
                raw = gguf.quants.quantize(data, qtype)
        else:
            raw = random_blocks(rng, qtype)
        expect = gguf.quants.dequantize(raw, qtype).astype(np.float32)
        assert expect.shape == (ROWS, COLS), (qtype, expect.shape)
        if qtype in (Q.F32, Q.F16, Q.BF16):
            w.add_tensor(name, raw, raw_dtype=qtype)
        else:
            w.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=qtype)
        w.add_tensor(name + ".expect", expect)
        names.append(name)
    w.add_key_value("test.types", names, V.ARRAY, sub_type=V.STRING)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if len(sys.argv) == 3:
        return subprocess.call([sys.argv[2], out])
    return 0


if __name__ == "__main__":
    sys.exit(main())
