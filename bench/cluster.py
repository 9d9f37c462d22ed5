#!/usr/bin/python3
"""
cluster -- a self-routing cluster of three surogat nodes against three
independent nodes, both behind the same HAProxy with round robin, and one
node with their three stores together (the single big cache), on a working
set larger than one node's store.

  fleets             core 0   (taskset -c 0): the nodes and HAProxy
  wrk, origin nginx  core 1   (taskset -c 1)

Each fleet starts cold, takes a warm-up run, then a measured run, both of
wrk with Zipf-distributed URLs (bench/lua/zipf.lua) through HAProxy.
Reported for each: the origin's requests (nginx stub_status) over the
warm-up and over the measured run, the fleet's hit ratio (the share of
client requests that did not reach the origin), req/s and p99.  Targets
(the issue's): the cluster's origin load at most 1/3 of the independent
fleet's, and its hit ratio at least the single big cache's minus 5 points.

The cluster's nodes run vcl/cluster.lua with a `cluster` declaration of the
three (local_ttl --local-ttl); the independent nodes and the big one run
the built-in policy.  Everything on 127.0.0.1, in a /dev/shm directory
removed at the end (--keep-tmp keeps it); every process started is stopped
by pid.  Python 3 stdlib only, plus wrk, nginx and haproxy.  See
bench/README.md.
"""

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import cachehit as ch  # noqa: E402 -- zipf_table, origin_counts
import passthrough as pt  # noqa: E402 -- process handling, wrk parsing

REPO = pt.REPO
log = pt.log


def size_bytes(s):
    m = re.fullmatch(r"(\d+)([kmg]?)", s.lower())
    if not m:
        raise SystemExit(f"bad size {s!r}")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2)]


def cluster_policy(origin_port, ports, local_ttl, local_hot):
    peers = ", ".join(f'node{i + 1} = "127.0.0.1:{p}"' for i, p in enumerate(ports))
    return f"""
backend "origin" {{ host = "127.0.0.1", port = {origin_port} }}
cluster "bench" {{
    peers = {{ {peers} }},
    origin = "origin", local_ttl = "{local_ttl}", local_hot = {local_hot}, secret = "bench-secret",
    probe = {{ interval = 0.5, timeout = 0.5, window = 3, threshold = 2 }},
}}
local cluster = require "cluster"
recv, backend_fetch, backend_response = cluster.recv, cluster.backend_fetch, cluster.backend_response
backend_error, synth = cluster.backend_error, cluster.synth
"""


def start_node(args, workdir, name, port, origin_port, store, extra=()):
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    srv = pt.Server(name, port)
    srv.admin = f"127.0.0.1:{pt.free_port()}"
    srv.logfile = os.path.join(d, "stderr.log")
    argv = ["taskset", "-c", str(args.proxy_cpu), args.surogatd, "-F", "-j", "none",
            "-a", f"127.0.0.1:{port}", "-b", f"127.0.0.1:{origin_port}", "-n", d,
            "-s", f"malloc,{store}", "-T", srv.admin, "-p", "timeout_idle=60s",
            "-p", "thread_pool_min=8", *extra]
    srv.proc = pt.spawn(argv, srv.logfile)
    srv.pid = srv.proc.pid
    return srv


def node_stats(args, srv):
    try:
        out = subprocess.run([args.surogatctl, "-T", srv.admin, "stats", "-j"],
                             capture_output=True, text=True, timeout=15).stdout
        return json.loads(out)
    except Exception:  # noqa: BLE001 -- diagnostics only
        return {}


def start_haproxy(args, workdir, port, node_ports):
    d = os.path.join(workdir, "haproxy")
    os.makedirs(d, exist_ok=True)
    servers = "\n".join(f"    server n{i} 127.0.0.1:{p}" for i, p in enumerate(node_ports))
    conf = pt.render("cluster-haproxy.cfg.in", os.path.join(d, "haproxy.cfg"), PORT=port,
                     SERVERS=servers)
    srv = pt.Server("haproxy", port)
    srv.logfile = os.path.join(d, "stderr.log")
    srv.proc = pt.spawn(["taskset", "-c", str(args.proxy_cpu), args.haproxy, "-db", "-f", conf],
                        srv.logfile)
    srv.pid = srv.proc.pid
    return srv


def run_wrk(args, port, secs, table):
    argv = ["taskset", "-c", str(args.client_cpu), args.wrk, "-t", str(args.wrk_threads),
            "-c", str(args.conns), "-d", f"{secs}s", "--timeout", "5s", "--latency",
            "-s", os.path.join(BENCH, "lua", "zipf.lua"), f"http://127.0.0.1:{port}/",
            "--", table, "/o/", str(args.objects)]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=secs + 60).stdout
    r = pt.parse_wrk(out)
    if r["requests"] is None:
        raise RuntimeError(f"wrk: {out}")
    return r


def run_fleet(args, workdir, kind, origin_port, table):
    """kind: cluster, independent, big.  A dict of figures."""
    node_store = size_bytes(args.node_store)
    if kind == "big":
        ports = [pt.free_port()]
        stores = [f"{3 * node_store >> 20}m"]
    else:
        ports = [pt.free_port() for _ in range(3)]
        stores = [f"{node_store >> 20}m"] * 3
    d = os.path.join(workdir, kind)
    os.makedirs(d, exist_ok=True)
    nodes = []
    try:
        for i, port in enumerate(ports):
            extra = []
            if kind == "cluster":
                pol = os.path.join(d, "site.lua")
                with open(pol, "w") as f:
                    f.write(cluster_policy(origin_port, ports, args.local_ttl, args.local_hot))
                extra = ["-f", pol, "-p", f"identity=node{i + 1}",
                         "-p", "policy_modules=cluster",
                         "-p", f"policy_module_path={os.path.join(REPO, 'vcl')}"]
            nodes.append(start_node(args, d, f"node{i + 1}", port, origin_port, stores[i], extra))
        for n in nodes:
            pt.wait_ready(n.proc, n.port, "/o/0", args.size, n.name, timeout=60)
        front = pt.free_port()
        hp = start_haproxy(args, d, front, ports)
        pt.wait_ready(hp.proc, front, "/o/0", args.size, "haproxy", timeout=30)
        if kind == "cluster":
            time.sleep(2)  # every member sees the others healthy
        # The readiness checks asked the origin once or more for /o/0: count from here.
        _, o0 = ch.origin_counts(origin_port)
        warm = run_wrk(args, front, args.warm_secs, table)
        _, o1 = ch.origin_counts(origin_port)
        meas = run_wrk(args, front, args.secs, table)
        _, o2 = ch.origin_counts(origin_port)
        for n in nodes:
            if not n.check_alive():
                raise RuntimeError(f"{kind}: {n.name} died")
        stats = [node_stats(args, n) for n in nodes]
        pt.stop(hp.proc)
    finally:
        for n in nodes:
            pt.stop(n.proc)
    # stub_status counts its own request too: one per reading.
    o_warm, o_meas = o1 - o0 - 1, o2 - o1 - 1
    res = {
        "kind": kind, "stores": stores,
        "warm_requests": warm["requests"], "warm_origin": o_warm,
        "requests": meas["requests"], "origin": o_meas,
        "hit_ratio": 1 - o_meas / meas["requests"],
        "warm_hit_ratio": 1 - o_warm / warm["requests"],
        "rps": meas["rps"], "p50": meas["p50"], "p99": meas["p99"],
        "errors": meas["non2xx"] + sum(meas["sock_errors"].values()),
        "n_object": [s.get("n_object") for s in stats],
        "nuked": [s.get("n_lru_nuked") for s in stats],
        "cluster_fwd": [s.get("cluster_fwd") for s in stats],
    }
    log(f"{kind}: origin {o_warm} + {o_meas}, hit ratio {res['hit_ratio']:.3f}, "
        f"{meas['rps']:.0f} req/s, p99 {meas['p99']} ms")
    return res


def report(args, res):
    big, ind, clu = res["big"], res["independent"], res["cluster"]
    out = []
    out.append(f"{args.objects} objects of {args.size} bytes, Zipf s={args.zipf} "
               f"({args.objects * args.size / (1 << 20):.0f} MiB), node store {args.node_store}, "
               f"big store {big['stores'][0]}; wrk -t{args.wrk_threads} -c{args.conns}, "
               f"warm-up {args.warm_secs} s then {args.secs} s measured; cluster local_ttl "
               f"{args.local_ttl}, local_hot {args.local_hot}.")
    out.append("")
    out.append("| fleet | origin requests, warm-up | origin requests, measured | client requests, "
               "measured | fleet hit ratio | req/s | p50 | p99 | errors |")
    out.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for k, label in (("cluster", "cluster (3 nodes, self-routing)"),
                     ("independent", "independent (3 nodes)"),
                     ("big", "single big cache (1 node, 3x store)")):
        r = res[k]
        out.append(f"| {label} | {r['warm_origin']:,} | {r['origin']:,} | {r['requests']:,} | "
                   f"{100 * r['hit_ratio']:.1f}% | {r['rps']:,.0f} | {r['p50']:.2f}ms | "
                   f"{r['p99']:.2f}ms | {r['errors']} |")
    out.append("")
    total_c = clu["warm_origin"] + clu["origin"]
    total_i = ind["warm_origin"] + ind["origin"]
    ratio = total_c / total_i if total_i else float("nan")
    ratio_m = clu["origin"] / ind["origin"] if ind["origin"] else float("nan")
    gap = 100 * (big["hit_ratio"] - clu["hit_ratio"])
    out.append(f"Origin load, cluster / independent: {ratio:.3f} over the whole run, "
               f"{ratio_m:.3f} over the measured run (target at most 1/3 = 0.333): "
               f"{'met' if ratio <= 1 / 3 and ratio_m <= 1 / 3 else 'NOT met'}.")
    out.append(f"Hit ratio, cluster against the single big cache: {100 * clu['hit_ratio']:.1f}% "
               f"vs {100 * big['hit_ratio']:.1f}%, {gap:+.1f} points behind (target at most 5): "
               f"{'met' if gap <= 5 else 'NOT met'}.")
    out.append(f"Objects held per node at the end: cluster {clu['n_object']}, independent "
               f"{ind['n_object']}, big {big['n_object']}; evicted (n_lru_nuked): cluster "
               f"{clu['nuked']}, independent {ind['nuked']}, big {big['nuked']}; requests "
               f"each cluster node sent to another member: {clu['cluster_fwd']}.")
    return "\n".join(out)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build-bench", "surogatd"))
    ap.add_argument("--surogatctl", default=None, help="default: beside --surogatd")
    ap.add_argument("--wrk", default="wrk")
    ap.add_argument("--nginx", default="/usr/sbin/nginx")
    ap.add_argument("--haproxy", default=shutil.which("haproxy") or "/usr/sbin/haproxy")
    ap.add_argument("--objects", type=int, default=4000)
    ap.add_argument("--size", type=int, default=16384, help="bytes per object")
    ap.add_argument("--zipf", type=float, default=0.8)
    ap.add_argument("--node-store", default="32m", help="one node's malloc store")
    ap.add_argument("--local-ttl", default="5s")
    ap.add_argument("--local-hot", type=int, default=16)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--warm-secs", type=int, default=30)
    ap.add_argument("--secs", type=int, default=30)
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="5 s runs, for a smoke test")
    ap.add_argument("--fleets", default="cluster,independent,big",
                    help="which fleets to run (the report needs all three)")
    ap.add_argument("--json", help="write the figures there too")
    ap.add_argument("--keep-tmp", action="store_true")
    a = ap.parse_args()
    if a.surogatctl is None:
        a.surogatctl = os.path.join(os.path.dirname(a.surogatd), "surogatctl")
    if a.quick:
        a.warm_secs = a.secs = 5
    return a


def main():
    args = parse_args()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    args.nofile = hard
    for b in (args.surogatd, args.surogatctl):
        if not os.access(b, os.X_OK):
            raise SystemExit(f"{b}: not built (meson setup build-bench -Dbuildtype=release "
                             "-Dtests=disabled && ninja -C build-bench)")
    workdir = tempfile.mkdtemp(prefix="sg-cluster-", dir="/dev/shm")
    os.chmod(workdir, 0o755)  # the nginx worker drops privileges
    if not args.keep_tmp:
        pt.CLEANUP.append(workdir)
    try:
        docroot = os.path.join(workdir, "docroot")
        os.makedirs(docroot)
        ch.write_file(os.path.join(docroot, "obj"), ch.body_bytes(args.size))
        table = os.path.join(workdir, "zipf.txt")
        distinct = ch.zipf_table(table, args.objects, args.zipf, 200000)
        log(f"Zipf table: {distinct} distinct ranks of {args.objects}")
        oport = pt.free_port()
        origin = pt.start_nginx(args, "origin", "cluster-origin-nginx.conf.in", args.client_cpu,
                                workdir, PORT=oport, DOCROOT=docroot)
        pt.wait_ready(origin.proc, oport, "/o/0", args.size, "origin")
        res = {}
        for kind in args.fleets.split(","):
            res[kind] = run_fleet(args, workdir, kind, oport, table)
        if len(res) < 3:
            print(json.dumps(res, indent=1, default=str))
            return
        text = report(args, res)
        print(text)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": {k: v for k, v in vars(args).items()}, "results": res}, f,
                          indent=1, default=str)
    finally:
        pt.stop_all()
        for d in pt.CLEANUP:
            shutil.rmtree(d, True)


if __name__ == "__main__":
    main()
