#!/bin/sh
# Install what is missing, build, and start surogat in front of a small
# sample origin.  Ctrl-C stops both.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

# BUILD: the meson build directory to use (made if missing).
BUILD=${BUILD:-build}
sh scripts/deps.sh
[ -d "$BUILD" ] || meson setup "$BUILD" >/dev/null
ninja -C "$BUILD" >/dev/null

ORIGIN_PORT=${ORIGIN_PORT:-8080}
PORT=${PORT:-6081}
ADMIN=${ADMIN:-127.0.0.1:6082}
work=$(mktemp -d /tmp/surogat-demo.XXXXXX)

ctl="$BUILD/surogatctl -T $ADMIN"
python3 scripts/demo_origin.py 127.0.0.1 "$ORIGIN_PORT" "$ctl" &
origin=$!
"$BUILD/surogatd" -F -j none -a "127.0.0.1:$PORT" -b "127.0.0.1:$ORIGIN_PORT" -T "$ADMIN" \
    -n "$work" -p access_log="$work/access.log" &
sg=$!
# Either may be gone already (Ctrl-C reaches the whole process group): set -e
# must not end the cleanup half way.
stop() {
    kill "$sg" "$origin" 2>/dev/null || true
    wait "$sg" "$origin" 2>/dev/null || true
    rm -rf "$work"
}
trap 'stop; exit 0' INT TERM

echo "surogat: http://127.0.0.1:$PORT/  (origin on 127.0.0.1:$ORIGIN_PORT, admin $ADMIN)"
echo "the cache at work: /slow takes the origin 1 s and may be kept 30 s; run twice"
printf '%s\n' "  curl -s -o /dev/null -D - -w '%{time_total} s\\n' http://127.0.0.1:$PORT/slow"
echo "  and see the time drop and Cache-Status turn from fwd=uri-miss to hit"
echo "counters: $ctl stats      stop: Ctrl-C"
rc=0
wait "$sg" || rc=$?
stop
exit $rc
