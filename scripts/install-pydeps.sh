#!/usr/bin/env bash
# Puts the Python packages the tests use into .pydeps/ of this checkout, from PyPI (pip --target:
# no root, nothing installed into the system's python, so Debian's externally-managed-environment
# guard does not apply):
#   gguf, numpy, pyyaml   tests/gguf_dequant_make.py: gguf-py writes a GGUF file with every tensor
#                         type qvl reads and its own dequantisation of each, which qvl must match
#                         bit for bit (pyyaml: gguf-py imports it)
#   jsonschema (+ jsonschema-specifications, referencing, rpds-py, attrs: what it imports;
#              rfc3339-validator and six: its check of the time and date-time formats)
#                         tests/grammar_schema_test.py: strings generated from the grammars of
#                         JSON Schemas, and qvl run --json-schema outputs, must validate
#   jinja2 (+ markupsafe)  tests/chat_template_test.py: the model's chat_template.jinja, rendered
#                         as transformers renders it, must give qvl's prompt text byte for byte
#   openai (+ httpx2, httpcore2, h11, truststore, anyio, sniffio, idna, certifi, pydantic,
#          pydantic-core, typing-extensions, annotated-types, typing-inspection, jiter: what it
#          imports to send a request and parse the answer)
#                         tests/serve_openai_test.py: the official client's structured outputs
#                         (beta.chat.completions.parse with a Pydantic model) and tool calls
# The versions are pinned so every machine checks against the same gguf-py. The tests that need
# them add .pydeps/ to their path and skip (exit 77) when it is missing.
#
# Usage: scripts/install-pydeps.sh          (normally through ./scripts/install-deps.sh)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$here/.pydeps"
pkgs=(gguf==0.19.0 numpy==2.4.6 pyyaml==6.0.2 jsonschema==4.23.0 jsonschema-specifications==2024.10.1
      referencing==0.35.1 rpds-py==0.22.3 attrs==24.2.0 rfc3339-validator==0.1.4 six==1.16.0
      jinja2==3.1.4 markupsafe==3.0.2
      openai==3.63.0 httpx2==2.17.0 httpcore2==2.17.0 h11==0.16.0 truststore==0.10.5
      anyio==4.16.0 sniffio==1.3.1 idna==3.21 certifi==2026.5.20 pydantic==2.13.4
      pydantic-core==2.46.4 typing-extensions==4.16.0 annotated-types==0.7.0
      typing-inspection==0.4.2 jiter==0.19.0)

die() { echo "install-pydeps: $*" >&2; exit 1; }
command -v python3 >/dev/null || die "python3 is missing (Debian: apt-get install python3)"
python3 -m pip --version >/dev/null 2>&1 || die "pip is missing (Debian: apt-get install python3-pip)"

stamp="$dir/.installed"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${pkgs[*]}" ]; then
    exit 0
fi
rm -rf "$dir"
# --no-deps: gguf-py's other requirements (requests, tqdm) are not imported by what the tests use;
# jsonschema's are all listed above.
python3 -m pip install -q --no-deps --only-binary=:all: --disable-pip-version-check \
    --target "$dir" "${pkgs[@]}" || die "could not install ${pkgs[*]} from PyPI"
echo "${pkgs[*]}" > "$stamp"
