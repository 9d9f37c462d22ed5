#!/usr/bin/python3
"""
zipf -- the 10,000-URL working set of 1 KiB hits with Zipf popularity
(issue 15, item 4): surogat's CPU per request against a reference server
(bench/refserver.c: one thread, epoll, each URL's response serialised in
memory, one writev), interleaved, all servers running side by side.

  servers   core 0   (taskset -c 0)
  wrk       core 1   (-t2, lua/zipf.lua over the table of ranks)

Each surogatd (give --surogatd more than once to compare builds) gets
every URL stored first (one request each, through the nginx origin of
cachehit.py), so the measured runs are all hits.  Then for --rounds
rounds each server gets a warm-up and a measured wrk run; its CPU per
request is its utime+stime over the run (/proc/PID/stat) divided by the
requests wrk counted.  With --perf, `perf stat -e EVENTS -p PID` runs
beside each measured run and its counts per request are reported too.

Every process it starts is stopped on exit.  Traffic on 127.0.0.1 only.
Python 3 stdlib, wrk, nginx, cc; perf for --perf.
"""

import argparse
import atexit
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import cachehit as ch  # noqa: E402
import passthrough as pt  # noqa: E402

log = pt.log
PREFIX = "/z50/"


def perf_start(args, pid):
    if not args.perf:
        return None
    return subprocess.Popen(["perf", "stat", "-x,", "-e", args.perf, "-p", str(pid)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)


def perf_stop(p):
    if p is None:
        return {}
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    out = {}
    for line in err.decode(errors="replace").splitlines():
        f = line.split(",")
        if len(f) > 3 and re.fullmatch(r"\d+", f[0]):
            out[f[2]] = int(f[0])
    return out


def run(args, name, pid, port):
    ch.run_wrk(args, port, "/", args.conns, args.warmup, script=args.lua,
               script_args=(args.table, PREFIX, args.urls), latency=False)
    pf = perf_start(args, pid)
    t0 = pt.proc_ticks(pid)
    _, out = ch.run_wrk(args, port, "/", args.conns, args.duration, script=args.lua,
                        script_args=(args.table, PREFIX, args.urls))
    t1 = pt.proc_ticks(pid)
    ev = perf_stop(pf)
    row = pt.parse_wrk(out)
    n = row.get("requests") or 0
    row["name"] = name
    row["us_per_req"] = (t1 - t0) / ch.CLK_TCK / n * 1e6 if n else None
    row["perf"] = {k: v / n for k, v in ev.items()} if n else {}
    log(f"{name}: {row.get('rps')} req/s, {row['us_per_req']:.2f} us/req "
        + " ".join(f"{k}={v:.1f}" for k, v in row["perf"].items()))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--surogatd", action="append", default=None)
    ap.add_argument("--urls", type=int, default=10000)
    ap.add_argument("--zipf-s", type=float, default=1.0)
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--duration", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--perf", default=None,
                    help="perf stat events, e.g. instructions,cache-misses,LLC-load-misses")
    ap.add_argument("-P", "--surogat-param", action="append", default=[])
    ap.add_argument("--thread-pools", type=int, default=2)
    ap.add_argument("--thread-pool-min", type=int, default=250)
    ap.add_argument("--fill-conns", type=int, default=32)
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    args = ap.parse_args()
    args.surogatd = args.surogatd or [os.path.join(ch.REPO, "build-bench", "surogatd")]
    args.nofile = 65536
    args.lua = os.path.join(ch.LUA, "zipf.lua")
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)

    workdir = tempfile.mkdtemp(prefix="surogat-zipf-", dir="/dev/shm")
    os.chmod(workdir, 0o755)
    atexit.register(lambda: (pt.stop_all(), shutil.rmtree(workdir, True)))
    ref = os.path.join(workdir, "refserver")
    subprocess.run(["cc", "-O2", "-o", ref, os.path.join(BENCH, "refserver.c")], check=True)
    docroot = os.path.join(workdir, "www")
    os.makedirs(os.path.join(docroot, "z"))
    ch.write_file(os.path.join(docroot, "1k"), ch.body_bytes(1024))
    for i in range(args.urls):
        ch.write_file(os.path.join(docroot, "z", str(i)), ch.body_bytes(1024, b"%d " % i))
    for d in (docroot, os.path.join(docroot, "z")):
        os.chmod(d, 0o755)
    args.table = os.path.join(workdir, "zipf.txt")
    ch.zipf_table(args.table, args.urls, args.zipf_s, 1 << 20)
    origin_port = pt.free_port()
    origin = pt.start_nginx(args, "origin", "cache-origin-nginx.conf.in", args.client_cpu,
                            workdir, PORT=origin_port, DOCROOT=docroot)
    pt.wait_ready(origin.proc, origin_port, "/1k", 1024, "origin nginx")

    servers = []
    rport = pt.free_port()
    rp = pt.spawn(["taskset", "-c", str(args.proxy_cpu), ref, str(rport), str(args.urls)],
                  os.path.join(workdir, "ref.log"))
    pt.wait_ready(rp, rport, "/1k", 1024, "refserver")
    servers.append(("reference", rp.pid, rport))
    for i, b in enumerate(args.surogatd):
        a = argparse.Namespace(**vars(args))
        a.surogatd = b
        a.surogatctl = os.path.join(os.path.dirname(b), "surogatctl")
        port = pt.free_port()
        srv = ch.start_surogat(a, f"s{i}", workdir, port, origin_port, "malloc,1g")
        pt.wait_ready(srv.proc, port, "/1k", 1024, b, timeout=60)
        f = ch.fill(a, srv, PREFIX, args.urls)
        if not f.get("complete"):
            sys.exit(f"{b}: the fill did not complete: {f}")
        servers.append((b, srv.pid, port))
    rows = []
    for r in range(args.rounds):
        order = servers if r % 2 == 0 else servers[::-1]
        for name, pid, port in order:
            rows.append(run(args, name, pid, port))
    print(f"\n{args.urls:,} URLs of 1 KiB, Zipf s={args.zipf_s:g}, wrk -t{args.wrk_threads} "
          f"-c{args.conns}, {args.duration} s runs after {args.warmup} s warm-ups, "
          f"{args.rounds} rounds interleaved\n")
    evs = args.perf.split(",") if args.perf else []
    print("| server | req/s (median) | CPU us/req (median) | runs (us/req) | x reference | "
          + "".join(f" {e}/req |" for e in evs))
    print("|---|--:|--:|---|--:|" + "--:|" * len(evs))
    refmed = statistics.median(x["us_per_req"] for x in rows if x["name"] == "reference")
    for name, _, _ in servers:
        rs = [x for x in rows if x["name"] == name]
        med = statistics.median(x["us_per_req"] for x in rs)
        cells = [f"{statistics.median(x['perf'].get(e, 0) for x in rs):,.1f}" for e in evs]
        print(f"| {name} | {statistics.median(x.get('rps') or 0 for x in rs):,.0f} | {med:.2f} | "
              + ", ".join(f"{x['us_per_req']:.2f}" for x in rs)
              + f" | {med / refmed:.2f} |" + "".join(f" {c} |" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
