"""HTTP/2 streams through the request core: cache hits, coalesced misses, gzip, grace,
Range, a stream reset mid-body, 100 streams with a slow one, request bodies streamed to an
HTTP/1.1 backend, passes and misses answered over h2."""

import gzip
import hashlib
import os
import time

import pytest

import httpc
from conftest import free_port, wait_until
from h2util import CURL, H2, run


CC = {"Cache-Control": "max-age=60"}


@pytest.fixture
def h2(surogat, origin):
    """Factory: h2(params=..., args=...) -> (sg, port of an h2c listener)."""

    def start(params=None, args=()):
        port = free_port()
        sg = surogat(params=params, args=["-a", "127.0.0.1:%d,h2c" % port] + list(args))
        return sg, port

    return start


def warm(sg, path, headers=None):
    """Store path with a miss over HTTP/1.1: the same object serves both protocols."""
    r = httpc.fetch(sg.port, path=path, headers=headers)
    assert r.status == 200, r
    return r


AUTH = "surogat.test"  # the Host httpc sends: the same cache key over both protocols


def test_cache_hit_over_h2(h2, origin):
    origin.route("/hit", body=b"from the cache", headers=CC)
    sg, port = h2()
    warm(sg, "/hit")
    with H2(port) as c:
        for _ in range(3):
            st = c.get("/hit", authority=AUTH)
            assert st.status == 200 and bytes(st.data) == b"from the cache"
            assert st.header("cache-status").startswith("surogat; hit"), st.headers
            assert st.header("content-length") == "14"
    assert origin.hits("/hit") == 1
    assert sg.stat("cache_hit") == 3


def test_range_304_head_on_hits(h2, origin):
    body = os.urandom(100000)
    origin.route("/r", body=body, headers=dict(CC, ETag='"v1"'))
    sg, port = h2()
    warm(sg, "/r")
    with H2(port) as c:
        st = c.get("/r", authority=AUTH, headers=[("range", "bytes=10-19")])
        assert st.status == 206 and bytes(st.data) == body[10:20]
        st = c.get("/r", authority=AUTH, headers=[("if-none-match", '"v1"')])
        assert st.status == 304 and st.data == b""
        st = c.get("/r", authority=AUTH, method="HEAD")
        assert st.status == 200 and st.data == b"" and st.header("content-length") == "100000"
        st = c.get("/r", authority=AUTH)
        assert hashlib.sha256(st.data).digest() == hashlib.sha256(body).digest()
    assert origin.hits("/r") == 1


def test_gzip_negotiated_over_h2(h2, origin):
    page = b"<p>surogat gzip over http/2</p>\n" * 400
    origin.route("/g.html", body=page, headers=dict(CC, **{"Content-Type": "text/html"}))
    sg, port = h2(params={"compress_formats": "gzip"})  # stored gzip (br: g_codecs_test.py)
    warm(sg, "/g.html", {"Accept-Encoding": "gzip"})
    with H2(port) as c:
        st = c.get("/g.html", authority=AUTH, headers=[("accept-encoding", "gzip, br")])
        assert st.status == 200 and st.header("content-encoding") == "gzip"
        assert gzip.decompress(bytes(st.data)) == page
        st = c.get("/g.html", authority=AUTH)
        assert st.status == 200 and st.header("content-encoding") is None
        assert bytes(st.data) == page  # gunzipped on the fly, in DATA frames
    assert origin.hits("/g.html") == 1
    assert sg.stat("gunzip_delivered") == 1


def test_stale_in_grace_over_h2(h2, origin):
    origin.route("/s", body=b"v1", headers={"Cache-Control": "max-age=1, stale-while-revalidate=30"})
    sg, port = h2()
    warm(sg, "/s")
    origin.route("/s", body=b"v2", headers={"Cache-Control": "max-age=60"})
    time.sleep(1.3)
    with H2(port) as c:
        st = c.get("/s", authority=AUTH)
        assert st.status == 200 and bytes(st.data) == b"v1"  # stale, at once
    origin.wait_hits("/s", 2)
    wait_until(lambda: sg.stat("cache_bgfetch") >= 1, 5, "the background refresh")
    with H2(port) as c:
        wait_until(lambda: bytes(c.get("/s", authority=AUTH).data) == b"v2", 5, "the new copy")


def test_coalesced_followers_over_h2(h2, origin):
    """Ten streams on one connection join a fetch in progress: one backend request, each
    stream streams the body from the object as it is stored."""
    r = origin.route("/co", body=b"c" * 50000, headers=CC, hold_head=True)
    sg, port = h2()
    import threading
    leader = {}
    t = threading.Thread(target=lambda: leader.update(r=httpc.fetch(sg.port, path="/co")))
    t.start()
    assert r.held.wait(10)
    with H2(port) as c:
        sids = [c.request("/co", authority=AUTH) for _ in range(10)]
        c.pump(0.5)  # they wait on the busy object: no thread, no answer yet
        assert not any(c.streams[s].done for s in sids)
        r.release.set()
        for sid in sids:
            st = c.response(sid)
            assert st.status == 200 and bytes(st.data) == b"c" * 50000, st
            assert "collapsed" in st.header("cache-status") or "hit" in st.header("cache-status")
    t.join(10)
    assert leader["r"].status == 200
    assert origin.hits("/co") == 1


def test_stream_reset_mid_body(h2, origin):
    big = os.urandom(4 << 20)
    origin.route("/big", body=big, headers=CC)
    sg, port = h2()
    warm(sg, "/big")
    with H2(port) as c:
        sid = c.request("/big", authority=AUTH)
        c.wait(lambda: len(c.streams[sid].data) > 100000, what="some of the body")
        c.reset(sid)
        # the connection goes on, a whole answer after it
        st = c.get("/big", authority=AUTH)
        assert hashlib.sha256(st.data).digest() == hashlib.sha256(big).digest()
        assert c.goaway is None
    assert sg.stat("h2_rst_received") >= 1


def test_100_streams_one_slow_client_stream(h2, origin):
    """One stream whose window the client keeps shut holds up none of the 99 others."""
    origin.route("/big", body=os.urandom(1 << 20), headers=CC)
    origin.route("/small", body=b"s", headers=CC)
    sg, port = h2(params={"h2_window_timeout": "30s"})
    warm(sg, "/big")
    warm(sg, "/small")
    with H2(port) as c:
        slow = c.request("/big", authority=AUTH)
        c.hold.add(slow)
        t0 = time.monotonic()
        sids = [c.request("/small", authority=AUTH) for _ in range(99)]
        c.wait(lambda: all(c.streams[s].ended for s in sids), timeout=10, what="99 answers")
        assert time.monotonic() - t0 < 5
        # the slow one got its window's worth (it may come after the small ones), no more
        c.wait(lambda: len(c.streams[slow].data) >= 65535, timeout=10, what="a window's worth")
        c.pump(0.3)
        assert not c.streams[slow].ended and len(c.streams[slow].data) == 65535
        # opening its window lets it finish
        c.hold.discard(slow)
        c.conn.increment_flow_control_window(1 << 24, stream_id=slow)
        c.flush()
        c.response(slow, timeout=20)
        assert len(c.streams[slow].data) == 1 << 20


def test_request_body_reaches_the_backend(h2, origin):
    """Uploads stream to the HTTP/1.1 backend: with Content-Length when the client gave
    one, chunked otherwise; nothing of h2's framing or flow control shows."""
    origin.route("/up", echo_sha=True, headers={"Cache-Control": "no-store"})
    sg, port = h2(params={"h2_initial_window_size": "64k"})
    body = os.urandom((3 << 20) + 7)
    with H2(port) as c:
        sid = c.request("/up", method="POST", authority=AUTH, end=False,
                        headers=[("content-length", str(len(body)))])
        c.send_body(sid, body, timeout=30)
        c.response(sid, timeout=30)
        sid = c.request("/up", method="PUT", authority=AUTH, end=False)
        c.send_body(sid, body[:200000], timeout=30)
        c.response(sid, timeout=30)
    first, second = origin.reqs("/up")[-2:]
    assert first.body == body and first.header("Content-Length") == str(len(body))
    assert not first.has("Transfer-Encoding")
    assert second.body == body[:200000]
    assert second.header("Transfer-Encoding") == "chunked" and not second.has("Content-Length")
    assert sg.stat("client_body_bytes") == len(body) + 200000


def test_miss_then_hit_over_h2(h2, origin):
    origin.route("/m", body=b"missed, then hit", headers=CC)
    sg, port = h2()
    with H2(port) as c:
        st = c.get("/m", authority=AUTH)
        assert st.status == 200 and bytes(st.data) == b"missed, then hit", st
        st = c.get("/m", authority=AUTH)
        assert st.header("cache-status").startswith("surogat; hit")
    assert origin.hits("/m") == 1


def test_streaming_miss_and_its_conditions_over_h2(h2, origin):
    """A miss streams: the stream gets the body's first part while the backend still
    holds the rest.  A miss with Range or a matching If-None-Match fetches the whole
    object and answers the client's condition from it: 206 or 304 in one stream."""
    body = os.urandom(300000)
    route = origin.route("/sm", body=body, headers=dict(CC, ETag='"e1"'), hold_after=100000)
    origin.route("/sr", body=body, headers=dict(CC, ETag='"e2"'))
    origin.route("/sc", body=body, headers=dict(CC, ETag='"e3"'))
    sg, port = h2()
    with H2(port) as c:
        sid = c.request("/sm", authority=AUTH)
        c.wait(lambda: len(c.streams[sid].data) >= 90000, what="the part the backend sent")
        assert not c.streams[sid].done and not route.done.is_set()
        route.release.set()
        st = c.response(sid)
        assert st.status == 200 and bytes(st.data) == body, st
        st = c.get("/sr", authority=AUTH, headers=[("range", "bytes=5-14")])
        assert st.status == 206 and bytes(st.data) == body[5:15], st
        assert st.header("content-range") == "bytes 5-14/300000"
        st = c.get("/sc", authority=AUTH, headers=[("if-none-match", '"e3"')])
        assert st.status == 304 and st.data == b"" and st.header("etag") == '"e3"', st
    assert not origin.last("/sr").has("Range") and not origin.last("/sc").has("If-None-Match")
    with H2(port) as c:
        for path in ("/sm", "/sr", "/sc"):
            st = c.get(path, authority=AUTH)
            assert bytes(st.data) == body and st.header("cache-status").startswith("surogat; hit")
    assert [origin.hits(p) for p in ("/sm", "/sr", "/sc")] == [1, 1, 1]


def test_coalesced_miss_all_over_h2(h2, origin):
    """Streams waiting for another stream's fetch park (no worker held) and resume on
    the connection once it answers."""
    origin.route("/cm", body=b"x" * 100000, headers=CC, delay=1.0)
    sg, port = h2()
    with H2(port) as c:
        sids = [c.request("/cm", authority=AUTH) for _ in range(10)]
        for sid in sids:
            st = c.response(sid)
            assert st.status == 200 and len(st.data) == 100000, st
    assert origin.hits("/cm") == 1
    assert sg.stat("cache_coalesced") == 9 and sg.stat("coalesce_on_thread") == 0
    assert sg.stat("coalesce_rushed") >= 1 and sg.stat("coalesce_parked") == 0


def test_stream_that_reads_nothing_does_not_hold_its_miss(h2, origin):
    """A miss whose stream keeps its window shut falls behind: the fetch goes on at the
    backend's pace, others hit the stored object at once, and the stream gets the rest
    from the store when it opens its window."""
    body = os.urandom(4 << 20)
    origin.route("/slowmiss", body=body, headers=CC)
    sg, port = h2()
    with H2(port) as c:
        sid = c.request("/slowmiss", authority=AUTH)
        c.hold.add(sid)
        origin.wait_hits("/slowmiss", 1, 10)
        c.wait(lambda: sg.stat("cache_stored") == 1 and sg.stat("fetch_client_behind") == 1,
               timeout=10, what="the fetch's end without the stream")
        with H2(port) as d:
            t0 = time.monotonic()
            st = d.response(d.request("/slowmiss", authority=AUTH), timeout=20)
            assert st.status == 200 and st.header("cache-status").startswith("surogat; hit")
            assert bytes(st.data) == body and time.monotonic() - t0 < 5
        assert not c.streams[sid].ended
        c.hold.discard(sid)
        c.conn.increment_flow_control_window(1 << 24, stream_id=sid)
        c.flush()
        st = c.response(sid, timeout=20)
        assert bytes(st.data) == body
    assert origin.hits("/slowmiss") == 1


def test_parked_streams_outlive_their_connection_or_reset(h2, origin):
    """A parked stream reset by its client, and a connection closed with streams parked:
    when the fetch ends they are let go (nothing written, nothing leaked), and the
    object serves the next client."""
    route = origin.route("/pk", body=b"y" * 50000, headers=CC, hold_head=True)
    sg, port = h2()
    c = H2(port)
    c.request("/pk", authority=AUTH)
    assert route.held.wait(10)
    sids = [c.request("/pk", authority=AUTH) for _ in range(5)]
    wait_until(lambda: sg.stat("coalesce_parked") == 5, 10, "5 parked streams")
    c.reset(sids[0])
    c.close()
    time.sleep(0.3)
    route.release.set()
    wait_until(lambda: sg.stat("coalesce_parked") == 0, 10, "parked streams let go")
    wait_until(lambda: sg.stat("h2_sess_open") == 0, 10, "the connection's end")
    with H2(port) as c:
        st = c.get("/pk", authority=AUTH)
        assert st.status == 200 and len(st.data) == 50000, st
        assert st.header("cache-status").startswith("surogat; hit"), st
    assert origin.hits("/pk") == 1


def test_upload_answered_over_h2(h2, origin):
    origin.route("/up", echo_sha=True)
    sg, port = h2()
    body = os.urandom(5 << 20)
    f = os.path.join(sg.workdir.parent, "up.bin")
    with open(f, "wb") as fh:
        fh.write(body)
    p = run([CURL, "-sS", "--max-time", "60", "--http2-prior-knowledge", "--data-binary",
             "@%s" % f, "http://127.0.0.1:%d/up" % port])
    assert p.stdout.decode().strip() == hashlib.sha256(body).hexdigest()


def test_slow_backend_stream_holds_up_no_other(h2, origin):
    origin.route("/slow", body=b"late", delay=3.0, headers={"Cache-Control": "no-store"})
    origin.route("/fast", body=b"f", headers=CC)
    sg, port = h2()
    warm(sg, "/fast")
    with H2(port) as c:
        slow = c.request("/slow", authority=AUTH)
        t0 = time.monotonic()
        sids = [c.request("/fast", authority=AUTH) for _ in range(99)]
        c.wait(lambda: all(c.streams[s].ended for s in sids), timeout=10, what="99 answers")
        assert time.monotonic() - t0 < 2
        st = c.response(slow, timeout=15)
        assert st.status == 200 and bytes(st.data) == b"late"


def test_trailers_are_dropped_both_ways(h2, origin):
    """Trailer fields are not passed on, as over HTTP/1.1: a client's trailers end its
    upload (the body still reaches the backend, chunked, without them) and a backend's
    chunked trailers end its answer (the client gets the body and no trailer block)."""
    origin.route("/up", echo_sha=True, headers={"Cache-Control": "no-store"})
    origin.route("/tr", raw=b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                            b"Trailer: x-sum\r\nCache-Control: no-store\r\n\r\n"
                            b"5\r\nhello\r\n0\r\nx-sum: 1\r\n\r\n")
    sg, port = h2()
    body = os.urandom(100000)
    with H2(port) as c:
        sid = c.request("/up", method="POST", authority=AUTH, end=False)
        c.send_body(sid, body, end=False)
        c.conn.send_headers(sid, [("x-sum", "abc")], end_stream=True)
        c.flush()
        st = c.response(sid)
        assert st.status == 200 and bytes(st.data).decode() == hashlib.sha256(body).hexdigest()
        st = c.get("/tr", authority=AUTH)
        assert st.status == 200 and bytes(st.data) == b"hello", st
        assert st.trailers is None and st.header("trailer") is None, st
    up = origin.last("/up")
    assert up.body == body and up.chunked and up.trailers == []
    assert not up.has("x-sum") and not up.has("trailer")


def test_esi_page_over_h2(h2, origin):
    """An ESI page in h2 streams: three at once on one connection (one fetch of the page,
    the others waiting on it), its includes fetched -- one a slow pass, one stored -- and
    the page assembled in document order in each stream, gzip or not; then a hit."""
    esi = {"Surrogate-Control": 'content="ESI/1.0"', "Cache-Control": "max-age=60",
           "Content-Type": "text/html"}
    origin.route("/page", body=b'<html><esi:include src="/a"/>-<esi:include src="/slow"/></html>',
                 headers=esi)
    origin.route("/a", body=b"[a]", headers=CC)
    origin.route("/slow", body=b"[slow]", headers={"Cache-Control": "no-store"}, delay=0.5)
    sg, port = h2()
    want = b"<html>[a]-[slow]</html>"
    with H2(port) as c:
        sids = [c.request("/page", authority=AUTH) for _ in range(3)]
        for sid in sids:
            st = c.response(sid)
            assert st.status == 200 and bytes(st.data) == want, st
        st = c.get("/page", authority=AUTH, headers=[("accept-encoding", "gzip")])
        body = bytes(st.data)
        if st.header("content-encoding") == "gzip":
            body = gzip.decompress(body)
        assert st.status == 200 and body == want, st
        assert st.header("surrogate-control") is None
    assert origin.hits("/page") == 1 and origin.hits("/a") == 1
    assert origin.hits("/slow") == 4


def test_policy_pipe_is_a_pass_over_h2(h2, origin, tmp_path):
    """No tunnel through a stream: a policy's pipe over h2 is fetched as a pass (the pipe
    hook's request, nothing stored), and the connection goes on; over HTTP/1.1 the same
    policy pipes."""
    pol = tmp_path / "pipe.lua"
    pol.write_text('function recv(req)\n  if req.url == "/pp" then return "pipe" end\nend\n')
    origin.route("/pp", body=b"piped or passed", headers=CC)
    sg, port = h2(args=["-f", str(pol)])
    with H2(port) as c:
        for _ in range(2):
            st = c.get("/pp", authority=AUTH)
            assert st.status == 200 and bytes(st.data) == b"piped or passed", st
        assert c.get("/pp", authority=AUTH).status == 200 and c.goaway is None
    assert origin.hits("/pp") == 3 and sg.stat("cache_stored") == 0
    assert sg.stat("policy_pipe") == 3
    assert httpc.fetch(sg.port, path="/pp").body == b"piped or passed"
    assert origin.hits("/pp") == 4 and sg.stat("policy_pipe") == 4
