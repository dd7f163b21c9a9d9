#!/bin/sh
# ctest's first test: points LINK (build/shared-data, what every test reads) at
# $QVL_SHARED_DATA_DIR when the environment sets it, else at the configured directory, and
# says which, and whether the data is there.
# usage: shared_data_link.sh CONFIGURED_DIR LINK
set -u
want=${QVL_SHARED_DATA_DIR:-$1}
link=$2
case $want in /*) ;; *) want=$(pwd)/$want ;; esac # tests run in other directories
# a new link renamed over the old one: a test reading it never sees it missing
ln -sfn -- "$want" "$link.new.$$" && mv -Tf -- "$link.new.$$" "$link" || {
    echo "shared_data: cannot point $link at $want"; exit 1; }
from="configured"
[ -n "${QVL_SHARED_DATA_DIR:-}" ] && from="from \$QVL_SHARED_DATA_DIR"
if [ -f "$want/qwen3-vl-2b-instruct/config.json" ]; then
    echo "shared test data: $want ($from)"
else
    echo "shared test data: $want ($from) is absent: the tests that need it skip"
fi
