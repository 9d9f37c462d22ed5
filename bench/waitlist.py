#!/usr/bin/python3
"""
waitlist -- thousands of requests coalesced on one slow fetch: what each
waiting client costs the proxy, and whether it still serves other URLs
meanwhile.  surogat (waiting lists), an older surogatd (--before, whose
waiting requests each held a worker), Varnish (its waiting list) and nginx
(proxy_cache_lock), all with at most --threads worker threads where the
server has threads.

  proxy under test                       core 0   (taskset -c 0)
  origin, the crowd of waiters, wrk      core 1

For each contender, fresh processes:
1. /other (a 1 KiB cacheable page) fetched once, so it is a hit; RSS.
2. --waiters clients each send GET /slow, which the origin holds (an
   in-process origin, tests/e2e/origins.py, hold_head); once all are sent
   and --settle seconds passed: RSS, threads, how many are still open.
3. wrk on /other for --duration seconds (--conns keep-alive connections):
   req/s, p50, p99, non-2xx answers and socket errors.
4. /slow released: seconds until every waiter has its answer, how many got
   a 200, how many requests for /slow the origin saw.

Every process it starts is stopped on exit.  Loopback only.  Python 3
stdlib only.  See bench/README.md.
"""

import argparse
import atexit
import json
import os
import platform
import resource
import shutil
import signal
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import cachehit as ch  # noqa: E402 -- how each cache is started as in the hit benchmark
import passthrough as pt  # noqa: E402 -- process handling, wrk parsing

REPO = pt.REPO
log = pt.log
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
from crowd import Crowd  # noqa: E402
import origins  # noqa: E402

SLOW_BODY = b"the slow page " * 512
OTHER_BODY = b"x" * 1024
CC = {"Cache-Control": "max-age=3600"}


def start(args, name, workdir, origin_port):
    port = pt.free_port()
    if name in ("surogat", "before"):
        binary = args.surogatd if name == "surogat" else args.before
        saved = args.surogatd
        args.surogatd = binary
        try:
            srv = ch.start_surogat(args, name, workdir, port, origin_port, "malloc,256m")
        finally:
            args.surogatd = saved
    elif name == "varnish":
        srv = ch.start_varnish(args, name, workdir, port, origin_port, "malloc,256m")
    else:
        srv = pt.start_nginx(args, name, "waitlist-nginx.conf.in", args.proxy_cpu, workdir,
                             PORT=port, ORIGIN_PORT=origin_port)
    pt.wait_ready(srv.proc, port, "/other", len(OTHER_BODY), name)
    return srv


def measure(args, name, srv, origin, slow):
    row = {"proxy": name}
    row["rss_idle"] = pt.status_field(srv.pid, "VmRSS")
    crowd = Crowd(srv.port, "/slow", args.waiters, host="bench.test")
    try:
        t0 = time.monotonic()
        crowd.open(time.monotonic() + 120)
        row["open_secs"] = time.monotonic() - t0
        if not slow.held.wait(30):
            raise RuntimeError(f"{name}: the origin never got /slow")
        crowd.pump(lambda: False, args.settle)
        row["rss_waiting"] = pt.status_field(srv.pid, "VmRSS")
        row["threads_waiting"] = pt.threads(srv.pid)
        row["early"] = sum(1 for v in crowd.got.values() if v)  # answered before the release
        argv, out = pt.run_wrk(args, srv.port, "/other", args.conns, False, args.duration)
        w = pt.parse_wrk(out)
        w["argv"] = " ".join(argv)
        row["wrk"] = w
        slow.release.set()
        t1 = time.monotonic()
        crowd.pump(lambda: crowd.answered(SLOW_BODY) + crowd.closed() >= args.waiters,
                   args.answer_timeout)
        row["answer_secs"] = time.monotonic() - t1
        row["answered_200"] = sum(1 for v in crowd.got.values()
                                  if v.startswith(b"HTTP/1.1 200") and v.endswith(SLOW_BODY))
        row["other_answers"] = args.waiters - row["answered_200"]
    finally:
        slow.release.set()
        crowd.close()
    row["origin_slow_requests"] = origin.hits("/slow")
    per = (row["rss_waiting"] - row["rss_idle"]) / args.waiters
    log(f"{name}: {args.waiters} waiting: RSS +{per:.1f} KiB each, {row['threads_waiting']} "
        f"threads; /other meanwhile {pt.fmt_num(w['rps'])} req/s p99 {pt.fmt_ms(w['p99'])} "
        f"non-2xx {w['non2xx']}; all answered in {row['answer_secs']:.2f}s, "
        f"{row['answered_200']} got the page, origin saw {row['origin_slow_requests']}")
    return row


def report(args, rows):
    head = ["proxy", "threads while waiting", "RSS per waiter (KiB)", "/other req/s",
            "/other p50", "/other p99", "/other non-2xx + errors", "waiters answered 200",
            "time to answer all", "origin requests for /slow"]
    print(f"{args.waiters} clients waiting on one held URL; wrk -c{args.conns} on another, "
          f"cached URL meanwhile")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        w = r["wrk"]
        errs = w["non2xx"] + sum(w["sock_errors"].values())
        per = (r["rss_waiting"] - r["rss_idle"]) / args.waiters
        cells = [r["proxy"], str(r["threads_waiting"]), f"{per:.1f}", pt.fmt_num(w["rps"]),
                 pt.fmt_ms(w["p50"]), pt.fmt_ms(w["p99"]), str(errs),
                 f"{r['answered_200']} of {args.waiters}", f"{r['answer_secs']:.2f}s",
                 str(r["origin_slow_requests"])]
        print("| " + " | ".join(cells) + " |")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build-bench", "surogatd"))
    ap.add_argument("--before", help="an older surogatd to measure too")
    ap.add_argument("--only", default="surogat,varnish,nginx",
                    help="comma-separated among surogat,before,varnish,nginx")
    ap.add_argument("--waiters", type=int, default=5000)
    ap.add_argument("--threads", type=int, default=50,
                    help="thread_pool_max of surogat and Varnish (one pool)")
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--duration", type=int, default=5, help="seconds of wrk on /other")
    ap.add_argument("--conns", type=int, default=10)
    ap.add_argument("--answer-timeout", type=float, default=120.0)
    ap.add_argument("--wrk-threads", type=int, default=1)
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--varnishd", default="/usr/sbin/varnishd")
    ap.add_argument("--json", help="also write every figure here")
    args = ap.parse_args()
    args.only = [n.strip() for n in args.only.split(",") if n.strip()]
    if args.before and "before" not in args.only:
        args.only.append("before")
    bad = [n for n in args.only if n not in ("surogat", "before", "varnish", "nginx")]
    if bad or ("before" in args.only and not args.before):
        ap.error(f"--only: unknown {bad} (before needs --before PATH)")
    # What cachehit's start_* read.
    args.thread_pools = 1
    args.thread_pool_min = 10
    args.surogat_param = [f"thread_pool_max={args.threads}", "thread_queue_limit=10000",
                          "coalesce_timeout=120s", "coalesce_max_waiters=100000"]
    args.varnish_param = [f"thread_pool_max={args.threads}", "thread_queue_limit=10000"]
    args.nginx_keepalive = 64
    return args


def main():
    args = parse_args()
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)
    os.sched_setaffinity(0, {args.client_cpu})  # the origin and the crowd run here
    need = args.waiters + 4096
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (need if hard == resource.RLIM_INFINITY else min(need, hard), hard))
    args.nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if args.nofile < need:
        sys.exit(f"RLIMIT_NOFILE {args.nofile} is too low for {args.waiters} waiters")
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    workdir = tempfile.mkdtemp(prefix="surogat-waitlist-bench-", dir=base)
    os.chmod(workdir, 0o755)
    atexit.register(shutil.rmtree, workdir, True)
    rows = []
    for name in args.only:
        origin = origins.Origin()
        origin.route("/other", body=OTHER_BODY, headers=CC)
        slow = origin.route("/slow", body=SLOW_BODY, headers=CC, hold_head=True)
        port = int(origin.addr.rsplit(":", 1)[1])
        srv = start(args, name, workdir, port)
        log(f"{name} on 127.0.0.1:{srv.port} (pid {srv.pid}, core {args.proxy_cpu})")
        try:
            rows.append(measure(args, name, srv, origin, slow))
        finally:
            pt.stop(srv.proc)
            if srv.proc in pt.STARTED:
                pt.STARTED.remove(srv.proc)
            origin.stop()
    report(args, rows)
    if args.json:
        meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "command": " ".join(sys.argv), "host": platform.node(),
                "nproc": os.cpu_count()}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
