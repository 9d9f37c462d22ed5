"""The PROXY protocol and trusted proxies, with real parts in front.

HAProxy 2.6 sends PROXY v1 (send-proxy) and v2 (send-proxy-v2) and, where
it terminates TLS itself, v2 with its SSL TLVs, the SNI and a CRC32C
(send-proxy-v2-ssl); hitch terminates TLS and writes v2.  Clients connect
from 127.0.0.5 (or .6) while the balancer reaches surogat from
127.0.0.1, so only an address carried by the header can make client.ip,
the access log, X-Forwarded-For and purge_acl say 127.0.0.5.

Bad input is sent raw: a v2 header that lies about its length (too short
for its addresses; longer than what comes), a v2 header split over many
packets, a PROXY header on a plain listener (400 and closed), garbage
after "PROXY TCP4", HTTP on a PROXY listener (closed, never parsed).

trusted_proxies: X-Forwarded-For believed from trusted peers only,
right-most untrusted entry; and PROXY v2 to a backend, per client
connection."""

import json
import struct
import time

import pytest

from conftest import free_port, wait_until
from edge import ECHO_POLICY, HITCH, TCP_DEFAULTS, Proc, get, haproxy, https_get, need, raw
from l_log_test import LogTail
from origins import Origin
from t_tls_test import Pki

V2SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def v2(vc, fam, body):
    return V2SIG + bytes([vc, fam]) + struct.pack(">H", len(body)) + body


def v2_tcp4(src, dst, sport, dport, tlvs=b""):
    import socket as s
    return v2(0x21, 0x11, s.inet_aton(src) + s.inet_aton(dst) + struct.pack(">HH", sport, dport)
              + tlvs)


@pytest.fixture
def pp(surogat, tmp_path):
    """A surogatd with the echo policy, a PROXY listen address and its plain one."""
    def start(params=None, extra_args=(), policy=ECHO_POLICY):
        port = free_port()
        pol = tmp_path / "echo.lua"
        pol.write_text(policy)
        p = {"access_log": "access.log", "proxy_header_timeout": "1s"}
        p.update(params or {})
        sg = surogat(params=p, args=["-f", str(pol), "-a", "127.0.0.1:%d,PROXY" % port]
                     + list(extra_args))
        sg.pp_port = port
        return sg
    return start


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = Pki(tmp_path_factory.mktemp("pki"))
    p.a = p.issue("a.test", ["a.test"])
    pem = p.d / "a.pem"
    pem.write_bytes(p.a[0].read_bytes() + p.a[1].read_bytes())
    p.pem = pem
    return p


def test_raw_v1_and_v2_headers_carry_the_client(origin, pp):
    sg = pp()
    hdr1 = b"PROXY TCP4 203.0.113.7 198.51.100.1 40001 8080\r\n"
    r, _ = get(sg.pp_port, "/a", prefix=hdr1)  # header and request in one packet
    assert r.status == 200, r
    assert r.h("X-Client") == "203.0.113.7 40001"
    assert r.h("X-Server") == "198.51.100.1 8080"
    assert r.h("X-Proxy") == "1"
    assert origin.last("/a").header("X-Forwarded-For") == "203.0.113.7"
    r, _ = get(sg.pp_port, "/b", prefix=v2_tcp4("192.0.2.44", "192.0.2.1", 5555, 443))
    assert r.status == 200 and r.h("X-Client") == "192.0.2.44 5555", r
    assert r.h("X-Proxy") == "2"
    # IPv6 in v1
    r, _ = get(sg.pp_port, "/c", prefix=b"PROXY TCP6 2001:db8::5 2001:db8::1 1 2\r\n")
    assert r.h("X-Client") == "2001:db8::5 1", r
    # LOCAL (a balancer's health check) and UNKNOWN: the socket's own addresses
    r, port = get(sg.pp_port, "/d", prefix=v2(0x20, 0x00, b""))
    assert r.status == 200 and r.h("X-Client") == "127.0.0.5 %d" % port, r
    r, port = get(sg.pp_port, "/e", prefix=b"PROXY UNKNOWN\r\n")
    assert r.status == 200 and r.h("X-Client") == "127.0.0.5 %d" % port, r
    assert sg.stat("proxy_hdr") == 5 and sg.stat("proxy_local") == 2
    # the access log has the carried address
    # (each worker appends its own lines: the order across connections is not kept)
    lines = sg.wait_access_lines(5)
    by_url = {ln.split('"')[1].split(" ")[1]: ln for ln in lines}
    assert by_url["/a"].startswith("203.0.113.7 "), lines
    assert by_url["/b"].startswith("192.0.2.44 "), lines


def test_keepalive_after_the_header(origin, pp):
    """The header opens the connection once; every request on it is that client's."""
    sg = pp()
    from edge import connect, read_all
    with connect(sg.pp_port) as s:
        s.sendall(v2_tcp4("192.0.2.9", "192.0.2.1", 7, 80) +
                  b"GET /1 HTTP/1.1\r\nHost: t\r\n\r\nGET /2 HTTP/1.1\r\nHost: t\r\n"
                  b"Connection: close\r\n\r\n")
        out = read_all(s)
    assert out.count(b"X-Client: 192.0.2.9 7") == 2, out


def test_v2_split_over_many_packets(origin, pp):
    sg = pp(params={"proxy_header_timeout": "5s"})
    from edge import Resp, connect, read_all
    data = v2_tcp4("192.0.2.77", "192.0.2.1", 1234, 80, tlvs=b"\x04\x00\x03abc")
    with connect(sg.pp_port) as s:
        for i in range(len(data)):
            s.sendall(data[i:i + 1])
            time.sleep(0.01)
        s.sendall(b"GET /s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        r = Resp(read_all(s))
    assert r.status == 200 and r.h("X-Client") == "192.0.2.77 1234", r


def test_bad_headers_close_without_http(origin, pp):
    sg = pp()
    cases = [
        # a v2 header that lies about its length: shorter than its IPv4 addresses
        v2(0x21, 0x11, b"\x01\x02\x03\x04\x05\x06\x07\x08"),
        # garbage after PROXY TCP4
        b"PROXY TCP4 garbage here 1 2\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n",
        b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 80\r\n",
        # plain HTTP on a PROXY listener: never parsed as HTTP
        b"GET / HTTP/1.1\r\nHost: t\r\n\r\n",
        # TLS on a PROXY listener
        b"\x16\x03\x01\x00\x05hello",
        # a v2 CRC32C that does not match
        v2_tcp4("1.2.3.4", "5.6.7.8", 1, 2, tlvs=b"\x03\x00\x04\x00\x00\x00\x01"),
    ]
    for data in cases:
        out = raw(sg.pp_port, data)
        assert b"HTTP/" not in out, (data, out)
    sg.wait_stat("proxy_fail", len(cases))
    assert origin.hits() == 0
    # a v2 header that promises more than comes: closed at proxy_header_timeout (1s)
    t0 = time.monotonic()
    out = raw(sg.pp_port, v2_tcp4("1.2.3.4", "5.6.7.8", 1, 2)[:-4][:14] + b"\x00\xc8" + b"x" * 20)
    assert b"HTTP/" not in out and time.monotonic() - t0 < 5, out
    assert sg.stat("proxy_timeout") == 1
    # a connection that says nothing is not counted as a bad header
    raw(sg.pp_port, b"")
    assert sg.stat("proxy_fail") == len(cases) + 1
    # the daemon is fine
    r, _ = get(sg.pp_port, "/ok", prefix=b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n")
    assert r.status == 200


def test_proxy_header_on_plain_listener_is_400(origin, pp):
    sg = pp()
    out = raw(sg.port, b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400 "), out
    assert b"Connection: close" in out
    assert origin.hits() == 0


def test_haproxy_send_proxy_v1_v2_and_purge_acl(origin, pp, tmp_path):
    sg = pp(params={"purge_acl": "127.0.0.5"})
    f1, f2 = free_port(), free_port()
    hp = haproxy(tmp_path, """
%slisten v1
    bind 127.0.0.1:%d
    server s 127.0.0.1:%d send-proxy
listen v2
    bind 127.0.0.1:%d
    server s 127.0.0.1:%d send-proxy-v2
""" % (TCP_DEFAULTS, f1, sg.pp_port, f2, sg.pp_port), ports=(f1, f2))
    try:
        for port, ver in ((f1, "1"), (f2, "2")):
            r, myport = get(port, "/h" + ver)
            assert r.status == 200, r
            assert r.h("X-Client") == "127.0.0.5 %d" % myport, r
            assert r.h("X-Server") == "127.0.0.1 %d" % port, r
            assert r.h("X-Proxy") == ver
            assert origin.last("/h" + ver).header("X-Forwarded-For") == "127.0.0.5"
            # purge_acl sees the carried address
            r, _ = get(port, "/h" + ver, method="PURGE")
            assert r.status == 200, r
            r, _ = get(port, "/h" + ver, method="PURGE", src="127.0.0.6")
            assert r.status == 403, r
        lines = sg.wait_access_lines(6)
        assert all(ln.startswith(("127.0.0.5 ", "127.0.0.6 ")) for ln in lines), lines
    finally:
        hp.stop()


def test_haproxy_terminating_tls_sends_v2_ssl(origin, pp, pki, tmp_path):
    sg = pp()
    front = free_port()
    hp = haproxy(tmp_path, """
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend tls
    bind 127.0.0.1:%d ssl crt %s
    default_backend b
backend b
    server s 127.0.0.1:%d send-proxy-v2-ssl proxy-v2-options ssl,ssl-cipher,authority,crc32c
""" % (front, pki.pem, sg.pp_port), ports=(front,))
    try:
        r, myport = https_get(front, "/t", ca=pki.ca)
        assert r.status == 200, r
        assert r.h("X-Client") == "127.0.0.5 %d" % myport, r
        tls = r.h("X-Tls").split(" ")
        assert tls[0] == "true" and tls[1].startswith("TLSv1."), tls
        assert tls[2] != "nil" and tls[3] == "a.test", tls
        assert origin.last("/t").header("X-Forwarded-Proto") == "https"
        assert origin.last("/t").header("X-Forwarded-For") == "127.0.0.5"
    finally:
        hp.stop()


def test_hitch_write_proxy_v2(origin, pp, pki, tmp_path):
    need(HITCH)
    sg = pp()
    front = free_port()
    d = tmp_path / "hitch"
    d.mkdir()
    conf = d / "hitch.conf"
    conf.write_text('frontend = "[127.0.0.1]:%d"\nbackend = "[127.0.0.1]:%d"\n'
                    'write-proxy-v2 = on\npem-file = "%s"\nworkers = 1\ndaemon = off\n'
                    'tls-protos = TLSv1.2 TLSv1.3\nlog-level = 1\n'
                    % (front, sg.pp_port, pki.pem)
                    + ('user = "nobody"\n' if __import__("os").geteuid() == 0 else ""))
    import os
    os.chmod(pki.pem, 0o644)
    h = Proc([HITCH, "--config=%s" % conf], d / "stderr.log", ports=(front,))
    try:
        r, myport = https_get(front, "/hitch", ca=pki.ca)
        assert r.status == 200, (r, h.tail())
        assert r.h("X-Client") == "127.0.0.5 %d" % myport, r
        assert r.h("X-Tls").startswith("true TLSv1."), r.h("X-Tls")
        assert r.h("X-Proxy") == "2"
        assert origin.last("/hitch").header("X-Forwarded-Proto") == "https"
    finally:
        h.stop()


def test_trusted_proxies_x_forwarded_for(origin, pp):
    sg = pp(params={"trusted_proxies": "127.0.0.0/8, 10.0.0.0/8"})
    # trusted peer: the right-most entry that is not trusted
    r, _ = get(sg.port, "/x", headers=[("X-Forwarded-For", "6.6.6.6, 203.0.113.9, 10.1.1.1")])
    assert r.h("X-Client") == "203.0.113.9 0", r
    assert origin.last("/x").header("X-Forwarded-For") == "6.6.6.6, 203.0.113.9, 10.1.1.1, " \
                                                          "203.0.113.9"
    # several fields: the last is right-most
    r, _ = get(sg.port, "/x", headers=[("X-Forwarded-For", "198.51.100.1"),
                                       ("X-Forwarded-For", "10.0.0.2")])
    assert r.h("X-Client") == "198.51.100.1 0", r
    # junk stops the walk at the last trusted hop; all trusted: the left-most
    r, _ = get(sg.port, "/x", headers=[("X-Forwarded-For", "6.6.6.6, nonsense, 10.0.0.3")])
    assert r.h("X-Client") == "10.0.0.3 0", r
    r, _ = get(sg.port, "/x", headers=[("X-Forwarded-For", "10.0.0.4, 10.0.0.3")])
    assert r.h("X-Client") == "10.0.0.4 0", r
    assert sg.stat("realip_xff") == 4
    # PROXY first, then XFF from that (trusted) client
    r, _ = get(sg.pp_port, "/x", headers=[("X-Forwarded-For", "203.0.113.50")],
               prefix=b"PROXY TCP4 10.9.9.9 10.0.0.1 1 80\r\n")
    assert r.h("X-Client") == "203.0.113.50 0", r
    # keep-alive: the next request without XFF is the peer again
    from edge import connect, read_all
    with connect(sg.port) as s:
        myport = s.getsockname()[1]
        s.sendall(b"GET /k HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 203.0.113.1\r\n\r\n"
                  b"GET /k HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        out = read_all(s)
    assert b"X-Client: 203.0.113.1 0" in out and b"X-Client: 127.0.0.5 %d" % myport in out, out


def test_untrusted_peer_xff_never_believed(origin, pp):
    sg = pp(params={"trusted_proxies": "10.0.0.0/8", "purge_acl": "203.0.113.9"})
    r, myport = get(sg.port, "/u", headers=[("X-Forwarded-For", "203.0.113.9")])
    assert r.h("X-Client") == "127.0.0.5 %d" % myport, r
    r, _ = get(sg.port, "/u", method="PURGE", headers=[("X-Forwarded-For", "203.0.113.9")])
    assert r.status == 403, r
    assert sg.stat("realip_xff") == 0


def test_proxy_v2_to_backend_per_client_connection(surogat, tmp_path):
    for version in (2, 1):
        o = Origin(proxy=True)
        try:
            pol = tmp_path / ("pp%d.lua" % version)
            pol.write_text('backend "pp" { host = "127.0.0.1", port = %d, proxy_protocol = %d }\n'
                           'route { to = "pp" }\n'
                           'function recv(req) return "pass" end\n' % (o.port, version))
            sg = surogat(args=["-f", str(pol)])
            from edge import connect, read_all
            ports = []
            for src in ("127.0.0.5", "127.0.0.6"):
                with connect(sg.port, src=src) as s:
                    ports.append(s.getsockname()[1])
                    s.sendall(b"GET /p1 HTTP/1.1\r\nHost: t\r\n\r\n"
                              b"GET /p2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
                    out = read_all(s)
                    assert out.count(b"HTTP/1.1 200") == 2, out
            reqs = o.reqs()
            assert len(reqs) == 4
            for i, src in enumerate(("127.0.0.5", "127.0.0.6")):
                a, b = reqs[2 * i], reqs[2 * i + 1]
                assert a.proxy["version"] == version and a.proxy["src"] == src, a.proxy
                assert a.proxy["sport"] == ports[i] and a.proxy["dport"] == sg.port
                # the same client connection reuses its backend connection
                assert b.conn_id == a.conn_id and b.proxy == a.proxy
            # another client never rides on it
            assert reqs[0].conn_id != reqs[2].conn_id
            assert o.conns == 2
            sg.stop()
        finally:
            o.stop()


def test_proxy_listen_config_line_and_errors(origin, surogat, tmp_path):
    from conftest import run_surogatd
    port = free_port()
    sg = surogat(conf="listen = 127.0.0.1:%d,PROXY\n" % port)
    r, _ = get(port, "/cfg", prefix=b"PROXY TCP4 192.0.2.3 192.0.2.1 9 80\r\n")
    assert r.status == 200
    assert origin.last("/cfg").header("X-Forwarded-For") == "192.0.2.3"
    cf = tmp_path / "bad.conf"
    cf.write_text("\nlisten = 127.0.0.1:1,PROXY,mode=0600\n")
    res = run_surogatd(["-C", "-c", str(cf), "-b", "127.0.0.1:9"])
    assert res.returncode != 0 and "bad.conf:2:" in res.stderr, res.stderr
    assert "mode= is for a Unix socket" in res.stderr


CARRIED_POLICY = """
shared "ratelimit" { size = "1m" }
local NET = surogat.acl{ "203.0.113.0/24" }
function recv(req)
  if not surogat.ratelimit(client.ip, "1/m", 1) then
    return surogat.synth(429, "Too Many Requests")
  end
  req.ctx.net = NET:match(client.ip) and "in" or "out"
  return "pass"
end
function deliver(req, resp)
  resp.http["X-Net"] = req.ctx.net
end
"""


def test_policy_acl_ratelimit_and_live_log_use_the_carried_address(origin, pp):
    """The carried address is the client's everywhere: a policy ACL matches
    it, a rate limit keyed on client.ip counts it (one client behind the
    balancer is limited, another is not), and the live log filters and
    shows it."""
    sg = pp(policy=CARRIED_POLICY)
    tail = LogTail(sg, "-j", "-i", "203.0.113.0/24")
    try:
        r, _ = get(sg.pp_port, "/a", prefix=b"PROXY TCP4 203.0.113.7 198.51.100.1 40001 80\r\n")
        assert r.status == 200 and r.h("X-Net") == "in", r
        # The same client again, over another connection from the same balancer: limited.
        r, _ = get(sg.pp_port, "/a", prefix=b"PROXY TCP4 203.0.113.7 198.51.100.1 40002 80\r\n")
        assert r.status == 429, r
        # Another client behind the same balancer has its own budget, outside the ACL.
        r, _ = get(sg.pp_port, "/a", prefix=b"PROXY TCP4 192.0.2.8 198.51.100.1 40003 80\r\n")
        assert r.status == 200 and r.h("X-Net") == "out", r
        # The balancer's own address, without a header, is a client of its own.
        r, _ = get(sg.port, "/a")
        assert r.status == 200 and r.h("X-Net") == "out", r
        tail.take(2)
        recs = [json.loads(ln) for ln in tail.settle() if ln.startswith("{")]  # and no more
    finally:
        tail.stop()
    # Each is logged when its transaction ends: in either order.
    assert sorted((x["client"], x["port"], x["status"]) for x in recs) == [
        ("203.0.113.7", 40001, 200), ("203.0.113.7", 40002, 429)], recs
    assert sg.stat("ratelimit_denied") == 1
    assert [q.header("X-Forwarded-For") for q in origin.reqs("/a")] == [
        "203.0.113.7", "192.0.2.8", "127.0.0.5"]
