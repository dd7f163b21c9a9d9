#!/usr/bin/env bash
# Installs the Debian packages qvl needs to build and test. Run as root (or with sudo).
# Then the Python packages the tests use, from PyPI into .pydeps/ (scripts/install-pydeps.sh).
# --pascal: also what the Pascal build (cmake -DQVL_PASCAL_BUILD=ON) needs: CUDA 12.9's ptxas,
# runtime and nvFatbin from PyPI into .pascal/ (scripts/install-pascal-sdk.sh).
set -euo pipefail
pascal=0
[ "${1:-}" = "--pascal" ] && pascal=1
# libjpeg62-turbo-dev, libpng-dev, libgif-dev, libwebp-dev: the picture decoders (the libraries
# Pillow uses, so pictures decode to Hugging Face's pixels).
# libavformat-dev, libavcodec-dev, libswscale-dev (libavutil-dev with them): video files for
# qvl run --video (FFmpeg's libraries; optional: without them qvl builds and says how to get them).
# libedit-dev: line editing and history in qvl chat.
# nginx: the load balancer in front of qvl serve replicas (scripts/serve-replicas.sh and its
# test); only its binary is used, run unprivileged, never the system service.
# python3, python3-pip: the test scripts, and pip for scripts/install-pydeps.sh (gguf-py and numpy
# into .pydeps/ for the GGUF dequantisation test).
# chromium: the headless browser that tests/serve_webui_browser_test.py drives over the DevTools
# Protocol to check qvl serve's chat page (GET /) as a person uses it; nothing else needs it.
# clang: compiles the cuda_sm61 kernels for sm_61 as a build check when a CUDA toolkit is
# present (Debian 12's clang is clang-14), and builds the libFuzzer targets (-DQVL_FUZZ=ON).
pkgs=(build-essential cmake pkg-config libyaml-dev libcmocka-dev libcjson-dev libpcre2-dev libmicrohttpd-dev
      libutf8proc-dev libjpeg62-turbo-dev libpng-dev libgif-dev libwebp-dev libedit-dev graphviz clang nginx
      python3 python3-pip libavformat-dev libavcodec-dev libavutil-dev libswscale-dev chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# Python packages from PyPI, into .pydeps/ of this checkout (not the system's python).
"$(dirname "$0")/install-pydeps.sh"
if [ $pascal -eq 1 ]; then
  "$(dirname "$0")/install-pascal-sdk.sh"
fi
