#!/bin/sh
# Builds the picture libraries qvl decodes with (libjpeg-turbo, libpng, giflib, libwebp) from
# Debian's own source packages (the same versions and patches as the system's libraries) with
# clang, ASan+UBSan and libFuzzer's coverage instrumentation, as static libraries, so the image
# fuzz target sees and checks what happens inside the decoders, not only in qvl:
#
#   scripts/fuzz-image-libs.sh DIR
#
# DIR/src: the unpacked sources; DIR/prefix: headers, static libraries and pkg-config files.
# A build configured with PKG_CONFIG_PATH=DIR/prefix/lib/pkgconfig links them instead of the
# system's shared ones (scripts/fuzz.sh -i and scripts/fuzz-device.sh pack -i do that). Needs
# network access to deb.debian.org (apt-get source with a private source list: the system's
# apt configuration is not touched), dpkg-dev, clang, cmake, make and zlib's headers. Runs again
# quickly: a library whose files are installed already is skipped.
set -eu

[ $# -eq 1 ] || { sed -n '2,15p' "$0"; exit 2; }
mkdir -p "$1"
dir=$(cd "$1" && pwd)
src=$dir/src
prefix=$dir/prefix
apt=$dir/apt
jobs=${JOBS:-2}
mkdir -p "$src" "$prefix/lib/pkgconfig" "$prefix/include" "$apt/lists/partial" "$apt/sources" \
    "$apt/cache"

for tool in clang cmake make dpkg-source apt-get; do
    command -v $tool >/dev/null || { echo "fuzz-image-libs.sh: $tool is needed" >&2; exit 2; }
done

export CC=clang
# -O1 keeps the decoders fast enough to fuzz; fuzzer-no-link gives libFuzzer their edges.
export CFLAGS="-O1 -g -fno-omit-frame-pointer -fPIC -fsanitize=address,undefined,fuzzer-no-link"

# ---- sources --------------------------------------------------------------------------------
# The running system's Debian release, as a deb-src list in a private apt directory.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
cat >"$apt/sources/debian-src.sources" <<EOF
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $codename $codename-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: $codename-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
aptopts="-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$apt/sources
 -o Dir::State::Lists=$apt/lists -o Debug::NoLocking=1 -o Dir::Cache=$apt/cache"

have_lists=
# fetch PACKAGE: unpacks its newest source version that downloads (a security mirror can list
# a version it does not serve yet) into $src/PACKAGE-VERSION; prints that directory.
fetch() {
    found=$(find "$src" -maxdepth 1 -type d -name "$1-[0-9]*" | head -1)
    [ -n "$found" ] && { echo "$found"; return; }
    if [ -z "$have_lists" ]; then
        # shellcheck disable=SC2086
        apt-get $aptopts update >&2 || { echo "fuzz-image-libs.sh: apt-get update failed" >&2; exit 1; }
        have_lists=1
    fi
    # shellcheck disable=SC2086
    for v in $(apt-cache $aptopts showsrc "$1" | sed -n 's/^Version: //p' | sort -rV); do
        # shellcheck disable=SC2086
        if (cd "$src" && apt-get $aptopts source "$1=$v" >&2 2>/dev/null); then
            find "$src" -maxdepth 1 -type d -name "$1-[0-9]*" | head -1
            return
        fi
    done
    echo "fuzz-image-libs.sh: cannot download the source of $1" >&2
    exit 1
}

pc() { # name version libs (writes $prefix/lib/pkgconfig/name.pc, replacing an installed one)
    rm -f "$prefix/lib/pkgconfig/$1.pc"
    cat >"$prefix/lib/pkgconfig/$1.pc" <<EOF
prefix=$prefix
Name: $1
Description: $1, instrumented for fuzzing (scripts/fuzz-image-libs.sh)
Version: $2
Cflags: -I\${prefix}/include
Libs: -L\${prefix}/lib $3
EOF
}

# ---- libjpeg-turbo (libjpeg 6.2 API, as Debian's libjpeg62-turbo) ---------------------------
if [ ! -f "$prefix/lib/libjpeg.a" ]; then
    s=$(fetch libjpeg-turbo)
    echo "fuzz-image-libs.sh: building $(basename "$s")" >&2
    # No SIMD: the assembly is not instrumented, and the C paths are what the sanitizers check.
    cmake -S "$s" -B "$s/build" -DCMAKE_BUILD_TYPE=None -DCMAKE_INSTALL_PREFIX="$prefix" \
        -DCMAKE_INSTALL_LIBDIR=lib -DENABLE_SHARED=OFF -DENABLE_STATIC=ON -DWITH_SIMD=OFF \
        -DWITH_TURBOJPEG=OFF -DCMAKE_C_FLAGS="$CFLAGS" >/dev/null
    cmake --build "$s/build" -j "$jobs" --target jpeg-static >/dev/null
    cp "$s/build/libjpeg.a" "$prefix/lib/"
    cp "$s/jpeglib.h" "$s/jmorecfg.h" "$s/jerror.h" "$s/build/jconfig.h" "$prefix/include/"
    pc libjpeg "$(basename "$s" | sed 's/^libjpeg-turbo-//')" "-ljpeg"
fi

# ---- libpng ---------------------------------------------------------------------------------
if [ ! -f "$prefix/lib/libpng16.a" ]; then
    s=$(fetch libpng1.6)
    echo "fuzz-image-libs.sh: building $(basename "$s")" >&2
    # No hardware filters: the SSE2 code paths are intrinsics (instrumented either way), and
    # Debian's build leaves them on, but the portable ones are the reference.
    (cd "$s" && ./configure --prefix="$prefix" --disable-shared --enable-static \
        --enable-hardware-optimizations=no >/dev/null && make -j "$jobs" >/dev/null &&
        make install >/dev/null)
    pc libpng "$(basename "$s" | sed 's/^libpng1.6-//')" "-lpng16 -lz -lm"
fi

# ---- giflib ---------------------------------------------------------------------------------
if [ ! -f "$prefix/lib/libgif.a" ]; then
    s=$(fetch giflib)
    echo "fuzz-image-libs.sh: building $(basename "$s")" >&2
    (cd "$s" && make -j "$jobs" libgif.a CC="$CC" CFLAGS="$CFLAGS -std=gnu99" >/dev/null)
    cp "$s/libgif.a" "$prefix/lib/"
    cp "$s/gif_lib.h" "$prefix/include/"
    pc libgif "$(basename "$s" | sed 's/^giflib-//')" "-lgif"
fi

# ---- libwebp (with its demuxer; the animation decoder is in libwebpdemux) --------------------
if [ ! -f "$prefix/lib/libwebpdemux.a" ]; then
    s=$(fetch libwebp)
    echo "fuzz-image-libs.sh: building $(basename "$s")" >&2
    cmake -S "$s" -B "$s/build" -DCMAKE_BUILD_TYPE=None -DCMAKE_INSTALL_PREFIX="$prefix" \
        -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF -DCMAKE_C_FLAGS="$CFLAGS" \
        -DWEBP_BUILD_ANIM_UTILS=OFF -DWEBP_BUILD_CWEBP=OFF -DWEBP_BUILD_DWEBP=OFF \
        -DWEBP_BUILD_GIF2WEBP=OFF -DWEBP_BUILD_IMG2WEBP=OFF -DWEBP_BUILD_VWEBP=OFF \
        -DWEBP_BUILD_WEBPINFO=OFF -DWEBP_BUILD_WEBPMUX=OFF -DWEBP_BUILD_EXTRAS=OFF >/dev/null
    cmake --build "$s/build" -j "$jobs" >/dev/null
    cmake --install "$s/build" >/dev/null
    v=$(basename "$s" | sed 's/^libwebp-//')
    sharpyuv=
    [ -f "$prefix/lib/libsharpyuv.a" ] && sharpyuv=-lsharpyuv
    pc libwebp "$v" "-lwebp $sharpyuv -lpthread -lm"
    pc libwebpdemux "$v" "-lwebpdemux -lwebp $sharpyuv -lpthread -lm"
fi

# The system's .pc files must not be found beside these (the prefix holds only ours).
rm -f "$prefix/lib/pkgconfig/libpng16.pc" "$prefix/lib/pkgconfig/libsharpyuv.pc" \
    "$prefix/lib/pkgconfig/libwebpmux.pc" "$prefix/lib/pkgconfig/libwebpdecoder.pc"
ls "$prefix/lib"/*.a >&2
echo "$prefix/lib/pkgconfig"
