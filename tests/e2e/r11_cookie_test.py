"""Regression tests: one client's Set-Cookie must never reach another
through the cache, whatever stored the response (a qualified no-cache, the
policy's beresp.ttl, a 304 merged into a stored object, Vary variants)."""

import time

from cstatus import is_hit
from p_policy_test import script

COOKIE = "sess=SECRET-of-the-first-user; Path=/; HttpOnly"


def no_cookie(r):
    return r.headers_all("Set-Cookie") == []


# -- 1. Set-Cookie never reaches another client -------------------------------------


def test_qualified_no_cache_set_cookie_is_never_stored(origin, surogat):
    origin.route("/q", body=b"page", headers=[
        ("Cache-Control", 'no-cache="Set-Cookie", max-age=60'), ("Set-Cookie", COOKIE)])
    sg = surogat()
    first = sg.get("/q")
    assert first.status == 200 and first.body == b"page"
    # The response to the request that fetched it is that client's own.
    assert first.headers_all("Set-Cookie") == [COOKIE]
    for _ in range(3):
        r = sg.get("/q")
        assert r.status == 200 and r.body == b"page" and is_hit(r), r
        assert no_cookie(r), "another client got the first one's cookie: %r" % r
    assert origin.hits("/q") == 1
    assert sg.stat("cache_set_cookie_stripped") == 1


def test_qualified_no_cache_lists_several_fields(origin, surogat):
    origin.route("/q2", body=b"x", headers=[
        ("Cache-Control", 'max-age=60, no-cache="set-cookie, X-User"'),
        ("Set-Cookie", COOKIE), ("X-User", "alice"), ("X-Kept", "yes")])
    sg = surogat()
    assert sg.get("/q2").header("X-User") == "alice"
    r = sg.get("/q2")
    assert is_hit(r) and no_cookie(r) and r.header("X-User") is None, r
    assert r.header("X-Kept") == "yes"


def test_policy_ttl_on_a_cookie_response_stores_it_without_the_cookie(origin, surogat,
                                                                        tmp_path):
    origin.route("/login-page", body=b"hello", headers=[("Set-Cookie", COOKIE)])
    p = script(tmp_path, """
        function backend_response(req, beresp)
          beresp.ttl = 60
          return "deliver"
        end
    """)
    sg = surogat(args=["-f", str(p)])
    assert sg.get("/login-page").headers_all("Set-Cookie") == [COOKIE]
    r = sg.get("/login-page")
    assert is_hit(r) and r.body == b"hello", r
    assert no_cookie(r), r


def test_set_cookie_in_a_304_is_not_merged_into_the_stored_object(origin, surogat):
    route = origin.route("/r", body=b"v1", conditional=True, headers=[
        ("Cache-Control", "max-age=1"), ("ETag", '"e1"')])
    sg = surogat(params={"default_grace": "0s"})
    assert sg.get("/r").body == b"v1"
    time.sleep(1.3)
    # The revalidation's 304 sets a cookie: it belongs to nobody else.
    route.headers.append(("Set-Cookie", COOKIE))
    r = sg.get("/r")
    assert r.status == 200 and r.body == b"v1", r
    assert origin.last("/r").header("If-None-Match") == '"e1"'
    assert no_cookie(r), r
    r = sg.get("/r")
    assert is_hit(r) and no_cookie(r), r


def test_vary_variants_never_keep_a_cookie(origin, surogat):
    origin.route("/v", body=b"variant", headers=[
        ("Cache-Control", 'max-age=60, no-cache="Set-Cookie"'), ("Vary", "Accept-Language"),
        ("Set-Cookie", COOKIE)])
    sg = surogat()
    for lang in ("en", "fr", "de"):
        assert sg.get("/v", headers={"Accept-Language": lang}).headers_all("Set-Cookie")
    for lang in ("en", "fr", "de"):
        r = sg.get("/v", headers={"Accept-Language": lang})
        assert is_hit(r) and no_cookie(r), (lang, r)
    assert origin.hits("/v") == 3
