"""A slow client reading a miss does not slow the fetch: once its socket is
full, the fetch goes on at the backend's pace for the cache and for the
clients streaming from it, and the slow client reads the rest back from
the store, intact."""

import gzip
import hashlib
import random
import socket
import time

SIZE = 16 * 1024 * 1024
CC60 = {"Cache-Control": "max-age=60"}


def page(size, seed):
    """Compressible but not trivial bytes: words drawn at random."""
    rnd = random.Random(seed)
    words = [bytes(rnd.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 9)))
             for _ in range(4000)]
    out = bytearray()
    while len(out) < size:
        out += rnd.choice(words) + b" "
    return bytes(out[:size])


def sha(b):
    return hashlib.sha256(b).hexdigest()


class Slow:
    """A client with a tiny receive window that reads the head and a little
    of the body, then nothing until told."""

    def __init__(self, port, path, headers=b""):
        self.s = socket.socket()
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.s.settimeout(30)
        self.s.connect(("127.0.0.1", port))
        self.s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: surogat.test\r\n" +
                       headers + b"\r\n")
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            b = self.s.recv(4096)
            assert b, "closed before the head"
            self.buf += b
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        self.head = head.decode("latin-1")
        self.length = None
        for line in self.head.split("\r\n")[1:]:
            n, v = line.split(":", 1)
            if n.lower() == "content-length":
                self.length = int(v)
        self.chunked = "transfer-encoding: chunked" in self.head.lower()

    def rest(self):
        """Everything else, until the body ends (Content-Length or the last chunk)."""
        while True:
            if self.length is not None and len(self.buf) >= self.length:
                return self.buf[:self.length]
            if self.chunked and self.buf.endswith(b"\r\n0\r\n\r\n"):
                return dechunk(self.buf)
            b = self.s.recv(1 << 20)
            assert b, "closed after %d body bytes" % len(self.buf)
            self.buf += b

    def close(self):
        self.s.close()


def dechunk(b):
    out, i = bytearray(), 0
    while True:
        j = b.index(b"\r\n", i)
        n = int(b[i:j].split(b";")[0], 16)
        if n == 0:
            return bytes(out)
        out += b[j + 2:j + 2 + n]
        i = j + 2 + n + 2


def fast_get(port, path, headers=b""):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: surogat.test\r\n" + headers +
              b"Connection: close\r\n\r\n")
    data = b""
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        data += b
    s.close()
    head, body = data.split(b"\r\n\r\n", 1)
    if b"transfer-encoding: chunked" in head.lower():
        body = dechunk(body)
    return head.decode("latin-1"), body


def run_race(origin, surogat, path, served, expect_slow, slow_headers=b"", fast_headers=b"",
             fast_expect=None, check_range=None):
    sg = surogat()
    before = sg.stat("fetch_client_behind")
    slow = Slow(sg.port, path, slow_headers)
    try:
        origin.wait_hits(path, 1, 10)
        time.sleep(0.5)  # its socket fills
        t0 = time.monotonic()
        head, body = fast_get(sg.port, path, fast_headers)
        took = time.monotonic() - t0
        assert " 200 " in head.split("\r\n")[0], head
        assert sha(body) == sha(fast_expect if fast_expect is not None else served)
        assert took < 4.0, "a fast client of the same URL took %.1fs behind a slow one" % took
        assert sg.stat("fetch_client_behind") == before + 1
        # The fetch finished without waiting for the slow client: stored, a hit now.
        head2, body2 = fast_get(sg.port, path, fast_headers)
        assert "hit" in head2.lower().split("cache-status:")[1].split("\r\n")[0], head2
        rest = slow.rest()
        assert sha(rest) == sha(expect_slow), "the slow client's body differs (%d bytes)" % len(rest)
        if check_range:
            check_range(slow.head)
    finally:
        slow.close()
    assert origin.hits(path) == 1


def test_slow_client_does_not_hold_the_fetch(origin, surogat):
    body = page(SIZE, 1)
    origin.route("/big", body=body, headers=CC60)
    run_race(origin, surogat, "/big", body, body)


def test_slow_identity_client_of_a_gzip_object(origin, surogat):
    """The store keeps gzip; the slow client gets it decoded, and after
    falling behind reads the rest decoded from the store, from where it was."""
    plain = page(SIZE, 2)
    gz = gzip.compress(plain, 6)
    origin.route("/gz", body=gz, headers={"Cache-Control": "max-age=60",
                                          "Content-Encoding": "gzip",
                                          "Content-Type": "text/html"})
    run_race(origin, surogat, "/gz", gz, plain, fast_headers=b"Accept-Encoding: gzip\r\n",
             fast_expect=gz)


def test_slow_identity_client_of_a_br_object(origin, surogat):
    """The same for brotli from the backend: decoded from where it was."""
    import brotli
    plain = page(SIZE, 4)
    br = brotli.compress(plain, quality=4)
    origin.route("/br", body=br, headers={"Cache-Control": "max-age=60",
                                          "Content-Encoding": "br",
                                          "Content-Type": "text/html"})
    run_race(origin, surogat, "/br", br, plain, fast_headers=b"Accept-Encoding: br\r\n",
             fast_expect=br)


def test_slow_range_client(origin, surogat):
    """A range of a miss: the slow client's 206 continues from the store at
    the right offset."""
    body = page(SIZE, 3)
    origin.route("/r", body=body, headers=CC60)
    first, last = 12345, SIZE - 1000

    def check(head):
        assert head.startswith("HTTP/1.1 206"), head
        assert "Content-Range: bytes %d-%d/%d" % (first, last, SIZE) in head, head

    run_race(origin, surogat, "/r", body, body[first:last + 1],
             slow_headers=b"Range: bytes=%d-%d\r\n" % (first, last), check_range=check)
