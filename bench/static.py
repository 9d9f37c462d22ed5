#!/usr/bin/python3
"""
static -- static files served by surogat's static-file backend (-b /DIR)
next to nginx (sendfile, open_file_cache) and Apache httpd (mpm_event,
EnableSendfile), each in turn on the same files, same pinning as
passthrough.py, one run.

  server under test   core 0   (taskset -c 0)
  wrk                 core 1   (taskset -c 1)

1. Sizes: 1 KiB, 10 KiB, 100 KiB and 1 MiB files on tmpfs, a few hundred of
   each, fewer than the open-file caches hold; wrk + lua/walk.lua walks all
   the files of one size.  Requests/s, body MB/s, p99 and the ratios
   surogat/nginx, surogat/apache, nginx/apache.
2. Large set: thousands of 100 KiB files on disk, more than the open-file
   caches hold and each larger than sfb_mem_max.  Every server is started
   fresh on it; the page cache is dropped (as root) before a cold pass that
   requests every file once, so that pass reads from the disk; then a timed
   warm run walks the set from the page cache, every request past the
   open-file caches.  Not a set larger than RAM: see bench/README.md.

Every process it starts is stopped on exit.  Traffic goes to 127.0.0.1
only.  Python 3 stdlib only.  See bench/README.md.
"""

import argparse
import atexit
import http.client
import json
import os
import platform
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
import cachehit as ch  # noqa: E402 -- file bodies, surogatctl, version string
import passthrough as pt  # noqa: E402 -- process handling, /proc readers, wrk parsing

REPO = pt.REPO
log = pt.log
WALK_LUA = os.path.join(BENCH, "lua", "walk.lua")
SERVERS = ["surogat", "nginx", "apache"]
SHORT = {"surogat": "s", "nginx": "n", "apache": "a"}
RATIOS = [("surogat", "nginx"), ("surogat", "apache"), ("nginx", "apache")]
SIZES = {"1KiB": 1024, "10KiB": 10 * 1024, "100KiB": 100 * 1024, "1MiB": 1024 * 1024}
# A path no server has: the one-pass walk asks for it once a thread is done.
SENTINEL = "/walk-sentinel"
SFB_COUNTERS = ("sfb_req", "sfb_cache_hit", "sfb_cache_miss", "sfb_cache_evict",
                "sfb_sendfile_bytes")


# --- the files -------------------------------------------------------------


def file_path(size_name, i):
    return f"/{size_name.lower()}/{i}.bin"


def big_path(i):
    # a thousand files a directory, as a site's tree would have them
    return f"/d{i // 1000}/{i}.bin"


def make_tree(root, paths, size):
    """Write size bytes at every path under root, each file's own content."""
    for p in paths:
        d = os.path.dirname(root + p)
        if not os.path.isdir(d):
            os.makedirs(d)
            os.chmod(d, 0o755)
        ch.write_file(root + p, ch.body_bytes(size, p.encode()))


def write_list(path, paths):
    with open(path, "w") as f:
        f.write("\n".join(paths) + "\n")
    return path


def evict_page_cache(root, paths):
    """Drop the set's pages from the page cache; how it was done.

    /proc/sys/vm/drop_caches (root) drops every clean page and the dentry
    and inode caches; POSIX_FADV_DONTNEED on each file, done as well, drops
    that file's clean pages where drop_caches is refused."""
    os.sync()
    how = []
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        how.append("drop_caches")
    except OSError as e:
        log(f"!! cannot write /proc/sys/vm/drop_caches ({e}): fadvise only, the dentry "
            "and inode caches stay warm")
    for p in paths:
        fd = os.open(root + p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    how.append("fadvise")
    return "+".join(how)


# --- the servers -----------------------------------------------------------


def start_surogat(args, name, workdir, root):
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    port = pt.free_port()
    srv = pt.Server("surogat", port)
    srv.admin = f"127.0.0.1:{pt.free_port()}"
    srv.logfile = os.path.join(d, "stderr.log")
    argv = ["taskset", "-c", str(args.proxy_cpu), args.surogatd, "-F", "-j", "none",
            "-a", f"127.0.0.1:{port}", "-b", root, "-n", d, "-s", "malloc,16m",
            "-T", srv.admin,
            "-p", f"thread_pools={args.thread_pools}",
            "-p", f"thread_pool_min={args.thread_pool_min}",
            "-p", "timeout_idle=60s",
            "-p", f"sfb_cache_entries={args.cache_entries}",
            "-p", f"sfb_cache_check={args.cache_check}s"]
    for p in args.surogat_param:
        argv += ["-p", p]
    srv.argv = argv
    srv.proc = pt.spawn(argv, srv.logfile)
    srv.pid = srv.proc.pid  # taskset execs: same pid
    return srv


def start_apache(args, name, workdir, root):
    d = os.path.join(workdir, name)
    os.makedirs(d, exist_ok=True)
    port = pt.free_port()
    conf = pt.render("static-apache.conf.in", os.path.join(d, "httpd.conf"), DIR=d,
                     PORT=port, DOCROOT=root, THREADS=args.apache_threads)
    srv = pt.Server("apache", port)
    srv.logfile = os.path.join(d, "stderr.log")
    srv.argv = ["taskset", "-c", str(args.proxy_cpu), args.apache2, "-d", d, "-f", conf,
                "-DFOREGROUND"]
    srv.proc = pt.spawn(srv.argv, srv.logfile)
    srv.pid = srv.proc.pid
    return srv


def start_server(args, kind, workdir, root, probe, probe_size, tag):
    """Start one server on root; ready when probe answers probe_size bytes."""
    name = f"{kind}-{tag}"
    if kind == "surogat":
        srv = start_surogat(args, name, workdir, root)
    elif kind == "nginx":
        srv = pt.start_nginx(args, name, "static-nginx.conf.in", args.proxy_cpu, workdir,
                             PORT=pt.free_port(), DOCROOT=root,
                             CACHE_ENTRIES=args.cache_entries, CACHE_CHECK=args.cache_check)
        srv.argv = [args.nginx, "-c", os.path.join(workdir, name, "nginx.conf")]
    else:
        srv = start_apache(args, name, workdir, root)
    srv.name = kind
    pt.wait_ready(srv.proc, srv.port, probe, probe_size, name, timeout=60)
    if kind == "apache":
        srv.logfile = os.path.join(workdir, name, "error.log")
    log(f"{kind} on 127.0.0.1:{srv.port} (pid {srv.proc.pid}, core {args.proxy_cpu}), "
        f"root {root}")
    return srv


def server_ticks(srv):
    """CPU ticks of the server: the process and everything it forked (Apache's
    child, nginx's master and worker)."""
    total = 0
    for pid in [srv.proc.pid] + pt.descendants(srv.proc.pid):
        t = pt.proc_ticks(pid)
        total += t or 0
    return total


def check_files(srv, root, paths):
    """The server sends the files byte for byte (first, middle, last) and
    answers 404 for the sentinel, before anything is measured."""
    for p in (paths[0], paths[len(paths) // 2], paths[-1]):
        with open(root + p, "rb") as f:
            want = f.read()
        status, body = get(srv.port, p)
        if status != 200 or body != want:
            raise RuntimeError(f"{srv.name}: GET {p}: status {status}, {len(body)} bytes, "
                               f"want 200 and the file's {len(want)} bytes")
    status, _ = get(srv.port, SENTINEL)
    if status != 404:
        raise RuntimeError(f"{srv.name}: GET {SENTINEL}: status {status}, want 404")


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def sfb_counters(args, srv):
    if srv.name != "surogat":
        return {}
    try:
        s = json.loads(ch.surogatctl(args, srv, "stats", "-j"))
    except Exception as e:  # noqa: BLE001 -- counters are diagnostics
        return {"error": str(e)}
    return {k: s.get(k) for k in SFB_COUNTERS}


# --- wrk -------------------------------------------------------------------


def run_loop(args, srv, conns, secs, paths_file):
    """wrk walking the list for secs seconds; (argv, wrk's output)."""
    return ch.run_wrk(args, srv.port, "/", conns, secs, script=WALK_LUA,
                      script_args=[paths_file, args.wrk_threads, "loop"])


def run_once(args, srv, conns, paths_file):
    """Every file of the list once; SIGINT to wrk when each thread has its
    share.  (argv, wrk's output, seconds from the start to the last share;
    None if a thread never finished within --pass-cap, wrk's own -d)."""
    argv = ["taskset", "-c", str(args.client_cpu), args.wrk, "-t", str(args.wrk_threads),
            "-c", str(conns), "-d", f"{int(args.pass_cap)}s", "--timeout", "10s",
            "--latency", "-s", WALK_LUA, f"http://127.0.0.1:{srv.port}/",
            "--", paths_file, str(args.wrk_threads), "once", SENTINEL]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    pt.STARTED.append(proc)
    out, secs, done = [], None, 0
    # wrk ends by itself at -d, so reading its output line by line cannot hang
    for raw in proc.stdout:
        out.append(raw.decode(errors="replace"))
        done += out[-1].startswith("walk-done")
        if done == args.wrk_threads and secs is None:
            secs = time.monotonic() - t0
            proc.send_signal(signal.SIGINT)  # wrk: stop now, print the summary
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pt.stop(proc)
    pt.STARTED.remove(proc)
    return argv, "".join(out), secs


# --- measuring -------------------------------------------------------------


def measure(args, srv, conns, size, paths_file, n, mode):
    """One measured wrk run (mode loop: --duration seconds; once: one pass
    over the list) with the server's CPU and both cores' busy time."""
    ticks0, cpu0, c0 = server_ticks(srv), pt.cpu_times(), sfb_counters(args, srv)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    if mode == "loop":
        argv, out = run_loop(args, srv, conns, args.duration, paths_file)
        secs = None
    else:
        argv, out, secs = run_once(args, srv, conns, paths_file)
    wall = time.monotonic() - t0
    ticks1, cpu1, c1 = server_ticks(srv), pt.cpu_times(), sfb_counters(args, srv)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = pt.parse_wrk(out)
    r["argv"] = argv
    r["server_cpu_pct"] = 100.0 * (ticks1 - ticks0) / pt.CLK_TCK / wall
    r["wrk_cpu_pct"] = 100.0 * ((ru1.ru_utime + ru1.ru_stime)
                                - (ru0.ru_utime + ru0.ru_stime)) / wall
    for c in (args.proxy_cpu, args.client_cpu):
        if c in cpu0 and c in cpu1:
            total = cpu1[c][1] - cpu0[c][1]
            r[f"core{c}_busy_pct"] = 100.0 * (cpu1[c][0] - cpu0[c][0]) / total if total else None
    # Busy time on each core outside the processes the benchmark put there:
    # other users' load, plus the kernel's loopback softirq work.
    if args.proxy_cpu != args.client_cpu:
        b0 = r.get(f"core{args.proxy_cpu}_busy_pct")
        b1 = r.get(f"core{args.client_cpu}_busy_pct")
        r["other_server_core_pct"] = None if b0 is None else max(0.0, b0 - r["server_cpu_pct"])
        r["other_client_core_pct"] = None if b1 is None else max(0.0, b1 - r["wrk_cpu_pct"])
    if c0 and c1 and "error" not in c0 and "error" not in c1:
        r["sfb"] = {k: (c1[k] - c0[k]) if c1.get(k) is not None and c0.get(k) is not None
                    else None for k in SFB_COUNTERS}
    if mode == "once":
        m = re.search(r"walk-total ok=(\d+) bad=(\d+) extra=(\d+)", out)
        ok, bad, extra = (int(x) for x in m.groups()) if m else (None, None, None)
        r.update(ok=ok, bad=bad, extra=extra, pass_secs=secs)
        r["complete"] = secs is not None and ok == n and bad == 0
        # wrk's own req/s counts the sentinel requests and the time to the
        # SIGINT: the pass's figure is the files over the time to the last one
        r["wrk_rps"] = r["rps"]
        r["rps"] = ok / secs if ok and secs else None
        # the sentinels are 404s by design; anything else is an error
        r["non2xx"] = max(0, r["non2xx"] - (extra or 0))
        if not r["complete"]:
            r["error"] = f"pass incomplete: {ok} of {n} files, {bad} bad, after {secs}"
    r["mbps"] = r["rps"] * size / 1e6 if r.get("rps") else None
    if not srv.check_alive():
        r["error"] = srv.dead
    elif r.get("rps") is None:
        r["error"] = r.get("error") or "wrk gave no figure"
    return r


def show(label, name, r):
    log(f"{label:22} {name:8} {pt.fmt_num(r.get('rps')):>9} req/s "
        f"{fmt_mb(r.get('mbps')):>8} MB/s  p99 {pt.fmt_ms(r.get('p99')):>8}  "
        f"cpu {pt.fmt_pct(r.get('server_cpu_pct'))}  non2xx {r.get('non2xx')} "
        f"sockerr {r.get('sock_errors') or 0}"
        + (f"  {pt.fmt_num(r.get('pass_secs') and r['pass_secs'] * 1000)} ms pass"
           if r.get("pass_secs") else "")
        + (f"  ERROR {r['error']}" if r.get("error") else ""))


def sizes_phase(args, workdir, docroot):
    """Each server in turn on every size and connection count."""
    rows = []
    lists = {}
    for name in args.sizes:
        paths = [file_path(name, i) for i in range(args.count[name])]
        lists[name] = (paths, write_list(os.path.join(workdir, f"paths-{name}.txt"), paths))
    first = lists[args.sizes[0]][0][0]
    servers = {}
    for kind in args.targets:
        srv = None
        try:
            srv = start_server(args, kind, workdir, docroot, first, SIZES[args.sizes[0]],
                               "sizes")
            for name in args.sizes:
                check_files(srv, docroot, lists[name][0])
            servers[kind] = srv
        except Exception as e:  # noqa: BLE001 -- a server that fails is reported
            log(f"!! {kind}: {e}")
            rows.append({"phase": "sizes", "server": kind, "error": str(e)})
            if srv:
                ch.stop_server(srv)
    time.sleep(args.settle)
    order = list(servers)
    i = 0
    for name in args.sizes:
        paths, paths_file = lists[name]
        for conns in args.conns:
            label = f"{name} c{conns}"
            # the order rotates from one scenario to the next
            for kind in order[i % len(order):] + order[:i % len(order)] if order else []:
                srv = servers[kind]
                row = {"phase": "sizes", "scenario": label, "size": name, "conns": conns,
                       "files": len(paths), "server": kind}
                if not srv.check_alive():
                    row["error"] = srv.dead
                else:
                    if args.warmup > 0:
                        run_loop(args, srv, conns, args.warmup, paths_file)
                    row.update(measure(args, srv, conns, SIZES[name], paths_file,
                                       len(paths), "loop"))
                show(label, kind, row)
                rows.append(row)
            i += 1
    for srv in servers.values():
        ch.stop_server(srv)
    return rows


def large_phase(args, workdir):
    """A set past the open-file caches on disk: per server, fresh, a cold pass
    after the page cache is dropped, then a warm timed walk."""
    rows = []
    base = tempfile.mkdtemp(prefix="surogat-bench-static-", dir=args.large_dir)
    os.chmod(base, 0o755)  # nginx and Apache workers drop privileges
    if not args.keep_tmp:
        pt.CLEANUP.append(base)
        atexit.register(shutil.rmtree, base, True)
    need = args.large_files * (args.large_size + 4096)
    free = shutil.disk_usage(base).free
    if free < need + (1 << 30):
        raise SystemExit(f"{args.large_dir}: {free >> 20} MiB free, the large set needs "
                         f"{need >> 20} MiB and 1 GiB to spare (--large-files, --large-dir)")
    paths = [big_path(i) for i in range(args.large_files)]
    log(f"large set: writing {len(paths)} files of {args.large_size} bytes in {base}")
    t0 = time.monotonic()
    make_tree(base, paths, args.large_size)
    os.sync()
    log(f"large set: written and synced in {time.monotonic() - t0:.1f}s")
    paths_file = write_list(os.path.join(workdir, "paths-large.txt"), paths)
    label_size = f"{args.large_size // 1024}KiB" if args.large_size % 1024 == 0 \
        else f"{args.large_size}B"
    for kind in args.targets:
        # fresh per server: empty open-file caches as well as an empty page cache
        srv = None
        try:
            srv = start_server(args, kind, workdir, base, paths[0], args.large_size, "large")
            check_files(srv, base, paths)
        except Exception as e:  # noqa: BLE001
            log(f"!! {kind}: {e}")
            rows.append({"phase": "large", "server": kind, "error": str(e)})
            if srv:
                ch.stop_server(srv)
            continue
        time.sleep(args.settle)
        for conns in args.conns:
            label = f"large cold c{conns}"
            row = {"phase": "large", "scenario": label, "size": label_size, "conns": conns,
                   "files": len(paths), "server": kind}
            row["evicted_by"] = evict_page_cache(base, paths)
            row["busy_before_pct"] = pt.core_busy(1)
            row.update(measure(args, srv, conns, args.large_size, paths_file, len(paths),
                               "once"))
            show(label, kind, row)
            rows.append(row)
            label = f"large warm c{conns}"
            row = {"phase": "large", "scenario": label, "size": label_size, "conns": conns,
                   "files": len(paths), "server": kind}
            if args.warmup > 0:
                run_loop(args, srv, conns, args.warmup, paths_file)
            row.update(measure(args, srv, conns, args.large_size, paths_file, len(paths),
                               "loop"))
            show(label, kind, row)
            rows.append(row)
        ch.stop_server(srv)
    return rows


# --- report ----------------------------------------------------------------


def fmt_mb(v):
    return "-" if v is None else f"{v:,.1f}"


def cell(r, key, fmt):
    if r is None:
        return "n/m"
    if r.get("error") and r.get(key) is None:
        return "FAILED"
    return fmt(r.get(key))


def report(args, meta, rows):
    lines = []
    add = lines.append
    names = [n for n in SERVERS if n in args.targets]
    by = {(r.get("scenario"), r["server"]): r for r in rows if r.get("scenario")}
    scen = []
    for r in rows:
        if r.get("scenario") and r["scenario"] not in scen:
            scen.append(r["scenario"])
    ratios = [(a, b) for a, b in RATIOS if a in names and b in names]

    add("### Requests/s, body MB/s and p99 (wrk)")
    add("")
    head = (["scenario", "files"] + [f"{n} req/s" for n in names]
            + [f"{n} MB/s" for n in names] + [f"{n} p99" for n in names]
            + [f"{SHORT[a]}/{SHORT[b]}" for a, b in ratios])
    add("| " + " | ".join(head) + " |")
    add("|---|" + "--:|" * (len(head) - 1))
    for sc in scen:
        rs = {n: by.get((sc, n)) for n in names}
        files = next((r["files"] for r in rs.values() if r), None)
        cols = ([sc, pt.fmt_num(files)] + [cell(rs[n], "rps", pt.fmt_num) for n in names]
                + [cell(rs[n], "mbps", fmt_mb) for n in names]
                + [cell(rs[n], "p99", pt.fmt_ms) for n in names]
                + [pt.ratio((rs[a] or {}).get("rps"), (rs[b] or {}).get("rps"))
                   for a, b in ratios])
        add("| " + " | ".join(cols) + " |")
    add("")
    notes = [f"{SHORT[a]}/{SHORT[b]}: {a} req/s divided by {b} req/s" for a, b in ratios]
    notes += ["MB/s: file bytes (10^6) per second, without the heads", "n/m: not measured"]
    if any(r.get("phase") == "large" for r in rows):
        notes += ["large cold: one pass over the set after the page cache was dropped "
                  "(req/s: files over the time to the last one)",
                  "large warm: a timed walk over the same set from the page cache"]
    add("; ".join(notes) + ".")
    evicted = sorted({r["evicted_by"] for r in rows if r.get("evicted_by")})
    if evicted:
        add(f"Page cache dropped before each cold pass by: {', '.join(evicted)} "
            "(drop_caches: the whole page cache and the dentry and inode caches; fadvise "
            "alone: only the set's pages).")
    add("")

    add("### Diagnostics per run")
    add("")
    add(f"server cpu: CPU time of the server (all its processes) over the run, 100% = "
        f"the whole core {args.proxy_cpu}; req/s per core: req/s divided by it; "
        f"core{args.client_cpu} busy: the wrk core (near 100% means wrk, not the "
        "server, set the pace); other: busy time on each core outside the processes "
        "the benchmark put there (loopback softirq, other load); errors: non-2xx "
        "answers (the one-pass sentinels left out) and socket errors.")
    add("")
    add(f"| scenario | server | req/s | p50 | p99 | server cpu | req/s per core "
        f"| core{args.client_cpu} busy | other core{args.proxy_cpu} / core{args.client_cpu} "
        "| errors |")
    add("|---|---|--:|--:|--:|--:|--:|--:|--:|---|")
    for sc in scen:
        for n in names:
            r = by.get((sc, n))
            if r is None:
                continue
            cpu = r.get("server_cpu_pct")
            per = r["rps"] / (cpu / 100.0) if r.get("rps") and cpu else None
            errs = []
            if r.get("non2xx"):
                errs.append(f"non-2xx {r['non2xx']}")
            errs += [f"{k} {v}" for k, v in (r.get("sock_errors") or {}).items()]
            if r.get("error"):
                errs.append(r["error"])
            add(f"| {sc} | {n} | {pt.fmt_num(r.get('rps'))} | {pt.fmt_ms(r.get('p50'))} "
                f"| {pt.fmt_ms(r.get('p99'))} | {pt.fmt_pct(cpu)} | {pt.fmt_num(per)} "
                f"| {pt.fmt_pct(r.get(f'core{args.client_cpu}_busy_pct'))} "
                f"| {pt.fmt_pct(r.get('other_server_core_pct'))} / "
                f"{pt.fmt_pct(r.get('other_client_core_pct'))} | {', '.join(errs) or '0'} |")
    add("")
    sfb = [(r["scenario"], r["sfb"]) for r in rows
           if r.get("server") == "surogat" and r.get("sfb")]
    if sfb:
        add("### surogat's static-file counters per measured run")
        add("")
        add("| scenario | " + " | ".join(SFB_COUNTERS) + " |")
        add("|---|" + "--:|" * len(SFB_COUNTERS))
        for sc, c in sfb:
            add(f"| {sc} | " + " | ".join(pt.fmt_num(c.get(k)) for k in SFB_COUNTERS) + " |")
        add("")
    failed = [r for r in rows if not r.get("scenario") and r.get("error")]
    for r in failed:
        add(f"{r['server']} ({r['phase']}): FAILED: {r['error']}")
    return "\n".join(lines)


# --- main ------------------------------------------------------------------


def parse_size(text):
    m = re.fullmatch(r"(\d+)([kKmM]?)", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text}")
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20}[m.group(2).lower()]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build-bench", "surogatd"),
                    help="surogatd binary (default: <repo>/build-bench/surogatd)")
    ap.add_argument("--surogatctl", default=None,
                    help="surogatctl binary (default: next to --surogatd)")
    ap.add_argument("--only", default=None, help="comma-separated subset of " + ",".join(SERVERS))
    ap.add_argument("--quick", action="store_true",
                    help="smoke mode: 2 s runs, 1 s warmup, 50 connections, 100 files a size, "
                    "a large set of 2,000 files")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured wrk run")
    ap.add_argument("--warmup", type=int, default=3, help="seconds of warmup before each run")
    ap.add_argument("--conns", default="50,400", help="wrk connection counts")
    ap.add_argument("--sizes", default=",".join(SIZES), help="of " + ",".join(SIZES))
    ap.add_argument("--files", type=int, default=500,
                    help="files of each size (fewer for the big sizes: --max-set)")
    ap.add_argument("--max-set", type=parse_size, default=256 << 20,
                    help="bytes of one size's files at most (1MiB: 256 files by default)")
    ap.add_argument("--no-large", dest="large", action="store_false",
                    help="skip the large set")
    ap.add_argument("--large-files", type=int, default=20000,
                    help="files in the large set (more than --cache-entries)")
    ap.add_argument("--large-size", type=parse_size, default=100 << 10,
                    help="bytes per file of the large set (more than sfb_mem_max, 64k)")
    ap.add_argument("--large-dir", default="/var/tmp",
                    help="where the large set is written (a disk, not tmpfs)")
    ap.add_argument("--pass-cap", type=float, default=600,
                    help="seconds a cold pass may take at most")
    ap.add_argument("--cache-entries", type=int, default=1000,
                    help="surogat sfb_cache_entries and nginx open_file_cache max")
    ap.add_argument("--cache-check", type=int, default=1,
                    help="seconds: surogat sfb_cache_check and nginx open_file_cache_valid")
    ap.add_argument("--apache-threads", type=int, default=256,
                    help="Apache ThreadsPerChild (one child process)")
    ap.add_argument("--thread-pools", type=int, default=2)
    ap.add_argument("--thread-pool-min", type=int, default=250,
                    help="surogat thread_pool_min (per pool)")
    ap.add_argument("-P", "--surogat-param", action="append", default=[],
                    help="extra surogat -p name=value (repeatable)")
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--settle", type=float, default=3.0,
                    help="seconds between starting the servers and the first run")
    ap.add_argument("--wait-idle", type=float, default=300.0,
                    help="seconds to wait for an idle machine before starting")
    ap.add_argument("--proxy-cpu", type=int, default=0, help="the server's core")
    ap.add_argument("--client-cpu", type=int, default=1, help="wrk's core")
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--apache2", default="/usr/sbin/apache2")
    ap.add_argument("--json", help="also write every figure and raw wrk output here")
    ap.add_argument("--markdown", help="also write the tables here")
    ap.add_argument("--keep-tmp", action="store_true",
                    help="keep the work dir (configs, logs) and the large set")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.warmup, args.settle, args.conns = 2, 1, 1.0, "50"
        args.files, args.large_files = 100, 2000
    args.surogatctl = args.surogatctl or os.path.join(os.path.dirname(args.surogatd),
                                                      "surogatctl")
    args.conns = [int(c) for c in args.conns.split(",")]
    args.sizes = args.sizes.split(",")
    args.targets = args.only.split(",") if args.only else list(SERVERS)
    for s in args.sizes:
        if s not in SIZES:
            sys.exit(f"--sizes: unknown size {s}")
    for t in args.targets:
        if t not in SERVERS:
            sys.exit(f"--only: unknown server {t}")
    args.count = {s: max(1, min(args.files, args.max_set // SIZES[s])) for s in args.sizes}
    return args


def main():
    args = parse_args()
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)
    tools = [args.wrk, shutil.which("taskset")]
    for t in args.targets:
        tools += {"surogat": [args.surogatd, args.surogatctl], "nginx": [args.nginx],
                  "apache": [args.apache2]}[t]
    for tool in tools:
        if not tool or not os.access(tool, os.X_OK):
            sys.exit(f"missing {tool} (surogat: meson setup build-bench -Dbuildtype=release "
                     "-Dtests=disabled && ninja -C build-bench; or --only without it)")
    if os.cpu_count() < 2:
        log("only one CPU: server and wrk both on core 0; figures are not comparable")
        args.proxy_cpu = args.client_cpu = 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(65536, hard)
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    args.nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if args.large and os.geteuid() != 0:
        log("!! not root: the page cache cannot be dropped, only each file's pages "
            "(fadvise); the dentry and inode caches stay warm")

    versions = {"wrk": pt.tool_version([args.wrk, "--version"]),
                "python": platform.python_version()}
    if "nginx" in args.targets:
        versions["nginx"] = pt.tool_version([args.nginx, "-v"])
    if "apache" in args.targets:
        versions["apache"] = pt.tool_version([args.apache2, "-v"])
    if "surogat" in args.targets:
        versions["surogat"] = ch.surogat_version(args.surogatd)
    meta = pt.machine_meta(args, versions)
    meta["busy_before_pct"] = pt.wait_idle(args.wait_idle)
    if any(v > 10 for v in meta["busy_before_pct"].values()):
        log(f"!! the machine is not idle before the run (busy % per core: "
            f"{meta['busy_before_pct']}): figures will be noisy")

    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    workdir = tempfile.mkdtemp(prefix="surogat-bench-static-", dir=base)
    os.chmod(workdir, 0o755)  # nginx and Apache workers drop privileges
    if not args.keep_tmp:
        pt.CLEANUP.append(workdir)

        def cleanup():
            pt.stop_all()  # first: nothing may still write into the directory
            shutil.rmtree(workdir, True)
        atexit.register(cleanup)
    else:
        log(f"work dir kept: {workdir}")
    docroot = os.path.join(workdir, "www")
    os.makedirs(docroot)
    os.chmod(docroot, 0o755)
    for name in args.sizes:
        make_tree(docroot, [file_path(name, i) for i in range(args.count[name])], SIZES[name])
    log("files on tmpfs: " + ", ".join(f"{args.count[s]} x {s}" for s in args.sizes))

    rows = sizes_phase(args, workdir, docroot)
    if args.large:
        rows += large_phase(args, workdir)
    meta["loadavg_end"] = open("/proc/loadavg").read().split()[:3]

    text = report(args, meta, rows)
    head = (f"surogat static-file benchmark, {meta['date']}, {meta['nproc']} x "
            f"{meta['cpu_model']}, server on core {args.proxy_cpu}, wrk on core "
            f"{args.client_cpu}, {args.duration}s runs after {args.warmup}s warmup, wrk -t "
            f"{args.wrk_threads}; surogat: thread_pools {args.thread_pools} x "
            f"thread_pool_min {args.thread_pool_min}, sfb_cache_entries "
            f"{args.cache_entries}; nginx: 1 worker process, open_file_cache max="
            f"{args.cache_entries}; apache: mpm_event, 1 child x {args.apache_threads} "
            f"threads; busy % per core before the run: {meta['busy_before_pct']}\n")
    print("\n" + head + "\n" + text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(head + "\n" + text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "runs": rows}, f, indent=1, default=str)
    pt.stop_all()
    return 1 if any(r.get("error") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
