#!/usr/bin/env python3
"""Checks that a cuda_sm61 plugin holds Pascal code, without cuobjdump (Python 3 standard library).

1. Reads the ELF shared library, finds its fat binary sections (.nv_fatbin, __nv_relfatbin) and
   lists every embedded entry (SASS or PTX, architecture, size). Each SASS entry's own ELF
   header must name the architecture its fat binary entry claims, and each uncompressed PTX its
   .target. Fails unless every fat binary in the library (one per kernel file) holds both sm_61
   SASS and compute_61 PTX; with --pascal-only, also if anything else is there (a build whose
   kernels the GPU can only run by JIT-compiling the compute_61 PTX).
2. With --ptxas-dir (the build's sm61/ folder of <file>.ptxas.txt, written by pascal_fatbin.py):
   a table of each kernel's registers, static shared memory, stack frame and spills on sm_61,
   written to <ptxas-dir>/ptxas-report.txt and printed. Fails when a hot kernel (HOT_FILES
   below) spills, or any kernel's static shared memory exceeds 48 KiB per block (the most a
   Pascal block can have statically). --known-spills FILE lists hot kernels that spilled when the
   check was introduced (file, mangled name, spill store and load bytes): those pass while they
   spill no more than listed, and an entry that no longer spills, or names no kernel, fails
   until it is deleted, so the list only shrinks.

usage: check_pascal_binary.py LIB.so [--pascal-only] [--ptxas-dir DIR [--known-spills FILE]]
Exit status 0 when every check passes, 1 otherwise (each failure one line), 2 on bad input.
"""
import argparse
import glob
import os
import re
import shutil
import struct
import subprocess
import sys

# Fat binary layout (little-endian), as nvcc, nvFatbin and clang's embedding write it: a section
# holds one or more containers, 8-byte aligned; a container is a 16-byte header (u32 magic
# 0xBA55ED50, u16 version, u16 header size, u64 size of the entries that follow) and entries,
# each a header (u16 kind: 1 PTX, 2 ELF cubin; u16 version; u32 header size; u64 payload size
# including padding; u32 architecture at byte 28, e.g. 61; u64 flags at byte 40) followed by the
# payload. The header layout is NVIDIA's and undocumented: that is why every entry is also
# checked against its own payload (a cubin's ELF header, a PTX's .target line).
FATBIN_MAGIC = 0xBA55ED50
KIND_PTX, KIND_SASS = 1, 2
# Entry flags: payload compressed with LZ4 (older toolkits) or zstd (CUDA 12.8 and later).
FLAG_COMPRESSED = 0x2000 | 0x8000
EM_CUDA = 190
SMEM_LIMIT = 48 * 1024
# The kernels prefill, decode and vision spend their time in: the GEMMs (cu_gemm.cu, the
# generic one in cu_matmul.cu, the int8 one in cu_matmul_int8.cu), the decode GEMVs
# (cu_matmul.cu, cu_matmul_int8.cu, cu_gemv_fused.cu, cu_gemv_fused_k.cu, cu_gemv_rows_regs.cu,
# cu_gemv_rows_regs_k.cu)
# and attention (cu_attention.cu, cu_attention_flash.cu, cu_attention_flash64.cu,
# cu_attention_decode.cu).
# A spill there is local-memory traffic in an inner loop; elsewhere the report shows it but
# does not fail.
HOT_FILES = ("cu_gemm", "cu_matmul", "cu_matmul_int8", "cu_gemv_fused", "cu_gemv_fused_k",
             "cu_gemv_rows_regs", "cu_gemv_rows_regs_k", "cu_attention", "cu_attention_flash",
             "cu_attention_flash64", "cu_attention_decode")
TARGET = "61"


class BadInput(Exception):
    pass


def elf_sections(data):
    """(name, offset, size) of each section of a little-endian ELF64 file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise BadInput("not a little-endian 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shentsize < 64 or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
        raise BadInput("bad ELF section header table")
    heads = []
    for i in range(shnum):
        name, stype, _f, _a, off, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        heads.append((name, stype, off, size))
    stroff, strsize = heads[shstrndx][2], heads[shstrndx][3]
    out = []
    for name, stype, off, size in heads:
        end = data.find(b"\0", stroff + name, stroff + strsize)
        sname = data[stroff + name:end].decode("ascii", "replace")
        if stype != 8 and off + size > len(data):  # 8 = SHT_NOBITS
            raise BadInput("section %s runs past the end of the file" % sname)
        out.append((sname, off, size, stype))
    return out


def cubin_arch(blob):
    """The SM a cubin's ELF header names, or None when it is not a CUDA ELF we can read."""
    if len(blob) < 64 or blob[:4] != b"\x7fELF":
        return None
    machine, = struct.unpack_from("<H", blob, 18)
    if machine != EM_CUDA:
        return None
    flags, = struct.unpack_from("<I", blob, 48 if blob[4] == 2 else 36)
    abiver = blob[8]
    # ABI version 7 and older keep the SM in the low byte of e_flags; newer ones one byte up.
    return flags & 0xFF if abiver <= 7 else (flags >> 8) & 0xFF


def fatbin_entries(data, sec_off, sec_size, path):
    """Yields (container index, kind, arch, size, compressed, payload or None) for a section."""
    pos, end, index = sec_off, sec_off + sec_size, 0
    while pos + 16 <= end:
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", data, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; padding between them is skipped
            continue
        epos, eend = pos + hsize, pos + hsize + fsize
        if eend > end:
            raise BadInput("%s: the fat binary at file offset %d runs past its section" % (path, pos))
        while epos + 64 <= eend:
            kind, _ev, ehsize, padded = struct.unpack_from("<HHIQ", data, epos)
            arch, = struct.unpack_from("<I", data, epos + 28)
            flags, = struct.unpack_from("<Q", data, epos + 40)
            if ehsize < 64 or epos + ehsize + padded > eend:
                raise BadInput("%s: bad fat binary entry at file offset %d" % (path, epos))
            compressed = bool(flags & FLAG_COMPRESSED)
            payload = None if compressed else data[epos + ehsize:epos + ehsize + padded]
            yield index, kind, arch, padded, compressed, payload
            epos += ehsize + padded
        index += 1
        pos = (eend + 7) & ~7


def check_library(path, pascal_only, problems):
    try:
        with open(path, "rb") as f:
            data = f.read()
        sections = [s for s in elf_sections(data) if s[0] in (".nv_fatbin", "__nv_relfatbin")]
    except OSError as e:
        raise BadInput("cannot read %s: %s" % (path, e.strerror))
    except BadInput as e:
        raise BadInput("%s: %s" % (path, e))
    if not sections:
        problems.append("%s has no .nv_fatbin or __nv_relfatbin section: no GPU code at all" % path)
        return
    containers = {}
    print("fat binary entries in %s:" % path)
    print("  %-15s %-4s %-6s %-11s %10s  %s" % ("section", "#", "kind", "arch", "bytes", "checked"))
    for sname, off, size, _t in sections:
        if _t == 8:  # SHT_NOBITS: no bytes in the file
            raise BadInput("%s: section %s has no contents in the file" % (path, sname))
        for idx, kind, arch, nbytes, compressed, payload in fatbin_entries(data, off, size, path):
            key = (sname, idx)
            containers.setdefault(key, set())
            if kind == KIND_SASS:
                label, what = "SASS", "sm_%d" % arch
                if payload is None:
                    note = "compressed, not read"
                else:
                    own = cubin_arch(payload)
                    note = "ELF header: sm_%s" % own
                    if own != arch:
                        problems.append("%s #%d: SASS entry says sm_%d but its ELF header says sm_%s"
                                        % (sname, idx, arch, own))
            elif kind == KIND_PTX:
                label, what = "PTX", "compute_%d" % arch
                if payload is None:
                    note = "compressed, not read"
                else:
                    m = re.search(rb"^\s*\.target\s+sm_(\d+)", payload, re.M)
                    note = ".target sm_%s" % (m.group(1).decode() if m else "?")
                    if not m or int(m.group(1)) != arch:
                        problems.append("%s #%d: PTX entry says compute_%d but %s"
                                        % (sname, idx, arch, note))
            else:
                label, what, note = "kind%d" % kind, "arch %d" % arch, ""
            containers[key].add((label, arch))
            print("  %-15s %-4d %-6s %-11s %10d  %s" % (sname, idx, label, what, nbytes, note))
    want = {("SASS", int(TARGET)), ("PTX", int(TARGET))}
    for (sname, idx), have in sorted(containers.items()):
        for label, arch in sorted(want - have):
            problems.append("%s #%d has no %s for %s" % (sname, idx, label,
                            ("sm_" if label == "SASS" else "compute_") + TARGET))
        if pascal_only:
            for label, arch in sorted(have - want):
                problems.append("%s #%d holds %s for arch %d besides the Pascal code (--pascal-only)"
                                % (sname, idx, label, arch))
    print("  %d fat binaries; each must hold sm_%s SASS and compute_%s PTX"
          % (len(containers), TARGET, TARGET))


def demangle(names):
    tool = shutil.which("c++filt")
    if not tool or not names:
        return names
    out = subprocess.run([tool], input="\n".join(names), stdout=subprocess.PIPE, text=True)
    lines = out.stdout.splitlines()
    return lines if out.returncode == 0 and len(lines) == len(names) else names


def parse_ptxas(text, fname):
    """One dict per function in a ptxas -v report: entry functions (kernels) and the device
    functions ptxas reports on their own (called, not inlined), whose spills count as well."""
    funcs, by_name, props = [], {}, None

    def get(name, entry):
        if name not in by_name:
            by_name[name] = {"file": fname, "name": name, "entry": entry, "sm": TARGET, "regs": 0,
                             "smem": 0, "stack": 0, "spill_st": 0, "spill_ld": 0}
            funcs.append(by_name[name])
        return by_name[name]

    for line in text.splitlines():
        m = re.search(r"Compiling entry function '([^']+)' for 'sm_(\d+)'", line)
        if m:
            get(m.group(1), True)["sm"] = m.group(2)
            props = None
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            props = get(m.group(1), m.group(1) in by_name and by_name[m.group(1)]["entry"])
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and props is not None:
            props["stack"], props["spill_st"], props["spill_ld"] = map(int, m.groups())
            continue
        m = re.search(r"Used (\d+) registers", line)
        if m and props is not None and props["entry"]:
            props["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            props["smem"] = int(s.group(1)) if s else 0
    return funcs


def read_known(path):
    known = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            if len(line) != 4 or not line[2].isdigit() or not line[3].isdigit():
                raise BadInput("%s:%d: expected FILE MANGLED_NAME SPILL_STORES SPILL_LOADS" % (path, n))
            known[(line[0], line[1])] = (int(line[2]), int(line[3]))
    return known


def check_ptxas(folder, problems, known):
    logs = sorted(glob.glob(os.path.join(folder, "*.ptxas.txt")))
    if not logs:
        problems.append("no *.ptxas.txt in %s (is it the Pascal build's sm61/ folder?)" % folder)
        return
    kernels = []
    for log in logs:
        with open(log) as f:
            kernels += parse_ptxas(f.read(), os.path.basename(log)[:-len(".ptxas.txt")])
    for k, pretty in zip(kernels, demangle([k["name"] for k in kernels])):
        k["pretty"] = pretty
        k["hot"] = k["file"] in HOT_FILES
    rows = ["%-19s %-48s %4s %6s %6s %6s %6s  %s" % ("file", "kernel (sm_61)", "regs", "smem",
            "stack", "spillS", "spillL", "")]
    for k in kernels:
        verdict = []
        if k["sm"] != TARGET:
            problems.append("%s: %s compiled for sm_%s" % (k["file"], k["pretty"], k["sm"]))
        if k["smem"] > SMEM_LIMIT:
            verdict.append("SMEM>48K")
            problems.append("%s: %s uses %d bytes of static shared memory (> 48 KiB per block)"
                            % (k["file"], k["pretty"], k["smem"]))
        limit = known.pop((k["file"], k["name"]), None)
        if limit is not None and not (k["spill_st"] or k["spill_ld"]):
            problems.append("%s: %s no longer spills: delete it from the known-spills list"
                            % (k["file"], k["pretty"]))
        if k["spill_st"] or k["spill_ld"]:
            if k["hot"] and limit is not None and k["spill_st"] <= limit[0] and k["spill_ld"] <= limit[1]:
                verdict.append("HOT SPILL (known, <= %d/%d)" % limit)
            elif k["hot"]:
                verdict.append("HOT SPILL")
                problems.append("%s: hot kernel code %s spills (%d bytes stored, %d loaded) on sm_61"
                                % (k["file"], k["pretty"], k["spill_st"], k["spill_ld"]))
            else:
                verdict.append("spill (not hot)")
        name = ("" if k["entry"] else "(func) ") + k["pretty"]
        name = name if len(name) <= 48 else name[:45] + "..."
        rows.append("%-19s %-48s %4d %6d %6d %6d %6d  %s" % (k["file"] + ("*" if k["hot"] else ""),
                    name, k["regs"], k["smem"], k["stack"], k["spill_st"], k["spill_ld"],
                    " ".join(verdict)))
    for (fname, name), _ in sorted(known.items()):
        problems.append("known-spills entry %s %s names no function of the build" % (fname, name))
    rows.append("* hot kernel files (a spill fails the check): %s; smem = static shared memory "
                "per block in bytes (limit %d)" % (", ".join(HOT_FILES), SMEM_LIMIT))
    report = "\n".join(rows) + "\n"
    with open(os.path.join(folder, "ptxas-report.txt"), "w") as f:
        f.write(report)
    print("ptxas -v on sm_61 (%d kernels from %d files; also in %s):"
          % (sum(k["entry"] for k in kernels), len(logs), os.path.join(folder, "ptxas-report.txt")))
    sys.stdout.write(report)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("library")
    ap.add_argument("--pascal-only", action="store_true",
                    help="fail if the library holds code for any other architecture")
    ap.add_argument("--ptxas-dir", help="folder of <file>.ptxas.txt reports (build's sm61/)")
    ap.add_argument("--known-spills", help="hot kernels allowed to spill up to the bytes listed")
    a = ap.parse_args()
    problems = []
    try:
        known = read_known(a.known_spills) if a.known_spills else {}
        check_library(a.library, a.pascal_only, problems)
        if a.ptxas_dir:
            check_ptxas(a.ptxas_dir, problems, known)
    except BadInput as e:
        sys.stderr.write("check_pascal_binary: %s\n" % e)
        return 2
    except OSError as e:
        sys.stderr.write("check_pascal_binary: %s: %s\n" % (e.filename, e.strerror))
        return 2
    except struct.error:
        sys.stderr.write("check_pascal_binary: %s: truncated ELF file or fat binary\n" % a.library)
        return 2
    for p in problems:
        print("FAIL: " + p)
    print("check_pascal_binary: %s" % ("PASS" if not problems else "%d problem(s)" % len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
