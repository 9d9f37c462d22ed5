"""The cache: lookups, storability and freshness (RFC 9111), the built-in
policy (what passes, what purges), Vary, only-if-cached."""

import email.utils
import time

import pytest

import cstatus
from cstatus import HFM, forwarded


def http_date(t):
    return email.utils.formatdate(t, usegmt=True)


def delta(before, after, name):
    return after[name] - before[name]


def hit_ttl(r):
    ttl = cstatus.hit_ttl(r)
    assert ttl is not None, "not a hit: Cache-Status %r in %r" % (r.header("Cache-Status"), r)
    return ttl


def assert_miss(r, body, stored=True, age=None, detail=None):
    assert r.status == 200, r
    assert r.body == body
    assert forwarded(r.header("Cache-Status"), stored=stored, detail=detail), r
    assert r.header("Age") == age, r  # only the origin's


def assert_hit(r, body, ttl_range=None):
    assert r.status == 200, r
    assert r.body == body
    assert r.headers_all("Content-Length") == [str(len(body))], r
    age = r.headers_all("Age")
    assert len(age) == 1 and age[0].isdigit(), r
    ttl = hit_ttl(r)
    if ttl_range is not None:
        assert ttl_range[0] <= ttl <= ttl_range[1], "ttl=%d, wanted %s" % (ttl, ttl_range)
    return int(age[0]), ttl


# -- hits and misses -----------------------------------------------------------


def test_miss_then_hit(origin, surogat):
    origin.route("/a", body=b"hello cache", headers={"Cache-Control": "max-age=60",
                                                     "X-Origin": "yes"})
    sg = surogat()
    before = sg.stats()
    r1 = sg.get("/a")
    assert_miss(r1, b"hello cache")
    assert r1.header("X-Origin") == "yes"
    with sg.conn() as c:  # several hits on one connection: framing must hold
        for _ in range(3):
            c.request("GET", "/a")
            r = c.read_response()
            age, _ = assert_hit(r, b"hello cache", (58, 60))
            assert age <= 2
            assert r.header("X-Origin") == "yes"
            assert r.header("Cache-Control") == "max-age=60"
            assert r.headers_all("Via") == ["1.1 surogat"], r
            assert len(r.headers_all("Date")) == 1, r
            assert "close" not in r.tokens("Connection")
        assert c.is_open(0.2)
    assert origin.hits("/a") == 1
    after = sg.stats()
    assert delta(before, after, "cache_miss") == 1
    assert delta(before, after, "cache_hit") == 3
    assert delta(before, after, "cache_stored") == 1
    assert delta(before, after, "cache_pass") == 0
    assert after["n_object"] == 1
    assert after["n_objecthead"] == 1


def test_key_is_host_and_target(origin, surogat):
    origin.default.body = lambda req: ("%s %s" % (req.header("Host"), req.target)).encode()
    origin.default.headers = [("Cache-Control", "max-age=60")]
    sg = surogat()
    a = sg.get("/k?x=1", vhost="Example.TEST")
    assert_miss(a, b"Example.TEST /k?x=1")
    # the host compares case-insensitively ...
    assert_hit(sg.get("/k?x=1", vhost="example.test"), b"Example.TEST /k?x=1")
    # ... the query and other hosts make other objects
    assert_miss(sg.get("/k?x=2", vhost="example.test"), b"example.test /k?x=2")
    assert_miss(sg.get("/k?x=1", vhost="other.test"), b"other.test /k?x=1")
    assert origin.hits("/k") == 3
    assert sg.stat("n_objecthead") == 3


def test_cache_status_off(origin, surogat):
    origin.route("/cs", body=b"x", headers={"Cache-Control": "max-age=60"})
    sg = surogat(params={"cache_status": "off"})
    r1, r2 = sg.get("/cs"), sg.get("/cs")
    assert r1.status == r2.status == 200 and r1.body == r2.body == b"x"
    assert not r1.has("Cache-Status") and not r2.has("Cache-Status")
    assert r2.has("Age")
    assert origin.hits("/cs") == 1


# -- freshness -------------------------------------------------------------------


def test_max_age_expiry(origin, surogat):
    origin.route("/e", body=b"short", headers={"Cache-Control": "max-age=1"})
    sg = surogat()
    assert_miss(sg.get("/e"), b"short")
    assert_hit(sg.get("/e"), b"short", (0, 1))
    assert origin.hits("/e") == 1
    time.sleep(1.5)
    assert_miss(sg.get("/e"), b"short")
    assert origin.hits("/e") == 2
    assert_hit(sg.get("/e"), b"short")
    assert origin.hits("/e") == 2
    st = sg.stats()
    assert st["cache_stored"] == 2
    assert st["n_object"] == 1, "the expired object was not replaced"


def test_s_maxage_beats_max_age(origin, surogat):
    origin.route("/s1", body=b"s-long", headers={"Cache-Control": "max-age=1, s-maxage=60"})
    origin.route("/s2", body=b"s-short", headers={"Cache-Control": "max-age=60, s-maxage=1"})
    sg = surogat()
    assert_miss(sg.get("/s1"), b"s-long")
    assert_miss(sg.get("/s2"), b"s-short")
    assert_hit(sg.get("/s1"), b"s-long", (58, 60))
    assert_hit(sg.get("/s2"), b"s-short", (0, 1))
    time.sleep(1.5)
    assert_hit(sg.get("/s1"), b"s-long", (57, 59))
    assert_miss(sg.get("/s2"), b"s-short")
    assert origin.hits("/s1") == 1
    assert origin.hits("/s2") == 2


def test_expires(origin, surogat):
    now = time.time()
    origin.route("/past", body=b"old", headers={"Date": http_date(now),
                                                "Expires": "Thu, 01 Jan 1970 00:00:00 GMT"})
    origin.route("/future", body=b"new", headers={"Date": http_date(now),
                                                  "Expires": http_date(now + 60)})
    sg = surogat()
    before = sg.stats()
    assert_miss(sg.get("/past"), b"old", stored=False, detail="stale-on-arrival")
    r = sg.get("/past")
    assert r.status == 200 and r.body == b"old"
    assert r.header("Cache-Status") == HFM, r
    assert origin.hits("/past") == 2
    assert_miss(sg.get("/future"), b"new")
    assert_hit(sg.get("/future"), b"new", (57, 60))
    assert origin.hits("/future") == 1
    after = sg.stats()
    assert delta(before, after, "cache_uncacheable") == 1
    assert delta(before, after, "cache_hitmiss") == 1
    assert delta(before, after, "cache_stored") == 1


def test_age_from_origin(origin, surogat):
    origin.route("/aged", body=b"aged", headers={"Cache-Control": "max-age=60", "Age": "30"})
    origin.route("/dead", body=b"dead", headers={"Cache-Control": "max-age=60", "Age": "100"})
    sg = surogat()
    assert_miss(sg.get("/aged"), b"aged", age="30")
    age, _ = assert_hit(sg.get("/aged"), b"aged", (28, 30))
    assert 30 <= age <= 32
    # stale on arrival: not stored
    assert_miss(sg.get("/dead"), b"dead", stored=False, age="100", detail="stale-on-arrival")
    assert sg.get("/dead").header("Cache-Status") == HFM
    assert origin.hits("/aged") == 1 and origin.hits("/dead") == 2


def test_heuristic_freshness(origin, surogat):
    now = time.time()
    # 10% of Date - Last-Modified: 5 days old gives 12 hours
    origin.route("/lm", body=b"heuristic", headers={"Date": http_date(now),
                                                    "Last-Modified": http_date(now - 5 * 86400)})
    # no Date: the time of arrival stands in; 100 days caps at heuristic_max (1d)
    origin.route("/lm-nodate", body=b"capped",
                 headers={"Last-Modified": http_date(now - 100 * 86400)})
    # nothing to go on: not stored (default_ttl is 0)
    origin.route("/none", body=b"none")
    sg = surogat()
    assert_miss(sg.get("/lm"), b"heuristic")
    assert_hit(sg.get("/lm"), b"heuristic", (43200 - 3, 43200))
    assert_miss(sg.get("/lm-nodate"), b"capped")
    assert_hit(sg.get("/lm-nodate"), b"capped", (86400 - 3, 86400))
    assert_miss(sg.get("/none"), b"none", stored=False, detail="no-freshness")
    assert sg.get("/none").header("Cache-Status") == HFM
    assert origin.hits("/lm") == 1 and origin.hits("/lm-nodate") == 1
    assert origin.hits("/none") == 2


def test_default_ttl(origin, surogat):
    origin.route("/d", body=b"default", headers={"ETag": '"d"'})
    sg = surogat(params={"default_ttl": "30s"})
    assert_miss(sg.get("/d"), b"default")
    assert_hit(sg.get("/d"), b"default", (28, 30))
    assert origin.hits("/d") == 1


def test_404_with_max_age_stored(origin, surogat):
    origin.route("/gone", status=404, body=b"nope", headers={"Cache-Control": "max-age=60"})
    sg = surogat()
    r1, r2 = sg.get("/gone"), sg.get("/gone")
    assert r1.status == r2.status == 404 and r1.body == r2.body == b"nope"
    assert forwarded(r1.header("Cache-Status"), stored=True)
    hit_ttl(r2)
    assert origin.hits("/gone") == 1


# -- targeted fields -------------------------------------------------------------


@pytest.mark.parametrize("field", ["CDN-Cache-Control", "Surrogate-Control"])
def test_targeted_field_overrides_cache_control(origin, surogat, field):
    origin.route("/cdn", body=b"for the cdn",
                 headers={field: "max-age=60", "Cache-Control": "no-store"})
    sg = surogat()
    r1 = sg.get("/cdn")
    assert_miss(r1, b"for the cdn")
    r2 = sg.get("/cdn")
    assert_hit(r2, b"for the cdn", (58, 60))
    assert origin.hits("/cdn") == 1
    # clients get the origin's Cache-Control; Surrogate-Control is ours alone, while
    # CDN-Cache-Control goes on to the CDN layers in front of us (RFC 9213)
    assert r2.header("Cache-Control") == "no-store"
    for r in (r1, r2):
        if field == "Surrogate-Control":
            assert not r.has(field), "%s sent to the client: %r" % (field, r)
        else:
            assert r.header(field) == "max-age=60", r


# -- not stored ------------------------------------------------------------------


@pytest.mark.parametrize("headers,detail", [
    ({"Cache-Control": "no-store, max-age=60"}, "no-store"),
    ({"Cache-Control": "private, max-age=60"}, "private"),
    ({"Cache-Control": "max-age=60", "Set-Cookie": "sid=1"}, "set-cookie"),
    ({"Cache-Control": "max-age=60", "Vary": "*"}, "vary-star"),
], ids=["no-store", "private", "set-cookie", "vary-star"])
def test_response_not_stored(origin, surogat, headers, detail):
    origin.route("/u", body=b"uncacheable", headers=headers)
    sg = surogat()
    before = sg.stats()
    r1 = sg.get("/u")
    assert_miss(r1, b"uncacheable", stored=False, detail=detail)
    for n, v in headers.items():
        assert r1.header(n) == v
    for _ in range(2):
        r = sg.get("/u")
        assert r.status == 200 and r.body == b"uncacheable"
        assert r.header("Cache-Status") == HFM, r
        for n, v in headers.items():
            assert r.header(n) == v
    assert origin.hits("/u") == 3
    after = sg.stats()
    assert delta(before, after, "cache_stored") == 0
    assert delta(before, after, "cache_uncacheable") == 1
    assert delta(before, after, "cache_hitmiss") == 2
    assert delta(before, after, "cache_hit") == 0


def test_request_no_store_does_not_mark_url_uncacheable(origin, surogat):
    """A client's own no-store keeps its response out of the cache; it must
    not make the URL uncacheable for every other client."""
    origin.route("/ns", body=b"shared", headers={"Cache-Control": "max-age=60"})
    sg = surogat()
    r = sg.get("/ns", headers={"Cache-Control": "no-store"})
    assert r.status == 200 and r.body == b"shared"
    assert forwarded(r.header("Cache-Status"), stored=False, detail="request-no-store")
    assert_miss(sg.get("/ns"), b"shared")
    assert_hit(sg.get("/ns"), b"shared")
    assert origin.hits("/ns") == 2


# -- the built-in policy -----------------------------------------------------------


@pytest.mark.parametrize("field,value", [("Cookie", "sid=abc"),
                                         ("Authorization", "Basic dTpw")])
def test_credentials_pass(origin, surogat, field, value):
    origin.route("/p", body=lambda req: ("%s" % req.header(field)).encode(),
                 headers={"Cache-Control": "max-age=60"})
    bypass = "surogat; fwd=bypass; detail=" + field.lower()
    sg = surogat()
    before = sg.stats()
    for _ in range(3):
        r = sg.get("/p", headers={field: value})
        assert r.status == 200 and r.body == value.encode()
        assert r.header("Cache-Status") == bypass, r
        assert not r.has("Age")
    assert origin.hits("/p") == 3
    assert all(q.header(field) == value for q in origin.reqs("/p"))
    # an anonymous request caches it; credentials still go to the origin
    assert_miss(sg.get("/p"), b"None")
    assert_hit(sg.get("/p"), b"None")
    r = sg.get("/p", headers={field: value})
    assert r.body == value.encode() and r.header("Cache-Status") == bypass
    assert origin.hits("/p") == 5
    after = sg.stats()
    assert delta(before, after, "cache_pass") == 4
    assert delta(before, after, "cache_hit") == 1
    assert delta(before, after, "cache_miss") == 1


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_unsafe_method_purges(origin, surogat, method):
    origin.route("/obj", body=lambda req: ("%s #%d" % (req.method, origin.hits("/obj"))).encode(),
                 headers={"Cache-Control": "max-age=60"})
    sg = surogat()
    assert_miss(sg.get("/obj"), b"GET #1")
    assert_hit(sg.get("/obj"), b"GET #1")
    r = sg.request(method, "/obj", body=b"data")
    assert r.status == 200 and r.body == ("%s #2" % method).encode()
    assert r.header("Cache-Status") == "surogat; fwd=method"
    assert sg.stat("n_object") == 0
    assert_miss(sg.get("/obj"), b"GET #3")
    assert_hit(sg.get("/obj"), b"GET #3")
    assert [q.method for q in origin.reqs("/obj")] == ["GET", method, "GET"]


def test_failed_unsafe_method_does_not_purge(origin, surogat):
    origin.route("/keep", body=b"kept", headers={"Cache-Control": "max-age=60"})
    sg = surogat()
    assert_miss(sg.get("/keep"), b"kept")
    origin.route("/keep", status=500, body=b"err")
    assert sg.request("POST", "/keep", body=b"x").status == 500
    # another host's URL is another key
    origin.route("/keep", body=b"ok")
    assert sg.request("POST", "/keep", body=b"x", vhost="other.test").status == 200
    assert_hit(sg.get("/keep"), b"kept")
    assert origin.hits("/keep") == 3


def test_purge_drops_every_variant(origin, surogat):
    origin.route("/v", body=lambda req: (req.header("Accept-Language") or "-").encode(),
                 headers={"Cache-Control": "max-age=60", "Vary": "Accept-Language"})
    sg = surogat()
    for lang in ("en", "fr"):
        assert_miss(sg.get("/v", headers={"Accept-Language": lang}), lang.encode())
    assert sg.stat("n_object") == 2
    assert sg.request("POST", "/v", body=b"").status == 200
    assert sg.stat("n_object") == 0
    for lang in ("en", "fr"):
        assert_miss(sg.get("/v", headers={"Accept-Language": lang}), lang.encode())
    assert origin.hits("/v") == 5


# -- Vary --------------------------------------------------------------------------


def test_vary_variants(origin, surogat):
    origin.route("/vary", body=lambda req: b"enc=" + (req.header("Accept-Encoding") or "")
                 .encode(), headers={"Cache-Control": "max-age=60", "Vary": "Accept-Encoding"})
    # With gzip support Accept-Encoding no longer splits variants (g_gzip_test.py).
    sg = surogat(params={"http_gzip_support": "off"})
    ae = lambda v: {"Accept-Encoding": v} if v is not None else {}  # noqa: E731
    assert_miss(sg.get("/vary", headers=ae("gzip")), b"enc=gzip")
    assert_miss(sg.get("/vary", headers=ae("br")), b"enc=br")
    assert_miss(sg.get("/vary", headers=ae(None)), b"enc=")
    for _ in range(2):
        for v in ("gzip", "br", None):
            r = sg.get("/vary", headers=ae(v))
            assert_hit(r, b"enc=" + (v or "").encode())
            assert r.header("Vary") == "Accept-Encoding"
    assert origin.hits("/vary") == 3
    st = sg.stats()
    assert st["n_object"] == 3 and st["n_objecthead"] == 1
    assert st["cache_hit"] == 6


# -- only-if-cached ----------------------------------------------------------------


def test_only_if_cached(origin, surogat):
    origin.route("/oic", body=b"cached", headers={"Cache-Control": "max-age=60"})
    sg = surogat()
    r = sg.get("/oic", headers={"Cache-Control": "only-if-cached"})
    assert r.status == 504, r
    assert origin.hits("/oic") == 0
    assert_miss(sg.get("/oic"), b"cached")
    assert_hit(sg.get("/oic", headers={"Cache-Control": "only-if-cached"}), b"cached")
    assert origin.hits("/oic") == 1


def test_unsafe_method_purges_location_on_same_host(origin, surogat):
    """RFC 9111 section 4.4: Location and Content-Location of a successful
    unsafe method's response are invalidated too, when on the same host."""
    for p in ("/a", "/b", "/c"):
        origin.route(p, body=p.encode(), headers={"Cache-Control": "max-age=60"})
    sg = surogat()
    host = "surogat.test"  # what httpc sends as Host
    for p in ("/a", "/b", "/c"):
        assert_miss(sg.get(p), p.encode())
        assert_hit(sg.get(p), p.encode())
    origin.route("/post", status=201, body=b"made",
                 headers={"Location": "/a", "Content-Location": "http://%s/b" % host})
    assert sg.request("POST", "/post", body=b"x").status == 201
    assert_miss(sg.get("/a"), b"/a")
    assert_miss(sg.get("/b"), b"/b")
    assert_hit(sg.get("/c"), b"/c")
    # another host's URL in Location is left alone
    origin.route("/post2", status=201, body=b"made",
                 headers={"Location": "http://elsewhere.example/c"})
    assert sg.request("POST", "/post2", body=b"x").status == 201
    assert_hit(sg.get("/c"), b"/c")


def test_put_and_delete_invalidate_before_the_client_has_its_answer(origin, surogat):
    """PUT and DELETE are idempotent but not safe: they invalidate like POST,
    Location included; and the invalidation is done before the response is
    delivered, so a request sent right after the answer never sees the old copy."""
    for p in ("/doc", "/other"):
        origin.route(p, body=p.encode(), headers={"Cache-Control": "max-age=60"})
    sg = surogat()
    for p in ("/doc", "/other"):
        assert_miss(sg.get(p), p.encode())
    origin.route("/doc", status=200, body=b"put done", headers={"Content-Location": "/other"})
    with sg.conn() as c:
        c.request("PUT", "/doc", body=b"new")
        assert c.read_response().status == 200
        origin.route("/doc", body=b"new /doc", headers={"Cache-Control": "max-age=60"})
        c.request("GET", "/doc")
        r = c.read_response()
        assert r.body == b"new /doc" and r.header("Cache-Status") != "surogat; hit", r
    assert_miss(sg.get("/other"), b"/other")
    origin.route("/gone", body=b"gone", headers={"Cache-Control": "max-age=60"})
    assert_miss(sg.get("/gone"), b"gone")
    origin.route("/gone", status=204, body=b"")
    assert sg.request("DELETE", "/gone").status == 204
    origin.route("/gone", body=b"back", headers={"Cache-Control": "max-age=60"})
    assert_miss(sg.get("/gone"), b"back")


def test_cache_status_says_why_it_went_forward(origin, surogat):
    """RFC 9211 fwd= reasons: uri-miss (nothing cached for the URL), vary-miss
    (other variants only), stale (a stale copy was there), miss (a copy past
    all use); fwd-status when the client gets another status than the origin's."""
    origin.route("/v", body=lambda req: (req.header("Accept-Language") or "").encode(),
                 headers={"Cache-Control": "max-age=60", "Vary": "Accept-Language"})
    origin.route("/s", body=b"one", headers={"Cache-Control": "max-age=1", "ETag": '"a"'})
    origin.route("/d", body=b"d", headers={"Cache-Control": "max-age=1"})
    origin.route("/c", body=b"c", headers={"Cache-Control": "max-age=60", "ETag": '"c"'})
    sg = surogat(params={"default_stale_if_error": "0s"})  # so /d is past all use
    r = sg.get("/v", {"Accept-Language": "en"})
    assert r.header("Cache-Status") == "surogat; fwd=uri-miss; stored", r
    r = sg.get("/v", {"Accept-Language": "fr"})
    assert r.header("Cache-Status") == "surogat; fwd=vary-miss; stored", r
    sg.get("/s")
    sg.get("/d")
    time.sleep(1.3)
    origin.route("/s", body=b"two", headers={"Cache-Control": "max-age=60", "ETag": '"b"'})
    r = sg.get("/s")  # revalidated, but the origin sent a new body
    assert r.body == b"two" and r.header("Cache-Status") == "surogat; fwd=stale; stored", r
    r = sg.get("/d")  # no validator, no grace: the old copy was past all use
    assert r.header("Cache-Status") == "surogat; fwd=miss; stored", r
    r = sg.get("/c", {"If-None-Match": '"c"'})
    assert r.status == 304, r
    assert r.header("Cache-Status") == "surogat; fwd=uri-miss; fwd-status=200; stored", r
