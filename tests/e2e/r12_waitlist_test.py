"""Waiting lists: requests coalesced on a fetch in progress wait without a
worker thread, resume when the fetch streams or ends, and keep what the
policy put in req.ctx."""

import resource
import socket
import time

from crowd import Crowd

CC60 = {"Cache-Control": "max-age=60"}


def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError("timed out waiting for " + what)


def test_thousands_wait_without_threads(origin, surogat):
    """5,000 clients wait on one slow URL with thread_pool_max=50: each costs
    no worker, other URLs are served meanwhile without a 503, and all 5,000
    get the page from one backend request."""
    n = 5000
    have = raise_nofile(n + 500)
    assert have >= n + 200, "RLIMIT_NOFILE hard limit %d is too low for this test" % have
    body = b"the slow page " * 64
    slow = origin.route("/slow", body=body, headers=CC60, hold_head=True)
    origin.route("/other", body=b"other page", headers={"Cache-Control": "no-store"})
    sg = surogat(params={"thread_pools": "1", "thread_pool_min": "10",
                         "thread_pool_max": "50", "thread_queue_limit": "10000",
                         "coalesce_timeout": "60s", "coalesce_max_waiters": "10000"})
    before = sg.stats()
    crowd = Crowd(sg.port, "/slow", n)
    try:
        crowd.open(time.monotonic() + 60)
        assert slow.held.wait(10), "the backend never got /slow"
        # The crowd's arrival queues for workers (thread_queue_limit admits it
        # all); once read, each request parks and gives its worker back.
        try:
            wait_for(lambda: sg.stat("coalesce_parked") >= n - 1, 60, "parked requests")
        except AssertionError:
            st = sg.stats()
            raise AssertionError("%d of %d parked; dropped %d, on thread %d, overflow %d" % (
                st["coalesce_parked"], n - 1, st["sess_dropped"], st["coalesce_on_thread"],
                st["coalesce_overflow"]))
        st = sg.stats()
        assert st["threads"] <= 50, st["threads"]
        # Every worker but a handful is free: the others are served at once.
        for _ in range(20):
            t0 = time.monotonic()
            r = sg.get("/other", timeout=5)
            took = time.monotonic() - t0
            assert r.status == 200 and r.body == b"other page", r.status
            assert took < 1.0, "a request for another URL took %.2fs" % took
        assert sg.stat("coalesce_on_thread") == before["coalesce_on_thread"]
        slow.release.set()
        ok = crowd.pump(lambda: crowd.answered(body) == n, 120)
        assert ok, "%d of %d clients got the page" % (crowd.answered(body), n)
    finally:
        slow.release.set()
        crowd.close()
    assert origin.hits("/slow") == 1
    after = sg.stats()
    assert after["coalesce_parked"] == 0
    assert after["cache_coalesced"] - before["cache_coalesced"] == n - 1
    assert after["coalesce_rushed"] - before["coalesce_rushed"] == n - 1
    assert after["coalesce_timeout"] == before["coalesce_timeout"]
    assert after["sess_dropped"] == before["sess_dropped"]


def test_parked_request_times_out_and_passes(origin, surogat):
    """A parked request whose fetch never ends goes to the backend itself
    after coalesce_timeout, woken by the sweeper, not by a thread."""
    slow = origin.route("/stuck", body=b"late", headers=CC60, hold_head=True)
    sg = surogat(params={"coalesce_timeout": "1s"})
    first = Crowd(sg.port, "/stuck", 1)
    try:
        first.open(time.monotonic() + 10)
        assert slow.held.wait(10)
        origin.route("/stuck", body=b"second", headers=CC60)
        t0 = time.monotonic()
        r = sg.get("/stuck", timeout=10)
        took = time.monotonic() - t0
        assert r.status == 200 and r.body == b"second"
        assert 0.9 <= took < 3.0, took
        assert sg.stat("coalesce_timeout") == 1
        assert sg.stat("coalesce_parked") == 0
    finally:
        slow.release.set()
        first.close()


POLICY_CTX = """
function recv(req)
  req.ctx.who = req.http["x-who"]
  req.ctx.n = 41
  req.ctx.t = { a = "b", list = { 1, 2, 3 } }
  marker = "g-" .. (req.http["x-who"] or "")
end

function deliver(req, resp)
  resp.http["x-ctx"] = string.format("%s %d %s %d %s", req.ctx.who, req.ctx.n + 1,
                                     req.ctx.t.a, #req.ctx.t.list, marker)
end
"""

POLICY_UNCARRIABLE = """
function recv(req)
  req.ctx.f = function() return "kept" end
end

function deliver(req, resp)
  resp.http["x-ctx"] = req.ctx.f()
end
"""


def test_policy_state_survives_the_wait(origin, surogat, tmp_path):
    """req.ctx and the request's globals set in recv are there in deliver
    after the request waited without its worker and resumed on another."""
    pol = tmp_path / "ctx.lua"
    pol.write_text(POLICY_CTX)
    slow = origin.route("/p", body=b"page", headers=CC60, hold_head=True)
    sg = surogat(args=["-f", str(pol)], params={"thread_pool_min": "4"})
    conns = []
    try:
        for who in ("alice", "bob", "carol"):
            s = socket.create_connection(("127.0.0.1", sg.port), timeout=20)
            s.sendall(b"GET /p HTTP/1.1\r\nHost: surogat.test\r\nX-Who: %s\r\n\r\n" % who.encode())
            conns.append((who, s))
            if who == "alice":
                assert slow.held.wait(10)
        wait_for(lambda: sg.stat("coalesce_parked") == 2, 10, "2 parked requests")
        slow.release.set()
        for who, s in conns:
            data = b""
            while b"page" not in data:
                b = s.recv(65536)
                assert b, "closed before the answer: %r" % data
                data += b
            assert (b"x-ctx: %s 42 b 3 g-%s\r\n" % (who.encode(), who.encode())) in data.lower(), data
        assert sg.stat("coalesce_on_thread") == 0
    finally:
        slow.release.set()
        for _, s in conns:
            s.close()


def test_uncarriable_policy_state_waits_on_its_thread(origin, surogat, tmp_path):
    """A function in req.ctx cannot move between workers: that request waits
    on its worker, as before waiting lists, and still gets its answer."""
    pol = tmp_path / "fn.lua"
    pol.write_text(POLICY_UNCARRIABLE)
    slow = origin.route("/f", body=b"page", headers=CC60, hold_head=True)
    sg = surogat(args=["-f", str(pol)], params={"thread_pool_min": "4"})
    conns = []
    try:
        for i in range(2):
            s = socket.create_connection(("127.0.0.1", sg.port), timeout=20)
            s.sendall(b"GET /f HTTP/1.1\r\nHost: surogat.test\r\n\r\n")
            conns.append(s)
            if i == 0:
                assert slow.held.wait(10)
        wait_for(lambda: sg.stat("coalesce_on_thread") == 1, 10, "a wait on a thread")
        assert sg.stat("coalesce_parked") == 1  # on the list all the same
        slow.release.set()
        for s in conns:
            data = b""
            while b"page" not in data:
                b = s.recv(65536)
                assert b, "closed before the answer: %r" % data
                data += b
            assert b"x-ctx: kept\r\n" in data.lower(), data
    finally:
        slow.release.set()
        for s in conns:
            s.close()


def test_pipelined_request_after_a_parked_one(origin, surogat):
    """A request pipelined behind a parked one is served after it, from the
    bytes the parked request kept."""
    slow = origin.route("/a", body=b"first", headers=CC60, hold_head=True)
    origin.route("/b", body=b"second", headers=CC60)
    sg = surogat()
    s0 = socket.create_connection(("127.0.0.1", sg.port), timeout=20)
    try:
        s0.sendall(b"GET /a HTTP/1.1\r\nHost: surogat.test\r\n\r\n")
        assert slow.held.wait(10)
        s = socket.create_connection(("127.0.0.1", sg.port), timeout=20)
        s.sendall(b"GET /a HTTP/1.1\r\nHost: surogat.test\r\n\r\nGET /b HTTP/1.1\r\nHost: surogat.test\r\n\r\n")
        wait_for(lambda: sg.stat("coalesce_parked") == 1, 10, "a parked request")
        slow.release.set()
        data = b""
        while data.count(b"HTTP/1.1 200") < 2 or not data.endswith(b"second"):
            b = s.recv(65536)
            assert b, "closed: %r" % data
            data += b
        assert data.index(b"first") < data.index(b"second")
        s.close()
    finally:
        slow.release.set()
        s0.close()
