#!/usr/bin/python3
"""
hitinsns -- instructions per cache hit, counted by callgrind: the stable
figure on a noisy machine.  surogatd runs under valgrind --tool=callgrind
with one pool of two workers; a 1 KiB object is fetched once, warmed with
200 hits, then the counters are zeroed, --hits hits are made one after
the other on one keep-alive connection, and the counters are dumped.
Modes, each with a surogatd of its own:

  none     no log reader
  line     surogatctl log > /dev/null
  trace    surogatctl log -g request > FILE (the workers trace every request)
  trace-q  surogatctl log -g request -q 'ReqURL ~ "^/nomatch"' (traced,
           grouped and queried, nothing printed)

For each: instructions per hit in all (Ir of the dump / hits), in the
workers' session task (h1t_sess_task, inclusive), and in the log stream's
thread (stream_thread, inclusive), which runs while the hits are made and
for 0.5 s after, to read what they left.  Give --surogatd twice (or more)
to compare builds; each build runs every mode.

With --h2 the hits go over HTTP/2 instead (an h2c listener, h2load on
one connection, one stream at a time; the workers' figure is then
h2t_sess_task's), and the Cache-Status of each is not checked: the warm-up
makes the object a hit.

Traffic on 127.0.0.1 only; every process started is stopped.  Python 3
stdlib, valgrind (callgrind_control, callgrind_annotate), h2load for --h2.
"""

import argparse
import http.client
import http.server
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from edge import BODY, Origin, free_port  # noqa: E402 -- the same 1 KiB origin

MODES = {"none": None, "line": [], "trace": ["-g", "request"],
         "trace-q": ["-g", "request", "-q", 'ReqURL ~ "^/nomatch"']}
STARTED = []


def log(msg):
    print(time.strftime("%H:%M:%S ") + msg, file=sys.stderr, flush=True)


def wait_listen(port, proc, secs):
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"surogatd exited {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"nothing listens on {port} after {secs} s")


def hits(port, n, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        for _ in range(n):
            c.request("GET", "/1k.bin")
            r = c.getresponse()
            body = r.read()
            if r.status != 200 or body != BODY:
                raise SystemExit(f"bad answer {r.status}")
            cs = r.getheader("Cache-Status") or ""
            if not cs.startswith("surogat; hit"):
                raise SystemExit(f"not a hit: {cs}")
    finally:
        c.close()


def h2hits(port, n, timeout=120):
    """n hits over one HTTP/2 connection (h2c, prior knowledge), one stream at a time."""
    out = subprocess.run(["h2load", "-n", str(n), "-c", "1", "-m", "1",
                          f"http://127.0.0.1:{port}/1k.bin"],
                         capture_output=True, text=True, timeout=timeout).stdout
    if not re.search(r"requests: %d total, %d started, %d done, %d succeeded" % (n, n, n, n), out):
        raise SystemExit(f"h2load: {out}")


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    if proc in STARTED:
        STARTED.remove(proc)


def inclusive(dump, fn):
    """Inclusive Ir of function fn in a callgrind dump."""
    out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", dump],
                         capture_output=True, text=True, check=True).stdout
    for ln in out.splitlines():
        m = re.match(r"\s*([\d,]+) .*\b%s\b" % re.escape(fn), ln)
        if m:
            return int(m.group(1).replace(",", ""))
    return 0


def total(dump):
    with open(dump) as f:
        for ln in f:
            if ln.startswith(("summary:", "totals:")):
                return int(ln.split()[1])
    raise SystemExit(f"{dump}: no totals")


def run(args, surogatd, surogatctl, mode, origin_port, workdir):
    d = tempfile.mkdtemp(prefix="run-", dir=workdir)
    port, admin = free_port(), free_port()
    argv = ["valgrind", "--tool=callgrind", "--dump-instr=no",
            f"--callgrind-out-file={d}/cg.out", surogatd, "-F", "-a",
            f"127.0.0.1:{port}" + (",h2c" if args.h2 else ""),
            "-b", f"127.0.0.1:{origin_port}", "-n", os.path.join(d, "n"), "-T",
            f"127.0.0.1:{admin}", "-s", "malloc,64m", "-p", "thread_pools=1",
            "-p", "thread_pool_min=2", "-p", "timeout_idle=600s"]
    if os.geteuid() == 0:
        argv[5:5] = ["-j", "none"]
    errlog = open(os.path.join(d, "stderr"), "wb")
    sg = subprocess.Popen(argv, stdout=errlog, stderr=errlog, start_new_session=True)
    STARTED.append(sg)
    reader = None
    try:
        wait_listen(port, sg, 120)
        hits_made = 0
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        c.request("GET", "/1k.bin")
        c.getresponse().read()
        c.close()
        hits(port, 200)
        if MODES[mode] is not None:
            out = open(os.path.join(d, "reader.out"), "wb")
            reader = subprocess.Popen([surogatctl, "-T", f"127.0.0.1:{admin}", "-t", "60", "log"]
                                      + MODES[mode], stdout=out, stderr=subprocess.PIPE,
                                      start_new_session=True)
            out.close()
            STARTED.append(reader)
            first = reader.stderr.readline()
            if not first.startswith(b"Streaming"):
                raise SystemExit(f"log {MODES[mode]}: {first!r}")
            hits(port, 20)  # the reader's first look at the rings, out of the count
            time.sleep(0.5)
        if args.h2:
            h2hits(port, 200)
        subprocess.run(["callgrind_control", "-z", str(sg.pid)], check=True,
                       capture_output=True, timeout=120)
        (h2hits if args.h2 else hits)(port, args.hits)
        hits_made = args.hits
        time.sleep(0.5)
        subprocess.run(["callgrind_control", "-d", str(sg.pid)], check=True,
                       capture_output=True, timeout=120)
        dumps = sorted(f for f in os.listdir(d) if f.startswith("cg.out."))
        if not dumps:
            raise SystemExit("no callgrind dump")
        dump = os.path.join(d, dumps[-1])
        res = {"all": total(dump) / hits_made,
               "worker": inclusive(dump, "h2t_sess_task" if args.h2 else "h1t_sess_task")
               / hits_made,
               "reader": inclusive(dump, "stream_thread") / hits_made}
        if reader is not None and mode == "trace":
            stop(reader)
            with open(os.path.join(d, "reader.out"), "rb") as f:
                # less the 20 requests made before the count
                res["printed"] = sum(1 for ln in f if ln.startswith(b"*   << Request")) - 20
        log(f"dump: {dump}")
        return res
    finally:
        if reader is not None:
            stop(reader)
        stop(sg)
        errlog.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surogatd", action="append", help="(repeatable) builds to compare")
    ap.add_argument("--surogatctl", action="append",
                    help="one per --surogatd; default: beside it")
    ap.add_argument("--hits", type=int, default=2000)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--keep", action="store_true", help="keep the dumps (their paths are shown)")
    ap.add_argument("--h2", action="store_true",
                    help="hits over HTTP/2 (h2c with prior knowledge, h2load -c1 -m1); "
                    "workers: h2t_sess_task")
    args = ap.parse_args()
    builds = args.surogatd or [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                            "build", "surogatd")]
    ctls = args.surogatctl or [os.path.join(os.path.dirname(b), "surogatctl") for b in builds]
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if shutil.which(tool) is None:
            sys.exit(f"missing tool: {tool}")
    workdir = tempfile.mkdtemp(prefix="surogat-bench-hitinsns-")
    origin_port = free_port()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", origin_port), Origin)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    rows = []
    try:
        for b, ctl in zip(builds, ctls):
            for mode in args.modes.split(","):
                r = run(args, b, ctl, mode, origin_port, workdir)
                rows.append((b, mode, r))
                log(f"{b} {mode}: {r['all']:,.0f} Ir/hit (workers {r['worker']:,.0f}, "
                    f"reader {r['reader']:,.0f})" +
                    (f", {r['printed']} of {args.hits} printed" if "printed" in r else ""))
    finally:
        for p in list(STARTED):
            stop(p)
        srv.shutdown()
        if args.keep:
            log(f"dumps kept under {workdir}")
        else:
            shutil.rmtree(workdir, True)
    print(f"\n# hitinsns: callgrind, instructions per 1 KiB hit, {args.hits} hits\n")
    task = "h2t_sess_task" if args.h2 else "h1t_sess_task"
    print(f"| build | reader | Ir/hit | workers ({task}) | reader thread |")
    print("|---|---|--:|--:|--:|")
    for b, mode, r in rows:
        print(f"| {b} | {mode} | {r['all']:,.0f} | {r['worker']:,.0f} | {r['reader']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
