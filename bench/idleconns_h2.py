#!/usr/bin/python3
"""
idleconns_h2 -- idleconns.py for HTTP/2: open many connections (TLS with
ALPN h2, or cleartext with prior knowledge: --h2c), send the connection
preface, SETTINGS and one GET on each, read its whole response, and keep
them all open and idle.  --h1: the same over TLS with ALPN http/1.1 and an
HTTP/1.1 GET, for what TLS alone keeps per connection.  IDLECONNS_H2C=1 in
the environment does what --h2c does (bench/h2.py's --idle-h2c, through
passthrough.py's idle_measure(), which passes no options).

Protocol with the caller (bench/h2.py), one JSON object a line, as
idleconns.py:

  stdout  {"phase": "open", "opened": N, "ok": N, "failed": N, "secs": S,
           "errors": {...}}
  stdin   any line: "check the connections now"
  stdout  {"phase": "check", "alive": N, "closed": N, "data": N}
  stdin   EOF or any line: close everything (with RST) and exit

The HEADERS block is HPACK by hand (static table indexes and literals),
so that it needs nothing but the standard library.  Loopback only.
"""

import argparse
import json
import os
import socket
import ssl
import struct
import sys
import time

from idleconns import LINGER_RST, raise_nofile

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def frame(ftype, flags, sid, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", sid) + payload


def literal(index, value):
    """HPACK literal without indexing, name from the static table (4-bit prefix < 15)."""
    v = value.encode()
    assert index < 15 and len(v) < 127
    return bytes([index]) + bytes([len(v)]) + v


def request(host, path, tls):
    # :method GET (static 2), :scheme https or http (7, 6), :path (4) and :authority (1)
    scheme = b"\x87" if tls else b"\x86"
    return frame(1, 0x5, 1, b"\x82" + scheme + literal(4, path) + literal(1, host))


def first_field(block):
    """A header block without its leading dynamic table size updates (RFC 7541 6.3:
    001xxxxx, 5-bit prefix integer), which an encoder with a table size other than
    4096 sends first."""
    while block and block[0] & 0xe0 == 0x20:
        i = 1
        if block[0] & 0x1f == 0x1f:
            while i < len(block) and block[i] & 0x80:
                i += 1
            i += 1
        block = block[i:]
    return block


def read_until(sock, deadline, parse):
    """Read until parse(all bytes so far) says the response is whole: parse returns
    (rest, None) for more, (rest, answer) when done; rest is kept for the next call.
    The answer, or None on a timeout, an error or EOF."""
    buf = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            d = sock.recv(65536)
        except (socket.timeout, ssl.SSLError, OSError):
            return None
        if not d:
            return None
        buf, answer = parse(buf + d)
        if answer is not None:
            return answer or None
    return None


def read_response(sock, deadline):
    """Read frames until stream 1 ends: its status (from the first HEADERS byte: an
    indexed :status 200 is 0x88), or None.  Acks the server's SETTINGS."""
    state = {"status": None}

    def parse(buf):
        while len(buf) >= 9:
            length = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + length:
                break
            ftype, flags = buf[3], buf[4]
            sid = int.from_bytes(buf[5:9], "big") & 0x7fffffff
            payload = buf[9:9 + length]
            buf = buf[9 + length:]
            if ftype == 4 and not flags & 1:
                sock.sendall(frame(4, 1, 0, b""))
            elif ftype == 1 and sid == 1:
                state["status"] = 200 if first_field(payload)[:1] == b"\x88" else 0
            elif ftype == 7:
                return buf, 0  # GOAWAY: no answer
            if sid == 1 and ftype in (0, 1) and flags & 1:
                return buf, state["status"] or 0
        return buf, None

    return read_until(sock, deadline, parse)


def read_response_h1(sock, deadline):
    """Read an HTTP/1.1 response with a Content-Length body: its status, or None."""

    def parse(buf):
        head, sep, body = buf.partition(b"\r\n\r\n")
        if not sep:
            return buf, None
        lines = head.decode("latin-1").split("\r\n")
        clen = [int(ln.split(":", 1)[1]) for ln in lines[1:]
                if ln.lower().startswith("content-length:")]
        if clen and len(body) >= clen[0]:
            return buf, int(lines[0].split()[1])
        return buf, None

    return read_until(sock, deadline, parse)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("port", type=int)
    ap.add_argument("-n", "--count", type=int, default=10000)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--path", default="/1k")
    ap.add_argument("--h2c", action="store_true", help="cleartext, prior knowledge")
    ap.add_argument("--h1", action="store_true", help="HTTP/1.1 over TLS (ALPN http/1.1)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds per connection")
    args = ap.parse_args()
    args.h2c = args.h2c or os.environ.get("IDLECONNS_H2C") == "1"
    if args.host != "127.0.0.1":
        sys.exit("idleconns_h2: loopback (127.0.0.1) only")
    limit = raise_nofile(args.count + 64)
    if limit < args.count + 16:
        sys.exit(f"idleconns_h2: RLIMIT_NOFILE is {limit}, need {args.count + 16}")
    ctx = None
    if not args.h2c:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["http/1.1"] if args.h1 else ["h2"])
    hello = PREFACE + frame(4, 0, 0, b"") + request(f"{args.host}:{args.port}", args.path,
                                                   not args.h2c)
    if args.h1:
        hello = f"GET {args.path} HTTP/1.1\r\nHost: {args.host}:{args.port}\r\n\r\n".encode()
    want = "http/1.1" if args.h1 else "h2"
    stats = {"phase": "open", "opened": 0, "ok": 0, "failed": 0, "errors": {}}
    socks = []
    t0 = time.monotonic()
    for _ in range(args.count):
        try:
            s = socket.create_connection((args.host, args.port), timeout=args.timeout)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_RST)
            if ctx is not None:
                s = ctx.wrap_socket(s, server_hostname="localhost")
                if s.selected_alpn_protocol() != want:
                    raise OSError("ALPN %s" % s.selected_alpn_protocol())
            s.sendall(hello)
            st = (read_response_h1 if args.h1 else read_response)(s, time.monotonic() +
                                                                   args.timeout)
            if st != 200:
                raise OSError("status %s" % st)
        except OSError as e:
            key = str(e)[:60]
            stats["errors"][key] = stats["errors"].get(key, 0) + 1
            stats["failed"] += 1
            continue
        stats["ok"] += 1
        socks.append(s)
    stats["opened"] = len(socks)
    stats["secs"] = round(time.monotonic() - t0, 3)
    print(json.dumps(stats), flush=True)
    if sys.stdin.readline():
        alive = closed = data = 0
        for s in socks:
            s.setblocking(False)
            try:
                got = s.recv(1)
                if got:
                    data += 1
                else:
                    closed += 1
            except (BlockingIOError, ssl.SSLWantReadError):
                alive += 1
            except OSError:
                closed += 1
        print(json.dumps({"phase": "check", "alive": alive, "closed": closed, "data": data}),
              flush=True)
        sys.stdin.readline()
    for s in socks:
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
