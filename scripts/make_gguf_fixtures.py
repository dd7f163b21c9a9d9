#!/usr/bin/env python3
"""Makes the GGUF test fixtures with llama.cpp's own converter (convert_hf_to_gguf.py).

For each fixture model (tests/fixtures/tiny-tied, tests/fixtures/tiny-untied) it writes into
tests/fixtures/gguf/: the text model as F32, F16, BF16 and Q8_0 (NAME-TYPE.gguf) and the vision
tower as an F16 mmproj (mmproj-NAME-f16.gguf). The commands it ran and the llama.cpp commit go to
tests/fixtures/gguf/MADE_WITH.txt.

The fixture tokenizers are made for the fixtures, so the converter's pre-tokenizer detection (a
hash of the ids of a test text) does not know them. They use Qwen2's pre-tokenizer (see
scripts/make_fixture_tokenizer.py), so the detection is replaced, in this process only, by one
that answers "qwen2"; the converter's files are used unchanged. The fixtures' config.json (written
by transformers for a model made in memory) has no "architectures" list, which the converter
needs to pick its model class: it converts a staging copy of the directory whose config.json
adds "architectures": ["Qwen3VLForConditionalGeneration"], as the published Qwen3-VL configs
have; every other file is the fixture's own.

Usage:
  scripts/make_gguf_fixtures.py LLAMA_CPP_SRC [LLAMA_CPP_COMMIT]
LLAMA_CPP_SRC holds convert_hf_to_gguf.py, conversion/ and gguf-py/ of one llama.cpp commit
(e.g. `git -C llama.cpp archive HEAD gguf-py convert_hf_to_gguf.py conversion | tar -x -C SRC`);
the python running this needs torch (CPU wheel), numpy, safetensors, transformers, sentencepiece.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["tiny-tied", "tiny-untied"]
TEXT_TYPES = ["f32", "f16", "bf16", "q8_0"]


def convert_in_child(src: Path, args: list[str]) -> None:
    """Runs the converter's main() with the detection replaced, in a child python."""
    code = (
        "import sys\n"
        f"sys.path.insert(0, {str(src)!r})\n"
        f"sys.path.insert(1, {str(src / 'gguf-py')!r})\n"
        "import conversion.base as base\n"
        "base.TextModel.get_vocab_base_pre = lambda self, tokenizer: 'qwen2'\n"
        "import convert_hf_to_gguf as conv\n"
        f"sys.argv = ['convert_hf_to_gguf.py'] + {args!r}\n"
        "conv.main()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def stage(src: Path, dst: Path) -> Path:
    """dst: links to src's files, and config.json with the architectures list added."""
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name != "config.json":
            (dst / f.name).symlink_to(f.resolve())
    cfg = json.loads((src / "config.json").read_text())
    cfg.setdefault("architectures", ["Qwen3VLForConditionalGeneration"])
    (dst / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return dst


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    src = Path(sys.argv[1]).resolve()
    commit = sys.argv[2] if len(sys.argv) == 3 else "unknown"
    out = ROOT / "tests" / "fixtures" / "gguf"
    out.mkdir(parents=True, exist_ok=True)
    log = [f"llama.cpp commit: {commit}",
           "converter: convert_hf_to_gguf.py with TextModel.get_vocab_base_pre -> 'qwen2'",
           f"python: {sys.version.split()[0]}"]
    for mod in ["torch", "numpy", "transformers"]:
        try:
            log.append(f"{mod}: {__import__(mod).__version__}")
        except ImportError:
            pass
    stage_root = Path(tempfile.mkdtemp(prefix="qvl-gguf-"))
    for name in MODELS:
        model = stage(ROOT / "tests" / "fixtures" / name, stage_root / name)
        jobs = [[str(model), "--outtype", t, "--outfile", str(out / f"{name}-{t}.gguf")]
                for t in TEXT_TYPES]
        jobs.append([str(model), "--mmproj", "--outtype", "f16",
                     "--outfile", str(out / f"mmproj-{name}-f16.gguf")])
        for args in jobs:
            rel = [os.path.relpath(a, ROOT) if a.startswith(str(ROOT)) else a for a in args]
            rel = [f"tests/fixtures/{name}" if a == str(model) else a for a in rel]
            log.append("convert_hf_to_gguf.py " + " ".join(rel))
            convert_in_child(src, args)
    shutil.rmtree(stage_root)
    (out / "MADE_WITH.txt").write_text("\n".join(log) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
