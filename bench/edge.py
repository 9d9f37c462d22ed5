#!/usr/bin/python3
"""
edge -- what the PROXY protocol and Unix sockets cost on the hit path.

One surogatd (core 0) holding a 1 KiB object, reached through one HAProxy
in TCP mode (core 1, with wrk) by four routes that differ only on
surogat's side of HAProxy:

  tcp        HAProxy -> 127.0.0.1:P               plain
  tcp+proxy  HAProxy -> 127.0.0.1:P,PROXY         send-proxy-v2
  uds        HAProxy -> /dev/shm/.../s.sock       plain
  uds+proxy  HAProxy -> /dev/shm/.../pp.sock,PROXY send-proxy-v2

each measured with keep-alive connections (the header is sent once per
connection) and with a new connection per request (`Connection: close`:
one header per request, the worst case), in interleaved rounds; the
median of the rounds is reported.  The origin is a Python server on core
1, asked once per object (the hits are checked).

Everything on loopback and in a /dev/shm directory removed at the end;
every process started is stopped by pid.  Python 3 stdlib only.
"""

import argparse
import http.server
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BODY = b"x" * 1024


class Origin(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hits = 0

    def do_GET(self):  # noqa: N802
        Origin.hits += 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.send_header("Cache-Control", "max-age=3600")
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *a):
        pass


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listens on %d" % port)


def wrk(port, secs, conns, close):
    # One Host for every route: one object, so that every route serves the same hit.
    argv = ["taskset", "-c", "1", "wrk", "-t", "1", "-c", str(conns), "-d", "%ds" % secs,
            "-H", "Host: bench"]
    if close:
        argv += ["-H", "Connection: close"]
    out = subprocess.run(argv + ["http://127.0.0.1:%d/1k" % port], capture_output=True,
                         text=True, timeout=secs + 60).stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not m or "Non-2xx" in out:
        raise RuntimeError("wrk: %s" % out)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--surogatd", default=os.path.join(REPO, "build", "surogatd"))
    ap.add_argument("--secs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=50)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="sg-edge-", dir="/dev/shm")
    procs = []
    try:
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        tcp, tcpp = free_port(), free_port()
        uds, udsp = os.path.join(d, "s.sock"), os.path.join(d, "pp.sock")
        root = ["-j", "none"] if os.geteuid() == 0 else []
        sg = subprocess.Popen(["taskset", "-c", "0", args.surogatd, "-F"] + root +
                              ["-a", "127.0.0.1:%d" % tcp, "-a", "127.0.0.1:%d,PROXY" % tcpp,
                               "-a", uds, "-a", udsp + ",PROXY", "-b",
                               "127.0.0.1:%d" % srv.server_address[1], "-n", d + "/sg",
                               "-p", "timeout_idle=60s"],
                              stdout=open(d + "/sg.log", "wb"), stderr=subprocess.STDOUT)
        procs.append(sg)
        wait_port(tcp)
        fronts = {k: free_port() for k in ("tcp", "tcp+proxy", "uds", "uds+proxy")}
        targets = {"tcp": "127.0.0.1:%d" % tcp, "tcp+proxy": "127.0.0.1:%d send-proxy-v2" % tcpp,
                   "uds": "unix@%s" % uds, "uds+proxy": "unix@%s send-proxy-v2" % udsp}
        conf = ("global\n    maxconn 4000\n    nbthread 1\ndefaults\n    mode tcp\n"
                "    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n")
        for k, port in fronts.items():
            conf += "listen %s\n    bind 127.0.0.1:%d\n    server s %s\n" % (
                k.replace("+", "_"), port, targets[k])
        with open(d + "/haproxy.cfg", "w") as f:
            f.write(conf)
        hp = subprocess.Popen(["taskset", "-c", "1", "haproxy", "-db", "-f", d + "/haproxy.cfg"],
                              stdout=open(d + "/haproxy.log", "wb"), stderr=subprocess.STDOUT)
        procs.append(hp)
        for port in fronts.values():
            wait_port(port)
        wrk(fronts["tcp"], 1, 4, False)  # warm: the one miss
        assert Origin.hits == 1, Origin.hits
        res = {(k, c): [] for k in fronts for c in (False, True)}
        for _ in range(args.rounds):
            for close in (False, True):
                for k, port in fronts.items():
                    res[(k, close)].append(wrk(port, args.secs, args.conns, close))
        assert Origin.hits == 1, "not all hits: origin asked %d times" % Origin.hits
        print("| route | keep-alive req/s | vs tcp | new connection per request req/s | vs tcp |")
        print("|---|---:|---:|---:|---:|")
        base = {c: statistics.median(res[("tcp", c)]) for c in (False, True)}
        for k in fronts:
            ka, nc = statistics.median(res[(k, False)]), statistics.median(res[(k, True)])
            print("| %s | %.0f | %+.1f%% | %.0f | %+.1f%% |" % (
                k, ka, 100 * (ka / base[False] - 1), nc, 100 * (nc / base[True] - 1)))
        print("\nrounds: %d x %ds, %d connections, median; raw: %s" % (
            args.rounds, args.secs, args.conns,
            {"%s%s" % (k, " close" if c else ""): [round(x) for x in v]
             for (k, c), v in res.items()}))
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
