"""Backend failures: each must become the right status before the response
head is sent, and an aborted client connection after it (never a
truncated response that looks complete)."""

import time

import pytest

import httpc
from conftest import free_port


def _assert_synth(r, status):
    assert r.status == status, r
    assert r.has("Date")
    if r.has("Content-Length"):
        assert int(r.header("Content-Length")) == len(r.body)


def test_backend_refused_503(origin, surogat):
    sg = surogat(backend="127.0.0.1:%d" % free_port())
    t0 = time.monotonic()
    r = sg.get("/x")
    dt = time.monotonic() - t0
    _assert_synth(r, 503)
    assert dt < 3, "503 for a refused backend took %.2fs" % dt
    assert sg.stat("backend_fail") >= 1
    # and again: nothing got stuck
    assert sg.get("/y").status == 503


def test_backend_never_answers_504(origin, surogat):
    origin.route("/hang", hang=True)
    sg = surogat(params={"backend_first_byte_timeout": "1s"})
    t0 = time.monotonic()
    r = sg.get("/hang", timeout=20)
    dt = time.monotonic() - t0
    _assert_synth(r, 504)
    assert 0.8 <= dt <= 8, "504 after %.2fs with backend_first_byte_timeout=1s" % dt
    assert sg.stat("backend_timeout") >= 1
    # the daemon still serves
    assert sg.get("/fine").status == 200


def test_backend_partial_head_504(origin, surogat):
    # raw: sent, then the origin waits for another request on the connection
    origin.route("/half", raw=b"HTTP/1.1 200 OK\r\nContent-Le")
    sg = surogat(params={"backend_first_byte_timeout": "1s",
                         "backend_between_bytes_timeout": "1s"})
    r = sg.get("/half", timeout=20)
    _assert_synth(r, 504)


GARBAGE = {
    "not_http": b"this is not http at all\r\n\r\n",
    "bad_status": b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
    "bad_version": b"HTTP/x.y 200 OK\r\nContent-Length: 0\r\n\r\n",
    "two_lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
    "bad_length": b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\nhello",
    "space_before_colon": b"HTTP/1.1 200 OK\r\nContent-Length : 5\r\n\r\nhello",
    "obs_fold": b"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 5\r\n\r\nhello",
    "nul_in_header": b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 5\r\n\r\nhello",
    "binary": bytes(range(256)) * 4,
    "cl_and_te": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
                 b"5\r\nhello\r\n0\r\n\r\n",

}


@pytest.mark.parametrize("name", sorted(GARBAGE))
def test_garbage_response_502(origin, surogat, name):
    origin.route("/g", garbage=GARBAGE[name])
    sg = surogat()
    r = sg.get("/g")
    _assert_synth(r, 502)
    assert sg.stat("backend_bad_resp") >= 1


def test_response_head_too_big_502(origin, surogat):
    origin.route("/big", headers=[("X-Big", "a" * 7000)] * 6)  # > http_resp_size=32k
    sg = surogat()
    _assert_synth(sg.get("/big"), 502)


def test_response_too_many_headers_502(origin, surogat):
    origin.route("/many", headers=[("X-H%d" % i, "v") for i in range(80)])
    sg = surogat()
    _assert_synth(sg.get("/many"), 502)


def test_response_below_limits_ok(origin, surogat):
    origin.route("/ok", headers=[("X-H%d" % i, "v" * 100) for i in range(50)])
    sg = surogat()
    r = sg.get("/ok")
    assert r.status == 200 and r.header("X-H49") == "v" * 100


def test_backend_dies_mid_body_content_length(origin, surogat):
    body = b"z" * (1 << 20)
    origin.route("/die", body=body, die_after=100 * 1024)
    sg = surogat()
    before = sg.stats()
    with sg.conn(timeout=20) as c:
        c.request("GET", "/die")
        raw = c.read_until_close(15)
    head, sep, got = raw.partition(b"\r\n\r\n")
    assert sep, "no response head at all: %r" % raw[:200]
    assert head.startswith(b"HTTP/1.1 200"), head
    lower = head.lower()
    if b"content-length: 1048576" in lower:
        assert len(got) < len(body), "got a complete-looking body"
    else:
        assert b"transfer-encoding: chunked" in lower, head
        assert not got.endswith(b"0\r\n\r\n"), "chunked response terminated cleanly"
    assert sg.stats()["fetch_aborted"] - before["fetch_aborted"] == 1


def test_backend_dies_mid_chunked_body(origin, surogat):
    chunks = [b"c" * 10000] * 30
    origin.route("/diec", chunked=True, chunks=chunks, die_after=100000)
    sg = surogat()
    with sg.conn(timeout=20) as c:
        c.request("GET", "/diec")
        raw = c.read_until_close(15)
    head, sep, got = raw.partition(b"\r\n\r\n")
    assert sep and head.startswith(b"HTTP/1.1 200"), raw[:200]
    assert b"0\r\n\r\n" not in got[-7:], "terminating chunk sent after the backend died"
    with pytest.raises(httpc.Incomplete):
        httpc.parse_responses(raw)
    sg.wait_stat("fetch_aborted", 1)


def test_backend_dies_mid_body_http10_client(origin, surogat):
    """A 1.0 client sees the promised length (or none) and a short body."""
    origin.route("/die", body=b"q" * 500000, die_after=50000)
    sg = surogat()
    with sg.conn(timeout=20) as c:
        c.send(b"GET /die HTTP/1.0\r\n\r\n")
        raw = c.read_until_close(15)
    head, _, got = raw.partition(b"\r\n\r\n")
    assert b"content-length: 500000" in head.lower() or b"content-length" not in head.lower()
    assert len(got) < 500000


def test_backend_stalls_mid_body(origin, surogat):
    origin.route("/stall", body=b"s" * 200000, stall_after=1000)
    sg = surogat(params={"backend_between_bytes_timeout": "1s"})
    t0 = time.monotonic()
    with sg.conn(timeout=20) as c:
        c.request("GET", "/stall")
        raw = c.read_until_close(15)
    dt = time.monotonic() - t0
    head, _, got = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert len(got) < 200000
    assert 0.8 <= dt <= 8, "client connection aborted after %.2fs" % dt


def test_recovers_after_backend_failures(origin, surogat):
    origin.route("/g", garbage=b"junk\r\n\r\n")
    origin.route("/d", body=b"d" * 100000, die_after=10)
    sg = surogat()
    for _ in range(3):
        assert sg.get("/g").status == 502
        with sg.conn() as c:
            c.request("GET", "/d")
            c.read_until_close(10)
    with sg.conn() as c:
        for _ in range(5):
            c.request("GET", "/ok")
            r = c.read_response()
            assert r.status == 200 and r.body == b"ok"


@pytest.mark.parametrize("body", [b"zz\r\nhello\r\n0\r\n\r\n",
                                  b"5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n",
                                  b"5\r\nhelloXX\r\n0\r\n\r\n"])
def test_bad_chunked_backend_body(origin, surogat, body):
    """A malformed chunked body from the backend: a 502 if nothing was sent
    yet, else an aborted connection; never a complete-looking response."""
    origin.route("/bc", garbage=b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    sg = surogat()
    with sg.conn() as c:
        c.request("GET", "/bc")
        raw = c.read_until_close(10)
    try:
        rs = httpc.parse_responses(raw)
    except httpc.Incomplete:
        rs = None
    sg.wait_stat("backend_bad_resp", 1)
    assert raw, "client connection closed without a byte: nothing was sent, so a 502 was due"
    if rs is not None:
        assert len(rs) == 1 and rs[0].status == 502, rs
