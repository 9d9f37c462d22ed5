"""Request coalescing: concurrent misses for one object wait for a single
fetch; uncacheable URLs (hit-for-miss) never make requests wait."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from cstatus import HFM, forwarded

CC60 = {"Cache-Control": "max-age=60"}


def concurrent_gets(sg, path, n, timeout=10.0, headers=None):
    """n GETs started together; [(Response, seconds)] in start order."""
    barrier = threading.Barrier(n, timeout=timeout)

    def one(_):
        barrier.wait()
        t0 = time.monotonic()
        r = sg.get(path, headers=headers, timeout=timeout)
        return r, time.monotonic() - t0

    with ThreadPoolExecutor(n) as ex:
        futs = [ex.submit(one, i) for i in range(n)]
        return [f.result(timeout=timeout + 5) for f in futs]


def test_coalescing(origin, surogat):
    origin.route("/cold", body=b"worth the wait" * 100, headers=CC60, delay=1.0)
    sg = surogat()
    before = sg.stats()
    t0 = time.monotonic()
    res = concurrent_gets(sg, "/cold", 20)
    took = time.monotonic() - t0
    assert all(r.status == 200 and r.body == b"worth the wait" * 100 for r, _ in res)
    assert origin.hits("/cold") == 1
    assert took < 3.0, "20 coalesced requests took %.2fs for one 1s fetch" % took
    statuses = sorted(r.header("Cache-Status") for r, _ in res)
    assert sum(forwarded(s, stored=True) for s in statuses) == 1, statuses
    # The others streamed from the fetch (collapsed), or found it stored already (hit).
    assert all(s.startswith(("surogat; fwd=miss; collapsed;", "surogat; hit;"))
               for s in statuses if not forwarded(s, stored=True)), statuses
    after = sg.stats()
    assert after["cache_coalesced"] - before["cache_coalesced"] >= 1
    assert after["cache_miss"] - before["cache_miss"] == 1
    assert (after["cache_hit"] - before["cache_hit"]
            + after["cache_streamed"] - before["cache_streamed"]) == 19
    assert after["coalesce_timeout"] == before["coalesce_timeout"]


def test_hit_for_miss_does_not_queue(origin, surogat):
    origin.route("/priv", body=b"mine", headers={"Cache-Control": "private"})
    sg = surogat()
    r = sg.get("/priv")  # leaves the hit-for-miss marker
    assert r.status == 200 and forwarded(r.header("Cache-Status"), stored=False, detail="private")
    origin.route("/priv", body=b"mine", headers={"Cache-Control": "private"}, delay=1.0)
    before = sg.stats()
    t0 = time.monotonic()
    res = concurrent_gets(sg, "/priv", 5)
    took = time.monotonic() - t0
    assert all(r.status == 200 and r.body == b"mine" for r, _ in res)
    assert all(r.header("Cache-Status") == HFM for r, _ in res)
    assert origin.hits("/priv") == 6
    reqs = origin.reqs("/priv")[1:]
    spread = max(q.t for q in reqs) - min(q.t for q in reqs)
    # queued behind each other they would come a second (the origin's delay) apart
    assert spread < 0.9, "the origin got the 5 requests over %.2fs: they queued" % spread
    assert took < 1.9, "5 uncacheable requests with a 1s origin took %.2fs" % took
    after = sg.stats()
    assert after["cache_hitmiss"] - before["cache_hitmiss"] == 5
    assert after["cache_coalesced"] == before["cache_coalesced"]
    assert after["cache_miss"] == before["cache_miss"]


def test_hit_for_miss_expires(origin, surogat):
    origin.route("/flip", body=b"v1", headers={"Cache-Control": "no-store"})
    sg = surogat(params={"hitmiss_ttl": "1s"})
    assert forwarded(sg.get("/flip").header("Cache-Status"), stored=False, detail="no-store")
    origin.route("/flip", body=b"v2", headers=CC60)
    assert sg.get("/flip").header("Cache-Status") == HFM
    time.sleep(1.2)
    r = sg.get("/flip")
    assert r.body == b"v2" and forwarded(r.header("Cache-Status"), stored=True)
    r = sg.get("/flip")
    assert r.body == b"v2" and r.header("Cache-Status").startswith("surogat; hit")
    assert origin.hits("/flip") == 3


def test_coalesce_timeout(origin, surogat):
    origin.route("/slow", body=b"slow", headers=CC60, delay=1.0)
    sg = surogat(params={"coalesce_timeout": "200ms"})
    before = sg.stats()
    res = concurrent_gets(sg, "/slow", 2)
    assert all(r.status == 200 and r.body == b"slow" for r, _ in res)
    assert origin.hits("/slow") == 2
    after = sg.stats()
    assert after["coalesce_timeout"] - before["coalesce_timeout"] == 1
    assert after["cache_stored"] - before["cache_stored"] == 1
    # The one that gave up waiting says so.
    assert sorted(r.header("Cache-Status") for r, _ in res) == [
        "surogat; fwd=miss; detail=coalesce-timeout", "surogat; fwd=uri-miss; stored"]
    r = sg.get("/slow")
    assert r.header("Cache-Status").startswith("surogat; hit")


def test_waiters_never_get_a_cut_body_as_complete(origin, surogat):
    """The fetch the others wait for dies mid-body.  Waiters that were
    streaming from it are cut too (the head is out: a cut connection is the
    only honest signal); none gets a truncated body as complete, and the
    next request fetches the object again."""
    body = b"z" * 100000
    origin.route("/flaky", body=body, headers=CC60, delay=0.6, die_after=1000)
    sg = surogat()
    out = {}

    def first():
        try:
            out["first"] = sg.get("/flaky", timeout=10)
        except Exception as e:  # noqa: BLE001 - expected: the body is cut
            out["first"] = e

    t = threading.Thread(target=first)
    t.start()
    origin.wait_hits("/flaky", 1, timeout=5)
    origin.route("/flaky", body=body, headers=CC60)  # a refetch succeeds

    def one(_):
        try:
            return sg.get("/flaky", timeout=10)
        except Exception as e:  # noqa: BLE001 - a streaming waiter is cut
            return e

    with ThreadPoolExecutor(3) as ex:
        res = list(ex.map(one, range(3)))
    t.join(10)
    assert not t.is_alive()
    for r in [out["first"]] + res:
        assert not hasattr(r, "body") or (r.status == 200 and r.body == body), \
            "a client got a cut body as complete: %r" % (r,)
    assert not (hasattr(out["first"], "body") and out["first"].body == body)
    assert sg.stat("cache_coalesced") >= 1
    r = sg.get("/flaky")
    assert r.body == body
    assert (r.header("Cache-Status").startswith("surogat; hit")
            or forwarded(r.header("Cache-Status"), stored=True))
    n = origin.hits("/flaky")
    assert sg.get("/flaky").header("Cache-Status").startswith("surogat; hit")
    assert origin.hits("/flaky") == n


def test_uncacheable_variant_leaves_cached_variants(origin, surogat):
    """An uncacheable response for one variant must not hide a fresh cached
    variant of the same URL."""
    body = lambda q: (q.header("Accept-Encoding") or "").encode()  # noqa: E731
    origin.route("/vv", body=body, headers={"Cache-Control": "max-age=60",
                                             "Vary": "Accept-Encoding"})
    # With gzip support Accept-Encoding no longer splits variants (g_gzip_test.py).
    sg = surogat(params={"http_gzip_support": "off"})
    r = sg.get("/vv", headers={"Accept-Encoding": "gzip"})
    assert forwarded(r.header("Cache-Status"), stored=True)
    origin.route("/vv", body=body, headers={"Cache-Control": "private",
                                             "Vary": "Accept-Encoding"})
    r = sg.get("/vv", headers={"Accept-Encoding": "br"})
    assert r.body == b"br" and forwarded(r.header("Cache-Status"), stored=False, detail="private")
    r = sg.get("/vv", headers={"Accept-Encoding": "gzip"})
    assert r.body == b"gzip"
    assert r.header("Cache-Status").startswith("surogat; hit"), r
    assert origin.hits("/vv") == 2


def test_only_if_cached_never_contacts_origin(origin, surogat):
    origin.route("/oicp", body=b"private", headers={"Cache-Control": "private"})
    sg = surogat()
    assert sg.get("/oicp").status == 200  # hit-for-miss marker
    r = sg.get("/oicp", headers={"Cache-Control": "only-if-cached"})
    assert r.status == 504, r
    assert origin.hits("/oicp") == 1


def _assert_not_serialized(origin, sg, path, n=4, delay=0.5):
    t0 = time.monotonic()
    res = concurrent_gets(sg, path, n)
    took = time.monotonic() - t0
    assert all(r.status == 200 for r, _ in res)
    assert origin.hits(path) >= n
    assert took < delay * 2 + 0.4, (
        "%d concurrent requests for a URL that is fetched every time took %.2fs with a %.1fs "
        "origin: they queued behind each other (Cache-Status %s)"
        % (n, took, delay, [r.header("Cache-Status") for r, _ in res]))


def test_stale_on_arrival_does_not_queue(origin, surogat):
    """Age beyond max-age: stale on arrival, never usable without revalidation."""
    origin.route("/soa", body=b"old", headers={"Cache-Control": "max-age=60", "Age": "100"})
    sg = surogat()
    assert sg.get("/soa").status == 200
    origin.route("/soa", body=b"old", delay=0.5,
                 headers={"Cache-Control": "max-age=60", "Age": "100"})
    _assert_not_serialized(origin, sg, "/soa")


def test_no_cache_response_does_not_queue(origin, surogat):
    """no-cache needs revalidation on every use, which this cache does not
    do yet: every request fetches, so none may wait for another."""
    origin.route("/nc", body=b"nc", headers={"Cache-Control": "no-cache, max-age=60"})
    sg = surogat()
    assert sg.get("/nc").status == 200
    origin.route("/nc", body=b"nc", delay=0.5, headers={"Cache-Control": "no-cache, max-age=60"})
    _assert_not_serialized(origin, sg, "/nc")
