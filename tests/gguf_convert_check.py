#!/usr/bin/env python3
"""GGUF tensor types qvl converts at load, through `qvl run` (the ctest gguf_convert).

Usage: python3 tests/gguf_convert_check.py QVL_BINARY SOURCE_DIR WORK_DIR

From the converter's F32 fixture (tests/fixtures/gguf/tiny-tied-f32.gguf) it writes, with
gguf-py's own quantisers, conv.gguf, in which four matrices are Q4_0, Q5_0, Q4_1 and Q5_1, and
deq.gguf, the same file with those four as gguf-py's dequantisation of them in F32. Then:
  - qvl loads conv.gguf with exactly one warning line per converted tensor, naming it, its type,
    the dtype it became and the RMS error added: Q4_0 and Q5_0 become q8_0 exactly (error 0),
    Q4_1 and Q5_1 (rows of 64 values: no q4_k) become q8_0 with an error above 0;
  - on the reference backend the prompt logits of conv.gguf with only the exact conversions
    (Q4_0, Q5_0: conv_exact.gguf) equal those of deq.gguf bit for bit (the reference multiplies
    q8_0 weights as their f32 values), and greedy tokens agree.
Needs gguf-py and numpy (.pydeps/ of the checkout, scripts/install-deps.sh); without them it
prints why and exits 77, which ctest counts as skipped.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), ".pydeps"))

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q
except ImportError as e:
    print(f"skipped: gguf-py and numpy are needed ({e}); run scripts/install-deps.sh")
    sys.exit(77)

CONVERTED = {"blk.0.ffn_gate.weight": Q.Q4_0, "blk.1.attn_q.weight": Q.Q5_0,
             "blk.0.ffn_up.weight": Q.Q4_1, "blk.1.attn_v.weight": Q.Q5_1}
EXACT = ("blk.0.ffn_gate.weight", "blk.1.attn_q.weight")
PROMPT = "403,17,250,88,1,7,300"


def copy_with(src, dst, quantise, dequantise_too):
    """dst: src's metadata and tensors; tensors named in quantise in that type (or, with
    dequantise_too, as gguf-py's dequantisation of that in F32)."""
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub_type=sub)
    for t in r.tensors:
        data = np.array(t.data)
        if t.name in quantise:
            q = gguf.quants.quantize(data.astype(np.float32), quantise[t.name])
            if dequantise_too:
                w.add_tensor(t.name, gguf.quants.dequantize(q, quantise[t.name]).astype(np.float32))
            else:
                w.add_tensor(t.name, q, raw_dtype=quantise[t.name])
        else:
            w.add_tensor(t.name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run(qvl, model, logits):
    p = subprocess.run([qvl, "run", "-m", model, "--backend", "reference", "--ids", PROMPT,
                        "-n", "6", "--temp", "0", "--print-ids", "--dump-logits", logits],
                       capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL qvl run -m {model}: {p.stderr.strip()}")
    return p.stdout.strip(), [l for l in p.stderr.splitlines() if l.strip()]


def main():
    qvl, src, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    f32 = os.path.join(src, "tests", "fixtures", "gguf", "tiny-tied-f32.gguf")
    conv, exact, deq = (os.path.join(work, n) for n in ("conv.gguf", "conv_exact.gguf",
                                                        "deq.gguf"))
    copy_with(f32, conv, CONVERTED, False)
    copy_with(f32, exact, {k: CONVERTED[k] for k in EXACT}, False)
    copy_with(f32, deq, {k: CONVERTED[k] for k in EXACT}, True)
    failures = 0

    _, err = run(qvl, conv, os.path.join(work, "conv.logits"))
    for name, qtype in CONVERTED.items():
        lines = [l for l in err if f"tensor '{name}'" in l]
        want = f"is {qtype.name}, converted at load to q8_0"
        ok = len(lines) == 1 and want in lines[0]
        if ok:
            rms = float(lines[0].split("adds RMS error ")[1].split()[0])
            ok = (rms == 0) if name in EXACT else (rms > 0)
        print(("ok  " if ok else "FAIL") + f" {name} ({qtype.name}): {lines}")
        failures += not ok
    if len(err) != len(CONVERTED):
        print(f"FAIL {len(err)} stderr lines, expected one per converted tensor: {err}")
        failures += 1

    ids_a, _ = run(qvl, exact, os.path.join(work, "exact.logits"))
    ids_b, _ = run(qvl, deq, os.path.join(work, "deq.logits"))
    la = np.fromfile(os.path.join(work, "exact.logits"), dtype=np.float32)
    lb = np.fromfile(os.path.join(work, "deq.logits"), dtype=np.float32)
    same = la.size > 0 and la.size == lb.size and np.array_equal(la, lb)
    print(("ok  " if same else "FAIL") + " Q4_0/Q5_0 -> q8_0 logits = gguf-py's dequantisation "
          f"({la.size} values, max difference {np.max(np.abs(la - lb)) if la.size == lb.size else 'n/a'})")
    failures += not same
    print(("ok  " if ids_a == ids_b else "FAIL") + f" greedy tokens {ids_a} / {ids_b}")
    failures += ids_a != ids_b
    print(f"{len(CONVERTED) + 3 - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
