#!/bin/sh
# Install the Debian 12 packages surogat needs to build, test and benchmark,
# skipping what is already there.  Run as root.
set -eu

PKGS="build-essential pkg-config meson ninja-build clang libclang-rt-14-dev haproxy
libevent-dev libssl-dev libpcre2-dev libjemalloc-dev liblua5.4-dev zlib1g-dev check
libbrotli-dev libzstd-dev python3-brotli python3-zstandard
libsystemd-dev libnghttp2-dev debhelper dpkg-dev fakeroot lintian
python3 python3-pytest python3-prometheus-client python3-websockets python3-websocket chromium curl openssl apache2 varnish hitch nginx
php-fpm libapache2-mod-php
wrk media-types logrotate man-db groff-base systemd nghttp2-client python3-h2
libnss3-tools"

missing=""
for p in $PKGS; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -n "$missing" ]; then
    echo "deps: installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
