#!/bin/bash
# pass_ab.sh SECONDS ROUNDS PATH TAG=BIN[,name=value...][,script=FILE] ...: surogatd builds (or
# one build with other -p parameters, or a policy script: -f FILE) side by side as
# pass-throughs, pinned to core 0, in front of one nginx origin
# (bench/conf/origin-nginx.conf.in: Cache-Control: no-store) on core 1 serving /16k and /100;
# wrk -t2 -c50 on core 1 against each in turn, ROUNDS times; prints each daemon's CPU
# (utime+stime, and utime alone) and context switches (perf stat, all its threads) per request.
# HDR="Name: value" adds a header to every request (a Cookie makes vcl/builtin.lua pass).
set -eu
DUR=$1 R=$2 P=$3; shift 3
work=$(mktemp -d /dev/shm/pass-ab.XXXXXX)
mkdir -p $work/www $work/o/tmp
head -c 16384 /dev/urandom > $work/www/16k; head -c 100 /dev/urandom > $work/www/100
sed -e "s|@NOFILE@|65536|;s|@DIR@|$work/o|g;s|@PORT@|18190|;s|@DOCROOT@|$work/www|" \
    $(dirname "$0")/conf/origin-nginx.conf.in > $work/o/nginx.conf
taskset -c 1 nginx -c $work/o/nginx.conf -p $work/o >/dev/null 2>&1 & OP=$!
declare -A PID PORT; tags=(); port=18191
for spec in "$@"; do
    tag=${spec%%=*}; rest=${spec#*=}; bin=${rest%%,*}; extra=()
    IFS=, read -ra ps <<< "${rest#$bin}"; for p in "${ps[@]}"; do
        case $p in "") ;; script=*) extra+=(-f "${p#script=}");; *) extra+=(-p "$p");; esac
    done
    mkdir -p $work/n-$tag
    taskset -c 0 $bin -F -j none -a 127.0.0.1:$port -b 127.0.0.1:18190 -n $work/n-$tag \
        -p thread_pools=2 -p thread_pool_min=250 -p timeout_idle=60s "${extra[@]}" >$work/log-$tag 2>&1 &
    PID[$tag]=$!; PORT[$tag]=$port; port=$((port+1)); tags+=($tag)
done
trap 'for t in ${tags[@]}; do kill ${PID[$t]} 2>/dev/null; done; kill $OP 2>/dev/null; wait 2>/dev/null; rm -rf $work' EXIT
sleep 2
for r in $(seq $R); do for tag in ${tags[@]}; do
    p=${PORT[$tag]} pid=${PID[$tag]}
    taskset -c 1 wrk -t2 -c50 -d1 ${HDR:+-H "$HDR"} http://127.0.0.1:$p$P >/dev/null
    t0=$(awk '{print $14+$15}' /proc/$pid/stat); u0=$(awk '{print $14}' /proc/$pid/stat)
    perf stat -x, -e context-switches -p $pid -o $work/perf.txt -- sleep $DUR &
    PP=$!
    out=$(taskset -c 1 wrk -t2 -c50 -d$DUR ${HDR:+-H "$HDR"} http://127.0.0.1:$p$P | grep -E "requests in")
    wait $PP
    t1=$(awk '{print $14+$15}' /proc/$pid/stat); u1=$(awk '{print $14}' /proc/$pid/stat)
    n=$(echo "$out" | awk '{print $1}')
    cs=$(grep context-switches $work/perf.txt | cut -d, -f1)
    echo "$tag r$r n=$n cpu-us/req $(echo "scale=2; ($t1-$t0)*10000/$n" | bc) user $(echo "scale=2; ($u1-$u0)*10000/$n" | bc) cs/req $(echo "scale=2; $cs/$n" | bc)"
done; done
