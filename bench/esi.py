#!/usr/bin/python3
"""
esi -- an ESI page with 4 includes on the hit path: surogat beside Varnish 7
with ESI on the same page, and the same page assembled as one plain object
for reference; same pinning as passthrough.py, one run.

  proxy under test   core 0   (taskset -c 0)
  wrk, origin nginx  core 1   (taskset -c 1)

The page (--page-size, 10 KiB of HTML by default) holds 4
<esi:include src="/frag/N.html"/> spread over it; each fragment is
--frag-size bytes (1 KiB).  Everything is fresh for an hour at the origin,
so after warming every include is a cache hit: what is measured is the
assembly.  surogat is told by Surrogate-Control (sent by the origin for the
page), Varnish by its VCL (beresp.do_esi); both store HTML gzip
(surogat: http_gzip_support with the page over gzip_min_size; Varnish:
beresp.do_gzip), so a client sending Accept-Encoding: gzip gets a stream
stitched from compressed pieces and one that does not gets identity.
/plain.html is the assembled page as one object, the cost of a plain hit
of the same size.

For each server, path and Accept-Encoding: requests/s, p50 and p99, and the
server's CPU per request (its ticks over the requests).  Every answer is
checked (decoded) against the assembled page before measuring.

Every process it starts is stopped on exit.  Traffic goes to 127.0.0.1
only.  Python 3 stdlib only.  See bench/README.md.
"""

import argparse
import atexit
import http.client
import json
import os
import shutil
import signal
import sys
import tempfile
import zlib

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import passthrough as pt  # noqa: E402 -- process handling, /proc readers, wrk parsing

REPO = pt.REPO
log = pt.log
NINC = 4


def make_site(root, page_size, frag_size):
    """The page, its fragments, and the page as assembled; returns the assembled bytes."""
    os.makedirs(os.path.join(root, "frag"))
    for d in (root, os.path.join(root, "frag")):
        os.chmod(d, 0o755)
    frags = []
    for i in range(NINC):
        items = b"".join(b"<li>fragment %d, item %d</li>\n" % (i, n)
                         for n in range(frag_size // 20 + 1))
        frags.append((b"<ul>\n" + items)[:frag_size - 6] + b"</ul>\n")
    lines = [b"<p>paragraph %d of the page, with some words in it</p>\n" % n
             for n in range(page_size // 50)]
    step = len(lines) // (NINC + 1)
    page, assembled = [b"<!DOCTYPE html>\n<html><body>\n"], [b"<!DOCTYPE html>\n<html><body>\n"]
    for n, line in enumerate(lines):
        if n > 0 and n % step == 0 and n // step <= NINC:
            i = n // step - 1
            page.append(b'<esi:include src="/frag/%d.html"/>\n' % i)
            assembled.append(frags[i] + b"\n")
        page.append(line)
        assembled.append(line)
    page.append(b"</body></html>\n")
    assembled.append(b"</body></html>\n")
    files = {"page.html": b"".join(page), "plain.html": b"".join(assembled)}
    files.update({"frag/%d.html" % i: f for i, f in enumerate(frags)})
    for name, data in files.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
        os.chmod(os.path.join(root, name), 0o644)
    return files["plain.html"], len(files["page.html"])


def get(port, path, gzip):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path, headers={"Accept-Encoding": "gzip"} if gzip else {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def decode(h, body):
    if h.get("content-encoding") == "gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = d.decompress(body) + d.flush()
        if not d.eof or d.unused_data:
            raise ValueError("not one gzip stream")
        return out
    return body


def check(srv, want):
    """Warm the caches, then every answer must be the assembled page, hit, in the coding asked."""
    for path in ("/page.html", "/plain.html"):
        for gzip in (False, True):
            for _ in range(3):
                status, h, body = get(srv.port, path, gzip)
            if status != 200 or decode(h, body) != want:
                raise SystemExit(f"{srv.name}: {path} gzip={gzip}: {status} {h} "
                                 f"{decode(h, body)[:200]!r}")
            if gzip != (h.get("content-encoding") == "gzip"):
                raise SystemExit(f"{srv.name}: {path} gzip={gzip}: Content-Encoding {h}")
            hit = (h.get("cache-status", "").startswith("surogat; hit") or
                   len(h.get("x-varnish", "").split()) == 2)
            if not hit:
                raise SystemExit(f"{srv.name}: {path}: not a hit: {h}")


def start_surogat(args, workdir, port, origin_port):
    d = os.path.join(workdir, "surogat")
    os.makedirs(d, exist_ok=True)
    srv = pt.Server("surogat", port)
    srv.logfile = os.path.join(d, "stderr.log")
    argv = ["taskset", "-c", str(args.proxy_cpu), args.surogatd, "-F", "-j", "none",
            "-a", f"127.0.0.1:{port}", "-b", f"127.0.0.1:{origin_port}", "-n", d,
            "-p", f"thread_pools={args.thread_pools}",
            "-p", f"thread_pool_min={args.thread_pool_min}", "-p", "timeout_idle=60s"]
    for p in args.surogat_param:
        argv += ["-p", p]
    srv.argv = argv
    srv.proc = pt.spawn(argv, srv.logfile)
    srv.pid = srv.proc.pid
    return srv


def measure(args, srv, path, gzip):
    headers = ["Accept-Encoding: gzip"] if gzip else []
    if args.warmup > 0:
        pt.run_wrk(args, srv.port, path, args.conns, False, args.warmup, False, headers)
    t0 = pt.proc_ticks(srv.pid)
    argv, out = pt.run_wrk(args, srv.port, path, args.conns, False, args.duration, True, headers)
    ticks = (pt.proc_ticks(srv.pid) or 0) - (t0 or 0)
    r = pt.parse_wrk(out)
    r["argv"] = argv
    r["cpu_us_per_req"] = (ticks / pt.CLK_TCK * 1e6 / r["requests"]) if r.get("requests") else None
    if not srv.check_alive():
        r["error"] = srv.dead
    return r


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build", "surogatd"))
    ap.add_argument("--varnishd", default=shutil.which("varnishd") or "/usr/sbin/varnishd")
    ap.add_argument("--quick", action="store_true", help="smoke mode: 2 s runs, no warmup")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured wrk run")
    ap.add_argument("--warmup", type=int, default=2, help="seconds of warmup before each run")
    ap.add_argument("--conns", type=int, default=50, help="wrk connections")
    ap.add_argument("--page-size", type=int, default=10 * 1024)
    ap.add_argument("--frag-size", type=int, default=1024)
    ap.add_argument("--only", help="comma-separated subset: surogat,varnish")
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--thread-pools", type=int, default=2)
    ap.add_argument("--thread-pool-min", type=int, default=50)
    ap.add_argument("-P", "--surogat-param", action="append", default=[],
                    help="extra surogat -p name=value (repeatable)")
    ap.add_argument("--varnish-param", action="append", default=[],
                    help="extra varnishd -p name=value (repeatable)")
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--json", help="also write every figure and raw wrk output here")
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.warmup = 2, 0
    return args


def main():
    args = parse_args()
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)
    only = set(args.only.split(",")) if args.only else {"surogat", "varnish"}
    tools = [args.wrk, args.nginx, shutil.which("taskset")]
    tools += [args.surogatd] if "surogat" in only else []
    tools += [args.varnishd] if "varnish" in only else []
    for tool in tools:
        if not tool or not os.access(tool, os.X_OK):
            sys.exit(f"missing tool: {tool}")
    if os.cpu_count() < 2:
        log("only one CPU: everything on core 0; figures are not comparable")
        args.proxy_cpu = args.client_cpu = 0
    args.nofile = 16384
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    workdir = tempfile.mkdtemp(prefix="surogat-bench-esi-", dir=base)
    os.chmod(workdir, 0o755)
    if not args.keep_tmp:
        pt.CLEANUP.append(workdir)
        atexit.register(shutil.rmtree, workdir, True)
    root = os.path.join(workdir, "docroot")
    want, page_len = make_site(root, args.page_size, args.frag_size)
    origin = pt.start_nginx(args, "origin", "esi-origin-nginx.conf.in", args.client_cpu, workdir,
                            PORT=pt.free_port(), DOCROOT=root)
    pt.wait_ready(origin.proc, origin.port, "/plain.html", len(want), "origin")
    servers = []
    if "surogat" in only:
        servers.append(start_surogat(args, workdir, pt.free_port(), origin.port))
    if "varnish" in only:
        servers.append(pt.start_varnish(args, workdir, pt.free_port(), origin.port,
                                        "varnish-esi.vcl.in"))
    for srv in servers:
        pt.wait_ready(srv.proc, srv.port, "/plain.html", len(want), srv.name)
        check(srv, want)
        log(f"{srv.name} on 127.0.0.1:{srv.port}: ESI page and plain page checked")
    results = []
    for path in ("/page.html", "/plain.html"):
        for gzip in (False, True):
            for srv in servers:
                r = measure(args, srv, path, gzip)
                r.update(server=srv.name, path=path, gzip=gzip)
                results.append(r)
                log(f"{path:11} {'gzip' if gzip else 'identity':8} {srv.name:8} "
                    f"{pt.fmt_num(r.get('rps')):>9} req/s  p99 {pt.fmt_ms(r.get('p99'))}  "
                    f"{r.get('cpu_us_per_req') or 0:6.1f} us CPU/req  non2xx {r.get('non2xx', 0)}")
    print()
    print(f"# page {page_len} B with {NINC} includes of {args.frag_size} B "
          f"({len(want)} B assembled), all hits; {args.duration} s per run, {args.conns} "
          f"connections, proxy on core {args.proxy_cpu}, wrk and origin on core {args.client_cpu}")
    print()
    print("| path | client | server | req/s | p50 | p99 | CPU us/request |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['path']} | {'gzip' if r['gzip'] else 'identity'} | {r['server']} | "
              f"{pt.fmt_num(r.get('rps'))} | {pt.fmt_ms(r.get('p50'))} | "
              f"{pt.fmt_ms(r.get('p99'))} | {r.get('cpu_us_per_req') or 0:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
