"""Stale objects: revalidation with the stored validators (a 304 renews the
copy), grace (stale-while-revalidate, default_grace) while a background
task refreshes, stale-if-error when the backend fails, and the client's
max-age=0 / no-cache forcing revalidation."""

import email.utils
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from cstatus import forwarded

# From the cache: a hit, or a stored copy sent after going forward (RFC 9211:
# fwd=stale with the backend's status, 304 for a revalidation, 5xx for
# stale-if-error).
HIT_RE = re.compile(r"surogat; (?:hit|fwd=stale; fwd-status=\d{3}(?:; stored)?); ttl=(-?\d+)")
EXPIRE = 1.3  # sleep that takes a max-age=1 object past its freshness


def http_date(t):
    return email.utils.formatdate(t, usegmt=True)


def delta(before, after, name):
    return after[name] - before[name]


def hit_ttl(r):
    cs = r.header("Cache-Status")
    m = HIT_RE.fullmatch(cs or "")
    assert m, "not from the cache: Cache-Status %r in %r" % (cs, r)
    return int(m.group(1))


def is_stale(r):
    """Delivered past its freshness: Cache-Status says ttl=-N (-0 within the first second)."""
    hit_ttl(r)
    return "; ttl=-" in r.header("Cache-Status")


def assert_miss(r, body):
    assert r.status == 200, r
    assert r.body == body, r
    assert forwarded(r.header("Cache-Status"), stored=True), r


def assert_cached(r, body, status=200):
    """A response delivered from a stored object (hit, grace, stale or renewed)."""
    assert r.status == status, r
    assert r.body == body, r
    assert r.headers_all("Content-Length") == [str(len(body))], r
    age = r.headers_all("Age")
    assert len(age) == 1 and age[0].isdigit(), r
    return int(age[0]), hit_ttl(r)


def conditional_fields(q):
    return (q.headers_all("If-None-Match"), q.headers_all("If-Modified-Since"))


def timed_get(sg, path, headers=None, timeout=10.0):
    t0 = time.monotonic()
    r = sg.get(path, headers=headers, timeout=timeout)
    return r, time.monotonic() - t0


def concurrent_gets(sg, path, n, timeout=10.0):
    """n GETs started together; [(Response, seconds)]."""
    barrier = threading.Barrier(n, timeout=timeout)

    def one(_):
        barrier.wait()
        return timed_get(sg, path, timeout=timeout)

    with ThreadPoolExecutor(n) as ex:
        futs = [ex.submit(one, i) for i in range(n)]
        return [f.result(timeout=timeout + 5) for f in futs]


class Background:
    """One GET in a thread; join() returns (Response, seconds) or raises what it raised."""

    def __init__(self, sg, path, headers=None):
        self.out = {}
        self.t = threading.Thread(target=self._run, args=(sg, path, headers), daemon=True)
        self.t.start()

    def _run(self, sg, path, headers):
        try:
            self.out["r"] = timed_get(sg, path, headers)
        except Exception as e:  # noqa: BLE001 - re-raised in join()
            self.out["e"] = e

    def join(self, timeout=10.0):
        self.t.join(timeout)
        assert not self.t.is_alive(), "the background request did not finish in %ss" % timeout
        if "e" in self.out:
            raise self.out["e"]
        return self.out["r"]


# -- revalidation ------------------------------------------------------------------


def test_revalidation_304_renews_object(origin, surogat):
    body = b"original body, stored once. " * 40
    origin.route("/r", conditional=True, body=body,
                 headers={"ETag": '"v1"', "Cache-Control": "max-age=1", "X-Rev": "1"})
    sg = surogat()
    assert_miss(sg.get("/r"), body)
    assert conditional_fields(origin.last("/r")) == ([], [])
    time.sleep(EXPIRE)
    # The origin's 304 brings new fields; a 200 from it would carry another body.
    origin.route("/r", conditional=True, body=b"must never be sent",
                 headers={"ETag": '"v1"', "Cache-Control": "max-age=60", "X-Rev": "2"})
    before = sg.stats()
    r = sg.get("/r")
    q = origin.last("/r")
    assert origin.hits("/r") == 2
    assert q.method == "GET"
    assert conditional_fields(q) == (['"v1"'], []), q.raw_head
    assert q.answered == 304
    assert r.status == 200, r
    assert r.body == body
    assert r.headers_all("Content-Length") == [str(len(body))], r
    assert r.headers_all("X-Rev") == ["2"], r
    assert r.headers_all("Cache-Control") == ["max-age=60"], r
    assert r.headers_all("ETag") == ['"v1"'], r
    after = sg.stats()
    assert delta(before, after, "cache_revalidated") == 1
    assert delta(before, after, "cache_stale_if_error") == 0
    assert delta(before, after, "cache_hit_grace") == 0
    # Later requests are hits on the renewed copy, with the 304's fields.
    with sg.conn() as c:
        for _ in range(3):
            c.request("GET", "/r")
            h = c.read_response()
            _, ttl = assert_cached(h, body)
            assert 55 <= ttl <= 60, h
            assert h.headers_all("X-Rev") == ["2"], h
            assert h.headers_all("Cache-Control") == ["max-age=60"], h
    assert origin.hits("/r") == 2
    end = sg.stats()
    assert delta(after, end, "cache_hit") == 3
    assert delta(after, end, "cache_revalidated") == 0
    assert end["n_object"] == 1, "the stale copy was not replaced by the renewed one"


@pytest.mark.parametrize("validators", ["last-modified", "both"])
def test_revalidation_sends_last_modified(origin, surogat, validators):
    lm = http_date(time.time() - 3600)
    hdrs = {"Last-Modified": lm, "Cache-Control": "max-age=1"}
    if validators == "both":
        hdrs["ETag"] = 'W/"w7"'
    origin.route("/lm", conditional=True, body=b"dated body", headers=hdrs)
    sg = surogat()
    assert_miss(sg.get("/lm"), b"dated body")
    time.sleep(EXPIRE)
    hdrs["Cache-Control"] = "max-age=60"  # what the 304 brings
    origin.route("/lm", conditional=True, body=b"dated body", headers=hdrs)
    before = sg.stats()
    r = sg.get("/lm")
    q = origin.last("/lm")
    want_inm = ['W/"w7"'] if validators == "both" else []
    assert conditional_fields(q) == (want_inm, [lm]), q.raw_head
    assert q.answered == 304
    assert r.status == 200 and r.body == b"dated body", r
    assert r.headers_all("Last-Modified") == [lm], r
    after = sg.stats()
    assert delta(before, after, "cache_revalidated") == 1
    assert_cached(sg.get("/lm"), b"dated body")
    assert origin.hits("/lm") == 2


@pytest.mark.parametrize("date_in_304", [False, True], ids=["no-date", "date"])
def test_304_renews_freshness(origin, surogat, date_in_304):
    """A 304 makes the stored copy fresh again for its max-age, counted from
    the 304 -- whether or not the 304 carries a Date (an origin without a
    clock sends none; the cache then dates the 304 on receipt, RFC 9110
    section 6.6.1, it does not keep the first response's Date)."""
    origin.route("/fr", conditional=True, body=b"renew me",
                 headers={"ETag": '"f"', "Cache-Control": "max-age=2"})
    sg = surogat()
    assert_miss(sg.get("/fr"), b"renew me")
    time.sleep(2.2)
    if date_in_304:
        origin.route("/fr", conditional=True, body=b"renew me",
                     headers={"ETag": '"f"', "Cache-Control": "max-age=2",
                              "Date": http_date(time.time())})
    r = sg.get("/fr")
    assert r.status == 200 and r.body == b"renew me", r
    assert origin.last("/fr").answered == 304
    assert origin.hits("/fr") == 2
    h = sg.get("/fr")
    assert origin.hits("/fr") == 2, (
        "the copy a 304 renewed 0s ago (max-age=2) was not fresh: the next request went to "
        "the origin again (%r)" % (conditional_fields(origin.last("/fr")),))
    age, ttl = assert_cached(h, b"renew me")
    assert age <= 1 and ttl >= 1, h


def test_revalidation_200_replaces_object(origin, surogat):
    origin.route("/new", conditional=True, body=b"one",
                 headers={"ETag": '"v1"', "Cache-Control": "max-age=1"})
    # no validator: nothing to revalidate with, a plain fetch
    origin.route("/plain", body=b"plain one", headers={"Cache-Control": "max-age=1"})
    sg = surogat()
    assert_miss(sg.get("/new"), b"one")
    assert_miss(sg.get("/plain"), b"plain one")
    time.sleep(EXPIRE)
    origin.route("/new", conditional=True, body=b"two, longer",
                 headers={"ETag": '"v2"', "Cache-Control": "max-age=60"})
    origin.route("/plain", body=b"plain two", headers={"Cache-Control": "max-age=60"})
    before = sg.stats()
    r = sg.get("/new")
    q = origin.last("/new")
    assert conditional_fields(q) == (['"v1"'], []), q.raw_head
    assert q.answered == 200
    assert_miss(r, b"two, longer")
    assert r.header("ETag") == '"v2"'
    r = sg.get("/plain")
    assert conditional_fields(origin.last("/plain")) == ([], [])
    assert_miss(r, b"plain two")
    after = sg.stats()
    assert delta(before, after, "cache_revalidated") == 0
    assert delta(before, after, "cache_stored") == 2
    h = sg.get("/new")
    assert_cached(h, b"two, longer")
    assert h.header("ETag") == '"v2"'
    assert_cached(sg.get("/plain"), b"plain two")
    assert origin.hits("/new") == 2 and origin.hits("/plain") == 2
    assert sg.stat("n_object") == 2


def test_client_conditional_during_revalidation(origin, surogat):
    """The backend is asked with our validator, not the client's; the
    client's own condition is then answered from the renewed copy."""
    origin.route("/cc", conditional=True, body=b"conditional body",
                 headers={"ETag": '"c1"', "Cache-Control": "max-age=1"})
    sg = surogat()
    assert_miss(sg.get("/cc"), b"conditional body")
    time.sleep(EXPIRE)
    origin.route("/cc", conditional=True, body=b"conditional body",
                 headers={"ETag": '"c1"', "Cache-Control": "max-age=60"})
    before = sg.stats()
    r = sg.get("/cc", headers={"If-None-Match": '"someone-else"'})
    q = origin.last("/cc")
    assert conditional_fields(q) == (['"c1"'], []), q.raw_head
    assert q.answered == 304
    assert r.status == 200 and r.body == b"conditional body", r
    r = sg.get("/cc", headers={"If-None-Match": '"c1"'})
    assert r.status == 304 and r.body == b"", r
    assert r.header("ETag") == '"c1"'
    assert origin.hits("/cc") == 2
    after = sg.stats()
    assert delta(before, after, "cache_revalidated") == 1
    assert delta(before, after, "cache_304") == 1


def test_keep_zero_drops_validator(origin, surogat):
    """default_keep=0: an object past its freshness (no stale windows) is not
    kept for revalidation, so the next fetch is unconditional."""
    origin.route("/k0", conditional=True, body=b"keep none",
                 headers={"ETag": '"k"', "Cache-Control": "max-age=1"})
    sg = surogat(params={"default_keep": "0s", "default_stale_if_error": "0s"})
    assert_miss(sg.get("/k0"), b"keep none")
    time.sleep(EXPIRE)
    r = sg.get("/k0")
    q = origin.last("/k0")
    assert origin.hits("/k0") == 2
    assert conditional_fields(q) == ([], []), (
        "default_keep=0 but the expired object was still revalidated: %r" % q.raw_head)
    assert q.answered == 200
    assert_miss(r, b"keep none")
    assert sg.stat("cache_revalidated") == 0


# -- the client forces revalidation ----------------------------------------------------


def test_client_max_age_0_and_no_cache_revalidate(origin, surogat):
    origin.route("/f", conditional=True, body=b"fresh body",
                 headers={"ETag": '"f1"', "Cache-Control": "max-age=60"})
    origin.route("/nv", body=lambda q: b"no validator #%d" % origin.hits("/nv"),
                 headers={"Cache-Control": "max-age=60"})
    # every client directive followed (r11_cache_test.py limits them to one per second)
    sg = surogat(params={"client_revalidate_interval": "1ms"})
    assert_miss(sg.get("/f"), b"fresh body")
    assert_miss(sg.get("/nv"), b"no validator #1")
    time.sleep(0.1)  # a non-zero age, so that max-age=0 cannot be satisfied
    n = 1
    for cc in ({"Cache-Control": "max-age=0"}, {"Cache-Control": "no-cache"},
               {"Pragma": "no-cache"}):
        before = sg.stats()
        r = sg.get("/f", headers=cc)
        n += 1
        assert origin.hits("/f") == n, "%r was answered from the cache" % cc
        q = origin.last("/f")
        assert conditional_fields(q) == (['"f1"'], []), (cc, q.raw_head)
        assert q.answered == 304
        assert r.status == 200 and r.body == b"fresh body", (cc, r)
        after = sg.stats()
        assert delta(before, after, "cache_revalidated") == 1, cc
        assert delta(before, after, "cache_hit") == 0, cc
    assert_cached(sg.get("/f"), b"fresh body")
    assert origin.hits("/f") == n
    # without a validator, no-cache is a full fetch that replaces the object
    r = sg.get("/nv", headers={"Cache-Control": "no-cache"})
    assert conditional_fields(origin.last("/nv")) == ([], [])
    assert_miss(r, b"no validator #2")
    assert_cached(sg.get("/nv"), b"no validator #2")
    assert origin.hits("/nv") == 2


# -- grace -----------------------------------------------------------------------------


@pytest.mark.parametrize("cc,params", [
    ("max-age=1, stale-while-revalidate=30", {}),
    ("max-age=1", {"default_grace": "30s"}),
], ids=["stale-while-revalidate", "default_grace"])
def test_grace_while_refreshing(origin, surogat, cc, params):
    """The request that finds the object stale gets the stale copy at once,
    like every other request in grace, and the refresh runs in the
    background."""
    origin.route("/g", body=b"version one", headers={"Cache-Control": cc})
    sg = surogat(params=params)
    assert_miss(sg.get("/g"), b"version one")
    time.sleep(EXPIRE)
    origin.route("/g", body=b"version two", delay=1.0, headers={"Cache-Control": "max-age=60"})
    before = sg.stats()
    r, secs = timed_get(sg, "/g")
    assert r.status == 200 and r.body == b"version one", r
    assert is_stale(r), "not served stale: %r" % r
    assert secs < 0.5, "the request that triggered the refresh waited %.2fs for it" % secs
    origin.wait_hits("/g", 2, timeout=5)  # the refresh is under way
    t0 = time.monotonic()
    res = concurrent_gets(sg, "/g", 4)
    took = time.monotonic() - t0
    for r, secs in res:
        assert r.status == 200 and r.body == b"version one", r
        assert is_stale(r), "not served stale: %r" % r
        assert secs < 0.5, "a request in grace waited %.2fs for the refresh" % secs
    assert took < 0.8
    sg.wait_stat("cache_stored", before["cache_stored"] + 1, timeout=10)
    assert origin.hits("/g") == 2
    after = sg.stats()
    assert delta(before, after, "cache_hit_grace") == 5
    assert delta(before, after, "cache_hit") == 5
    assert delta(before, after, "cache_miss") == 0
    assert delta(before, after, "cache_bgfetch") == 1
    assert delta(before, after, "cache_coalesced") == 0
    _, ttl = assert_cached(sg.get("/g"), b"version two")
    assert ttl >= 57
    assert origin.hits("/g") == 2


@pytest.mark.parametrize("cc,wait", [
    ("max-age=1", EXPIRE),
    ("max-age=1, stale-while-revalidate=30, must-revalidate", EXPIRE),
    ("max-age=1, stale-while-revalidate=1", 2.3),
], ids=["no-grace", "must-revalidate", "window-over"])
def test_no_grace_waits_for_refresh(origin, surogat, cc, wait):
    """Without a grace window the other requests wait for the refresh (and
    get the new object): nothing stale is served."""
    origin.route("/ng", body=b"old", headers={"Cache-Control": cc})
    sg = surogat()
    assert_miss(sg.get("/ng"), b"old")
    time.sleep(wait)
    origin.route("/ng", body=b"new", delay=1.0, headers={"Cache-Control": "max-age=60"})
    before = sg.stats()
    refresher = Background(sg, "/ng")
    origin.wait_hits("/ng", 2, timeout=5)
    res = concurrent_gets(sg, "/ng", 3)
    for r, secs in res:
        assert r.status == 200 and r.body == b"new", r
        assert secs >= 0.4, "answered in %.2fs during a 1s refresh: %r" % (secs, r)
    r, _ = refresher.join()
    assert_miss(r, b"new")
    assert origin.hits("/ng") == 2
    after = sg.stats()
    assert delta(before, after, "cache_hit_grace") == 0
    assert delta(before, after, "cache_coalesced") == 3


# -- stale-if-error --------------------------------------------------------------------

SIE_ROUTES = {
    # path: (Cache-Control of the stored response, request headers, stale served on error)
    "/sie": ("max-age=1, stale-if-error=60", None, True),
    "/sie-req": ("max-age=1", {"Cache-Control": "stale-if-error=60"}, True),
    "/none": ("max-age=1", None, False),
    "/mr": ("max-age=1, stale-if-error=60, must-revalidate", None, False),
    "/mr-req": ("max-age=1, must-revalidate", {"Cache-Control": "stale-if-error=60"}, False),
}


@pytest.mark.parametrize("failure", [500, 503, "unreachable"])
def test_stale_if_error(origin, surogat, failure):
    for path, (cc, _, _) in SIE_ROUTES.items():
        origin.route(path, body=b"good " + path.encode(),
                     headers={"Cache-Control": cc, "ETag": '"e"'})
    # the directives alone (r11_cache_test.py covers default_stale_if_error)
    sg = surogat(params={"default_stale_if_error": "0s"})
    for path in SIE_ROUTES:
        assert_miss(sg.get(path), b"good " + path.encode())
    time.sleep(EXPIRE)
    if failure == "unreachable":
        origin.stop()
    else:
        for path, (cc, _, _) in SIE_ROUTES.items():
            origin.route(path, status=failure, body=b"broken",
                         headers={"Cache-Control": "no-store"})
    before = sg.stats()
    for path, (_, qh, stale_ok) in SIE_ROUTES.items():
        for attempt in range(2):
            r = sg.get(path, headers=qh)
            if stale_ok:
                assert_cached(r, b"good " + path.encode())
                assert is_stale(r), r
                assert r.header("Cache-Status").startswith(
                    "surogat; fwd=stale; fwd-status=%d;" % (
                        503 if failure == "unreachable" else failure)), r
            elif failure == "unreachable":
                assert r.status == 503, (path, r)
                assert b"good" not in r.body
            else:
                assert r.status == failure, (path, r)
                assert r.body == b"broken", (path, r)
            if failure != "unreachable":
                assert origin.hits(path) == 2 + attempt, path
            if failure != "unreachable" and (stale_ok or attempt == 0):
                # (an error without freshness leaves a hit-for-miss marker: then a pass)
                q = origin.last(path)
                assert conditional_fields(q) == (['"e"'], []), q.raw_head
    after = sg.stats()
    assert delta(before, after, "cache_stale_if_error") == 4
    assert delta(before, after, "cache_revalidated") == 0
    if failure == "unreachable":
        assert delta(before, after, "backend_fail") >= 1
    else:
        # the origin recovers: the stale copy is replaced, not served again
        origin.route("/sie", body=b"recovered", headers={"Cache-Control": "max-age=60"})
        assert_miss(sg.get("/sie"), b"recovered")
        assert_cached(sg.get("/sie"), b"recovered")
        assert origin.hits("/sie") == 4
