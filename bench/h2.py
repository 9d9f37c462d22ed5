#!/usr/bin/python3
"""
h2 -- surogat's HTTP/2 next to nginx 1.22 (listen ssl http2, proxy_cache)
and HAProxy 2.6 (an h2 front with its cache), all with the same ECDSA
P-256 certificate, protocols, cipher list and TLS 1.3 suites and 128
concurrent streams a connection, in front of one nginx origin serving
static files from tmpfs.  Same pinning as tls.py:

  proxy under test   core 0   (taskset -c 0; HAProxy with one thread)
  h2load, origin     core 1   (taskset -c 1; h2load with one thread)

1. Memory: 10,000 idle HTTP/2 connections over TLS (ALPN h2; one GET each,
   read whole, then held), on fresh processes: VmRSS and RssAnon before and
   with them (idleconns_h2.py), and how many are still open.  --idle-h2c:
   the same over cleartext with prior knowledge (surogat's h2c listener,
   nginx's "listen ... http2" without ssl; not HAProxy), on a second port
   of the same processes.
2. Cache hits: h2load, 50 connections, 10 and 100 concurrent streams each,
   on a 1 KiB and a 128 KiB object, every cache warmed first (over
   HTTP/1.1) and a hit checked in the response headers; a warm-up run,
   then the measured one.  Reported: requests/s, requests per second of
   the proxy's CPU time during the measured run (the proxy is pinned to
   one core, so this is what it serves per core; on a 2-core machine the
   one h2load thread may be what limits requests/s), p50 and p99 from
   h2load's per-request log (time from the request to the end of its
   response).
3. TLS handshakes with ALPN h2: h2load opening connections at a fixed
   rate above what any of them accepts, each for one request, no
   resumption: handshakes per second of the proxy's CPU time, and per
   second of the run.

--before SUROGATD adds an older surogatd as the contender surogat-before,
run in the same rounds (its ratios to the peers get columns of their own);
--rounds N repeats the hit runs, each round starting with the next
contender; --objects and --streams pick the hit cases.

The protocol, cipher, key exchange, certificate and ALPN each one
negotiates with `openssl s_client` are printed first.  Every process it
starts is stopped on exit.  Traffic goes to 127.0.0.1 only.  Python 3
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
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import cachehit as ch  # noqa: E402 -- surogat's start
import passthrough as pt  # noqa: E402 -- process handling, nginx start
import tls  # noqa: E402 -- certificate, TLS check, warming

REPO = pt.REPO
log = pt.log

CONTENDERS = ["surogat", "surogat-before", "nginx", "haproxy"]
OBJECTS = tls.OBJECTS
STREAMS = 128  # concurrent streams a connection, the same for all
# Idle connections are kept this long by all (conf/h2-*.in say it too): opening 10,000 TLS
# connections from one Python thread takes a minute or more on a loaded machine.
IDLE_TIMEOUT = "300s"


def start_surogat(args, workdir, origin_port, crt, key, name="surogat"):
    params = [f"tls_ciphers={tls.CIPHERS}", f"tls_ciphersuites={tls.SUITES}",
              f"h2_max_concurrent_streams={STREAMS}", f"timeout_idle={IDLE_TIMEOUT}",
              *args.surogat_param]
    saved, args.surogat_param = args.surogat_param, params
    h2c_port = pt.free_port()
    try:
        srv = ch.start_surogat(args, name, workdir, pt.free_port(), origin_port,
                               "malloc,256m", listen_opts=f",tls,cert={crt},key={key}",
                               extra=["-a", f"127.0.0.1:{h2c_port},h2c"],
                               binary=args.before if name == "surogat-before" else None)
    finally:
        args.surogat_param = saved
    srv.h2c_port = h2c_port
    return srv


def start_surogat_before(args, workdir, origin_port, crt, key):
    return start_surogat(args, workdir, origin_port, crt, key, "surogat-before")


def start_nginx(args, workdir, origin_port, crt, key):
    port, h2c_port = pt.free_port(), pt.free_port()
    srv = pt.start_nginx(args, "nginx", "h2-nginx.conf.in", args.proxy_cpu, workdir,
                         PORT=port, H2C_PORT=h2c_port, ORIGIN_PORT=origin_port, KEEPALIVE=64,
                         KEYS_ZONE="16m", MAX_SIZE="1g", CERT=crt, KEY=key,
                         CIPHERS=tls.CIPHERS, SUITES=tls.SUITES)
    srv.h2c_port = h2c_port
    return srv


def start_haproxy(args, workdir, origin_port, crt, key):
    d = os.path.join(workdir, "haproxy")
    os.makedirs(d, exist_ok=True)
    pem = os.path.join(d, "bench.pem")  # HAProxy wants certificate and key in one file
    with open(pem, "w") as out:
        for part in (crt, key):
            with open(part) as f:
                out.write(f.read())
    os.chmod(pem, 0o600)
    port = pt.free_port()
    conf = pt.render("h2-haproxy.cfg.in", os.path.join(d, "haproxy.cfg"), DIR=d, PORT=port,
                     ORIGIN_PORT=origin_port, PEM=pem, CIPHERS=tls.CIPHERS, SUITES=tls.SUITES)
    srv = pt.Server("haproxy", port)
    srv.kind = "haproxy"
    srv.logfile = os.path.join(d, "stderr.log")
    srv.proc = pt.spawn(["taskset", "-c", str(args.proxy_cpu), args.haproxy, "-db", "-f", conf],
                        srv.logfile)
    srv.pid = srv.proc.pid
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not answers(port):
        if srv.proc.poll() is not None:
            raise RuntimeError(f"haproxy exited {srv.proc.returncode}:\n{pt.tail(srv.logfile)}")
        time.sleep(0.1)
    return srv


def answers(port):
    """Whether a TLS listener answers a GET (HTTP/1.1) at all yet."""
    try:
        tls.https_get(port, "/1k", timeout=1.0)
        return True
    except Exception:  # noqa: BLE001 -- anything means "not yet"
        return False


def h2load(args, url, conns, streams, secs=None, logfile=None, extra=()):
    """One h2load run: for secs seconds (-D), or as extra says (-n)."""
    argv = ["taskset", "-c", str(args.client_cpu), args.h2load, "-t", "1", "-c", str(conns),
            "-m", str(streams), *extra]
    if secs is not None:
        argv += ["-D", str(secs)]
    if logfile:
        argv += ["--log-file", logfile]
    argv.append(url)
    try:
        p = subprocess.run(argv, capture_output=True, timeout=(secs or 0) + 120)
    except subprocess.TimeoutExpired as e:
        # A server that leaves streams unanswered keeps h2load waiting past -D: the
        # run has no figure (the table shows "-"), and the other runs go on.
        log(f"h2load did not finish within {(secs or 0) + 120} s: {url}")
        r = parse_h2load((e.stdout or b"").decode(errors="replace"))
        r.update(rps=None, ok=None, hung=True)
        return r
    return parse_h2load(p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace"))


def parse_h2load(out):
    r = {"rps": None, "done": None, "ok": None, "failed": None, "errored": None, "2xx": None,
         "raw_tail": out[-600:]}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("finished in"):
            # "finished in 10.00s, 123456.70 req/s, 12.34MB/s"
            r["rps"] = float(line.split(",")[1].split()[0])
        elif line.startswith("requests:"):
            f = line.replace(",", "").split()
            r["done"], r["ok"] = int(f[5]), int(f[7])
            r["failed"], r["errored"] = int(f[9]), int(f[11])
        elif line.startswith("status codes:"):
            r["2xx"] = int(line.replace(",", "").split()[2])
    return r


def percentiles(logfile):
    """p50 and p99 in milliseconds (what pt.fmt_ms() takes) from h2load's log (start,
    status, microseconds)."""
    try:
        with open(logfile) as f:
            us = sorted(int(ln.split("\t")[2]) for ln in f if ln.count("\t") >= 2)
    except (OSError, ValueError, IndexError):
        return None, None
    if not us:
        return None, None
    return us[len(us) // 2] / 1e3, us[min(len(us) - 1, int(len(us) * 0.99))] / 1e3


def negotiated(srv):
    out = {}
    for proto in ("-tls1_2", "-tls1_3"):
        t = tls.tls_params(srv, proto)
        p = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{srv.port}",
                            "-servername", "127.0.0.1", proto, "-alpn", "h2,http/1.1"],
                           input=b"", capture_output=True, timeout=10)
        text = p.stdout.decode(errors="replace")
        t["alpn"] = "h2" if "ALPN protocol: h2" in text else text.split("ALPN", 1)[-1][:40]
        out[proto[1:]] = t
        log(f"{proto[1:]:>7} {srv.name:>8}: " + (t.get("error") or
            f"{t['protocol']} {t['cipher']} key {t.get('temp_key')} cert "
            f"{t.get('cert_sha256')} alpn {t['alpn']}"))
    return out


def idle_phase(args, srv):
    if args.idle_h2c:
        if not hasattr(srv, "h2c_port"):
            return {"error": "no h2c listener"}
        tls_port, srv.port = srv.port, srv.h2c_port
        os.environ["IDLECONNS_H2C"] = "1"
        try:
            r = pt.idle_measure(args, srv, "idleconns_h2.py")
        finally:
            srv.port = tls_port
            del os.environ["IDLECONNS_H2C"]
    else:
        r = pt.idle_measure(args, srv, "idleconns_h2.py")
    o = r.get("open", {})
    log(f"idle: {srv.name}: {pt.fmt_mib(r.get('rss_kib'))} MiB VmRSS with {o.get('opened')} "
        f"open (before {pt.fmt_mib(r.get('rss_before_kib'))}; failed {o.get('failed')} "
        f"{o.get('errors')}) check {r.get('check')}")
    return r


def load_phase(args, servers, workdir):
    rows = []
    cases = [(f"hit {name}", path, m) for name, path, _ in OBJECTS
             if not args.objects or name in args.objects for m in args.streams]
    for rnd in range(args.rounds):
        # Each round starts with the next contender, so that none always runs first.
        k = rnd % len(servers)
        rows += load_round(args, servers[k:] + servers[:k], workdir, cases,
                           f" r{rnd + 1}" if args.rounds > 1 else "")
    return rows


def load_round(args, servers, workdir, cases, tag):
    rows = []
    for label, path, m in cases:
        row = {"case": f"{label} x{m}{tag}", "conns": args.conns, "streams": m}
        for srv in servers:
            if not srv.check_alive():
                continue
            row.setdefault("busy_before_pct", {})[srv.name] = pt.wait_idle(
                min(60.0, args.wait_idle), limit=args.idle_limit)
            lf = os.path.join(workdir, f"h2load-{srv.name}.log")
            url = f"https://127.0.0.1:{srv.port}{path}"
            h2load(args, url, args.conns, m, args.warmup)  # warm-up, not counted
            if os.path.exists(lf):
                os.unlink(lf)  # h2load appends to its log: the run's p99 from its own lines
            t0 = pt.proc_ticks(srv.pid)
            r = h2load(args, url, args.conns, m, args.duration, lf)
            r["cpu_s"] = (pt.proc_ticks(srv.pid) - t0) / os.sysconf("SC_CLK_TCK")
            r["p50"], r["p99"] = percentiles(lf)
            # The proxy's pinned core is its whole capacity: requests per CPU second
            # is what it would serve with the core to itself, whatever the client managed.
            r["per_cpu_s"] = (r["ok"] / r["cpu_s"]) if r["ok"] and r["cpu_s"] else None
            row[srv.name] = r
            log(f"{row['case']:>14} {srv.name:>8}: {pt.fmt_num(r['rps'])} req/s, "
                f"{pt.fmt_num(r['per_cpu_s'])} per CPU s, p50 {pt.fmt_ms(r['p50'])} "
                f"p99 {pt.fmt_ms(r['p99'])}, ok {r['ok']} failed {r['failed']} "
                f"errored {r['errored']}")
        rows.append(row)
    return rows


def handshake_phase(args, servers):
    """New connections, a request each, created faster than any of them accepts:
    handshakes per second of the proxy's CPU time (and of the wall clock)."""
    rows = {}
    n = args.handshakes
    for srv in servers:
        if not srv.check_alive():
            continue
        t0, c0 = time.monotonic(), pt.proc_ticks(srv.pid)
        r = h2load(args, f"https://127.0.0.1:{srv.port}/1k", n, 1,
                   extra=["-n", str(n), "-r", str(max(1, n // 100)), "--rate-period=20ms"])
        secs = time.monotonic() - t0
        r["cpu_s"] = (pt.proc_ticks(srv.pid) - c0) / os.sysconf("SC_CLK_TCK")
        r["hs_per_cpu_s"] = (r["ok"] / r["cpu_s"]) if r["ok"] and r["cpu_s"] else None
        r["hs_per_s"] = (r["ok"] / secs) if r["ok"] else None
        rows[srv.name] = r
        log(f"handshakes {srv.name:>8}: {pt.fmt_num(r['hs_per_cpu_s'])} per CPU s, "
            f"{pt.fmt_num(r['hs_per_s'])} per s (ok {r['ok']} of {n})")
    return rows


def growth(r):
    """VmRSS the idle connections added (KiB), and per connection open (a string, KiB):
    what an idle HTTP/2 connection over TLS costs after its handshake, SETTINGS
    exchange and one request."""
    before, with_them = r.get("rss_before_kib"), r.get("rss_kib")
    opened = (r.get("open") or {}).get("ok")
    if before is None or with_them is None:
        return None, "-"
    grow = with_them - before
    return grow, f"{grow / opened:.1f} KiB" if opened else "-"


def report(idle, rows, hs, names, h2c=False):
    others = [n for n in names if n != "surogat"]
    before_peers = [n for n in names if n not in ("surogat", "surogat-before")] \
        if "surogat-before" in names else []
    print(f"\n### 10,000 idle HTTP/2 connections ({'h2c' if h2c else 'TLS'})\n")
    print("| proxy | VmRSS before | VmRSS with | RssAnon with | more with them | a connection "
          "| open / failed | still open |")
    print("|---|---|---|---|---|---|---|---|")
    for n in names:
        r = idle.get(n) or {}
        o, c = r.get("open", {}), r.get("check", {})
        grow, per = growth(r)
        print(f"| {n} | {pt.fmt_mib(r.get('rss_before_kib'))} MiB | "
              f"{pt.fmt_mib(r.get('rss_kib'))} MiB | {pt.fmt_mib(r.get('anon_kib'))} MiB | "
              f"{pt.fmt_mib(grow)} MiB | {per} | "
              f"{o.get('opened')} / {o.get('failed')} | {c.get('alive')} |")
    print("\n### Cache hits over HTTP/2 (h2load, one core each)\n")
    head = ["case", "conns"] + [f"{n} req/s" for n in names]
    head += [f"{n} per CPU s" for n in names]
    if "surogat" in names:
        head += [f"surogat/{n} (CPU s)" for n in others]
    head += [f"surogat-before/{n} (CPU s)" for n in before_peers]
    head += [f"{n} p99" for n in names]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        r = {n: row.get(n) or {} for n in names}
        cells = [row["case"], str(row["conns"])]
        cells += [pt.fmt_num(r[n].get("rps")) for n in names]
        cells += [pt.fmt_num(r[n].get("per_cpu_s")) for n in names]
        if "surogat" in names:
            cells += [pt.ratio(r["surogat"].get("per_cpu_s"), r[n].get("per_cpu_s"))
                      for n in others]
        cells += [pt.ratio(r["surogat-before"].get("per_cpu_s"), r[n].get("per_cpu_s"))
                  for n in before_peers]
        cells += [pt.fmt_ms(r[n].get("p99")) for n in names]
        print("| " + " | ".join(cells) + " |")
    print("\n### TLS handshakes with ALPN h2 (a connection a request)\n")
    print("| " + " | ".join(f"{n} per CPU s" for n in names) + " | " +
          " | ".join(f"{n} per s" for n in names) + " |")
    print("|" + "---|" * 2 * len(names))
    print("| " + " | ".join(pt.fmt_num((hs.get(n) or {}).get("hs_per_cpu_s")) for n in names) +
          " | " + " | ".join(pt.fmt_num((hs.get(n) or {}).get("hs_per_s")) for n in names) + " |")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build-bench", "surogatd"),
                    help="surogatd binary (default: the release build in build-bench/)")
    ap.add_argument("--before", default=None, metavar="SUROGATD",
                    help="an older surogatd, run as the contender surogat-before with the same "
                    "arguments, in the same rounds")
    ap.add_argument("--objects", default="",
                    help="comma-separated objects of the hit runs (default: all; "
                    f"{','.join(n for n, _, _ in OBJECTS)})")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the hit runs, each round starting with the next contender")
    ap.add_argument("--quick", action="store_true",
                    help="smoke mode: 2 s runs, 1 s warmup, 1000 idle connections")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured run")
    ap.add_argument("--warmup", type=int, default=3, help="seconds of warm-up in each run")
    ap.add_argument("--conns", type=int, default=50, help="h2load connections")
    ap.add_argument("--streams", default="10,100",
                    help="concurrent streams a connection, comma-separated (default 10,100)")
    ap.add_argument("--idle-conns", type=int, default=10000)
    ap.add_argument("--idle-hold", type=float, default=5.0)
    ap.add_argument("--handshakes", type=int, default=10000,
                    help="connections in the handshake run")
    ap.add_argument("--no-idle", action="store_true")
    ap.add_argument("--idle-h2c", action="store_true",
                    help="idle connections over cleartext, prior knowledge (not HAProxy)")
    ap.add_argument("--wait-idle", type=float, default=300.0,
                    help="wait up to this long for both cores to be nearly idle before "
                         "starting, and up to 60 s before each run (shared machines)")
    ap.add_argument("--idle-limit", type=float, default=10.0,
                    help="busy %% of a core under which it counts as idle")
    ap.add_argument("--no-handshakes", action="store_true")
    ap.add_argument("--no-load", action="store_true", help="skip the cache-hit runs")
    ap.add_argument("--thread-pools", type=int, default=2)
    ap.add_argument("--thread-pool-min", type=int, default=250)
    ap.add_argument("-P", "--surogat-param", action="append", default=[],
                    help="extra surogat -p name=value (repeatable)")
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--nofile", type=int, default=65536)
    ap.add_argument("--h2load", default=shutil.which("h2load") or "/usr/bin/h2load")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--haproxy", default=shutil.which("haproxy") or "/usr/sbin/haproxy")
    peers = [n for n in CONTENDERS if n != "surogat-before"]
    ap.add_argument("--only", default=",".join(peers),
                    help=f"comma-separated contenders (default: {','.join(peers)}; "
                    "--before adds surogat-before)")
    ap.add_argument("--json", help="also write every figure and the TLS check here")
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.warmup, args.idle_conns, args.handshakes = 2, 1, 1000, 2000
        args.idle_hold = 1.0
    args.streams = [int(s) for s in args.streams.split(",") if s.strip()]
    args.only = [n.strip() for n in args.only.split(",") if n.strip()]
    args.objects = [o.strip() for o in args.objects.split(",") if o.strip()]
    if args.before and "surogat-before" not in args.only:
        args.only.insert(1, "surogat-before")
    if not args.before and "surogat-before" in args.only:
        ap.error("surogat-before needs --before SUROGATD")
    bad = [n for n in args.only if n not in CONTENDERS]
    if bad or not args.only:
        ap.error(f"--only: unknown {bad}; choose from {','.join(CONTENDERS)}")
    return args


def main():
    args = parse_args()
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)
    tools = [args.h2load, args.nginx, shutil.which("taskset"), shutil.which("openssl")]
    tools += [args.surogatd] if "surogat" in args.only else []
    tools += [args.before] if "surogat-before" in args.only else []
    tools += [args.haproxy] if "haproxy" in args.only else []
    for tool in tools:
        if not tool or not os.access(tool, os.X_OK):
            sys.exit(f"missing: {tool}")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(hard, max(soft, args.nofile)) if hard != resource.RLIM_INFINITY else \
        max(soft, args.nofile)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    args.nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if args.nofile < args.idle_conns + 1024:
        sys.exit(f"RLIMIT_NOFILE {args.nofile} (hard {hard}) is too low: raise ulimit -n")
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    workdir = tempfile.mkdtemp(prefix="surogat-h2-bench-", dir=base)
    os.chmod(workdir, 0o755)  # nginx workers run as nobody
    if not args.keep_tmp:
        pt.CLEANUP.append(workdir)
        atexit.register(shutil.rmtree, workdir, True)
    docroot = os.path.join(workdir, "htdocs")
    os.makedirs(os.path.join(docroot, "z"))
    for _, path, size in OBJECTS:
        with open(os.path.join(docroot, path.lstrip("/")), "wb") as f:
            f.write((b"0123456789abcdef" * (size // 16 + 1))[:size])
    crt, key = tls.make_cert(workdir)
    origin_port = pt.free_port()
    origin = pt.start_nginx(args, "origin", "cache-origin-nginx.conf.in", args.client_cpu,
                            workdir, PORT=origin_port, DOCROOT=docroot)
    pt.wait_ready(origin.proc, origin_port, "/1k", 1024, "origin nginx")
    start = {"surogat": start_surogat, "surogat-before": start_surogat_before,
             "nginx": start_nginx, "haproxy": start_haproxy}
    servers = [start[n](args, workdir, origin_port, crt, key) for n in args.only]
    busy_before = pt.wait_idle(args.wait_idle, limit=args.idle_limit)
    log(f"cores busy before the runs (%): {busy_before}")
    idle = {}
    for srv in servers:
        deadline = time.monotonic() + 30
        while not answers(srv.port) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not args.no_idle:
            idle[srv.name] = idle_phase(args, srv)  # fresh processes first
    check = {}
    for srv in servers:
        for _, path, size in OBJECTS:
            tls.warm(srv, path, size)
        check[srv.name] = negotiated(srv)
        r = h2load(args, f"https://127.0.0.1:{srv.port}/1k", 1, 1, extra=["-n", "1"])
        if r["ok"] != 1:
            raise RuntimeError(f"{srv.name}: no HTTP/2 answer: {r['raw_tail']}")
        log(f"{srv.name} on https://127.0.0.1:{srv.port} (pid {srv.pid}, core "
            f"{args.proxy_cpu}): warm, answers over h2")
    rows = [] if args.no_load else load_phase(args, servers, workdir)
    hs = {} if args.no_handshakes else handshake_phase(args, servers)
    report(idle, rows, hs, args.only, args.idle_h2c)
    if args.json:
        meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "host": platform.node(), "nproc": os.cpu_count(),
                "proxy_cpu": args.proxy_cpu, "client_cpu": args.client_cpu,
                "duration": args.duration, "warmup": args.warmup, "conns": args.conns,
                "streams": args.streams, "contenders": args.only,
                "busy_before_pct": busy_before,
                "ciphers": tls.CIPHERS, "ciphersuites": tls.SUITES}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "tls": check, "idle": idle, "rows": rows,
                       "handshakes": hs}, f, indent=1)
    dead = [s.name for s in servers if not s.check_alive()]
    pt.stop_all()
    if dead:
        sys.exit(f"died during the run: {', '.join(dead)}")


if __name__ == "__main__":
    main()
