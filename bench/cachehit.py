#!/usr/bin/python3
"""
cachehit -- surogat's cache next to Varnish 7 (-s malloc and -s file, builtin
VCL) and nginx proxy_cache, all in front of one nginx origin serving static
files from tmpfs, same pinning as passthrough.py, one run.

  proxy under test   core 0   (taskset -c 0)
  wrk, origin nginx  core 1   (taskset -c 1)

1. Hits: 1 KiB, 128 KiB and 1 MiB objects at 50 and 400 connections, a
   ~9 KiB HTML page (issue 15's cacheable dynamic page) asked by clients
   with Accept-Encoding: gzip (page9k-gz) and without (page9k-id), and a
   10,000-URL working set with Zipf popularity (wrk + lua/zipf.lua), every
   cache warmed first and the hit checked in the response headers.  Reports
   req/s, p99, ratios, the origin's request count during each measured run
   and the share of hits.
2. Memory: fresh processes, N distinct small objects loaded (wrk +
   lua/fill.lua), RSS before and after, bytes per object.
3. Restart (surogat-file only): the N objects of the memory phase, the
   daemon stopped with SIGTERM and started again on the same store file, then
   once more after kill -9: time to accept connections and to the first hit,
   objects recovered.

Every process it starts is stopped on exit.  Traffic goes to 127.0.0.1
only.  Python 3 stdlib only.  See bench/README.md.
"""

import argparse
import atexit
import bisect
import datetime
import hashlib
import json
import os
import platform
import queue
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import passthrough as pt  # noqa: E402 -- process handling, /proc readers, wrk parsing

REPO = pt.REPO
LUA = os.path.join(BENCH, "lua")
CLK_TCK = pt.CLK_TCK
log = pt.log

# name, path, size
OBJECTS = [("1KiB", "/1k", 1024), ("128KiB", "/128k", 128 * 1024),
           ("1MiB", "/1m", 1024 * 1024)]
# Issue 15's cacheable dynamic page: ~9 KiB of HTML, hit by clients with and
# without Accept-Encoding: gzip (wrk, curl, bots and monitoring send none).
# name, path, size, the clients' Accept-Encoding
PAGES = [("page9k-gz", "/page9k.html", 9 * 1024, "gzip"),
         ("page9k-id", "/page9k.html", 9 * 1024, None)]
ZIPF = "zipf10k"
ZIPF_SIZE = 1024
PROXIES = ["surogat", "surogat-before", "surogat-file", "surogat-file-before",
           "varnish-malloc", "varnish-file", "nginx", "haproxy"]
# Run only with --before BINARY: the same stores served by an older surogatd.
BEFORE = ("surogat-before", "surogat-file-before")
SHORT = {"surogat": "s", "surogat-before": "sB", "surogat-file": "sf",
         "surogat-file-before": "sfB", "varnish-malloc": "vm", "varnish-file": "vf",
         "nginx": "n", "haproxy": "h"}
# The ratios reported, numerator / denominator, where both ran.
RATIOS = [("surogat", "varnish-malloc"), ("surogat", "varnish-file"), ("surogat", "nginx"),
          ("surogat-file", "surogat"), ("surogat-file", "varnish-file"),
          ("surogat-file", "nginx"), ("surogat", "surogat-before"),
          ("surogat-file", "surogat-file-before"), ("surogat", "haproxy"),
          ("surogat-file", "haproxy")]
FILE_STORES = ("surogat-file", "surogat-file-before", "varnish-file")


# --- small helpers ---------------------------------------------------------


def body_bytes(size, tag=b""):
    line = b"0123456789abcdef"
    return (tag + line * (size // 16 + 1))[:size - 1] + b"\n"


def page_bytes(size, seed=15):
    """size bytes of HTML with a real page's redundancy: markup repeats, words vary."""
    words = [b"cache", b"proxy", b"origin", b"object", b"header", b"client", b"stale",
             b"fresh", b"vary", b"range", b"store", b"lorem", b"ipsum", b"dolor", b"amet"]
    out, x = bytearray(b"<!DOCTYPE html>\n<html><head><title>page</title></head><body>\n"), seed
    while len(out) < size:
        x = (x * 1103515245 + 12345) & 0x7FFFFFFF
        para = b" ".join(words[(x >> k) % len(words)] for k in range(0, 24, 3))
        out += b'<div class="item"><a href="/p/%d">%s</a></div>\n' % (x % 10000, para)
    return bytes(out[:size - 15]) + b"</body></html>\n"


def write_file(path, data):
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o644)


def http_head(port, path, timeout=10.0):
    """GET path; (status, headers as a dict with lower-case names, body length)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
            return r.status, {k.lower(): v for k, v in r.headers.items()}, len(body)
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, 0


def hit_seen(kind, headers):
    """(hit?, the header that says so) for one response."""
    if kind == "surogat":
        v = headers.get("cache-status", "")
        return v.startswith("surogat; hit"), f"Cache-Status: {v}"
    if kind == "varnish":
        v = headers.get("x-varnish", "")
        return len(v.split()) == 2, f"X-Varnish: {v}, Age: {headers.get('age', '-')}"
    v = headers.get("x-cache-status", "")
    return v == "HIT", f"X-Cache-Status: {v}"


def origin_counts(port):
    """(accepted connections, requests) from the origin's stub_status."""
    try:
        _, body = pt.http_get(port, "/nginx_status")
    except Exception:  # noqa: BLE001
        return None, None
    m = re.search(rb"\n\s*(\d+)\s+(\d+)\s+(\d+)", body)
    return (int(m.group(1)), int(m.group(3))) if m else (None, None)


def rss_fields(pid):
    return {f: pt.status_field(pid, f) for f in ("VmRSS", "RssAnon", "RssFile", "RssShmem")}


def dir_bytes(path):
    """Bytes allocated to the files under path (tmpfs: memory)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def size_arg(nbytes):
    """A size for -s / max_size in whole MiB."""
    return f"{max(1, (nbytes + (1 << 20) - 1) >> 20)}m"


# --- the servers -----------------------------------------------------------


def nginx_worker_pid(srv, timeout=10.0):
    """The worker (not the cache manager or loader, also called nginx)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for k in pt.children(srv.proc.pid):
            try:
                with open(f"/proc/{k}/cmdline", "rb") as f:
                    if f.read().startswith(b"nginx: worker process"):
                        return k
            except OSError:
                pass
        time.sleep(0.1)
    raise RuntimeError(f"nginx master {srv.proc.pid}: no worker")


def start_nginx_cache(args, name, workdir, port, origin_port, keys_zone, max_size):
    srv = pt.start_nginx(args, name, "cache-nginx.conf.in", args.proxy_cpu, workdir,
                         PORT=port, ORIGIN_PORT=origin_port, KEEPALIVE=args.nginx_keepalive,
                         KEYS_ZONE=keys_zone, MAX_SIZE=max_size)
    srv.pid = nginx_worker_pid(srv)
    srv.kind = "nginx"
    srv.cache_dir = os.path.join(workdir, name, "cache")
    srv.argv = ["nginx", "-c", os.path.join(workdir, name, "nginx.conf")]
    return srv


def start_haproxy_cache(args, name, workdir, port, origin_port):
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    conf = pt.render("cache-haproxy.cfg.in", os.path.join(d, "haproxy.cfg"), DIR=d, PORT=port,
                     ORIGIN_PORT=origin_port)
    srv = pt.Server(name, port)
    srv.kind = "haproxy"
    srv.logfile = os.path.join(d, "stderr.log")
    srv.argv = ["taskset", "-c", str(args.proxy_cpu), args.haproxy, "-db", "-f", conf]
    srv.proc = pt.spawn(srv.argv, srv.logfile)
    srv.pid = srv.proc.pid  # taskset execs: same pid
    return srv


def start_varnish(args, name, workdir, port, origin_port, storage,
                  template="varnish-cache.vcl.in"):
    """template: a file of conf/, or a path (bench/policy.py's VCL)."""
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    vcl = pt.render(template, os.path.join(d, "default.vcl"), ORIGIN_PORT=origin_port)
    srv = pt.Server(name, port)
    srv.kind = "varnish"
    srv.ndir = os.path.join(d, "n")
    srv.logfile = os.path.join(d, "stderr.log")
    argv = ["taskset", "-c", str(args.proxy_cpu), args.varnishd, "-F",
            "-n", srv.ndir, "-a", f"127.0.0.1:{port}", "-f", vcl,
            "-T", "none", "-s", storage,
            "-p", f"thread_pools={args.thread_pools}",
            "-p", f"thread_pool_min={args.thread_pool_min}",
            "-p", "thread_pool_max=5000",
            "-p", "timeout_idle=60"]
    for p in args.varnish_param:
        argv += ["-p", p]
    srv.argv = argv
    srv.proc = pt.spawn(argv, srv.logfile)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            raise RuntimeError(f"varnishd exited {srv.proc.returncode}:\n{pt.tail(srv.logfile)}")
        kids = [k for k in pt.descendants(srv.proc.pid) if pt.comm(k) == "cache-main"]
        if kids:
            srv.pid = kids[0]
            return srv
        time.sleep(0.2)
    raise RuntimeError(f"varnishd: no cache-main child:\n{pt.tail(srv.logfile)}")


def start_surogat(args, name, workdir, port, origin_port, storage, extra=(), listen_opts="",
                  binary=None):
    """extra: more surogatd arguments (bench/policy.py's -f SCRIPT); listen_opts: appended
    to the -a address (bench/tls.py: ",tls,cert=...,key=..."); binary: another surogatd
    than --surogatd (--before)."""
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    srv = pt.Server(name, port)
    srv.kind = "surogat"
    srv.admin = f"127.0.0.1:{pt.free_port()}"
    srv.logfile = os.path.join(d, "stderr.log")
    argv = ["taskset", "-c", str(args.proxy_cpu), binary or args.surogatd, "-F", "-j", "none",
            "-a", f"127.0.0.1:{port}{listen_opts}", "-b", f"127.0.0.1:{origin_port}", "-n", d,
            "-s", storage, "-T", srv.admin,
            "-p", f"thread_pools={args.thread_pools}",
            "-p", f"thread_pool_min={args.thread_pool_min}",
            "-p", "timeout_idle=60s", *extra]
    for p in args.surogat_param:
        argv += ["-p", p]
    srv.argv = argv
    srv.proc = pt.spawn(argv, srv.logfile)
    srv.pid = srv.proc.pid  # taskset execs: same pid
    return srv


def start_target(args, name, workdir, origin_port, phase):
    """Start one proxy; phase 'hit' or 'mem' picks the store sizes."""
    port = pt.free_port()
    if phase == "hit":
        mem_size = args.store_size
        file_size = args.store_size
        keys_zone, max_size = "16m", "4g"
    else:
        n = args.objects
        mem_size = max(args.store_size_bytes, n * 2048)
        mem_size = size_arg(mem_size)
        # Varnish's file store rounds every object up to a 4 KiB page;
        # surogat's file store gets the same size.
        file_size = size_arg(max(args.store_size_bytes, n * 8192))
        keys_zone = size_arg(max(16 << 20, n * 256))
        max_size = size_arg(max(4 << 30, n * 16384))
    dname = name if phase == "hit" else f"{name}-mem"
    store_file = os.path.join(args.file_dir_run, f"{dname}.bin")
    storage = (f"file,{store_file},{file_size}" if name in FILE_STORES
               else f"malloc,{mem_size}")
    if name.startswith("surogat"):
        srv = start_surogat(args, dname, workdir, port, origin_port, storage,
                            binary=args.before if name in BEFORE else None)
    elif name.startswith("varnish"):
        srv = start_varnish(args, dname, workdir, port, origin_port, storage)
    elif name == "haproxy":
        srv = start_haproxy_cache(args, dname, workdir, port, origin_port)
    else:
        srv = start_nginx_cache(args, dname, workdir, port, origin_port, keys_zone, max_size)
    if name in FILE_STORES:
        srv.store_file = store_file
    srv.name = name
    srv.dir = os.path.join(workdir, dname)
    pt.wait_ready(srv.proc, port, "/1k", 1024, name, timeout=60)
    if srv.kind == "surogat":
        kids = pt.descendants(srv.proc.pid)
        if kids:  # a manager/child split: measure the busiest child
            srv.pid = max(kids, key=lambda k: pt.threads(k) or 0)
            log(f"surogat forked {kids}: measuring pid {srv.pid} ({pt.comm(srv.pid)})")
    store = " ".join(a for a in srv.argv if a.startswith(("malloc,", "file,")))
    log(f"{name} on 127.0.0.1:{port} (pid {srv.pid}, core {args.proxy_cpu}) {store}")
    return srv


def stop_server(srv):
    pt.stop(srv.proc)
    if srv.proc in pt.STARTED:
        pt.STARTED.remove(srv.proc)


def surogatctl(args, srv, *cmd):
    """surogatctl's output for one command, run on the client core."""
    return subprocess.run(["taskset", "-c", str(args.client_cpu), args.surogatctl,
                           "-T", srv.admin, *cmd],
                          capture_output=True, text=True, timeout=15).stdout


def cache_counters(args, srv):
    """{'hit', 'miss', 'n_object', 'nuked'} from the proxy itself, or {}."""
    try:
        if srv.kind == "surogat":
            s = json.loads(surogatctl(args, srv, "stats", "-j"))
            return {"hit": s.get("cache_hit"), "miss": s.get("cache_miss"),
                    "n_object": s.get("n_object"), "nuked": s.get("n_lru_nuked"),
                    "coalesced": s.get("cache_coalesced"),
                    **{k: s.get(k) for k in ("sto_recovered", "sto_recover_dropped",
                                             "sto_bytes", "sto_size", "sto_frag_bytes",
                                             "n_copy", "copy_bytes", "copy_hit",
                                             "transcode_delivered")}}
        if srv.kind == "varnish":
            p = subprocess.run(["taskset", "-c", str(args.client_cpu), args.varnishstat,
                                "-n", srv.ndir, "-1", "-j"],
                               capture_output=True, text=True, timeout=15)
            s = json.loads(p.stdout)
            s = s.get("counters", s)

            def v(k):
                x = s.get(k)
                return x.get("value") if isinstance(x, dict) else None
            return {"hit": v("MAIN.cache_hit"), "miss": v("MAIN.cache_miss"),
                    "n_object": v("MAIN.n_object"), "nuked": v("MAIN.n_lru_nuked"),
                    "coalesced": v("MAIN.busy_sleep")}
    except Exception as e:  # noqa: BLE001 -- counters are diagnostics
        return {"error": str(e)}
    return {}


# --- wrk -------------------------------------------------------------------


def run_wrk(args, port, path, conns, secs, script=None, script_args=(), latency=True,
            headers=()):
    argv = ["taskset", "-c", str(args.client_cpu), args.wrk, "-t", str(args.wrk_threads),
            "-c", str(conns), "-d", f"{secs}s", "--timeout", "5s"]
    for h in headers:
        argv += ["-H", h]
    if latency:
        argv.append("--latency")
    if script:
        argv += ["-s", script]
    argv.append(f"http://127.0.0.1:{port}{path}")
    if script_args:
        argv += ["--"] + [str(a) for a in script_args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    pt.STARTED.append(proc)
    try:
        out, _ = proc.communicate(timeout=secs + 60)
    except subprocess.TimeoutExpired:
        pt.stop(proc)
        out = b"wrk: did not finish in time\n"
    pt.STARTED.remove(proc)
    return argv, out.decode(errors="replace")


def fill(args, srv, prefix, n, conns=None):
    """Request prefix0 .. prefix(n-1) once each through srv; a dict of what happened."""
    conns = conns or args.fill_conns
    nthr = max(1, min(args.wrk_threads, n))
    conns = max(conns, nthr)
    cap = int(60 + n / 1000)
    argv = ["taskset", "-c", str(args.client_cpu), args.wrk, "-t", str(nthr),
            "-c", str(conns), "-d", f"{cap}s", "--timeout", "10s",
            "-s", os.path.join(LUA, "fill.lua"), f"http://127.0.0.1:{srv.port}/",
            "--", prefix, str(n), str(nthr)]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    pt.STARTED.append(proc)
    lines = queue.Queue()

    def reader():
        for line in proc.stdout:
            lines.put(line.decode(errors="replace"))
        lines.put(None)

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    out, done, secs = [], 0, None
    deadline = t0 + cap + 30
    eof = False
    while not eof and done < nthr and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            continue
        if line is None:
            eof = True
            break
        out.append(line)
        if line.startswith("fill-done"):
            done += 1
            if done == nthr:
                secs = time.monotonic() - t0
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGINT)  # wrk: stop now, print the summary
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pt.stop(proc)
    th.join(timeout=10)
    while True:
        try:
            line = lines.get_nowait()
        except queue.Empty:
            break
        if line is None:
            break
        out.append(line)
    pt.STARTED.remove(proc)
    text = "".join(out)
    r = {"n": n, "threads_done": done, "threads": nthr, "secs": secs, "argv": argv}
    m = re.search(r"fill-total ok=(\d+) bad=(\d+) extra=(\d+)", text)
    if m:
        r["ok"], r["bad"], r["extra"] = (int(x) for x in m.groups())
    else:
        r["raw"] = text[-2000:]
    r["complete"] = done == nthr and r.get("ok") == n and r.get("bad") == 0
    if not r["complete"]:
        log(f"!! fill {prefix} x{n} via {srv.name}: incomplete: {done}/{nthr} threads, "
            f"ok {r.get('ok')} bad {r.get('bad')}\n{text[-1500:]}")
    return r


# --- hit phase -------------------------------------------------------------


def scenarios(args):
    out = []
    for name, path, size in OBJECTS:
        if name in args.sizes:
            for c in args.conns:
                out.append({"object": name, "path": path, "size": size, "conns": c,
                            "label": f"{name} c{c}"})
    for name, path, size, ae in PAGES:
        if name in args.sizes:
            for c in args.conns:
                out.append({"object": name, "path": path, "size": size, "conns": c,
                            "ae": ae, "label": f"{name} c{c}"})
    if ZIPF in args.sizes:
        for c in args.conns:
            out.append({"object": ZIPF, "path": "/", "size": ZIPF_SIZE, "conns": c,
                        "label": f"{ZIPF} c{c}"})
    return out


def zipf_prefix(s):
    """Each Zipf scenario has its own URLs (/z50/N, /z400/N), so each starts cold."""
    return f"/z{s['conns']}/"


def check_hit(args, srv, s):
    """Is s's object (Zipf: the most popular URL) a hit now? {'hit', 'evidence'}."""
    paths = [f"{zipf_prefix(s)}0"] if s["object"] == ZIPF else [s["path"]]
    seen, ok = [], True
    for p in paths:
        status, headers, _ = http_head(srv.port, p, timeout=30)
        hit, ev = hit_seen(srv.kind, headers)
        ok = ok and status == 200 and hit
        seen.append(f"{p}: {status} {ev}")
    return {"hit": ok, "evidence": "; ".join(seen)}


def warm(args, srv, s):
    """Store s's object(s) in srv and check the hit; Zipf: only with --zipf-prefill."""
    if s["object"] == ZIPF:
        if not args.zipf_prefill:
            return {"hit": None, "evidence": "cold start"}
        f = fill(args, srv, zipf_prefix(s), args.zipf_urls)
        r = {"fill": {k: f.get(k) for k in ("ok", "bad", "secs", "complete")}}
    else:
        pt.http_get(srv.port, s["path"], timeout=30)  # the miss that stores it
        r = {}
    r.update(check_hit(args, srv, s))
    if not r["hit"]:
        log(f"!! {srv.name}: {s['label']}: no hit after warming: {r['evidence']}")
    return r


def wrk_for(args, srv, s, secs, latency=True):
    if s["object"] == ZIPF:
        return run_wrk(args, srv.port, "/", s["conns"], secs,
                       script=os.path.join(LUA, "zipf.lua"),
                       script_args=(args.zipf_table, zipf_prefix(s), args.zipf_urls),
                       latency=latency)
    return run_wrk(args, srv.port, s["path"], s["conns"], secs, latency=latency,
                   headers=[f"Accept-Encoding: {s['ae']}"] if s.get("ae") else [])


def measure(args, srv, origin, s):
    if args.warmup > 0:
        wrk_for(args, srv, s, args.warmup, latency=False)
    c0 = cache_counters(args, srv)
    _, oreq0 = origin_counts(origin.port)
    ticks0 = pt.proc_ticks(srv.pid)
    oticks0 = pt.proc_ticks(origin.pid)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = pt.cpu_times()
    t0 = time.monotonic()
    argv, out = wrk_for(args, srv, s, args.duration)
    wall = time.monotonic() - t0
    ticks1 = pt.proc_ticks(srv.pid)
    oticks1 = pt.proc_ticks(origin.pid)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu1 = pt.cpu_times()
    _, oreq1 = origin_counts(origin.port)
    c1 = cache_counters(args, srv)
    row = pt.parse_wrk(out)
    row["wrk_argv"] = argv

    def pct(a, b):
        return None if a is None or b is None else 100.0 * (b - a) / CLK_TCK / wall

    row["cpu_pct"] = pct(ticks0, ticks1)
    row["origin_cpu_pct"] = pct(oticks0, oticks1)
    row["wrk_cpu_pct"] = 100.0 * ((ru1.ru_utime + ru1.ru_stime)
                                  - (ru0.ru_utime + ru0.ru_stime)) / wall
    for c in (args.proxy_cpu, args.client_cpu):
        if c in cpu0 and c in cpu1:
            total = cpu1[c][1] - cpu0[c][1]
            row[f"core{c}_busy_pct"] = 100.0 * (cpu1[c][0] - cpu0[c][0]) / total if total else None
    busy0 = row.get(f"core{args.proxy_cpu}_busy_pct")
    busy1 = row.get(f"core{args.client_cpu}_busy_pct")
    if args.proxy_cpu != args.client_cpu:
        if busy0 is not None:
            row["core_proxy_other_pct"] = max(0.0, busy0 - (row["cpu_pct"] or 0.0))
        if busy1 is not None:
            row["core_client_other_pct"] = max(
                0.0, busy1 - row["wrk_cpu_pct"] - (row["origin_cpu_pct"] or 0.0))
    if oreq0 is not None and oreq1 is not None:
        row["origin_reqs"] = oreq1 - oreq0 - 1  # less the second status request
        if row.get("requests"):
            row["no_origin_frac"] = max(0.0, 1.0 - row["origin_reqs"] / row["requests"])
    if c0.get("hit") is not None and c1.get("hit") is not None:
        h = c1["hit"] - c0["hit"]
        m = (c1.get("miss") or 0) - (c0.get("miss") or 0)
        row["hits"], row["misses"] = h, m
        row["hit_frac"] = h / (h + m) if h + m else None
    row["counters_after"] = c1
    return row


def hit_phase(args, servers, origin):
    results = []
    targets = list(servers.values())
    for i, s in enumerate(scenarios(args)):
        order = targets[i % len(targets):] + targets[:i % len(targets)]
        for srv in order:
            row = {"scenario": s["label"], "target": srv.name, **s}
            if not srv.check_alive():
                row["error"] = srv.dead
                results.append(row)
                continue
            try:
                row["warm"] = warm(args, srv, s)
            except Exception as e:  # noqa: BLE001 -- report, keep going
                row["warm"] = {"hit": False, "evidence": f"warming failed: {e}"}
                log(f"!! {srv.name}: {s['label']}: warming failed: {e}")
            tries = []
            for attempt in range(1 + args.retries):
                r = measure(args, srv, origin, s)
                tries.append(r)
                noise = max(r.get("core_proxy_other_pct") or 0,
                            r.get("core_client_other_pct") or 0)
                if not srv.check_alive() or noise <= args.noise_limit:
                    break
                log(f"{s['label']:16} {srv.name:14} disturbed: {noise:.0f}% of a core busy "
                    f"outside the benchmark (limit {args.noise_limit:g}%), "
                    + ("retrying" if attempt < args.retries else "keeping the best"))
                pt.wait_idle(min(60.0, args.wait_idle))
            best = min(tries, key=lambda r: max(r.get("core_proxy_other_pct") or 0,
                                                r.get("core_client_other_pct") or 0))
            row.update(best)
            row["attempts"] = len(tries)
            try:
                row["hit_check"] = check_hit(args, srv, s)
            except Exception as e:  # noqa: BLE001
                row["hit_check"] = {"hit": False, "evidence": f"check failed: {e}"}
            row["other_attempts"] = [t for t in tries if t is not best]
            if srv.dead:
                row["error"] = srv.dead
            log(f"{s['label']:16} {srv.name:14} {pt.fmt_num(row.get('rps')):>9} req/s  "
                f"p99 {pt.fmt_ms(row.get('p99')):>8}  cpu {pt.fmt_pct(row.get('cpu_pct'))} "
                f"({fmt_us(pt.per_core(row))} us/req)  "
                f"origin reqs {row.get('origin_reqs')}  hits {fmt_frac(row.get('hit_frac'))}  "
                f"hit after {row['hit_check'].get('hit')}  non2xx {row['non2xx']} "
                f"sockerr {row['sock_errors'] or 0}"
                + (f"  ERROR {row['error']}" if row.get("error") else ""))
            results.append(row)
    return results


# --- memory phase ----------------------------------------------------------


def memory_phase(args, workdir, origin):
    out = {}
    n = args.objects
    for name in args.targets:
        r = {"objects": n}
        out[name] = r
        srv = None
        try:
            srv = start_target(args, name, workdir, origin.port, "mem")
            r["argv"] = srv.argv
            time.sleep(args.settle)
            # Touch worker threads, buffers and allocator arenas first, so the
            # baseline holds them and the difference is the objects.
            pre = fill(args, srv, "/w/", args.prefill)
            r["prefill"] = {k: pre.get(k) for k in ("ok", "bad", "secs", "complete")}
            time.sleep(2)
            r["before"] = rss_fields(srv.pid)
            r["counters_before"] = cache_counters(args, srv)
            _, oreq0 = origin_counts(origin.port)
            log(f"mem: {name}: loading {n:,} objects of {args.object_size} B "
                f"(VmRSS {pt.fmt_mib(r['before']['VmRSS'])} MiB)")
            f = fill(args, srv, "/m/", n)
            r["fill"] = {k: f.get(k) for k in ("ok", "bad", "extra", "secs", "complete")}
            time.sleep(args.mem_settle)
            r["after"] = rss_fields(srv.pid)
            _, oreq1 = origin_counts(origin.port)
            r["origin_reqs"] = None if oreq0 is None or oreq1 is None else oreq1 - oreq0 - 1
            r["counters_after"] = cache_counters(args, srv)
            if srv.kind == "nginx":
                r["tmpfs_bytes"] = dir_bytes(srv.cache_dir)
            r["hit_checks"] = hit_checks(srv, ("/m/0", f"/m/{n - 1}"))
            srv.check_alive()
            if srv.dead:
                r["error"] = srv.dead
            elif name == "surogat-file" and args.restart:
                r["restart"] = restart_phase(args, srv, origin, r)
        except Exception as e:  # noqa: BLE001 -- report, keep going
            r["error"] = str(e)
            log(f"!! mem: {name}: {e}")
        finally:
            if srv is not None:
                stop_server(srv)
                if getattr(srv, "store_file", None):
                    try:
                        os.unlink(srv.store_file)
                    except OSError:
                        pass
                if getattr(srv, "dir", None):
                    shutil.rmtree(srv.dir, True)
        mem_figures(args, name, r)
        log(f"mem: {name}: {json.dumps({k: r.get(k) for k in ('delta_kib', 'counted_bytes', 'per_object', 'fill')})}")
        time.sleep(1)
    return out


def hit_checks(srv, paths):
    out = []
    for p in paths:
        status, headers, _ = http_head(srv.port, p)
        hit, ev = hit_seen(srv.kind, headers)
        out.append({"path": p, "status": status, "hit": hit and status == 200, "evidence": ev})
    return out


# --- restart phase ---------------------------------------------------------


def restart_phase(args, srv, origin, mem):
    """srv (surogat-file) holds the memory phase's objects: stop it with SIGTERM,
    start it again on the same store, then the same with kill -9.  srv follows
    the new process.  A list of dicts, one per restart."""
    runs = []
    # What went into the store: the objects, the baseline's and the /1k of
    # the readiness check.  (n_object also counts the hit-for-miss marker of
    # the loader's uncacheable /fill-sentinel, which is not stored.)
    stored = args.objects + args.prefill + 1
    n_object = (mem.get("counters_after") or {}).get("n_object")
    for how, sig in (("SIGTERM", signal.SIGTERM), ("kill -9", signal.SIGKILL)):
        x = {"stop": how, "stored": stored, "n_object_before": n_object}
        runs.append(x)
        try:
            restart_once(args, srv, origin, sig, x)
        except Exception as e:  # noqa: BLE001 -- report, keep going
            x["error"] = str(e)
        log(f"restart: {json.dumps({k: v for k, v in x.items() if k != 'storage_list'})}")
        if x.get("error"):
            break
        n_object = (x.get("counters") or {}).get("n_object")
    return runs


def wait_accepting(proc, port, timeout):
    """Return once a TCP connection to port succeeds (polled every 2 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with status {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            time.sleep(0.002)
    raise RuntimeError(f"not accepting on port {port} after {timeout:.0f}s")


def restart_once(args, srv, origin, sig, x):
    n = args.objects
    _, oreq0 = origin_counts(origin.port)
    old = srv.proc
    pids = [old.pid] + pt.descendants(old.pid)  # all ours: started by start_surogat
    t0 = time.monotonic()
    for pid in pids if sig == signal.SIGKILL else pids[:1]:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    try:
        old.wait(timeout=120)
    except subprocess.TimeoutExpired:
        stop_server(srv)
        raise RuntimeError(f"pid {old.pid} still running 120 s after {x['stop']}")
    x["stop_secs"] = time.monotonic() - t0
    x["exit_status"] = old.returncode
    if old in pt.STARTED:
        pt.STARTED.remove(old)

    srv.logfile = os.path.join(srv.dir, f"stderr-after-{signal.Signals(sig).name.lower()}.log")
    timeout = 120 + n / 2000
    t0 = time.monotonic()
    srv.proc = pt.spawn(srv.argv, srv.logfile)
    srv.pid = srv.proc.pid
    srv.dead = None
    wait_accepting(srv.proc, srv.port, timeout)
    x["accept_secs"] = time.monotonic() - t0
    while True:
        h = hit_checks(srv, ("/m/0",))[0]
        x.setdefault("first_response", f"{h['status']} "
                     + ("hit" if h["hit"] else f"NOT A HIT ({h['evidence']})"))
        if h["hit"]:
            x["first_hit_secs"] = time.monotonic() - t0
            break
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"/m/0 no hit {timeout:.0f}s after the start: {h['evidence']}")
        time.sleep(0.01)
    x["hit_checks"] = hit_checks(srv, ("/m/0", f"/m/{n - 1}"))
    _, oreq1 = origin_counts(origin.port)
    x["origin_reqs"] = None if oreq0 is None or oreq1 is None else oreq1 - oreq0 - 1
    x["counters"] = cache_counters(args, srv)
    x["recovered"] = x["counters"].get("sto_recovered")
    x["rss"] = rss_fields(srv.pid)
    x["storage_list"] = surogatctl(args, srv, "storage.list")
    m = None
    for line in pt.tail(srv.logfile, 200).splitlines():
        m = re.search(r"recovered \d+ objects.*", line) or m
    x["log_line"] = m.group(0) if m else None
    if not all(h["hit"] for h in x["hit_checks"]):
        x["error"] = "no hit: " + "; ".join(h["evidence"] for h in x["hit_checks"])


def mem_figures(args, name, r):
    b, a = r.get("before"), r.get("after")
    if not b or not a or any(v is None for v in list(b.values()) + list(a.values())):
        return
    d = {k: a[k] - b[k] for k in a}
    r["delta_kib"] = d
    # What each one's cache costs in memory: anonymous memory for the malloc
    # stores; plus the touched pages of the mapped store file for Varnish's
    # file store; plus the keys zone (shared memory) and the cache files on
    # tmpfs for nginx.  Varnish's shared-memory log (RssShmem: its -n
    # directory is on tmpfs) is left out.
    counted = d["RssAnon"] * 1024
    if name in FILE_STORES:
        counted += d["RssFile"] * 1024
    if name == "nginx":
        counted += d["RssShmem"] * 1024 + r.get("tmpfs_bytes", 0)
    r["counted_bytes"] = counted
    r["per_object"] = counted / r["objects"]
    r["vmrss_per_object"] = d["VmRSS"] * 1024 / r["objects"]


# --- report ----------------------------------------------------------------


def fmt_frac(v):
    return "-" if v is None else f"{100.0 * v:.1f}%"


def fmt_us(per_core):
    """Proxy CPU per request in microseconds, from requests per second of proxy CPU."""
    return "-" if not per_core else f"{1e6 / per_core:.1f}"


def fmt_bytes(v):
    return "-" if v is None else f"{v:,.0f}"


def fmt_secs(v):
    return "-" if v is None else f"{v:.3f}s"


def report(args, meta, results, mem, present):
    lines = []
    add = lines.append
    by = {(r["scenario"], r["target"]): r for r in results}
    scen = [s["label"] for s in scenarios(args)]
    names = [n for n in PROXIES if n in args.targets]
    pairs = [(a, b) for a, b in RATIOS if a in names and b in names]
    labels = [f"{SHORT[a]}/{SHORT[b]}" for a, b in pairs]

    if results:
        add("### Hit throughput and p99 latency (wrk)")
        add("")
        add("| scenario | " + " | ".join(f"{n} req/s" for n in names)
            + "".join(f" | {x} req/s" for x in labels) + " | "
            + " | ".join(f"{n} p99" for n in names)
            + "".join(f" | {x} p99" for x in labels) + " |")
        add("|---|" + "--:|" * (2 * len(names) + 2 * len(pairs)))
        for sc in scen:
            rows = {n: by.get((sc, n)) for n in names}
            cells = []
            for key, fmt in (("rps", pt.fmt_num), ("p99", pt.fmt_ms)):
                v = {n: (rows[n] or {}).get(key) for n in names}
                cells += [pt.cell(rows[n], key, fmt) for n in names]
                cells += [pt.ratio(v[a], v[b]) for a, b in pairs]
            add(f"| {sc} | " + " | ".join(cells) + " |")
        add("")
        if pairs:
            add(", ".join(f"{x}: {a} divided by {b}" for x, (a, b) in zip(labels, pairs))
                + " (req/s: above 1 is better for the first; p99: below 1 is better for the "
                "first)."
                + (" Target for sf/s req/s: at least 0.90 (the file store within 10% of the "
                   "malloc store)." if ("surogat-file", "surogat") in pairs else ""))
            add("")
        add(f"{ZIPF}: {args.zipf_urls:,} URLs of {ZIPF_SIZE} B, Zipf s={args.zipf_s:g}, "
            + ("every URL loaded once into each cache before the warmup." if args.zipf_prefill
               else "each cache cold when its warmup starts, with URLs of its own per "
               "connection count (/z50/N, /z400/N): the misses of the long tail show."))
        add("")
        add("### Cache hits and diagnostics per run")
        add("")
        add("origin reqs: requests the origin served during the measured run (stub_status); "
            "no origin: share of the run's responses that needed no origin request; hits: "
            "the proxy's own hit/(hit+miss) counters over the run (surogat `cache_hit`, "
            "`cache_miss`; Varnish `MAIN.cache_hit`, `MAIN.cache_miss`; nginx has none); "
            "hit check: the response headers of one more request after the run (for "
            f"{ZIPF}: the most popular URL), surogat `Cache-Status`, Varnish `X-Varnish` "
            "with two ids, nginx `X-Cache-Status`; proxy cpu, "
            f"core{args.client_cpu} busy, other: as in passthrough.py.")
        add("")
        add(f"| scenario | target | req/s | p50 | p99 | proxy cpu | req/s per proxy core "
            f"| proxy CPU us/req | core{args.client_cpu} busy "
            f"| other core{args.proxy_cpu} / core{args.client_cpu} "
            "| origin reqs | no origin | hits | hit check | errors |")
        add("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|")
        for sc in scen:
            for t in names:
                r = by.get((sc, t))
                if r is None:
                    continue
                errs = []
                if r.get("non2xx"):
                    errs.append(f"non-2xx {r['non2xx']}")
                for k, v in (r.get("sock_errors") or {}).items():
                    errs.append(f"{k} {v}")
                if r.get("error"):
                    errs.append(r["error"])
                w = r.get("hit_check") or {}
                add(f"| {sc} | {t} | {pt.cell(r, 'rps', pt.fmt_num)} "
                    f"| {pt.cell(r, 'p50', pt.fmt_ms)} | {pt.cell(r, 'p99', pt.fmt_ms)} "
                    f"| {pt.fmt_pct(r.get('cpu_pct'))} | {pt.fmt_num(pt.per_core(r))} "
                    f"| {fmt_us(pt.per_core(r))} "
                    f"| {pt.fmt_pct(r.get(f'core{args.client_cpu}_busy_pct'))} "
                    f"| {pt.fmt_pct(r.get('core_proxy_other_pct'))} / "
                    f"{pt.fmt_pct(r.get('core_client_other_pct'))}"
                    + (f" ({r['attempts']} tries)" if r.get("attempts", 1) > 1 else "")
                    + f" | {pt.fmt_num(r.get('origin_reqs'))} | {fmt_frac(r.get('no_origin_frac'))} "
                    f"| {fmt_frac(r.get('hit_frac'))} "
                    f"| {'hit' if w.get('hit') else 'NO HIT: ' + str(w.get('evidence'))} "
                    f"| {', '.join(errs) or '0'} |")
        add("")
        if meta.get("rss_after_hits"):
            add("VmRSS after the hit phase: " + ", ".join(
                f"{n} {pt.fmt_mib(v)} MiB" for n, v in meta["rss_after_hits"].items()) + ".")
            add("")

    if mem:
        add(f"### Memory with {args.objects:,} small objects")
        add("")
        add(f"Fresh processes, one at a time. {args.prefill:,} objects loaded first (to wake "
            "threads and allocators), then the baseline read, then "
            f"{args.objects:,} distinct URLs of {args.object_size} B bodies loaded "
            f"(wrk + lua/fill.lua, {args.fill_conns} connections), then RSS read "
            f"{args.mem_settle:g} s later. Deltas in MiB. counted: what the cache costs: "
            "ΔRssAnon for surogat and varnish-malloc; plus ΔRssFile (mapped store file) for "
            "surogat-file and varnish-file; plus ΔRssShmem (keys zone) and the cache files on tmpfs for nginx. "
            "Varnish's ΔVmRSS also holds pages of its shared-memory log (up to 80 MiB), "
            "hence RssAnon. overhead: counted per object less the body.")
        add("")
        add("| proxy | loaded / origin reqs | load time (req/s) | n_object | VmRSS base "
            "| VmRSS after | ΔVmRSS | ΔRssAnon | ΔRssFile | ΔRssShmem | tmpfs files "
            "| counted B/object | overhead B/object | hit after | errors |")
        add("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|")
        for n in names:
            r = mem.get(n)
            if r is None:
                continue
            f = r.get("fill") or {}
            b, a, d = r.get("before") or {}, r.get("after") or {}, r.get("delta_kib") or {}
            ca = r.get("counters_after") or {}
            errs = []
            if r.get("error"):
                errs.append(r["error"])
            if f and not f.get("complete"):
                errs.append(f"load incomplete (ok {f.get('ok')}, bad {f.get('bad')})")
            if ca.get("nuked"):
                errs.append(f"{ca['nuked']} evicted")
            secs = f.get("secs")
            rate = f"{secs:.1f}s ({pt.fmt_num(args.objects / secs)})" if secs else "-"
            hits = r.get("hit_checks") or []
            po = r.get("per_object")
            add(f"| {n} | {pt.fmt_num(f.get('ok'))} / {pt.fmt_num(r.get('origin_reqs'))} "
                f"| {rate} | {pt.fmt_num(ca.get('n_object'))} "
                f"| {pt.fmt_mib(b.get('VmRSS'))} | {pt.fmt_mib(a.get('VmRSS'))} "
                f"| {pt.fmt_mib(d.get('VmRSS'))} | {pt.fmt_mib(d.get('RssAnon'))} "
                f"| {pt.fmt_mib(d.get('RssFile'))} | {pt.fmt_mib(d.get('RssShmem'))} "
                f"| {pt.fmt_mib(r['tmpfs_bytes'] / 1024) if 'tmpfs_bytes' in r else '-'} "
                f"| {fmt_bytes(po)} "
                f"| {fmt_bytes(None if po is None else po - args.object_size)} "
                f"| {'/'.join('yes' if h['hit'] else 'no' for h in hits) or '-'} "
                f"| {', '.join(errs) or '0'} |")
        add("")
        parts = []
        for a, b in pairs:
            s, o = ((mem.get(x) or {}).get("per_object") for x in (a, b))
            if s and o:
                so, oo = s - args.object_size, o - args.object_size
                parts.append(f"{a}/{b} {s / o:.2f} per object, "
                             f"{so / oo:.2f} overhead beyond the body" if oo > 0 else
                             f"{a}/{b} {s / o:.2f} per object")
        if parts:
            add("Ratios: " + "; ".join(parts) + ".")
            add("")
        sto = []
        for n in names:
            ca = (mem.get(n) or {}).get("counters_after") or {}
            if ca.get("sto_bytes") is not None:
                sto.append(f"{n} sto_bytes {pt.fmt_mib(ca['sto_bytes'] / 1024)} MiB of sto_size "
                           f"{pt.fmt_mib((ca.get('sto_size') or 0) / 1024)} MiB "
                           f"({fmt_bytes(ca['sto_bytes'] / max(1, ca.get('n_object') or 1))} B "
                           f"per object), sto_frag_bytes {fmt_bytes(ca.get('sto_frag_bytes'))}")
        if sto:
            add("surogat's store counters after loading: " + "; ".join(sto) + ".")
            add("")
        restart = (mem.get("surogat-file") or {}).get("restart")
        if restart:
            report_restart(args, add, mem["surogat-file"], restart)
    return "\n".join(lines)


def report_restart(args, add, r, runs):
    n = args.objects
    add(f"### Restart of surogat-file with {n:,} stored objects")
    add("")
    add(f"After the memory phase ({n:,} objects /m/0 .. /m/{n - 1} loaded, plus the "
        f"{args.prefill:,} of the baseline): the daemon stopped, then started again with "
        "the same arguments and store file; first with SIGTERM (clean stop), then, on the "
        "restarted daemon, with kill -9. stored: the objects that went into the store "
        f"({n:,} + {args.prefill:,} + the /1k of the readiness check); recovered: "
        "`sto_recovered` after the start; accepting: from exec to the port accepting a TCP "
        "connection; first hit: from exec to the first response to /m/0 that says hit "
        "(`Cache-Status: surogat; hit`), polled from the moment the port accepts; origin reqs: "
        "requests the origin saw from the stop to the end of the checks (0: everything "
        "came from the store). Varnish has no persistent store (its file store starts "
        "empty after a restart), so there is no comparison column.")
    add("")
    add("| stop | stop time | loaded | stored | recovered | recovered/stored "
        "| accepting | first hit /m/0 | first response | hit /m/0, /m/N-1 | origin reqs "
        "| VmRSS / RssFile after | log | errors |")
    add("|---|--:|--:|--:|--:|--:|--:|--:|---|---|--:|--:|---|---|")
    for x in runs:
        stored, rec = x.get("stored"), x.get("recovered")
        frac = rec / stored if rec is not None and stored else None
        hits = x.get("hit_checks") or []
        rss = x.get("rss") or {}
        st = x.get("exit_status")
        st = "" if st is None else f" (exit {st})" if st >= 0 else f" (signal {-st})"
        add(f"| {x['stop']} | {fmt_secs(x.get('stop_secs'))}{st} | {pt.fmt_num(n)} "
            f"| {pt.fmt_num(stored)} | {pt.fmt_num(rec)} | {fmt_frac(frac)} "
            f"| {fmt_secs(x.get('accept_secs'))} | {fmt_secs(x.get('first_hit_secs'))} "
            f"| {x.get('first_response', '-')} "
            f"| {'/'.join('yes' if h['hit'] else 'no' for h in hits) or '-'} "
            f"| {pt.fmt_num(x.get('origin_reqs'))} "
            f"| {pt.fmt_mib(rss.get('VmRSS'))} / {pt.fmt_mib(rss.get('RssFile'))} MiB "
            f"| {x.get('log_line') or '-'} | {x.get('error') or '0'} |")
    add("")
    listing = (runs[-1].get("storage_list") or "").strip()
    if listing:
        add(f"`surogatctl storage.list` after the last restart:\n\n```\n{listing}\n```")
        add("")


# --- main ------------------------------------------------------------------


def surogat_version(path):
    v = path
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        v += f" (tree at git {rev or 'no commit'}{', dirty' if dirty else ''}"
        st = os.stat(path)
        with open(path, "rb") as f:
            digest = hashlib.sha1(f.read()).hexdigest()[:12]
        built = datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc)
        v += f"; binary sha1 {digest}, built {built:%Y-%m-%d %H:%M} UTC)"
    except Exception:  # noqa: BLE001
        pass
    return v


def zipf_table(path, k, s, m):
    """m ranks, the quantiles (j+0.5)/m of Zipf(s) over ranks 0 .. k-1."""
    w = [1.0 / (r + 1) ** s for r in range(k)]
    total = sum(w)
    cdf, acc = [], 0.0
    for x in w:
        acc += x
        cdf.append(acc / total)
    cdf[-1] = 1.0
    ranks = [min(k - 1, bisect.bisect_left(cdf, (j + 0.5) / m)) for j in range(m)]
    with open(path, "w") as f:
        f.write("\n".join(map(str, ranks)) + "\n")
    return len(set(ranks))


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build-bench", "surogatd"),
                    help="surogatd binary (default: <repo>/build-bench/surogatd)")
    ap.add_argument("--surogatctl", default=None,
                    help="surogatctl binary (default: next to --surogatd)")
    ap.add_argument("--before", default=None, metavar="SUROGATD",
                    help="an older surogatd (e.g. a release build of main): adds "
                    "surogat-before and surogat-file-before, measured in the same sitting, "
                    "each scenario's targets in turn")
    ap.add_argument("--only", default=None,
                    help="comma-separated subset of " + ",".join(PROXIES))
    ap.add_argument("--quick", action="store_true",
                    help="smoke mode: 2 s runs, 1 s warmup, 10,000 objects")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured wrk run")
    ap.add_argument("--warmup", type=int, default=3, help="seconds of wrk warmup before each run")
    ap.add_argument("--conns", default="50,400", help="wrk connection counts")
    ap.add_argument("--sizes", default="1KiB,128KiB,1MiB,page9k-gz,page9k-id," + ZIPF,
                    help="scenarios: 1KiB,128KiB,1MiB," + ZIPF)
    ap.add_argument("--zipf-urls", type=int, default=10000)
    ap.add_argument("--zipf-s", type=float, default=1.0, help="Zipf exponent")
    ap.add_argument("--zipf-table-size", type=int, default=1 << 20,
                    help="entries in the quantile table the lua script picks from")
    ap.add_argument("--zipf-prefill", action="store_true",
                    help="load every Zipf URL before the warmup (else: cold start)")
    ap.add_argument("--objects", type=int, default=None,
                    help="objects for the memory phase (default 100000; --quick 10000)")
    ap.add_argument("--object-size", type=int, default=100,
                    help="body bytes of each memory-phase object")
    ap.add_argument("--prefill", type=int, default=1000,
                    help="objects loaded before the memory baseline")
    ap.add_argument("--fill-conns", type=int, default=32, help="connections of the loader")
    ap.add_argument("--mem-settle", type=float, default=3.0,
                    help="seconds between the end of loading and the RSS reading")
    ap.add_argument("--store-size", default="1g",
                    help="cache size for the hit phase (-s malloc,SIZE; the file stores "
                    "too); the memory phase grows it with --objects")
    ap.add_argument("--file-dir", default="/var/tmp",
                    help="directory for the -s file stores of surogat-file and varnish-file "
                    "(a disk, not tmpfs)")
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds between starting the proxies and the first measurement")
    ap.add_argument("--noise-limit", type=float, default=20.0,
                    help="redo a run when more than this %% of a core was busy outside it")
    ap.add_argument("--wait-idle", type=float, default=300.0,
                    help="seconds to wait for an idle machine before starting")
    ap.add_argument("--retries", type=int, default=2, help="redos of a disturbed run")
    ap.add_argument("--no-hits", action="store_true", help="skip the hit phase")
    ap.add_argument("--no-memory", action="store_true",
                    help="skip the memory phase (and with it the restart phase)")
    ap.add_argument("--no-restart", dest="restart", action="store_false",
                    help="skip the restart phase (surogat-file stopped and started again "
                    "on its store after the memory phase, SIGTERM then kill -9)")
    ap.add_argument("--thread-pools", type=int, default=2,
                    help="thread_pools for surogat and varnish")
    ap.add_argument("--thread-pool-min", type=int, default=250,
                    help="thread_pool_min for surogat and varnish (per pool)")
    ap.add_argument("--nginx-keepalive", type=int, default=64,
                    help="nginx upstream keepalive (idle connections cached)")
    ap.add_argument("-P", "--surogat-param", action="append", default=[],
                    help="extra surogat -p name=value (repeatable)")
    ap.add_argument("--varnish-param", action="append", default=[],
                    help="extra varnishd -p name=value (repeatable)")
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--varnishd", default="/usr/sbin/varnishd")
    ap.add_argument("--haproxy", default=shutil.which("haproxy") or "/usr/sbin/haproxy")
    ap.add_argument("--varnishstat", default=shutil.which("varnishstat") or "/usr/bin/varnishstat")
    ap.add_argument("--json", help="also write every figure and raw wrk output here")
    ap.add_argument("--markdown", help="also write the tables here")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the work dir (logs, configs)")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.warmup, args.settle = 2, 1, 2.0
    if args.objects is None:
        args.objects = 10000 if args.quick else 100000
    args.surogatctl = args.surogatctl or os.path.join(os.path.dirname(args.surogatd),
                                                      "surogatctl")
    args.conns = [int(c) for c in args.conns.split(",")]
    args.sizes = args.sizes.split(",")
    known = [o[0] for o in OBJECTS] + [p[0] for p in PAGES] + [ZIPF]
    if not set(args.sizes) <= set(known):
        sys.exit(f"--sizes: {','.join(known)}")
    args.targets = (args.only.split(",") if args.only
                    else [p for p in PROXIES if args.before or p not in BEFORE])
    for t in args.targets:
        if t not in PROXIES:
            sys.exit(f"--only: unknown proxy {t}")
        if t in BEFORE and not args.before:
            sys.exit(f"--only {t}: needs --before SUROGATD")
    m = re.fullmatch(r"(\d+)([kmgt]?)", args.store_size.lower())
    if not m:
        sys.exit("--store-size: e.g. 1g, 512m")
    args.store_size_bytes = int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30,
                                                 "t": 40}[m.group(2)]
    args.prefill = min(args.prefill, args.objects)
    return args


def main():
    args = parse_args()
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)

    if any(t.startswith("surogat") for t in args.targets):
        for b in (args.surogatd, args.surogatctl) + ((args.before,) if args.before else ()):
            if not os.access(b, os.X_OK):
                sys.exit(f"missing {b} (build it, or --only without surogat)")
    for tool in (args.wrk, args.nginx, shutil.which("taskset")):
        if not tool or not os.access(tool, os.X_OK):
            sys.exit(f"missing tool: {tool}")
    if any(t.startswith("varnish") for t in args.targets):
        for tool in (args.varnishd, args.varnishstat):
            if not os.access(tool, os.X_OK):
                sys.exit(f"missing {tool}")
    if os.cpu_count() < 2:
        log("only one CPU: proxy, wrk and origin all on core 0; figures are not comparable")
        args.proxy_cpu = args.client_cpu = 0

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 65536
    target = need if hard == resource.RLIM_INFINITY else min(max(need, soft), hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    args.nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]

    versions = {
        "nginx": pt.tool_version([args.nginx, "-v"]),
        "varnish": pt.tool_version([args.varnishd, "-V"])
        if any(t.startswith("varnish") for t in args.targets) else None,
        "wrk": pt.tool_version([args.wrk, "--version"]),
        "python": platform.python_version(),
    }
    if any(t.startswith("surogat") for t in args.targets):
        versions["surogat"] = surogat_version(args.surogatd)
    if args.before:
        versions["surogat-before"] = surogat_version(args.before)
    meta = pt.machine_meta(args, versions)
    meta["busy_before_pct"] = pt.wait_idle(args.wait_idle)
    if any(v > 10 for v in meta["busy_before_pct"].values()):
        log(f"!! the machine is not idle before the run (busy % per core: "
            f"{meta['busy_before_pct']}): figures will be noisy")
    log(f"{meta['nproc']} CPUs ({meta['cpu_model']}), loadavg {meta['loadavg_start']}; "
        f"measuring {', '.join(args.targets)}")

    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    workdir = tempfile.mkdtemp(prefix="surogat-cachehit-", dir=base)
    os.chmod(workdir, 0o755)  # nginx workers and varnish drop privileges
    args.file_dir_run = tempfile.mkdtemp(prefix="surogat-cachehit-", dir=args.file_dir)
    os.chmod(args.file_dir_run, 0o755)
    if not args.keep_tmp:
        pt.CLEANUP.extend([workdir, args.file_dir_run])

        def cleanup():
            pt.stop_all()  # first: nothing may still write into the directories
            shutil.rmtree(workdir, True)
            shutil.rmtree(args.file_dir_run, True)
        atexit.register(cleanup)
    else:
        log(f"work dirs kept: {workdir} {args.file_dir_run}")

    docroot = os.path.join(workdir, "www")
    os.makedirs(os.path.join(docroot, "z"))
    for _, path, size in OBJECTS:
        write_file(docroot + path, body_bytes(size))
    for _, path, size, _ in PAGES:
        write_file(docroot + path, page_bytes(size))
    write_file(os.path.join(docroot, "obj"), body_bytes(args.object_size))
    for i in range(args.zipf_urls):
        write_file(os.path.join(docroot, "z", str(i)), body_bytes(ZIPF_SIZE, b"%d " % i))
    for d in (docroot, os.path.join(docroot, "z")):
        os.chmod(d, 0o755)
    args.zipf_table = os.path.join(workdir, "zipf.txt")
    distinct = zipf_table(args.zipf_table, args.zipf_urls, args.zipf_s, args.zipf_table_size)
    meta["zipf"] = {"urls": args.zipf_urls, "s": args.zipf_s,
                    "table": args.zipf_table_size, "ranks_in_table": distinct}

    origin_port = pt.free_port()
    origin = pt.start_nginx(args, "origin", "cache-origin-nginx.conf.in", args.client_cpu,
                            workdir, PORT=origin_port, DOCROOT=docroot)
    origin.name = "origin"
    pt.wait_ready(origin.proc, origin_port, "/1k", 1024, "origin nginx")
    status, headers, _ = http_head(origin_port, "/1k")
    meta["origin_cache_control"] = headers.get("cache-control")
    log(f"origin nginx on 127.0.0.1:{origin_port} (pid {origin.proc.pid}, core "
        f"{args.client_cpu}); Cache-Control: {headers.get('cache-control')}")

    results = []
    meta["argv"] = {}
    meta["start_errors"] = {}
    if not args.no_hits:
        servers = {}
        for name in args.targets:
            try:
                servers[name] = start_target(args, name, workdir, origin_port, "hit")
                meta["argv"][name] = servers[name].argv
            except Exception as e:  # noqa: BLE001 -- a proxy that fails to start is reported
                log(f"!! {name} failed to start: {e}")
                meta["start_errors"][name] = str(e)
        time.sleep(args.settle)
        results = hit_phase(args, servers, origin)
        meta["rss_after_hits"] = {n: pt.status_field(s.pid, "VmRSS")
                                  for n, s in servers.items() if s.check_alive()}
        meta["dead"] = {n: s.dead for n, s in servers.items() if s.dead}
        for s in servers.values():
            stop_server(s)
        for n, s in servers.items():
            if s.dead:
                log(f"!! {n} {s.dead}; log tail:\n{pt.tail(s.logfile)}")
    mem = {} if args.no_memory else memory_phase(args, workdir, origin)
    meta["loadavg_end"] = open("/proc/loadavg").read().split()[:3]

    text = report(args, meta, results, mem, args.targets)
    head = (f"surogat cache benchmark, {meta['date']}, {meta['nproc']} x "
            f"{meta['cpu_model']}, proxy on core {args.proxy_cpu}, wrk+origin on core "
            f"{args.client_cpu}, {args.duration}s runs after {args.warmup}s warmup, "
            f"wrk -t {args.wrk_threads}; busy % per core before the run: "
            f"{meta['busy_before_pct']}\n")
    print("\n" + head + "\n" + text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(head + "\n" + text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "runs": results, "memory": mem}, f, indent=1)
    pt.stop_all()
    bad = meta.get("dead") or meta["start_errors"] or any(
        r.get("error") or any(x.get("error") for x in r.get("restart", []))
        for r in mem.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
