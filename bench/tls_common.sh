# Sourced by bench/tls_ab.sh and bench/tls_count.sh: what both set up the same way.
# tls_setup NAME ORIGIN_PORT [CPU]: $work (a fresh directory, removed by the caller's trap),
# $CIPHERS and $SUITES (surogat's defaults, given to every server, as bench/tls.py does), a
# self-signed ECDSA P-256 certificate ($work/c.pem, $work/k.pem) and an nginx origin on
# ORIGIN_PORT (bench/conf/cache-origin-nginx.conf.in: everything cacheable for an hour)
# serving a 1 KiB /1k, pinned to CPU when given; its pid in $OP.
B=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
CIPHERS="ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
SUITES="TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"

tls_setup() {
    work=$(mktemp -d /dev/shm/$1.XXXXXX)
    chmod 755 $work # nginx workers run as nobody
    mkdir -p $work/www $work/o/tmp
    head -c 1024 /dev/urandom > $work/www/1k
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout $work/k.pem \
        -out $work/c.pem -subj /CN=127.0.0.1 -days 2 -addext "subjectAltName=IP:127.0.0.1" 2>/dev/null
    sed -e "s|@NOFILE@|65536|;s|@DIR@|$work/o|g;s|@PORT@|$2|;s|@DOCROOT@|$work/www|" \
        $B/conf/cache-origin-nginx.conf.in > $work/o/nginx.conf
    ${3:+taskset -c $3} nginx -c $work/o/nginx.conf -p $work/o >/dev/null 2>&1 & OP=$!
}

# tls_nginx_conf DIR PORT ORIGIN_PORT [SED-EXPRESSION]: nginx 1.22 in front, as bench/tls.py
# runs it (bench/conf/tls-nginx.conf.in), its configuration in DIR/nginx.conf.
tls_nginx_conf() {
    mkdir -p $1/tmp
    sed -e "s|@NOFILE@|65536|;s|@DIR@|$1|g;s|@PORT@|$2|;s|@ORIGIN_PORT@|$3|" \
        -e "s|@KEEPALIVE@|64|;s|@KEYS_ZONE@|16m|;s|@MAX_SIZE@|1g|;s|@CERT@|$work/c.pem|" \
        -e "s|@KEY@|$work/k.pem|;s|@CIPHERS@|$CIPHERS|;s|@SUITES@|$SUITES|" -e "${4:-}" \
        $B/conf/tls-nginx.conf.in > $1/nginx.conf
}

# tls_start SPEC PORT ORIGIN_PORT: start one server of a TLS bench on core 0 and PORT, in front
# of the origin, $work set up (tls_setup).  SPEC is "nginx" (tls_nginx_conf, $NGINX_SED applied)
# or TAG=BIN[,name=value...]: that surogatd with those parameters.  Sets $tag (nginx or TAG),
# $kid (the process started: nginx's master) and $spid (the one that serves: nginx's worker).
tls_start() {
    local rest bin ps p extra=()
    if [ "$1" = nginx ]; then
        tag=nginx; tls_nginx_conf $work/nginx $2 $3 "${NGINX_SED:-}"
        taskset -c 0 nginx -c $work/nginx/nginx.conf -p $work/nginx -e $work/nginx/error.log \
            >/dev/null 2>&1 &
        kid=$!; sleep 1
        spid=$(cat /proc/$kid/task/$kid/children | awk '{print $1}') # the one worker
        return
    fi
    tag=${1%%=*}; rest=${1#*=}; bin=${rest%%,*}
    IFS=, read -ra ps <<< "${rest#$bin}"; for p in "${ps[@]}"; do [ -n "$p" ] && extra+=(-p "$p"); done
    mkdir -p $work/n-$tag
    taskset -c 0 $bin -F -j none -a 127.0.0.1:$2,tls,cert=$work/c.pem,key=$work/k.pem \
        -b 127.0.0.1:$3 -n $work/n-$tag -s malloc,256m -p thread_pools=2 \
        -p thread_pool_min=250 -p timeout_idle=60s -p tls_ciphers=$CIPHERS \
        -p tls_ciphersuites=$SUITES "${extra[@]}" >$work/log-$tag 2>&1 &
    kid=$! spid=$!
}
