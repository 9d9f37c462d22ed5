#!/usr/bin/python3
"""
memory -- what a cached object costs surogat's malloc store, and whether a
full store keeps the process near its -s malloc,SIZE (issue 15, item 5).
One nginx origin (bench/conf/cache-origin-nginx.conf.in) on core 1, the
daemon on core 0, the loader (wrk + lua/fill.lua) on core 1.  Scenarios,
each with a fresh surogatd per binary:

  perobj   -s malloc large enough for all: --objects (1,000,000) distinct
           objects of --object-size (1 KiB) bytes; reports RSS bytes per
           object (ΔRssAnon / objects) and what the store accounts per
           object (sto_bytes / n_object).
  full-1k  -s malloc,--full-size (256m): 1 KiB objects, --overfill (3) times
           what the store holds, so eviction runs throughout.
  full-mix the same with ten object sizes from 200 B to 120 KiB, mixed.

For the full scenarios: base = VmRSS after a small warm-up load (threads,
buffers, arenas), and the check is VmRSS <= 1.1 x (SIZE + base) once the
store is full.  Give --surogatd more than once to compare builds; each
scenario then runs every build in turn (A B A B ...).

Every process it starts is stopped on exit.  Traffic on 127.0.0.1 only.
Python 3 stdlib only.
"""

import argparse
import atexit
import json
import os
import shutil
import signal
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import cachehit as ch  # noqa: E402 -- origin, loader and surogat start-up
import passthrough as pt  # noqa: E402

log = pt.log
# /mx/N: the origin serves mix/(N % 10); sizes in bytes, mean about 21 KiB.
MIX = [200, 500, 1024, 2048, 3072, 6144, 10240, 20480, 51200, 122880]


def stats(args, srv):
    return json.loads(ch.surogatctl(args, srv, "stats", "-j"))


def rss(pid):
    return {k: (v or 0) * 1024 for k, v in ch.rss_fields(pid).items()}


def run_one(args, workdir, origin_port, binary, scen):
    a = argparse.Namespace(**vars(args))
    a.surogatd = binary
    a.surogatctl = os.path.join(os.path.dirname(binary), "surogatctl")
    if scen == "perobj":
        size = ch.size_arg(args.objects * 4096)
        n, prefix = args.objects, "/m/"
    else:
        size = args.full_size
        per = 1024 if scen == "full-1k" else sum(MIX) // len(MIX)
        n = int(args.overfill * args.full_size_bytes / per)
        prefix = "/m/" if scen == "full-1k" else "/mx/"
    port = pt.free_port()
    name = f"{scen}-{len(os.listdir(workdir))}"
    srv = ch.start_surogat(a, name, workdir, port, origin_port, f"malloc,{size}")
    srv.name = name
    r = {"scenario": scen, "binary": binary, "store": f"malloc,{size}", "objects_asked": n}
    try:
        pt.wait_ready(srv.proc, port, "/1k", 1024, name, timeout=60)
        time.sleep(args.settle)
        ch.fill(a, srv, "/w/", args.prefill)
        time.sleep(2)
        b = rss(srv.pid)
        s0 = stats(a, srv)
        t0 = time.monotonic()
        f = ch.fill(a, srv, prefix, n)
        r["fill_secs"] = time.monotonic() - t0
        r["fill"] = {k: f.get(k) for k in ("ok", "bad", "complete")}
        time.sleep(args.mem_settle)
        e = rss(srv.pid)
        s1 = stats(a, srv)
        r.update(base=b, after=e, stats_before={k: s0.get(k) for k in KEYS},
                 stats_after={k: s1.get(k) for k in KEYS})
        nobj = s1["n_object"] - s0["n_object"]
        r["n_object"] = s1["n_object"]
        if scen == "perobj":
            r["rss_per_object"] = (e["RssAnon"] - b["RssAnon"]) / nobj
            r["vmrss_per_object"] = (e["VmRSS"] - b["VmRSS"]) / nobj
            r["store_per_object"] = (s1["sto_bytes"] - s0["sto_bytes"]) / nobj
        else:
            r["limit"] = 1.1 * (args.full_size_bytes + b["VmRSS"])
            r["ratio"] = e["VmRSS"] / (args.full_size_bytes + b["VmRSS"])
            r["nuked"] = s1.get("n_lru_nuked", 0) - s0.get("n_lru_nuked", 0)
        srv.check_alive()
        if srv.dead:
            r["error"] = srv.dead
    finally:
        ch.stop_server(srv)
        if args.log_dir:
            shutil.copy(srv.logfile, os.path.join(args.log_dir, f"{name}.log"))
        shutil.rmtree(srv.dir if hasattr(srv, "dir") else os.path.join(workdir, name), True)
    log(f"{scen} {binary}: " + json.dumps({k: r.get(k) for k in (
        "n_object", "rss_per_object", "vmrss_per_object", "store_per_object", "ratio",
        "nuked", "fill_secs")}))
    return r


KEYS = ("n_object", "sto_bytes", "sto_size", "n_lru_nuked", "n_objecthead", "cache_admission_rejected",
        "n_lru_limited", "cache_hitmiss")


def report(args, runs):
    mib = 1 << 20
    out = []
    per = [r for r in runs if r["scenario"] == "perobj"]
    if per:
        out += [f"perobj: {args.objects:,} objects of {args.object_size} B, -s malloc large "
                "enough for all", "",
                "| binary | n_object | RSS B/object (ΔRssAnon) | ΔVmRSS B/object | store "
                "B/object (sto_bytes) | load s |", "|---|--:|--:|--:|--:|--:|"]
        for r in per:
            out.append(f"| {r['binary']} | {r.get('n_object', 0):,} | "
                       f"{r.get('rss_per_object', 0):,.0f} | {r.get('vmrss_per_object', 0):,.0f}"
                       f" | {r.get('store_per_object', 0):,.0f} | {r.get('fill_secs', 0):.1f} |")
        out.append("")
    full = [r for r in runs if r["scenario"] != "perobj"]
    if full:
        out += [f"full: -s malloc,{args.full_size}, {args.overfill:g} x what it holds loaded; "
                "base = VmRSS after the warm-up load; limit = 1.1 x (SIZE + base)", "",
                "| scenario | binary | n_object | nuked | sto_bytes MiB | base MiB | VmRSS MiB | "
                "VmRSS / (SIZE + base) | within 10% |",
                "|---|---|--:|--:|--:|--:|--:|--:|---|"]
        for r in full:
            if "ratio" not in r:
                out.append(f"| {r['scenario']} | {r['binary']} | failed: {r.get('error')} |")
                continue
            out.append(f"| {r['scenario']} | {r['binary']} | {r['n_object']:,} | "
                       f"{r['nuked']:,} | {r['stats_after']['sto_bytes'] / mib:.1f} | "
                       f"{r['base']['VmRSS'] / mib:.1f} | {r['after']['VmRSS'] / mib:.1f} | "
                       f"{r['ratio']:.3f} | {'yes' if r['ratio'] <= 1.1 else 'NO'} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--surogatd", action="append", default=None,
                    help="daemon to measure (repeat to compare; default build-bench/surogatd)")
    ap.add_argument("--scenarios", default="perobj,full-1k,full-mix")
    ap.add_argument("--objects", type=int, default=1000000)
    ap.add_argument("--object-size", type=int, default=1024)
    ap.add_argument("--full-size", default="256m")
    ap.add_argument("--overfill", type=float, default=3.0)
    ap.add_argument("--prefill", type=int, default=1000)
    ap.add_argument("--fill-conns", type=int, default=32)
    ap.add_argument("--mem-settle", type=float, default=3.0)
    ap.add_argument("--settle", type=float, default=1.0)
    ap.add_argument("--thread-pools", type=int, default=1)
    ap.add_argument("--thread-pool-min", type=int, default=10)
    ap.add_argument("-P", "--surogat-param", action="append", default=[])
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--log-dir", help="keep each daemon's stderr here (e.g. with "
                    "MALLOC_CONF=stats_print:true in the environment: jemalloc's statistics)")
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    args = ap.parse_args()
    args.surogatd = args.surogatd or [os.path.join(ch.REPO, "build-bench", "surogatd")]
    args.full_size_bytes = int(args.full_size[:-1]) << {"k": 10, "m": 20, "g": 30}[
        args.full_size[-1].lower()]
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)
    args.nofile = 65536

    workdir = tempfile.mkdtemp(prefix="surogat-memory-", dir="/dev/shm")
    os.chmod(workdir, 0o755)
    pt.CLEANUP.append(workdir)
    atexit.register(lambda: (pt.stop_all(), shutil.rmtree(workdir, True)))
    docroot = os.path.join(workdir, "www")
    os.makedirs(os.path.join(docroot, "mix"))
    ch.write_file(os.path.join(docroot, "1k"), ch.body_bytes(1024))
    ch.write_file(os.path.join(docroot, "obj"), ch.body_bytes(args.object_size))
    for i, sz in enumerate(MIX):
        ch.write_file(os.path.join(docroot, "mix", str(i)), ch.body_bytes(sz, b"%d " % i))
    for d in (docroot, os.path.join(docroot, "mix")):
        os.chmod(d, 0o755)
    origin_port = pt.free_port()
    origin = pt.start_nginx(args, "origin", "cache-origin-nginx.conf.in", args.client_cpu,
                            workdir, PORT=origin_port, DOCROOT=docroot)
    pt.wait_ready(origin.proc, origin_port, "/1k", 1024, "origin nginx")
    runs = []
    for scen in args.scenarios.split(","):
        for b in args.surogatd:
            runs.append(run_one(args, workdir, origin_port, b, scen))
    text = report(args, runs)
    print("\n" + text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 1 if any(r.get("error") for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
