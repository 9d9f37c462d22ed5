"""Delivery from the cache: HEAD, 304 for conditional requests, byte ranges,
large objects, eviction when the store is full."""

import email.utils
import hashlib
import os
import re
import time
from cstatus import forwarded

BYPASS = "surogat; fwd=bypass"
HIT_RE = re.compile(r"surogat; hit; ttl=\d+")
CC60 = {"Cache-Control": "max-age=60"}


def http_date(t):
    return email.utils.formatdate(t, usegmt=True)


def is_hit(r):
    return HIT_RE.fullmatch(r.header("Cache-Status") or "") is not None and r.has("Age")


def sha(b):
    return hashlib.sha256(b).hexdigest()


# -- HEAD --------------------------------------------------------------------------


def test_head_on_cached_get(origin, surogat):
    body = os.urandom(1234)
    origin.route("/h", body=body, headers=dict(CC60, **{"Content-Type": "application/x-t"}))
    sg = surogat()
    assert sg.get("/h").body == body
    with sg.conn() as c:
        c.request("HEAD", "/h")
        r = c.read_response("HEAD")
        assert r.status == 200 and is_hit(r), r
        assert r.headers_all("Content-Length") == ["1234"]
        assert r.header("Content-Type") == "application/x-t"
        # no body bytes: the next response on the connection parses cleanly
        c.request("GET", "/h")
        r2 = c.read_response()
        assert r2.status == 200 and r2.body == body and is_hit(r2)
        assert c.is_open(0.2)
    assert origin.hits("/h") == 1


def test_head_miss_fetches_get_and_stores(origin, surogat):
    body = b"b" * 5000
    origin.route("/hm", body=body, headers=CC60)
    origin.route("/hp", body=body, headers={"Cache-Control": "private"})
    origin.route("/hc", chunked=True, chunks=[b"abc", b"defg"], headers=CC60)
    sg = surogat()
    with sg.conn() as c:
        for path, stored in (("/hm", True), ("/hp", False), ("/hc", True)):
            c.request("HEAD", path)
            r = c.read_response("HEAD")
            assert r.status == 200, r
            assert forwarded(r.header("Cache-Status"), stored=stored), r
            if path != "/hc":
                assert r.header("Content-Length") == "5000", r
            c.request("GET", "/hm")  # the connection must still be in step
            assert c.read_response().body == body
    assert [q.method for q in origin.reqs("/hm")] == ["GET"]
    assert [q.method for q in origin.reqs("/hp")] == ["GET"]
    assert [q.method for q in origin.reqs("/hc")] == ["GET"]
    r = sg.get("/hc")
    assert is_hit(r) and r.body == b"abcdefg" and r.header("Content-Length") == "7"
    r = sg.request("HEAD", "/hc")
    assert is_hit(r) and r.header("Content-Length") == "7"
    assert origin.hits("/hc") == 1


# -- 304 -----------------------------------------------------------------------------


def test_304_if_none_match(origin, surogat):
    origin.route("/etag", body=b"tagged", headers=dict(CC60, ETag='"v1"'))
    sg = surogat()
    assert sg.get("/etag").body == b"tagged"
    before = sg.stat("cache_304")
    cases = [('"v1"', 304), ('W/"v1"', 304), ('"a", "v1"', 304), ("*", 304),
             ('"v2"', 200), ('"v1x"', 200)]
    with sg.conn() as c:
        for inm, want in cases:
            c.request("GET", "/etag", {"If-None-Match": inm})
            r = c.read_response()
            assert r.status == want, "If-None-Match %s: %r" % (inm, r)
            assert r.header("ETag") == '"v1"'
            assert is_hit(r), r
            if want == 304:
                assert r.body == b"" and not r.has("Content-Length"), r
            else:
                assert r.body == b"tagged"
        # If-None-Match wins over If-Modified-Since
        c.request("GET", "/etag", {"If-None-Match": '"zz"',
                                   "If-Modified-Since": http_date(time.time() + 3600)})
        assert c.read_response().status == 200
        c.request("HEAD", "/etag", {"If-None-Match": '"v1"'})
        assert c.read_response("HEAD").status == 304
    assert sg.stat("cache_304") - before == 5
    assert origin.hits("/etag") == 1


def test_304_if_modified_since(origin, surogat):
    lm = time.time() - 86400
    origin.route("/ims", body=b"dated", headers=dict(CC60, **{"Last-Modified": http_date(lm)}))
    sg = surogat()
    assert sg.get("/ims").body == b"dated"
    for ims, want in ((lm, 304), (lm + 60, 304), (lm - 60, 200)):
        r = sg.get("/ims", headers={"If-Modified-Since": http_date(ims)})
        assert r.status == want, "If-Modified-Since %s: %r" % (http_date(ims), r)
        assert r.body == (b"" if want == 304 else b"dated")
        assert r.header("Last-Modified") == http_date(lm) and is_hit(r)
    r = sg.get("/ims", headers={"If-Modified-Since": "not a date"})
    assert r.status == 200 and r.body == b"dated"
    assert origin.hits("/ims") == 1
    assert sg.stat("cache_304") == 2


def test_conditional_miss_fetches_full_object(origin, surogat):
    origin.route("/cm", body=b"full", headers=dict(CC60, ETag='"c"'))
    sg = surogat()
    r = sg.get("/cm", headers={"If-None-Match": '"c"', "If-Modified-Since": http_date(0)})
    assert r.status in (200, 304), r
    q = origin.last("/cm")
    assert not q.has("If-None-Match") and not q.has("If-Modified-Since"), q.headers
    r = sg.get("/cm")
    assert r.status == 200 and r.body == b"full" and is_hit(r)
    assert origin.hits("/cm") == 1


# -- Range ---------------------------------------------------------------------------


def test_range_from_cache(origin, surogat):
    body = b"0123456789abcdefghijklmnopqrstuvwxyz"  # 36 bytes
    origin.route("/r", body=body, headers=dict(CC60, ETag='"r1"'))
    sg = surogat()
    assert sg.get("/r").body == body
    cases = [("bytes=0-9", 206, body[0:10], "bytes 0-9/36"),
             ("bytes=-5", 206, body[-5:], "bytes 31-35/36"),
             ("bytes=10-", 206, body[10:], "bytes 10-35/36"),
             ("bytes=30-99", 206, body[30:], "bytes 30-35/36"),
             ("bytes=35-35", 206, b"z", "bytes 35-35/36"),
             ("bytes=-100", 206, body, "bytes 0-35/36"),
             ("bytes=99999-", 416, b"", "bytes */36"),
             ("bytes=36-", 416, b"", "bytes */36"),
             ("bytes=0-1,3-4", 200, body, None),
             ("items=0-1", 200, body, None)]
    with sg.conn() as c:
        for rng, status, want, crange in cases:
            c.request("GET", "/r", {"Range": rng})
            r = c.read_response()
            assert r.status == status, "Range %s: %r" % (rng, r)
            assert r.body == want, "Range %s" % rng
            assert r.header("Content-Range") == crange, "Range %s: %r" % (rng, r)
            assert r.headers_all("Content-Length") == [str(len(want))], r
            assert is_hit(r)
        # If-Range: a matching strong ETag keeps the range, another gives the whole
        c.request("GET", "/r", {"Range": "bytes=0-1", "If-Range": '"r1"'})
        r = c.read_response()
        assert r.status == 206 and r.body == b"01"
        c.request("GET", "/r", {"Range": "bytes=0-1", "If-Range": '"old"'})
        r = c.read_response()
        assert r.status == 200 and r.body == body
        assert c.is_open(0.2)
    assert origin.hits("/r") == 1


def test_range_on_miss_fetches_whole_object(origin, surogat):
    origin.route("/rm", body=b"whole body", headers=CC60)
    sg = surogat()
    r = sg.get("/rm", headers={"Range": "bytes=0-1"})
    assert r.status == 206 and r.body == b"wh", r
    assert r.header("Content-Range") == "bytes 0-1/10"
    assert forwarded(r.header("Cache-Status"), stored=True), r
    assert origin.last("/rm").header("Range") is None
    r = sg.get("/rm")
    assert is_hit(r) and r.body == b"whole body"
    r = sg.get("/rm", headers={"Range": "bytes=6-"})
    assert r.status == 206 and r.body == b"body" and is_hit(r)
    assert origin.hits("/rm") == 1


# -- large objects and eviction -------------------------------------------------------


def test_large_object(origin, surogat):
    big = os.urandom(2 << 20)
    origin.route("/big", body=big, headers=CC60)
    origin.route("/bigc", body=big, chunked=True,
                 chunks=[big[i:i + 65536] for i in range(0, len(big), 65536)], headers=CC60)
    sg = surogat()
    for path in ("/big", "/bigc"):
        r1 = sg.get(path, timeout=20)
        assert r1.status == 200 and forwarded(r1.header("Cache-Status"), stored=True)
        assert sha(r1.body) == sha(big)
        for _ in range(2):
            r = sg.get(path, timeout=20)
            assert r.status == 200 and is_hit(r), r.headers
            assert r.header("Content-Length") == str(2 << 20)
            assert sha(r.body) == sha(big)
        assert origin.hits(path) == 1
        # a range deep inside, across storage segments
        r = sg.get(path, headers={"Range": "bytes=1000000-1300000"})
        assert r.status == 206 and r.body == big[1000000:1300001]


def test_eviction(origin, surogat):
    objs = {"/o%d" % i: os.urandom(300 * 1024) for i in range(6)}
    for p, b in objs.items():
        origin.route(p, body=b, headers=CC60)
    sg = surogat(args=["-s", "malloc,1m"])
    for p, b in objs.items():
        r = sg.get(p)
        assert r.status == 200 and sha(r.body) == sha(b), p
        assert forwarded(r.header("Cache-Status"), stored=True)
    st = sg.stats()
    assert st["n_lru_nuked"] > 0
    assert 1 <= st["n_object"] <= 3, st["n_object"]
    assert st["cache_stored"] == 6
    # the newest object survived and is served intact from the cache
    r = sg.get("/o5")
    assert is_hit(r) and sha(r.body) == sha(objs["/o5"])
    assert origin.hits("/o5") == 1
    # every object still comes out right, from the cache or the origin
    for p, b in objs.items():
        r = sg.get(p)
        assert r.status == 200 and sha(r.body) == sha(b), p


def test_store_holds_what_fits(origin, surogat):
    """Three 300 KB objects take 900 KB: a 1 MiB store keeps at least two."""
    objs = {"/f%d" % i: os.urandom(300 * 1024) for i in range(3)}
    for p, b in objs.items():
        origin.route(p, body=b, headers=CC60)
    sg = surogat(args=["-s", "malloc,1m"])
    for p in objs:
        assert sg.get(p).status == 200
    hits = sum(is_hit(sg.get(p)) for p in ("/f1", "/f2"))
    assert hits == 2, "of the two newest 300 KB objects in a 1 MiB store, %d still cached " \
        "(n_lru_nuked %d)" % (hits, sg.stat("n_lru_nuked"))


def test_object_larger_than_store(origin, surogat):
    big = os.urandom(2 << 20)
    origin.route("/huge", body=big, headers=CC60)
    origin.route("/small", body=b"small", headers=CC60)
    sg = surogat(args=["-s", "malloc,1m"])
    assert sg.get("/small").body == b"small"
    for _ in range(2):
        r = sg.get("/huge", timeout=20)
        assert r.status == 200 and sha(r.body) == sha(big)
    assert origin.hits("/huge") == 2
    st = sg.stats()
    # Its Content-Length says it cannot fit: not even tried (and nothing else evicted for it).
    assert st["cache_too_big"] >= 1 and st["n_lru_nuked"] == 0
    assert st["cache_stored"] == 1, "an object that did not fit counted as stored"


def test_cached_204_has_no_content_length(origin, surogat):
    origin.route("/nc204", status=204, headers=CC60)
    sg = surogat()
    with sg.conn() as c:
        for _ in range(2):
            c.request("GET", "/nc204")
            r = c.read_response()
            assert r.status == 204
            assert not r.has("Content-Length"), "Content-Length in a 204: %r" % r.headers
        assert is_hit(r)
    assert origin.hits("/nc204") == 1


def test_http10_hits(origin, surogat):
    origin.route("/ten", body=b"ten", headers=CC60)
    sg = surogat()
    assert sg.get("/ten").status == 200
    with sg.conn() as c:
        c.send(b"GET /ten HTTP/1.0\r\nHost: surogat.test\r\nConnection: keep-alive\r\n\r\n"
               b"GET /ten HTTP/1.0\r\nHost: surogat.test\r\n\r\n")
        r = c.read_response()
        assert r.status == 200 and r.body == b"ten" and is_hit(r)
        assert "keep-alive" in r.tokens("Connection")
        r = c.read_response()
        assert r.status == 200 and r.body == b"ten" and is_hit(r)
        assert "keep-alive" not in r.tokens("Connection")
        assert c.wait_closed(5) == (True, b"")
    assert origin.hits("/ten") == 1
