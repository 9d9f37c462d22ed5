"""surogat in front of the real Apache httpd (the main use case): static
files byte for byte, conditional requests, CGI, keep-alive to Apache."""

import hashlib
import os
import threading

import pytest

import httpc


@pytest.fixture
def sg(apache, surogat):
    return surogat(backend=apache.addr)


def _cgi(body):
    out = {}
    for line in body.decode().splitlines():
        k, _, v = line.partition("=")
        out[k] = v
    return out


def test_static_small(apache, sg):
    r = sg.get("/small.txt")
    assert r.status == 200
    assert r.body == apache.files["small.txt"]
    assert r.header("Content-Type").startswith("text/plain")
    assert r.has("ETag") and r.has("Last-Modified") and r.has("Date")
    assert "Apache" in (r.header("Server") or "")


def test_index(apache, sg):
    r = sg.get("/")
    assert r.status == 200 and r.body == apache.files["index.html"]


def test_static_1mib_identical(apache, sg):
    r = sg.get("/big.bin", timeout=30)
    assert r.status == 200
    assert r.header("Content-Length") == str(1 << 20)
    assert hashlib.sha256(r.body).hexdigest() == hashlib.sha256(apache.files["big.bin"]).hexdigest()


def test_head(apache, sg):
    with sg.conn() as c:
        c.request("HEAD", "/big.bin")
        r = c.read_response("HEAD")
        assert r.status == 200 and r.header("Content-Length") == str(1 << 20)
        c.request("GET", "/small.txt")
        assert c.read_response().body == apache.files["small.txt"]


def test_304_if_none_match(apache, sg):
    etag = sg.get("/small.txt").header("ETag")
    with sg.conn() as c:
        c.request("GET", "/small.txt", {"If-None-Match": etag})
        r = c.read_response()
        assert r.status == 304 and r.body == b""
        assert r.header("ETag") == etag
        c.request("GET", "/small.txt", {"If-None-Match": '"other"'})
        assert c.read_response().status == 200


def test_304_if_modified_since(apache, sg):
    lm = sg.get("/small.txt").header("Last-Modified")
    r = sg.get("/small.txt", headers={"If-Modified-Since": lm})
    assert r.status == 304 and r.body == b""
    r = sg.get("/small.txt", headers={"If-Modified-Since": "Thu, 01 Jan 1970 00:00:00 GMT"})
    assert r.status == 200 and r.body == apache.files["small.txt"]


def test_range(apache, sg):
    r = sg.get("/big.bin", headers={"Range": "bytes=100-199"})
    assert r.status == 206
    assert r.body == apache.files["big.bin"][100:200]
    assert r.header("Content-Range") == "bytes 100-199/%d" % (1 << 20)


def test_404(apache, sg):
    with sg.conn() as c:
        c.request("GET", "/no/such/file")
        r = c.read_response()
        assert r.status == 404
        c.request("GET", "/small.txt")
        assert c.read_response().status == 200


def test_cgi_get(apache, sg):
    r = sg.get("/cgi-bin/echo.py?a=1&b=two", headers={"X-Test": "t1",
                                                      "X-Forwarded-For": "192.0.2.7"})
    assert r.status == 200 and r.header("X-Cgi") == "yes"
    out = _cgi(r.body)
    assert out["method"] == "GET"
    assert out["query"] == "a=1&b=two"
    assert out["body_len"] == "0"
    assert out["HTTP_X_TEST"] == "t1"
    assert [x.strip() for x in out["HTTP_X_FORWARDED_FOR"].split(",")] == ["192.0.2.7",
                                                                           "127.0.0.1"]
    assert out["HTTP_X_FORWARDED_PROTO"] == "http"
    assert out["HTTP_VIA"].startswith("1.1 ")
    assert out["HTTP_HOST"] == "surogat.test"


def test_cgi_hop_by_hop_not_forwarded(apache, sg):
    r = sg.get("/cgi-bin/echo.py", headers=[("Connection", "keep-alive, X-Test"),
                                            ("X-Test", "hop"), ("Keep-Alive", "300"),
                                            ("TE", "trailers")])
    out = _cgi(r.body)
    assert out["HTTP_X_TEST"] == "" and out["HTTP_KEEP_ALIVE"] == "" and out["HTTP_TE"] == ""


def test_cgi_post(apache, sg):
    body = os.urandom(200000)
    r = sg.request("POST", "/cgi-bin/echo.py?p", body=body, timeout=30)
    assert r.status == 200
    out = _cgi(r.body)
    assert out["method"] == "POST" and out["body_len"] == str(len(body))
    assert out["body_sha256"] == hashlib.sha256(body).hexdigest()


def test_cgi_post_chunked(apache, sg):
    body = os.urandom(150000)
    with sg.conn(timeout=30) as c:
        c.send(b"POST /cgi-bin/echo.py HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
               + httpc.chunked(body, 10000))
        r = c.read_response()
    assert r.status == 200
    out = _cgi(r.body)
    assert out["body_len"] == str(len(body))
    assert out["body_sha256"] == hashlib.sha256(body).hexdigest()


def test_cgi_post_expect_100(apache, sg):
    body = b"e" * 5000
    with sg.conn() as c:
        c.send(b"POST /cgi-bin/echo.py HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n"
               b"Content-Length: 5000\r\n\r\n")
        assert c.read_response(timeout=5).status == 100
        c.send(body)
        r = c.read_final()
    assert r.status == 200 and _cgi(r.body)["body_len"] == "5000"


def test_keepalive_through_to_apache(apache, sg):
    before = sg.stats()
    with sg.conn() as c:
        for i in range(30):
            # a query string per request: each must reach Apache, not the cache
            path = "/small.txt?n=%d" % i if i % 3 else "/cgi-bin/echo.py?i=%d" % i
            c.request("GET", path)
            r = c.read_response()
            assert r.status == 200
            if i % 3:
                assert r.body == apache.files["small.txt"]
            else:
                assert _cgi(r.body)["query"] == "i=%d" % i
    after = sg.stats()
    assert after["sess_conn"] - before["sess_conn"] == 1
    assert after["backend_req"] - before["backend_req"] == 30
    assert after["backend_conn"] - before["backend_conn"] <= 2
    assert after["backend_reuse"] - before["backend_reuse"] >= 28


def test_http10_client_to_apache(apache, sg):
    with sg.conn() as c:
        c.send(b"GET /cgi-bin/echo.py?ten HTTP/1.0\r\n\r\n")
        raw = c.read_until_close(10)
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.split(b" ")[1] == b"200"
    assert b"transfer-encoding" not in head.lower()
    out = _cgi(body)
    assert out["query"] == "ten" and out["HTTP_HOST"] != ""


def test_concurrent_clients(apache, sg):
    want = hashlib.sha256(apache.files["big.bin"]).hexdigest()
    errors = []

    def worker():
        try:
            with sg.conn(timeout=30) as c:
                for _ in range(5):
                    c.request("GET", "/big.bin")
                    r = c.read_response()
                    if r.status != 200 or hashlib.sha256(r.body).hexdigest() != want:
                        errors.append((r.status, len(r.body)))
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert sg.stat("client_req") == 30
