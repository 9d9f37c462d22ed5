"""Regression tests for the request core: what drifted apart while three
places delivered responses on their own, and what the rebuild promises
(one deliverer, fetch that never delivers, background refreshes with no
request of their own)."""

import time

import pytest

from conftest import wait_until
from p_policy_test import script
from t_tls_test import pki, tls  # noqa: F401 -- fixtures

pytestmark = pytest.mark.usefixtures("pki")


def test_background_refresh_tells_the_backend_the_clients_scheme(origin, tls):
    """A refresh in the background, caused by a TLS client, says https as
    the client's own miss did (it used to build a fake request that always
    said http)."""
    route = origin.route("/g", body=b"v1", headers={"Cache-Control": "max-age=1, "
                                                    "stale-while-revalidate=30"})
    t = tls()
    r = t.get("/g")
    assert r.status == 200 and r.body == b"v1"
    assert origin.last("/g").headers_all("X-Forwarded-Proto") == ["https"]
    time.sleep(1.3)
    route.body = b"v2"
    r = t.get("/g")  # stale, in grace: served at once, refreshed in the background
    assert r.body == b"v1"
    origin.wait_hits("/g", 2)
    refresh = origin.last("/g")
    assert refresh.headers_all("X-Forwarded-Proto") == ["https"], refresh.raw_head
    assert refresh.headers_all("X-Forwarded-For") == ["127.0.0.1"], refresh.raw_head
    wait_until(lambda: t.get("/g").body == b"v2", 5, "the refreshed object")


def test_background_refresh_of_a_plain_client_says_http(origin, surogat):
    route = origin.route("/p", body=b"v1", headers={"Cache-Control": "max-age=1, "
                                                    "stale-while-revalidate=30"})
    sg = surogat()
    sg.get("/p", headers={"X-Forwarded-For": "10.1.2.3"})
    time.sleep(1.3)
    route.body = b"v2"
    assert sg.get("/p", headers={"X-Forwarded-For": "10.1.2.3"}).body == b"v1"
    origin.wait_hits("/p", 2)
    refresh = origin.last("/p")
    assert refresh.headers_all("X-Forwarded-Proto") == ["http"]
    assert refresh.headers_all("X-Forwarded-For") == ["10.1.2.3, 127.0.0.1"], refresh.raw_head


DELIVER_POLICY = """
backend "origin" { host = "127.0.0.1", port = %d }
backend "files" { root = "%s" }
route { prefix = "/static/", to = "files" }
route { to = "origin" }
function recv(req)
    if req.http.cookie then return "pass" end
end
function deliver(req, resp)
    resp.http.x_restarts = tostring(req.restarts)
    if req.http.x_do == "restart" and req.restarts == 0 then return "restart" end
    if req.http.x_do == "synth" then return surogat.synth(418, "from deliver") end
end
function synth(req, resp)
    resp.http.x_synth_hook = "ran"
end
"""


def deliver_kinds(origin, surogat, tmp_path):
    """One daemon, and a request maker for each kind of delivery: a miss, a
    hit, a pass, a static file, a stale copy served because the backend
    failed, a revalidated copy."""
    root = tmp_path / "files"
    (root / "static").mkdir(parents=True)
    (root / "static" / "a.txt").write_bytes(b"a static file\n")
    origin.route("/c", body=b"cached", headers={"Cache-Control": "max-age=300"})
    origin.route("/p", body=b"passed")
    stale = origin.route("/s", body=b"stale one", headers={"Cache-Control": "max-age=1"})
    reval = origin.route("/v", body=b"revalidated", conditional=True,
                         headers={"Cache-Control": "max-age=1", "ETag": '"v1"'})
    p = script(tmp_path, DELIVER_POLICY % (origin.port, root))
    sg = surogat(params={"default_grace": "0s"}, args=["-f", str(p)])
    for path in ("/s", "/v"):
        assert sg.get(path).status == 200
    time.sleep(1.3)
    stale.status = 503

    def miss(h):
        origin.route("/m%d" % miss.n, body=b"missed", headers={"Cache-Control": "max-age=300"})
        miss.n += 1
        return sg.get("/m%d" % (miss.n - 1), headers=h)
    miss.n = 0

    def hit(h):
        sg.get("/c")
        return sg.get("/c", headers=h)

    kinds = {
        "miss": miss,
        "hit": hit,
        "pass": lambda h: sg.get("/p", headers=dict(h, Cookie="s=1")),
        "static": lambda h: sg.get("/static/a.txt", headers=h),
        "stale": lambda h: sg.get("/s", headers=h),
        "revalidated": lambda h: sg.get("/v", headers=h),
    }
    assert reval  # conditional: a 304 renews it
    return sg, kinds


KINDS = ["miss", "hit", "pass", "static", "stale", "revalidated"]


@pytest.mark.parametrize("kind", KINDS)
def test_deliver_restart_is_the_same_everywhere(origin, surogat, tmp_path, kind):
    sg, kinds = deliver_kinds(origin, surogat, tmp_path)
    r = kinds[kind]({"X-Do": "restart"})
    assert r.status == 200, (kind, r)
    assert r.header("X-Restarts") == "1", (kind, r)  # restarted once, then delivered


@pytest.mark.parametrize("kind", KINDS)
def test_deliver_synth_goes_through_the_synth_hook_everywhere(origin, surogat, tmp_path, kind):
    sg, kinds = deliver_kinds(origin, surogat, tmp_path)
    r = kinds[kind]({"X-Do": "synth"})
    assert r.status == 418 and r.reason == "from deliver", (kind, r)
    assert r.header("X-Synth-Hook") == "ran", (kind, r)
