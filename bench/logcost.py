#!/usr/bin/python3
"""
logcost -- what `surogatctl log` costs a loaded surogat: cache-hit
throughput with no log reader, then with readers attached, same pinning
as passthrough.py, one run (target: under 5% fewer requests/s).

  surogatd (and its log stream thread)   core 0   (taskset -c 0)
  wrk, origin nginx, surogatctl          core 1   (taskset -c 1)

Workers always write one record per request into their ring, reader or
not; what a reader adds is its thread in surogatd, waking every 50 ms to
copy, filter and format the new records and write them to the admin
connection.  A trace reader (-g) adds more: while it is attached every
worker writes the trace of each request (some 40 records) into its
trace ring, and the reader groups and formats them.  Modes, measured in
turn for --rounds rounds so that drift spreads over all of them:

  none       no reader
  text       surogatctl log > /dev/null
  json       surogatctl log -j > /dev/null
  filtered   surogatctl log -u ^/nomatch > /dev/null: records read and
             matched, nothing formatted or sent
  trace      surogatctl log -g request > /dev/null
  trace-json surogatctl log -g request -j > /dev/null
  trace-q    surogatctl log -g request -q 'ReqURL ~ "^/nomatch"': workers
             trace, the reader groups and queries, prints nothing

Each run reports req/s and surogatd's own CPU time per request (its
ticks over the measured run: workers and the log stream's thread), the
steadier of the two on a machine that other work shares; a trace
reader's run also counts the requests it printed and the records it
reported missed.  Before measuring, the object is checked to be a hit.  Every process it
starts is stopped on exit.  Traffic goes to 127.0.0.1 only.  Python 3
stdlib only.  See bench/README.md.
"""

import argparse
import atexit
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import passthrough as pt  # noqa: E402 -- process handling, wrk parsing, nginx start

REPO = pt.REPO
log = pt.log
OBJ_PATH = "/1k.bin"
MODES = {"none": None, "text": [], "json": ["-j"], "filtered": ["-u", "^/nomatch"],
         "trace": ["-g", "request"], "trace-json": ["-g", "request", "-j"],
         "trace-q": ["-g", "request", "-q", 'ReqURL ~ "^/nomatch"']}


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


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
            "-p", "timeout_idle=60s"]
    for p in args.surogat_param:
        argv += ["-p", p]
    srv.argv = argv
    srv.proc = pt.spawn(argv, srv.logfile)
    srv.pid = srv.proc.pid
    pt.STARTED.append(srv.proc)
    return srv


def start_reader(args, sg, mode, workdir):
    """surogatctl log ... attached once its OK is read (or None for `none`).  A trace
    reader's output goes to a file, to count what it printed and what it missed; the
    others' to /dev/null."""
    extra = MODES[mode]
    if extra is None:
        return None
    argv = ["taskset", "-c", str(args.client_cpu), args.surogatctl, "-T", sg.admin, "log"]
    out = subprocess.DEVNULL
    path = None
    if mode in ("trace", "trace-json"):
        path = os.path.join(workdir, "reader.out")
        out = open(path, "wb")
    proc = subprocess.Popen(argv + extra, stdout=out, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    if path is not None:
        out.close()
    proc.outpath = path
    pt.STARTED.append(proc)
    first = proc.stderr.readline()
    if not first.startswith(b"Streaming"):
        raise SystemExit(f"surogatctl log {' '.join(extra)}: {first!r}")
    return proc


def stop_reader(proc):
    """Stop it; for a trace reader, (requests printed, records it reported missed), once
    it has caught up with the load that ended (its output still for 1 s, 15 s at most)."""
    if proc is None:
        return None
    if proc.outpath is not None:
        deadline, size, still = time.monotonic() + 15, -1, 0
        while time.monotonic() < deadline and still < 4:
            time.sleep(0.25)
            now = os.path.getsize(proc.outpath)
            still = still + 1 if now == size else 0
            size = now
    pt.stop(proc)
    pt.STARTED.remove(proc)
    proc.stderr.close()
    if proc.outpath is None:
        return None
    groups = missed = 0
    with open(proc.outpath, "rb") as f:
        for ln in f:
            if ln.startswith(b"*   << Request") or ln.startswith(b'{"complete"'):
                groups += 1
            elif ln.startswith(b"# missed ") or ln.startswith(b'{"missed":'):
                missed += int(re.search(rb"\d+", ln).group(0))
    os.unlink(proc.outpath)
    return groups, missed


def measure(args, sg, conns):
    warm = 0
    if args.warmup > 0:
        _, wout = pt.run_wrk(args, sg.port, OBJ_PATH, conns, False, args.warmup, latency=False)
        warm = pt.parse_wrk(wout)["requests"] or 0
    t0 = pt.proc_ticks(sg.pid) or 0
    argv, out = pt.run_wrk(args, sg.port, OBJ_PATH, conns, False, args.duration)
    ticks = (pt.proc_ticks(sg.pid) or 0) - t0
    r = pt.parse_wrk(out)
    # surogatd's own CPU (workers and the log stream's thread) per request: steadier than
    # req/s on a shared machine.
    r["cpu_us_per_req"] = ticks / pt.CLK_TCK * 1e6 / r["requests"] if r.get("requests") else None
    r["argv"] = argv
    r["all_requests"] = warm + (r["requests"] or 0)
    return r


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build", "surogatd"))
    ap.add_argument("--surogatctl", default=os.path.join(REPO, "build", "surogatctl"))
    ap.add_argument("--quick", action="store_true",
                    help="smoke mode: 1 s runs, no warmup, one round, 50 connections")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured wrk run")
    ap.add_argument("--warmup", type=int, default=2, help="seconds of warmup before each run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every mode, interleaved")
    ap.add_argument("--conns", default="50,400", help="wrk connection counts")
    ap.add_argument("--modes", default=",".join(MODES), help="among " + ",".join(MODES))
    ap.add_argument("--size", type=int, default=1024, help="object size in bytes")
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
        args.duration, args.warmup, args.rounds, args.conns = 1, 0, 1, "50"
    args.conns = [int(c) for c in args.conns.split(",")]
    args.modes = args.modes.split(",")
    if "none" not in args.modes or not set(args.modes) <= set(MODES):
        sys.exit("--modes: none and any of " + ",".join(MODES))
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
    workdir = tempfile.mkdtemp(prefix="surogat-bench-logcost-", dir=base)
    if not args.keep_tmp:
        pt.CLEANUP.append(workdir)
        atexit.register(shutil.rmtree, workdir, True)
    docroot = os.path.join(workdir, "docroot")
    os.makedirs(docroot)
    os.chmod(workdir, 0o755)
    os.chmod(docroot, 0o755)
    body = (b"0123456789abcdef" * (args.size // 16 + 1))[:args.size]
    with open(os.path.join(docroot, OBJ_PATH[1:]), "wb") as f:
        f.write(body)
    os.chmod(os.path.join(docroot, OBJ_PATH[1:]), 0o644)

    origin_port = pt.free_port()
    # The gzip bench's origin: files from tmpfs, fresh for an hour, gzip off.
    origin = pt.start_nginx(args, "origin", "gzip-origin-nginx.conf.in", args.client_cpu,
                            workdir, PORT=origin_port, DOCROOT=docroot)
    pt.STARTED.append(origin.proc)
    pt.wait_ready(origin.proc, origin_port, OBJ_PATH, len(body), "origin nginx")
    sg = start_surogat(args, workdir, origin_port)
    pt.wait_ready(sg.proc, sg.port, OBJ_PATH, len(body), "surogat")
    status, h, got = get(sg.port, OBJ_PATH)
    if status != 200 or got != body or not h.get("cache-status", "").startswith("surogat; hit"):
        raise SystemExit(f"surogat: not a hit: {status} {h.get('cache-status')}")

    runs = {(m, c): [] for m in args.modes for c in args.conns}
    for rnd in range(args.rounds):
        for conns in args.conns:
            for mode in args.modes:
                reader = start_reader(args, sg, mode, workdir)
                traced = None
                try:
                    r = measure(args, sg, conns)
                finally:
                    traced = stop_reader(reader)
                runs[(mode, conns)].append(r)
                shown = ""
                if traced is not None:
                    r["traced"], r["missed_records"] = traced
                    shown = (f"  traced {traced[0]:,} of {r['all_requests']:,} requests, "
                             f"{traced[1]:,} records missed")
                log(f"round {rnd + 1} c{conns:<4} {mode:10} {pt.fmt_num(r['rps']):>10} req/s  "
                    f"{r['cpu_us_per_req'] or 0:5.2f} us CPU/req  "
                    f"p99 {pt.fmt_ms(r['p99'])}  non-2xx {r['non2xx']}  "
                    f"errors {r['sock_errors'] or '-'}{shown}")
                if not sg.check_alive():
                    raise SystemExit("surogatd died")

    def med(mode, conns, key="rps"):
        v = [r[key] for r in runs[(mode, conns)] if r[key] is not None]
        return statistics.median(v) if v else None

    print()
    print(f"# logcost: {args.size} B hits, {args.duration} s per run, median of {args.rounds} "
          f"rounds; surogatd on core {args.proxy_cpu}, wrk, origin and surogatctl on core "
          f"{args.client_cpu}")
    print()
    print("| conns | reader | req/s | p99 | vs no reader | CPU us/req | vs no reader | "
          "requests traced |")
    print("|---|---|---|---|---|---|---|---|")
    verdicts = []
    for conns in args.conns:
        base_rps = med("none", conns)
        base_cpu = med("none", conns, "cpu_us_per_req")
        for mode in args.modes:
            rps = med(mode, conns)
            cpu = med(mode, conns, "cpu_us_per_req")
            loss = (1 - rps / base_rps) * 100 if rps and base_rps else None
            more = (cpu / base_cpu - 1) * 100 if cpu and base_cpu else None
            shares = [r["traced"] / r["all_requests"] for r in runs[(mode, conns)]
                      if "traced" in r and r["all_requests"]]
            traced = f"{statistics.median(shares) * 100:.1f}%" if shares else "-"
            print(f"| {conns} | {mode} | {pt.fmt_num(rps)} | {pt.fmt_ms(med(mode, conns, 'p99'))}"
                  f" | {'-' if mode == 'none' or loss is None else f'{-loss:+.1f}%'}"
                  f" | {f'{cpu:.2f}' if cpu else '-'}"
                  f" | {'-' if mode == 'none' or more is None else f'{more:+.1f}%'} | {traced} |")
            if mode != "none" and loss is not None:
                verdicts.append((conns, mode, loss))
    print()
    for conns, mode, loss in verdicts:
        log(f"target: {mode} reader at c{conns} costs under 5%: {loss:.1f}% "
            f"{'ok' if loss < 5 else 'OVER'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": {f"{m}/c{c}": v for (m, c), v in runs.items()},
                       "args": {k: v for k, v in vars(args).items()}}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
