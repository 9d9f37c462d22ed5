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
