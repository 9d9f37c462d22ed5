#!/usr/bin/python3
"""
idleconns -- open many keep-alive client connections to an HTTP server,
send one GET on each, read the whole response and keep them all open.

Protocol with the caller (bench/passthrough.py), one JSON object a line:

  stdout  {"phase": "open", "opened": N, "ok": N, "bad_status": N,
           "failed": N, "secs": S, "errors": {...}}
  stdin   any line: "check the connections now"
  stdout  {"phase": "check", "alive": N, "closed": N, "data": N}
  stdin   EOF or any line: close everything (with RST: no TIME_WAIT) and exit

Python stdlib only.  Loopback only: the host must be 127.0.0.1.
"""

import argparse
import errno
import json
import resource
import selectors
import socket
import struct
import sys
import time

LINGER_RST = struct.pack("ii", 1, 0)


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= want:
        return soft
    new = want if hard == resource.RLIM_INFINITY else min(want, hard)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
    except (ValueError, OSError):
        return soft
    return new


class Conn:
    __slots__ = ("sock", "buf", "done", "status")

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()
        self.done = False
        self.status = 0


def response_complete(buf):
    """Return (complete, status) for an HTTP/1.1 response in buf."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return False, 0
    head = bytes(buf[:end]).decode("latin-1").split("\r\n")
    try:
        status = int(head[0].split(" ", 2)[1])
    except (IndexError, ValueError):
        return True, -1
    clen = None
    chunked = False
    for line in head[1:]:
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            clen = int(value.strip())
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    body = len(buf) - end - 4
    if chunked:
        return buf.endswith(b"\r\n0\r\n\r\n") or buf.endswith(b"\n0\r\n\r\n"), status
    if clen is None:
        return False, status  # would be read-until-close: not keep-alive
    return body >= clen, status


def bump(stats, what):
    stats["errors"][what] = stats["errors"].get(what, 0) + 1


def open_batch(host, port, request, count, timeout, stats):
    """Connect count sockets, send the request on each, read the responses."""
    sel = selectors.DefaultSelector()
    conns = []
    for _ in range(count):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RST)
        sock.settimeout(timeout)
        try:
            sock.connect((host, port))
            sock.sendall(request)
        except OSError as e:
            key = errno.errorcode.get(e.errno, str(e)) if e.errno else type(e).__name__
            bump(stats, f"connect/send {key}")
            stats["failed"] += 1
            sock.close()
            continue
        sock.setblocking(False)
        conn = Conn(sock)
        conns.append(conn)
        sel.register(sock, selectors.EVENT_READ, conn)

    pending = len(conns)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            conn = key.data
            try:
                data = conn.sock.recv(262144)
            except BlockingIOError:
                continue
            except OSError as e:
                data = None
                err = errno.errorcode.get(e.errno, str(e))
                bump(stats, f"recv {err}")
            if not data:
                if data is not None:
                    bump(stats, "closed before response end")
                sel.unregister(conn.sock)
                conn.sock.close()
                conn.done = True
                conn.status = None
                stats["failed"] += 1
                pending -= 1
                continue
            conn.buf += data
            complete, status = response_complete(conn.buf)
            if complete:
                sel.unregister(conn.sock)
                conn.done = True
                conn.status = status
                conn.buf = None
                pending -= 1
                if 200 <= status < 300:
                    stats["ok"] += 1
                else:
                    stats["bad_status"] += 1
                    bump(stats, f"status {status}")
    for conn in conns:
        if not conn.done:
            sel.unregister(conn.sock)
            bump(stats, "response timeout")
            stats["failed"] += 1
            conn.done = True
            conn.status = None
            conn.buf = None
    sel.close()
    return [c.sock for c in conns if c.status is not None]


def check(socks):
    alive = closed = data = 0
    for sock in socks:
        try:
            got = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            alive += 1
            continue
        except OSError:
            closed += 1
            continue
        if got:
            data += 1
        else:
            closed += 1
    return {"phase": "check", "alive": alive, "closed": closed, "data": data}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("port", type=int)
    ap.add_argument("-n", "--count", type=int, default=10000)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--path", default="/100b")
    ap.add_argument("--batch", type=int, default=250, help="connections opened at a time")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per batch")
    args = ap.parse_args()
    if args.host != "127.0.0.1":
        sys.exit("idleconns: loopback (127.0.0.1) only")

    limit = raise_nofile(args.count + 64)
    if limit < args.count + 16:
        sys.exit(f"idleconns: RLIMIT_NOFILE is {limit}, need {args.count + 16}: raise ulimit -n")

    request = (
        f"GET {args.path} HTTP/1.1\r\nHost: {args.host}:{args.port}\r\n"
        "User-Agent: surogat-bench-idleconns\r\nAccept: */*\r\n\r\n"
    ).encode()
    stats = {"phase": "open", "opened": 0, "ok": 0, "bad_status": 0, "failed": 0, "errors": {}}
    socks = []
    t0 = time.monotonic()
    left = args.count
    while left > 0:
        n = min(args.batch, left)
        socks += open_batch(args.host, args.port, request, n, args.timeout, stats)
        left -= n
    stats["opened"] = len(socks)
    stats["secs"] = round(time.monotonic() - t0, 3)
    print(json.dumps(stats), flush=True)

    if sys.stdin.readline():
        print(json.dumps(check(socks)), flush=True)
        sys.stdin.readline()
    for sock in socks:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
