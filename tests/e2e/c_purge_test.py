"""Invalidation: PURGE (hard and soft, purge_acl), surrogate keys
(Surrogate-Key / xkey tags purged by tag), and bans (surogatctl ban, tested
at lookup and by the background lurker), against a counting origin."""

import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import httpc
from conftest import have_ipv6_loopback, wait_until
from cstatus import forwarded, is_hit

CC60 = {"Cache-Control": "max-age=60"}


def assert_miss(r, body):
    assert r.status == 200, r
    assert r.body == body, r
    assert forwarded(r.header("Cache-Status"), stored=True), r


def assert_hit(r, body):
    assert r.status == 200, r
    assert r.body == body, r
    assert is_hit(r), "not a hit: %r" % r


def purge(sg, path="/", headers=None, vhost="surogat.test"):
    return sg.request("PURGE", path, headers=headers, vhost=vhost)


def purged(r):
    """The object count of a 200 PURGE answer."""
    assert r.status == 200, r
    m = re.search(rb"(?:Soft-purged|Purged) (\d+) objects?\.", r.body)
    assert m, r.body
    return int(m.group(1))


def ctl_ok(sg, *args):
    p = sg.ctl(*args)
    assert p.returncode == 0, "surogatctl %s: exit %d: %s%s" % (
        " ".join(args), p.returncode, p.stdout, p.stderr)
    return p.stdout


def stats_json(sg):
    return json.loads(ctl_ok(sg, "stats", "-j"))


def delta(before, after, name):
    return after[name] - before[name]


# -- PURGE ---------------------------------------------------------------------------


def test_purge_removes_object(origin, surogat):
    origin.route("/a", body=b"one", headers=CC60)
    origin.route("/b", body=b"bee", headers=CC60)
    sg = surogat()
    assert_miss(sg.get("/a"), b"one")
    assert_miss(sg.get("/b"), b"bee")
    assert_hit(sg.get("/a"), b"one")
    before = sg.stats()
    r = purge(sg, "/a")
    assert purged(r) == 1
    assert r.header("Content-Type").startswith("text/html")
    assert origin.hits("/a") == 1, "a PURGE must not reach the origin"
    origin.route("/a", body=b"two", headers=CC60)
    assert_miss(sg.get("/a"), b"two")
    assert_hit(sg.get("/a"), b"two")
    assert_hit(sg.get("/b"), b"bee")  # another URL is untouched
    assert origin.hits("/a") == 2 and origin.hits("/b") == 1
    after = sg.stats()
    assert delta(before, after, "purges") == 1
    assert delta(before, after, "purge_objects") == 1
    assert delta(before, after, "purges_soft") == 0
    assert after["n_object"] == 2


def test_purge_overtakes_a_fetch_under_way(origin, surogat):
    """A purge while the object is fetched (the backend may have answered
    before the purge): requests after the purge do not wait for that fetch
    nor get its answer, which is not kept; its own client gets it."""
    old = origin.route("/o", body=b"old", headers=CC60, hold_head=True)
    sg = surogat()
    first = {}
    t = threading.Thread(target=lambda: first.update(r=sg.get("/o", timeout=20)))
    t.start()
    try:
        assert old.held.wait(10)
        origin.route("/o", body=b"new", headers=CC60)
        assert purged(purge(sg, "/o")) == 0
        assert_miss(sg.get("/o", timeout=5), b"new")  # not behind the held fetch
    finally:
        old.release.set()
        t.join(20)
    assert first["r"].status == 200 and first["r"].body == b"old"
    assert_hit(sg.get("/o"), b"new")
    assert origin.hits("/o") == 2 and sg.stat("cache_overtaken") == 1


def test_purge_is_per_host(origin, surogat):
    origin.route("/h", body=lambda req: req.header("Host").encode(), headers=CC60)
    sg = surogat()
    assert_miss(sg.get("/h", vhost="a.test"), b"a.test")
    assert_miss(sg.get("/h", vhost="b.test"), b"b.test")
    assert purged(purge(sg, "/h", vhost="A.TEST")) == 1  # hosts compare case-insensitively
    assert_miss(sg.get("/h", vhost="a.test"), b"a.test")
    assert_hit(sg.get("/h", vhost="b.test"), b"b.test")
    assert origin.hits("/h") == 3


def test_purge_nothing_cached(origin, surogat):
    sg = surogat()
    r = purge(sg, "/never")
    assert purged(r) == 0
    assert r.body.count(b"Purged 0 objects.") == 1
    assert origin.hits() == 0


def test_purge_every_variant(origin, surogat):
    origin.route("/v", body=lambda req: (req.header("Accept-Language") or "-").encode(),
                 headers={"Cache-Control": "max-age=60", "Vary": "Accept-Language"})
    sg = surogat()
    for lang in ("en", "fr", "de"):
        assert_miss(sg.get("/v", headers={"Accept-Language": lang}), lang.encode())
    assert sg.stat("n_object") == 3
    assert purged(purge(sg, "/v")) == 3
    assert sg.stat("n_object") == 0
    for lang in ("en", "fr", "de"):
        assert_miss(sg.get("/v", headers={"Accept-Language": lang}), lang.encode())
    assert origin.hits("/v") == 6


@pytest.mark.parametrize("acl", ["10.0.0.0/8, ::2", "", "!127.0.0.1, 127.0.0.0/8"],
                         ids=["other-nets", "empty", "excluded"])
def test_purge_denied_by_acl(origin, surogat, acl):
    origin.route("/d", body=b"keep me", headers=CC60)
    sg = surogat(params={"purge_acl": acl})
    assert_miss(sg.get("/d"), b"keep me")
    r = purge(sg, "/d")
    assert r.status == 403, r
    assert_hit(sg.get("/d"), b"keep me")
    assert origin.hits("/d") == 1
    st = sg.stats()
    assert st["purge_denied"] == 1 and st["purges"] == 0 and st["purge_objects"] == 0


def test_purge_acl_changes_at_runtime(origin, surogat):
    origin.route("/d", body=b"x", headers=CC60)
    sg = surogat(params={"purge_acl": "192.0.2.0/24"})
    assert_miss(sg.get("/d"), b"x")
    assert purge(sg, "/d").status == 403
    ctl_ok(sg, "param.set", "purge_acl", "192.0.2.0/24, 127.0.0.0/8")
    assert purged(purge(sg, "/d")) == 1
    ctl_ok(sg, "param.set", "purge_acl", "::1")
    assert purge(sg, "/d").status == 403
    # A value that does not parse lets nobody purge, and says so in the log.
    ctl_ok(sg, "param.set", "purge_acl", "127.0.0.1/99")
    assert purge(sg, "/d").status == 403
    assert "purge_acl" in sg.log_tail(50)
    assert sg.stat("purge_denied") == 3


def test_purge_acl_ipv6(origin, surogat):
    if not have_ipv6_loopback():
        pytest.skip("no IPv6 loopback")
    origin.route("/six", body=b"6", headers=CC60)
    sg = surogat(params={"purge_acl": "::1/128"}, listen6=True)
    assert_miss(sg.get("/six"), b"6")
    assert purge(sg, "/six").status == 403  # 127.0.0.1 is not in the list
    with sg.conn(v6=True) as c:
        c.request("PURGE", "/six")
        assert purged(c.read_response()) == 1


# -- soft purge ----------------------------------------------------------------------


def test_soft_purge_serves_stale_while_refreshing(origin, surogat):
    origin.route("/g", body=b"version one",
                 headers={"Cache-Control": "max-age=60, stale-while-revalidate=30"})
    sg = surogat()
    assert_miss(sg.get("/g"), b"version one")
    r = purge(sg, "/g", headers={"Purge-Mode": "soft"})
    assert purged(r) == 1 and b"Soft-purged" in r.body
    assert sg.stat("n_object") == 1, "a soft purge keeps the object"
    origin.route("/g", body=b"version two", delay=1.0, headers=CC60)
    # The first request gets the stale copy at once and starts a background refresh;
    # the others get it too while the refresh runs.
    for _ in range(4):
        r = sg.get("/g")
        assert r.body == b"version one", r
        assert re.fullmatch(r"surogat; hit; ttl=-\d+", r.header("Cache-Status")), r
    origin.wait_hits("/g", 2, timeout=5)
    wait_until(lambda: sg.get("/g").body == b"version two", 10, "the refreshed copy")
    assert_hit(sg.get("/g"), b"version two")
    assert origin.hits("/g") == 2
    st = sg.stats()
    assert st["cache_bgfetch"] == 1
    assert st["purges_soft"] == 1 and st["purges"] == 1 and st["purge_objects"] == 1


@pytest.mark.parametrize("hdr", [{"Purge-Mode": "soft"}, {"Fastly-Soft-Purge": "1"}],
                         ids=["purge-mode", "fastly"])
def test_soft_purge_revalidates(origin, surogat, hdr):
    body = b"validated body " * 20
    origin.route("/r", conditional=True, body=body,
                 headers={"ETag": '"v1"', "Cache-Control": "max-age=60"})
    sg = surogat()
    assert_miss(sg.get("/r"), body)
    assert_hit(sg.get("/r"), body)
    assert purged(purge(sg, "/r", headers=hdr)) == 1
    r = sg.get("/r")
    q = origin.last("/r")
    assert origin.hits("/r") == 2
    assert q.headers_all("If-None-Match") == ['"v1"'], q.raw_head
    assert q.answered == 304
    assert r.status == 200 and r.body == body, r
    assert r.header("Cache-Status").startswith("surogat; fwd=stale; fwd-status=304"), r
    assert_hit(sg.get("/r"), body)
    assert origin.hits("/r") == 2
    assert sg.stat("cache_revalidated") == 1


def test_soft_purge_without_grace_refetches(origin, surogat):
    origin.route("/s", body=b"old", headers=CC60)
    sg = surogat()
    assert_miss(sg.get("/s"), b"old")
    assert purged(purge(sg, "/s", headers={"Purge-Mode": "soft"})) == 1
    origin.route("/s", body=b"new", headers=CC60)
    assert_miss(sg.get("/s"), b"new")
    assert origin.hits("/s") == 2


@pytest.mark.parametrize("hdr", [{"Purge-Mode": "gentle"}, {"Fastly-Soft-Purge": "yes"}])
def test_unknown_purge_mode_is_refused(origin, surogat, hdr):
    origin.route("/u", body=b"u", headers=CC60)
    sg = surogat()
    assert_miss(sg.get("/u"), b"u")
    assert purge(sg, "/u", headers=hdr).status == 400
    assert_hit(sg.get("/u"), b"u")


# -- surrogate keys ------------------------------------------------------------------


def test_surrogate_key_purge(origin, surogat):
    origin.route("/p1", body=b"p1", headers={**CC60, "Surrogate-Key": "news sport"})
    origin.route("/p2", body=b"p2", headers={**CC60, "Surrogate-Key": "front  news"})
    origin.route("/p3", body=b"p3", headers={**CC60, "Surrogate-Key": "weather newsroom"})
    origin.route("/p4", body=b"p4", headers=[("Cache-Control", "max-age=60"),
                                             ("Surrogate-Key", "x"), ("Surrogate-Key", "news")])
    origin.route("/p5", body=b"p5", headers=CC60)
    sg = surogat()
    paths = [("/p1", "a.test"), ("/p2", "a.test"), ("/p3", "a.test"), ("/p4", "b.test"),
             ("/p5", "a.test"), ("/p1", "c.test")]
    for p, h in paths:
        assert_miss(sg.get(p, vhost=h), p[1:].encode())
    r = sg.get("/p1", vhost="a.test")
    assert_hit(r, b"p1")
    assert r.header("Surrogate-Key") == "news sport", "the tags are delivered"
    assert sg.stat("xkey_tags") == 6
    # Any host may name the tag: the purge is across hosts.
    assert purged(purge(sg, "/", headers={"Surrogate-Key": "news"}, vhost="z.test")) == 4
    for p, h in paths:
        r = sg.get(p, vhost=h)
        if p in ("/p3", "/p5"):
            assert_hit(r, p[1:].encode())
        else:
            assert_miss(r, p[1:].encode())
    assert origin.hits("/p1") == 4 and origin.hits("/p2") == 2 and origin.hits("/p4") == 2
    assert origin.hits("/p3") == 1 and origin.hits("/p5") == 1
    st = sg.stats()
    assert st["purges_tag"] == 1 and st["purges"] == 0 and st["purge_objects"] == 4


def test_tag_purge_overtakes_a_streaming_fetch(origin, surogat):
    """Its head stored, the fetch is found by a purge of its tags: requests
    after the purge fetch again, and what it streams is not kept."""
    body = b"old." * 4000
    old = origin.route("/t", body=body, headers=dict(CC60, **{"Surrogate-Key": "grp"}),
                       hold_after=1000)
    sg = surogat()
    c = httpc.Conn(sg.port, timeout=20)
    try:
        c.request("GET", "/t")
        deadline = time.monotonic() + 10
        while b"\r\n\r\n" not in c.buf:  # the client has the head: the fetch stored it
            assert c._fill(deadline)  # pylint: disable=protected-access
        origin.route("/t", body=b"new", headers=dict(CC60, **{"Surrogate-Key": "grp"}))
        assert purged(purge(sg, headers={"Surrogate-Key": "grp"})) == 0
        assert_miss(sg.get("/t", timeout=5), b"new")  # not streaming the old one
        old.release.set()
        r = c.read_response()
        assert r.status == 200 and r.body == body
    finally:
        old.release.set()
        c.close()
    assert_hit(sg.get("/t"), b"new")
    assert origin.hits("/t") == 2 and sg.stat("cache_overtaken") == 1


def test_surrogate_key_several_tags_count_once(origin, surogat):
    origin.route("/m", body=b"m", headers={**CC60, "Surrogate-Key": "t1 t2 t3"})
    origin.route("/n", body=b"n", headers={**CC60, "Surrogate-Key": "t2"})
    sg = surogat()
    assert_miss(sg.get("/m"), b"m")
    assert_miss(sg.get("/n"), b"n")
    r = purge(sg, "/", headers=[("Surrogate-Key", "t1 t2"), ("Surrogate-Key", "t3 nope")])
    assert purged(r) == 2
    assert sg.stat("n_object") == 0
    assert sg.stat("xkey_tags") == 0, "the tag index forgets freed objects"


def test_xkey_header_and_soft_tag_purge(origin, surogat):
    origin.route("/x1", body=b"x1", conditional=True,
                 headers={**CC60, "xkey": "prod-1, cat-9", "ETag": '"x1"'})
    origin.route("/x2", body=b"x2", headers={**CC60, "xkey": "cat-9"})
    origin.route("/x3", body=b"x3", headers={**CC60, "xkey": "prod-1,cat-10"})
    sg = surogat()
    for p in ("/x1", "/x2", "/x3"):
        assert_miss(sg.get(p), p[1:].encode())
    assert purged(purge(sg, "/", headers={"xkey-purge": "prod-1"})) == 2
    assert_miss(sg.get("/x3"), b"x3")
    assert_hit(sg.get("/x2"), b"x2")
    assert_miss(sg.get("/x1"), b"x1")
    # Soft by tag: expired, then revalidated with the stored validator.
    r = purge(sg, "/", headers={"xkey-purge": "cat-9", "Purge-Mode": "soft"})
    assert purged(r) == 2 and b"Soft-purged" in r.body
    assert sg.stat("n_object") == 3
    r = sg.get("/x1")
    assert r.body == b"x1" and "fwd-status=304" in r.header("Cache-Status"), r
    assert origin.last("/x1").answered == 304
    assert_miss(sg.get("/x2"), b"x2")
    assert_hit(sg.get("/x3"), b"x3")
    st = sg.stats()
    assert st["purges_tag"] == 2 and st["purges_soft"] == 1


# -- bans ----------------------------------------------------------------------------


def fill(sg, origin, paths, headers=None, vhost="surogat.test"):
    for p in paths:
        origin.route(p, body=p.encode(), headers={**CC60, **(headers or {})})
        assert_miss(sg.get(p, vhost=vhost), p.encode())


def test_ban_url_regex(origin, surogat):
    sg = surogat(params={"ban_lurker_sleep": "0"})  # lookups do all the work here
    fill(sg, origin, ["/news/1", "/news/2", "/sport/1", "/a/news"])
    ctl_ok(sg, "ban", "req.url ~ ^/news")
    for p in ("/news/1", "/news/2"):
        assert_miss(sg.get(p), p.encode())
    for p in ("/sport/1", "/a/news"):
        assert_hit(sg.get(p), p.encode())
    st = sg.stats()
    assert st["bans_added"] == 1 and st["bans_lookup_killed"] == 2
    assert st["bans_lookup_tested"] >= 4 and st["bans_lurker_tested"] == 0
    assert st["bans"] == 2


def test_ban_obj_header(origin, surogat):
    sg = surogat(params={"ban_lurker_sleep": "0"})
    fill(sg, origin, ["/i1", "/i2"], {"Content-Type": "image/png"})
    fill(sg, origin, ["/t1"], {"Content-Type": "text/html"})
    fill(sg, origin, ["/n1"])
    ctl_ok(sg, "ban", "obj.http.content-type ~ ^image/")
    assert_miss(sg.get("/i1"), b"/i1")
    assert_miss(sg.get("/i2"), b"/i2")
    assert_hit(sg.get("/t1"), b"/t1")
    assert_hit(sg.get("/n1"), b"/n1")  # no such field: ~ is false


def test_ban_host_and_conjunction(origin, surogat):
    sg = surogat(params={"ban_lurker_sleep": "0"})
    fill(sg, origin, ["/p", "/q"], vhost="a.test")
    fill(sg, origin, ["/p", "/q"], vhost="b.test")
    ctl_ok(sg, "ban", 'req.http.host == A.test && req.url != "/q"')
    assert_miss(sg.get("/p", vhost="a.test"), b"/p")
    assert_hit(sg.get("/q", vhost="a.test"), b"/q")
    assert_hit(sg.get("/p", vhost="b.test"), b"/p")
    # varnishadm style: the expression as separate arguments
    ctl_ok(sg, "ban", "req.http.host", "==", "b.test", "&&", "obj.status", "==", "200")
    assert_miss(sg.get("/q", vhost="b.test"), b"/q")
    assert_miss(sg.get("/p", vhost="b.test"), b"/p")


def test_ban_does_not_touch_newer_objects(origin, surogat):
    sg = surogat(params={"ban_lurker_sleep": "0"})
    fill(sg, origin, ["/old"])
    ctl_ok(sg, "ban", "req.url ~ .")
    fill(sg, origin, ["/new"])
    assert_hit(sg.get("/new"), b"/new")
    assert_miss(sg.get("/old"), b"/old")
    assert_hit(sg.get("/old"), b"/old")  # stored after the ban
    assert origin.hits("/new") == 1 and origin.hits("/old") == 2
    out = ctl_ok(sg, "ban.list")
    assert out.startswith("Present bans:\n"), out
    assert 'req.url ~ "."' in out, out


def test_lurker_removes_banned_objects(origin, surogat):
    sg = surogat(params={"ban_lurker_sleep": "1ms", "ban_lurker_batch": "3"})
    fill(sg, origin, ["/l/%d" % i for i in range(20)])
    fill(sg, origin, ["/keep/%d" % i for i in range(5)])
    before = stats_json(sg)
    assert before["n_object"] == 25 and before["bans"] == 1
    ctl_ok(sg, "ban", "req.url ~ ^/l/")
    sg.wait_stat("bans_lurker_killed", 20, timeout=10)
    deadline = time.monotonic() + 10
    while stats_json(sg)["bans"] != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    after = stats_json(sg)
    assert after["bans"] == 1, "the lurker did not trim the ban list"
    assert after["n_object"] == 5
    assert after["bans_lurker_killed"] == 20
    assert after["bans_lurker_tested"] >= 25
    assert after["bans_lookup_tested"] == 0 and after["bans_lookup_killed"] == 0
    assert after["bans_trimmed"] >= 1
    assert_hit(sg.get("/keep/1"), b"/keep/1")
    assert_miss(sg.get("/l/3"), b"/l/3")


def test_duplicate_bans_fold(origin, surogat):
    sg = surogat(params={"ban_lurker_sleep": "0"})
    fill(sg, origin, ["/d"])
    ctl_ok(sg, "ban", "req.url == /d")
    ctl_ok(sg, "ban", 'req.url  ==  "/d"')
    st = sg.stats()
    assert st["bans_dups"] == 1 and st["bans"] == 3
    assert_miss(sg.get("/d"), b"/d")
    assert sg.stat("bans_lookup_tested") == 1, "the superseded ban was tested too"


@pytest.mark.parametrize("expr,msg", [
    ("req.url =~ x", "unknown operator '=~'"),
    ("req.uri ~ x", "unknown field 'req.uri'"),
    ("req.url ~ (", "bad regular expression"),
    ("req.url ~", "expected an argument"),
    ("obj.status ~ 200", "unknown operator"),
    ("obj.status == abc", "obj.status needs a number"),
    ('req.url == "/a', "unterminated quoted string"),
    ("req.url == /a req.url == /b", "expected '&&'"),
])
def test_malformed_ban(origin, surogat, expr, msg):
    sg = surogat()
    p = sg.ctl("ban", expr)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert msg in p.stderr, p.stderr
    assert re.search(r"ban: at \d+: ", p.stderr), p.stderr
    st = sg.stats()
    assert st["bans_added"] == 0 and st["bans"] == 1
    assert sg.alive()


def test_purge_garbage_does_not_crash(origin, surogat):
    origin.route("/g", body=b"g", headers={**CC60, "Surrogate-Key": " ,, " + "k" * 2000})
    sg = surogat()
    assert_miss(sg.get("/g"), b"g")
    weird = [
        {"Surrogate-Key": ""},
        {"Surrogate-Key": " \t ,,, "},
        {"xkey-purge": "," * 500},
        {"Surrogate-Key": "k" * 2000},
        {"Purge-Mode": ""},
        {"Purge-Mode": "soft", "Fastly-Soft-Purge": "0", "xkey-purge": "a b c"},
    ]
    for h in weird:
        r = purge(sg, "/g", headers=h)
        assert r.status in (200, 400), (h, r)
    with sg.conn() as c:
        c.send(b"PURGE * HTTP/1.1\r\nHost: x\r\n\r\n")
        assert c.read_response().status in (200, 400)
    with sg.conn() as c:
        c.request("PURGE", "/g", body=b"a body nobody reads")
        assert c.read_response().status == 200
    for line in ("ban", "ban \"\"", "ban \"req.url ~ \\\\\"", "ban && && &&", "ban.list x"):
        assert sg.admin(line)[0][0] != 200, line
    assert sg.alive()
    assert_miss(sg.get("/g"), b"g")  # the PURGE with a body went through
    assert purged(purge(sg, "/g")) == 1


def test_concurrent_purges_and_bans(origin, surogat):
    """Lookups, purges, tag purges and the lurker at once: no crash, counts add up."""
    sg = surogat(params={"ban_lurker_sleep": "1ms", "ban_lurker_batch": "2"})
    for i in range(8):
        origin.route("/c/%d" % i, body=b"c", headers={**CC60, "Surrogate-Key": "all c%d" % i})

    def worker(n):
        for j in range(15):
            p = "/c/%d" % ((n + j) % 8)
            assert sg.get(p).status == 200
            if j % 5 == 0:
                assert purge(sg, p).status == 200
            if j % 7 == 0:
                assert purge(sg, "/", headers={"Surrogate-Key": "c%d" % n}).status == 200
        return True

    with ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(worker, n) for n in range(4)]
        for k in range(5):
            ctl_ok(sg, "ban", "req.url ~ /c/%d" % k)
        assert all(f.result(timeout=60) for f in futs)
    assert sg.alive()
    purge(sg, "/", headers={"Surrogate-Key": "all"})
    assert sg.stat("n_object") == 0
    assert sg.stat("xkey_tags") == 0
