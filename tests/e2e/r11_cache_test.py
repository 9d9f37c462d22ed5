"""Regression tests for cache safety holes found by attacking surogat as an
outsider would: request headers the cache key does not see, a client
switching the cache off, invalidation by anyone, Host confusion, TRACE, and
stale content when the backend fails."""

import threading
import time

from cstatus import forwarded, is_hit
from p_policy_test import script


# -- 3. unkeyed request headers ------------------------------------------------------

UNKEYED = ["X-Forwarded-Host", "X-Original-URL", "X-Rewrite-URL", "X-Forwarded-Scheme",
           "X-HTTP-Method-Override", "X-Forwarded-Port", "X-Forwarded-Server", "X-Host",
           "X-Original-Host", "X-Forwarded-Prefix", "X-HTTP-Method", "X-Method-Override",
           "Forwarded"]


def test_unkeyed_headers_from_clients_never_reach_the_backend(origin, surogat):
    origin.route("/links", body=b"page", headers={"Cache-Control": "max-age=60"})
    sg = surogat()
    hdrs = [(h, "evil.example") for h in UNKEYED]
    sg.get("/links", headers=hdrs)
    got = origin.last("/links")
    for h in UNKEYED:
        assert got.header(h) is None, "%s reached the backend: %r" % (h, got.raw_head)
    # a pass too: the backend never sees them, cached or not
    sg.request("POST", "/links", headers=hdrs, body=b"x")
    got = origin.last("/links")
    assert got.method == "POST"
    for h in UNKEYED:
        assert got.header(h) is None, h


def test_trusted_unkeyed_header_passes_and_policy_can_set_them(origin, surogat, tmp_path):
    origin.route("/t", body=b"ok")
    p = script(tmp_path, """
        function recv(req)
          req.http["X-Forwarded-Port"] = "443"
        end
    """)
    sg = surogat(params={"trusted_client_headers": "X-Forwarded-Host, forwarded"},
                 args=["-f", str(p)])
    sg.get("/t", headers={"X-Forwarded-Host": "cdn.example", "Forwarded": "proto=https",
                          "X-Original-URL": "/admin", "X-Forwarded-Port": "8080"})
    got = origin.last("/t")
    assert got.header("X-Forwarded-Host") == "cdn.example"
    assert got.header("Forwarded") == "proto=https"
    assert got.header("X-Original-URL") is None
    assert got.header("X-Forwarded-Port") == "443"  # the policy's, not the client's


# -- 4. clients cannot switch the cache off -------------------------------------------


def hammer(sg, path, headers, n, threads=8):
    errors = []
    per = n // threads

    def run():
        try:
            with sg.conn() as c:
                for _ in range(per):
                    c.request("GET", path, headers)
                    r = c.read_final()
                    if r.status != 200:
                        errors.append(r)
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    ts = [threading.Thread(target=run) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not errors, errors[:3]


def test_client_no_cache_flood_costs_the_backend_a_handful(origin, surogat):
    origin.route("/hot", body=b"hot page" * 100, conditional=True,
                 headers={"Cache-Control": "max-age=300", "ETag": '"h1"'})
    sg = surogat()
    assert sg.get("/hot").status == 200
    assert origin.hits("/hot") == 1
    t0 = time.monotonic()
    for hdrs in ({"Cache-Control": "no-cache"}, {"Pragma": "no-cache"},
                 {"Cache-Control": "max-age=0"}):
        hammer(sg, "/hot", hdrs, 336)
    took = time.monotonic() - t0
    # about one revalidation per client_revalidate_interval (1 s) at most
    assert origin.hits("/hot") <= 2 + int(took), (origin.hits("/hot"), took)
    # what went to the backend were conditional revalidations, answered 304
    for q in origin.reqs("/hot")[1:]:
        assert q.header("If-None-Match") == '"h1"', q
        assert q.answered == 304
    assert sg.stat("cache_client_reval_limited") >= 1000 - 2 - int(took)


def test_client_no_cache_revalidates_once_per_interval(origin, surogat):
    route = origin.route("/p", body=b"v1", conditional=True,
                         headers={"Cache-Control": "max-age=300", "ETag": '"p1"'})
    sg = surogat(params={"client_revalidate_interval": "500ms"})
    sg.get("/p")
    r = sg.get("/p", headers={"Cache-Control": "no-cache"})
    assert r.body == b"v1" and origin.hits("/p") == 2  # revalidated: 304
    assert origin.last("/p").answered == 304
    r = sg.get("/p", headers={"Cache-Control": "no-cache"})
    assert is_hit(r) and origin.hits("/p") == 2  # within the interval: the stored copy
    time.sleep(0.6)
    route.body = b"v2"
    route.headers = [("Cache-Control", "max-age=300"), ("ETag", '"p2"')]
    r = sg.get("/p", headers={"Cache-Control": "no-cache"})
    assert r.body == b"v2" and origin.hits("/p") == 3  # a 200 replaced it
    r = sg.get("/p")
    assert is_hit(r) and r.body == b"v2"


def test_client_revalidate_interval_zero_ignores_client_directives(origin, surogat):
    origin.route("/z", body=b"z", headers={"Cache-Control": "max-age=300"})
    sg = surogat(params={"client_revalidate_interval": "0s"})
    sg.get("/z")
    for h in ({"Cache-Control": "no-cache"}, {"Pragma": "no-cache"},
              {"Cache-Control": "max-age=0"}):
        assert is_hit(sg.get("/z", headers=h))
    assert origin.hits("/z") == 1


# -- 5. invalidation only by real unsafe requests -------------------------------------


def cached(sg, origin, path):
    origin.route(path, body=b"cached " + path.encode(), headers={"Cache-Control": "max-age=300"})
    sg.get(path)
    assert is_hit(sg.get(path)), path


def test_unknown_and_lowercase_methods_do_not_invalidate(origin, surogat):
    sg = surogat()
    cached(sg, origin, "/a")
    for m in ("FOO", "get", "Post", "PROPFIND", "OPTIONS", "TRACE"):
        sg.request(m, "/a")
        assert is_hit(sg.get("/a")), m
    # a lowercase "get" is an unknown method: passed, never served from the cache
    origin.route("/a", body=b"fresh")
    r = sg.request("get", "/a")
    assert r.body == b"fresh" and forwarded(r.header("Cache-Status")) is False
    assert origin.last("/a").method == "get"


def test_successful_unsafe_methods_invalidate(origin, surogat):
    sg = surogat()
    for m in ("POST", "PUT", "PATCH", "DELETE"):
        path = "/u-" + m.lower()
        cached(sg, origin, path)
        r = sg.request(m, path, body=b"x")
        assert r.status == 200
        assert not is_hit(sg.get(path)), m


def test_failed_unsafe_request_does_not_invalidate(origin, surogat):
    sg = surogat()
    cached(sg, origin, "/f")
    cached(sg, origin, "/g")
    # A refused POST changes nothing: neither its target nor what its Location names.
    origin.route("/f", status=403, body=b"denied", headers={"Location": "/g"})
    assert sg.request("POST", "/f", body=b"x").status == 403
    origin.route("/f", body=b"cached /f", headers={"Cache-Control": "max-age=300"})
    assert is_hit(sg.get("/f"))
    assert is_hit(sg.get("/g"))


def test_location_invalidates_only_same_host_after_success(origin, surogat):
    sg = surogat()
    cached(sg, origin, "/target")
    cached(sg, origin, "/other")
    # Another host's Location is never ours to empty.
    origin.route("/post1", status=201, body=b"created",
                 headers={"Location": "http://elsewhere.example/target"})
    sg.request("POST", "/post1", body=b"x")
    assert is_hit(sg.get("/target"))
    # The same host's (relative or absolute) is.
    origin.route("/post2", status=303, body=b"see",
                 headers={"Location": "http://surogat.test/target",
                          "Content-Location": "/other"})
    sg.request("POST", "/post2", body=b"x")
    assert not is_hit(sg.get("/target"))
    assert not is_hit(sg.get("/other"))


def test_location_from_a_safe_or_unknown_method_invalidates_nothing(origin, surogat):
    sg = surogat()
    cached(sg, origin, "/keep")
    origin.route("/echo", status=200, body=b"e", headers={"Location": "/keep"})
    for m in ("GET", "FOO", "get", "OPTIONS"):
        sg.request(m, "/echo")
        assert is_hit(sg.get("/keep")), m


def test_unsafe_invalidation_can_be_switched_off(origin, surogat):
    sg = surogat(params={"invalidate_on_unsafe": "off"})
    cached(sg, origin, "/s")
    assert sg.request("POST", "/s", body=b"x").status == 200
    assert is_hit(sg.get("/s"))


# -- 6. Host -------------------------------------------------------------------------


def raw_status(sg, head):
    data = sg.exchange(head.encode("latin-1"))
    return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else data


def test_bad_host_headers_get_400(origin, surogat):
    origin.route("/", body=b"root")
    sg = surogat()
    for host in ("", "a b", "a/b", "a..b", "..", "a\\b", "exa_mple.com:80x", "[::1",
                 "x:99999", "a@b", "a:80:80", "a%zz", "exa mple.com"):
        st = raw_status(sg, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % host)
        assert st == 400, (host, st)
    assert origin.hits() == 0
    for host in ("example.com", "Example.COM:8080", "127.0.0.1", "[::1]:80", "xn--bcher-kva.ch",
                 "a-b.c_d.example", "example.com.", "a%41.example"):
        st = raw_status(sg, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host)
        assert st == 200, (host, st)


def test_host_forms_share_one_object(origin, surogat):
    origin.route("/h", body=b"one object", headers={"Cache-Control": "max-age=60"})
    sg = surogat()
    for host in ("example.com", "Example.COM", "example.com.", "example.com:80",
                 "EXAMPLE.com.:80"):
        r = sg.get("/h", vhost=host)
        assert r.status == 200 and r.body == b"one object"
    assert origin.hits("/h") == 1
    # another port is another site
    sg.get("/h", vhost="example.com:8080")
    assert origin.hits("/h") == 2


def test_no_host_does_not_share_with_real_hosts(origin, surogat):
    origin.route("/nh", body=b"default host", headers={"Cache-Control": "max-age=60"})
    sg = surogat()
    data = sg.exchange(b"GET /nh HTTP/1.0\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"default host")
    data = sg.exchange(b"GET /nh HTTP/1.0\r\nHost:\r\n\r\n")
    assert data.startswith(b"HTTP/1.1 200")
    hits = origin.hits("/nh")
    r = sg.get("/nh", vhost="example.com")
    assert not is_hit(r) and origin.hits("/nh") == hits + 1


# -- 12. TRACE -----------------------------------------------------------------------


def test_trace_is_refused_by_default(origin, surogat):
    sg = surogat()
    r = sg.request("TRACE", "/", headers={"Cookie": "sess=SECRET"})
    assert r.status == 405, r
    assert "TRACE" not in (r.header("Allow") or "")
    assert b"SECRET" not in r.body
    assert origin.hits() == 0


def test_trace_allowed_is_forwarded_without_credentials(origin, surogat):
    origin.route("/tr", body=b"trace", echo=True)
    sg = surogat(params={"allow_trace": "on"})
    r = sg.request("TRACE", "/tr", headers={"Cookie": "sess=SECRET",
                                            "Authorization": "Basic eDp5",
                                            "X-Ok": "1"})
    assert r.status == 200
    got = origin.last("/tr")
    assert got.method == "TRACE"
    assert got.header("Cookie") is None and got.header("Authorization") is None
    assert got.header("X-Ok") == "1"


# -- 15. stale content when the backend is down --------------------------------------


def test_stale_served_by_default_when_backend_fails(origin, surogat):
    route = origin.route("/down", body=b"still here", headers={"Cache-Control": "max-age=1"})
    sg = surogat(params={"default_grace": "0s"})
    assert sg.get("/down").body == b"still here"
    time.sleep(1.3)
    route.status = 503
    route.body = b"backend broken"
    r = sg.get("/down")
    assert r.status == 200 and r.body == b"still here", r
    assert (r.header("Cache-Status") or "").startswith("surogat; fwd=stale"), r
    origin.stop()  # unreachable now
    r = sg.get("/down")
    assert r.status == 200 and r.body == b"still here", r
    assert "fwd=stale" in r.header("Cache-Status")


def test_default_stale_if_error_zero_restores_errors(origin, surogat):
    route = origin.route("/down0", body=b"x", headers={"Cache-Control": "max-age=1"})
    sg = surogat(params={"default_grace": "0s", "default_stale_if_error": "0s"})
    sg.get("/down0")
    time.sleep(1.3)
    route.status = 503
    assert sg.get("/down0").status == 503


def test_revalidation_directives_forbid_default_stale(origin, surogat):
    sg = surogat(params={"default_grace": "0s"})
    routes = {}
    for path, cc in (("/mr", "max-age=1, must-revalidate"), ("/pr", "max-age=1, proxy-revalidate"),
                     ("/sm", "s-maxage=1"), ("/nc", "max-age=1, no-cache")):
        routes[path] = origin.route(path, body=b"x", headers={"Cache-Control": cc, "ETag": '"1"'})
        sg.get(path)
    time.sleep(1.3)
    for path, route in routes.items():
        route.status = 500
        r = sg.get(path)
        assert r.status == 500, (path, r)
