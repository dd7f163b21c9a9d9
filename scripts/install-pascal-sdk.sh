#!/usr/bin/env bash
# Puts the CUDA 12.9 pieces the Pascal build (-DQVL_PASCAL_BUILD=ON) needs into .pascal/ of this
# checkout, from NVIDIA's PyPI wheels (pip, no root):
#   nvidia-cuda-nvcc-cu12     ptxas (the last release line that still assembles sm_61), libdevice,
#                             the crt/ headers (it ships no nvcc)
#   nvidia-cuda-runtime-cu12  the runtime headers and libcudart_static.a (linked in, so the plugin
#                             needs only the driver at run time, not a CUDA 12 runtime)
#   nvidia-nvfatbin-cu12      libnvfatbin, which packs the sm_61 cubin and compute_61 PTX into
#                             the fat binary (CUDA 13's fatbinary would need its own options)
# and lays them out as the CUDA installation clang expects (--cuda-path: bin/ptxas, include/,
# nvvm/libdevice/, lib64/) in .pascal/cuda, made of links into .pascal/site.
#
# Usage: scripts/install-pascal-sdk.sh          (normally through ./scripts/install-deps.sh --pascal)
# Without network, wheels already in .pascal/wheels are used (bash scripts/device-deps.sh
# fetch-pascal puts them there for carrying to a machine with no network).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$here/.pascal"
wheels=(nvidia-cuda-nvcc-cu12==12.9.86 nvidia-cuda-runtime-cu12==12.9.79 nvidia-nvfatbin-cu12==12.9.82)

die() { echo "install-pascal-sdk: $*" >&2; exit 1; }
command -v python3 >/dev/null || die "python3 is missing (./scripts/install-deps.sh --pascal installs it)"
python3 -m pip --version >/dev/null 2>&1 || die "pip is missing (Debian: apt-get install python3-pip)"

mkdir -p "$dir/wheels"
have_all=1
for w in "${wheels[@]}"; do
    name="${w%%==*}" ver="${w##*==}"
    ls "$dir/wheels/${name//-/_}-$ver-"*.whl >/dev/null 2>&1 || have_all=0
done
if [ $have_all -eq 0 ]; then
    # --no-deps: each wheel is self-contained; the list is pinned so every machine gets the same
    # ptxas. The wheels are py3-none-manylinux: any python3 on x86-64 Linux will do.
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$dir/wheels" "${wheels[@]}" ||
        die "could not download ${wheels[*]} from PyPI"
fi
# --target bypasses Debian's externally-managed-environment guard: nothing is installed into
# the system's python, only unpacked under .pascal/site.
rm -rf "$dir/site"
python3 -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check \
    --find-links "$dir/wheels" --target "$dir/site" "${wheels[@]}" ||
    die "could not install the wheels from $dir/wheels"

nv="$dir/site/nvidia"
sdk="$dir/cuda"
rm -rf "$sdk"
mkdir -p "$sdk/bin" "$sdk/include" "$sdk/nvvm" "$sdk/lib64"
ln -s ../../site/nvidia/cuda_nvcc/bin/ptxas "$sdk/bin/ptxas"
ln -s ../../site/nvidia/cuda_nvcc/nvvm/libdevice "$sdk/nvvm/libdevice"
# clang looks for one include/ holding both the runtime headers and crt/.
for src in "$nv/cuda_runtime/include" "$nv/cuda_nvcc/include"; do
    for f in "$src"/*; do
        case "$(basename "$f")" in __init__.py | __pycache__) continue ;; esac
        ln -sfn "../../site/nvidia/${src#"$nv"/}/$(basename "$f")" "$sdk/include/$(basename "$f")"
    done
done
for f in libcudart_static.a libcudart.so.12 libculibos.a; do
    ln -s "../../site/nvidia/cuda_runtime/lib/$f" "$sdk/lib64/$f"
done
ln -s ../../site/nvidia/nvfatbin/lib/libnvfatbin.so.12 "$sdk/lib64/libnvfatbin.so.12"
ln -s ../../site/nvidia/nvfatbin/include/nvFatbin.h "$sdk/include/nvFatbin.h"

# The version text is captured first: under pipefail, grep -q leaving early can make ptxas die
# of SIGPIPE and fail the pipeline at random.
ptxas_version="$("$sdk/bin/ptxas" --version)" || die "$sdk/bin/ptxas does not run"
grep -q "release 12\." <<<"$ptxas_version" || die "$sdk/bin/ptxas is not CUDA 12.x"
for f in include/cuda_runtime.h include/crt/host_config.h nvvm/libdevice/libdevice.10.bc \
         lib64/libcudart_static.a lib64/libnvfatbin.so.12; do
    [ -e "$sdk/$f" ] || die "$sdk/$f is missing after the install"
done
echo "install-pascal-sdk: CUDA 12.9 ptxas, runtime and nvFatbin in $sdk ($(du -shL "$dir/site" | cut -f1))"
