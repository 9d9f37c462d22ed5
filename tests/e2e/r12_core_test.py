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
