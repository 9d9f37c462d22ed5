"""Request smuggling over raw sockets: a second request hidden in the
framing of the first must never reach the origin as a request of its own,
and nothing after a refused request on the same connection is served."""

import pytest

import httpc

SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"


def _no_smuggled(origin):
    assert origin.hits("/smuggled") == 0, "smuggled request reached the origin: %r" % (
        origin.reqs(),)


def test_valid_then_ambiguous_pipelined(origin, surogat):
    sg = surogat()
    wire = (httpc.build_request("GET", "/first")
            + b"POST /second HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLED)
    with sg.conn() as c:
        c.send(wire)
        raw = c.read_until_close(10)
    rs = httpc.parse_responses(raw)
    assert [r.status for r in rs] == [200, 400]
    assert [q.path for q in origin.reqs()] == ["/first"]


def test_nothing_served_after_refused_request(origin, surogat):
    sg = surogat()
    with sg.conn() as c:
        c.send(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n" + SMUGGLED)
        raw = c.read_until_close(10)
    rs = httpc.parse_responses(raw)
    assert [r.status for r in rs] == [400]
    assert origin.hits() == 0


@pytest.mark.parametrize("framing", [
    b"Content-Length: %d\r\n" % len(SMUGGLED),
    b"Transfer-Encoding: chunked\r\n",
])
def test_body_that_looks_like_a_request(origin, surogat, framing):
    origin.default.echo = True
    sg = surogat()
    body = SMUGGLED if b"Content-Length" in framing else httpc.chunked(SMUGGLED, 7)
    with sg.conn() as c:
        c.send(b"POST /carrier HTTP/1.1\r\nHost: a\r\n" + framing + b"\r\n" + body)
        r = c.read_response()
        assert r.status == 200 and r.body == SMUGGLED
        c.request("GET", "/after")
        assert c.read_response().status == 200
    assert [q.path for q in origin.reqs()] == ["/carrier", "/after"]
    _no_smuggled(origin)


def test_get_with_body(origin, surogat):
    """A GET with a Content-Length body: the body is consumed (forwarded or
    dropped) and never parsed as the next request."""
    sg = surogat()
    with sg.conn() as c:
        c.send(b"GET /g HTTP/1.1\r\nHost: a\r\nContent-Length: %d\r\n\r\n" % len(SMUGGLED)
               + SMUGGLED + httpc.build_request("GET", "/after"))
        assert c.read_response().status == 200
        assert c.read_response().status == 200
        assert c.is_open(0.2)
    assert [q.path for q in origin.reqs()] == ["/g", "/after"]


def test_backend_request_framing_is_clean(origin, surogat):
    """What goes to the origin has exactly one framing header and bytes that
    match it, whatever the client sent."""
    origin.default.echo = True
    sg = surogat()
    with sg.conn() as c:
        c.send(b"POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
               + httpc.chunked(b"0123456789" * 100, 333))
        assert c.read_response().body == b"0123456789" * 100
        c.send(b"POST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n0123456789")
        assert c.read_response().body == b"0123456789"
    for q in origin.reqs():
        te = q.headers_all("Transfer-Encoding")
        cl = q.headers_all("Content-Length")
        assert len(te) + len(cl) == 1, q.headers
        if cl:
            assert int(cl[0]) == len(q.raw_body)
        else:
            assert te == ["chunked"] and q.chunked
    assert origin.errors == []


def test_identical_duplicate_content_length(origin, surogat):
    """RFC 9112 6.3 lets a recipient accept identical repeated lengths or
    refuse them; if accepted, one length goes on."""
    origin.default.echo = True
    sg = surogat()
    with sg.conn() as c:
        c.send(b"POST /d HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n"
               b"hello")
        r = c.read_response()
        assert r.status in (200, 400)
        if r.status == 200:
            assert r.body == b"hello"
            assert origin.last().headers_all("Content-Length") == ["5"]
        else:
            assert c.wait_closed(5)[0]
            assert origin.hits() == 0


def test_pipelined_chunked_then_get(origin, surogat):
    """The end of a chunked body is found exactly: the bytes right after the
    last chunk are the next request."""
    origin.default.echo = True
    sg = surogat()
    with sg.conn() as c:
        c.send(b"POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\n" + httpc.build_request("GET", "/next"))
        r1 = c.read_response()
        r2 = c.read_response()
    assert r1.body == b"abc" and r2.status == 200
    assert [q.path for q in origin.reqs()] == ["/c", "/next"]


def test_transfer_encoding_in_http10_request(origin, surogat):
    """RFC 9112 6.1: Transfer-Encoding in a 1.0 request is faulty framing:
    the connection is closed after the response, whatever it is."""
    sg = surogat()
    with sg.conn() as c:
        c.send(b"POST /ten HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n"
               b"\r\n5\r\nhello\r\n0\r\n\r\n" + SMUGGLED)
        raw = c.read_until_close(10)
    rs = httpc.parse_responses(raw)
    assert len(rs) == 1 and rs[0].status in (200, 400), rs
    _no_smuggled(origin)


def test_connection_cannot_strip_content_length(origin, surogat):
    """'Connection: Content-Length' must not remove the length of a body that
    is still sent: the backend would read the body as a second request."""
    origin.default.echo = True
    sg = surogat()
    with sg.conn() as c:
        c.send(b"POST /carrier HTTP/1.1\r\nHost: a\r\nConnection: Content-Length\r\n"
               b"Content-Length: %d\r\n\r\n" % len(SMUGGLED) + SMUGGLED)
        r = c.read_response()
        assert r.status == 200 and r.body == SMUGGLED
    assert origin.last().headers_all("Content-Length") == [str(len(SMUGGLED))]
    _no_smuggled(origin)


def test_backend_connection_cannot_strip_content_length(origin, surogat):
    """The same from the backend side: the response keeps its framing."""
    origin.route("/r", raw=b"HTTP/1.1 200 OK\r\nConnection: Content-Length\r\n"
                           b"Content-Length: 5\r\n\r\nhello")
    sg = surogat()
    with sg.conn() as c:
        c.request("GET", "/r")
        r = c.read_response()
        assert r.status == 200 and r.body == b"hello"
        assert r.headers_all("Content-Length") == ["5"]
        c.request("GET", "/r")
        assert c.read_response().body == b"hello"
