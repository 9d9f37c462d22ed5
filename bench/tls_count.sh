#!/bin/bash
# tls_count.sh N TAG=BIN[,name=value...] ... [nginx]: user-space instructions per TLS
# handshake, counted by callgrind (valgrind --tool=callgrind), which a busy machine does not
# move.  Each server runs under callgrind twice, serving N and then 3N connections of one
# full TLS 1.3 handshake each (a Python client: a 1 KiB cache hit, Connection: close, no
# resumption); instructions per handshake = (I(3N) - I(N)) / 2N, so start-up, the cache fill
# and the exit cancel out.  Kernel time is not counted: bench/tls_ab.sh measures CPU time.
# The same certificate (ECDSA P-256), ciphers and suites as bench/tls.py; nginx 1.22 runs
# with bench/conf/tls-nginx.conf.in, master_process off.  ALPN=h2: the client offers h2 and
# sends the HTTP/2 preface, SETTINGS and GOAWAY instead of a request (a connection set up and
# ended).
set -eu
N=$1; shift
. "$(dirname "$(readlink -f "$0")")/tls_common.sh"
tls_setup tls-count 18490
SP=
trap 'kill $OP $SP 2>/dev/null; wait 2>/dev/null; rm -rf $work' EXIT
cat > $work/client.py <<'EOF'
import os, socket, ssl, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
ctx.minimum_version = ssl.TLSVersion.TLSv1_3
deadline = time.monotonic() + 120
while True:  # the server under callgrind takes seconds to start
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        break
    except OSError:
        if time.monotonic() > deadline:
            sys.exit("server did not start")
        time.sleep(0.2)
h2 = os.environ.get("ALPN") == "h2"
if h2:
    ctx.set_alpn_protocols(["h2"])
# HTTP/2: the preface, empty SETTINGS, GOAWAY: the connection set up and ended, no request.
H2 = (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00" +
      b"\x00\x00\x08\x07\x00\x00\x00\x00\x00" + b"\x00" * 8)
for i in range(n + 1):  # one more first: the cache fill
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            if h2:
                assert t.selected_alpn_protocol() == "h2"
                t.sendall(H2)
                while t.recv(65536):
                    pass
                continue
            t.sendall(b"GET /1k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            body = b""
            while True:
                b = t.recv(65536)
                if not b:
                    break
                body += b
            assert body.startswith(b"HTTP/1.1 200"), body[:40]
            # From the cache (surogat's Cache-Status, nginx's X-Cache-Status), the first aside.
            head = body.split(b"\r\n\r\n", 1)[0].lower()
            assert i == 0 or b"x-cache-status: hit" in head or b"surogat; hit" in head, head
EOF
# count TAG SPEC CONNS: total instructions of all threads
count() {
    local tag=$1 spec=$2 n=$3 d=$work/$1-$3 port=18491
    mkdir -p $d/tmp
    if [ "$spec" = nginx ]; then
        tls_nginx_conf $d $port 18490 "s|^master_process on;|master_process off;|"
        valgrind --tool=callgrind --callgrind-out-file=$d/cg.out nginx -c $d/nginx.conf -p $d \
            -e $d/error.log >/dev/null 2>&1 &
    else
        local bin=${spec%%,*} extra=()
        IFS=, read -ra ps <<< "${spec#$bin}"; for p in "${ps[@]}"; do [ -n "$p" ] && extra+=(-p "$p"); done
        valgrind --tool=callgrind --callgrind-out-file=$d/cg.out $bin -F -j none \
            -a 127.0.0.1:$port,tls,cert=$work/c.pem,key=$work/k.pem -b 127.0.0.1:18490 \
            -n $d -s malloc,64m -p thread_pools=1 -p thread_pool_min=4 -p tls_ciphers=$CIPHERS \
            -p tls_ciphersuites=$SUITES "${extra[@]}" >$d/log 2>&1 &
    fi
    SP=$!
    python3 $work/client.py $port $n
    kill -TERM $SP; wait $SP 2>/dev/null || true; SP=
    cat $d/cg.out* | awk '/^summary:/ {s += $2} END {print s}'
}
for spec in "$@"; do
    if [ "$spec" = nginx ]; then tag=nginx; s=nginx; else tag=${spec%%=*}; s=${spec#*=}; fi
    a=$(count $tag "$s" $N); b=$(count $tag "$s" $((3 * N)))
    echo "$tag: $(( (b - a) / (2 * N) )) instructions per handshake (I($N)=$a, I($((3 * N)))=$b)"
done
