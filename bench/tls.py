#!/usr/bin/python3
"""
tls -- surogat's TLS next to nginx (proxy_cache behind `listen ssl`) and
Varnish behind Hitch (Hitch terminating TLS, PROXY v2 to Varnish over
loopback), all with the same ECDSA P-256 certificate, protocols (TLS 1.2
and 1.3), cipher list and TLS 1.3 suites, in front of one nginx origin
serving static files from tmpfs.  Same pinning as passthrough.py and
cachehit.py, one run.

  proxy under test   core 0   (taskset -c 0; Hitch and varnishd both)
  wrk, origin nginx  core 1   (taskset -c 1)

1. Handshakes: wrk with "Connection: close", so every request is a new
   connection and a handshake: requests per second = handshakes per second,
   on a 1 KiB cache hit.  wrk resumes: it SSL_clear()s its client SSL
   between connections, which keeps the session, whose ticket the next
   connection presents; a server that sends a new ticket at each resumption
   (nginx, surogat) resumes all but each connection's first, one that does
   not (surogat before 2026-11-27) every other one.  bench/tls_count.sh
   counts full handshakes alone.
2. Cache hits over TLS: keep-alive wrk on 1 KiB and 128 KiB objects, every
   cache warmed first and the hit checked in the response headers.

The protocol, cipher, key exchange and certificate each one negotiates
with `openssl s_client` are printed first, so the match is checked, not
assumed.  Reports req/s, p99, the server's own CPU time per request (all
its threads and processes on core 0, from /proc/PID/stat: on a shared
machine the figure that moves least) and the surogat/nginx and
surogat/varnish-hitch ratios of each.  --cases narrows the run (e.g.
--cases handshakes), --rounds repeats it with the contenders interleaved.
Every process it
starts is stopped on exit.  Traffic goes to 127.0.0.1 only.  Python 3
stdlib only.  See bench/README.md.
"""

import argparse
import atexit
import hashlib
import json
import os
import platform
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import cachehit as ch  # noqa: E402 -- surogat's start
import passthrough as pt  # noqa: E402 -- process handling, wrk parsing, nginx start

REPO = pt.REPO
CLK_TCK = os.sysconf("SC_CLK_TCK")
log = pt.log

CONTENDERS = ["surogat", "surogat-before", "nginx", "varnish-hitch"]
# name, path, size
OBJECTS = [("1KiB", "/1k", 1024), ("128KiB", "/128k", 128 * 1024)]
# surogat's defaults (tls_ciphers, tls_ciphersuites), given to both servers.
CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
           "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
           "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305")
SUITES = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256"


def make_cert(d):
    """A self-signed ECDSA P-256 certificate for 127.0.0.1 (wrk does not verify).
    The DNS name is for Hitch 1.7, whose SNI lookup asserts (and its worker
    dies) when a client sends SNI and the certificate gave it no DNS name;
    wrk sends the host, 127.0.0.1, as SNI."""
    crt, key = os.path.join(d, "bench.crt"), os.path.join(d, "bench.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", crt,
                    "-subj", "/CN=127.0.0.1", "-days", "2",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True, timeout=30)
    return crt, key


def https_get(port, path, timeout=5.0):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", timeout=timeout,
                                context=ctx) as r:
        return r.status, dict((k.lower(), v) for k, v in r.getheaders()), r.read()


def is_hit(srv, headers):
    # cachehit.py's test per kind; nginx servers from passthrough.py have none.
    return ch.hit_seen(getattr(srv, "kind", "nginx"), headers)[0]


def warm(srv, path, size, timeout=30.0):
    """Fetch until the object is served as a cache hit, whole."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if not srv.check_alive():
            raise RuntimeError(f"{srv.name} died")
        try:
            status, headers, body = https_get(srv.port, path)
            last = (status, len(body), headers.get("cache-status") or
                    headers.get("x-cache-status") or headers.get("x-varnish"))
            if status == 200 and len(body) == size and is_hit(srv, headers):
                return
        except Exception as e:  # noqa: BLE001 -- anything means "not yet"
            last = str(e)
        time.sleep(0.1)
    raise RuntimeError(f"{srv.name} {path}: no cache hit ({last})")


def start_surogat(args, workdir, origin_port, crt, key, name="surogat"):
    params = [f"tls_ciphers={CIPHERS}", f"tls_ciphersuites={SUITES}", *args.surogat_param]
    saved, args.surogat_param = args.surogat_param, params
    try:
        return ch.start_surogat(args, name, workdir, pt.free_port(), origin_port,
                                "malloc,256m", listen_opts=f",tls,cert={crt},key={key}",
                                binary=args.before if name == "surogat-before" else None)
    finally:
        args.surogat_param = saved


def start_surogat_before(args, workdir, origin_port, crt, key):
    return start_surogat(args, workdir, origin_port, crt, key, "surogat-before")


def start_nginx(args, workdir, origin_port, crt, key):
    port = pt.free_port()
    srv = pt.start_nginx(args, "nginx", "tls-nginx.conf.in", args.proxy_cpu, workdir,
                         PORT=port, ORIGIN_PORT=origin_port, KEEPALIVE=64, KEYS_ZONE="16m",
                         MAX_SIZE="1g", CERT=crt, KEY=key, CIPHERS=CIPHERS, SUITES=SUITES)
    return srv


class HitchVarnish(pt.Server):
    """Hitch (the port wrk talks to) and the varnishd behind it: alive only
    while both are."""

    def __init__(self, name, port, varnish):
        super().__init__(name, port)
        self.kind = "varnish"
        self.varnish = varnish

    def check_alive(self):
        return super().check_alive() and self.varnish.check_alive()


def start_varnish_hitch(args, workdir, origin_port, crt, key):
    vport = pt.free_port()
    # cachehit.py's Varnish (malloc store, its builtin-VCL cache template),
    # the listener given as "PORT,PROXY" so that -a takes Hitch's PROXY v2.
    varnish = ch.start_varnish(args, "varnish", workdir, f"{vport},PROXY", origin_port,
                               "malloc,256m")
    d = os.path.join(workdir, "hitch")
    os.makedirs(os.path.join(d, "ocsp"), exist_ok=True)
    pem = os.path.join(d, "bench.pem")  # Hitch wants key and certificate in one file
    with open(pem, "w") as out:
        for part in (key, crt):
            with open(part) as f:
                out.write(f.read())
    os.chmod(pem, 0o600)
    port = pt.free_port()
    conf = pt.render("tls-hitch.conf.in", os.path.join(d, "hitch.conf"), DIR=d, PORT=port,
                     BACKEND_PORT=vport, PEM=pem, CIPHERS=CIPHERS, SUITES=SUITES)
    srv = HitchVarnish("varnish-hitch", port, varnish)
    srv.logfile = os.path.join(d, "stderr.log")
    srv.proc = pt.spawn(["taskset", "-c", str(args.proxy_cpu), args.hitch,
                         f"--config={conf}"], srv.logfile)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            raise RuntimeError(f"hitch exited {srv.proc.returncode}:\n{pt.tail(srv.logfile)}")
        kids = [k for k in pt.children(srv.proc.pid) if pt.comm(k) == "hitch"]
        if kids:
            srv.pid = kids[0]  # the one worker
            return srv
        time.sleep(0.1)
    raise RuntimeError(f"hitch: no worker:\n{pt.tail(srv.logfile)}")


def tls_params(srv, proto):
    """What openssl s_client negotiates with srv over proto: {'protocol',
    'cipher', 'temp_key', 'cert_sha256'} or {'error'}."""
    # With SNI, as wrk sends it (the host), so the check takes wrk's path.
    argv = ["openssl", "s_client", "-connect", f"127.0.0.1:{srv.port}",
            "-servername", "127.0.0.1", proto, "-brief"]
    try:
        p = subprocess.run(argv, input=b"", capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        return {"error": "s_client timed out"}
    out = {}
    for line in p.stderr.decode(errors="replace").splitlines():
        k, _, v = line.partition(":")
        k = k.strip()
        if k == "Protocol version":
            out["protocol"] = v.strip()
        elif k == "Ciphersuite":
            out["cipher"] = v.strip()
        elif k in ("Server Temp Key", "Peer Temp Key"):
            out["temp_key"] = v.strip()
    try:
        der = ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate(("127.0.0.1", srv.port),
                                                                  timeout=5))
        out["cert_sha256"] = hashlib.sha256(der).hexdigest()[:16]
    except (OSError, ValueError) as e:
        out["error"] = str(e)
    if "cipher" not in out:
        out["error"] = p.stderr.decode(errors="replace").strip()[-200:]
    return out


def check_tls(servers):
    """Print what each contender negotiates; a mismatch is a warning, not an abort,
    so that the figures still come out, but it shows in the output and the json."""
    seen = {}
    for proto in ("-tls1_2", "-tls1_3"):
        for srv in servers:
            t = tls_params(srv, proto)
            seen.setdefault(proto, {})[srv.name] = t
            log(f"{proto[1:]:>7} {srv.name:>13}: " + (t.get("error") or
                f"{t['protocol']} {t['cipher']} key {t.get('temp_key')} "
                f"cert {t.get('cert_sha256')}"))
        values = {json.dumps(t, sort_keys=True) for t in seen[proto].values()}
        if len(values) > 1:
            log(f"!! {proto[1:]}: the contenders do not negotiate the same parameters")
    return seen


def server_ticks(srv):
    """CPU ticks (utime + stime) of the processes serving srv: Hitch's worker and
    varnishd's child count together."""
    pids = [srv.pid] + ([srv.varnish.pid] if hasattr(srv, "varnish") else [])
    ticks = [pt.proc_ticks(p) for p in pids]
    return None if None in ticks else sum(ticks)


def run_wrk(args, port, path, conns, secs, close):
    argv = ["taskset", "-c", str(args.client_cpu), args.wrk, "-t", str(args.wrk_threads),
            "-c", str(conns), "-d", f"{secs}s", "--timeout", "5s", "--latency"]
    if close:
        argv += ["-H", "Connection: close"]
    argv.append(f"https://127.0.0.1:{port}{path}")
    p = subprocess.run(argv, capture_output=True, timeout=secs + 60)
    return pt.parse_wrk(p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace"))


CASES = [("handshakes", "/1k", True)] + [(f"hit {name}", path, False)
                                          for name, path, _ in OBJECTS]


def measure(args, servers, rnd):
    rows = []
    # Each round starts with another contender, so that a slow spell of a shared
    # machine does not always fall on the same one.
    order = servers[rnd % len(servers):] + servers[:rnd % len(servers)]
    for label, path, close in CASES:
        if label.split()[0] not in args.cases and label.replace(" ", "") not in args.cases:
            continue
        conns = args.close_conns if close else args.conns
        row = {"case": label, "conns": conns, "round": rnd}
        for srv in order:
            if not srv.check_alive():
                continue
            run_wrk(args, srv.port, path, conns, args.warmup, close)
            t0 = server_ticks(srv)
            r = run_wrk(args, srv.port, path, conns, args.duration, close)
            t1 = server_ticks(srv)
            if None not in (t0, t1) and r["requests"]:
                r["cpu_us"] = (t1 - t0) / CLK_TCK * 1e6 / r["requests"]
            row[srv.name] = r
            errs = r["sock_errors"] or ""
            log(f"{label:>12} {srv.name:>13}: {pt.fmt_num(r['rps'])} req/s, p99 "
                f"{pt.fmt_ms(r['p99'])}, cpu {fmt_us(r.get('cpu_us'))}/req, "
                f"non-2xx {r['non2xx']} {errs}")
        rows.append(row)
    return rows


def fmt_us(v):
    return "-" if v is None else f"{v:.1f}us"


def report(rows, names):
    others = [n for n in names if n != "surogat"]
    head = ["case", "conns"] + [f"{n} req/s" for n in names]
    if "surogat" in names:
        head += [f"surogat/{n}" for n in others]
    head += [f"{n} p99" for n in names]
    head += [f"{n} cpu/req" for n in names]
    if "surogat" in names:
        head += [f"surogat/{n} cpu" for n in others]
    before_nginx = "surogat-before" in names and "nginx" in names
    if before_nginx:
        head += ["surogat-before/nginx cpu"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        r = {n: row.get(n) or {} for n in names}
        cells = [row["case"] + (f" #{row['round'] + 1}" if row["round"] else ""),
                 str(row["conns"])]
        cells += [pt.fmt_num(r[n].get("rps")) for n in names]
        if "surogat" in names:
            cells += [pt.ratio(r["surogat"].get("rps"), r[n].get("rps")) for n in others]
        cells += [pt.fmt_ms(r[n].get("p99")) for n in names]
        cells += [fmt_us(r[n].get("cpu_us")) for n in names]
        if "surogat" in names:
            cells += [pt.ratio(r["surogat"].get("cpu_us"), r[n].get("cpu_us")) for n in others]
        if before_nginx:
            cells += [pt.ratio(r["surogat-before"].get("cpu_us"), r["nginx"].get("cpu_us"))]
        print("| " + " | ".join(cells) + " |")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build-bench", "surogatd"),
                    help="surogatd binary (default: the release build in build-bench/)")
    ap.add_argument("--before", default=None, metavar="SUROGATD",
                    help="an older surogatd, run as the contender surogat-before with the same "
                    "parameters, interleaved with the others in every round")
    ap.add_argument("--quick", action="store_true", help="smoke mode: 2 s runs, 1 s warmup")
    ap.add_argument("--duration", type=int, default=10, help="seconds per measured wrk run")
    ap.add_argument("--warmup", type=int, default=3, help="seconds of warmup before each run")
    ap.add_argument("--conns", type=int, default=50, help="wrk connections for the hit runs")
    ap.add_argument("--close-conns", type=int, default=50,
                    help="wrk connections for the handshake run")
    ap.add_argument("--wrk-threads", type=int, default=2)
    ap.add_argument("--thread-pools", type=int, default=2)
    ap.add_argument("--thread-pool-min", type=int, default=250)
    ap.add_argument("-P", "--surogat-param", action="append", default=[],
                    help="extra surogat -p name=value (repeatable)")
    ap.add_argument("--proxy-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--nofile", type=int, default=65536)
    ap.add_argument("--wrk", default=shutil.which("wrk") or "/usr/bin/wrk")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx")
    ap.add_argument("--varnishd", default=shutil.which("varnishd") or "/usr/sbin/varnishd")
    ap.add_argument("--hitch", default=shutil.which("hitch") or "/usr/sbin/hitch")
    ap.add_argument("-V", "--varnish-param", action="append", default=[],
                    help="extra varnishd -p name=value (repeatable)")
    peers = [n for n in CONTENDERS if n != "surogat-before"]
    ap.add_argument("--only", default=",".join(peers),
                    help=f"comma-separated contenders to run (default: {','.join(peers)}; "
                    "--before adds surogat-before)")
    ap.add_argument("--cases", default="handshakes,hit",
                    help="comma-separated: handshakes, hit (both objects), hit1KiB, hit128KiB")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat the measurement, each round starting with the next contender")
    ap.add_argument("--json", help="also write every figure and the TLS check here")
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.duration, args.warmup = 2, 1
    args.cases = {c.strip() for c in args.cases.split(",") if c.strip()}
    args.only = [n.strip() for n in args.only.split(",") if n.strip()]
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
    tools = [args.wrk, args.nginx, shutil.which("taskset"), shutil.which("openssl")]
    tools += [args.surogatd] if "surogat" in args.only else []
    tools += [args.before] if "surogat-before" in args.only else []
    tools += [args.varnishd, args.hitch] if "varnish-hitch" in args.only else []
    for tool in tools:
        if not tool or not os.access(tool, os.X_OK):
            sys.exit(f"missing: {tool}")
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    workdir = tempfile.mkdtemp(prefix="surogat-tls-bench-", dir=base)
    os.chmod(workdir, 0o755)  # nginx workers run as nobody
    if not args.keep_tmp:
        pt.CLEANUP.append(workdir)
        atexit.register(shutil.rmtree, workdir, True)
    docroot = os.path.join(workdir, "htdocs")
    os.makedirs(os.path.join(docroot, "z"))
    for _, path, size in OBJECTS:
        with open(os.path.join(docroot, path.lstrip("/")), "wb") as f:
            f.write((b"0123456789abcdef" * (size // 16 + 1))[:size])
    crt, key = make_cert(workdir)
    origin_port = pt.free_port()
    origin = pt.start_nginx(args, "origin", "cache-origin-nginx.conf.in", args.client_cpu,
                            workdir, PORT=origin_port, DOCROOT=docroot)
    pt.wait_ready(origin.proc, origin_port, "/1k", 1024, "origin nginx")
    start = {"surogat": start_surogat, "surogat-before": start_surogat_before,
             "nginx": start_nginx,
             "varnish-hitch": start_varnish_hitch}
    servers = [start[n](args, workdir, origin_port, crt, key) for n in args.only]
    for srv in servers:
        for _, path, size in OBJECTS:
            warm(srv, path, size)
        log(f"{srv.name} on https://127.0.0.1:{srv.port} (pid {srv.pid}, core "
            f"{args.proxy_cpu}): warm")
    negotiated = check_tls(servers)
    rows = [row for rnd in range(args.rounds) for row in measure(args, servers, rnd)]
    report(rows, args.only)
    if args.json:
        meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "host": platform.node(), "nproc": os.cpu_count(),
                "proxy_cpu": args.proxy_cpu, "client_cpu": args.client_cpu,
                "duration": args.duration, "warmup": args.warmup,
                "wrk_threads": args.wrk_threads, "contenders": args.only,
                "ciphers": CIPHERS, "ciphersuites": SUITES}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "tls": negotiated, "rows": rows}, f, indent=1)
    dead = [s.name for s in servers if not s.check_alive()]
    pt.stop_all()
    if dead:
        sys.exit(f"died during the run: {', '.join(dead)}")


if __name__ == "__main__":
    main()
