"""Overload: a full pool queue answers 503 + Retry-After at once and closes;
a backend connection limit answers 503 at once; both recover."""

import threading
import time

import httpc


def _fire(port, path, out, i):
    t0 = time.monotonic()
    res = {"i": i, "status": None, "dt": None, "retry_after": None, "closed": None,
           "error": None}
    try:
        with httpc.Conn(port, timeout=15) as c:
            c.request("GET", path)
            r = c.read_response()
            res["status"] = r.status
            res["dt"] = time.monotonic() - t0
            res["retry_after"] = r.header("Retry-After")
            res["date"] = r.has("Date")
            if r.status == 503:
                res["closed"] = c.wait_closed(3)[0]
    except Exception as e:  # noqa: BLE001 - reported by the test
        res["error"] = repr(e)
        res["dt"] = time.monotonic() - t0
    out.append(res)


def test_queue_overflow_503_then_recovery(origin, surogat):
    origin.route("/slow", body=b"slow", delay=1.5)
    # A slow backend keeps its worker busy only when fetches wait on their worker.
    sg = surogat(params={"thread_pools": "1", "thread_pool_min": "1", "thread_pool_max": "1",
                         "thread_queue_limit": "1", "backend_wait_worker": "on"})
    results = []
    first = threading.Thread(target=_fire, args=(sg.port, "/slow", results, 0))
    first.start()
    origin.wait_hits("/slow", 1, 10)  # the only worker is now busy
    threads = [threading.Thread(target=_fire, args=(sg.port, "/slow", results, i))
               for i in range(1, 6)]
    for t in threads:
        t.start()
    for t in [first] + threads:
        t.join(30)
    assert len(results) == 6
    errors = [r for r in results if r["error"]]
    assert not errors, "clients that got no response: %r" % errors
    ok = [r for r in results if r["status"] == 200]
    dropped = [r for r in results if r["status"] == 503]
    assert len(ok) + len(dropped) == 6, results
    # one worker busy, one request queued, the other four refused
    assert len(dropped) == 4 and len(ok) == 2, results
    for r in dropped:
        assert r["dt"] < 1.0, "503 took %.2fs: not refused at once" % r["dt"]
        assert r["retry_after"] is not None and r["retry_after"].isdigit(), r
        assert r["closed"], "connection left open after the overflow 503"
    st = sg.stats()
    assert st["sess_dropped"] == 4
    assert st["sess_queued"] >= 1
    # load gone: served again, and the slow ones were not lost
    assert origin.hits("/slow") == 2
    r = sg.get("/fast")
    assert r.status == 200 and r.body == b"ok"
    assert all(d["date"] for d in dropped), "overflow 503 without a Date header"


def test_backend_max_connections(origin, surogat):
    origin.route("/slow", body=b"slow", delay=1.0)
    sg = surogat(params={"backend_max_connections": "1"})
    results = []
    first = threading.Thread(target=_fire, args=(sg.port, "/slow", results, 0))
    first.start()
    origin.wait_hits("/slow", 1, 10)
    _fire(sg.port, "/other", results, 1)
    first.join(15)
    by = {r["i"]: r for r in results}
    assert by[0]["status"] == 200
    assert by[1]["status"] == 503 and by[1]["dt"] < 0.8, by[1]
    assert sg.stat("backend_busy") >= 1
    assert origin.hits("/other") == 0
    assert sg.get("/other").status == 200


def test_pool_grows_under_load_and_shrinks_when_idle(origin, surogat):
    """Waiting requests start new workers up to thread_pool_max; workers
    idle for thread_pool_timeout retire down to thread_pool_min."""
    origin.route("/slow", body=b"slow", delay=1.0)
    # Busy workers: fetches wait on them (without, six slow fetches need no new worker).
    sg = surogat(params={"thread_pools": "1", "thread_pool_min": "2", "thread_pool_max": "6",
                         "thread_pool_timeout": "500ms", "thread_queue_limit": "100",
                         "backend_wait_worker": "on"})
    assert sg.stat("threads") == 2
    results = []
    # Six different URLs: requests for one would wait for one fetch, parked without a worker.
    threads = [threading.Thread(target=_fire, args=(sg.port, "/slow?%d" % i, results, i))
               for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
    assert [r["status"] for r in results] == [200] * 6, results
    st = sg.stats()
    assert st["threads_created"] == 6 and st["sess_dropped"] == 0
    deadline = time.monotonic() + 10
    while sg.stat("threads") > 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    st = sg.stats()
    assert st["threads"] == 2 and st["threads_destroyed"] == 4, st
    assert sg.get("/fast").status == 200
