#!/usr/bin/python3
"""
policy -- what a policy script costs on cache hits: surogat without a
script, with vcl/builtin.lua and with vcl/apache-front.lua, next to
Varnish 7 with the equivalent VCL (bench/vcl/), all in front of one nginx
origin serving files from tmpfs, same pinning, one run.

  proxy under test   core 0   (taskset -c 0)
  wrk, origin nginx  core 1   (taskset -c 1)

The same requests go to every proxy: a mix of static files by extension
(.css .js .png .woff2) and pages, 1 KiB each, fresh for an hour.
Workload `plain` sends no cookies: every contender answers from its cache.
Workload `cookies` sends analytics cookies (_ga, _gid) with every request:
apache-front drops them and still hits, the builtin policies pass every
request to the origin.  Prints requests/s, latency and the ratios.
Every process it starts is stopped on exit; traffic stays on 127.0.0.1.
Python 3 stdlib only.  See bench/README.md.
"""

import argparse
import atexit
import json
import os
import platform
import shutil
import signal
import sys
import tempfile
import time

import cachehit as ch
import passthrough as pt

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = pt.REPO
VCL = os.path.join(BENCH, "vcl")
log = pt.log

# name: (kind, surogat script or Varnish VCL template)
PROXIES = {
    "surogat": ("surogat", None),
    "surogat-builtin": ("surogat", os.path.join(REPO, "vcl", "builtin.lua")),
    "surogat-apache": ("surogat", os.path.join(REPO, "vcl", "apache-front.lua")),
    "varnish-builtin": ("varnish", "builtin-equivalent.vcl.in"),
    "varnish-apache": ("varnish", "apache-front.vcl.in"),
}
# (numerator, denominator): the cost of each script, and each against Varnish.
RATIOS = [("surogat-builtin", "surogat"), ("surogat-apache", "surogat"),
          ("surogat", "varnish-builtin"), ("surogat-builtin", "varnish-builtin"),
          ("surogat-apache", "varnish-apache")]
SHORT = {"surogat": "s", "surogat-builtin": "sb", "surogat-apache": "sa",
         "varnish-builtin": "vb", "varnish-apache": "va"}
WORKLOADS = {"plain": "",
             "cookies": "_ga=GA1.2.1234567890.1700000000; _gid=GA1.2.987654321.1700000000"}
STATIC_EXT = ["css", "js", "png", "woff2"]
BODY_SIZE = 1024


def site(docroot, n):
    """n static files (the extensions in turn) and n pages; their paths."""
    paths = []
    for d in ("static", "page"):
        os.makedirs(os.path.join(docroot, d), exist_ok=True)
        os.chmod(os.path.join(docroot, d), 0o755)
    for i in range(n):
        for p in (f"/static/{i}.{STATIC_EXT[i % len(STATIC_EXT)]}", f"/page/{i}"):
            ch.write_file(docroot + p, ch.body_bytes(BODY_SIZE, p.encode()))
            paths.append(p)
    return paths


def start_target(args, name, workdir, origin_port, probe):
    kind, what = PROXIES[name]
    port = pt.free_port()
    storage = f"malloc,{args.store_size}"
    if kind == "surogat":
        srv = ch.start_surogat(args, name, workdir, port, origin_port, storage,
                               extra=["-f", what] if what else [])
    else:
        srv = ch.start_varnish(args, name, workdir, port, origin_port, storage,
                               template=os.path.join(VCL, what))
    srv.name = name
    pt.wait_ready(srv.proc, port, probe, BODY_SIZE, name, timeout=60)
    log(f"{name} on 127.0.0.1:{port} (pid {srv.pid}, core {args.proxy_cpu}) "
        f"{os.path.basename(what) if what else 'no script'}")
    return srv


def get(port, path, cookie, timeout=10.0):
    """(status, headers with lower-case names) of one GET."""
    req = ch.urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if cookie:
        req.add_header("Cookie", cookie)
    with ch.urllib.request.urlopen(req, timeout=timeout) as r:
        r.read()
        return r.status, {k.lower(): v for k, v in r.headers.items()}


def warm(srv, paths, cookie):
    """Every path once, then the hit check on the first static file and page
    (plain workload: both must be hits everywhere); the header that says so."""
    for p in paths:
        status, _ = get(srv.port, p, cookie)
        if status != 200:
            raise RuntimeError(f"{srv.name}: GET {p}: status {status}")
    seen = []
    for p in paths[:2]:
        _, h = get(srv.port, p, cookie)
        hit, what = ch.hit_seen(srv.kind, h)
        seen.append({"path": p, "hit": hit, "header": what})
    return seen


def measure(args, srv, origin, paths_file, paths, workload):
    cookie = WORKLOADS[workload]
    row = {"proxy": srv.name, "workload": workload, "conns": args.conns}
    if not srv.check_alive():
        row["error"] = srv.dead
        return row
    try:
        row["warm"] = warm(srv, paths, cookie)
    except Exception as e:  # noqa: BLE001 -- reported, the others go on
        row["error"] = f"warming: {e}"
        return row
    if workload == "plain" and not all(w["hit"] for w in row["warm"]):
        row["error"] = f"not a hit after warming: {row['warm']}"
    ch.run_wrk(args, srv.port, "/", args.conns, args.warmup, script=args.mix_lua,
               script_args=[paths_file, cookie], latency=False)
    t0, busy0 = pt.proc_ticks(srv.pid), pt.cpu_times()
    _, o0 = ch.origin_counts(origin.port)
    c0 = ch.cache_counters(args, srv)
    start = time.monotonic()
    argv, out = ch.run_wrk(args, srv.port, "/", args.conns, args.duration,
                           script=args.mix_lua, script_args=[paths_file, cookie])
    wall = time.monotonic() - start
    t1, busy1 = pt.proc_ticks(srv.pid), pt.cpu_times()
    _, o1 = ch.origin_counts(origin.port)
    c1 = ch.cache_counters(args, srv)
    row.update(pt.parse_wrk(out))
    row["wrk_argv"] = argv
    if t0 is not None and t1 is not None:
        row["proxy_cpu_pct"] = round(100.0 * (t1 - t0) / pt.CLK_TCK / wall, 1)
    row["core_busy_pct"] = {c: round(100.0 * (busy1[c][0] - busy0[c][0])
                                     / max(1, busy1[c][1] - busy0[c][1]), 1) for c in busy1}
    # the second stub_status request counts itself
    row["origin_reqs"] = None if o0 is None or o1 is None else max(0, o1 - o0 - 1)
    if row.get("requests") and row["origin_reqs"] is not None:
        # wrk does not count the requests still in flight when it stops: clamp
        row["no_origin_pct"] = max(0.0, round(
            100.0 * (1 - row["origin_reqs"] / row["requests"]), 1))
    if c0.get("hit") is not None and c1.get("hit") is not None:
        row["proxy_hits"] = c1["hit"] - c0["hit"]
    if not srv.check_alive():
        row["error"] = srv.dead
    if row.get("rps") is None:
        row["error"] = row.get("error") or "wrk gave no figure"
    return row


def report(args, meta, rows):
    lines = []
    add = lines.append
    names = [n for n in PROXIES if n in args.targets]
    for workload in args.workloads:
        add(f"### {workload}: {len(args.paths)} URLs ({args.objects} static files and "
            f"{args.objects} pages, {BODY_SIZE} B), {args.conns} connections"
            + (", Cookie: " + WORKLOADS[workload] if WORKLOADS[workload] else ""))
        add("")
        add("| proxy | req/s | p50 | p99 | proxy CPU % | req/s per core "
            "| no origin % | errors |")
        add("|---|--:|--:|--:|--:|--:|--:|---|")
        by = {}
        for r in rows:
            if r["workload"] != workload:
                continue
            by[r["proxy"]] = r
            cpu = r.get("proxy_cpu_pct")
            per = r["rps"] / (cpu / 100.0) if r.get("rps") and cpu else None
            errs = r.get("error") or ""
            if r.get("non2xx"):
                errs += f" non-2xx {r['non2xx']}"
            if r.get("sock_errors"):
                errs += f" sock {r['sock_errors']}"
            add(f"| {r['proxy']} | {pt.fmt_num(r.get('rps'))} | {pt.fmt_ms(r.get('p50'))} "
                f"| {pt.fmt_ms(r.get('p99'))} | {pt.fmt_pct(cpu)} | {pt.fmt_num(per)} "
                f"| {pt.fmt_pct(r.get('no_origin_pct'))} | {errs.strip() or '0'} |")
        add("")
        ratios = []
        for a, b in RATIOS:
            if a in names and b in names:
                rps = [by.get(x, {}).get("rps") for x in (a, b)]
                ratios.append(f"{SHORT[a]}/{SHORT[b]} {pt.ratio(*rps)}")
        if ratios:
            add("Ratios of req/s: " + ", ".join(ratios) + "  "
                f"({', '.join(f'{v}={k}' for k, v in SHORT.items() if k in names)})")
            add("")
    return "\n".join(lines)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build-bench", "surogatd"),
                    help="surogatd binary (default: <repo>/build-bench/surogatd)")
    ap.add_argument("--surogatctl", default=None,
                    help="surogatctl binary (default: next to --surogatd)")
    ap.add_argument("--only", default=None, help="comma-separated subset of " + ",".join(PROXIES))
    ap.add_argument("--workloads", default="plain,cookies", help="plain,cookies")
    ap.add_argument("--quick", action="store_true", help="smoke mode: 2 s runs, 1 s warmup")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured wrk run")
    ap.add_argument("--warmup", type=int, default=3, help="seconds of wrk warmup before each run")
    ap.add_argument("--conns", type=int, default=50, help="wrk connections")
    ap.add_argument("--objects", type=int, default=64,
                    help="static files, and as many pages, in the mix")
    ap.add_argument("--store-size", default="256m", help="-s malloc,SIZE for every proxy")
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds between starting the proxies and the first measurement")
    ap.add_argument("--wait-idle", type=float, default=300.0,
                    help="seconds to wait for an idle machine before starting")
    ap.add_argument("--thread-pools", type=int, default=2,
                    help="thread_pools for surogat and varnish")
    ap.add_argument("--thread-pool-min", type=int, default=250,
                    help="thread_pool_min for surogat and varnish (per pool)")
    ap.add_argument("-P", "--surogat-param", action="append", default=[],
                    help="extra surogat -p name=value (repeatable)")
    ap.add_argument("--varnish-param", action="append", default=[],
                    help="extra varnishd -p name=value (repeatable)")
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--varnishd", default="/usr/sbin/varnishd")
    ap.add_argument("--varnishstat", default=shutil.which("varnishstat") or "/usr/bin/varnishstat")
    ap.add_argument("--json", help="also write every figure and raw wrk output here")
    ap.add_argument("--markdown", help="also write the tables here")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the work dir (logs, configs)")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.warmup, args.settle = 2, 1, 2.0
    args.surogatctl = args.surogatctl or os.path.join(os.path.dirname(args.surogatd),
                                                      "surogatctl")
    args.targets = args.only.split(",") if args.only else list(PROXIES)
    for t in args.targets:
        if t not in PROXIES:
            sys.exit(f"--only: unknown proxy {t}")
    args.workloads = args.workloads.split(",")
    for w in args.workloads:
        if w not in WORKLOADS:
            sys.exit(f"--workloads: unknown workload {w}")
    args.mix_lua = os.path.join(BENCH, "lua", "mix.lua")
    return args


def main():
    args = parse_args()
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)
    if any(PROXIES[t][0] == "surogat" for t in args.targets):
        for b in (args.surogatd, args.surogatctl):
            if not os.access(b, os.X_OK):
                sys.exit(f"missing {b} (build it, or --only without surogat)")
    for tool in (args.wrk, args.nginx, shutil.which("taskset")):
        if not tool or not os.access(tool, os.X_OK):
            sys.exit(f"missing tool: {tool}")
    if any(PROXIES[t][0] == "varnish" for t in args.targets):
        for tool in (args.varnishd, args.varnishstat):
            if not os.access(tool, os.X_OK):
                sys.exit(f"missing {tool}")
    if os.cpu_count() < 2:
        log("only one CPU: proxy, wrk and origin all on core 0; figures are not comparable")
        args.proxy_cpu = args.client_cpu = 0
    args.nofile = pt.resource.getrlimit(pt.resource.RLIMIT_NOFILE)[0]

    versions = {"nginx": pt.tool_version([args.nginx, "-v"]),
                "wrk": pt.tool_version([args.wrk, "--version"]),
                "python": platform.python_version()}
    if any(PROXIES[t][0] == "varnish" for t in args.targets):
        versions["varnish"] = pt.tool_version([args.varnishd, "-V"])
    if any(PROXIES[t][0] == "surogat" for t in args.targets):
        versions["surogat"] = ch.surogat_version(args.surogatd)
    meta = pt.machine_meta(args, versions)
    meta["busy_before_pct"] = pt.wait_idle(args.wait_idle)
    if any(v > 10 for v in meta["busy_before_pct"].values()):
        log(f"!! the machine is not idle before the run (busy % per core: "
            f"{meta['busy_before_pct']}): figures will be noisy")

    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    workdir = tempfile.mkdtemp(prefix="surogat-policy-", dir=base)
    os.chmod(workdir, 0o755)  # nginx workers and varnish drop privileges
    if not args.keep_tmp:
        pt.CLEANUP.append(workdir)

        def cleanup():
            pt.stop_all()
            shutil.rmtree(workdir, True)
        atexit.register(cleanup)
    else:
        log(f"work dir kept: {workdir}")

    docroot = os.path.join(workdir, "www")
    os.makedirs(docroot)
    os.chmod(docroot, 0o755)
    args.paths = site(docroot, args.objects)
    paths_file = os.path.join(workdir, "paths.txt")
    with open(paths_file, "w") as f:
        f.write("\n".join(args.paths) + "\n")

    origin_port = pt.free_port()
    origin = pt.start_nginx(args, "origin", "cache-origin-nginx.conf.in", args.client_cpu,
                            workdir, PORT=origin_port, DOCROOT=docroot)
    origin.name = "origin"
    pt.wait_ready(origin.proc, origin_port, args.paths[0], BODY_SIZE, "origin nginx")
    log(f"origin nginx on 127.0.0.1:{origin_port} (pid {origin.proc.pid}, core {args.client_cpu})")

    servers, meta["start_errors"], meta["argv"] = {}, {}, {}
    for name in args.targets:
        try:
            servers[name] = start_target(args, name, workdir, origin_port, args.paths[0])
            meta["argv"][name] = servers[name].argv
        except Exception as e:  # noqa: BLE001 -- a proxy that fails to start is reported
            log(f"!! {name} failed to start: {e}")
            meta["start_errors"][name] = str(e)
    time.sleep(args.settle)

    rows = []
    order = list(servers)
    for i, workload in enumerate(args.workloads):
        # the order rotates from one workload to the next
        for name in order[i % len(order):] + order[:i % len(order)] if order else []:
            log(f"{workload}: {name}")
            r = measure(args, servers[name], origin, paths_file, args.paths, workload)
            log(f"  {pt.fmt_num(r.get('rps'))} req/s, "
                f"no origin {pt.fmt_pct(r.get('no_origin_pct'))}"
                + (f", ERROR {r['error']}" if r.get("error") else ""))
            rows.append(r)
    meta["dead"] = {n: s.dead for n, s in servers.items() if s.dead}
    for s in servers.values():
        pt.stop(s.proc)
    meta["loadavg_end"] = open("/proc/loadavg").read().split()[:3]

    text = report(args, meta, rows)
    head = (f"surogat policy benchmark, {meta['date']}, {meta['nproc']} x {meta['cpu_model']}, "
            f"proxy on core {args.proxy_cpu}, wrk+origin on core {args.client_cpu}, "
            f"{args.duration}s runs after {args.warmup}s warmup, wrk -t {args.wrk_threads}; "
            f"busy % per core before the run: {meta['busy_before_pct']}\n")
    print("\n" + head + "\n" + text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(head + "\n" + text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "runs": rows}, f, indent=1)
    pt.stop_all()
    bad = meta["dead"] or meta["start_errors"] or any(r.get("error") for r in rows)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
