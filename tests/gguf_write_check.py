#!/usr/bin/env python3
"""Checks a GGUF file qvl wrote against one llama.cpp's converter wrote, with gguf-py as the
independent reader (the cli_quantize_gguf test).

Usage: python3 tests/gguf_write_check.py MODE OURS THEIRS [options]
  MODE exact:     the same keys in the same order with the same value types and values (but
                  --skip KEY), the same tensors (names, shapes, types) and the same tensor bytes.
  MODE structure: the same keys in the same order with the same value types, the same values
                  but for general.file_type and --skip KEY, the same tensor names and shapes;
                  tensor types may differ (they depend on the quantisation).
  MODE options:   only the options below are checked (THEIRS is not read: give -).
Options:
  --skip KEY          a key whose value is not compared (repeatable)
  --type NAME=TYPE    tensor NAME of OURS has ggml type TYPE (e.g. Q6_K) (repeatable)
  --key KEY=VALUE     key KEY of OURS has the string value VALUE (repeatable)
  --key-file KEY=PATH key KEY of OURS holds exactly the contents of PATH (repeatable)
Needs gguf-py and numpy (.pydeps/ of the checkout); without them it exits 77 (skipped).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), ".pydeps"))

try:
    import numpy as np
    import gguf
except ImportError as e:
    print(f"skipped: gguf-py and numpy are needed ({e}); run scripts/install-deps.sh")
    sys.exit(77)


def load(path):
    r = gguf.GGUFReader(path)
    keys = [k for k in r.fields if not k.startswith("GGUF.")]
    fields = {k: r.fields[k] for k in keys}
    tensors = {t.name: t for t in r.tensors}
    return r, keys, fields, tensors


def main():
    mode, ours, theirs = sys.argv[1:4]
    skip, types, keyvals, keyfiles = set(), {}, {}, {}
    args = sys.argv[4:]
    for flag, val in zip(args[::2], args[1::2]):
        if flag == "--skip":
            skip.add(val)
        elif flag == "--type":
            n, t = val.split("=", 1)
            types[n] = t
        elif flag == "--key":
            k, v = val.split("=", 1)
            keyvals[k] = v
        elif flag == "--key-file":
            k, p = val.split("=", 1)
            keyfiles[k] = p
        else:
            raise SystemExit(f"unknown option {flag}")
    if mode == "structure":
        skip.add("general.file_type")
    _, ka, fa, ta = load(ours)
    _, kb, fb, tb = load(theirs) if mode != "options" else (None, ka, fa, ta)
    errors = []
    if ka != kb:
        errors.append(f"keys differ: only ours {sorted(set(ka) - set(kb))}, only theirs "
                      f"{sorted(set(kb) - set(ka))}, or the order differs")
    for k in ka:
        if k not in fb:
            continue
        if list(fa[k].types) != list(fb[k].types):
            errors.append(f"key {k}: types {fa[k].types} vs {fb[k].types}")
        elif k not in skip and fa[k].contents() != fb[k].contents():
            errors.append(f"key {k}: {str(fa[k].contents())[:80]} vs {str(fb[k].contents())[:80]}")
    if list(ta) != list(tb) and set(ta) != set(tb):
        errors.append(f"tensors differ: only ours {sorted(set(ta) - set(tb))}, only theirs "
                      f"{sorted(set(tb) - set(ta))}")
    for n, t in ta.items():
        if n not in tb:
            continue
        u = tb[n]
        if list(t.shape) != list(u.shape):
            errors.append(f"tensor {n}: shape {list(t.shape)} vs {list(u.shape)}")
        elif mode == "exact" and t.tensor_type != u.tensor_type:
            errors.append(f"tensor {n}: type {t.tensor_type.name} vs {u.tensor_type.name}")
        elif mode == "exact" and np.array(t.data).tobytes() != np.array(u.data).tobytes():
            errors.append(f"tensor {n}: data differ")
    for n, want in types.items():
        got = ta[n].tensor_type.name if n in ta else "missing"
        if got != want:
            errors.append(f"tensor {n}: type {got}, want {want}")
    for k, want in keyvals.items():
        got = fa[k].contents() if k in fa else None
        if str(got) != want:
            errors.append(f"key {k}: {got!r}, want {want!r}")
    for k, p in keyfiles.items():
        with open(p, encoding="utf-8") as f:
            want = f.read()
        got = fa[k].contents() if k in fa else None
        if got != want:
            errors.append(f"key {k}: not the contents of {p}")
    for e in errors:
        print(e)
    print(f"{ours} vs {theirs} ({mode}): {len(ka)} keys, {len(ta)} tensors, {len(errors)} differences")
    sys.exit(1 if errors else 0)


main()
