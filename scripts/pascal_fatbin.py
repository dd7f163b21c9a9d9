#!/usr/bin/env python3
"""One step of the Pascal build (backends/cuda_sm61/pascal.cmake), per kernel file: assemble the
compute_61 PTX that clang wrote into sm_61 machine code with CUDA 12.9's ptxas (keeping its -v
report: registers, shared memory, spills per kernel), then pack cubin and PTX into one fat binary
with NVIDIA's nvFatbin library, for clang's host compile to embed (-fcuda-include-gpubinary).

The PTX goes in uncompressed: a driver of any age can read it, and check_pascal_binary.py can
read its .target line.

usage: pascal_fatbin.py --sdk DIR --ptx F.ptx --cubin F.cubin --log F.ptxas.txt --out F.fatbin
"""
import argparse
import ctypes
import os
import subprocess
import sys

ARCH = "61"


def fail(msg):
    sys.stderr.write("pascal_fatbin: %s\n" % msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    for name in ("--sdk", "--ptx", "--cubin", "--log", "--out"):
        ap.add_argument(name, required=True)
    a = ap.parse_args()

    ptxas = os.path.join(a.sdk, "bin", "ptxas")
    # -O3 is ptxas's default; -v reports each kernel's registers, shared memory and spills.
    run = subprocess.run([ptxas, "-arch=sm_" + ARCH, "-O3", "-v", a.ptx, "-o", a.cubin],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(a.log, "w") as f:
        f.write(run.stdout)
    if run.returncode != 0:
        sys.stderr.write(run.stdout)
        fail("ptxas failed on %s" % a.ptx)

    libpath = os.path.join(a.sdk, "lib64", "libnvfatbin.so.12")
    try:
        lib = ctypes.CDLL(libpath)
    except OSError as e:
        fail("cannot load %s (%s)" % (libpath, e))
    vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    lib.nvFatbinGetErrorString.restype = cp
    lib.nvFatbinGetErrorString.argtypes = [ctypes.c_int]
    lib.nvFatbinCreate.argtypes = [ctypes.POINTER(vp), ctypes.POINTER(cp), sz]
    lib.nvFatbinAddCubin.argtypes = [vp, cp, sz, cp, cp]
    lib.nvFatbinAddPTX.argtypes = [vp, cp, sz, cp, cp, cp]
    lib.nvFatbinSize.argtypes = [vp, ctypes.POINTER(sz)]
    lib.nvFatbinGet.argtypes = [vp, vp]
    lib.nvFatbinDestroy.argtypes = [ctypes.POINTER(vp)]

    def check(rc, what):
        if rc != 0:
            fail("%s: %s" % (what, lib.nvFatbinGetErrorString(rc).decode()))

    with open(a.cubin, "rb") as f:
        cubin = f.read()
    with open(a.ptx, "rb") as f:
        ptx = f.read() + b"\0"  # nvFatbinAddPTX takes a NUL-terminated string
    ident = os.path.splitext(os.path.basename(a.ptx))[0].encode()

    handle = ctypes.c_void_p()
    opts = (ctypes.c_char_p * 2)(b"-64", b"-compress=false")
    check(lib.nvFatbinCreate(ctypes.byref(handle), opts, 2), "nvFatbinCreate")
    try:
        check(lib.nvFatbinAddCubin(handle, cubin, len(cubin), ARCH.encode(), ident),
              "nvFatbinAddCubin (sm_%s)" % ARCH)
        check(lib.nvFatbinAddPTX(handle, ptx, len(ptx), ARCH.encode(), ident, b""),
              "nvFatbinAddPTX (compute_%s)" % ARCH)
        size = ctypes.c_size_t()
        check(lib.nvFatbinSize(handle, ctypes.byref(size)), "nvFatbinSize")
        buf = ctypes.create_string_buffer(size.value)
        check(lib.nvFatbinGet(handle, buf), "nvFatbinGet")
    finally:
        lib.nvFatbinDestroy(ctypes.byref(handle))
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(buf.raw)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
