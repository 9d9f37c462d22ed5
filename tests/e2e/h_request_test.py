"""HTTP/1 request parsing over raw sockets: malformed or ambiguous requests
get the right status and a closed connection, and never reach the origin;
the limits are enforced at the right size and not below it."""

import time

import pytest

H = b"Host: a\r\n"

BAD_400 = {
    "no_version": b"GET /\r\n\r\n",
    "double_space": b"GET  / HTTP/1.1\r\n" + H + b"\r\n",
    "extra_token": b"GET / HTTP/1.1 x\r\n" + H + b"\r\n",
    "space_in_target": b"GET /a b HTTP/1.1\r\n" + H + b"\r\n",
    "bad_proto_name": b"GET / HTXP/1.1\r\n" + H + b"\r\n",
    "lowercase_proto": b"GET / http/1.1\r\n" + H + b"\r\n",
    "bad_method_char": b"G(T / HTTP/1.1\r\n" + H + b"\r\n",
    "nul_in_target": b"GET /a\x00b HTTP/1.1\r\n" + H + b"\r\n",
    "bare_cr_request_line": b"GET /\r HTTP/1.1\r\n" + H + b"\r\n",
    "bare_cr_header": b"GET / HTTP/1.1\r\n" + H + b"X-A: b\rX-B: c\r\n\r\n",
    "nul_in_header": b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x00b\r\n\r\n",
    "ctl_in_header": b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x01b\r\n\r\n",
    "del_in_header": b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x7fb\r\n\r\n",
    "ctl_in_name": b"GET / HTTP/1.1\r\n" + H + b"X\x01A: b\r\n\r\n",
    "obs_fold_space": b"GET / HTTP/1.1\r\n" + H + b"X-A: b\r\n c\r\n\r\n",
    "obs_fold_tab": b"GET / HTTP/1.1\r\n" + H + b"X-A: b\r\n\tc\r\n\r\n",
    "ws_before_first_header": b"GET / HTTP/1.1\r\n Host: a\r\n\r\n",
    "space_before_colon": b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
    "tab_before_colon": b"GET / HTTP/1.1\r\n" + H + b"X-A\t: b\r\n\r\n",
    "empty_name": b"GET / HTTP/1.1\r\n" + H + b": b\r\n\r\n",
    "no_colon": b"GET / HTTP/1.1\r\n" + H + b"X-A b\r\n\r\n",
    "bad_name_char": b"GET / HTTP/1.1\r\n" + H + b"X(A): b\r\n\r\n",
    "missing_host_11": b"GET / HTTP/1.1\r\nX-A: b\r\n\r\n",
    "two_hosts": b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "cl_and_te": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "te_and_cl": b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n"
                 b"Content-Length: 5\r\n\r\n0\r\n\r\n",
    "two_cl_differ": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5\r\n"
                     b"Content-Length: 6\r\n\r\nhello!",
    "cl_list": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 1,2\r\n\r\nabc",
    "cl_plus": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: +5\r\n\r\nhello",
    "cl_negative": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: -1\r\n\r\n",
    "cl_hex": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 0x5\r\n\r\nhello",
    "cl_alpha": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: abc\r\n\r\n",
    "cl_inner_space": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 1 2\r\n\r\n",
    "cl_empty": b"POST / HTTP/1.1\r\n" + H + b"Content-Length:\r\n\r\n",
    "cl_overflow": b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 99999999999999999999999\r\n\r\n",
    "te_space_before_colon": b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding : chunked\r\n"
                             b"\r\n0\r\n\r\n",
    "te_vtab": b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding:\x0bchunked\r\n\r\n0\r\n\r\n",
}

TE = b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
BAD_CHUNKS = {
    "chunk_size_zz": TE + b"zz\r\nhello\r\n0\r\n\r\n",
    "chunk_size_negative": TE + b"-1\r\nhello\r\n0\r\n\r\n",
    "chunk_size_huge": TE + b"ffffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
    "chunk_size_0x": TE + b"0x5\r\nhello\r\n0\r\n\r\n",
    "chunk_size_empty": TE + b"\r\nhello\r\n0\r\n\r\n",
    "chunk_data_no_crlf": TE + b"5\r\nhelloXX0\r\n\r\n",
    "chunk_lf_only": TE + b"5\nhello\n0\n\n",
    "chunk_ext_too_long": TE + b"5;" + b"e" * 2000 + b"\r\nhello\r\n0\r\n\r\n",
}

BAD_501 = {
    "te_unknown": b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: foo\r\n\r\n",
    "te_xchunked": b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: xchunked\r\n\r\n5\r\n"
                   b"hello\r\n0\r\n\r\n",
}

BAD_505 = {
    "http_2_0": b"GET / HTTP/2.0\r\n" + H + b"\r\n",
    "http_1_2": b"GET / HTTP/1.2\r\n" + H + b"\r\n",
    "http_3_0": b"GET / HTTP/3.0\r\n" + H + b"\r\n",
}


def _many_headers(n):
    return b"GET / HTTP/1.1\r\n" + H + b"".join(b"X-H%d: v\r\n" % i for i in range(n - 1)) + b"\r\n"


BAD_LIMITS = {
    "uri_too_long": (414, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n" + H + b"\r\n"),
    "header_line_too_long": (431, b"GET / HTTP/1.1\r\n" + H + b"X-Big: " + b"b" * 9000
                             + b"\r\n\r\n"),
    "too_many_headers_65": (431, _many_headers(65)),
    "too_many_headers_200": (431, _many_headers(200)),
    "head_too_big": (431, b"GET / HTTP/1.1\r\n" + H
                     + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 5000) for i in range(8)) + b"\r\n"),
}

COUNTER = {400: "client_req_400", 414: "client_req_414", 431: "client_req_431",
           501: "client_req_501", 505: "client_req_505"}


def check_refused(sg, origin, data, status, counter=True):
    before = sg.stats()
    with sg.conn() as c:
        c.send(data)
        r = c.read_response(timeout=10)
        if isinstance(status, tuple):
            assert r.status in status, r
        else:
            assert r.status == status, r
        assert r.has("Date")
        closed, extra = c.wait_closed(5)
        assert closed, "connection left open after %d" % r.status
        assert extra == b"", "bytes after the error response: %r" % extra[:200]
    assert origin.hits() == 0, "the origin got %r" % origin.reqs()
    if counter:
        name = COUNTER[r.status]
        after = sg.stats()
        assert after[name] - before[name] == 1, "%s did not count the %d" % (name, r.status)
    return r


@pytest.mark.parametrize("name", list(BAD_400))
def test_400(origin, surogat, name):
    check_refused(surogat(), origin, BAD_400[name], 400)


@pytest.mark.parametrize("name", list(BAD_CHUNKS))
def test_400_bad_chunked_body(origin, surogat, name):
    check_refused(surogat(), origin, BAD_CHUNKS[name], 400)


@pytest.mark.parametrize("name", list(BAD_501))
def test_501(origin, surogat, name):
    check_refused(surogat(), origin, BAD_501[name], 501)


def test_chunked_not_last(origin, surogat):
    check_refused(surogat(), origin, b"POST / HTTP/1.1\r\n" + H
                  + b"Transfer-Encoding: chunked, foo\r\n\r\n0\r\n\r\n", (400, 501))


def test_two_te_headers_chunked_not_last(origin, surogat):
    check_refused(surogat(), origin, b"POST / HTTP/1.1\r\n" + H
                  + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n"
                  + b"0\r\n\r\n", (400, 501))


@pytest.mark.parametrize("name", list(BAD_505))
def test_505(origin, surogat, name):
    check_refused(surogat(), origin, BAD_505[name], 505)


@pytest.mark.parametrize("name", list(BAD_LIMITS))
def test_limits(origin, surogat, name):
    status, data = BAD_LIMITS[name]
    check_refused(surogat(), origin, data, status)


def test_limits_are_params(origin, surogat):
    sg = surogat(params={"http_max_hdr": "10", "http_req_hdr_len": "100"})
    check_refused(sg, origin, _many_headers(11), 431)
    check_refused(sg, origin, b"GET / HTTP/1.1\r\n" + H + b"X-A: " + b"a" * 200 + b"\r\n\r\n",
                  431)
    r = sg.get("/", headers=[("X-H%d" % i, "v") for i in range(9)])
    assert r.status == 200


GOOD = {
    "max_headers_64": _many_headers(64),
    "long_uri_8000": b"GET /" + b"a" * 7980 + b" HTTP/1.1\r\n" + H + b"\r\n",
    "long_header_8000": b"GET / HTTP/1.1\r\n" + H + b"X-Big: " + b"b" * 7980 + b"\r\n\r\n",
    "head_30k": b"GET / HTTP/1.1\r\n" + H
                + b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 5000) for i in range(6)) + b"\r\n",
    "bare_lf": b"GET / HTTP/1.1\nHost: a\nX-A: b\n\n",
    "obs_text_value": b"GET / HTTP/1.1\r\n" + H + b"X-A: caf\xe9\r\n\r\n",
    "tab_ows": b"GET / HTTP/1.1\r\nHost:\ta\t\r\nX-A:\t b \t\r\n\r\n",
    "http10_no_host": b"GET / HTTP/1.0\r\n\r\n",
    "chunked_ows_te": b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding:\tChunked \r\n\r\n"
                      b"5\r\nhello\r\n0\r\n\r\n",
    "chunk_ext_trailer": b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
                         b"5;a=b;c=\"d\"\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
    "chunk_size_leading_zeros": b"POST / HTTP/1.1\r\n" + H
                         + b"Transfer-Encoding: chunked\r\n\r\n0005\r\nhello\r\n0\r\n\r\n",
}


@pytest.mark.parametrize("name", list(GOOD))
def test_valid_edge_requests(origin, surogat, name):
    origin.default.echo = True
    sg = surogat()
    with sg.conn() as c:
        c.send(GOOD[name])
        r = c.read_response()
    assert r.status == 200, r
    assert origin.hits() == 1
    if name.startswith("chunk"):
        assert r.body == b"hello"
    if name == "obs_text_value":
        assert origin.last().header("X-A") == "caf\xe9"
    if name == "tab_ows":
        assert origin.last().header("X-A") == "b"


def test_partial_head_times_out(origin, surogat):
    """timeout_req from the head's first byte, not timeout_idle; the waiter
    answers 408 (b_slow_client_test.py has the rest of slow clients)."""
    sg = surogat(params={"timeout_req": "1s", "timeout_idle": "30s"})
    with sg.conn() as c:
        c.send(b"GET / HTTP/1.1\r\nHost: a\r\n")
        t0 = time.monotonic()
        closed, extra = c.wait_closed(8)
        dt = time.monotonic() - t0
    assert closed, "partial head kept open 8s with timeout_req=1s"
    assert 0.9 <= dt <= 3.5, "closed after %.2fs with timeout_req=1s" % dt
    assert extra.startswith(b"HTTP/1.1 408 "), extra[:100]
    st = sg.stats()
    assert st["sess_timeout_req"] == 1 and st["sess_kept_bytes"] == 0, st
    assert origin.hits() == 0


def test_silent_connection_times_out(origin, surogat):
    sg = surogat(params={"timeout_idle": "1s"})
    with sg.conn() as c:
        t0 = time.monotonic()
        closed, extra = c.wait_closed(8)
        dt = time.monotonic() - t0
    assert closed and dt <= 5, "silent connection open %.2fs with timeout_idle=1s" % dt
    assert extra == b"" or extra.startswith(b"HTTP/1.1 408 "), extra[:100]


def test_slow_head_byte_by_byte(origin, surogat):
    """A head trickling in byte by byte within timeout_idle is fine."""
    sg = surogat(params={"timeout_idle": "3s"})
    with sg.conn() as c:
        for b in b"GET /slow HTTP/1.1\r\nHost: a\r\n\r\n":
            c.send(bytes([b]))
            time.sleep(0.01)
        r = c.read_response()
    assert r.status == 200
    assert origin.last().target == "/slow"
