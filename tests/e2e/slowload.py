#!/usr/bin/python3
"""
slowload -- many slow HTTP clients at once, from one process: connections
that send a request head one byte at a time and never finish it, and
connections that send a POST head at once and then its body one byte at a
time.  Run as a child process so that its work does not disturb the
caller's own timing (tests/e2e/b_slow_client_test.py, bench/slowclients.py).

Protocol with the caller, one JSON object a line:

  stdout  {"phase": "open", "heads": N, "bodies": N, "failed": N, "secs": S}
          once every connection is open and has sent its first byte
  stdin   any line: report now
  stdout  {"phase": "check", "alive": N, "closed": N, "answered": N,
           "statuses": {"408": N, ...}, "sent": N}
  stdin   EOF or "stop": close everything (with RST: no TIME_WAIT) and exit

Child, below, is that caller's side.

Every interval (1 s) each live connection sends one more byte, so each
sends 1 byte/s.  A head is "GET /slow/<i> HTTP/1.1", a Host and one long
padding field: at 1 byte/s it never completes within a run.  A body
connection sends "POST /up/<i>" with Content-Length --body-len and then its
body one byte per interval.  What the server answers is read and its
status counted (a 503 refusal, or a 408 at a deadline).

Python stdlib only; loopback only.
"""

import argparse
import json
import os
import resource
import select
import selectors
import socket
import struct
import subprocess
import sys
import time

LINGER_RST = struct.pack("ii", 1, 0)


class Child:
    """The caller's side: this script in a child process (argv_prefix, e.g. taskset),
    opened and ready when the constructor returns; .opened is its "open" report."""

    def __init__(self, port, heads, bodies, body_len=1000, argv_prefix=(), timeout=180):
        argv = list(argv_prefix) + [sys.executable, os.path.abspath(__file__),
                                    "--port", str(port), "--heads", str(heads),
                                    "--bodies", str(bodies), "--body-len", str(body_len)]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, start_new_session=True)
        self.opened = self.line(timeout)
        if self.opened.get("phase") != "open":
            raise RuntimeError("slowload: %r" % self.opened)

    def line(self, timeout):
        r, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not r:
            raise RuntimeError("slowload said nothing within %ss" % timeout)
        text = self.proc.stdout.readline()
        if not text:
            raise RuntimeError("slowload exited: %s" % self.proc.poll())
        return json.loads(text)

    def check(self):
        self.proc.stdin.write("check\n")
        self.proc.stdin.flush()
        return self.line(60)

    def stop(self):
        """Close every connection and wait for the child; kill it if it hangs."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("stop\n")
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return
    new = want if hard == resource.RLIM_INFINITY else min(want, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    except (ValueError, OSError):
        pass


class Slow:
    __slots__ = ("sock", "data", "pos", "answer", "closed")

    def __init__(self, sock, data, pos):
        self.sock = sock
        self.data = data  # every byte it will ever send
        self.pos = pos    # sent so far
        self.answer = b""
        self.closed = False


def head_bytes(i):
    return (b"GET /slow/%d HTTP/1.1\r\nHost: slow.test\r\nX-Pad: " % i) + b"a" * 4000 + b"\r\n\r\n"


def body_bytes(i, n):
    head = b"POST /up/%d HTTP/1.1\r\nHost: slow.test\r\nContent-Length: %d\r\n\r\n" % (i, n)
    return head, head + b"b" * n


def open_all(args, sel):
    conns = []
    failed = 0
    t0 = time.monotonic()
    plan = [("head", i) for i in range(args.heads)] + [("body", i) for i in range(args.bodies)]
    for k, (kind, i) in enumerate(plan):
        if kind == "head":
            data, first = head_bytes(i), 1
        else:
            head, data = body_bytes(i, args.body_len)
            first = len(head) + 1  # the head at once, then the body's first byte
        try:
            s = socket.create_connection((args.host, args.port), timeout=5)
            s.setblocking(False)
            s.send(data[:first])
        except OSError:
            failed += 1
            continue
        c = Slow(s, data, first)
        conns.append(c)
        sel.register(s, selectors.EVENT_READ, c)
        if (k + 1) % args.batch == 0:
            # pace the opening: a burst of new sessions is not what is measured
            pump(sel, args.open_pause)
    return conns, failed, time.monotonic() - t0


def pump(sel, wait):
    """Read what the server sends until `wait` seconds have passed."""
    end = time.monotonic() + wait
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        for key, _ in sel.select(left):
            take(sel, key.data)


def take(sel, c):
    """Read what the server sent on c; note its close."""
    try:
        got = c.sock.recv(65536)
    except (BlockingIOError, InterruptedError):
        return
    except OSError:
        got = b""
    if got:
        c.answer += got
    else:
        c.closed = True
        sel.unregister(c.sock)


def trickle(conns):
    """One more byte on each live connection."""
    sent = 0
    for c in conns:
        if c.closed or c.pos >= len(c.data):
            continue
        try:
            if c.sock.send(c.data[c.pos:c.pos + 1]) == 1:
                c.pos += 1
                sent += 1
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            c.closed = True
    return sent


def report(conns, sent):
    statuses = {}
    answered = 0
    for c in conns:
        if c.answer.startswith(b"HTTP/1."):
            answered += 1
            st = c.answer[9:12].decode("latin-1")
            statuses[st] = statuses.get(st, 0) + 1
    closed = sum(1 for c in conns if c.closed)
    return {"phase": "check", "alive": len(conns) - closed, "closed": closed,
            "answered": answered, "statuses": statuses, "sent": sent}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--heads", type=int, default=0, help="slow-head connections")
    ap.add_argument("--bodies", type=int, default=0, help="slow-body connections")
    ap.add_argument("--body-len", type=int, default=1000, help="Content-Length of each body")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between bytes")
    ap.add_argument("--batch", type=int, default=100, help="connections opened at once")
    ap.add_argument("--open-pause", type=float, default=0.05, help="seconds between batches")
    args = ap.parse_args()
    if args.host not in ("127.0.0.1", "::1", "localhost"):
        sys.exit("slowload: loopback only")
    raise_nofile(args.heads + args.bodies + 256)
    sel = selectors.DefaultSelector()
    conns, failed, secs = open_all(args, sel)
    print(json.dumps({"phase": "open", "heads": sum(1 for c in conns if c.data[:3] == b"GET"),
                      "bodies": sum(1 for c in conns if c.data[:4] == b"POST"),
                      "failed": failed, "secs": round(secs, 3)}), flush=True)
    sent = 0
    stdin = sys.stdin.fileno()
    sel.register(stdin, selectors.EVENT_READ, None)
    next_tick = time.monotonic() + args.interval
    stop = False
    while not stop:
        left = max(0.0, next_tick - time.monotonic())
        for key, _ in sel.select(left):
            if key.data is None:
                line = sys.stdin.readline()
                if not line or line.strip() == "stop":
                    stop = True
                    break
                print(json.dumps(report(conns, sent)), flush=True)
                continue
            take(sel, key.data)
        if time.monotonic() >= next_tick:
            sent += trickle(conns)
            next_tick += args.interval
    for c in conns:
        try:
            c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RST)
        except OSError:
            pass
        c.sock.close()


if __name__ == "__main__":
    main()
