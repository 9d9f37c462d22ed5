"""A raw-socket HTTP/1.x client for the e2e suite.

It sends exactly the bytes a test gives it and parses answers strictly, so
tests can assert on framing (chunked or not, Content-Length, connection
closed or kept) and not only on content.  Every read has a deadline.
"""

import socket
import time


class Incomplete(Exception):
    """The connection ended (or the deadline passed) before a full response."""

    def __init__(self, msg, partial=b""):
        super().__init__(msg)
        self.partial = partial


class Response:
    def __init__(self):
        self.version = ""
        self.status = 0
        self.reason = ""
        self.headers = []  # [(name, value)]
        self.raw_head = b""
        self.raw_body = b""  # as framed on the wire
        self.body = b""  # decoded
        self.chunked = False
        self.trailers = []
        self.t_done = 0.0

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

    def tokens(self, name):
        """The comma-separated tokens of every `name` header, lowercased."""
        out = []
        for v in self.headers_all(name):
            out += [t.strip().lower() for t in v.split(",") if t.strip()]
        return out

    def __repr__(self):
        return "<Response %d %r %r>" % (self.status, self.headers, self.body[:60])


def build_request(method="GET", path="/", headers=None, body=None, version="1.1",
                  host="surogat.test"):
    """Request bytes.  Host added for 1.1 unless given (or host=None);
    Content-Length added for a body unless framing headers are given."""
    if isinstance(headers, dict):
        headers = list(headers.items())
    headers = list(headers or [])
    names = {n.lower() for n, _ in headers}
    if host is not None and "host" not in names and version == "1.1":
        headers.insert(0, ("Host", host))
    if body is not None and "content-length" not in names and "transfer-encoding" not in names:
        headers.append(("Content-Length", str(len(body))))
    out = "%s %s HTTP/%s\r\n" % (method, path, version)
    out += "".join("%s: %s\r\n" % (n, v) for n, v in headers) + "\r\n"
    out = out.encode("latin-1")
    if body:
        out += body
    return out


def chunked(body, size=4096, ext=None, trailers=None):
    """`body` in chunked coding."""
    out = bytearray()
    for i in range(0, len(body), size):
        c = body[i:i + size]
        out += b"%x%s\r\n%s\r\n" % (len(c), (b";" + ext) if ext else b"", c)
    out += b"0\r\n"
    for n, v in trailers or []:
        out += b"%s: %s\r\n" % (n.encode(), v.encode())
    out += b"\r\n"
    return bytes(out)


class Conn:
    def __init__(self, port, host="127.0.0.1", timeout=10.0, family=None):
        if family is None:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect((host, port))
        self.timeout = timeout
        self.buf = bytearray()
        self.eof = False

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data):
        self.sock.sendall(data)

    def request(self, method="GET", path="/", headers=None, body=None, version="1.1",
                host="surogat.test"):
        self.send(build_request(method, path, headers, body, version, host))

    # -- reading -----------------------------------------------------------

    def _fill(self, deadline):
        """Read more into buf; False at EOF (or reset)."""
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("deadline passed")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(1 << 20)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def _until(self, sep, deadline, what):
        while True:
            i = self.buf.find(sep)
            if i >= 0:
                out = bytes(self.buf[:i + len(sep)])
                del self.buf[:i + len(sep)]
                return out
            if not self._fill(deadline):
                raise Incomplete("EOF while reading %s" % what, bytes(self.buf))

    def _exactly(self, n, deadline, what):
        while len(self.buf) < n:
            if not self._fill(deadline):
                raise Incomplete("EOF in %s: %d of %d bytes" % (what, len(self.buf), n),
                                 bytes(self.buf))
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def read_response(self, method="GET", timeout=None):
        """One response (a 1xx interim response counts as one)."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        r = Response()
        head = self._until(b"\r\n\r\n", deadline, "response head")
        r.raw_head = head
        lines = head[:-4].split(b"\r\n")
        sl = lines[0].decode("latin-1")
        parts = sl.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise AssertionError("bad status line %r" % sl)
        r.version = parts[0]
        r.status = int(parts[1])
        r.reason = parts[2] if len(parts) > 2 else ""
        for ln in lines[1:]:
            name, sep, val = ln.decode("latin-1").partition(":")
            if not sep or name != name.strip() or not name:
                raise AssertionError("bad response header line %r" % ln)
            r.headers.append((name, val.strip(" \t")))
        if r.status < 200 or r.status in (204, 304) or method == "HEAD":
            r.t_done = time.monotonic()
            return r
        te = r.tokens("Transfer-Encoding")
        cl = r.headers_all("Content-Length")
        if te:
            assert te == ["chunked"], "unexpected Transfer-Encoding %r" % te
            assert not cl, "Content-Length together with Transfer-Encoding"
            r.chunked = True
            raw = bytearray()
            body = bytearray()
            while True:
                line = self._until(b"\r\n", deadline, "chunk size")
                raw += line
                size = int(line[:-2].split(b";")[0], 16)
                if size == 0:
                    while True:
                        t = self._until(b"\r\n", deadline, "trailer")
                        raw += t
                        if t == b"\r\n":
                            break
                        n, _, v = t[:-2].decode("latin-1").partition(":")
                        r.trailers.append((n, v.strip()))
                    break
                data = self._exactly(size + 2, deadline, "chunk")
                assert data[-2:] == b"\r\n", "chunk data not followed by CRLF"
                raw += data
                body += data[:-2]
            r.raw_body = bytes(raw)
            r.body = bytes(body)
        elif cl:
            assert len(set(cl)) == 1, "differing Content-Length %r" % cl
            r.body = r.raw_body = self._exactly(int(cl[0]), deadline, "body")
        else:
            while self._fill(deadline):
                pass
            r.body = r.raw_body = bytes(self.buf)
            self.buf.clear()
        r.t_done = time.monotonic()
        return r

    def read_final(self, method="GET", timeout=None):
        """The final response, skipping 1xx."""
        while True:
            r = self.read_response(method, timeout)
            if r.status >= 200:
                return r

    def read_until_close(self, timeout=None):
        """Everything until EOF (including what is buffered)."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while self._fill(deadline):
            pass
        out = bytes(self.buf)
        self.buf.clear()
        return out

    def wait_closed(self, timeout=5.0):
        """(closed, extra): whether EOF came within timeout, and any bytes before it."""
        deadline = time.monotonic() + timeout
        try:
            while self._fill(deadline):
                pass
        except (socket.timeout, TimeoutError):
            return False, bytes(self.buf)
        return True, bytes(self.buf)

    def is_open(self, wait=0.2):
        """True when nothing (no EOF, no data) arrives within `wait`."""
        closed, extra = self.wait_closed(wait)
        return not closed and not extra


def fetch(port, method="GET", path="/", headers=None, body=None, version="1.1",
          host="127.0.0.1", timeout=10.0, vhost="surogat.test"):
    """One request on a new connection; returns the final Response."""
    with Conn(port, host=host, timeout=timeout) as c:
        c.request(method, path, headers, body, version, vhost)
        return c.read_final(method)


def exchange(port, data, host="127.0.0.1", timeout=10.0):
    """Send raw bytes; return everything received until the server closes."""
    with Conn(port, host=host, timeout=timeout) as c:
        c.send(data)
        return c.read_until_close()


def parse_responses(data, method="GET"):
    """Split raw bytes into Responses (strict); the last may be cut short."""
    out = []
    c = _BufConn(data)
    while c.buf:
        out.append(c.read_response(method, timeout=1))
    return out


class _BufConn(Conn):
    def __init__(self, data):  # pylint: disable=super-init-not-called
        self.buf = bytearray(data)
        self.eof = True
        self.timeout = 1
