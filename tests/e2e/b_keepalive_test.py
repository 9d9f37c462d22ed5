"""Keep-alive and pipelining on the client side, connection pooling and
stale-connection retries on the backend side, idle timeouts."""

import threading
import time

import httpc


def _run_clients(client, n):
    """client(0) .. client(n - 1), each in a thread of its own, all joined."""
    threads = [threading.Thread(target=client, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def _delta(before, after, name):
    return after[name] - before[name]


def test_http11_keepalive_single_connection(origin, surogat):
    origin.route("/k", body=lambda req: req.query.encode())
    sg = surogat()
    before = sg.stats()
    n = 20
    with sg.conn() as c:
        for i in range(n):
            c.request("GET", "/k?%d" % i)
            r = c.read_response()
            assert r.status == 200 and r.body == str(i).encode()
            assert "close" not in r.tokens("Connection")
        assert c.is_open(0.2)
    after = sg.stats()
    assert _delta(before, after, "sess_conn") == 1
    assert _delta(before, after, "client_req") == n
    assert origin.hits("/k") == n
    # backend connections are pooled: sequential requests share one
    assert origin.conns <= 2, "%d backend connections for %d requests" % (origin.conns, n)
    assert _delta(before, after, "backend_conn") == origin.conns
    assert _delta(before, after, "backend_reuse") >= n - origin.conns
    assert _delta(before, after, "backend_req") == n


def test_backend_pool_shared_across_client_connections(origin, surogat):
    sg = surogat()
    before = sg.stats()
    for i in range(10):
        r = sg.get("/p%d" % i)
        assert r.status == 200
    after = sg.stats()
    assert _delta(before, after, "sess_conn") == 10
    assert origin.conns <= 2, "%d backend connections for 10 requests" % origin.conns
    assert _delta(before, after, "backend_reuse") >= 8


def test_http10_keepalive(origin, surogat):
    origin.route("/k", body=b"ten")
    sg = surogat()
    before = sg.stats()
    with sg.conn() as c:
        for _ in range(3):
            c.send(b"GET /k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            r = c.read_response()
            assert r.status == 200 and r.body == b"ten"
            assert r.header("Content-Length") == "3"
            assert "keep-alive" in r.tokens("Connection")
        assert c.is_open(0.2)
    assert _delta(before, sg.stats(), "sess_conn") == 1


def test_http10_without_keepalive_closes(origin, surogat):
    sg = surogat()
    with sg.conn() as c:
        c.send(b"GET /k HTTP/1.0\r\nHost: a\r\n\r\n")
        r = c.read_response()
        assert r.status == 200
        assert "keep-alive" not in r.tokens("Connection")
        closed, extra = c.wait_closed(5)
        assert closed and extra == b""


def test_http11_connection_close(origin, surogat):
    sg = surogat()
    with sg.conn() as c:
        c.request("GET", "/k", {"Connection": "close"})
        r = c.read_response()
        assert r.status == 200
        assert "close" in r.tokens("Connection")
        closed, extra = c.wait_closed(5)
        assert closed and extra == b""


def test_pipelining_in_order(origin, surogat):
    origin.route("/slow", body=b"slow", delay=0.3)
    origin.default.body = lambda req: req.path.encode()
    sg = surogat()
    paths = ["/slow", "/a", "/b", "/slow", "/c"]
    before = sg.stats()
    with sg.conn() as c:
        c.send(b"".join(httpc.build_request("GET", p) for p in paths))
        for p in paths:
            r = c.read_response()
            assert r.status == 200
            assert r.body == (b"slow" if p == "/slow" else p.encode())
        assert c.is_open(0.2)
    after = sg.stats()
    assert _delta(before, after, "sess_conn") == 1
    assert [q.path for q in origin.reqs()] == paths


def test_pipelining_with_bodies(origin, surogat):
    origin.default.echo = True
    sg = surogat()
    wire = (httpc.build_request("POST", "/1", body=b"first body")
            + httpc.build_request("GET", "/2")
            + b"POST /3 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
            + httpc.chunked(b"third body, chunked", size=4)
            + httpc.build_request("POST", "/4", body=b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"))
    with sg.conn() as c:
        c.send(wire)
        bodies = [c.read_response().body for _ in range(4)]
    assert bodies == [b"first body", b"", b"third body, chunked",
                      b"GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n"]
    assert [q.path for q in origin.reqs()] == ["/1", "/2", "/3", "/4"]


def test_pipelining_stops_at_connection_close(origin, surogat):
    sg = surogat()
    wire = (httpc.build_request("GET", "/1")
            + httpc.build_request("GET", "/2", {"Connection": "close"})
            + httpc.build_request("GET", "/3"))
    with sg.conn() as c:
        c.send(wire)
        raw = c.read_until_close(10)
    rs = httpc.parse_responses(raw)
    assert [r.status for r in rs] == [200, 200]
    assert [q.path for q in origin.reqs()] == ["/1", "/2"]


def test_idle_keepalive_connection_times_out(origin, surogat):
    sg = surogat(params={"timeout_idle": "1s"})
    with sg.conn() as c:
        c.request("GET", "/i")
        assert c.read_response().status == 200
        t0 = time.monotonic()
        closed, extra = c.wait_closed(8)
        dt = time.monotonic() - t0
    assert closed and extra == b"", "idle connection not closed within 8s (timeout_idle=1s)"
    assert 0.7 <= dt <= 5, "closed after %.2fs with timeout_idle=1s" % dt
    sg.wait_stat("sess_timeout_idle", 1)


def test_keepalive_survives_pause(origin, surogat):
    """A pause longer than timeout_linger parks the session in the waiter;
    the next request on it must still be served."""
    sg = surogat(params={"timeout_idle": "5s", "timeout_linger": "10ms"})
    with sg.conn() as c:
        c.request("GET", "/1")
        assert c.read_response().status == 200
        time.sleep(0.4)
        c.request("GET", "/2")
        assert c.read_response().status == 200
        time.sleep(0.4)
        c.request("GET", "/3")
        assert c.read_response().status == 200
    st = sg.stats()
    assert st["sess_waited"] >= 2
    assert st["sess_conn"] == 1


def test_backend_reused_after_head_and_chunked(origin, surogat):
    origin.route("/ch", chunked=True, chunks=[b"abc", b"def"])
    origin.route("/h", body=b"x" * 500)
    origin.route("/204", status=204)
    sg = surogat()
    with sg.conn() as c:
        for m, p in [("GET", "/ch"), ("HEAD", "/h"), ("GET", "/204"), ("GET", "/ch"),
                     ("HEAD", "/h"), ("GET", "/h")]:
            c.request(m, p)
            r = c.read_response(m)
            assert r.status in (200, 204)
    # A HEAD that reaches the backend as HEAD is answered with the length of a
    # body that does not follow: that connection is not reused (r11_backend_test.py).
    heads = sum(1 for q in origin.reqs() if q.method == "HEAD")
    assert origin.conns == 1 + heads, "backend connection not reused (%d opened, %d HEAD)" % (
        origin.conns, heads)
    assert sg.stat("backend_close_unread") == heads


def test_stale_backend_connection_closed_after_response(origin, surogat):
    """The origin closes every connection right after responding without
    saying so: each request must still succeed."""
    origin.route("/s", body=b"fresh", close_after=True)
    sg = surogat()
    for _ in range(3):
        r = sg.get("/s")
        assert r.status == 200 and r.body == b"fresh"
        time.sleep(0.2)
    assert origin.hits("/s") == 3


def test_stale_backend_connection_retried(origin, surogat):
    """A reused connection the origin drops on the next request (the race
    with its idle timeout): an idempotent GET is retried on a new one."""
    origin.drop_after = 1
    sg = surogat()
    assert sg.get("/first").status == 200
    time.sleep(0.1)
    before = sg.stats()
    r = sg.get("/second")
    assert r.status == 200, "GET on a stale pooled connection not retried: %r" % r
    assert r.body == b"ok"
    after = sg.stats()
    assert _delta(before, after, "backend_retry") == 1
    assert origin.hits("/second") == 2
    assert origin.conns == 2


def test_post_not_retried_on_stale_connection(origin, surogat):
    origin.drop_after = 1
    sg = surogat()
    assert sg.get("/first").status == 200
    time.sleep(0.1)
    before = sg.stats()
    r = sg.request("POST", "/post", body=b"not idempotent")
    assert r.status in (502, 503), "POST on a dropped connection answered %r" % r
    assert origin.hits("/post") == 1, "POST sent to the origin %d times" % origin.hits("/post")
    assert _delta(before, sg.stats(), "backend_retry") == 0


def test_origin_connection_close_not_reused(origin, surogat):
    """An origin that says Connection: close: the client connection stays
    open, the close is not passed on, and the backend connection is not
    reused (so no retry is needed)."""
    origin.route("/cc", body=b"cc", headers={"Connection": "close"}, close_after=True)
    sg = surogat()
    with sg.conn() as c:
        for _ in range(3):
            c.request("GET", "/cc")
            r = c.read_response()
            assert r.status == 200 and r.body == b"cc"
            assert "close" not in r.tokens("Connection")
    st = sg.stats()
    assert origin.conns == 3
    assert st["backend_retry"] == 0 and st["backend_reuse"] == 0


def test_many_keepalive_connections_taken_from_the_set(origin, surogat):
    """Forty connections sending requests in turn from four threads: every
    response arrives, in order, and workers take ready sessions from the
    waiter's set themselves rather than each through a hand-off."""
    origin.route("/c", body=lambda req: req.query.encode(),
                 headers={"Cache-Control": "max-age=60"})
    sg = surogat(params={"thread_pool_min": "2"})
    errors = []

    def client(k):
        try:
            conns = [sg.conn() for _ in range(10)]
            for rnd in range(30):
                for i, c in enumerate(conns):
                    c.request("GET", "/c?%d" % ((k * 10 + i) % 7))
                for i, c in enumerate(conns):
                    r = c.read_response()
                    want = str((k * 10 + i) % 7).encode()
                    if r.status != 200 or r.body != want:
                        errors.append((k, i, rnd, r.status, r.body))
            for c in conns:
                c.close()
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    _run_clients(client, 4)
    assert not errors, errors[:5]
    st = sg.stats()
    assert st["client_req"] == 4 * 10 * 30
    assert st["sess_conn"] == 40
    assert st["sess_taken"] > 0, "no worker took a ready session from the set"
    sg.wait_stat("sess_closed", 40)


def test_requests_racing_the_idle_sweep(origin, surogat):
    """Requests sent just as timeout_idle runs out: each one is either
    answered in full or finds its connection closed before any byte of a
    response; the daemon keeps serving and counts every close."""
    origin.route("/r", body=b"r" * 100, headers={"Cache-Control": "max-age=60"})
    sg = surogat(params={"timeout_idle": "0.3s"})
    outcomes = {"ok": 0, "closed": 0}
    bad = []
    lock = threading.Lock()

    def client(k):
        for rnd in range(6):
            try:
                with sg.conn(timeout=5) as c:
                    c.request("GET", "/r")
                    assert c.read_response().status == 200
                    # around the deadline: 0.25 s to 0.35 s in 10 ms steps
                    time.sleep(0.25 + 0.01 * ((k + rnd) % 11))
                    try:
                        c.request("GET", "/r")
                        r = c.read_response()
                    except httpc.Incomplete as e:
                        if e.partial:
                            bad.append(("truncated", e.partial))
                        else:
                            with lock:
                                outcomes["closed"] += 1
                        continue
                    except ConnectionError:
                        with lock:
                            outcomes["closed"] += 1
                        continue
                    if r.status == 200 and r.body == b"r" * 100:
                        with lock:
                            outcomes["ok"] += 1
                    else:
                        bad.append(r)
            except Exception as e:  # noqa: BLE001
                bad.append(e)

    _run_clients(client, 11)
    assert not bad, bad[:5]
    assert outcomes["ok"] + outcomes["closed"] == 66
    assert sg.get("/r").status == 200
    sg.wait_stat("sess_closed", 67)
    assert sg.stats()["sess_idle"] == 0
