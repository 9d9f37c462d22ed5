#!/bin/sh
# Install what is missing, build, and start surogat in front of a small
# sample origin.  Ctrl-C stops both.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

sh scripts/deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null

ORIGIN_PORT=${ORIGIN_PORT:-8080}
PORT=${PORT:-6081}
ADMIN=${ADMIN:-127.0.0.1:6082}
work=$(mktemp -d /tmp/surogat-demo.XXXXXX)

python3 scripts/demo_origin.py 127.0.0.1 "$ORIGIN_PORT" &
origin=$!
build/surogatd -F -j none -a "127.0.0.1:$PORT" -b "127.0.0.1:$ORIGIN_PORT" -T "$ADMIN" \
    -n "$work" -p access_log="$work/access.log" &
sg=$!
stop() {
    kill "$sg" "$origin" 2>/dev/null
    wait "$sg" "$origin" 2>/dev/null
    rm -rf "$work"
}
trap 'stop; exit 0' INT TERM

echo "surogat: http://127.0.0.1:$PORT/  (origin on 127.0.0.1:$ORIGIN_PORT, admin $ADMIN)"
echo "counters: build/surogatctl -T $ADMIN stats      stop: Ctrl-C"
wait "$sg"
rc=$?
stop
exit $rc
