#!/bin/sh
# Install what is missing, build surogat four ways and run every suite:
#   build        default (debugoptimized): unit, e2e, fuzz corpus replay
#   build-asan   ASan+UBSan: unit, e2e
#   build-fuzz   clang libFuzzer: bounded fuzz runs of each parser
#   build-rel    release (asserts stay on): unit
# Ends with one line "N passed, M failed" summing every suite (skipped: the line before).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

sh scripts/deps.sh || { echo "0 passed, 1 failed"; exit 1; }

status=0
builds=""
run() { # builddir, setup args..., -- suites...
    dir=$1; shift
    setup=""
    while [ "$1" != "--" ]; do setup="$setup $1"; shift; done
    shift
    echo "=== $dir:$setup"
    builds="$builds $dir"
    rm -f "$dir/meson-logs/testlog.json" "$dir/meson-logs/e2e-junit.xml"
    # shellcheck disable=SC2086
    if [ ! -d "$dir" ]; then meson setup "$dir" $setup >"$dir.setup.log" 2>&1 ||
        { cat "$dir.setup.log"; status=1; return; }; fi
    if ! ninja -C "$dir" >"$dir.build.log" 2>&1; then
        tail -40 "$dir.build.log"; status=1; return
    fi
    suites=""
    for s in "$@"; do suites="$suites --suite $s"; done
    # shellcheck disable=SC2086
    meson test -C "$dir" --print-errorlogs --no-rebuild $suites || status=1
}

run build -- unit e2e fuzz
run build-asan -Db_sanitize=address,undefined -Db_lundef=false -- unit e2e
if command -v clang >/dev/null; then
    CC=clang run build-fuzz -Dfuzzing=true -Db_sanitize=address,undefined -Db_lundef=false \
        -Djemalloc=disabled -- fuzz
fi
run build-rel -Dbuildtype=release -- unit

python3 scripts/summarize.py $builds || status=1
exit $status
