"""A background refresh is a busy object with no request behind it: its
backend hooks run on the fetch's own policy context, which holds what the
request that started it knew (its head as recv left it, its client, its
program), so they behave as on that request's own miss."""

import time

import pytest

from conftest import wait_until
from p_policy_test import script
from t_tls_test import pki, tls  # noqa: F401 -- fixtures

pytestmark = pytest.mark.usefixtures("pki")

HOOKS = """
function recv(req)
    req.http.x_recv = "set by recv for " .. req.url
end
function backend_fetch(bereq)
    bereq.http.x_client_ip = client.ip
    bereq.http.x_client_tls = tostring(client.tls)
    bereq.http.x_client_proto = tostring(client.proto)
    bereq.http.x_server_tls = tostring(server.tls)
    bereq.http.x_backend = tostring(bereq.backend)
    bereq.http.x_bgfetch = tostring(bereq.is_bgfetch)
    bereq.http.x_xid = tostring(bereq.xid)
end
function backend_response(bereq, beresp)
    beresp.ttl = 1
    beresp.grace = 30
    beresp.http.x_br = tostring(client.ip) .. " " .. tostring(client.tls) .. " " ..
        tostring(bereq.http.x_recv) .. " " .. tostring(bereq.is_bgfetch)
end
"""

# What backend_fetch wrote from the client and the request: the same for a miss and a refresh.
SAME = ("X-Recv", "X-Client-Ip", "X-Client-Tls", "X-Client-Proto", "X-Server-Tls", "X-Backend",
        "X-Forwarded-Proto", "X-Forwarded-For", "Host", "Via")


def test_backend_hooks_see_the_same_on_a_miss_and_a_refresh(origin, tls, tmp_path):
    """backend_fetch reads client facts and recv's fields, backend_response
    sets the ttl: a refresh started by a TLS client's grace hit sees and
    does what that client's miss did (it used to see no client at all, and
    only the URL, Host and the Vary fields of the request)."""
    route = origin.route("/h", body=b"v1", headers={"Cache-Control": "max-age=300"})
    t = tls(args=["-f", str(script(tmp_path, HOOKS))])
    r = t.get("/h")
    assert r.status == 200 and r.body == b"v1"
    assert r.header("X-Br") == "127.0.0.1 true set by recv for /h false", r
    miss = origin.last("/h")
    assert miss.header("X-Client-Ip") == "127.0.0.1", miss.raw_head
    assert miss.header("X-Client-Tls") == "true"
    assert miss.header("X-Bgfetch") == "false"
    time.sleep(1.3)  # backend_response's ttl, not max-age=300
    route.body = b"v2"
    r = t.get("/h")  # stale, in grace: served at once, refreshed in the background
    assert r.body == b"v1"
    origin.wait_hits("/h", 2)
    refresh = origin.last("/h")
    for name in SAME:
        assert refresh.headers_all(name) == miss.headers_all(name), (name, refresh.raw_head)
    assert refresh.header("X-Forwarded-Proto") == "https"
    assert refresh.header("X-Bgfetch") == "true"
    assert refresh.header("X-Xid") != miss.header("X-Xid")  # a transaction of its own
    assert not refresh.has("Cookie")
    # backend_response ran on the refresh as on the miss: its field, and its ttl of 1s
    wait_until(lambda: t.get("/h").body == b"v2", 5, "the refreshed object")
    r = t.get("/h")
    assert r.header("X-Br") == "127.0.0.1 true set by recv for /h true", r
    time.sleep(1.3)
    route.body = b"v3"
    assert t.get("/h").body == b"v2"  # stale again after 1s: the refresh's ttl held
    origin.wait_hits("/h", 3)
    wait_until(lambda: t.get("/h").body == b"v3", 5, "the second refresh")


def test_refresh_sends_the_request_as_recv_left_it(origin, surogat, tmp_path):
    """The refresh's backend request is built from the request's head as
    the policy left it -- fields recv set and removed, its URL rewrite --
    as the request's own miss was, less the conditional fields."""
    route = origin.route("/new", body=b"v1", headers={"Cache-Control": "max-age=1, "
                                                      "stale-while-revalidate=30"})
    sg = surogat(args=["-f", str(script(tmp_path, """
        function recv(req)
            if req.url == "/old" then req.url = "/new" end
            req.http.x_device = "mobile"
            req.http.x_drop = nil
        end
    """))])
    hdrs = {"X-Drop": "secret", "Accept-Language": "fr"}
    assert sg.get("/old", headers=hdrs).body == b"v1"
    miss = origin.last("/new")
    time.sleep(1.3)
    route.body = b"v2"
    assert sg.get("/old", headers=dict(hdrs, **{"If-None-Match": '"x"'})).body == b"v1"
    origin.wait_hits("/new", 2)
    refresh = origin.last("/new")
    assert refresh.method == "GET" and refresh.path == "/new"
    for name in ("X-Device", "Accept-Language", "Host", "X-Forwarded-For"):
        assert refresh.headers_all(name) == miss.headers_all(name), (name, refresh.raw_head)
    assert refresh.header("X-Device") == "mobile"
    assert not refresh.has("X-Drop")
    assert not refresh.has("If-None-Match")  # the client's condition is not the cache's


RELOAD = """
function backend_fetch(bereq)
    bereq.http.x_prog = "{tag}"
end
function backend_response(bereq, beresp)
    beresp.ttl = 1
    beresp.grace = 30
    beresp.http.x_prog = "{tag}"
    beresp.http.x_fetch_prog = bereq.http.x_prog
end
function deliver(req, resp)
    resp.http.x_deliver = "{tag}"
end
"""


@pytest.mark.parametrize("how", ["reload", "discard"])
def test_reload_while_a_refresh_is_in_flight(origin, surogat, tmp_path, how):
    """A refresh holds the program its request ran under: a reload -- or
    that program discarded -- while it waits for the backend leaves it its
    hooks and backends, and it ends as it began; the next refresh runs
    under the new program."""
    route = origin.route("/r", body=b"v1", headers={"Cache-Control": "max-age=300"})
    a = script(tmp_path, RELOAD.format(tag="A"), "a.lua")
    sg = surogat(args=["-f", str(a)])
    r = sg.get("/r")
    assert r.body == b"v1" and r.header("X-Prog") == "A"
    errors = sg.stat("policy_error")
    time.sleep(1.3)
    route.body = b"v2"
    route.hold_head = True
    r = sg.get("/r")  # in grace: answered at once while the refresh waits on the backend
    assert r.body == b"v1" and r.header("X-Deliver") == "A"
    assert route.held.wait(5), "the refresh did not reach the backend"
    assert origin.last("/r").header("X-Prog") == "A"
    if how == "reload":
        a.write_text(RELOAD.format(tag="B"))
        p = sg.ctl("reload")
        assert p.returncode == 0, p.stdout + p.stderr
    else:
        b = script(tmp_path, RELOAD.format(tag="B"), "b.lua")
        for cmd in (("policy.load", "b", str(b)), ("policy.use", "b"), ("policy.discard", "boot")):
            p = sg.ctl(*cmd)
            assert p.returncode == 0, (cmd, p.stdout + p.stderr)
    route.hold_head = False
    route.release.set()
    wait_until(lambda: sg.get("/r").body == b"v2", 5, "the refreshed object")
    r = sg.get("/r")
    # stored by the refresh under A, delivered under B
    assert (r.header("X-Prog"), r.header("X-Fetch-Prog"), r.header("X-Deliver")) == \
        ("A", "A", "B"), r
    assert sg.alive()
    assert sg.stat("policy_error") == errors
    # stale again after the refresh's ttl: the next refresh is B's
    time.sleep(1.3)
    route.body = b"v3"
    sg.get("/r")
    wait_until(lambda: sg.get("/r").body == b"v3", 5, "the second refresh")
    r = sg.get("/r")
    assert (r.header("X-Prog"), r.header("X-Fetch-Prog")) == ("B", "B"), r
