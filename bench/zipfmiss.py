#!/usr/bin/python3
"""
zipfmiss -- cache misses per hit on the 10,000-URL Zipf working set,
counted by callgrind's cache simulation: the load-insensitive figure for
bench/zipf.py's workload (on a virtual machine without hardware counters
perf stat cannot count them).  surogatd runs under valgrind --tool=callgrind
--cache-sim=yes with the last level set to --ll bytes (default 1 MiB, this
machine's L2 per core: the 32 MiB L3 holds the whole working set), one pool
of four workers; every URL is stored first, wrk warms for 3 s, then the
instrumentation is switched on for --secs seconds of wrk -t1 -c4 and off.
Prints instructions, L1 data read misses and last-level data misses per
request, whole process, and keeps the callgrind file for
callgrind_annotate --show=D1mr,DLmr --sort=DLmr FILE.

  bench/zipfmiss.py build-before/surogatd OUT.cg [SECS]

Every process it starts is stopped on exit.  Traffic on 127.0.0.1 only.
"""

import argparse
import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
import cachehit as ch  # noqa: E402
import passthrough as pt  # noqa: E402

URLS = 10000
PREFIX = "/z50/"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("surogatd")
    ap.add_argument("out")
    ap.add_argument("secs", type=int, nargs="?", default=15)
    ap.add_argument("--ll", type=int, default=1 << 20, help="simulated last-level cache bytes")
    a = ap.parse_args()
    args = argparse.Namespace(nofile=65536, nginx=shutil.which("nginx") or "/usr/sbin/nginx",
                              wrk=shutil.which("wrk") or "/usr/bin/wrk", client_cpu=1,
                              proxy_cpu=0, wrk_threads=1, fill_conns=4)
    atexit.register(pt.stop_all)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, pt.on_signal)
    w = tempfile.mkdtemp(prefix="surogat-zipfmiss-", dir="/dev/shm")
    os.chmod(w, 0o755)
    atexit.register(lambda: (pt.stop_all(), shutil.rmtree(w, True)))
    d = os.path.join(w, "www")
    os.makedirs(os.path.join(d, "z"))
    ch.write_file(os.path.join(d, "1k"), ch.body_bytes(1024))
    for i in range(URLS):
        ch.write_file(os.path.join(d, "z", str(i)), ch.body_bytes(1024, b"%d " % i))
    for x in (d, os.path.join(d, "z")):
        os.chmod(x, 0o755)
    tab = os.path.join(w, "zipf.txt")
    ch.zipf_table(tab, URLS, 1.0, 1 << 20)
    op = pt.free_port()
    o = pt.start_nginx(args, "origin", "cache-origin-nginx.conf.in", 1, w, PORT=op, DOCROOT=d)
    pt.wait_ready(o.proc, op, "/1k", 1024, "origin")
    port = pt.free_port()
    argv = ["valgrind", "--tool=callgrind", "--cache-sim=yes", "--instr-atstart=no",
            f"--LL={a.ll},8,64", f"--callgrind-out-file={a.out}", a.surogatd, "-F", "-j", "none",
            "-a", f"127.0.0.1:{port}", "-b", f"127.0.0.1:{op}", "-n", os.path.join(w, "n"),
            "-s", "malloc,1g", "-T", f"127.0.0.1:{pt.free_port()}", "-p", "thread_pools=1",
            "-p", "thread_pool_min=4", "-p", "timeout_idle=60s"]
    p = pt.spawn(argv, os.path.join(w, "surogatd.log"))
    pt.wait_ready(p, port, "/1k", 1024, "surogatd", timeout=120)
    srv = pt.Server("surogatd", port)
    srv.proc, srv.pid = p, p.pid
    f = ch.fill(args, srv, PREFIX, URLS)
    if not f.get("complete"):
        sys.exit(f"the fill did not complete: {f}")
    lua = os.path.join(ch.LUA, "zipf.lua")
    ch.run_wrk(args, port, "/", 4, 3, script=lua, script_args=(tab, PREFIX, URLS), latency=False)
    subprocess.run(["callgrind_control", "-i", "on", str(p.pid)], check=True, capture_output=True)
    _, out = ch.run_wrk(args, port, "/", 4, a.secs, script=lua, script_args=(tab, PREFIX, URLS),
                        latency=False)
    subprocess.run(["callgrind_control", "-i", "off", str(p.pid)], check=True, capture_output=True)
    n = pt.parse_wrk(out)["requests"]
    p.send_signal(signal.SIGTERM)
    p.wait(120)
    ann = subprocess.run(["callgrind_annotate", "--show=Ir,D1mr,DLmr", a.out],
                         capture_output=True, text=True).stdout
    m = re.search(r"^\s*([\d,]+) \(100.0%\)\s+([\d,]+) \(100.0%\)\s+([\d,]+) \(100.0%\)\s+"
                  r"PROGRAM TOTALS", ann, re.M)
    ir, d1, dl = (int(x.replace(",", "")) for x in m.groups())
    print(f"{a.surogatd}: {n} requests; per request: {ir / n:,.0f} instructions, "
          f"{d1 / n:.2f} L1 data read misses, {dl / n:.2f} last-level data read misses")
    return 0


if __name__ == "__main__":
    sys.exit(main())
