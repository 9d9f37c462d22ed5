#!/bin/bash
# tls_sched.sh SECONDS TAG=BIN[,name=value...] ... [nginx]: who runs on the server's core during
# TLS handshakes.  Each server in turn (set up as bench/tls_ab.sh does: core 0, behind one nginx
# origin on core 1) under wrk -t2 -c$C "Connection: close" on core 1 for SECONDS + 4 s, with
# `perf sched record -C 0` for SECONDS in the middle; prints the handshakes per second, each of
# the server's threads that ran (times switched in, per handshake, and its run time) and how
# long core 0 was idle.  A taker that sleeps between handshakes, or a thread that preempts it,
# shows here as switches per handshake.  C: connections (default 50).
set -eu
DUR=$1; shift
C=${C:-50}
. "$(dirname "$(readlink -f "$0")")/tls_common.sh"
tls_setup tls-sched 18490 1
kids=($OP); port=18491
trap 'kill ${kids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf $work' EXIT
for spec in "$@"; do
    tls_start "$spec" $port 18490
    kids+=($kid)
    [ $tag = nginx ] || sleep 2
    curl -sk -o /dev/null https://127.0.0.1:$port/1k; curl -sk -o /dev/null https://127.0.0.1:$port/1k
    taskset -c 1 wrk -t2 -c$C -d2 -H "Connection: close" https://127.0.0.1:$port/1k >/dev/null
    taskset -c 1 wrk -t2 -c$C -d$((DUR + 4)) -H "Connection: close" https://127.0.0.1:$port/1k \
        >$work/wrk.out &
    w=$!; sleep 2
    perf sched record -C 0 -o $work/sched.data -- sleep $DUR >/dev/null 2>&1
    wait $w
    rate=$(awk '/Requests\/sec/{print $2}' $work/wrk.out)
    echo "$tag: $rate handshakes/s"
    perf sched timehist -i $work/sched.data -s 2>/dev/null | awk -v pid=$spid -v rate=$rate -v dur=$DUR '
        /idle for/ { print "  " $0 }
        $1 ~ "\\[[0-9]+/" pid "\\]$" || $1 ~ "\\[" pid "\\]$" {
            printf "  %-30s switched in %6d = %.3f per handshake, ran %s ms\n", $1, $3,
                   $3 / (dur * rate), $4 }'
    kill $kid; wait $kid 2>/dev/null || true
    port=$((port + 1))
done
