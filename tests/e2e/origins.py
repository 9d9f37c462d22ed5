"""Scriptable origin servers for the e2e suite.

Raw sockets, so an origin can misbehave on purpose: answer late or never,
send garbage, die in the middle of a body, close an idle keep-alive
connection behind the proxy's back.  Each origin records every request it
read (raw bytes included) so tests can assert on what surogat forwarded,
and counts the connections it accepted.
"""

import email.utils
import hashlib
import socket
import threading
import time


def upgrade_echo(c, got):
    """A backend speaking a made-up protocol after an Upgrade, on the connected
    socket c: the request head goes to got["head"], the answer is a 101, then
    every byte that comes is sent back upper-cased until EOF."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += c.recv(4096)
    got["head"] = buf.split(b"\r\n\r\n")[0].decode()
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n"
              b"Connection: Upgrade\r\n\r\n")
    rest = buf.split(b"\r\n\r\n", 1)[1]
    while True:
        if rest:
            c.sendall(rest.upper())
            rest = b""
        d = c.recv(4096)
        if not d:
            break
        rest = d


def upgrade_echo_client(port):
    """The client of upgrade_echo(), through a proxy on port: "hello", then
    " world", each upper-cased back within 10 s in all."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nhello")
    buf = b""
    deadline = time.monotonic() + 10
    while b"HELLO" not in buf and time.monotonic() < deadline:
        buf += s.recv(4096)
    assert buf.startswith(b"HTTP/1.1 101"), buf
    s.sendall(b" world")
    while b"WORLD" not in buf and time.monotonic() < deadline:
        buf += s.recv(4096)
    assert buf.endswith(b"HELLO WORLD"), buf
    s.close()


class OriginError(Exception):
    pass


class OriginRequest:
    """One request as the origin read it."""

    def __init__(self):
        self.method = ""
        self.target = ""
        self.path = ""
        self.query = ""
        self.version = ""
        self.headers = []  # [(name, value)] in order, as sent
        self.raw_head = b""
        self.raw_body = b""  # body bytes as framed on the wire
        self.body = b""  # decoded body
        self.chunked = False
        self.trailers = []
        self.conn_id = 0
        self.conn_seq = 0  # 1 for the first request on its connection
        self.t = 0.0
        self.answered = None  # the status the origin sent (None: no response head)
        self.proxy = None  # Origin(proxy=True): the connection's PROXY header

    def header(self, name):
        name = name.lower()
        for n, v in self.headers:
            if n.lower() == name:
                return v
        return None

    def headers_all(self, name):
        name = name.lower()
        return [v for n, v in self.headers if n.lower() == name]

    def has(self, name):
        return self.header(name) is not None

    def __repr__(self):
        return "<OriginRequest %s %s conn=%d>" % (self.method, self.target, self.conn_id)


class Route:
    """What the origin answers for one path.

    status, reason, headers ([(n, v)] or dict), body (bytes, or a callable
    taking the OriginRequest)
    chunked:         send the body chunked (in `chunks` if given)
    close_delimited: no Content-Length, close after the body
    content_length:  advertise this length instead of len(body)
    die_after:       send the head and this many body bytes, then close
    stall_after:     send the head and this many body bytes, then go silent
    delay:           seconds to wait before answering
    hang:            read the request and never answer
    garbage:         send these raw bytes instead of a response, then close
    raw:             send these raw bytes as the response (connection kept)
    close_after:     close the connection after the response, without saying
                     Connection: close (a server timing out idle connections)
    send_100:        answer Expect: 100-continue before reading the body
    echo:            body = the request body; echo_sha: its sha256 hex
    hold_head:       after reading a request, set route.held and wait (at most 30s)
                     for route.release before answering
    hold_after:      send the head and this many bytes of the body (as framed on
                     the wire), set route.held, wait (at most 30s) for
                     route.release, then send the rest -- or close instead, with
                     die_on_release; route.done is set once all was sent
    script:          script(sock, req, stop_ev) answers instead, writing what it
                     likes on the socket (a backend that misbehaves in time, not
                     only in bytes); it returns True to keep the connection for
                     the next request.  Every wait in it must be bounded (use
                     stop_ev.wait(seconds)).
    conditional:     answer a GET or HEAD whose If-None-Match matches the route's
                     ETag (weak comparison, or *), or, without If-None-Match,
                     whose If-Modified-Since is at or after its Last-Modified,
                     with 304 and no body (the route's other fields kept, its
                     Content-Length dropped); only when the route's status is 200
    """

    def __init__(self, status=200, reason=None, headers=None, body=b"ok", chunked=False,
                 chunks=None, close_delimited=False, content_length=None, die_after=None,
                 stall_after=None, delay=0.0, hang=False, garbage=None, raw=None,
                 close_after=False, send_100=False, echo=False, echo_sha=False,
                 conditional=False, hold_head=False, hold_after=None, die_on_release=False,
                 script=None):
        self.status = status
        self.reason = reason
        if isinstance(headers, dict):
            headers = list(headers.items())
        self.headers = list(headers or [])
        self.body = body
        self.chunked = chunked
        self.chunks = chunks
        self.close_delimited = close_delimited
        self.content_length = content_length
        self.die_after = die_after
        self.stall_after = stall_after
        self.delay = delay
        self.hang = hang
        self.garbage = garbage
        self.raw = raw
        self.close_after = close_after
        self.send_100 = send_100
        self.echo = echo
        self.echo_sha = echo_sha
        self.conditional = conditional
        self.hold_head = hold_head
        self.hold_after = hold_after
        self.die_on_release = die_on_release
        self.script = script
        self.held = threading.Event()
        self.release = threading.Event()
        self.done = threading.Event()

    def wait_release(self, stop_ev, timeout=30.0):
        """Wait for release (bounded); False when the origin stops first."""
        deadline = time.monotonic() + timeout
        while not self.release.wait(0.05):
            if stop_ev.is_set() or time.monotonic() > deadline:
                return False
        return True

    def header(self, name):
        name = name.lower()
        for n, v in self.headers:
            if n.lower() == name:
                return v
        return None

    def not_modified(self, req):
        """Whether a conditional route answers req with 304 (RFC 9110 section 13.2.2)."""
        if not self.conditional or self.status != 200 or req.method not in ("GET", "HEAD"):
            return False
        inm = req.header("If-None-Match")
        if inm is not None:
            etag = self.header("ETag")
            if etag is None:
                return False
            strip = lambda t: t[2:] if t.startswith("W/") else t  # noqa: E731
            tags = [t.strip() for t in inm.split(",") if t.strip()]
            return "*" in tags or strip(etag) in [strip(t) for t in tags]
        ims, lm = req.header("If-Modified-Since"), self.header("Last-Modified")
        if ims is None or lm is None:
            return False
        try:
            return email.utils.parsedate_to_datetime(ims) >= email.utils.parsedate_to_datetime(lm)
        except (TypeError, ValueError):
            return False


REASONS = {100: "Continue", 200: "OK", 204: "No Content", 206: "Partial Content",
           301: "Moved Permanently", 304: "Not Modified", 404: "Not Found",
           500: "Internal Server Error", 503: "Service Unavailable"}


class _Closed(Exception):
    pass


class _Reader:
    """Buffered reads from a socket; raises _Closed on EOF."""

    def __init__(self, sock, stop):
        self.sock = sock
        self.buf = bytearray()
        self.stop = stop

    def fill(self):
        try:
            data = self.sock.recv(1 << 20)
        except OSError as e:
            raise _Closed() from e
        if not data:
            raise _Closed()
        self.buf += data

    def until(self, sep, limit):
        while True:
            i = self.buf.find(sep)
            if i >= 0:
                out = bytes(self.buf[:i + len(sep)])
                del self.buf[:i + len(sep)]
                return out
            if len(self.buf) > limit:
                raise OriginError("line or head over %d bytes" % limit)
            self.fill()

    def exactly(self, n):
        while len(self.buf) < n:
            self.fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out


def read_proxy_header(rd):
    """The PROXY header opening a connection, as {"version", "local", "src",
    "dst", "sport", "dport"}; OriginError for anything else."""
    import ipaddress
    import struct
    first = rd.exactly(5)
    if first == b"PROXY":
        line = (first + rd.until(b"\r\n", 108)).decode("ascii")[:-2].split(" ")
        if line[1] == "UNKNOWN":
            return {"version": 1, "local": True}
        if len(line) != 6 or line[1] not in ("TCP4", "TCP6"):
            raise OriginError("bad PROXY line %r" % line)
        return {"version": 1, "local": False, "src": line[2], "dst": line[3],
                "sport": int(line[4]), "dport": int(line[5])}
    head = first + rd.exactly(7)
    if head != b"\r\n\r\n\x00\r\nQUIT\n":
        raise OriginError("no PROXY header: %r" % head)
    vc, fam, n = struct.unpack(">BBH", rd.exactly(4))
    body = rd.exactly(n)
    if vc == 0x20:
        return {"version": 2, "local": True}
    if vc != 0x21 or fam not in (0x11, 0x21):
        raise OriginError("PROXY v2 %#x %#x" % (vc, fam))
    a = 4 if fam == 0x11 else 16
    sport, dport = struct.unpack(">HH", body[2 * a:2 * a + 4])
    return {"version": 2, "local": False, "src": str(ipaddress.ip_address(body[:a])),
            "dst": str(ipaddress.ip_address(body[a:2 * a])), "sport": sport, "dport": dport}


class Origin:
    """A threaded origin on 127.0.0.1:0 (or `family`/`host`)."""

    def __init__(self, host="127.0.0.1", family=socket.AF_INET, path=None, proxy=False):
        """path: listen on that Unix socket instead.  proxy: each connection
        opens with a PROXY header (v1 or v2), read and kept in req.proxy."""
        self.lock = threading.Lock()
        self.proxy = proxy
        self.routes = {}
        self.default = Route()
        self.requests = []
        self.conns = 0  # connections accepted
        self.errors = []  # exceptions in handlers (bad framing from the proxy ...)
        self.drop_after = None  # serve N requests per connection, then drop the next one
        self.stop_ev = threading.Event()
        self.socks = set()
        self.threads = []
        self.ls = socket.socket(socket.AF_UNIX if path else family, socket.SOCK_STREAM)
        if path:
            self.ls.bind(str(path))
        else:
            self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.ls.bind((host, 0))
        self.ls.listen(128)
        self.host = host
        self.path = path
        self.port = 0 if path else self.ls.getsockname()[1]
        self.addr = str(path) if path else ("[%s]:%d" if ":" in host else "%s:%d") % (host,
                                                                                       self.port)
        t = threading.Thread(target=self._accept_loop, name="origin-accept", daemon=True)
        t.start()
        self.accept_thread = t

    # -- scripting ---------------------------------------------------------

    def route(self, path, **kw):
        """Set what `path` (without query) answers; returns the Route."""
        r = Route(**kw)
        with self.lock:
            self.routes[path] = r
        return r

    def hits(self, path=None):
        with self.lock:
            return sum(1 for r in self.requests if path is None or r.path == path)

    def reqs(self, path=None):
        with self.lock:
            return [r for r in self.requests if path is None or r.path == path]

    def last(self, path=None):
        rs = self.reqs(path)
        if not rs:
            raise AssertionError("origin got no request for %r" % (path,))
        return rs[-1]

    def wait_hits(self, path, n, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.hits(path) >= n:
                return
            time.sleep(0.01)
        raise AssertionError("origin: %d requests for %r after %.1fs, wanted %d"
                             % (self.hits(path), path, timeout, n))

    def stop(self):
        self.stop_ev.set()
        try:
            self.ls.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        try:
            self.ls.close()
        except OSError:
            pass
        with self.lock:
            socks = list(self.socks)
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for t in self.threads + [self.accept_thread]:
            t.join(timeout=5)

    # -- serving -----------------------------------------------------------

    def _accept_loop(self):
        while not self.stop_ev.is_set():
            try:
                s, _ = self.ls.accept()
            except OSError:
                return
            with self.lock:
                self.conns += 1
                cid = self.conns
                self.socks.add(s)
            t = threading.Thread(target=self._serve, args=(s, cid), daemon=True,
                                 name="origin-conn-%d" % cid)
            with self.lock:
                self.threads.append(t)
            t.start()

    def _serve(self, s, cid):
        rd = _Reader(s, self.stop_ev)
        seq = 0
        try:
            pp = read_proxy_header(rd) if self.proxy else None
            while not self.stop_ev.is_set():
                try:
                    req, route = self._read_request(rd, s)
                except _Closed:
                    return
                seq += 1
                req.conn_id = cid
                req.conn_seq = seq
                req.proxy = pp
                with self.lock:
                    self.requests.append(req)
                    drop = self.drop_after is not None and seq > self.drop_after
                if drop:
                    return  # a keep-alive connection the server had already given up on
                if not self._respond(s, req, route):
                    return
        except (_Closed, OSError):
            return
        except Exception as e:  # noqa: BLE001 - recorded for the test to see
            with self.lock:
                self.errors.append(e)
        finally:
            with self.lock:
                self.socks.discard(s)
            try:
                s.close()
            except OSError:
                pass

    def _read_request(self, rd, s):
        req = OriginRequest()
        head = rd.until(b"\r\n\r\n", 1 << 20)
        req.t = time.monotonic()
        req.raw_head = head
        lines = head[:-4].split(b"\r\n")
        parts = lines[0].decode("latin-1").split(" ")
        if len(parts) != 3:
            raise OriginError("bad request line %r" % lines[0])
        req.method, req.target, req.version = parts
        req.path, _, req.query = req.target.partition("?")
        for ln in lines[1:]:
            name, sep, val = ln.decode("latin-1").partition(":")
            if not sep:
                raise OriginError("bad header line %r" % ln)
            req.headers.append((name, val.strip(" \t")))
        with self.lock:
            route = self.routes.get(req.path, self.default)
        te = req.headers_all("Transfer-Encoding")
        cl = req.headers_all("Content-Length")
        if route.send_100 and (req.header("Expect") or "").lower() == "100-continue":
            s.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        if te:
            if te[-1].split(",")[-1].strip().lower() != "chunked":
                raise OriginError("unexpected Transfer-Encoding %r" % te)
            req.chunked = True
            raw = bytearray()
            body = bytearray()
            while True:
                line = rd.until(b"\r\n", 4096)
                raw += line
                size = int(line[:-2].split(b";")[0].strip(), 16)
                if size == 0:
                    while True:
                        t = rd.until(b"\r\n", 65536)
                        raw += t
                        if t == b"\r\n":
                            break
                        n, _, v = t[:-2].decode("latin-1").partition(":")
                        req.trailers.append((n, v.strip()))
                    break
                data = rd.exactly(size + 2)
                if data[-2:] != b"\r\n":
                    raise OriginError("chunk not followed by CRLF")
                raw += data
                body += data[:-2]
            req.raw_body = bytes(raw)
            req.body = bytes(body)
        elif cl:
            n = int(cl[0])
            req.body = req.raw_body = rd.exactly(n) if n else b""
        return req, route

    def _respond(self, s, req, route):
        """Send the answer; False when the connection must end."""
        if route.hang:
            self.stop_ev.wait()
            return False
        if route.delay:
            if self.stop_ev.wait(route.delay):
                return False
        if route.hold_head:
            route.held.set()
            if not route.wait_release(self.stop_ev):
                return False
        if route.script is not None:
            return bool(route.script(s, req, self.stop_ev))
        if route.garbage is not None:
            s.sendall(route.garbage)
            return False
        if route.raw is not None:
            s.sendall(route.raw)
            return not route.close_after
        if route.echo:
            body = req.body
        elif route.echo_sha:
            body = hashlib.sha256(req.body).hexdigest().encode()
        elif callable(route.body):
            body = route.body(req)
        else:
            body = route.body
        status = route.status
        hdrs = list(route.headers)
        if route.not_modified(req):
            status = 304
            hdrs = [(n, v) for n, v in hdrs if n.lower() != "content-length"]
        head_only = req.method == "HEAD" or status in (204, 304) or status < 200
        names = {n.lower() for n, _ in hdrs}
        if route.chunked and status != 304:
            if "transfer-encoding" not in names:
                hdrs.append(("Transfer-Encoding", "chunked"))
        elif not route.close_delimited and "content-length" not in names \
                and status not in (204, 304) and status >= 200:
            n = route.content_length if route.content_length is not None else len(body)
            hdrs.append(("Content-Length", str(n)))
        if status != route.status or route.reason is None:
            reason = REASONS.get(status, "X")
        else:
            reason = route.reason
        head = "HTTP/1.1 %d %s\r\n" % (status, reason)
        head += "".join("%s: %s\r\n" % (n, v) for n, v in hdrs) + "\r\n"
        head = head.encode("latin-1")
        req.answered = status
        if head_only:
            s.sendall(head)
            route.done.set()
            return not (route.close_after or route.close_delimited)
        if route.chunked:
            chunks = route.chunks if route.chunks is not None else ([body] if body else [])
            wire = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks if c) + b"0\r\n\r\n"
        else:
            wire = body
        if route.hold_after is not None:
            s.sendall(head + wire[:route.hold_after])
            route.held.set()
            if not route.wait_release(self.stop_ev) or route.die_on_release:
                return False
            s.sendall(wire[route.hold_after:])
            route.done.set()
            return not (route.close_after or route.close_delimited)
        cut = route.die_after if route.die_after is not None else route.stall_after
        if cut is not None:
            # cut counts body bytes; for chunked, bytes of the chunked stream
            s.sendall(head + wire[:cut])
            if route.stall_after is not None:
                self.stop_ev.wait()
            return False
        s.sendall(head + wire)
        route.done.set()
        return not (route.close_after or route.close_delimited)
