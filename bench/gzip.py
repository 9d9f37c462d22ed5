#!/usr/bin/python3
"""
gzip -- a compressible 100 KiB HTML page through surogat's cache with gzip
(compressed once when stored, then served as stored to every client that
takes gzip) next to nginx serving the same file with `gzip on` (compressed
again on every request), same pinning as passthrough.py, one run.

  surogat, or nginx gzip   core 0   (taskset -c 0)
  wrk, origin nginx        core 1   (taskset -c 1)

For each connection count: requests/s and p99 with wrk sending
Accept-Encoding: gzip (the target: surogat at least 5x nginx), and with no
Accept-Encoding (surogat gunzips its stored copy on every hit, nginx sends
the file as it is: the rare client, shown for what it costs).  Before
measuring, every server's answer is checked: gzip, decompressing to the
page byte for byte, and from surogat a hit.  Afterwards surogat's counters
must show the page compressed once and the origin asked once.

Every process it starts is stopped on exit.  Traffic goes to 127.0.0.1
only.  Python 3 stdlib only.  See bench/README.md.
"""

import argparse
import atexit
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import passthrough as pt  # noqa: E402 -- process handling, wrk parsing, nginx start

REPO = pt.REPO
log = pt.log
PAGE_PATH = "/page.html"
CLIENTS = {"gzip": "Accept-Encoding: gzip", "identity": None}


def page_bytes(size):
    """HTML with the redundancy of a real page (markup repeats, text varies)."""
    rnd = random.Random(100)
    words = ["surogat", "cache", "proxy", "origin", "varnish", "object", "header", "client",
             "stale", "fresh", "vary", "range", "gzip", "store", "lorem", "ipsum"]
    out = ["<!DOCTYPE html>\n<html><head><title>bench</title>"
           "<link rel=\"stylesheet\" href=\"/s.css\"></head><body>\n"]
    n = len(out[0])
    while n < size:
        para = " ".join(rnd.choice(words) for _ in range(rnd.randrange(8, 40)))
        s = f"<div class=\"item\"><a href=\"/p/{rnd.randrange(10000)}\">{para}</a></div>\n"
        out.append(s)
        n += len(s)
    return "".join(out).encode()[:size - 15] + b"</body></html>\n"


def get(port, path, accept_gzip):
    """(status, headers with lower-case names, body) of one GET."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path, headers={"Accept-Encoding": "gzip"} if accept_gzip else {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def gunzip(b):
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = d.decompress(b) + d.flush()
    if not d.eof or d.unused_data:
        raise ValueError("not one complete gzip stream")
    return out


def check_server(name, port, page, want_hit):
    """The answers are right before anything is measured; returns the gzip size."""
    for _ in range(2):  # the first may be the miss that stores the page
        status, h, body = get(port, PAGE_PATH, True)
    if status != 200 or h.get("content-encoding") != "gzip" or gunzip(body) != page:
        raise SystemExit(f"{name}: gzip answer wrong: {status} {h}")
    if want_hit and not h.get("cache-status", "").startswith("surogat; hit"):
        raise SystemExit(f"{name}: not a hit: {h.get('cache-status')}")
    status, h, plain = get(port, PAGE_PATH, False)
    if status != 200 or "content-encoding" in h or plain != page:
        raise SystemExit(f"{name}: identity answer wrong: {status} {h}")
    log(f"{name}: gzip {len(body)} bytes for {len(page)}, identity checked")
    return len(body)


def surogat_stats(args, admin):
    p = subprocess.run(["taskset", "-c", str(args.client_cpu), args.surogatctl, "-T", admin,
                        "stats", "-j"], capture_output=True, text=True, timeout=15)
    try:
        return json.loads(p.stdout)
    except ValueError:
        return {}


def start_surogat(args, workdir, origin_port):
    d = os.path.join(workdir, "surogat")
    os.makedirs(d, exist_ok=True)
    port = pt.free_port()
    srv = pt.Server("surogat", port)
    srv.admin = f"127.0.0.1:{pt.free_port()}"
    srv.logfile = os.path.join(d, "stderr.log")
    argv = ["taskset", "-c", str(args.proxy_cpu), args.surogatd, "-F", "-j", "none",
            "-a", f"127.0.0.1:{port}", "-b", f"127.0.0.1:{origin_port}", "-n", d,
            "-T", srv.admin, "-s", "malloc,64m",
            "-p", f"thread_pools={args.thread_pools}",
            "-p", f"thread_pool_min={args.thread_pool_min}",
            "-p", "timeout_idle=60s", "-p", "http_gzip_support=on",
            "-p", f"gzip_level={args.surogat_level}"]
    for p in args.surogat_param:
        argv += ["-p", p]
    srv.argv = argv
    srv.proc = pt.spawn(argv, srv.logfile)
    srv.pid = srv.proc.pid
    pt.STARTED.append(srv.proc)
    return srv


def measure(args, srv, client, conns):
    argv = ["taskset", "-c", str(args.client_cpu), args.wrk, "-t", str(args.wrk_threads),
            "-c", str(conns), "-d", f"{args.duration}s", "--timeout", "5s", "--latency"]
    if CLIENTS[client]:
        argv += ["-H", CLIENTS[client]]
    argv.append(f"http://127.0.0.1:{srv.port}{PAGE_PATH}")
    if args.warmup > 0:
        warm = list(argv)
        warm[warm.index("-d") + 1] = f"{args.warmup}s"
        subprocess.run(warm, capture_output=True, timeout=args.warmup + 60)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    pt.STARTED.append(proc)
    try:
        out, _ = proc.communicate(timeout=args.duration + 60)
    except subprocess.TimeoutExpired:
        pt.stop(proc)
        out = b"wrk: did not finish in time\n"
    pt.STARTED.remove(proc)
    r = pt.parse_wrk(out.decode(errors="replace"))
    r["argv"] = argv
    return r


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build", "surogatd"))
    ap.add_argument("--surogatctl", default=os.path.join(REPO, "build", "surogatctl"))
    ap.add_argument("--quick", action="store_true",
                    help="smoke mode: 2 s runs, no warmup, 50 connections only")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured wrk run")
    ap.add_argument("--warmup", type=int, default=3, help="seconds of warmup before each run")
    ap.add_argument("--conns", default="50,400", help="wrk connection counts")
    ap.add_argument("--clients", default="gzip,identity",
                    help="gzip (Accept-Encoding: gzip) and/or identity (none)")
    ap.add_argument("--size", type=int, default=100 * 1024, help="page size in bytes")
    ap.add_argument("--nginx-level", type=int, default=1,
                    help="nginx gzip_comp_level (1, nginx's default, is what `gzip on` means)")
    ap.add_argument("--surogat-level", type=int, default=6, help="surogat gzip_level")
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--thread-pools", type=int, default=2)
    ap.add_argument("--thread-pool-min", type=int, default=50)
    ap.add_argument("-P", "--surogat-param", action="append", default=[],
                    help="extra surogat -p name=value (repeatable)")
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--json", help="also write every figure and raw wrk output here")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the work dir (logs, configs)")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.warmup, args.conns = 2, 0, "50"
    args.conns = [int(c) for c in args.conns.split(",")]
    args.clients = args.clients.split(",")
    if not set(args.clients) <= set(CLIENTS):
        sys.exit("--clients: gzip,identity")
    return args


def main():
    args = parse_args()
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)
    for tool in (args.wrk, args.nginx, args.surogatd, args.surogatctl, shutil.which("taskset")):
        if not tool or not os.access(tool, os.X_OK):
            sys.exit(f"missing tool: {tool}")
    if os.cpu_count() < 2:
        log("only one CPU: everything on core 0; figures are not comparable")
        args.proxy_cpu = args.client_cpu = 0
    args.nofile = 16384
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    workdir = tempfile.mkdtemp(prefix="surogat-bench-gzip-", dir=base)
    if not args.keep_tmp:
        pt.CLEANUP.append(workdir)
        atexit.register(shutil.rmtree, workdir, True)
    docroot = os.path.join(workdir, "docroot")
    os.makedirs(docroot)
    os.chmod(workdir, 0o755)
    os.chmod(docroot, 0o755)
    page = page_bytes(args.size)
    with open(os.path.join(docroot, PAGE_PATH[1:]), "wb") as f:
        f.write(page)
    os.chmod(os.path.join(docroot, PAGE_PATH[1:]), 0o644)

    origin_port = pt.free_port()
    origin = pt.start_nginx(args, "origin", "gzip-origin-nginx.conf.in", args.client_cpu,
                            workdir, PORT=origin_port, DOCROOT=docroot)
    pt.STARTED.append(origin.proc)
    nginx_port = pt.free_port()
    ngx = pt.start_nginx(args, "nginx-gzip", "gzip-nginx.conf.in", args.proxy_cpu, workdir,
                         PORT=nginx_port, DOCROOT=docroot, LEVEL=args.nginx_level)
    pt.STARTED.append(ngx.proc)
    ngx.name = "nginx-gzip"
    pt.wait_ready(origin.proc, origin_port, PAGE_PATH, len(page), "origin nginx")
    pt.wait_ready(ngx.proc, nginx_port, PAGE_PATH, len(page), "nginx gzip")
    sg = start_surogat(args, workdir, origin_port)
    sg.name = "surogat"
    pt.wait_ready(sg.proc, sg.port, PAGE_PATH, len(page), "surogat")

    sizes = {"surogat": check_server("surogat", sg.port, page, True),
             "nginx-gzip": check_server("nginx-gzip", ngx.port, page, False)}
    results = []
    for client in args.clients:
        for conns in args.conns:
            row = {"client": client, "conns": conns}
            for srv in (sg, ngx):
                r = measure(args, srv, client, conns)
                row[srv.name] = r
                log(f"{client:8} c{conns:<4} {srv.name:10} {pt.fmt_num(r['rps']):>10} req/s  "
                    f"p99 {pt.fmt_ms(r['p99'])}  non-2xx {r['non2xx']}  "
                    f"errors {r['sock_errors'] or '-'}")
            results.append(row)
    st = surogat_stats(args, sg.admin)

    print()
    print(f"# gzip: {len(page)} B HTML page; gzip sizes: surogat (level {args.surogat_level}) "
          f"{sizes['surogat']} B, nginx (level {args.nginx_level}) {sizes['nginx-gzip']} B")
    print(f"# {args.duration} s per run, surogat on core {args.proxy_cpu}, nginx gzip on core "
          f"{args.proxy_cpu}, wrk and origin on core {args.client_cpu}")
    print()
    print("| client | conns | surogat req/s | p99 | nginx gzip on req/s | p99 | surogat/nginx |")
    print("|---|---|---|---|---|---|---|")
    for row in results:
        a, b = row["surogat"], row["nginx-gzip"]
        print(f"| {row['client']} | {row['conns']} | {pt.fmt_num(a['rps'])} | "
              f"{pt.fmt_ms(a['p99'])} | {pt.fmt_num(b['rps'])} | {pt.fmt_ms(b['p99'])} | "
              f"{pt.ratio(a['rps'], b['rps'])} |")
    print()
    print(f"surogat: gzip_compressed {st.get('gzip_compressed')}, gunzip_delivered "
          f"{st.get('gunzip_delivered')}, cache_hit {st.get('cache_hit')}, backend_req "
          f"{st.get('backend_req')} (the page should be fetched and compressed once)")
    for row in results:
        if row["client"] == "gzip":
            r = pt.ratio(row["surogat"]["rps"], row["nginx-gzip"]["rps"])
            log(f"target: surogat >= 5x nginx gzip at c{row['conns']}: {r}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"page": len(page), "sizes": sizes, "results": results, "surogat": st,
                       "args": {k: v for k, v in vars(args).items()}}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
