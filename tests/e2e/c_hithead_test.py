"""A hit's head over HTTP/1 as a client reads it, byte for byte: the stored
fields as the fetch kept them (dates kept as numbers printed back), then
the delivery's own (Age, Cache-Status; Content-Range), then the
transport's framing -- the same whatever the head's length (a head too
long to be joined in one piece used to go as pieces), for HEAD, a 304, a
206, a 416, an HTTP/1.0 client kept alive, and requests pipelined on one
connection."""

import email.utils
import re
import time

import httpc


def page(origin, path, extra=b""):
    """The origin's answer at path: a dated, fresh 200 with a 5-byte body; its stored fields."""
    now = time.time()
    date = email.utils.formatdate(now, usegmt=True).encode()
    expires = email.utils.formatdate(now + 3600, usegmt=True).encode()
    fields = (b"Server: o\r\nDate: " + date + b"\r\nContent-Type: text/plain\r\nExpires: " +
              expires + b"\r\nETag: \"v1\"\r\n" + extra + b"Cache-Control: max-age=3600\r\n")
    origin.route(path, raw=b"HTTP/1.1 200 Fine\r\n" + fields + b"Content-Length: 5\r\n\r\nhello")
    return fields + b"Via: 1.1 surogat\r\n"


def fill(sg, path):
    """The miss that stores path's object, asked as check() asks (Host: x)."""
    data = sg.exchange(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert data.endswith(b"\r\n\r\nhello") and b"Cache-Status: surogat; fwd=" in data


def split(data):
    head, _, body = data.partition(b"\r\n\r\n")
    return head + b"\r\n", body


def age_free(head):
    return re.sub(rb"Age: \d+\r\n", b"Age: N\r\n", head)


def check(sg, path, fields, req_extra=b"", proto=b"HTTP/1.1", status=b"200 Fine",
          own=b"", framing=b"Content-Length: 5\r\n", body=b"hello", conn=b"Connection: close\r\n"):
    data = sg.exchange(b"GET " + path + b" " + proto + b"\r\nHost: x\r\n" + req_extra +
                       b"Connection: close\r\n\r\n")
    head, got = split(data)
    want = (b"HTTP/1.1 " + status + b"\r\n" + fields + own +
            b"Age: N\r\nCache-Status: surogat; hit; ttl=N\r\n" + framing + conn)
    head = re.sub(rb"ttl=\d+", b"ttl=N", age_free(head))
    assert head == want, "\n%r\n%r" % (head, want)
    assert got == body


def test_hit_head_bytes(origin, surogat):
    sg = surogat()
    fields = page(origin, "/h")
    fill(sg, b"/h")
    for _ in range(3):  # the thread's memo of the fields: filled, then read
        check(sg, b"/h", fields)
    check(sg, b"/h", fields, b"If-None-Match: \"v1\"\r\n", status=b"304 Not Modified",
          framing=b"", body=b"")
    check(sg, b"/h", fields, b"Range: bytes=1-2\r\n", status=b"206 Partial Content",
          own=b"Content-Range: bytes 1-2/5\r\n", framing=b"Content-Length: 2\r\n", body=b"el")
    check(sg, b"/h", fields, b"Range: bytes=9-\r\n", status=b"416 Range Not Satisfiable",
          own=b"Content-Range: bytes */5\r\n", framing=b"Content-Length: 0\r\n", body=b"")
    # HEAD: the length it would have, no body.
    data = sg.exchange(b"HEAD /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, got = split(data)
    assert head.startswith(b"HTTP/1.1 200 Fine\r\n" + fields) and got == b""
    assert head.endswith(b"Content-Length: 5\r\nConnection: close\r\n")
    assert origin.hits("/h") == 1


def test_long_head_and_pipelined_hits(origin, surogat):
    """A stored head longer than the transport joins otherwise (2 KiB), and hits pipelined."""
    sg = surogat()
    fields = page(origin, "/long", b"X-Long: " + b"a" * 3000 + b"\r\n")
    fill(sg, b"/long")
    check(sg, b"/long", fields)
    one = b"GET /long HTTP/1.1\r\nHost: x\r\n\r\n"
    data = sg.exchange(one * 3 + b"GET /long HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    resps = httpc.parse_responses(data)
    assert len(resps) == 4
    for r in resps:
        assert r.status == 200 and r.body == b"hello"
        assert r.header("X-Long") == "a" * 3000 and r.header("Cache-Status").startswith(
            "surogat; hit")
    # HTTP/1.0 kept alive: told so.
    data = sg.exchange(b"GET /long HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"
                       b"GET /long HTTP/1.0\r\nHost: x\r\n\r\n")
    assert data.count(b"hello") == 2
    first = data[:data.index(b"\r\n\r\n") + 4]
    assert first.endswith(b"Content-Length: 5\r\nConnection: keep-alive\r\n\r\n")
    assert origin.hits("/long") == 1
