"""HTTP/2 hardening: RFC 9113 section 8 header rules (stream errors), each known flood
(Rapid Reset, CONTINUATION, HPACK bomb, SETTINGS/PING/WINDOW_UPDATE/PRIORITY/empty
frames), zero-window slowloris, the concurrent stream limit, idle timeout, graceful GOAWAY
on SIGTERM and reload.  Each with its counter, and the daemon serving on."""

import os
import signal
import socket
import time

import h2.settings
import hpack
import pytest

import httpc
from conftest import free_port, wait_until
from h2util import (H2, Raw, continuation, data_frame, ping_frame, priority, raw_headers,
                    rst_stream, settings_frame, window_update)

PROTOCOL_ERROR, FLOW_CONTROL_ERROR, REFUSED_STREAM, CANCEL = 1, 3, 7, 8
ENHANCE_YOUR_CALM = 11


@pytest.fixture
def h2c(surogat, tmp_path):
    """Factory: h2c(params=...) -> (sg, port): a static tree on an h2c listener."""

    def start(params=None, args=(), backend=None):
        www = tmp_path / "www"
        www.mkdir(exist_ok=True)
        (www / "index.html").write_text("<html>ok</html>\n")
        (www / "big.bin").write_bytes(os.urandom(4 << 20))
        port = free_port()
        sg = surogat(params=params, backend=backend or str(www),
                     args=["-a", "127.0.0.1:%d,h2c" % port] + list(args))
        sg.h2port = port
        return sg, port

    return start


def served(port):
    """A fresh connection still gets an answer: nothing broke the daemon."""
    with H2(port) as c:
        return c.get("/index.html").status == 200


# -- RFC 9113 section 8: malformed requests are stream errors -----------------------------

BASE = [(":method", "GET"), (":scheme", "http"), (":authority", "a.test"), (":path", "/index.html")]


def without(name):
    return [h for h in BASE if h[0] != name]


PSEUDO_CASES = {
    "no_method": without(":method"),
    "no_path": without(":path"),
    "no_scheme": without(":scheme"),
    "empty_path": without(":path") + [(":path", "")],
    "twice": BASE + [(":path", "/index.html")],
    "after_regular": without(":path") + [("accept", "*/*"), (":path", "/index.html")],
    "unknown": BASE + [(":foo", "bar")],
    "status": BASE + [(":status", "200")],
    "protocol": BASE + [(":protocol", "websocket")],
    "space_in_path": without(":path") + [(":path", "/a b")],
    "not_origin_form": without(":path") + [(":path", "index.html")],
    "asterisk_get": without(":path") + [(":path", "*")],
    "bad_method": without(":method") + [(":method", "GE T")],
}

FIELD_CASES = {
    "uppercase": BASE + [("X-Foo", "1")],
    "connection": BASE + [("connection", "keep-alive")],
    "keep_alive": BASE + [("keep-alive", "5")],
    "proxy_connection": BASE + [("proxy-connection", "x")],
    "transfer_encoding": BASE + [("transfer-encoding", "chunked")],
    "upgrade": BASE + [("upgrade", "websocket")],
    "te_gzip": BASE + [("te", "gzip")],
    "cr": BASE + [("x-a", "a\rb")],
    "lf": BASE + [("x-a", "a\nb")],
    "nul": BASE + [("x-a", "a\0b")],
    "leading_space": BASE + [("x-a", " a")],
    "trailing_tab": BASE + [("x-a", "a\t")],
    "name_colon": BASE + [("x:a", "1")],
    "name_space": BASE + [("x a", "1")],
    "empty_name": BASE + [("", "1")],
    "bad_content_length": BASE + [("content-length", "1x")],
    "two_content_lengths": BASE + [("content-length", "1"), ("content-length", "2")],
}


@pytest.mark.parametrize("case", sorted(PSEUDO_CASES) + sorted(FIELD_CASES))
def test_malformed_request_is_reset(h2c, case):
    sg, port = h2c()
    block = PSEUDO_CASES.get(case) or FIELD_CASES[case]
    counter = "h2_err_pseudo" if case in PSEUDO_CASES else "h2_err_field"
    with H2(port) as c:
        st = c.response(c.headers_block(block))
        assert st.reset == PROTOCOL_ERROR and st.headers is None, st
        # a stream error: the connection goes on
        assert c.get("/index.html").status == 200
        assert c.goaway is None
    assert sg.stat(counter) == 1
    assert sg.stat("h2_rst_sent") >= 1


def test_well_formed_edges_are_served(h2c):
    sg, port = h2c()
    with H2(port) as c:
        assert c.get("/index.html", headers=[("te", "trailers")]).status == 200
        assert c.get("/index.html", headers=[("x-a", "in side")]).status == 200
        st = c.get("*", method="OPTIONS")
        assert st.status is not None and st.reset is None, st
        st = c.response(c.headers_block([(":method", "CONNECT"), (":authority", "a.test:443")]))
        assert st.status == 501
        assert c.get("/index.html", headers=[("expect", "202-accepted")]).status == 417
    assert sg.stat("h2_err_pseudo") == 0 and sg.stat("h2_err_field") == 0


def test_content_length_must_match_the_body(h2c):
    sg, port = h2c()
    with H2(port) as c:
        # says 5, ends at once
        sid = c.headers_block(BASE[:0] + [(":method", "POST")] + BASE[1:] +
                              [("content-length", "5")], end=True)
        assert c.response(sid).reset == PROTOCOL_ERROR
        # says 2, sends 5
        sid = c.headers_block([(":method", "POST")] + BASE[1:] + [("content-length", "2")],
                              end=False)
        c.send_body(sid, b"hello")
        st = c.response(sid)
        assert st.reset == PROTOCOL_ERROR or st.status is not None, st
        assert c.get("/index.html").status == 200
    assert sg.stat("h2_err_length") == 2


def test_trailers_may_not_carry_pseudo_fields(h2c):
    sg, port = h2c()
    with H2(port) as c:
        sid = c.request("/index.html", method="POST", end=False)
        c.conn.send_headers(sid, [(":path", "/x")], end_stream=True)
        c.flush()
        st = c.response(sid)
        assert st.reset == PROTOCOL_ERROR or st.status is not None, st
        assert c.get("/index.html").status == 200
    assert sg.stat("h2_err_pseudo") == 1


# -- floods ------------------------------------------------------------------------------


def test_hpack_bomb_is_431(h2c):
    """A small block that decodes to more than http_req_size: one big field in HPACK's
    table, named twenty times.  431, and the connection goes on."""
    sg, port = h2c(params={"http_req_size": "32k"})
    enc = hpack.Encoder()
    block = enc.encode([(":method", "GET"), (":scheme", "http"), (":authority", "a.test"),
                        (":path", "/index.html")] + [("x-bomb", "b" * 4000)] * 20)
    assert len(block) < 5000
    with Raw(port) as r:
        r.send(raw_headers(1, block))
        r.send(raw_headers(3, enc.encode(BASE)))
        r.read_for(1.5)
        dec = hpack.Decoder()
        status = {sid: dict(dec.decode(p))[":status"] for t, _, sid, p in r.frames() if t == 1}
        assert status == {1: "431", 3: "200"}, status
        assert r.goaway() is None
    assert sg.stat("h2_hdr_too_big") == 1 and sg.stat("client_req_431") == 1
    assert served(port)


@pytest.mark.parametrize("frame_len,fields", [(100, 1000), (16000, 2000)])
def test_continuation_flood(h2c, frame_len, fields):
    """CVE-2024-27316: a header block that never ends, in CONTINUATION frames: small ones
    (more than 32), or full ones (more than http_req_size bytes)."""
    sg, port = h2c(params={"http_req_size": "32k"})
    block = hpack.Encoder().encode(BASE + [("x-a%d" % i, "a" * 90) for i in range(fields)],
                                   huffman=False)
    with Raw(port) as r:
        r.send(raw_headers(1, block[:frame_len], end_headers=False))
        for i in range(frame_len, len(block), frame_len):
            if not r.send(continuation(1, block[i:i + frame_len])):
                break
        assert r.read_until_closed()
        assert r.goaway()[0] == ENHANCE_YOUR_CALM, r.frames()
    assert sg.stat("h2_flood_continuation") == 1
    assert served(port)


def test_rapid_reset(h2c):
    """CVE-2023-44487: open and reset streams as fast as the socket goes."""
    sg, port = h2c(params={"h2_rapid_reset_limit": "100"})
    enc = hpack.Encoder()
    with Raw(port) as r:
        burst = b"".join(raw_headers(sid, enc.encode(BASE)) + rst_stream(sid)
                         for sid in range(1, 2 * 1000, 2))
        r.send(burst)
        assert r.read_until_closed()
        assert r.goaway()[0] == ENHANCE_YOUR_CALM, r.goaway()
    assert sg.stat("h2_flood_reset") == 1
    assert sg.stat("h2_goaway_sent") >= 1
    assert served(port)


def test_resets_under_the_limit_are_fine(h2c):
    sg, port = h2c(params={"h2_rapid_reset_limit": "100"})
    with H2(port) as c:
        for _ in range(50):
            sid = c.request("/big.bin")
            c.reset(sid)
        assert c.get("/index.html").status == 200 and c.goaway is None
    # (h2 resets again a stream whose DATA still comes after its reset)
    assert sg.stat("h2_flood_reset") == 0 and sg.stat("h2_rst_received") >= 50


FLOODS = {
    "settings": lambda enc: settings_frame(),
    "ping": lambda enc: ping_frame(),
    "window_update": lambda enc: window_update(0, 1),
    "priority": lambda enc: priority(3),
    "empty_data": lambda enc: data_frame(1),
}


@pytest.mark.parametrize("kind", sorted(FLOODS))
def test_frame_floods(h2c, kind):
    sg, port = h2c(params={"h2_frame_flood_limit": "1000"})
    enc = hpack.Encoder()
    with Raw(port) as r:
        if kind == "empty_data":
            # a request whose body has not begun: empty DATA frames that end nothing
            r.send(raw_headers(1, enc.encode([(":method", "POST")] + BASE[1:]), end_stream=False))
        one = FLOODS[kind](enc)
        for _ in range(5):
            if not r.send(one * 2000):
                break
        assert r.read_until_closed()
        assert r.goaway()[0] == ENHANCE_YOUR_CALM, r.goaway()
    assert sg.stat("h2_flood_frames") == 1
    assert served(port)


def test_frames_under_the_limit_are_fine(h2c):
    sg, port = h2c(params={"h2_frame_flood_limit": "1000"})
    with H2(port) as c:
        for _ in range(200):
            c.ping()
        assert c.get("/index.html").status == 200
        c.wait(lambda: c.pings == 200, what="200 PING acks")
    assert sg.stat("h2_flood_frames") == 0


# -- windows and stalls ------------------------------------------------------------------


def test_zero_window_stream_is_reset(h2c):
    """A client that opens no window for a stream: reset after h2_window_timeout; the
    connection and its other streams go on."""
    sg, port = h2c(params={"h2_window_timeout": "1s"})
    with H2(port, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 0}) as c:
        t0 = time.monotonic()
        sid = c.request("/big.bin")
        st = c.response(sid, timeout=10)
        assert st.reset == CANCEL and st.data == b"", st
        assert 0.9 <= time.monotonic() - t0 < 8
        # a response without a body needs no window
        assert c.get("/index.html", method="HEAD").status == 200
        assert c.goaway is None
    assert sg.stat("h2_window_stall") == 1


def test_zero_window_connection_is_closed(h2c):
    """Stream windows open, the connection's never: the connection goes."""
    sg, port = h2c(params={"h2_window_timeout": "1s"})
    with H2(port, auto_window=False,
            settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 8 << 20}) as c:
        sid = c.request("/big.bin")
        assert c.wait_closed(timeout=10)
        assert c.goaway is not None and c.goaway[0] == FLOW_CONTROL_ERROR, c.goaway
        assert len(c.streams[sid].data) == 65535  # the default connection window, no more
    assert sg.stat("h2_conn_stall") == 1
    assert served(port)


def test_client_that_reads_nothing_is_closed(h2c, tmp_path):
    """Large windows, but the client does not read its socket at all."""
    sg, port = h2c(params={"h2_window_timeout": "1s"})
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    with H2(port, settings={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: (1 << 31) - 1}) as c:
        c.sock.close()
        c.sock = s
        c.conn.initiate_connection()
        c.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: (1 << 31) - 1})
        c.conn.increment_flow_control_window((1 << 31) - 1 - 65535)
        c.flush()
        for _ in range(8):
            c.request("/big.bin")
        wait_until(lambda: sg.stat("h2_conn_stall") == 1, 15, "the stalled connection to go")
    assert served(port)


# -- the concurrent stream limit ----------------------------------------------------------


def test_settings_advertised(h2c):
    sg, port = h2c(params={"h2_max_concurrent_streams": "7", "h2_initial_window_size": "32k",
                           "http_req_size": "16k"})
    with H2(port) as c:
        c.get("/index.html")
        sc = h2.settings.SettingCodes
        assert c.settings[sc.MAX_CONCURRENT_STREAMS] == 7
        assert c.settings[sc.INITIAL_WINDOW_SIZE] == 32768
        assert c.settings[sc.MAX_HEADER_LIST_SIZE] == 16384


def test_reset_streams_count_until_their_requests_end(origin, surogat):
    """Streams the client resets while their requests still run here count against
    h2_max_concurrent_streams: over it, new ones are refused (REFUSED_STREAM)."""
    origin.route("/slow", body=b"late", delay=3.0, headers={"Cache-Control": "no-store"})
    port = free_port()
    sg = surogat(params={"h2_max_concurrent_streams": "4"},
                 args=["-a", "127.0.0.1:%d,h2c" % port])
    with H2(port) as c:
        sids = [c.request("/slow?%d" % i, authority="surogat.test") for i in range(4)]
        origin.wait_hits(None, 4)
        for sid in sids:
            c.reset(sid)
        st = c.get("/other")
        assert st.reset == REFUSED_STREAM, st
        assert sg.stat("h2_refused") == 1
        # once they have ended, there is room again (a refused stream may be retried)
        deadline = time.monotonic() + 10
        while c.get("/x", method="PURGE", authority="surogat.test").reset == REFUSED_STREAM:
            assert time.monotonic() < deadline, "still refused after the slow requests ended"
            time.sleep(0.2)
        assert time.monotonic() - (deadline - 10) > 1.5  # not before the origin answered
        assert c.goaway is None


# -- idle, shutdown, reload ----------------------------------------------------------------


def test_idle_connection_goaway_and_close(h2c):
    sg, port = h2c(params={"timeout_idle": "1s"})
    with H2(port) as c:
        assert c.get("/index.html").status == 200
        t0 = time.monotonic()
        assert c.wait_closed(timeout=10)
        assert 0.9 <= time.monotonic() - t0 < 5
        assert c.goaway is not None and c.goaway[0] == 0, c.goaway  # NO_ERROR
    assert sg.stat("sess_timeout_idle") == 1


def test_goaway_on_sigterm(h2c):
    """SIGTERM: the next thing a connection hears is GOAWAY NO_ERROR naming the last stream
    it will serve; what it had asked is answered; idle ones get theirs as they close."""
    sg, port = h2c(params={"shutdown_delay": "3s"})
    enc = hpack.Encoder()
    idle = Raw(port)
    idle.send(raw_headers(1, enc.encode(BASE)))
    busy = Raw(port)
    benc = hpack.Encoder()
    busy.send(raw_headers(1, benc.encode(BASE)))
    time.sleep(0.5)
    sg.signal(signal.SIGTERM)
    time.sleep(0.3)
    busy.send(raw_headers(3, benc.encode(BASE)))
    busy.read_for(1.0)
    assert busy.goaway() == (0, 3), busy.frames()
    got = busy.responses()
    assert got[3]["status"] == 200 and got[3]["ended"] and got[3]["data"] == b"<html>ok</html>\n"
    # a stream after the GOAWAY's last one is not served
    busy.send(raw_headers(5, benc.encode(BASE)))
    busy.read_for(0.5)
    assert 5 not in busy.responses()
    # the idle one: told when the daemon closes it, its answer to stream 1 whole
    assert idle.read_until_closed(timeout=15)
    assert idle.goaway() is not None and idle.goaway()[0] == 0
    assert idle.responses()[1]["status"] == 200
    assert sg.proc.wait(15) == 0
    sg.stopped = True
    idle.close()
    busy.close()


def test_goaway_on_reload(h2c):
    sg, port = h2c()
    enc = hpack.Encoder()
    with Raw(port) as r:
        r.send(raw_headers(1, enc.encode(BASE)))
        r.read_for(0.5)
        assert r.responses()[1]["status"] == 200 and r.goaway() is None
        before = sg.stat("h2_goaway_sent")
        sg.signal(signal.SIGHUP)
        wait_until(lambda: "reload: ok" in sg.log_path.read_text(), 10, "the reload")
        r.send(raw_headers(3, enc.encode(BASE)))
        r.read_for(1.0)
        assert r.goaway() == (0, 3)
        assert r.responses()[3]["status"] == 200 and r.responses()[3]["ended"]
        r.sock.close()  # a client would go on with a new connection
    assert sg.stat("h2_goaway_sent") == before + 1
    assert served(port)
