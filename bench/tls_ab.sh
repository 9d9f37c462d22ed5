#!/bin/bash
# tls_ab.sh SECONDS ROUNDS TAG=BIN[,name=value...] ... [nginx]: TLS handshakes (wrk -t2 -c$C,
# "Connection: close": a full handshake per request on a 1 KiB cache hit) against surogatd
# builds (or one build with other -p parameters) and, with the word "nginx", nginx 1.22
# (bench/conf/tls-nginx.conf.in: one worker, the same certificate, ciphers and suites,
# tickets on), side by side on core 0 behind one nginx origin on core 1; wrk on core 1
# against each in turn, ROUNDS times.  Prints each server's CPU (utime+stime, and utime
# alone) and context switches (perf stat, all its threads) per handshake.  C: connections
# (default 50).  NGINX_SED: a sed expression applied to nginx's configuration (e.g.
# 's|ssl_session_tickets on|ssl_session_tickets off|', with tls_tickets=0 for surogat, for
# full handshakes only: wrk presents the ticket of its connection before).  For a figure
# that does not move with the machine's load, see bench/tls_count.sh (instructions under
# callgrind).
set -eu
DUR=$1 R=$2; shift 2
C=${C:-50}
. "$(dirname "$(readlink -f "$0")")/tls_common.sh"
tls_setup tls-ab 18390 1
declare -A PID PORT; tags=(); kids=($OP); port=18391
for spec in "$@"; do
    tls_start "$spec" $port 18390
    PID[$tag]=$spid; kids+=($kid); PORT[$tag]=$port; port=$((port+1)); tags+=($tag)
done
trap 'kill ${kids[@]} 2>/dev/null; wait 2>/dev/null; rm -rf $work' EXIT
sleep 2
for tag in ${tags[@]}; do
    curl -sk -o /dev/null https://127.0.0.1:${PORT[$tag]}/1k; curl -sk -o /dev/null https://127.0.0.1:${PORT[$tag]}/1k
done
for r in $(seq $R); do for tag in ${tags[@]}; do
    p=${PORT[$tag]} pid=${PID[$tag]}
    taskset -c 1 wrk -t2 -c$C -d1 -H "Connection: close" https://127.0.0.1:$p/1k >/dev/null
    t0=$(awk '{print $14+$15}' /proc/$pid/stat); u0=$(awk '{print $14}' /proc/$pid/stat)
    perf stat -x, -e context-switches -p $pid -o $work/perf.txt -- sleep $DUR &
    PP=$!
    out=$(taskset -c 1 wrk -t2 -c$C -d$DUR -H "Connection: close" https://127.0.0.1:$p/1k | grep -E "requests in")
    wait $PP
    t1=$(awk '{print $14+$15}' /proc/$pid/stat); u1=$(awk '{print $14}' /proc/$pid/stat)
    n=$(echo "$out" | awk '{print $1}')
    cs=$(grep context-switches $work/perf.txt | cut -d, -f1)
    echo "$tag r$r n=$n cpu-us/hs $(echo "scale=1; ($t1-$t0)*10000/$n" | bc)" \
         "user $(echo "scale=1; ($u1-$u0)*10000/$n" | bc)" \
         "cs/hs $(echo "scale=2; $cs/$n" | bc)"
done; done
