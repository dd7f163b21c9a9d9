# Build dependencies for a machine that has a GPU but no Debian -dev packages and no network
# (the GPU machine lent to sessions). Two steps:
#   here (Debian, network):   bash scripts/device-deps.sh fetch      -> .devdeps/*.deb
#   there (carry .devdeps):   . scripts/device-deps.sh env; bash scripts/gpu-check.sh
# The packages are unpacked into /opt/deps (never over /) and the build is pointed at them.
# libmicrohttpd12 links libgnutls.so.30, which the GPU machine's system already has (Ubuntu
# 24.04's libgnutls30t64); its .pc names gnutls only for static links (tools/serve.cmake).
pkgs="libyaml-0-2 libyaml-dev libcmocka0 libcmocka-dev libcjson1 libcjson-dev libpcre2-8-0
      libpcre2-dev libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc2 libutf8proc-dev
      libjpeg62-turbo libjpeg62-turbo-dev libpng16-16 libpng-dev zlib1g-dev libgif7 libgif-dev
      libwebp7 libwebpdemux2 libwebpmux3 libwebp-dev pkgconf pkgconf-bin libpkgconf3 libmicrohttpd12 libmicrohttpd-dev
      libedit2 libedit-dev libbsd0 libmd0"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
fetch)
    mkdir -p "$here/.devdeps" && (cd "$here/.devdeps" && apt-get download $pkgs)
    ;;
env)
    mkdir -p /opt/deps
    for f in "$here"/.devdeps/*.deb; do dpkg -x "$f" /opt/deps; done
    for pc in $(find /opt/deps -name '*.pc'); do
        sed -i -E 's#([= ]-?I?)/usr#\1/opt/deps/usr#g' "$pc"
    done
    export PKG_CONFIG_PATH=/opt/deps/usr/lib/x86_64-linux-gnu/pkgconfig:/opt/deps/usr/share/pkgconfig
    if ! command -v pkg-config >/dev/null; then
        ln -sf /opt/deps/usr/bin/pkgconf /opt/deps/usr/bin/pkg-config
        export PATH=/opt/deps/usr/bin:$PATH
    fi
    export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
    export LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu
    # Multiarch headers (libjpeg's jconfig.h) are not named by the .pc files: they must come
    # before the system's own (Ubuntu's libjpeg-turbo 8 headers would not match libjpeg.so.62).
    export CPATH=/opt/deps/usr/include/x86_64-linux-gnu:/opt/deps/usr/include${CPATH:+:$CPATH}
    ;;
*)
    echo "usage: bash scripts/device-deps.sh fetch | . scripts/device-deps.sh env" >&2
    ;;
esac
