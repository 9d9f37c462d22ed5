"""Pass-through proxying: what reaches the origin, what reaches the client,
framing conversions and large bodies."""

import email.utils
import hashlib
import os
import socket
import time

import pytest

import httpc


def test_get_passthrough(origin, surogat):
    origin.route("/hello", body=b"hello world", headers={"X-Origin": "1",
                                                         "Content-Type": "text/plain"})
    sg = surogat()
    r = sg.get("/hello?a=1&b=%41", headers={"X-Test": "v1", "Accept": "*/*"})
    assert r.status == 200
    assert r.body == b"hello world"
    assert r.header("Content-Length") == "11"
    assert r.header("X-Origin") == "1"
    assert r.header("Content-Type") == "text/plain"
    req = origin.last("/hello")
    assert req.method == "GET"
    assert req.target == "/hello?a=1&b=%41"
    assert req.version == "HTTP/1.1"
    assert req.headers_all("Host") == ["surogat.test"]
    assert req.header("X-Test") == "v1"
    assert req.header("Accept") == "*/*"
    assert req.body == b""
    assert origin.hits() == 1


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
def test_methods_with_body(origin, surogat, method):
    origin.route("/m", echo=True)
    sg = surogat()
    body = b"payload-" + method.encode() * 10
    r = sg.request(method, "/m", {"Content-Type": "application/octet-stream"}, body)
    assert r.status == 200
    assert r.body == body
    req = origin.last("/m")
    assert req.method == method
    assert req.body == body


def test_request_target_preserved(origin, surogat):
    sg = surogat()
    target = "/a%20b/./c/../d;p=1?x=%41&y&z=a+b"
    r = sg.get(target)
    assert r.status == 200
    assert origin.last().target == target


def test_http10_request_without_host(origin, surogat):
    origin.route("/ten", body=b"for 1.0")
    sg = surogat()
    with sg.conn() as c:
        c.send(b"GET /ten HTTP/1.0\r\nUser-Agent: old\r\n\r\n")
        r = c.read_response()
        assert r.status == 200
        assert r.body == b"for 1.0"
        assert r.version in ("HTTP/1.1", "HTTP/1.0")
        assert "keep-alive" not in r.tokens("Connection")
        closed, extra = c.wait_closed(5)
        assert closed and extra == b""
    req = origin.last("/ten")
    # the backend request still needs a Host
    assert len(req.headers_all("Host")) == 1 and req.header("Host") != ""


def test_head(origin, surogat):
    body = os.urandom(1234)
    origin.route("/h", body=body, headers={"ETag": '"x1"'})
    sg = surogat()
    with sg.conn() as c:
        c.request("HEAD", "/h")
        r = c.read_response("HEAD")
        assert r.status == 200
        assert r.header("Content-Length") == "1234"
        assert r.header("ETag") == '"x1"'
        # no body may follow: the next response on the connection must parse cleanly
        c.request("GET", "/h")
        r2 = c.read_response()
        assert r2.status == 200 and r2.body == body
    # A HEAD that misses the cache fetches the whole object (GET), which the
    # cache could store; the origin's answer here is not cacheable, so the
    # GET after it goes through as well.
    assert [q.method for q in origin.reqs("/h")] == ["GET", "GET"]


def test_date_added(origin, surogat):
    origin.route("/d", body=b"x")  # the origin sends no Date
    sg = surogat()
    r = sg.get("/d")
    dates = r.headers_all("Date")
    assert len(dates) == 1
    assert dates[0].endswith(" GMT")
    t = email.utils.parsedate_to_datetime(dates[0]).timestamp()
    assert abs(t - time.time()) < 60


def test_origin_date_kept(origin, surogat):
    d = "Mon, 01 Jan 2024 00:00:00 GMT"
    origin.route("/d", body=b"x", headers={"Date": d})
    sg = surogat()
    r = sg.get("/d")
    assert r.headers_all("Date") == [d]


def _list(vals):
    out = []
    for v in vals:
        out += [x.strip() for x in v.split(",")]
    return out


def test_via_added_both_directions(origin, surogat):
    origin.route("/v", body=b"v")
    sg = surogat()
    r = sg.get("/v")
    assert r.status == 200
    req_via = _list(origin.last("/v").headers_all("Via"))
    assert len(req_via) == 1 and req_via[0].startswith("1.1 "), req_via
    resp_via = _list(r.headers_all("Via"))
    assert len(resp_via) == 1 and resp_via[0].startswith("1.1 "), resp_via


def test_via_appended_to_existing(origin, surogat):
    origin.route("/v", body=b"v", headers={"Via": "1.1 upstream-cache"})
    sg = surogat()
    r = sg.get("/v", headers={"Via": "1.0 fred"})
    req_via = _list(origin.last("/v").headers_all("Via"))
    assert req_via[0] == "1.0 fred" and len(req_via) == 2 and req_via[1].startswith("1.1 ")
    resp_via = _list(r.headers_all("Via"))
    assert resp_via[0] == "1.1 upstream-cache" and len(resp_via) == 2
    assert resp_via[1].startswith("1.1 ")


def test_x_forwarded_for_set(origin, surogat):
    sg = surogat()
    assert sg.get("/x").status == 200
    req = origin.last("/x")
    assert _list(req.headers_all("X-Forwarded-For")) == ["127.0.0.1"]
    assert req.headers_all("X-Forwarded-Proto") == ["http"]


def test_x_forwarded_for_appended(origin, surogat):
    sg = surogat()
    assert sg.get("/x", headers=[("X-Forwarded-For", "10.1.2.3"),
                                 ("X-Forwarded-For", "10.4.5.6, 10.7.8.9")]).status == 200
    req = origin.last("/x")
    assert _list(req.headers_all("X-Forwarded-For")) == ["10.1.2.3", "10.4.5.6", "10.7.8.9",
                                                         "127.0.0.1"]


def test_x_forwarded_proto_not_spoofable(origin, surogat):
    sg = surogat()
    assert sg.get("/x", headers={"X-Forwarded-Proto": "https"}).status == 200
    assert origin.last("/x").headers_all("X-Forwarded-Proto") == ["http"]


def test_xff_and_via_params_off(origin, surogat):
    sg = surogat(params={"xff": "off", "via": "off"})
    r = sg.get("/x")
    assert r.status == 200
    req = origin.last("/x")
    assert not req.has("X-Forwarded-For") and not req.has("X-Forwarded-Proto")
    assert not req.has("Via") and not r.has("Via")


REQ_HOP = [("Connection", "keep-alive, X-Hop-A"), ("Connection", "x-hop-b"),
           ("X-Hop-A", "1"), ("X-Hop-B", "2"), ("Keep-Alive", "timeout=5"),
           ("TE", "trailers"), ("Upgrade", "websocket"), ("Proxy-Connection", "keep-alive"),
           ("Proxy-Authorization", "Basic Zm9vOmJhcg=="), ("X-End-To-End", "kept")]


def test_hop_by_hop_request_headers_removed(origin, surogat):
    sg = surogat()
    r = sg.get("/hop", headers=REQ_HOP)
    assert r.status == 200
    req = origin.last("/hop")
    for h in ("X-Hop-A", "X-Hop-B", "Keep-Alive", "TE", "Upgrade", "Proxy-Connection",
              "Proxy-Authorization"):
        assert not req.has(h), "%s forwarded to the origin: %r" % (h, req.headers)
    for v in req.headers_all("Connection"):
        assert v.strip().lower() in ("keep-alive", "close"), req.headers
    assert req.header("X-End-To-End") == "kept"


def test_hop_by_hop_response_headers_removed(origin, surogat):
    origin.route("/hop", body=b"hop", headers=[
        ("Connection", "X-Resp-Hop"), ("X-Resp-Hop", "1"), ("Keep-Alive", "timeout=5, max=99"),
        ("Upgrade", "h2c"), ("Proxy-Connection", "keep-alive"),
        ("Proxy-Authenticate", "Basic realm=x"), ("X-End-To-End", "kept")])
    sg = surogat()
    r = sg.get("/hop")
    assert r.status == 200 and r.body == b"hop"
    for h in ("X-Resp-Hop", "Keep-Alive", "Upgrade", "Proxy-Connection", "Proxy-Authenticate"):
        assert not r.has(h), "%s passed to the client: %r" % (h, r.headers)
    for t in r.tokens("Connection"):
        assert t in ("keep-alive", "close"), r.headers
    assert r.header("X-End-To-End") == "kept"


@pytest.mark.parametrize("status,body", [(404, b"not here"), (500, b"boom"), (301, b""),
                                         (204, None), (304, None), (599, b"odd")])
def test_status_passthrough(origin, surogat, status, body):
    hdrs = {"Location": "/elsewhere"} if status == 301 else {"ETag": '"e"'}
    origin.route("/s", status=status, body=body or b"", headers=hdrs)
    sg = surogat()
    with sg.conn() as c:
        c.request("GET", "/s")
        r = c.read_response()
        assert r.status == status
        assert r.body == (body or b"")
        if status == 301:
            assert r.header("Location") == "/elsewhere"
        if status in (204, 304):
            assert not r.has("Transfer-Encoding")
        # still in sync and alive
        c.request("GET", "/after")
        assert c.read_response().status == 200


def test_chunked_request_body(origin, surogat):
    origin.route("/up", echo_sha=True)
    sg = surogat()
    body = os.urandom(70000)
    wire = httpc.chunked(body, size=5000, ext=b"name=val",
                         trailers=[("X-Trailer", "t")])
    with sg.conn() as c:
        c.send(b"POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        c.send(wire)
        r = c.read_response()
    assert r.status == 200
    assert r.body == hashlib.sha256(body).hexdigest().encode()
    req = origin.last("/up")
    assert req.body == body
    if not req.chunked:
        assert req.header("Content-Length") == str(len(body))


def test_chunked_request_body_streamed(origin, surogat):
    """With req_body_buffer=0 the first chunk reaches the origin before the
    client has sent the rest (by default a small body is read whole first:
    b_slow_client_test.py)."""
    origin.route("/stream", echo=True)
    sg = surogat(params={"req_body_buffer": "0"})
    with sg.conn() as c:
        c.send(b"POST /stream HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"5\r\nfirst\r\n")
        # wait until the origin has read the head: the body is being streamed
        origin_seen = _wait_origin_conn(origin, 5)
        assert origin_seen, "the origin got nothing before the body was complete"
        c.send(b"6\r\nsecond\r\n0\r\n\r\n")
        r = c.read_response()
    assert r.status == 200 and r.body == b"firstsecond"


def _wait_origin_conn(origin, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if origin.conns >= 1:
            return True
        time.sleep(0.02)
    return False


def test_chunked_response_rechunked_for_http11(origin, surogat):
    chunks = [b"a" * 10, b"b" * 5000, b"c"]
    origin.route("/ch", chunked=True, chunks=chunks)
    sg = surogat()
    with sg.conn() as c:
        c.request("GET", "/ch")
        r = c.read_response()
        assert r.status == 200
        assert r.chunked, "a chunked origin response reached a 1.1 client unchunked: %r" % r
        assert r.body == b"".join(chunks)
        c.request("GET", "/ch")
        assert c.read_response().body == b"".join(chunks)


def test_chunked_response_dechunked_for_http10(origin, surogat):
    chunks = [b"x" * 100, b"y" * 3000]
    origin.route("/ch", chunked=True, chunks=chunks)
    sg = surogat()
    with sg.conn() as c:
        c.send(b"GET /ch HTTP/1.0\r\n\r\n")
        raw = c.read_until_close(10)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") or head.startswith(b"HTTP/1.0 200")
    assert b"transfer-encoding" not in head.lower()
    assert body == b"".join(chunks)


def test_chunked_response_http10_keepalive(origin, surogat):
    """A 1.0 keep-alive client cannot be sent chunks: either a length or a close."""
    origin.route("/ch", chunked=True, chunks=[b"1" * 10, b"2" * 20])
    sg = surogat()
    with sg.conn() as c:
        c.send(b"GET /ch HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        r = c.read_response()
        assert r.status == 200 and not r.chunked
        assert r.body == b"1" * 10 + b"2" * 20
        if r.has("Content-Length"):
            assert "keep-alive" in r.tokens("Connection")
        else:
            assert c.eof


def test_close_delimited_response(origin, surogat):
    body = os.urandom(50000)
    origin.route("/cd", body=body, close_delimited=True)
    sg = surogat()
    with sg.conn() as c:
        c.request("GET", "/cd")
        r = c.read_response()
        assert r.status == 200 and r.body == body
        if r.chunked or r.has("Content-Length"):
            c.request("GET", "/cd")  # the client connection survives
            assert c.read_response().body == body
        else:
            assert c.eof
    # the close-delimited backend connection must not be reused
    assert origin.conns == origin.hits("/cd")


MIB20 = 20 << 20


def test_large_request_body(origin, surogat):
    origin.route("/big", echo_sha=True)
    sg = surogat()
    body = os.urandom(MIB20)
    r = sg.request("POST", "/big", body=body, timeout=60)
    assert r.status == 200
    assert r.body == hashlib.sha256(body).hexdigest().encode()
    assert len(origin.last("/big").body) == MIB20


def test_large_chunked_request_body(origin, surogat):
    origin.route("/big", echo_sha=True)
    sg = surogat()
    body = os.urandom(MIB20)
    with sg.conn(timeout=60) as c:
        c.send(b"POST /big HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
        c.send(httpc.chunked(body, size=65536))
        r = c.read_response()
    assert r.status == 200
    assert r.body == hashlib.sha256(body).hexdigest().encode()


def test_large_response_body(origin, surogat):
    body = os.urandom(MIB20)
    origin.route("/big", body=body)
    sg = surogat()
    r = sg.get("/big", timeout=60)
    assert r.status == 200
    assert r.header("Content-Length") == str(MIB20)
    assert hashlib.sha256(r.body).digest() == hashlib.sha256(body).digest()


def test_large_chunked_response_body(origin, surogat):
    body = os.urandom(8 << 20)
    origin.route("/big", chunked=True,
                 chunks=[body[i:i + 100000] for i in range(0, len(body), 100000)])
    sg = surogat()
    r = sg.get("/big", timeout=60)
    assert r.status == 200 and r.chunked
    assert hashlib.sha256(r.body).digest() == hashlib.sha256(body).digest()


def test_expect_100_continue(origin, surogat):
    origin.route("/e", echo_sha=True)
    sg = surogat()
    body = os.urandom(100000)
    with sg.conn() as c:
        c.send(b"POST /e HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body))
        interim = c.read_response(timeout=5)
        assert interim.status == 100
        assert interim.raw_head.startswith(b"HTTP/1.1 100 ")
        c.send(body)
        r = c.read_response()
    assert r.status == 200
    assert r.body == hashlib.sha256(body).hexdigest().encode()
    assert origin.last("/e").body == body


def test_expect_100_with_origin_continue(origin, surogat):
    """An origin that itself answers 100 must not confuse the proxy."""
    origin.route("/e", echo=True, send_100=True)
    sg = surogat()
    with sg.conn() as c:
        c.send(b"POST /e HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
               b"Content-Length: 5\r\n\r\n")
        interim = c.read_response(timeout=5)
        assert interim.status == 100
        c.send(b"hello")
        r = c.read_final()
        assert r.status == 200 and r.body == b"hello"
        c.request("GET", "/next")
        assert c.read_response().status == 200


def test_expect_100_ignored_for_http10(origin, surogat):
    """RFC 9110 10.1.1: a 100-continue expectation in a 1.0 request is ignored."""
    origin.route("/e", echo=True)
    sg = surogat()
    with sg.conn() as c:
        c.send(b"POST /e HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello")
        raw = c.read_until_close(10)
    assert raw.startswith(b"HTTP/1.1 200 ") or raw.startswith(b"HTTP/1.0 200 "), raw[:100]
    assert raw.endswith(b"\r\n\r\nhello")


def test_empty_post(origin, surogat):
    origin.route("/p", echo=True)
    sg = surogat()
    r = sg.request("POST", "/p", body=b"")
    assert r.status == 200 and r.body == b""
    req = origin.last("/p")
    assert req.body == b"" and not req.chunked


def test_repeated_response_headers_kept_apart(origin, surogat):
    cookies = ["a=1; Path=/", "b=2; Expires=Wed, 21 Oct 2037 07:28:00 GMT", "c=3"]
    origin.route("/ck", headers=[("Set-Cookie", c) for c in cookies] + [("X-Multi", "1"),
                                                                        ("X-Multi", "2")])
    sg = surogat()
    r = sg.get("/ck")
    assert r.headers_all("Set-Cookie") == cookies
    assert _list(r.headers_all("X-Multi")) == ["1", "2"]


def test_repeated_request_headers_kept_in_order(origin, surogat):
    sg = surogat()
    sg.get("/rq", headers=[("Cookie", "a=1"), ("X-Multi", "1"), ("Cookie", "b=2"),
                           ("X-Multi", "2")])
    req = origin.last("/rq")
    assert _list(req.headers_all("X-Multi")) == ["1", "2"]
    assert "; ".join(req.headers_all("Cookie")) in ("a=1; b=2",) or \
        req.headers_all("Cookie") == ["a=1", "b=2"]


def test_client_half_close_still_answered(origin, surogat):
    origin.route("/hc", body=b"half")
    sg = surogat()
    with sg.conn() as c:
        c.request("GET", "/hc", {"Connection": "close"})
        c.sock.shutdown(socket.SHUT_WR)
        r = c.read_response()
    assert r.status == 200 and r.body == b"half"


def test_client_aborts_upload(origin, surogat):
    """The client goes away halfway through a request body: the daemon
    carries on (teardown checks it did not crash) and serves the next one."""
    origin.route("/up", echo_sha=True)
    sg = surogat()
    with sg.conn() as c:
        c.send(b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\n")
        c.send(b"u" * 100000)
        time.sleep(0.2)
    time.sleep(0.3)
    assert origin.hits("/up") == 0
    r = sg.request("POST", "/up", body=b"complete")
    assert r.status == 200 and r.body == hashlib.sha256(b"complete").hexdigest().encode()


def test_client_aborts_download(origin, surogat):
    """The client closes while a large response streams: the backend
    connection, with unread bytes on it, must not be reused."""
    big = os.urandom(8 << 20)
    origin.route("/big", body=big)
    origin.route("/small", body=b"small and correct")
    sg = surogat()
    c = sg.conn()
    c.request("GET", "/big")
    c.sock.recv(65536)
    c.close()
    time.sleep(0.5)
    for _ in range(3):
        r = sg.get("/small")
        assert r.status == 200 and r.body == b"small and correct"
    assert origin.errors == []
