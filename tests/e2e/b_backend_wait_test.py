"""A pass or miss waits for its backend's answer without a worker
(backend_wait_worker=off, the default): the waiter watches the backend
connection and a worker takes the request on once the answer is readable
or the first byte timeout passes.  Each failure of that wait must end as
the blocking wait (backend_wait_worker=on) ended it."""

import socket
import threading
import time

import pytest

import httpc

PASS = {"Cookie": "sid=1"}  # credentials: a pass
MODES = ["off", "on"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["pass", "miss"])
def test_never_answers_504_on_time(origin, surogat, mode, kind):
    origin.route("/hang", hang=True)
    sg = surogat(params={"backend_first_byte_timeout": "1s", "backend_wait_worker": mode})
    t0 = time.monotonic()
    r = sg.get("/hang", headers=PASS if kind == "pass" else None, timeout=20)
    dt = time.monotonic() - t0
    assert r.status == 504, r
    # The timer in the waiter's set keeps the deadline, not a once-a-second sweep.
    assert 0.95 <= dt <= 1.6, "504 after %.2fs with backend_first_byte_timeout=1s" % dt
    st = sg.stats()
    assert st["backend_timeout"] == 1
    assert st["fetch_waited"] == (1 if mode == "off" else 0)
    assert sg.get("/fine").status == 200


def _close_after_request(delay):
    def script(sock, req, stop_ev):
        stop_ev.wait(delay)
        return False  # closed without a byte of answer
    return script


@pytest.mark.parametrize("mode", MODES)
def test_backend_closes_while_waited_on(origin, surogat, mode):
    origin.route("/gone", script=_close_after_request(0.3))
    sg = surogat(params={"backend_wait_worker": mode})
    r = sg.get("/gone", headers=PASS, timeout=20)
    assert r.status == 502, r
    assert sg.stat("fetch_waited") == (1 if mode == "off" else 0)
    # the next pass, on a new connection, is answered
    assert sg.get("/fine", headers=PASS).status == 200


def test_backend_closes_reused_connection_retried(origin, surogat):
    """A pooled connection the backend closes while the request waits on it:
    nothing came back, so the request is retried on a new one, waiting again."""
    per_conn = {}

    def script(sock, req, stop_ev):
        per_conn[req.conn_id] = per_conn.get(req.conn_id, 0) + 1
        if per_conn[req.conn_id] == 2:
            return False  # the second request on a pooled connection: closed unanswered
        sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        return True
    origin.route("/r", script=script)
    sg = surogat()
    assert sg.get("/r", headers=PASS).status == 200
    # the client has its answer before the connection is back in the pool
    time.sleep(0.3)
    r = sg.get("/r", headers=PASS)
    assert r.status == 200 and r.body == b"ok", r
    st = sg.stats()
    assert st["backend_retry"] == 1
    assert st["fetch_waited"] == 3


def test_client_closes_while_waited_on(origin, surogat):
    route = origin.route("/held", hold_head=True, body=b"late")
    sg = surogat()
    s = socket.create_connection(("127.0.0.1", sg.port), timeout=10)
    s.sendall(b"GET /held HTTP/1.1\r\nHost: x\r\nCookie: a=b\r\n\r\n")
    assert route.held.wait(10)
    s.close()
    time.sleep(0.2)
    route.release.set()
    # the answer found nobody: the daemon goes on, the backend connection is not stuck
    for _ in range(3):
        r = sg.get("/fine", headers=PASS)
        assert r.status == 200, r
    assert sg.stat("fetch_waited") >= 4


def test_many_waiting_few_workers(origin, surogat):
    """40 passes and misses whose backend takes a second, with 4 workers in
    all: none holds a worker while it waits, so all are answered in about a
    second, none refused."""
    origin.route("/slow", delay=1.0, body=b"slow")
    sg = surogat(params={"thread_pools": "1", "thread_pool_min": "4",
                         "thread_pool_max": "4"})
    n = 40
    results = [None] * n

    def one(i):
        try:
            results[i] = httpc.fetch(sg.port, "GET", "/slow?i=%d" % i,
                                     PASS if i % 2 else None, timeout=20)
        except Exception as e:  # noqa: BLE001 -- reported below
            results[i] = e
    t0 = time.monotonic()
    ths = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(30)
    dt = time.monotonic() - t0
    bad = [(i, r) for i, r in enumerate(results)
           if isinstance(r, Exception) or r is None or r.status != 200 or r.body != b"slow"]
    assert not bad, bad[:5]
    # Blocked workers would take 10 rounds of a second (or refuse with 503).
    assert dt < 5, "40 one-second answers with 4 workers took %.1fs" % dt
    assert sg.stat("fetch_waited") >= n


def test_waiting_many_blocking_refused(origin, surogat):
    """The same load with backend_wait_worker=on: each waiting request holds
    a worker, so the bounded queue fills and refuses -- the overload
    behaviour the wait without a worker leaves as it was."""
    origin.route("/slow", delay=1.0, body=b"slow")
    sg = surogat(params={"thread_pools": "1", "thread_pool_min": "4",
                         "thread_pool_max": "4", "thread_queue_limit": "8",
                         "backend_wait_worker": "on"})
    n = 40
    statuses = []
    lock = threading.Lock()

    def one(i):
        try:
            r = httpc.fetch(sg.port, "GET", "/slow?i=%d" % i, None, timeout=30)
            with lock:
                statuses.append(r.status)
        except Exception:  # noqa: BLE001 -- a refused connection counts as refused
            with lock:
                statuses.append(0)
    ths = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(40)
    assert len(statuses) == n
    assert statuses.count(200) < n, "nothing refused with 4 blocked workers"
    assert all(s in (200, 503, 0) for s in statuses), statuses
