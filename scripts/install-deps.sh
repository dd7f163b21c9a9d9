#!/usr/bin/env bash
# Installs the Debian packages qvl needs to build and test. Run as root (or with sudo).
set -euo pipefail
# clang: compiles the cuda_sm61 kernels for sm_61 as a build check when a CUDA toolkit is
# present (Debian 12's clang is clang-14), and builds the libFuzzer targets (-DQVL_FUZZ=ON).
pkgs=(build-essential cmake pkg-config libyaml-dev libcmocka-dev libcjson-dev libpcre2-dev libmicrohttpd-dev
      libutf8proc-dev libstb-dev graphviz clang)
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
