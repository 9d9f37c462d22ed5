#!/usr/bin/python3
"""
tls -- surogat's TLS next to nginx (proxy_cache behind `listen ssl`), both
with the same ECDSA P-256 certificate, protocols (TLS 1.2 and 1.3), cipher
list and TLS 1.3 suites, in front of one nginx origin serving static files
from tmpfs.  Same pinning as passthrough.py and cachehit.py, one run.

  proxy under test   core 0   (taskset -c 0)
  wrk, origin nginx  core 1   (taskset -c 1)

1. Handshakes: wrk with "Connection: close", so every request is a new
   connection and a full handshake (wrk does not resume sessions): requests
   per second = handshakes per second, on a 1 KiB cache hit.
2. Cache hits over TLS: keep-alive wrk on 1 KiB and 128 KiB objects, every
   cache warmed first and the hit checked in the response headers.

Reports req/s, p99 and the surogat/nginx ratio of each.  Every process it
starts is stopped on exit.  Traffic goes to 127.0.0.1 only.  Python 3
stdlib only.  See bench/README.md.
"""

import argparse
import atexit
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import cachehit as ch  # noqa: E402 -- surogat's start
import passthrough as pt  # noqa: E402 -- process handling, wrk parsing, nginx start

REPO = pt.REPO
log = pt.log

# name, path, size
OBJECTS = [("1KiB", "/1k", 1024), ("128KiB", "/128k", 128 * 1024)]
# surogat's defaults (tls_ciphers, tls_ciphersuites), given to both servers.
CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
           "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
           "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305")
SUITES = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"


def make_cert(d):
    """A self-signed ECDSA P-256 certificate for 127.0.0.1 (wrk does not verify)."""
    crt, key = os.path.join(d, "bench.crt"), os.path.join(d, "bench.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", crt,
                    "-subj", "/CN=127.0.0.1", "-days", "2",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=30)
    return crt, key


def https_get(port, path, timeout=5.0):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", timeout=timeout,
                                context=ctx) as r:
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()


def is_hit(headers):
    return ("hit" in headers.get("cache-status", "").lower()
            or headers.get("x-cache-status", "") == "HIT")


def warm(srv, path, size, timeout=30.0):
    """Fetch until the object is served as a cache hit, whole."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if not srv.check_alive():
            raise RuntimeError(f"{srv.name} died")
        try:
            status, headers, body = https_get(srv.port, path)
            last = (status, len(body), headers.get("cache-status") or
                    headers.get("x-cache-status"))
            if status == 200 and len(body) == size and is_hit(headers):
                return
        except Exception as e:  # noqa: BLE001 -- anything means "not yet"
            last = str(e)
        time.sleep(0.1)
    raise RuntimeError(f"{srv.name} {path}: no cache hit ({last})")


def start_surogat(args, workdir, origin_port, crt, key):
    args.surogat_param = [f"tls_ciphers={CIPHERS}", f"tls_ciphersuites={SUITES}",
                          *args.surogat_param]
    return ch.start_surogat(args, "surogat", workdir, pt.free_port(), origin_port,
                            "malloc,256m", listen_opts=f",tls,cert={crt},key={key}")


def start_nginx(args, workdir, origin_port, crt, key):
    port = pt.free_port()
    srv = pt.start_nginx(args, "nginx", "tls-nginx.conf.in", args.proxy_cpu, workdir,
                         PORT=port, ORIGIN_PORT=origin_port, KEEPALIVE=64, KEYS_ZONE="16m",
                         MAX_SIZE="1g", CERT=crt, KEY=key, CIPHERS=CIPHERS, SUITES=SUITES)
    return srv


def run_wrk(args, port, path, conns, secs, close):
    argv = ["taskset", "-c", str(args.client_cpu), args.wrk, "-t", str(args.wrk_threads),
            "-c", str(conns), "-d", f"{secs}s", "--timeout", "5s", "--latency"]
    if close:
        argv += ["-H", "Connection: close"]
    argv.append(f"https://127.0.0.1:{port}{path}")
    p = subprocess.run(argv, capture_output=True, timeout=secs + 60)
    return pt.parse_wrk(p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace"))


def measure(args, servers):
    rows = []
    cases = [("handshakes", "/1k", args.close_conns, True)]
    cases += [(f"hit {name}", path, args.conns, False) for name, path, _ in OBJECTS]
    for label, path, conns, close in cases:
        row = {"case": label, "conns": conns}
        for srv in servers:
            if not srv.check_alive():
                continue
            run_wrk(args, srv.port, path, conns, args.warmup, close)
            r = run_wrk(args, srv.port, path, conns, args.duration, close)
            row[srv.name] = r
            errs = r["sock_errors"] or ""
            log(f"{label:>12} {srv.name:>8}: {pt.fmt_num(r['rps'])} req/s, p99 "
                f"{pt.fmt_ms(r['p99'])}, non-2xx {r['non2xx']} {errs}")
        rows.append(row)
    return rows


def report(rows):
    print("| case | conns | surogat req/s | nginx req/s | surogat/nginx | surogat p99 "
          "| nginx p99 |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        s, n = row.get("surogat") or {}, row.get("nginx") or {}
        print(f"| {row['case']} | {row['conns']} | {pt.fmt_num(s.get('rps'))} | "
              f"{pt.fmt_num(n.get('rps'))} | {pt.ratio(s.get('rps'), n.get('rps'))} | "
              f"{pt.fmt_ms(s.get('p99'))} | {pt.fmt_ms(n.get('p99'))} |")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build-bench", "surogatd"),
                    help="surogatd binary (default: the release build in build-bench/)")
    ap.add_argument("--quick", action="store_true", help="smoke mode: 2 s runs, 1 s warmup")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured wrk run")
    ap.add_argument("--warmup", type=int, default=3, help="seconds of warmup before each run")
    ap.add_argument("--conns", type=int, default=50, help="wrk connections for the hit runs")
    ap.add_argument("--close-conns", type=int, default=50,
                    help="wrk connections for the handshake run")
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--thread-pools", type=int, default=2)
    ap.add_argument("--thread-pool-min", type=int, default=250)
    ap.add_argument("-P", "--surogat-param", action="append", default=[],
                    help="extra surogat -p name=value (repeatable)")
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--nofile", type=int, default=65536)
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.warmup = 2, 1
    return args


def main():
    args = parse_args()
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)
    for tool in (args.wrk, args.nginx, args.surogatd, shutil.which("taskset"),
                 shutil.which("openssl")):
        if not tool or not os.access(tool, os.X_OK):
            sys.exit(f"missing: {tool}")
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    workdir = tempfile.mkdtemp(prefix="surogat-tls-bench-", dir=base)
    os.chmod(workdir, 0o755)  # nginx workers run as nobody
    if not args.keep_tmp:
        pt.CLEANUP.append(workdir)
        atexit.register(shutil.rmtree, workdir, True)
    docroot = os.path.join(workdir, "htdocs")
    os.makedirs(os.path.join(docroot, "z"))
    for _, path, size in OBJECTS:
        with open(os.path.join(docroot, path.lstrip("/")), "wb") as f:
            f.write((b"0123456789abcdef" * (size // 16 + 1))[:size])
    crt, key = make_cert(workdir)
    origin_port = pt.free_port()
    origin = pt.start_nginx(args, "origin", "cache-origin-nginx.conf.in", args.client_cpu,
                            workdir, PORT=origin_port, DOCROOT=docroot)
    pt.wait_ready(origin.proc, origin_port, "/1k", 1024, "origin nginx")
    servers = [start_surogat(args, workdir, origin_port, crt, key),
               start_nginx(args, workdir, origin_port, crt, key)]
    for srv in servers:
        for _, path, size in OBJECTS:
            warm(srv, path, size)
        log(f"{srv.name} on https://127.0.0.1:{srv.port} (pid {srv.pid}, core "
            f"{args.proxy_cpu}): warm")
    rows = measure(args, servers)
    report(rows)
    pt.stop_all()


if __name__ == "__main__":
    main()
