#!/usr/bin/python3
"""
passthrough -- surogat pass-through next to Varnish 7 (return(pass)) and
nginx proxy_pass (upstream keep-alive), all in front of one nginx origin
serving static files from tmpfs, same pinning, one run.

  proxy under test   core 0   (taskset -c 0)
  wrk, origin nginx  core 1   (taskset -c 1), idleconns.py too

Measures requests/s and p99 latency with wrk (--latency) for 100 B and
128 KiB bodies, 50 and 400 connections, keep-alive and one connection per
request (-H 'Connection: close'), then VmRSS with 10,000 idle keep-alive
client connections open.  Every process it starts is stopped on exit.
Traffic goes to 127.0.0.1 only.  Python 3 stdlib only.  See bench/README.md.
"""

import argparse
import atexit
import datetime
import hashlib
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
import urllib.request

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
CONF = os.path.join(BENCH, "conf")
CLK_TCK = os.sysconf("SC_CLK_TCK")

BODIES = [("100B", "/100b", 100), ("16KiB", "/16k", 16 * 1024), ("128KiB", "/128k", 128 * 1024)]
PROXIES = ["surogat", "varnish", "nginx", "haproxy"]

# Every process this script started, stopped on exit whatever happens.
STARTED = []
# Work directories to remove on exit (unless --keep-tmp).
CLEANUP = []


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- process handling ------------------------------------------------------


def spawn(argv, logfile, **kw):
    out = open(logfile, "ab")
    proc = subprocess.Popen(
        argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True, **kw
    )
    out.close()
    STARTED.append(proc)
    return proc


def children(pid):
    """Direct child pids of pid."""
    kids = []
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        pass
    if kids:
        return kids
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read()
            except OSError:
                continue
            if int(st[st.rindex(")") + 2:].split()[1]) == pid:
                kids.append(int(d))
    return kids


def descendants(pid):
    out = []
    for k in children(pid):
        out.append(k)
        out += descendants(k)
    return out


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop(proc, grace=10.0):
    """SIGTERM proc and what it forked, wait, then SIGKILL by pid."""
    if proc.poll() is not None:
        return
    pids = [proc.pid] + descendants(proc.pid)
    try:
        proc.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    # Our children run in their own session (process group == proc.pid):
    # anything left there (e.g. a varnish child orphaned early) is ours.
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all():
    while STARTED:
        stop(STARTED.pop())


def on_signal(signum, _frame):
    log(f"signal {signum}: stopping everything")
    stop_all()
    for d in CLEANUP:
        shutil.rmtree(d, True)
    os._exit(128 + signum)


# --- small helpers ---------------------------------------------------------


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def render(template, dest, **values):
    with open(os.path.join(CONF, template)) as f:
        text = f.read()
    for k, v in values.items():
        text = text.replace(f"@{k}@", str(v))
    left = re.findall(r"@[A-Z_]+@", text)
    if left:
        raise SystemExit(f"{template}: unfilled {left}")
    with open(dest, "w") as f:
        f.write(text)
    return dest


def http_get(port, path, timeout=2.0):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.read()


def wait_ready(proc, port, path, size, what, timeout=30.0):
    deadline = time.monotonic() + timeout
    err = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode}")
        try:
            status, body = http_get(port, path)
            if status == 200 and len(body) == size:
                return
            err = f"status {status}, {len(body)} bytes"
        except Exception as e:  # noqa: BLE001 -- anything means "not yet"
            err = str(e)
        time.sleep(0.2)
    raise RuntimeError(f"{what} not ready on port {port} after {timeout}s: {err}")


def status_field(pid, field):
    """A /proc/PID/status field in KiB (VmRSS, RssAnon, ...), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def threads(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return None


def proc_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except OSError:
        return None
    fields = st[st.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def cpu_times():
    """{cpu index: (busy, total)} jiffies from /proc/stat."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            m = re.match(r"cpu(\d+)\s+(.*)", line)
            if m:
                v = [int(x) for x in m.group(2).split()]
                idle = v[3] + v[4]
                out[int(m.group(1))] = (sum(v[:8]) - idle, sum(v[:8]))
    return out


def core_busy(secs):
    """{cpu: busy %} over the next secs seconds."""
    c0 = cpu_times()
    time.sleep(secs)
    c1 = cpu_times()
    return {c: round(100.0 * (c1[c][0] - c0[c][0]) / max(1, c1[c][1] - c0[c][1]), 1)
            for c in c1 if c in c0}


def wait_idle(max_secs, limit=10.0):
    """Wait up to max_secs for every core to be under limit % busy; the last reading."""
    deadline = time.monotonic() + max_secs
    said = False
    while True:
        busy = core_busy(2)
        if all(v < limit for v in busy.values()) or time.monotonic() >= deadline:
            return busy
        if not said:
            log(f"waiting up to {max_secs:.0f}s for the machine to be idle (busy %: {busy})")
            said = True


def origin_accepts(port):
    try:
        _, body = http_get(port, "/nginx_status")
    except Exception:  # noqa: BLE001
        return None
    m = re.search(rb"\n\s*(\d+)\s+(\d+)\s+(\d+)", body)
    return int(m.group(1)) if m else None


# --- wrk -------------------------------------------------------------------

UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def to_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", text)
    return float(m.group(1)) * UNIT_MS[m.group(2)] if m else None


def parse_wrk(out):
    r = {"rps": None, "p50": None, "p99": None, "requests": None, "non2xx": 0,
         "sock_errors": {}, "raw": out}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        r["rps"] = float(m.group(1))
    for pct, key in (("50", "p50"), ("99", "p99")):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+(\S+)", out, re.M)
        if m:
            r[key] = to_ms(m.group(1))
    m = re.search(r"(\d+) requests in", out)
    if m:
        r["requests"] = int(m.group(1))
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if m:
        r["non2xx"] = int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        r["sock_errors"] = {k: int(v) for k, v in zip(
            ("connect", "read", "write", "timeout"), m.groups()) if int(v)}
    return r


def run_wrk(args, port, path, conns, close, secs, latency=True, headers=()):
    argv = ["taskset", "-c", str(args.client_cpu), args.wrk, "-t", str(args.wrk_threads),
            "-c", str(conns), "-d", f"{secs}s", "--timeout", "5s"]
    if latency:
        argv.append("--latency")
    if close:
        argv += ["-H", "Connection: close"]
    for h in headers:
        argv += ["-H", h]
    argv.append(f"http://127.0.0.1:{port}{path}")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    STARTED.append(proc)
    try:
        out, _ = proc.communicate(timeout=secs + 30)
    except subprocess.TimeoutExpired:
        stop(proc)
        out = b"wrk: did not finish in time\n"
    STARTED.remove(proc)
    return argv, out.decode(errors="replace")


# --- the servers -----------------------------------------------------------


class Server:
    """One server under test; pid is the process whose RSS/CPU we read."""

    def __init__(self, name, port):
        self.name = name
        self.port = port
        self.proc = None
        self.pid = None
        self.logfile = None
        self.dead = None

    def check_alive(self):
        if self.dead:
            return False
        if self.proc.poll() is not None:
            self.dead = f"exited with status {self.proc.returncode}"
        elif self.pid != self.proc.pid and not alive(self.pid):
            self.dead = f"worker pid {self.pid} is gone"
        if self.dead:
            log(f"!! {self.name} {self.dead}; log tail:\n{tail(self.logfile)}")
            return False
        return True


def tail(path, n=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


def nginx_worker(proc, logfile, timeout=10.0):
    master = proc.pid
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"nginx exited {proc.returncode}:\n{tail(logfile)}")
        kids = [k for k in children(master) if comm(k) == "nginx"]
        if kids:
            return kids[0]
        time.sleep(0.1)
    raise RuntimeError(f"nginx master {master}: no worker")


def start_nginx(args, name, tmpl, cpu, workdir, **values):
    d = os.path.join(workdir, name)
    for sub in ("tmp/body", "tmp/proxy", "tmp/fastcgi", "tmp/uwsgi", "tmp/scgi"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    conf = render(tmpl, os.path.join(d, "nginx.conf"), DIR=d, NOFILE=args.nofile, **values)
    srv = Server(name, values["PORT"])
    srv.logfile = os.path.join(d, "stderr.log")
    srv.proc = spawn(["taskset", "-c", str(cpu), args.nginx, "-p", d, "-c", conf,
                      "-e", os.path.join(d, "error.log")], srv.logfile)
    srv.pid = nginx_worker(srv.proc, srv.logfile)
    srv.logfile = os.path.join(d, "error.log")
    return srv


def start_haproxy(args, workdir, port, origin_port):
    d = os.path.join(workdir, "haproxy")
    os.makedirs(d, exist_ok=True)
    conf = render("pass-haproxy.cfg.in", os.path.join(d, "haproxy.cfg"), DIR=d, PORT=port,
                  ORIGIN_PORT=origin_port)
    srv = Server("haproxy", port)
    srv.logfile = os.path.join(d, "stderr.log")
    srv.argv = ["taskset", "-c", str(args.proxy_cpu), args.haproxy, "-db", "-f", conf]
    srv.proc = spawn(srv.argv, srv.logfile)
    srv.pid = srv.proc.pid  # -db: no fork, taskset execs
    return srv


def start_varnish(args, workdir, port, origin_port, template="varnish-pass.vcl.in"):
    d = os.path.join(workdir, "varnish")
    os.makedirs(d, exist_ok=True)
    vcl = render(template, os.path.join(d, "main.vcl"), ORIGIN_PORT=origin_port)
    srv = Server("varnish", port)
    srv.logfile = os.path.join(d, "stderr.log")
    argv = ["taskset", "-c", str(args.proxy_cpu), args.varnishd, "-F",
            "-n", os.path.join(d, "n"), "-a", f"127.0.0.1:{port}", "-f", vcl,
            "-T", "none", "-s", "malloc,256m",
            "-p", f"thread_pools={args.thread_pools}",
            "-p", f"thread_pool_min={args.thread_pool_min}",
            "-p", "thread_pool_max=5000",
            "-p", "timeout_idle=60"]
    for p in args.varnish_param:
        argv += ["-p", p]
    srv.argv = argv
    srv.proc = spawn(argv, srv.logfile)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            raise RuntimeError(f"varnishd exited {srv.proc.returncode}:\n{tail(srv.logfile)}")
        kids = [k for k in descendants(srv.proc.pid) if comm(k) == "cache-main"]
        if kids:
            srv.pid = kids[0]
            return srv
        time.sleep(0.2)
    raise RuntimeError(f"varnishd: no cache-main child:\n{tail(srv.logfile)}")


def start_surogat(args, workdir, port, origin_port):
    d = os.path.join(workdir, "surogat")
    os.makedirs(d, exist_ok=True)
    srv = Server("surogat", port)
    srv.logfile = os.path.join(d, "stderr.log")
    argv = ["taskset", "-c", str(args.proxy_cpu), args.surogatd, "-F", "-j", "none",
            "-a", f"127.0.0.1:{port}", "-b", f"127.0.0.1:{origin_port}", "-n", d,
            "-p", f"thread_pools={args.thread_pools}",
            "-p", f"thread_pool_min={args.thread_pool_min}",
            "-p", "timeout_idle=60s"]
    for p in args.surogat_param:
        argv += ["-p", p]
    srv.argv = argv
    srv.proc = spawn(argv, srv.logfile)
    srv.pid = srv.proc.pid  # taskset execs: same pid
    return srv


# --- phases ----------------------------------------------------------------


def idle_measure(args, srv, script):
    """Open args.idle_conns idle connections to srv with script (idleconns.py, or a
    script speaking its protocol), hold them args.idle_hold seconds and measure srv's
    memory and threads with them: a dict, with "error" when something failed."""
    r = {"rss_before_kib": status_field(srv.pid, "VmRSS"),
         "anon_before_kib": status_field(srv.pid, "RssAnon"),
         "threads_before": threads(srv.pid)}
    argv = ["taskset", "-c", str(args.client_cpu), sys.executable,
            os.path.join(BENCH, script), str(srv.port), "-n", str(args.idle_conns)]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    STARTED.append(proc)
    try:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{script} failed: {proc.stderr.read()}")
        r["open"] = json.loads(line)
        time.sleep(args.idle_hold)
        r["rss_kib"] = status_field(srv.pid, "VmRSS")
        r["anon_kib"] = status_field(srv.pid, "RssAnon")
        r["threads"] = threads(srv.pid)
        proc.stdin.write("check\n")
        proc.stdin.flush()
        r["check"] = json.loads(proc.stdout.readline() or "{}")
        proc.stdin.close()
        proc.wait(timeout=120)
    except Exception as e:  # noqa: BLE001 -- report, keep going
        r["error"] = str(e)
    finally:
        stop(proc)
        STARTED.remove(proc)
    return r


def rss_phase(args, servers):
    out = {}
    for name, srv in servers.items():
        if not srv.check_alive():
            out[name] = {"error": srv.dead}
            continue
        log(f"rss: {name}: opening {args.idle_conns} idle keep-alive connections")
        r = idle_measure(args, srv, "idleconns.py")
        srv.check_alive()
        if srv.dead:
            r["error"] = srv.dead
        o = r.get("open", {})
        log(f"rss: {name}: {fmt_mib(r.get('rss_kib'))} MiB with {o.get('opened')} open "
            f"(ok {o.get('ok')}, failed {o.get('failed')}, {o.get('errors')}) "
            f"check {r.get('check')}")
        out[name] = r
        time.sleep(1)
    return out


def scenarios(args):
    out = []
    for body, path, size in BODIES:
        if body not in args.bodies:
            continue
        for conns in args.conns:
            for close in [m == "close" for m in args.modes]:
                out.append({"body": body, "path": path, "size": size,
                            "conns": conns, "close": close})
    return out


def scen_label(s):
    return f"{s['body']} c{s['conns']} {'close' if s['close'] else 'keep-alive'}"


def measure(args, srv, origin, s):
    """One warmup and one measured wrk run against srv; the figures of the latter."""
    if args.warmup > 0:
        run_wrk(args, srv.port, s["path"], s["conns"], s["close"], args.warmup, latency=False)
    ticks0 = proc_ticks(srv.pid)
    oticks0 = proc_ticks(origin.pid)
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = cpu_times()
    acc0 = origin_accepts(origin.port)
    t0 = time.monotonic()
    argv, out = run_wrk(args, srv.port, s["path"], s["conns"], s["close"], args.duration)
    wall = time.monotonic() - t0
    ticks1 = proc_ticks(srv.pid)
    oticks1 = proc_ticks(origin.pid)
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu1 = cpu_times()
    acc1 = origin_accepts(origin.port)
    row = parse_wrk(out)
    row["wrk_argv"] = argv

    def pct(a, b):
        return None if a is None or b is None else 100.0 * (b - a) / CLK_TCK / wall

    row["cpu_pct"] = pct(ticks0, ticks1)
    origin_pct = pct(oticks0, oticks1)
    wrk_pct = 100.0 * ((ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime)) / wall
    row["wrk_cpu_pct"] = wrk_pct
    row["origin_cpu_pct"] = origin_pct
    for c in (args.proxy_cpu, args.client_cpu):
        if c in cpu0 and c in cpu1:
            total = cpu1[c][1] - cpu0[c][1]
            row[f"core{c}_busy_pct"] = 100.0 * (cpu1[c][0] - cpu0[c][0]) / total if total else None
    # Busy time on each core not spent by the processes we put there: other load,
    # plus the kernel's softirq work for loopback traffic.
    busy0 = row.get(f"core{args.proxy_cpu}_busy_pct")
    busy1 = row.get(f"core{args.client_cpu}_busy_pct")
    if busy0 is not None and args.proxy_cpu != args.client_cpu:
        mine = 0.0 if srv is origin else (row["cpu_pct"] or 0.0)
        row["core_proxy_other_pct"] = max(0.0, busy0 - mine)
    if busy1 is not None and args.proxy_cpu != args.client_cpu:
        row["core_client_other_pct"] = max(0.0, busy1 - wrk_pct - (origin_pct or 0.0))
    if acc0 is not None and acc1 is not None:
        row["origin_conns"] = acc1 - acc0 - 1  # less our second status request
    return row


def load_phase(args, servers, origin):
    results = []
    targets = list(servers.values())
    if args.origin_direct:
        targets = [origin] + targets
    for i, s in enumerate(scenarios(args)):
        # Rotate who goes first so no one always runs right after a rest.
        order = targets[i % len(targets):] + targets[:i % len(targets)]
        for srv in order:
            row = {"scenario": scen_label(s), "target": srv.name, **s}
            if srv is not origin and not srv.check_alive():
                row["error"] = srv.dead
                results.append(row)
                continue
            # On a shared machine, redo a run that other load disturbed; keep the
            # least disturbed one.
            tries = []
            for attempt in range(1 + args.retries):
                r = measure(args, srv, origin, s)
                tries.append(r)
                noise = max(r.get("core_proxy_other_pct") or 0, r.get("core_client_other_pct") or 0)
                if srv is not origin and not srv.check_alive():
                    break
                if noise <= args.noise_limit:
                    break
                log(f"{scen_label(s):24} {srv.name:8} disturbed: {noise:.0f}% of a core busy "
                    f"outside the benchmark (limit {args.noise_limit:g}%), "
                    + ("retrying" if attempt < args.retries else "keeping the best"))
                wait_idle(min(60.0, args.wait_idle))
            best = min(tries, key=lambda r: max(r.get("core_proxy_other_pct") or 0,
                                                r.get("core_client_other_pct") or 0))
            row.update(best)
            row["attempts"] = len(tries)
            row["other_attempts"] = [t for t in tries if t is not best]
            if srv is not origin and srv.dead:
                row["error"] = srv.dead
            log(f"{scen_label(s):24} {srv.name:8} {fmt_num(row.get('rps')):>9} req/s  "
                f"p99 {fmt_ms(row.get('p99')):>8}  cpu {fmt_pct(row.get('cpu_pct'))}  "
                f"other {fmt_pct(row.get('core_proxy_other_pct'))}/"
                f"{fmt_pct(row.get('core_client_other_pct'))}  "
                f"non2xx {row['non2xx']} sockerr {row['sock_errors'] or 0}"
                + (f"  ERROR {row['error']}" if row.get("error") else ""))
            results.append(row)
    return results


# --- report ----------------------------------------------------------------


def fmt_num(v):
    return "-" if v is None else f"{v:,.0f}"


def fmt_ms(v):
    if v is None:
        return "-"
    return f"{v * 1000:.0f}us" if v < 1 else f"{v:.2f}ms"


def fmt_pct(v):
    return "-" if v is None else f"{v:.0f}%"


def fmt_mib(kib):
    return "-" if kib is None else f"{kib / 1024:.1f}"


def per_core(row):
    """Requests per second of proxy CPU: efficiency when the client side is the limit."""
    if not row.get("rps") or not row.get("cpu_pct"):
        return None
    return row["rps"] / (row["cpu_pct"] / 100.0)


def ratio(a, b):
    return "-" if not a or not b else f"{a / b:.2f}"


def cell(row, key, fmt):
    if row is None:
        return "n/m"
    if row.get("error") and row.get(key) is None:
        return "FAILED"
    return fmt(row.get(key))


def report(args, meta, rss, results, present):
    lines = []
    add = lines.append
    by = {(r["scenario"], r["target"]): r for r in results}
    scen = [scen_label(s) for s in scenarios(args)]
    names = ["surogat", "varnish", "nginx"]
    absent = [n for n in names if n not in present]

    add("### Throughput and p99 latency (wrk)")
    add("")
    add("| scenario | surogat req/s | varnish req/s | nginx req/s | s/v req/s | s/n req/s "
        "| surogat p99 | varnish p99 | nginx p99 | s/v p99 | s/n p99 |")
    add("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for sc in scen:
        rows = {n: by.get((sc, n)) for n in names}
        rps = {n: (rows[n] or {}).get("rps") for n in names}
        p99 = {n: (rows[n] or {}).get("p99") for n in names}
        add(f"| {sc} | " + " | ".join(cell(rows[n], "rps", fmt_num) for n in names)
            + f" | {ratio(rps['surogat'], rps['varnish'])}"
            + f" | {ratio(rps['surogat'], rps['nginx'])}"
            + " | " + " | ".join(cell(rows[n], "p99", fmt_ms) for n in names)
            + f" | {ratio(p99['surogat'], p99['varnish'])}"
            + f" | {ratio(p99['surogat'], p99['nginx'])} |")
    add("")
    add("s/v, s/n: surogat divided by varnish, by nginx (req/s: higher is better for surogat "
        "above 1; p99: lower is better for surogat below 1). n/m: not measured.")
    if absent:
        add(f"Not measured in this run: {', '.join(absent)}.")
    add("")

    # The figure: server CPU per request, the proxy's own and with the
    # origin's added (as when both share a core), for every proxy measured.
    add("### CPU per request (us)")
    add("")
    add("| scenario | " + " | ".join(f"{n} | {n} + origin" for n in present) + " |")
    add("|---|" + "--:|--:|" * len(present))
    for sc in scen:
        cells = []
        for n in present:
            r = by.get((sc, n)) or {}
            rps, cpu, ocpu = r.get("rps"), r.get("cpu_pct"), r.get("origin_cpu_pct")
            own = 1e4 * cpu / rps if rps and cpu is not None else None
            both = 1e4 * (cpu + ocpu) / rps if own is not None and ocpu is not None else None
            cells += [f"{own:.2f}" if own is not None else "n/m",
                      f"{both:.2f}" if both is not None else "n/m"]
        add(f"| {sc} | " + " | ".join(cells) + " |")
    add("")

    add("### Diagnostics per run")
    add("")
    add(f"proxy cpu: CPU time of the proxy process over the run (100% = the whole core "
        f"{args.proxy_cpu}; for the origin row, the origin worker); req/s per proxy core: "
        "req/s divided by proxy cpu, the efficiency figure that still compares when the "
        f"wrk+origin core is the limit; core{args.client_cpu} busy: busy share of the "
        "wrk+origin core (near 100% means the client side, not the proxy, set the pace); "
        "wrk cpu, origin cpu: their CPU time; other: busy time on each core outside the "
        "processes the benchmark put there (kernel softirq work for loopback, or other "
        f"load: a run with more than {args.noise_limit:g}% is redone, up to {args.retries} "
        "times, and the least disturbed kept); "
        "origin conns: connections the origin accepted during the run; errors: wrk's "
        "non-2xx/3xx responses and socket errors.")
    add("")
    targets = (["origin"] if args.origin_direct else []) + [n for n in names if n in present]
    add("| scenario | target | req/s | p50 | p99 | proxy cpu | req/s per proxy core "
        f"| core{args.client_cpu} busy | wrk cpu | origin cpu | other core{args.proxy_cpu}"
        f" / core{args.client_cpu} | origin conns | errors |")
    add("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
    for sc in scen:
        for t in targets:
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
            add(f"| {sc} | {t} | {cell(r, 'rps', fmt_num)} | {cell(r, 'p50', fmt_ms)} "
                f"| {cell(r, 'p99', fmt_ms)} | {fmt_pct(r.get('cpu_pct'))} "
                f"| {fmt_num(per_core(r))} "
                f"| {fmt_pct(r.get(f'core{args.client_cpu}_busy_pct'))} "
                f"| {fmt_pct(r.get('wrk_cpu_pct'))} | {fmt_pct(r.get('origin_cpu_pct'))} "
                f"| {fmt_pct(r.get('core_proxy_other_pct'))} / "
                f"{fmt_pct(r.get('core_client_other_pct'))}"
                + (f" ({r['attempts']} tries)" if r.get("attempts", 1) > 1 else "") + " "
                f"| {fmt_num(r.get('origin_conns'))} | {', '.join(errs) or '0'} |")
    add("")

    add(f"### RSS with {args.idle_conns:,} idle keep-alive client connections")
    add("")
    add("VmRSS of the serving process (varnish: cache-main child; nginx: the worker), "
        "fresh processes, before any load; RssAnon leaves out file/shared mappings "
        f"(e.g. Varnish's shared-memory log). Read {args.idle_hold:g}s after the last "
        "connection got its response.")
    add("")
    add("| proxy | VmRSS before | VmRSS with idle conns | delta | RssAnon with | threads "
        "| kept open / ok / failed | still open at read | errors |")
    add("|---|--:|--:|--:|--:|--:|--:|--:|---|")
    for n in names:
        r = rss.get(n)
        if r is None:
            add(f"| {n} | n/m | n/m | n/m | n/m | n/m | n/m | n/m | not measured |")
            continue
        o = r.get("open", {})
        c = r.get("check", {})
        delta = (r["rss_kib"] - r["rss_before_kib"]) if r.get("rss_kib") and r.get(
            "rss_before_kib") else None
        errs = [f"{k} {v}" for k, v in (o.get("errors") or {}).items()]
        if r.get("error"):
            errs.append(r["error"])
        add(f"| {n} | {fmt_mib(r.get('rss_before_kib'))} MiB | {fmt_mib(r.get('rss_kib'))} MiB "
            f"| {fmt_mib(delta)} MiB | {fmt_mib(r.get('anon_kib'))} MiB | {r.get('threads', '-')} "
            f"| {o.get('opened', '-')} / {o.get('ok', '-')} / {o.get('failed', '-')} "
            f"| {c.get('alive', '-')} | {', '.join(errs) or '0'} |")
    add("")
    if meta.get("rss_after"):
        add("VmRSS after the whole load phase: " + ", ".join(
            f"{n} {fmt_mib(v)} MiB" for n, v in meta["rss_after"].items()) + ".")
        add("")
    return "\n".join(lines)


def machine_meta(args, versions):
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(sys.argv),
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "loadavg_start": open("/proc/loadavg").read().split()[:3],
        "versions": versions,
        "duration": args.duration,
        "warmup": args.warmup,
    }


def tool_version(argv):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        return (p.stdout + p.stderr).strip().splitlines()[0]
    except Exception as e:  # noqa: BLE001
        return f"? ({e})"


# --- main ------------------------------------------------------------------


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build", "surogatd"),
                    help="surogatd binary (default: <repo>/build/surogatd)")
    ap.add_argument("--no-surogat", action="store_true",
                    help="leave surogat out (e.g. before it builds)")
    ap.add_argument("--only", default=None,
                    help="comma-separated subset of surogat,varnish,nginx")
    ap.add_argument("--quick", action="store_true",
                    help="smoke mode: 2 s runs, 1 s warmup, 2 s idle hold")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured wrk run")
    ap.add_argument("--warmup", type=int, default=3, help="seconds of warmup before each run")
    ap.add_argument("--conns", default="50,400", help="wrk connection counts")
    ap.add_argument("--bodies", default="100B,16KiB,128KiB", help="body sizes: 100B,16KiB,128KiB")
    ap.add_argument("--modes", default="keep-alive,close",
                    help="keep-alive and/or close (wrk -H 'Connection: close')")
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--idle-conns", type=int, default=10000)
    ap.add_argument("--idle-hold", type=float, default=5.0,
                    help="seconds the idle connections are held before reading RSS")
    ap.add_argument("--settle", type=float, default=5.0,
                    help="seconds between starting the proxies and the first RSS reading")
    ap.add_argument("--noise-limit", type=float, default=20.0,
                    help="redo a run when more than this %% of a core was busy outside it")
    ap.add_argument("--wait-idle", type=float, default=300.0,
                    help="seconds to wait for an idle machine before starting (and up to 60 "
                    "before redoing a disturbed run)")
    ap.add_argument("--retries", type=int, default=2, help="redos of a disturbed run")
    ap.add_argument("--no-rss", action="store_true", help="skip the idle-connection RSS phase")
    ap.add_argument("--no-load", action="store_true", help="skip the wrk phase")
    ap.add_argument("--no-origin-direct", dest="origin_direct", action="store_false",
                    help="skip the wrk-straight-to-origin reference runs")
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
    ap.add_argument("--json", help="also write every figure and raw wrk output here")
    ap.add_argument("--markdown", help="also write the tables here")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the work dir (logs, configs)")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.warmup, args.idle_hold, args.settle = 2, 1, 2.0, 2.0
    args.conns = [int(c) for c in args.conns.split(",")]
    args.bodies = args.bodies.split(",")
    args.modes = args.modes.split(",")
    if not set(args.bodies) <= {b[0] for b in BODIES} or not set(args.modes) <= {
            "keep-alive", "close"}:
        sys.exit("--bodies: 100B,16KiB,128KiB; --modes: keep-alive,close")
    return args


def main():
    args = parse_args()
    atexit.register(stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    want = args.only.split(",") if args.only else list(PROXIES)
    for w in want:
        if w not in PROXIES:
            sys.exit(f"--only: unknown proxy {w}")
    if args.no_surogat and "surogat" in want:
        want.remove("surogat")
    if "surogat" in want and not os.access(args.surogatd, os.X_OK):
        log(f"surogat: {args.surogatd} not found or not executable: surogat not measured")
        want.remove("surogat")
    for tool in (args.wrk, args.nginx, shutil.which("taskset")):
        if not tool or not os.access(tool, os.X_OK):
            sys.exit(f"missing tool: {tool}")
    if "varnish" in want and not os.access(args.varnishd, os.X_OK):
        sys.exit(f"missing {args.varnishd}")
    if "haproxy" in want and not os.access(args.haproxy, os.X_OK):
        sys.exit(f"missing {args.haproxy}")
    ncpu = os.cpu_count()
    if ncpu < 2:
        log("only one CPU: proxy, wrk and origin all on core 0; figures are not comparable")
        args.proxy_cpu = args.client_cpu = 0

    # 10k client sockets in idleconns plus as many in the proxy: raise the limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.idle_conns + 4096
    target = need if hard == resource.RLIM_INFINITY else min(max(need, soft), hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    args.nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if args.nofile < args.idle_conns + 1024:
        sys.exit(f"RLIMIT_NOFILE {args.nofile} (hard {hard}) is too low for "
                 f"{args.idle_conns} idle connections: raise ulimit -n")

    versions = {
        "nginx": tool_version([args.nginx, "-v"]),
        "varnish": tool_version([args.varnishd, "-V"]) if "varnish" in want else None,
        "haproxy": tool_version([args.haproxy, "-v"]) if "haproxy" in want else None,
        "wrk": tool_version([args.wrk, "--version"]),
        "python": platform.python_version(),
    }
    if "surogat" in want:
        versions["surogat"] = args.surogatd
        try:
            rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
            dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            versions["surogat"] += f" (tree at git {rev or 'no commit'}{', dirty' if dirty else ''}"
            st = os.stat(args.surogatd)
            with open(args.surogatd, "rb") as f:
                digest = hashlib.sha1(f.read()).hexdigest()[:12]
            built = datetime.datetime.fromtimestamp(st.st_mtime, datetime.timezone.utc)
            versions["surogat"] += f"; binary sha1 {digest}, built {built:%Y-%m-%d %H:%M} UTC)"
        except Exception:  # noqa: BLE001
            pass
    meta = machine_meta(args, versions)
    meta["busy_before_pct"] = wait_idle(args.wait_idle)
    if any(v > 10 for v in meta["busy_before_pct"].values()):
        log(f"!! the machine is not idle before the run (busy % per core: "
            f"{meta['busy_before_pct']}): figures will be noisy")
    log(f"{meta['nproc']} CPUs ({meta['cpu_model']}), loadavg {meta['loadavg_start']}; "
        f"measuring {', '.join(want)}")

    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    workdir = tempfile.mkdtemp(prefix="surogat-bench-", dir=base)
    os.chmod(workdir, 0o755)  # nginx workers and varnish drop privileges
    if not args.keep_tmp:
        CLEANUP.append(workdir)

        def cleanup():
            stop_all()  # first: nothing may still write into the directory
            shutil.rmtree(workdir, True)
        atexit.register(cleanup)
    else:
        log(f"work dir kept: {workdir}")
    docroot = os.path.join(workdir, "www")
    os.makedirs(docroot)
    for _, path, size in BODIES:
        with open(docroot + path, "wb") as f:
            f.write((b"0123456789abcdef" * (size // 16 + 1))[:size - 1] + b"\n")
        os.chmod(docroot + path, 0o644)
    os.chmod(docroot, 0o755)

    origin_port = free_port()
    origin = start_nginx(args, "origin", "origin-nginx.conf.in", args.client_cpu, workdir,
                         PORT=origin_port, DOCROOT=docroot)
    origin.name = "origin"
    wait_ready(origin.proc, origin_port, "/100b", 100, "origin nginx")
    log(f"origin nginx on 127.0.0.1:{origin_port} (pid {origin.proc.pid}, core {args.client_cpu})")

    servers = {}
    for name in want:
        port = free_port()
        try:
            if name == "surogat":
                srv = start_surogat(args, workdir, port, origin_port)
            elif name == "varnish":
                srv = start_varnish(args, workdir, port, origin_port)
            elif name == "haproxy":
                srv = start_haproxy(args, workdir, port, origin_port)
            else:
                srv = start_nginx(args, "nginx", "proxy-nginx.conf.in", args.proxy_cpu, workdir,
                                  PORT=port, ORIGIN_PORT=origin_port,
                                  KEEPALIVE=args.nginx_keepalive)
            for _, path, size in BODIES:
                wait_ready(srv.proc, port, path, size, name)
            if name == "surogat":
                kids = descendants(srv.proc.pid)
                if kids:  # a manager/child split: measure the busiest child
                    srv.pid = max(kids, key=lambda k: threads(k) or 0)
                    log(f"surogat forked {kids}: measuring pid {srv.pid} ({comm(srv.pid)})")
        except Exception as e:  # noqa: BLE001 -- a proxy that fails to start is reported
            log(f"!! {name} failed to start: {e}")
            log_tail = tail(os.path.join(workdir, name, "stderr.log"))
            log(log_tail)
            meta.setdefault("start_errors", {})[name] = f"{e}\n{log_tail}"
            continue
        log(f"{name} on 127.0.0.1:{port} (pid {srv.pid}, core {args.proxy_cpu})")
        servers[name] = srv
    meta["argv"] = {n: getattr(s, "argv", None) for n, s in servers.items()}

    # Let thread pools reach their minimum before the first RSS reading.
    time.sleep(args.settle)
    rss = {} if args.no_rss else rss_phase(args, servers)
    results = [] if args.no_load else load_phase(args, servers, origin)
    meta["rss_after"] = {n: status_field(s.pid, "VmRSS") for n, s in servers.items()
                         if s.check_alive()}
    meta["dead"] = {n: s.dead for n, s in servers.items() if s.dead}
    meta["loadavg_end"] = open("/proc/loadavg").read().split()[:3]

    text = report(args, meta, rss, results, list(servers))
    head = (f"surogat pass-through benchmark, {meta['date']}, {meta['nproc']} x "
            f"{meta['cpu_model']}, proxy on core {args.proxy_cpu}, wrk+origin on core "
            f"{args.client_cpu}, {args.duration}s runs after {args.warmup}s warmup, "
            f"wrk -t {args.wrk_threads}; busy % per core before the run: "
            f"{meta['busy_before_pct']}\n")
    print("\n" + head + "\n" + text)
    for n, s in servers.items():
        if s.dead:
            print(f"!! {n} {s.dead}; log tail:\n{tail(s.logfile)}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(head + "\n" + text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rss": rss, "runs": results}, f, indent=1)
    stop_all()
    return 1 if meta["dead"] else 0


if __name__ == "__main__":
    sys.exit(main())
