"""Upgrades and interim responses (issue 14).

WebSocket without a policy rule: a real WebSocket server (the `websockets`
library) behind surogatd, a real client (`websocket-client`) in front,
through a plain and a TLS listener and to a TLS backend.  The 101 rule: a
backend that answers 200 to an Upgrade leaves the connection HTTP, so the
next request on it goes through the policy -- with or without a pipe rule.
h2c is never forwarded; tunnel_timeout closes an idle tunnel; tunnels are
counted and logged.  103 Early Hints: forwarded as they arrive (curl -v, a
raw client), never to HTTP/1.0, never stored; the policy's
surogat.early_hints in recv and hit; an ESI include's kept out of the page;
too many interim responses, 502."""

import asyncio
import json
import re
import socket
import ssl
import subprocess
import textwrap
import threading
import time

import pytest
import websocket  # websocket-client (python3-websocket)
import websockets  # python3-websockets

import httpc
from b_backend_tls_test import TlsOrigin, backend as tls_backend
from conftest import free_port, wait_until
from l_log_test import LogTail
from t_tls_test import CURL, Pki

CC60 = {"Cache-Control": "max-age=60"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = Pki(tmp_path_factory.mktemp("pki"))
    p.a = p.issue("a.test", ["a.test"])
    return p


class WsEcho:
    """A WebSocket echo server (the websockets library on its own event loop,
    in a thread), plain or TLS.  Records the head of each handshake it took."""

    def __init__(self, ssl_ctx=None):
        self.heads = []
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        async def echo(ws, path=None):
            self.heads.append(ws.request_headers)
            async for msg in ws:
                await ws.send(msg)

        def run():
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(websockets.serve(
                echo, "127.0.0.1", 0, ssl=ssl_ctx, ping_interval=None, max_size=1 << 22))
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert ready.wait(10), "the WebSocket server did not start"

    def stop(self):
        async def shut():
            self.server.close()
            await self.server.wait_closed()

        asyncio.run_coroutine_threadsafe(shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def wsecho():
    made = []

    def make(ssl_ctx=None):
        made.append(WsEcho(ssl_ctx))
        return made[-1]

    yield make
    for w in made:
        w.stop()


def policy(tmp_path, text, name="policy.lua"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return ["-f", str(p)]


def json_lines(lines):
    return [json.loads(ln) for ln in lines if ln.startswith("{")]


def echo_round(ws):
    """A text message, then a binary one of several TLS records and reads, echoed."""
    ws.send("hello")
    assert ws.recv() == "hello"
    big = bytes(range(256)) * 800  # 204,800 bytes
    ws.send_binary(big)
    assert ws.recv() == big


# -- WebSocket without a policy rule ------------------------------------------------


@pytest.mark.parametrize("front, back", [("plain", "plain"), ("tls", "plain"),
                                         ("plain", "tls"), ("tls", "tls")])
def test_websocket_echo(pki, wsecho, surogat, tmp_path, front, back):
    """A WebSocket works out of the box: the backend gets the Upgrade, answers
    101, and from then on frames go both ways; the tunnel is counted and the
    live log shows it once it closes."""
    ctx = None
    if back == "tls":
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(pki.a[0]), str(pki.a[1]))
    srv = wsecho(ctx)
    port = free_port()
    args = ["-a", "127.0.0.1:%d,tls,cert=%s,key=%s" % (port, pki.a[0], pki.a[1])]
    if back == "tls":
        # Only the backend is declared: there is no rule for upgrades.
        args += policy(tmp_path, tls_backend(srv.port, ca_file=pki.ca, sni="a.test"))
        sg = surogat(args=args)
    else:
        sg = surogat(args=args, backend="127.0.0.1:%d" % srv.port)
    tail = LogTail(sg, "-j", "-c", "tunnel")
    try:
        if front == "tls":
            ws = websocket.create_connection(
                "wss://127.0.0.1:%d/chat?room=1" % port, timeout=10, host="a.test",
                sslopt={"ca_certs": str(pki.ca), "server_hostname": "a.test"})
        else:
            ws = websocket.create_connection("ws://127.0.0.1:%d/chat?room=1" % sg.port,
                                             timeout=10)
        try:
            echo_round(ws)
            assert sg.stat("tunnel_active") == 1
        finally:
            ws.close()
        wait_until(lambda: sg.stat("tunnel_active") == 0, 10, "the tunnel to close")
        rec = json_lines(tail.take(1))[0]
    finally:
        tail.stop()
    head = srv.heads[0]
    assert head["Upgrade"].lower() == "websocket" and "upgrade" in head["Connection"].lower()
    assert head["X-Forwarded-For"] == "127.0.0.1"
    assert head["X-Forwarded-Proto"] == ("https" if front == "tls" else "http")
    assert rec["status"] == 101 and rec["cache"] == "TUNNEL" and rec["url"] == "/chat?room=1"
    assert rec["bytes"] > 204800, rec  # what went to the client, frames and close included
    st = sg.stats()
    assert st["tunnel_opened"] == 1 and st["tunnel_refused"] == 0 and st["tunnel_idle"] == 0
    assert st["tunnel_bytes"] > 2 * 204800
    assert st["cache_hit"] == 0 and st["n_object"] == 0


def test_websocket_many_at_once(wsecho, surogat):
    """Several tunnels at once, each its own; each closes on its own."""
    srv = wsecho()
    sg = surogat(backend="127.0.0.1:%d" % srv.port)
    socks = [websocket.create_connection("ws://127.0.0.1:%d/c%d" % (sg.port, i), timeout=10)
             for i in range(4)]
    try:
        wait_until(lambda: sg.stat("tunnel_active") == 4, 10, "four tunnels")
        for i, ws in enumerate(socks):
            ws.send("n%d" % i)
        for i, ws in enumerate(socks):
            assert ws.recv() == "n%d" % i
    finally:
        for ws in socks:
            ws.close()
    wait_until(lambda: sg.stat("tunnel_active") == 0, 10, "the tunnels to close")
    assert sg.stat("tunnel_opened") == 4


# -- the 101 rule -------------------------------------------------------------------

MARKING = """
    function recv(req)
        req.http.x_recv = "seen " .. req.url
        %s
    end
    function backend_fetch(bereq)
        bereq.http.x_marked = "policy"
    end
    function pipe(req, bereq)
        bereq.http.x_piped = "1"
    end
    function deliver(req, resp)
        resp.http.x_policy = req.url
    end
"""

UPGRADE_THEN_NEXT = (b"GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
                     b"GET /second HTTP/1.1\r\nHost: a.test\r\n\r\n")


@pytest.fixture
def tls_origin(pki):
    made = []

    def make():
        made.append(TlsOrigin(pki.a[0], pki.a[1]))
        return made[-1]

    yield make
    for o in made:
        o.stop()


@pytest.mark.parametrize("back", ["plain", "tls"])
@pytest.mark.parametrize("rule", ["none", "pipe"])
def test_refused_upgrade_stays_http(pki, origin, tls_origin, surogat, tmp_path, rule, back):
    """A backend answers 200 to an Upgrade: no tunnel.  The request pipelined
    after it on the same connection is a request of its own, which the policy
    sees and marks, and which the backend gets as one -- with the pipe rule
    too, and to a TLS backend alike."""
    decl = ""
    if back == "tls":
        origin = tls_origin()
        decl = tls_backend(origin.port, ca_file=pki.ca, sni="a.test")
    origin.route("/ws", body=b"no switch here")
    origin.route("/second", body=b"second")
    pipe = 'if req.http.upgrade then return "pipe" end' if rule == "pipe" else ""
    sg = surogat(args=policy(tmp_path, decl + textwrap.dedent(MARKING % pipe)))
    with sg.conn() as c:
        c.send(UPGRADE_THEN_NEXT)
        first = c.read_final()
        second = c.read_final()
    assert first.status == 200 and first.body == b"no switch here", first
    assert first.header("X-Policy") == "/ws" and not first.has("Upgrade")
    assert first.header("Cache-Status") == "surogat; fwd=bypass; detail=%s" % (
        "policy" if rule == "pipe" else "upgrade"), first.headers
    assert second.status == 200 and second.body == b"second", second
    assert second.header("X-Policy") == "/second"
    ws, nxt = origin.last("/ws"), origin.last("/second")
    assert ws.header("Upgrade") == "websocket" and "upgrade" in ws.header("Connection").lower()
    # The second request reached the backend as a request, through recv and backend_fetch.
    assert nxt.header("X-Recv") == "seen /second" and nxt.header("X-Marked") == "policy"
    assert ws.header("X-Piped") == ("1" if rule == "pipe" else None)
    st = sg.stats()
    assert st["tunnel_refused"] == 1 and st["tunnel_opened"] == 0
    assert st["policy_pipe"] == (1 if rule == "pipe" else 0)
    assert back == "plain" or origin.handshakes == 2  # the refused one's connection, closed


def test_refused_upgrade_without_policy(origin, surogat):
    """No policy script at all: the upgrade is passed, never looked up, even
    for a cacheable answer, and Cache-Status says why."""
    origin.route("/ws", body=b"no switch", headers=CC60)
    sg = surogat()
    for _ in range(2):
        r = sg.get("/ws", headers={"Upgrade": "websocket", "Connection": "Upgrade"})
        assert r.status == 200 and r.body == b"no switch", r
        assert r.header("Cache-Status") == "surogat; fwd=bypass; detail=upgrade", r.headers
    assert origin.hits("/ws") == 2 and sg.stat("tunnel_refused") == 2
    assert sg.stat("n_object") == 0


@pytest.mark.parametrize("back", ["plain", "tls"])
def test_refused_upgrade_backend_that_switches_anyway(pki, origin, tls_origin, surogat, tmp_path,
                                                      back):
    """A backend that says 200 and then speaks another protocol on the same
    connection gets nothing more of the client: the connection it was asked
    to switch is not reused, and the client's next request goes on another."""
    def liar(s, req, stop):
        s.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno")
        return True  # keep the connection: a later request would find its bytes

    decl = ""
    if back == "tls":
        origin = tls_origin()
        decl = tls_backend(origin.port, ca_file=pki.ca, sni="a.test")
    origin.route("/ws", script=liar)
    origin.route("/second", body=b"second")
    sg = surogat(args=policy(tmp_path, decl + textwrap.dedent(MARKING % "")))
    with sg.conn() as c:
        c.send(UPGRADE_THEN_NEXT)
        assert c.read_final().body == b"no"
        assert c.read_final().body == b"second"
    assert origin.last("/second").conn_id != origin.last("/ws").conn_id
    assert sg.stat("backend_reuse") == 0
    assert back == "plain" or origin.handshakes == 2


def test_pipe_rule_tunnels_after_101(wsecho, surogat, tmp_path):
    """The pipe action with an upgrade: the pipe hook's request goes to the
    backend, and the tunnel opens on its 101 (pipe_timeout, outcome PIPE)."""
    srv = wsecho()
    sg = surogat(backend="127.0.0.1:%d" % srv.port,
                 args=policy(tmp_path, MARKING % 'if req.http.upgrade then return "pipe" end'))
    tail = LogTail(sg, "-j", "-c", "pipe")
    try:
        ws = websocket.create_connection("ws://127.0.0.1:%d/piped" % sg.port, timeout=10)
        try:
            echo_round(ws)
        finally:
            ws.close()
        rec = json_lines(tail.take(1))[0]
    finally:
        tail.stop()
    assert srv.heads[0]["X-Piped"] == "1" and srv.heads[0]["Upgrade"] == "websocket"
    assert rec["status"] == 101 and rec["cache"] == "PIPE"
    st = sg.stats()
    assert st["policy_pipe"] == 1 and st["tunnel_opened"] == 1


def test_pipe_without_upgrade_is_unchanged(origin, surogat, tmp_path):
    """A pipe of a plain request: the backend is told Connection: close and the
    bytes go through as they come; the client connection closes after."""
    origin.route("/p", body=b"piped", close_after=True)
    sg = surogat(args=policy(tmp_path, 'function recv(req) return "pipe" end\n'))
    raw = sg.exchange(httpc.build_request("GET", "/p") + httpc.build_request("GET", "/q"))
    rs = httpc.parse_responses(raw)
    assert [r.body for r in rs] == [b"piped"], rs
    assert origin.last("/p").header("Connection") == "close"
    assert origin.hits("/q") == 0


@pytest.mark.parametrize("rule", ["none", "pipe"])
def test_h2c_is_never_forwarded(origin, surogat, tmp_path, rule):
    """Upgrade: h2c would switch our backend connection to HTTP/2: the backend
    never sees it, nor its HTTP2-Settings, and the answer is plain HTTP/1.1."""
    origin.route("/h", body=b"plain")
    args = []
    if rule == "pipe":
        args = policy(tmp_path, 'function recv(req)\n  if req.http.upgrade then return "pipe" '
                                'end\nend\n')
    sg = surogat(args=args)
    r = sg.get("/h", headers={"Upgrade": "h2c", "Connection": "Upgrade, HTTP2-Settings",
                              "HTTP2-Settings": "AAMAAABkAARAAAAAAAIAAAAA"})
    assert r.status == 200 and r.body == b"plain", r
    q = origin.last("/h")
    assert not q.has("Upgrade") and not q.has("HTTP2-Settings"), q.headers
    assert "upgrade" not in (q.header("Connection") or "").lower()
    # A list naming h2c among others is no upgrade either.
    r = sg.get("/h", headers={"Upgrade": "websocket, h2c", "Connection": "Upgrade"})
    assert r.status == 200 and not origin.last("/h").has("Upgrade")
    assert sg.stat("tunnel_refused") == 0 and sg.stat("tunnel_opened") == 0


def test_http10_upgrade_is_ignored(origin, surogat):
    """An Upgrade in HTTP/1.0 is not one (RFC 9110 section 7.8): not forwarded."""
    origin.route("/o", body=b"old")
    sg = surogat()
    r = sg.get("/o", headers={"Upgrade": "websocket", "Connection": "Upgrade"}, version="1.0")
    assert r.status == 200 and r.body == b"old"
    assert not origin.last("/o").has("Upgrade")


def switch_then(after=b"", delay=0):
    """An origin script: 101 (and `after` in the same write), then an echo
    upper-casing what comes, until EOF."""
    def script(s, req, stop):
        s.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n"
                  b"Connection: Upgrade\r\nX-Backend: yes\r\n\r\n" + after)
        s.settimeout(0.2)
        deadline = time.monotonic() + 20
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                d = s.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                break
            if not d:
                break
            s.sendall(d.upper())
        return False
    return script


def test_switch_head_and_early_bytes(origin, surogat):
    """The 101 as the client gets it: the backend's fields with Upgrade and
    Connection: upgrade, Via; bytes the backend sent with its 101 follow it."""
    origin.route("/e", script=switch_then(after=b"WELCOME"))
    sg = surogat()
    with sg.conn() as c:
        c.send(b"GET /e HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
        r = c.read_response()
        assert r.status == 101, r
        assert r.header("Upgrade") == "echo" and r.tokens("Connection") == ["upgrade"]
        assert r.header("X-Backend") == "yes" and r.header("Via") == "1.1 surogat"
        assert not r.has("Content-Length") and not r.has("Transfer-Encoding")
        got = b""
        deadline = time.monotonic() + 10
        while len(got) < 7:
            got += c._exactly(1, deadline, "early bytes")
        assert got == b"WELCOME"
        c.send(b"ping")
        assert c._exactly(4, deadline, "echo") == b"PING"


def test_upgrade_with_a_body(origin, surogat):
    """An upgrade with a request body: the body goes as a body, framed; what the
    client sent past it goes into the tunnel once the backend switched."""
    origin.route("/b", script=switch_then())
    sg = surogat()
    with sg.conn() as c:
        c.send(b"POST /b HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n"
               b"Content-Length: 4\r\n\r\nbodyextra")
        assert c.read_response().status == 101
        assert c._exactly(5, time.monotonic() + 10, "echo") == b"EXTRA"
    q = origin.last("/b")
    assert q.body == b"body" and q.header("Content-Length") == "4", q.headers


def test_101_without_upgrade_field_is_refused(origin, surogat):
    origin.route("/bad", raw=b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\n\r\n")
    sg = surogat()
    r = sg.get("/bad", headers={"Upgrade": "echo", "Connection": "Upgrade"})
    assert r.status == 502, r
    assert sg.stat("tunnel_opened") == 0


def test_tunnel_timeout_closes_idle_tunnel(origin, surogat):
    origin.route("/idle", script=switch_then())
    sg = surogat(params={"tunnel_timeout": "1s"})
    with sg.conn() as c:
        c.send(b"GET /idle HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
        assert c.read_response().status == 101
        deadline = time.monotonic() + 10
        c.send(b"x")
        assert c._exactly(1, deadline, "echo") == b"X"  # bytes moved: the clock starts again
        t0 = time.monotonic()
        closed, extra = c.wait_closed(timeout=8)
        took = time.monotonic() - t0
    assert closed and extra == b"", extra
    assert 0.8 < took < 4, took
    wait_until(lambda: sg.stat("tunnel_idle") == 1, 5, "tunnel_idle counted")
    assert sg.stat("tunnel_active") == 0


def test_stopping_daemon_closes_tunnels(origin, surogat):
    """A tunnel never ends by itself: a stopping daemon closes it rather than
    wait shutdown_timeout for it."""
    origin.route("/long", script=switch_then())
    sg = surogat(params={"shutdown_timeout": "20s"})
    c = sg.conn()
    c.send(b"GET /long HTTP/1.1\r\nHost: x\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
    assert c.read_response().status == 101
    t0 = time.monotonic()
    assert sg.stop() == 0
    assert time.monotonic() - t0 < 8
    assert c.wait_closed(timeout=5)[0]
    c.close()


# -- 103 Early Hints ---------------------------------------------------------------

HINT = b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload; as=style\r\n\r\n"


def hint_then_final(go, body=b"page", headers=b"Cache-Control: max-age=60\r\n"):
    """An origin script: a 103, then the final response once `go` is set (10 s at most)."""
    def script(s, req, stop):
        s.sendall(HINT)
        go.wait(10)
        s.sendall(b"HTTP/1.1 200 OK\r\n" + headers + b"Content-Length: %d\r\n\r\n" % len(body)
                  + body)
        return True
    return script


def test_103_reaches_a_raw_client_first(origin, surogat):
    """The backend's 103 reaches the client while the backend still holds the
    final response: forwarded as it arrives, hop-by-hop fields removed."""
    go = threading.Event()
    origin.route("/p", script=hint_then_final(go))
    sg = surogat()
    with sg.conn() as c:
        c.request("GET", "/p")
        early = c.read_response(timeout=5)
        assert not go.is_set()
        go.set()
        final = c.read_response()
    assert early.status == 103 and early.header("Link") == "</s.css>; rel=preload; as=style"
    assert final.status == 200 and final.body == b"page" and not final.has("Link")
    assert sg.stat("resp_early_hints") == 1


def test_103_seen_by_curl(origin, surogat):
    go = threading.Event()
    go.set()
    origin.route("/c", script=hint_then_final(go, headers=b""))
    sg = surogat()
    p = subprocess.run([CURL, "-sv", "--max-time", "10", "http://127.0.0.1:%d/c" % sg.port],
                       capture_output=True, timeout=20)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 0 and p.stdout == b"page", err
    i103, i200 = err.find("< HTTP/1.1 103"), err.find("< HTTP/1.1 200")
    assert 0 <= i103 < i200, err
    assert re.search(r"< Link: </s\.css>; rel=preload; as=style", err[i103:i200]), err


def test_103_not_sent_to_http10(origin, surogat):
    go = threading.Event()
    go.set()
    origin.route("/o", script=hint_then_final(go, headers=b""))
    sg = surogat()
    with sg.conn() as c:
        c.request("GET", "/o", version="1.0")
        r = c.read_response()
    assert r.status == 200 and r.body == b"page", r
    assert sg.stat("resp_early_hints") == 0


def test_103_is_never_stored(origin, surogat):
    """The miss got the backend's 103; the hit that follows gets none."""
    go = threading.Event()
    go.set()
    origin.route("/s", script=hint_then_final(go))
    sg = surogat()
    with sg.conn() as c:
        c.request("GET", "/s")
        assert c.read_response().status == 103
        assert c.read_response().body == b"page"
        c.request("GET", "/s")
        hit = c.read_response()
    assert hit.status == 200 and hit.body == b"page" and not hit.has("Link"), hit
    assert sg.stat("cache_hit") == 1 and origin.hits("/s") == 1


HINTS_POLICY = """
    function recv(req)
        if req.url == "/r" then
            surogat.early_hints{"</r.css>; rel=preload; as=style", "</r.js>; rel=preload"}
        end
        if req.url == "/bad" then surogat.early_hints("</x>\\r\\nX-Injected: 1") end
    end
    function hit(req, obj)
        surogat.early_hints("</hit.css>; rel=preload; as=style")
    end
    function deliver(req, resp)
        if req.url == "/d" then surogat.early_hints("</d>") end
    end
"""


def test_policy_early_hints_in_recv_and_hit(origin, surogat, tmp_path):
    """surogat.early_hints: recv's go out before the fetch (the backend still
    holds the page); hit's make a cached page send hints at once."""
    go = threading.Event()
    origin.route("/r", script=hint_then_final(go))
    origin.route("/h", body=b"cached", headers=CC60)
    sg = surogat(args=policy(tmp_path, HINTS_POLICY))
    with sg.conn() as c:
        c.request("GET", "/r")
        ours = c.read_response(timeout=5)
        assert ours.status == 103 and not go.is_set()
        assert ours.headers_all("Link") == ["</r.css>; rel=preload; as=style",
                                            "</r.js>; rel=preload"]
        backend = c.read_response(timeout=5)  # the backend's own, forwarded
        assert backend.status == 103 and backend.header("Link") == "</s.css>; rel=preload; as=style"
        go.set()
        assert c.read_response().body == b"page"
        # A miss: no hit hook, no hint of its own.
        c.request("GET", "/h")
        assert c.read_response().status == 200
        c.request("GET", "/h")
        early = c.read_response()
        assert early.status == 103 and early.headers_all("Link") == [
            "</hit.css>; rel=preload; as=style"]
        final = c.read_response()
        assert final.status == 200 and final.body == b"cached"
    with sg.conn() as c:
        c.request("GET", "/h", version="1.0")
        assert c.read_response().status == 200  # HTTP/1.0: the hint is not sent
    assert sg.stat("resp_early_hints") == 3


def test_policy_early_hints_errors(origin, surogat, tmp_path):
    """Outside recv and hit, or with CR/LF in a value, a hook error: 503."""
    origin.route("/d", body=b"d")
    origin.route("/bad", body=b"b")
    sg = surogat(args=policy(tmp_path, HINTS_POLICY))
    for path in ("/d", "/bad"):
        with sg.conn() as c:
            c.request("GET", path)
            r = c.read_response()
        assert r.status == 503, (path, r)
    assert sg.stat("resp_early_hints") == 0
    assert "early_hints" in sg.log_tail(40)


@pytest.mark.parametrize("n, status", [(3, 200), (4, 502)])
def test_too_many_interim_responses(origin, surogat, n, status):
    """backend_max_interim: the ones within the bound were forwarded as they
    came; one more and the response is refused."""
    def script(s, req, stop):
        s.sendall(HINT * n + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        return False

    origin.route("/m", script=script)
    sg = surogat(params={"backend_max_interim": "3"})
    with sg.conn() as c:
        c.request("GET", "/m")
        got = []
        while True:
            r = c.read_response()
            got.append(r.status)
            if r.status >= 200:
                break
    assert got == [103, 103, 103, status], got


ESI_HINTS_POLICY = """
    function recv(req)
        if req.is_esi_subreq then
            surogat.early_hints("</inc.css>; rel=preload; as=style")
        else
            surogat.early_hints("</page.css>; rel=preload; as=style")
        end
    end
"""


def test_esi_include_hints_stay_out_of_the_page(origin, surogat, tmp_path):
    """An ESI include's 103s, its backend's and its policy's, are not the
    client's: the client's head went already, and a 103 in the middle of
    the page would be body bytes.  The page's own hint goes out first."""
    go = threading.Event()
    go.set()
    origin.route("/page", body=b"<p>[<esi:include src=\"/inc\"/>]</p>",
                 headers={"Surrogate-Control": 'content="ESI/1.0"', "Cache-Control": "max-age=60"})
    origin.route("/inc", script=hint_then_final(go, body=b"included", headers=b""))
    sg = surogat(args=policy(tmp_path, ESI_HINTS_POLICY))
    for _ in range(2):  # a miss, then a hit of the page
        with sg.conn() as c:
            c.request("GET", "/page")
            early = c.read_response()
            assert early.status == 103, early
            assert early.headers_all("Link") == ["</page.css>; rel=preload; as=style"]
            page = c.read_response()
            assert page.status == 200 and page.body == b"<p>[included]</p>", page
            c.request("GET", "/page", headers={"Connection": "close"})
            assert c.read_response().status == 103
            assert c.read_response().body == b"<p>[included]</p>"
            closed, extra = c.wait_closed(timeout=5)
            assert closed and extra == b"", extra
    assert sg.stat("resp_early_hints") == 4
    assert origin.hits("/page") == 1 and origin.hits("/inc") == 4
