#!/bin/bash
# h2ab.sh BEFORE AFTER PATH STREAMS [ROUNDS] [-- surogatd args...]: two surogatd builds side
# by side over TLS with ALPN h2, pinned to core 0, h2load (one thread, 50 connections,
# STREAMS concurrent streams each) on core 1 against each in turn, ROUNDS rounds (default 3)
# of N requests (default 40,000; N=... to change); prints req/s, each daemon's CPU
# (utime+stime, and each apart) per request in microseconds, and h2load's p99 (from its
# per-request log).
# The backend is a Python http.server over a fresh directory with "1k" (1,024 bytes) and
# "128k" (131,072 bytes).  The certificate, ciphers and suites are bench/h2.py's.
# Ports BASE (the backend), BASE+1 and BASE+2 (BASE=18180 unless set).
set -eu
BEFORE=$1 AFTER=$2 PATH_=$3 M=$4 ROUNDS=${5:-3}
shift $(( $# < 5 ? $# : 5 )); [ "${1:-}" = "--" ] && shift
N=${N:-40000}
BASE=${BASE:-18180}
work=$(mktemp -d /dev/shm/surogat-h2ab.XXXXXX)
mkdir -p "$work/www"
head -c 1024 /dev/zero | tr '\0' x >"$work/www/1k"
head -c 131072 /dev/urandom >"$work/www/128k"
touch -d "1 week ago" "$work/www/1k" "$work/www/128k" # old: heuristically fresh
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/k.pem" \
    -out "$work/c.pem" -subj /CN=127.0.0.1 -days 2 >/dev/null 2>&1
CIPHERS=$(python3 -c 'import sys; sys.path.insert(0, "'"$(dirname "$0")"'"); import tls; print(tls.CIPHERS)')
SUITES=$(python3 -c 'import sys; sys.path.insert(0, "'"$(dirname "$0")"'"); import tls; print(tls.SUITES)')
taskset -c 1 python3 -m http.server "$BASE" --bind 127.0.0.1 -d "$work/www" >/dev/null 2>&1 & OP=$!
declare -A PID PORT
port=$((BASE + 1))
for tag in before after; do
    bin=$BEFORE; [ $tag = after ] && bin=$AFTER
    mkdir -p "$work/n-$tag"
    taskset -c 0 "$bin" -F -j none -a "127.0.0.1:$port,tls,cert=$work/c.pem,key=$work/k.pem" \
        -b "127.0.0.1:$BASE" -s malloc,256m -n "$work/n-$tag" -p default_ttl=3600 \
        -p thread_pools=2 -p thread_pool_min=250 -p h2_max_concurrent_streams=128 \
        -p "tls_ciphers=$CIPHERS" -p "tls_ciphersuites=$SUITES" "$@" >"$work/log-$tag" 2>&1 &
    PID[$tag]=$!; PORT[$tag]=$port; port=$((port + 1))
done
trap 'kill ${PID[before]} ${PID[after]} $OP 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
sleep 1.5
for tag in before after; do
    curl -sk -o /dev/null --http2 "https://127.0.0.1:${PORT[$tag]}$PATH_"
    taskset -c 1 h2load -t1 -c50 -m"$M" -n 5000 "https://127.0.0.1:${PORT[$tag]}$PATH_" >/dev/null
done
for r in $(seq "$ROUNDS"); do
    for tag in before after; do
        p=${PORT[$tag]} pid=${PID[$tag]}
        rm -f "$work/h2log" # h2load appends to its log: each run's p99 from its own lines
        read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
        out=$(taskset -c 1 h2load -t1 -c50 -m"$M" -n "$N" --log-file "$work/h2log" \
              "https://127.0.0.1:$p$PATH_")
        read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
        ok=$(echo "$out" | awk '/^requests:/ {print $8}')
        rps=$(echo "$out" | awk '/^finished in/ {print $4}')
        p99=$(sort -n -k3 "$work/h2log" | awk '{a[NR]=$3} END {print a[int(NR*0.99)]/1000}')
        echo "$tag r$r m$M $PATH_ ok $ok $rps req/s cpu-us/req" \
             "$(echo "scale=2; ($u1-$u0+$s1-$s0)*10000/$ok" | bc)" \
             "(user $(echo "scale=2; ($u1-$u0)*10000/$ok" | bc)" \
             "sys $(echo "scale=2; ($s1-$s0)*10000/$ok" | bc)) p99 ${p99}ms"
    done
done
