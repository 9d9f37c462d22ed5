"""Streaming: a miss reaches its client while it is stored, requests that
coalesce on the same fetch stream from the busy object, objects too big for
max_object_size or the store pass through unstored, a Range miss is cut from
the whole object fetched for the cache, and a stale object in its
stale-while-revalidate window is refreshed in the background.

The origin holds its response (route.hold_after / hold_head) until the test
releases it, so "before the origin finished" is an event, not a clock."""

import hashlib
import os
import threading
import time

import httpc
from cstatus import forwarded

CC60 = {"Cache-Control": "max-age=60"}
BODY = os.urandom(200_000)
FIRST = 1000  # bytes the origin sends before it holds


def sha(b):
    return hashlib.sha256(b).hexdigest()


class Partial:
    """A request on its own connection whose response is read step by step."""

    def __init__(self, sg, path, method="GET", headers=None):
        self.c = sg.conn(timeout=15)
        self.method = method
        self.c.request(method, path, headers)
        self.r = None
        self.got = b""

    def head(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        raw = self.c._until(b"\r\n\r\n", deadline, "response head")
        r = httpc.Response()
        lines = raw[:-4].split(b"\r\n")
        r.status = int(lines[0].split(b" ")[1])
        for ln in lines[1:]:
            n, _, v = ln.decode("latin-1").partition(":")
            r.headers.append((n, v.strip()))
        self.r = r
        return r

    def some(self, n, timeout=10.0):
        """At least n bytes of what follows the head (raw, as framed)."""
        deadline = time.monotonic() + timeout
        while len(self.c.buf) < n:
            if not self.c._fill(deadline):
                raise httpc.Incomplete("EOF after %d bytes" % len(self.c.buf))
        return bytes(self.c.buf)

    def rest(self, timeout=10.0):
        """The whole body, decoded (the head was read already)."""
        deadline = time.monotonic() + timeout
        if self.r.tokens("Transfer-Encoding") == ["chunked"]:
            out = bytearray()
            while True:
                size = int(self.c._until(b"\r\n", deadline, "chunk size")[:-2], 16)
                if size == 0:
                    self.c._until(b"\r\n", deadline, "last chunk")
                    return bytes(out)
                out += self.c._exactly(size + 2, deadline, "chunk")[:-2]
        n = int(self.r.header("Content-Length"))
        return self.c._exactly(n, deadline, "body")

    def close(self):
        self.c.close()


def held_route(origin, path, body=BODY, **kw):
    hdrs = dict(CC60)
    hdrs.update(kw.pop("headers", {}))
    return origin.route(path, body=body, headers=hdrs, hold_after=kw.pop("hold_after", FIRST),
                        **kw)


# -- streaming to the fetching client and to coalesced waiters ---------------------------


def test_miss_and_waiter_stream_before_origin_finishes(origin, surogat):
    route = held_route(origin, "/big")
    sg = surogat()
    a = Partial(sg, "/big")
    ha = a.head()
    assert ha.status == 200 and forwarded(ha.header("Cache-Status"), stored=True)
    assert a.some(FIRST)[:FIRST] == BODY[:FIRST]
    assert route.held.wait(5) and not route.done.is_set()
    b = Partial(sg, "/big")
    hb = b.head()
    assert hb.status == 200, hb
    assert hb.header("Cache-Status").startswith("surogat; fwd=miss; collapsed"), hb
    assert hb.header("Content-Length") == str(len(BODY))
    assert b.some(FIRST)[:FIRST] == BODY[:FIRST]
    assert not route.done.is_set(), "the waiter got its first bytes only after the origin ended"
    route.release.set()
    assert sha(a.rest()) == sha(BODY)
    assert sha(b.rest()) == sha(BODY)
    a.close()
    b.close()
    assert origin.hits("/big") == 1
    assert sg.stat("cache_streamed") == 1
    r = sg.get("/big")
    assert r.header("Cache-Status").startswith("surogat; hit") and sha(r.body) == sha(BODY)
    assert origin.hits("/big") == 1


def test_origin_dies_mid_body_aborts_streaming_waiters(origin, surogat):
    route = held_route(origin, "/die", die_on_release=True)
    sg = surogat()
    a = Partial(sg, "/die")
    a.head()
    a.some(FIRST)
    b = Partial(sg, "/die")
    assert b.head().header("Cache-Status").startswith("surogat; fwd=miss; collapsed")
    b.some(FIRST)
    route.release.set()
    for p in (a, b):
        closed, extra = p.c.wait_closed(10)
        assert closed, "the connection stayed open after the fetch failed"
        assert len(p.c.buf) < len(BODY)
        p.close()
    st = sg.stats()
    assert st["cache_stream_aborted"] == 1 and st["fetch_aborted"] == 1
    assert st["cache_stored"] == 0
    origin.route("/die", body=b"second", headers=CC60)
    r = sg.get("/die")
    assert r.body == b"second" and forwarded(r.header("Cache-Status"), stored=True)
    assert origin.hits("/die") == 2


def test_chunked_origin_streams(origin, surogat):
    chunks = [BODY[:FIRST], BODY[FIRST:50_000], BODY[50_000:]]
    wire_first = len(b"%x\r\n" % FIRST) + FIRST + 2
    route = origin.route("/ch", body=BODY, chunked=True, chunks=chunks, headers=CC60,
                         hold_after=wire_first)
    sg = surogat()
    a = Partial(sg, "/ch")
    assert a.head().tokens("Transfer-Encoding") == ["chunked"]
    b = Partial(sg, "/ch")
    hb = b.head()
    assert hb.header("Cache-Status").startswith("surogat; fwd=miss; collapsed"), hb
    assert hb.tokens("Transfer-Encoding") == ["chunked"] and not hb.has("Content-Length")
    assert BODY[:FIRST] in b.some(len(b"3e8\r\n") + FIRST)
    assert not route.done.is_set()
    route.release.set()
    assert sha(a.rest()) == sha(BODY)
    assert sha(b.rest()) == sha(BODY)
    a.close()
    b.close()
    r = sg.get("/ch")
    assert r.header("Cache-Status").startswith("surogat; hit")
    assert r.header("Content-Length") == str(len(BODY)) and sha(r.body) == sha(BODY)
    assert origin.hits("/ch") == 1


def test_fetching_client_leaves_waiter_still_served(origin, surogat):
    """The client whose request fetches goes away mid-body: the fetch goes
    on for the cache and for the request streaming from it."""
    route = held_route(origin, "/gone")
    sg = surogat()
    a = Partial(sg, "/gone")
    a.head()
    a.some(FIRST)
    b = Partial(sg, "/gone")
    assert b.head().header("Cache-Status").startswith("surogat; fwd=miss; collapsed")
    a.close()
    time.sleep(0.2)
    route.release.set()
    assert sha(b.rest()) == sha(BODY)
    b.close()
    sg.wait_stat("cache_stored", 1, timeout=10)
    r = sg.get("/gone")
    assert r.header("Cache-Status").startswith("surogat; hit") and sha(r.body) == sha(BODY)
    assert origin.hits("/gone") == 1


def test_head_waiter(origin, surogat):
    route = held_route(origin, "/hw")
    sg = surogat()
    a = Partial(sg, "/hw")
    a.head()
    a.some(FIRST)
    with sg.conn() as c:
        c.request("HEAD", "/hw")
        r = c.read_response("HEAD")
        assert r.status == 200 and r.body == b""
        assert r.header("Content-Length") == str(len(BODY))
        assert r.header("Cache-Status").startswith("surogat; fwd=miss; collapsed")
        assert not route.done.is_set()
        c.request("GET", "/nothing-here")  # the connection is still usable
        assert c.read_response().status == 200
    route.release.set()
    assert sha(a.rest()) == sha(BODY)
    a.close()


def test_range_waiter(origin, surogat):
    route = held_route(origin, "/rw")
    sg = surogat()
    a = Partial(sg, "/rw")
    a.head()
    a.some(FIRST)
    b = Partial(sg, "/rw", headers={"Range": "bytes=500-1499"})
    hb = b.head()
    assert hb.status == 206 and hb.header("Content-Range") == "bytes 500-1499/%d" % len(BODY)
    assert b.some(500)[:500] == BODY[500:1000]
    route.release.set()
    assert b.rest() == BODY[500:1500]
    assert sha(a.rest()) == sha(BODY)
    a.close()
    b.close()


# -- too big to store --------------------------------------------------------------------


def assert_passed_unstored(origin, sg, path, body, n=2):
    for i in range(n):
        r = sg.get(path, timeout=20)
        assert r.status == 200 and sha(r.body) == sha(body), r
        assert not r.header("Cache-Status").startswith("surogat; hit"), r
        assert origin.hits(path) == i + 1


def test_max_object_size(origin, surogat):
    body = os.urandom(20_000)
    origin.route("/cl", body=body, headers=CC60)
    origin.route("/chunked", body=body, chunked=True,
                 chunks=[body[i:i + 4000] for i in range(0, len(body), 4000)], headers=CC60)
    origin.route("/small", body=b"s" * 5000, headers=CC60)
    sg = surogat(params={"max_object_size": "10k"})
    assert_passed_unstored(origin, sg, "/cl", body)
    assert_passed_unstored(origin, sg, "/chunked", body)
    st = sg.stats()
    assert st["cache_too_big"] == 2 and st["cache_stored"] == 0
    assert sg.get("/small").status == 200
    assert sg.get("/small").header("Cache-Status").startswith("surogat; hit")


def test_max_object_size_chunked_with_waiter(origin, surogat):
    """A chunked body outgrows the limit while a waiter streams it: both
    clients get all of it, and it is not stored."""
    chunks = [BODY[:FIRST], BODY[FIRST:]]
    wire_first = len(b"%x\r\n" % FIRST) + FIRST + 2
    route = origin.route("/grow", body=BODY, chunked=True, chunks=chunks, headers=CC60,
                         hold_after=wire_first)
    sg = surogat(params={"max_object_size": "64k"})
    a = Partial(sg, "/grow")
    a.head()
    b = Partial(sg, "/grow")
    assert b.head().header("Cache-Status").startswith("surogat; fwd=miss; collapsed")
    route.release.set()
    assert sha(a.rest()) == sha(BODY)
    assert sha(b.rest()) == sha(BODY)
    a.close()
    b.close()
    assert sg.stat("cache_too_big") == 1 and sg.stat("cache_stored") == 0
    origin.route("/grow", body=b"small now", headers=CC60)
    r = sg.get("/grow")
    assert r.body == b"small now" and origin.hits("/grow") == 2


def test_object_bigger_than_store(origin, surogat):
    body = os.urandom(1_500_000)
    origin.route("/huge", body=body, headers=CC60)
    origin.route("/huge-ch", body=body, chunked=True,
                 chunks=[body[i:i + 65536] for i in range(0, len(body), 65536)], headers=CC60)
    sg = surogat(args=["-s", "malloc,1m"])
    assert_passed_unstored(origin, sg, "/huge", body)
    assert_passed_unstored(origin, sg, "/huge-ch", body)
    assert sg.stat("cache_too_big") >= 2 or sg.stat("n_lru_limited") >= 1
    assert sg.stat("cache_stored") == 0


# -- Range on a miss ---------------------------------------------------------------------


def test_range_on_miss_then_hit(origin, surogat):
    body = bytes(range(256)) * 40  # 10240 bytes
    origin.route("/r", body=body, headers={"Cache-Control": "max-age=60", "ETag": '"r1"'})
    origin.route("/suffix", body=body, headers=CC60)
    origin.route("/416", body=body, headers=CC60)
    sg = surogat()
    r = sg.get("/r", headers={"Range": "bytes=100-199"})
    assert r.status == 206 and r.body == body[100:200], r
    assert r.header("Content-Range") == "bytes 100-199/%d" % len(body)
    assert r.header("Content-Length") == "100"
    assert forwarded(r.header("Cache-Status"), stored=True)
    assert not origin.last("/r").has("Range")
    r = sg.get("/r", headers={"Range": "bytes=5000-"})
    assert r.status == 206 and r.body == body[5000:], r
    assert r.header("Cache-Status").startswith("surogat; hit")
    assert origin.hits("/r") == 1
    # If-Range that does not match what was fetched: the whole body
    origin.route("/ir", body=body, headers={"Cache-Control": "max-age=60", "ETag": '"new"'})
    r = sg.get("/ir", headers={"Range": "bytes=0-9", "If-Range": '"old"'})
    assert r.status == 200 and r.body == body and not r.has("Content-Range"), r
    r = sg.get("/suffix", headers={"Range": "bytes=-300"})
    assert r.status == 206 and r.body == body[-300:], r
    assert r.header("Content-Range") == "bytes %d-%d/%d" % (len(body) - 300, len(body) - 1,
                                                            len(body))
    r = sg.get("/416", headers={"Range": "bytes=20000-"})
    assert r.status == 416 and r.body == b"", r
    assert r.header("Content-Range") == "bytes */%d" % len(body)
    r = sg.get("/416")
    assert r.status == 200 and r.body == body
    assert r.header("Cache-Status").startswith("surogat; hit"), "the 416 miss stored nothing"
    assert origin.hits("/416") == 1 and origin.hits("/suffix") == 1


def test_range_on_chunked_miss_is_whole(origin, surogat):
    body = b"0123456789" * 100
    origin.route("/rc", body=body, chunked=True, headers=CC60)
    sg = surogat()
    r = sg.get("/rc", headers={"Range": "bytes=10-19"})
    assert r.status == 200 and r.body == body, r
    r = sg.get("/rc", headers={"Range": "bytes=10-19"})
    assert r.status == 206 and r.body == body[10:20], r


# -- background refresh ------------------------------------------------------------------


def test_background_refresh(origin, surogat):
    origin.route("/bg", body=b"version one",
                 headers={"Cache-Control": "max-age=1, stale-while-revalidate=30"})
    sg = surogat()
    assert forwarded(sg.get("/bg").header("Cache-Status"), stored=True)
    time.sleep(1.3)
    route = origin.route("/bg", body=b"version two", headers=CC60, hold_head=True)
    r = sg.get("/bg")
    assert r.status == 200 and r.body == b"version one", r
    assert not route.done.is_set(), "answered only after the origin answered the refresh"
    assert r.header("Cache-Status").startswith("surogat; hit; ttl=-"), r
    assert route.held.wait(10), "no background refresh reached the origin"
    q = origin.last("/bg")
    assert q.method == "GET" and q.header("Host") == "surogat.test"
    assert "127.0.0.1" in (q.header("X-Forwarded-For") or "")
    r = sg.get("/bg")  # still refreshing: the stale copy again, no second refresh
    assert r.body == b"version one"
    route.release.set()
    sg.wait_stat("cache_stored", 2, timeout=10)
    r = sg.get("/bg")
    assert r.body == b"version two" and r.header("Cache-Status").startswith("surogat; hit")
    assert origin.hits("/bg") == 2
    st = sg.stats()
    assert st["cache_bgfetch"] == 1 and st["cache_hit_grace"] == 2
    assert st["cache_bgfetch_failed"] == 0 and st["cache_miss"] == 1


def test_background_revalidation_304(origin, surogat):
    origin.route("/bv", conditional=True, body=b"validated body",
                 headers={"ETag": '"b1"', "X-Rev": "1",
                          "Cache-Control": "max-age=1, stale-while-revalidate=30"})
    sg = surogat()
    assert sg.get("/bv").status == 200
    time.sleep(1.3)
    route = origin.route("/bv", conditional=True, body=b"must not be sent", hold_head=True,
                         headers={"ETag": '"b1"', "X-Rev": "2", "Cache-Control": "max-age=60"})
    r = sg.get("/bv")
    assert r.body == b"validated body" and r.header("X-Rev") == "1", r
    assert route.held.wait(10)
    route.release.set()
    sg.wait_stat("cache_revalidated", 1, timeout=10)
    q = origin.last("/bv")
    assert q.headers_all("If-None-Match") == ['"b1"'] and q.answered == 304
    r = sg.get("/bv")
    assert r.body == b"validated body" and r.header("X-Rev") == "2", r
    assert r.header("Cache-Status").startswith("surogat; hit; ttl=")
    assert "ttl=-" not in r.header("Cache-Status")
    assert origin.hits("/bv") == 2


def test_background_refresh_keeps_vary_fields(origin, surogat):
    body = lambda q: b"for " + (q.header("Accept-Language") or "-").encode()  # noqa: E731
    origin.route("/bvary", body=body, headers={"Vary": "Accept-Language",
                                                "Cache-Control": "max-age=1, "
                                                                 "stale-while-revalidate=30"})
    sg = surogat()
    de = {"Accept-Language": "de"}
    assert sg.get("/bvary", headers=de).body == b"for de"
    time.sleep(1.3)
    origin.route("/bvary", body=body, headers={"Vary": "Accept-Language",
                                                "Cache-Control": "max-age=60"})
    assert sg.get("/bvary", headers=de).body == b"for de"
    sg.wait_stat("cache_stored", 2, timeout=10)
    assert origin.last("/bvary").header("Accept-Language") == "de"
    r = sg.get("/bvary", headers=de)
    assert r.body == b"for de" and "ttl=-" not in r.header("Cache-Status"), r
    assert origin.hits("/bvary") == 2


def test_background_refresh_skipped_when_queue_full(origin, surogat):
    origin.route("/bq", body=b"old", headers={"Cache-Control": "max-age=1, "
                                                                "stale-while-revalidate=30"})
    # One worker and no queue: while it serves the request, the refresh cannot be queued.
    sg = surogat(params={"thread_pools": "1", "thread_pool_min": "1", "thread_pool_max": "1",
                         "thread_queue_limit": "0", "timeout_linger": "0s"})
    with sg.conn() as c:
        c.request("GET", "/bq")
        assert c.read_response().body == b"old"
        time.sleep(1.3)
        origin.route("/bq", body=b"new", headers=CC60)
        c.request("GET", "/bq")
        r = c.read_response()
        assert r.body == b"old", r
    st = sg.stats()
    assert st["cache_bgfetch_skipped"] == 1 and st["cache_bgfetch"] == 0, st
    assert origin.hits("/bq") == 1
