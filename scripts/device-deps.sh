# Build dependencies for a machine that has a GPU but no Debian -dev packages and no network
# (the GPU machine lent to sessions). Two steps:
#   here (Debian, network):   bash scripts/device-deps.sh fetch      -> .devdeps/*.deb
#   there (carry .devdeps):   . scripts/device-deps.sh env; bash scripts/gpu-check.sh
# The packages are unpacked into /opt/deps (never over /) and the build is pointed at them.
pkgs="libyaml-0-2 libyaml-dev libcmocka0 libcmocka-dev libcjson1 libcjson-dev libpcre2-8-0
      libpcre2-dev libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc2 libutf8proc-dev
      libstb0 libstb-dev pkgconf pkgconf-bin libpkgconf3"
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
    ;;
*)
    echo "usage: bash scripts/device-deps.sh fetch | . scripts/device-deps.sh env" >&2
    ;;
esac
