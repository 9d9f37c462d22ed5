#!/usr/bin/python3
"""
slowclients -- a normal client's latency while thousands of slow clients
are connected: 2,000 connections sending a request head at 1 byte/s and
500 sending a POST body at 1 byte/s (tests/e2e/slowload.py), against
surogat and nginx as reverse proxies of one nginx origin serving a 1 KiB
file (Cache-Control: no-store: every request goes through to the origin).
Optionally against a second surogatd (--before PATH, e.g. main's build) to
show the difference.

  proxy under test            core 0   (taskset -c 0)
  origin, slow load, clients  core 1   (taskset -c 1)

For each proxy, fresh processes:
1. RSS, a probe and wrk without slow clients: --probes requests, each on a
   new connection (connect, GET, read to the end), --probe-gap apart; wrk
   as in 3.
2. The slow load opened (paced, 100 connections per 50 ms), then --settle
   seconds; RSS.
3. The same probe, then wrk (-c --conns, -t 1, --duration s, keep-alive)
   on the same file: p50, p99, max, req/s.
4. RSS again, and how many slow clients are still connected, answered or
   refused (a 503 means the proxy shed them).

Deadlines are lifted so that the slow clients stay for the whole
measurement, as the target scenario wants them: surogat timeout_req=300s,
nginx client_header_timeout and client_body_timeout 300s; a --before build,
which has no timeout_req, gets timeout_idle=300s (its bound on a head).

Every process it starts is stopped on exit.  Loopback only.  Python 3
stdlib only.  See bench/README.md.
"""

import argparse
import atexit
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import passthrough as pt  # noqa: E402 -- process handling, nginx start, wrk parsing

REPO = pt.REPO
log = pt.log
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import slowload  # noqa: E402 -- the slow clients, in a child process
FILE = ("/1k", 1024)


def rss_kib(pid):
    return pt.status_field(pid, "VmRSS")


def start_surogat(args, name, binary, workdir, origin_port, params):
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    srv = pt.Server(name, pt.free_port())
    srv.logfile = os.path.join(d, "stderr.log")
    argv = ["taskset", "-c", str(args.proxy_cpu), binary, "-F", "-j", "none",
            "-a", f"127.0.0.1:{srv.port}", "-b", f"127.0.0.1:{origin_port}", "-n", d]
    for p in params + args.surogat_param:
        argv += ["-p", p]
    srv.argv = argv
    srv.proc = pt.spawn(argv, srv.logfile)
    srv.pid = srv.proc.pid  # taskset execs: same pid
    pt.wait_ready(srv.proc, srv.port, FILE[0], FILE[1], name)
    return srv


def start_nginx(args, workdir, origin_port):
    port = pt.free_port()
    srv = pt.start_nginx(args, "nginx", "slow-nginx.conf.in", args.proxy_cpu, workdir,
                         PORT=port, ORIGIN_PORT=origin_port)
    pt.wait_ready(srv.proc, port, FILE[0], FILE[1], "nginx")
    return srv


def one_request(port, timeout):
    """GET on a new connection, read to the close: (seconds, status or an error)."""
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"GET %s HTTP/1.1\r\nHost: bench.test\r\nConnection: close\r\n\r\n"
                      % FILE[0].encode())
            data = b""
            while True:
                left = timeout - (time.monotonic() - t0)
                if left <= 0:
                    return time.monotonic() - t0, "timeout"
                s.settimeout(left)
                got = s.recv(65536)
                if not got:
                    break
                data += got
    except socket.timeout:
        return time.monotonic() - t0, "timeout"
    except OSError as e:
        return time.monotonic() - t0, type(e).__name__
    dt = time.monotonic() - t0
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", data)
    return dt, int(m.group(1)) if m else "garbage"


def pct(values, p):
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))] if v else None


def probe(args, port):
    times, bad = [], {}
    for _ in range(args.probes):
        dt, status = one_request(port, args.probe_timeout)
        times.append(dt * 1e3)
        if status != 200:
            bad[str(status)] = bad.get(str(status), 0) + 1
        time.sleep(args.probe_gap)
    return {"n": len(times), "p50": pct(times, 50), "p99": pct(times, 99), "max": max(times),
            "failed": bad}


def wrk(args, port):
    argv, out = pt.run_wrk(args, port, FILE[0], args.conns, False, args.duration)
    r = pt.parse_wrk(out)
    m = re.search(r"^\s+Latency\s+\S+\s+\S+\s+(\S+)", out, re.M)
    r["max"] = pt.to_ms(m.group(1)) if m else None
    r["argv"] = " ".join(argv)
    return r


def measure(args, srv):
    row = {"proxy": srv.name}
    row["rss_idle"] = rss_kib(srv.pid)
    row["probe_idle"] = probe(args, srv.port)
    row["wrk_idle"] = wrk(args, srv.port)
    log(f"{srv.name}: without slow clients, probe p99 {row['probe_idle']['p99']:.2f} ms; "
        f"opening {args.heads} slow heads and {args.bodies} slow bodies")
    load = slowload.Child(srv.port, args.heads, args.bodies, args.body_len,
                          argv_prefix=["taskset", "-c", str(args.client_cpu)])
    try:
        row["opened"] = load.opened
        time.sleep(args.settle)
        row["rss_load"] = rss_kib(srv.pid)
        row["threads_load"] = pt.threads(srv.pid)
        row["probe_load"] = probe(args, srv.port)
        row["wrk_load"] = wrk(args, srv.port)
        row["rss_end"] = rss_kib(srv.pid)
        row["threads_end"] = pt.threads(srv.pid)
        row["slow_end"] = load.check()
    finally:
        load.stop()
    p, w = row["probe_load"], row["wrk_load"]
    log(f"{srv.name}: under slow load, probe p50 {p['p50']:.2f} p99 {p['p99']:.2f} max "
        f"{p['max']:.2f} ms failed {p['failed']}; wrk {pt.fmt_num(w['rps'])} req/s p99 "
        f"{pt.fmt_ms(w['p99'])} max {pt.fmt_ms(w['max'])} non-2xx {w['non2xx']} "
        f"{w['sock_errors'] or ''}; RSS {row['rss_idle']} -> {row['rss_end']} KiB; slow "
        f"clients {row['slow_end']}")
    return row


def report(rows):
    head = ["proxy", "slow clients connected at the end", "probe p50", "probe p99",
            "probe max", "probe failures", "wrk req/s (without)", "wrk p50", "wrk p99", "wrk max",
            "RSS idle (MiB)", "RSS loaded (MiB)", "threads (load / end)"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        p, w, s = r["probe_load"], r["wrk_load"], r["slow_end"]
        answered = ", ".join(f"{n} got {k}" for k, n in sorted(s["statuses"].items()))
        slow = f"{s['alive']} of {r['opened']['heads'] + r['opened']['bodies']}"
        if answered:
            slow += f" ({answered})"
        fails = ", ".join(f"{n} {k}" for k, n in sorted(p["failed"].items())) or "0"
        errs = w["non2xx"] + sum(w["sock_errors"].values())
        cells = [r["proxy"], slow, f"{p['p50']:.2f}ms", f"{p['p99']:.2f}ms",
                 f"{p['max']:.2f}ms", fails,
                 pt.fmt_num(w["rps"]) + (f" ({errs} errors)" if errs else "") +
                 f" ({pt.fmt_num(r['wrk_idle']['rps'])})",
                 pt.fmt_ms(w["p50"]), pt.fmt_ms(w["p99"]), pt.fmt_ms(w["max"]),
                 pt.fmt_mib(r["rss_idle"]), pt.fmt_mib(max(r["rss_load"], r["rss_end"])),
                 f"{r['threads_load']} / {r['threads_end']}"]
        print("| " + " | ".join(cells) + " |")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build-bench", "surogatd"),
                    help="surogatd binary (default: the release build in build-bench/)")
    ap.add_argument("--before", help="a second surogatd to measure too (e.g. main's build)")
    ap.add_argument("--only", default="surogat,nginx",
                    help="comma-separated contenders among surogat,nginx (and before, "
                    "added by --before)")
    ap.add_argument("--heads", type=int, default=2000, help="slow-head connections")
    ap.add_argument("--bodies", type=int, default=500, help="slow-body connections")
    ap.add_argument("--body-len", type=int, default=1000, help="Content-Length of a slow body")
    ap.add_argument("--settle", type=float, default=3.0,
                    help="seconds between opening the slow load and measuring")
    ap.add_argument("--probes", type=int, default=200, help="new-connection requests per probe")
    ap.add_argument("--probe-gap", type=float, default=0.02, help="seconds between probes")
    ap.add_argument("--probe-timeout", type=float, default=5.0)
    ap.add_argument("--duration", type=int, default=10, help="seconds of the wrk run")
    ap.add_argument("--conns", type=int, default=10, help="wrk connections")
    ap.add_argument("--wrk-threads", type=int, default=1)
    ap.add_argument("-P", "--surogat-param", action="append", default=[],
                    help="extra surogat -p name=value (repeatable), for both surogat builds")
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--json", help="also write every figure here")
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    args.only = [n.strip() for n in args.only.split(",") if n.strip()]
    if args.before and "before" not in args.only:
        args.only.append("before")
    bad = [n for n in args.only if n not in ("surogat", "nginx", "before")]
    if bad or ("before" in args.only and not args.before):
        ap.error(f"--only: unknown {bad} (before needs --before PATH)")
    return args


def main():
    args = parse_args()
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)
    tools = [args.wrk, args.nginx, shutil.which("taskset")]
    tools += [args.surogatd] if "surogat" in args.only else []
    tools += [args.before] if "before" in args.only else []
    for tool in tools:
        if not tool or not os.access(tool, os.X_OK):
            sys.exit(f"missing: {tool}")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * (args.heads + args.bodies) + 4096
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (need if hard == resource.RLIM_INFINITY else min(need, hard), hard))
    args.nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if args.nofile < need:
        sys.exit(f"RLIMIT_NOFILE {args.nofile} is too low for {args.heads + args.bodies} slow "
                 f"clients: raise ulimit -n")
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    workdir = tempfile.mkdtemp(prefix="surogat-slow-bench-", dir=base)
    os.chmod(workdir, 0o755)  # nginx workers run as nobody
    if not args.keep_tmp:
        pt.CLEANUP.append(workdir)
        atexit.register(shutil.rmtree, workdir, True)
    docroot = os.path.join(workdir, "www")
    os.makedirs(docroot)
    with open(os.path.join(docroot, FILE[0].lstrip("/")), "wb") as f:
        f.write((b"0123456789abcdef" * (FILE[1] // 16 + 1))[:FILE[1]])
    origin_port = pt.free_port()
    origin = pt.start_nginx(args, "origin", "origin-nginx.conf.in", args.client_cpu, workdir,
                            PORT=origin_port, DOCROOT=docroot)
    pt.wait_ready(origin.proc, origin_port, FILE[0], FILE[1], "origin nginx")
    rows = []
    for name in args.only:
        # one proxy at a time, on fresh processes
        if name == "surogat":
            srv = start_surogat(args, "surogat", args.surogatd, workdir, origin_port,
                                ["timeout_idle=60s", "timeout_req=300s"])
        elif name == "before":
            srv = start_surogat(args, "surogat-before", args.before, workdir, origin_port,
                                ["timeout_idle=300s"])
        else:
            srv = start_nginx(args, workdir, origin_port)
        log(f"{srv.name} on 127.0.0.1:{srv.port} (pid {srv.pid}, core {args.proxy_cpu})")
        rows.append(measure(args, srv))
        if not srv.check_alive():
            log(f"!! {srv.name} died during the run")
        pt.stop(srv.proc)
        pt.STARTED.remove(srv.proc)
    report(rows)
    if args.json:
        meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "command": " ".join(sys.argv), "host": platform.node(),
                "nproc": os.cpu_count(), "heads": args.heads, "bodies": args.bodies,
                "body_len": args.body_len, "surogatd": args.surogatd, "before": args.before}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
