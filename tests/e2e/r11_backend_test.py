"""Issue 11, the backend side: backends that misbehave on purpose.

- Late bytes: whatever a backend writes past a response (after its
  length, after a HEAD, 204 or 304 that announced a body, after the last
  chunk, or on a connection idle in the pool) must never become the
  answer to the next request on that connection, for another URL, nor be
  cached under it.  Each origin below writes a complete fake response
  ("POISON", cacheable for a minute) where the next answer would be read.
- Interim responses share the first-byte deadline and are capped.
- Every refused response is logged with its backend and reason, at most
  a line a second per reason.
- Transfer codings under (or instead of) chunked are undone as RFC 9112
  section 6.3 frames them; Transfer-Encoding is never stored or
  forwarded.
"""

import gzip
import re
import threading
import time
import zlib

import pytest

import httpc
from conftest import wait_until
from b_backend_tls_test import TlsOrigin, backend, pki, start  # noqa: F401 - pki: a fixture

POISON = (b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nCache-Control: max-age=60\r\n"
          b"X-Poison: yes\r\n\r\nPOISON")
OK5 = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
CHUNKED5 = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"


def log_text(sg):
    return sg.log_path.read_text(errors="replace")


def wait_log(sg, text, timeout=5.0):
    wait_until(lambda: text in log_text(sg), timeout, "%r in the daemon log:\n%s"
               % (text, sg.log_tail()))


def send(s, data):
    """sendall, False once surogat has closed the connection."""
    try:
        s.sendall(data)
        return True
    except OSError:
        return False


def answer_then(first, delay, extra, keep=True, sent=None):
    """An origin script: `first`, then `extra` after `delay` seconds, on the same
    connection; the threading.Event `sent` is set once `extra` is out."""
    def script(s, req, stop):
        if not send(s, first):
            return False
        if delay and stop.wait(delay):
            return False
        ok = send(s, extra)
        if sent is not None:
            sent.set()
        return ok and keep
    return script


def wait_sent(ev):
    """Until the origin wrote its late bytes (loopback delivers them at once)."""
    assert ev.wait(10), "the origin did not write its late bytes"
    time.sleep(0.1)


def route_b(origin):
    origin.route("/b", body=b"real b", headers={"Cache-Control": "max-age=60"})


def assert_b_clean(sg):
    """/b answered by the origin, and the cached copy is that answer too."""
    for i in range(2):
        r = sg.get("/b")
        assert r.status == 200 and r.body == b"real b" and not r.has("X-Poison"), \
            "request %d for /b got %r" % (i + 1, r)


# -- 2. late bytes ------------------------------------------------------------------------


@pytest.mark.parametrize("first", [OK5, CHUNKED5], ids=["length", "chunked"])
def test_bytes_after_a_body_in_the_same_read(origin, surogat, first):
    origin.route("/a", script=answer_then(first + POISON, 0, b""))
    route_b(origin)
    sg = surogat()
    assert sg.get("/a").body == b"hello"
    assert_b_clean(sg)
    assert sg.stat("backend_out_of_step") == 1
    wait_log(sg, "backend default: bytes past the end of a response: connection closed, "
                 "not reused (GET /a)")


@pytest.mark.parametrize("first", [OK5, CHUNKED5], ids=["length", "chunked"])
def test_bytes_after_a_body_written_later(origin, surogat, first):
    """The extra response comes 0.2 s after a body that was exactly as long as
    announced: it waits on the idle connection, which the next request must
    not take."""
    sent = threading.Event()
    origin.route("/a", script=answer_then(first, 0.2, POISON, sent=sent))
    route_b(origin)
    sg = surogat()
    assert sg.get("/a").body == b"hello"
    wait_sent(sent)
    assert_b_clean(sg)
    st = sg.stats()
    assert st["backend_out_of_step"] == 1 and st["backend_reuse"] == 0, st
    wait_log(sg, "backend default: bytes on an idle connection before a request was sent on "
                 "it: connection closed, the request went on another")


# A HEAD, 204 or 304 that announces a body (Content-Length) and writes it 0.3 s
# later, as a buggy backend does: the request for /b that follows at once would
# find nothing waiting on the connection, go out on it, and read the "body".
BODIES = {
    "head": (b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(POISON), "HEAD", 200),
    "204": (b"HTTP/1.1 204 No Content\r\nContent-Length: %d\r\n\r\n" % len(POISON), "GET", 204),
    "304": (b"HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\nContent-Length: %d\r\n\r\n"
            % len(POISON), "GET", 304),
}


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_bodiless_response_followed_by_its_body(origin, surogat, kind):
    head, method, status = BODIES[kind]
    origin.route("/a", script=answer_then(head, 0.3, POISON))
    route_b(origin)
    sg = surogat()
    # A pass (Cookie), so the backend sees the HEAD and the client's condition.
    hdrs = {"Cookie": "s=1", "If-None-Match": '"e"'}
    with sg.conn() as c:
        c.request(method, "/a", headers=hdrs)
        assert c.read_response(method).status == status
        c.request("GET", "/b")
        r = c.read_response()
        assert r.status == 200 and r.body == b"real b" and not r.has("X-Poison"), r
    assert_b_clean(sg)
    st = sg.stats()
    assert st["backend_close_unread"] == 1 and st["backend_reuse"] == 0, st


def test_bodiless_response_with_length_zero_is_reused(origin, surogat):
    """The rule costs a connection only when a body was announced."""
    origin.route("/n", status=204, headers={"Content-Length": "0"})
    origin.route("/h", body=b"")
    sg = surogat()
    with sg.conn() as c:
        for m, p in [("GET", "/n"), ("HEAD", "/h"), ("GET", "/n")]:
            c.request(m, p, headers={"Cookie": "s=1"})
            assert c.read_response(m).status in (200, 204)
    assert origin.conns == 1
    assert sg.stat("backend_close_unread") == 0


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_bytes_written_while_idle_in_the_pool(origin, surogat, method):
    """A backend that writes a whole response on a connection nobody asked
    anything on: the next request, idempotent or not, goes on a new
    connection (nothing was sent on the bad one) and gets its own answer."""
    sent = threading.Event()
    origin.route("/a", script=answer_then(OK5, 0.5, POISON, sent=sent))
    route_b(origin)
    origin.route("/p", body=b"posted")
    sg = surogat()
    assert sg.get("/a").body == b"hello"
    wait_sent(sent)
    if method == "POST":
        r = sg.request("POST", "/p", body=b"x")
        assert r.status == 200 and r.body == b"posted", r
        assert origin.hits("/p") == 1
    assert_b_clean(sg)
    st = sg.stats()
    assert st["backend_out_of_step"] == 1 and st["backend_retry"] == 0, st
    assert origin.conns == 2


def test_408_before_close_on_an_idle_connection(origin, surogat):
    """Some servers say 408 on an idle connection before closing it: that is
    not the answer to anything we send later."""
    sent = threading.Event()
    origin.route("/a", script=answer_then(
        OK5, 0.3, b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0"
                  b"\r\n\r\n", keep=False, sent=sent))
    sg = surogat()
    assert sg.get("/a").body == b"hello"
    wait_sent(sent)
    r = sg.get("/c")
    assert r.status == 200 and r.body == b"ok", r


def test_bytes_on_an_idle_tls_connection(pki, surogat, tmp_path):
    """The same over TLS: the stray response is a TLS record the pool must
    see (a peek through OpenSSL), not mistake for a session ticket."""
    o = TlsOrigin(*pki.a)
    try:
        sent = threading.Event()
        o.route("/a", script=answer_then(OK5, 0.3, POISON, sent=sent))
        route_b(o)
        sg = start(surogat, tmp_path, backend(o.port, ca_file=pki.ca, sni="a.test"))
        assert sg.get("/a").body == b"hello"
        wait_sent(sent)
        assert_b_clean(sg)
        assert sg.stat("backend_out_of_step") == 1
        # A TLS connection that stayed quiet is still reused (tickets are no stray bytes).
        assert sg.get("/c").status == 200 and sg.stat("backend_reuse") >= 1
    finally:
        o.stop()


# -- 10. interim responses ------------------------------------------------------------------


def interim_forever(s, req, stop):
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not stop.wait(0.1):
        if not send(s, b"HTTP/1.1 100 Continue\r\n\r\n"):
            return False
    return False


@pytest.mark.parametrize("first_byte, status", [("1s", 504), ("10s", 502)])
def test_endless_100_continue(origin, surogat, first_byte, status):
    """100 Continue every 100 ms, forever: the first-byte deadline covers the
    whole sequence (504), and short of it the cap of 16 ends it (502)."""
    origin.route("/a", script=interim_forever)
    sg = surogat(params={"backend_first_byte_timeout": first_byte,
                         "backend_between_bytes_timeout": "60s"})
    t0 = time.monotonic()
    r = sg.get("/a", timeout=8)
    took = time.monotonic() - t0
    assert r.status == status, r
    assert took < 4, "answered after %.1fs" % took
    if status == 502:
        wait_log(sg, "more interim (1xx) responses than allowed (GET /a)")


def interims(n, final=OK5):
    hints = [b"HTTP/1.1 100 Continue\r\n\r\n",
             b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"]
    return b"".join(hints[i % 2] for i in range(n)) + final


@pytest.mark.parametrize("n, status", [(16, 200), (17, 502), (20, 502)])
def test_interim_responses_are_capped(origin, surogat, n, status):
    origin.route("/a", script=answer_then(interims(n), 0, b"", keep=False))
    sg = surogat()
    r = sg.get("/a")
    assert r.status == status, r
    if status == 200:
        assert r.body == b"hello"


def test_interim_does_not_restart_the_first_byte_clock(origin, surogat):
    origin.route("/a", script=answer_then(b"HTTP/1.1 100 Continue\r\n\r\n", 1.5, OK5))
    sg = surogat(params={"backend_first_byte_timeout": "1s"})
    t0 = time.monotonic()
    r = sg.get("/a")
    assert r.status == 504 and time.monotonic() - t0 < 1.4, r


# -- 13. refusals are logged -------------------------------------------------------------

REFUSED = {
    "cl_te": (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"
              b"0\r\n\r\n", 502, "response refused (502): both Content-Length and "
              "Transfer-Encoding"),
    "bad_cl": (b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello", 502,
               "invalid or differing Content-Length"),
    "bad_chunk": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n",
                  502, "response body refused: malformed chunked coding"),
    "big_head": (b"HTTP/1.1 200 OK\r\nX-Big: " + b"x" * 40000 + b"\r\n\r\n", 502,
                 "head larger than http_resp_size"),
    "upgrade": (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n",
                502, "unexpected 101 Switching Protocols"),
    "syntax": (b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", 502, "malformed response head"),
    "version": (b"HTTP/2.0 200 OK\r\nContent-Length: 1\r\n\r\nx", 502,
                "HTTP version other than 1.0 and 1.1"),
    "te_http10": (b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 502,
                  "Transfer-Encoding in an HTTP/1.0 response"),
    "chunked_twice": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 502,
                      "chunked applied twice"),
    "coding": (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: br, chunked\r\n\r\n0\r\n\r\n", 502,
               "a transfer coding other than chunked, gzip, deflate or identity"),
    "cut_head": (b"HTTP/1.1 200 OK\r\nContent-Le", 502,
                 "connection closed before the response head was complete"),
    "cut_body": (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", None,
                 "response body refused: connection closed before the end of the body"),
}


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_each_refusal_is_logged_with_backend_and_reason(origin, surogat, kind):
    raw, status, text = REFUSED[kind]
    origin.route("/x", garbage=raw)
    sg = surogat()
    with sg.conn() as c:
        c.request("GET", "/x?k=" + kind)
        if status is None:  # the head went out: the body is cut
            with pytest.raises(httpc.Incomplete):
                c.read_response()
        else:
            assert c.read_response().status == status
    wait_log(sg, "backend default: ")
    line = [ln for ln in log_text(sg).splitlines() if "backend default: " in ln]
    assert len(line) == 1 and text in line[0] and "(GET /x?k=%s)" % kind in line[0], line


def test_a_silent_body_is_logged(origin, surogat):
    origin.route("/s", body=b"0123456789", stall_after=4)
    sg = surogat(params={"backend_between_bytes_timeout": "1s"})
    with sg.conn() as c:
        c.request("GET", "/s")
        with pytest.raises(httpc.Incomplete):
            c.read_response()
    wait_log(sg, "backend default: response body refused: no byte for "
                 "backend_between_bytes_timeout (GET /s)")
    assert sg.stat("backend_body_cut") == 1


def test_a_flood_of_refusals_is_rate_limited(origin, surogat):
    origin.route("/x", garbage=REFUSED["cl_te"][0])
    sg = surogat()
    t0 = time.monotonic()
    for _ in range(40):
        assert sg.get("/x").status == 502
    took = time.monotonic() - t0
    lines = [ln for ln in log_text(sg).splitlines() if "Content-Length and Transfer" in ln]
    assert 1 <= len(lines) <= int(took) + 2, "%d lines for 40 refusals in %.1fs" % (
        len(lines), took)
    time.sleep(1.1)
    assert sg.get("/x").status == 502
    wait_log(sg, "more since the last message; see backend_bad_resp)")
    m = re.search(r"and (\d+) more since the last message", log_text(sg))
    assert 40 - len(lines) <= int(m.group(1)) + 1
    assert sg.stat("backend_bad_resp") == 41


def test_refusals_are_limited_per_backend(origin, surogat, tmp_path):
    """Two backends refused for the same reason in the same second: a line each."""
    from origins import Origin
    other = Origin()
    try:
        for o in (origin, other):
            o.route("/x", garbage=REFUSED["cl_te"][0])
        p = tmp_path / "two.lua"
        p.write_text('backend "one" { host = "127.0.0.1", port = %d }\n'
                     'backend "two" { host = "127.0.0.1", port = %d }\n'
                     'function recv(req)\n'
                     '  req.backend = req.http["x-be"] == "2" and "two" or "one"\n'
                     '  return "pass"\n'
                     'end\n' % (origin.port, other.port))
        sg = surogat(args=["-f", str(p)])
        for be in ("1", "2", "1", "2"):
            assert sg.get("/x", headers={"X-Be": be}).status == 502
        wait_log(sg, "backend two: response refused")
        text = log_text(sg)
        assert text.count("backend one: response refused") == 1
        assert text.count("backend two: response refused") == 1
    finally:
        other.stop()


# -- 16. transfer codings -----------------------------------------------------------------

PAYLOAD = b"".join(b"line %d of a text that compresses well\n" % i for i in range(400))


def coded(te, wire, headers=b"Cache-Control: max-age=60\r\nContent-Type: text/plain\r\n",
          close=False):
    head = b"HTTP/1.1 200 OK\r\n" + headers + b"Transfer-Encoding: " + te + b"\r\n\r\n"
    return answer_then(head + wire, 0, b"", keep=not close)


def plain_body(r):
    return gzip.decompress(r.body) if r.header("Content-Encoding") == "gzip" else r.body


def check_coded(sg, origin, path, want=PAYLOAD):
    """The first client, an HTTP/1.0 client, a client taking gzip, then hits."""
    r = sg.get(path)
    assert r.status == 200 and plain_body(r) == want, r
    assert r.tokens("Transfer-Encoding") in ([], ["chunked"]), r.headers
    assert "miss" in (r.header("Cache-Status") or "")
    r10 = sg.get(path, headers={"Host": "surogat.test"}, version="1.0")
    assert r10.status == 200 and plain_body(r10) == want and not r10.has("Transfer-Encoding")
    for ae in ({}, {"Accept-Encoding": "gzip"}):
        r = sg.get(path, headers=ae)
        assert r.status == 200 and plain_body(r) == want, r
        assert "hit" in (r.header("Cache-Status") or ""), r.headers
        assert r.tokens("Transfer-Encoding") in ([], ["chunked"]), r.headers
    assert origin.hits(path) == 1


def test_gzip_under_chunked(origin, surogat):
    origin.route("/g", script=coded(b"gzip, chunked", httpc.chunked(gzip.compress(PAYLOAD),
                                                                    size=700)))
    sg = surogat()
    check_coded(sg, origin, "/g")
    assert sg.stat("backend_te_decoded") == 1
    # The connection carried a body exactly: it is reused.
    assert sg.get("/b2").status == 200 and origin.conns == 1


def test_gzip_under_chunked_over_gzip_content(origin, surogat):
    """Content-Encoding: gzip under a gzip transfer coding: only the transfer
    coding is undone; the content stays gzip for a client that takes it."""
    content = gzip.compress(PAYLOAD)
    origin.route("/gg", script=coded(b"x-gzip, chunked", httpc.chunked(gzip.compress(content)),
                                     headers=b"Cache-Control: max-age=60\r\n"
                                             b"Content-Encoding: gzip\r\n"))
    sg = surogat()
    r = sg.get("/gg", headers={"Accept-Encoding": "gzip"})
    assert r.header("Content-Encoding") == "gzip" and gzip.decompress(r.body) == PAYLOAD
    r = sg.get("/gg")
    assert not r.has("Content-Encoding") and r.body == PAYLOAD


def test_deflate_under_chunked(origin, surogat):
    origin.route("/d", script=coded(b"deflate, chunked", httpc.chunked(zlib.compress(PAYLOAD))))
    sg = surogat()
    check_coded(sg, origin, "/d")


@pytest.mark.parametrize("te, wire", [
    (b"gzip", gzip.compress(PAYLOAD)),
    (b"identity", PAYLOAD),
    (b"chunked, gzip", gzip.compress(httpc.chunked(PAYLOAD, size=1000))),
], ids=["gzip", "identity", "chunked_gzip"])
def test_final_coding_other_than_chunked_read_until_close(origin, surogat, te, wire):
    origin.route("/u", script=coded(te, wire, close=True))
    sg = surogat()
    check_coded(sg, origin, "/u")
    st = sg.stats()
    assert st["backend_recycle"] == 0, st  # read until close: never reused


def test_unknown_coding_is_refused(origin, surogat):
    origin.route("/f", script=coded(b"foo, chunked", httpc.chunked(PAYLOAD)))
    sg = surogat()
    assert sg.get("/f").status == 502
    wait_log(sg, "a transfer coding other than chunked, gzip, deflate or identity (GET /f)")


def test_corrupt_transfer_coding_is_never_stored(origin, surogat):
    bad_head = b"\x1f\x8c" + gzip.compress(PAYLOAD)[2:]       # not gzip at all
    z = bytearray(gzip.compress(PAYLOAD))
    z[-6] ^= 0xff                                            # the CRC does not match
    origin.route("/c1", script=coded(b"gzip, chunked", httpc.chunked(bad_head)))
    origin.route("/c2", script=coded(b"gzip, chunked", httpc.chunked(bytes(z))))
    origin.route("/c3", script=coded(b"gzip, chunked", httpc.chunked(gzip.compress(PAYLOAD)[:-3])))
    sg = surogat()
    assert sg.get("/c1").status == 502  # nothing decoded yet: a clean 502
    for p in ("/c2", "/c3"):
        # A clean 502 while nothing went out yet, else a cut body: never a whole 200.
        with sg.conn() as c:
            c.request("GET", p)
            try:
                r = c.read_response()
                assert r.status == 502, r
            except httpc.Incomplete:
                pass
    for p in ("/c1", "/c2", "/c3"):
        try:
            sg.get(p)
        except httpc.Incomplete:
            pass
        assert origin.hits(p) == 2, "%s was stored" % p
    wait_log(sg, "corrupt or truncated gzip or deflate transfer coding")


def test_transfer_coding_bomb_is_refused(origin, surogat):
    """A transfer coding is bounded like a gzip body: gunzip_max_size and
    gunzip_max_ratio apply to what it inflates to."""
    bomb = gzip.compress(bytes(4 << 20))
    origin.route("/bomb", script=coded(b"gzip, chunked", httpc.chunked(bomb, size=4096)))
    sg = surogat(params={"gunzip_max_size": "1m"})
    try:
        r = sg.get("/bomb")
        assert r.status == 502, r
    except httpc.Incomplete:
        pass  # the head went out: the body is cut
    wait_log(sg, "its transfer coding inflates past gunzip_max_size or gunzip_max_ratio "
                 "(GET /bomb)")
    st = sg.stats()
    assert st["gunzip_bombs"] == 1 and st["cache_stored"] == 0, st


def test_transfer_encoding_is_never_stored_or_forwarded(origin, surogat):
    """A chunked response: the client gets surogat's own framing, a hit the
    stored head, which has no Transfer-Encoding at all."""
    origin.route("/t", chunked=True, chunks=[b"ab", b"cd"],
                 headers={"Cache-Control": "max-age=60"})
    sg = surogat()
    with sg.conn() as c:
        for i in range(2):
            c.request("GET", "/t")
            r = c.read_response()
            assert r.body == b"abcd"
            te = [v.lower() for v in r.headers_all("Transfer-Encoding")]
            assert te in ([], ["chunked"]), r.headers
    assert b"transfer-encoding" not in r.raw_head.lower(), r.raw_head  # the hit
