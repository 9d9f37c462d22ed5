#!/bin/bash
# ab.sh BEFORE AFTER PATH [CONNS] [-- surogatd args...]: two surogatd builds side by side,
# pinned to core 0, wrk -t2 on core 1 against each in turn for three rounds; prints req/s
# and each daemon's CPU (utime+stime) per request.  The backend is a Python http.server
# over $DOCROOT (default: a fresh directory with a 1,024-byte file "1k" and a 100-byte
# "100"), or the built-in static backend over it when STATIC=1.  HEADER: a request header
# for wrk to send (e.g. "Connection: close": a new connection per request; "Cookie: a=b":
# every request a pass).  ORIGIN_PROTO=HTTP/1.1: the origin keeps connections alive.
# ROUNDS (default 3), SECS (default 6): rounds and seconds per run.  Each line also gives
# wrk's latency percentiles (p50, p99) and the daemon's context switches per request,
# voluntary and involuntary, summed over its threads (/proc/PID/task/*/status), and the
# user-space part of its CPU per request (utime alone: what the daemon's own code costs,
# against the kernel's TCP work that is most of a small hit's time).
set -eu
BEFORE=$1 AFTER=$2 PATH_=$3 C=${4:-50}
shift $(( $# < 4 ? $# : 4 )); [ "${1:-}" = "--" ] && shift
work=$(mktemp -d /dev/shm/surogat-ab.XXXXXX)
DOCROOT=${DOCROOT:-$work/www}
mkdir -p "$DOCROOT"; [ -e "$DOCROOT/1k" ] || { head -c 1024 /dev/zero | tr '\0' x >"$DOCROOT/1k"
    head -c 100 /dev/zero | tr '\0' y >"$DOCROOT/100"
    touch -d "1 week ago" "$DOCROOT/1k" "$DOCROOT/100"; } # old: heuristically fresh
B=${PORT_BASE:-18080} # the origin's port; the daemons listen on the next two
python3 -m http.server $B --bind 127.0.0.1 -d "$DOCROOT" ${ORIGIN_PROTO:+--protocol $ORIGIN_PROTO} \
    >/dev/null 2>&1 & OP=$!
backend=127.0.0.1:$B; [ "${STATIC:-0}" = 1 ] && backend=$DOCROOT
declare -A PID PORT
port=$((B + 1))
for tag in before after; do
    bin=$BEFORE; [ $tag = after ] && bin=$AFTER
    mkdir -p "$work/n-$tag"
    taskset -c 0 "$bin" -F -j none -a 127.0.0.1:$port -b "$backend" -s malloc,256m \
        -n "$work/n-$tag" -p default_ttl=3600 -p thread_pool_min=50 "$@" >"$work/log-$tag" 2>&1 &
    PID[$tag]=$!; PORT[$tag]=$port; port=$((port + 1))
done
trap 'kill ${PID[before]} ${PID[after]} $OP 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
sleep 1.5
csw() { cat /proc/$1/task/*/status 2>/dev/null | awk '/^voluntary_ctxt/ {v += $2}
    /^nonvoluntary_ctxt/ {n += $2} END {print v, n}'; }
for r in $(seq "${ROUNDS:-3}"); do
    for tag in before after; do
        p=${PORT[$tag]} pid=${PID[$tag]}
        curl -s -o /dev/null "http://127.0.0.1:$p$PATH_"
        t0=$(awk '{print $14+$15}' /proc/$pid/stat) u0=$(awk '{print $14}' /proc/$pid/stat) c0=$(csw $pid)
        out=$(taskset -c 1 wrk -t2 -c"$C" -d"${SECS:-6}" --latency ${HEADER:+-H "$HEADER"} \
            "http://127.0.0.1:$p$PATH_" | grep -E "Requests/sec|requests in| 50%| 99%")
        t1=$(awk '{print $14+$15}' /proc/$pid/stat) u1=$(awk '{print $14}' /proc/$pid/stat) c1=$(csw $pid)
        n=$(echo "$out" | awk '/requests in/ {print $1}')
        echo "$tag r$r c$C $(echo "$out" | awk '/Requests/ {print $2}') req/s" \
             "cpu-us/req $(echo "scale=2; ($t1-$t0)*10000/$n" | bc)" \
             "p50 $(echo "$out" | awk '/ 50%/ {print $2}') p99 $(echo "$out" | awk '/ 99%/ {print $2}')" \
             "csw/req $(echo "$c0 $c1 $n" | awk '{printf "%.3f %.3f", ($3-$1)/$5, ($4-$2)/$5}')" \
             "user-us/req $(echo "scale=2; ($u1-$u0)*10000/$n" | bc)"
    done
done
