"""HTTP/2 to clients: negotiation (ALPN h2 on tls listeners, ,h1only, prior knowledge
on ,h2c ones, Upgrade: h2c ignored), what a request looks like to the policy and the
logs, static files, the counters, and real clients: curl, nghttp, h2load, Chromium."""

import hashlib
import json
import os
import re
import subprocess

import pytest

import httpc
from conftest import REPO, free_port, run_surogatd, wait_until
from h2util import CERTUTIL, CURL, H2, H2LOAD, NGHTTP, run
from t_tls_test import OPENSSL, Pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = Pki(tmp_path_factory.mktemp("h2pki"))
    p.a = p.issue("a.test", ["a.test", "www.a.test"])
    return p


class Srv:
    """A surogatd with an h2c listener (.port: HTTP/1 and prior knowledge) and a tls one
    (.tport), and maybe a plain one (.pport)."""

    def __init__(self, sg, tport, ca):
        self.sg, self.port, self.tport, self.ca = sg, sg.port, tport, ca

    def h2(self, tls=False, **kw):
        if tls:
            return H2(self.tport, tls_ca=self.ca, **kw)
        return H2(self.port, **kw)

    def curl(self, *args, tls=True, timeout=60):
        base = [CURL, "-sS", "--max-time", "50"]
        if tls:
            base += ["--cacert", str(self.ca), "--resolve", "a.test:%d:127.0.0.1" % self.tport]
        return run(base + list(args), timeout=timeout)

    def turl(self, path):
        return "https://a.test:%d%s" % (self.tport, path)

    def curl_url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def iurl(self, path):
        """The tls listener by address (nghttp and h2load have no --resolve); they do not
        verify the certificate."""
        return "https://127.0.0.1:%d%s" % (self.tport, path)


@pytest.fixture
def h2srv(surogat, pki, tmp_path):
    """Factory: h2srv(params=..., backend=..., args=..., tls_opts="") -> Srv, with a tls
    listener besides the fixture's own (plain) one."""

    def start(params=None, backend=None, args=(), tls_opts="", **kw):
        tport = free_port()
        spec = "127.0.0.1:%d,tls,cert=%s,key=%s%s" % (tport, pki.a[0], pki.a[1], tls_opts)
        sg = surogat(params=params, backend=backend, args=["-a", spec] + list(args), **kw)
        return Srv(sg, tport, pki.ca)

    return start


def www_tree(tmp_path, n_assets=0):
    www = tmp_path / "www"
    www.mkdir(exist_ok=True)
    (www / "index.html").write_text("<html><body>hello over h2</body></html>\n")
    (www / "big.bin").write_bytes(os.urandom((3 << 20) + 5))
    for i in range(n_assets):
        (www / ("a%02d.txt" % i)).write_text("asset %d\n" % i * (i + 1))
    return www


@pytest.fixture
def static(h2srv, tmp_path, surogat):
    """A surogatd serving a static tree over an h2c listener and a tls one."""

    def start(params=None, args=(), n_assets=0, tls_opts=""):
        www = www_tree(tmp_path, n_assets)
        port = free_port()
        srv = h2srv(params=params, backend=str(www), tls_opts=tls_opts,
                    args=["-a", "127.0.0.1:%d,h2c" % port] + list(args))
        srv.port = port
        srv.www = www
        return srv

    return start


# -- negotiation --------------------------------------------------------------------


def s_client(port, ca, *args):
    p = run([OPENSSL, "s_client", "-connect", "127.0.0.1:%d" % port, "-CAfile", ca,
             "-servername", "a.test"] + list(args), input=b"", timeout=20, check=False)
    return p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")


def test_alpn_offers_h2_then_http11(static, pki):
    srv = static()
    assert "ALPN protocol: h2" in s_client(srv.tport, pki.ca, "-alpn", "h2,http/1.1")
    assert "ALPN protocol: h2" in s_client(srv.tport, pki.ca, "-alpn", "http/1.1,h2")
    assert "ALPN protocol: http/1.1" in s_client(srv.tport, pki.ca, "-alpn", "http/1.1")
    # and the protocols really served
    p = srv.curl("-o", "/dev/null", "-w", "%{http_version} %{http_code}", "--http2",
                 srv.turl("/index.html"))
    assert p.stdout == b"2 200"
    p = srv.curl("-o", "/dev/null", "-w", "%{http_version} %{http_code}", "--http1.1",
                 srv.turl("/index.html"))
    assert p.stdout == b"1.1 200"
    assert srv.sg.stat("h2_sess") == 3  # both s_client handshakes agreed on h2, and curl's


def test_h1only_listener_speaks_http11(static, pki):
    srv = static(tls_opts=",h1only")
    assert "ALPN protocol: http/1.1" in s_client(srv.tport, pki.ca, "-alpn", "h2,http/1.1")
    p = srv.curl("-o", "/dev/null", "-w", "%{http_version} %{http_code}", "--http2",
                 srv.turl("/index.html"))
    assert p.stdout == b"1.1 200"
    assert srv.sg.stat("h2_sess") == 0


def test_h2c_prior_knowledge_and_http1_on_one_listener(static):
    srv = static()
    p = srv.curl("-o", "/dev/null", "-w", "%{http_version} %{http_code}",
                 "--http2-prior-knowledge", srv.curl_url("/index.html"), tls=False)
    assert p.stdout == b"2 200"
    r = httpc.fetch(srv.port, path="/index.html")
    assert r.status == 200 and b"hello over h2" in r.body
    with srv.h2() as c:
        st = c.get("/index.html")
        assert st.status == 200 and st.data == (srv.www / "index.html").read_bytes()
    assert srv.sg.stat("h2_sess") == 2


def test_prior_knowledge_needs_h2c(surogat, tmp_path):
    """Without ,h2c a cleartext listener is HTTP/1 only: the preface is an HTTP/1.1 request
    line for a version we do not speak."""
    sg = surogat(backend=str(www_tree(tmp_path)))
    r = httpc.exchange(sg.port, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
    assert r.startswith(b"HTTP/1.1 505"), r
    assert sg.stat("h2_sess") == 0


def test_preface_in_pieces(static):
    """The preface may come in pieces: the listener waits for the rest before it decides."""
    import socket
    import time
    srv = static()
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    s.sendall(b"PRI * HT")
    time.sleep(0.3)
    with H2(srv.port, preface=False) as c:
        c.sock.close()
        c.sock = s
        c.conn.initiate_connection()
        s.sendall(b"TP/2.0\r\n\r\nSM\r\n\r\n")
        # h2's own preface starts with the magic: send what follows it
        data = c.conn.data_to_send()
        assert data.startswith(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        s.sendall(data[24:])
        st = c.get("/index.html")
        assert st.status == 200


@pytest.mark.parametrize("opts,why", [
    (",tls,cert=C,key=K,h2c", "h2c is for cleartext listeners"),
    (",h2c,h1only", "h2c is for cleartext listeners without h1only"),
    (",h3", "unknown option 'h3' (PROXY, tls, cert=, key=, ocsp=, h1only, h2c;"),
])
def test_listener_options_refused(pki, opts, why):
    opts = opts.replace("C", str(pki.a[0])).replace("K", str(pki.a[1]))
    r = run_surogatd(["-F", "-a", "127.0.0.1:%d%s" % (free_port(), opts), "-b", "127.0.0.1:1"])
    assert r.returncode == 2 and why in r.stderr, r


def test_upgrade_h2c_is_ignored_and_never_forwarded(origin, surogat):
    """RFC 9113 3.1: no Upgrade: h2c.  curl --http2 on http:// offers it; the answer is
    HTTP/1.1, and the backend sees neither the offer nor its settings."""
    origin.route("/u", body=b"upgraded? no", headers={"Cache-Control": "no-store"})
    sg = surogat()
    p = run([CURL, "-sS", "--max-time", "20", "--http2", "-o", "/dev/null", "-w",
             "%{http_version} %{http_code}", "http://127.0.0.1:%d/u" % sg.port])
    assert p.stdout == b"1.1 200"
    got = origin.last("/u")
    assert not got.has("Upgrade") and not got.has("HTTP2-Settings"), got.headers
    # spelled out, with another Connection token: still an ordinary request
    r = httpc.fetch(sg.port, path="/u", headers={"Connection": "Upgrade, HTTP2-Settings",
                                                 "Upgrade": "h2c", "HTTP2-Settings": "AAMAAABkAAQAoAAAAAIAAAAA"})
    assert r.status == 200 and r.body == b"upgraded? no"
    got = origin.last("/u")
    assert not got.has("Upgrade") and not got.has("HTTP2-Settings"), got.headers


# -- requests as the core sees them ---------------------------------------------------


POLICY = """
function recv(req)
    if req.url == "/proto" then
        return surogat.synth(200, req.proto .. " " .. client.proto .. " " .. req.http.host)
    end
end
function deliver(req, resp)
    resp.http.x_proto = req.proto
    resp.http.x_cookie = req.http.cookie or "-"
end
"""


def test_policy_and_logs_see_http2(static, tmp_path):
    pol = tmp_path / "p.lua"
    pol.write_text(POLICY)
    srv = static(params={"access_log": "access.log"}, args=["-f", str(pol)])
    with srv.h2() as c:
        st = c.get("/proto")
        assert st.status == 200 and b"HTTP/2.0 HTTP/2.0 a.test" in st.data, st.data
        # cookie crumbs (RFC 9113 8.2.3) reach the policy and backends as one field
        st = c.get("/index.html", headers=[("cookie", "a=1"), ("cookie", "b=2")])
        assert st.header("x-proto") == "HTTP/2.0"
        assert st.header("x-cookie") == "a=1; b=2"
    r = httpc.fetch(srv.port, path="/index.html")
    assert r.header("X-Proto") == "HTTP/1.1"
    lines = srv.sg.wait_access_lines(3)
    assert sum("HTTP/2.0" in ln for ln in lines) == 2, lines
    assert sum("HTTP/1.1" in ln for ln in lines) == 1, lines


def test_request_trace_says_http2(static):
    """`surogatctl log -g`: an h2 stream's request and response are HTTP/2.0 in the
    trace, its :authority the Host; an HTTP/1.1 request beside it stays HTTP/1.1."""
    from l_trace_test import Traces, first, recs
    srv = static()
    tr = Traces(srv.sg)
    with srv.h2() as c:
        assert c.get("/index.html").status == 200
    assert httpc.fetch(srv.port, path="/index.html").status == 200
    h2, h1 = [g["tx"] for g in tr.groups(2)]
    assert first(h2, "ReqProtocol") == "HTTP/2.0" and first(h2, "RespProtocol") == "HTTP/2.0"
    assert "Host: a.test" in recs(h2, "ReqHeader") and first(h2, "RespStatus") == "200"
    assert first(h1, "ReqProtocol") == "HTTP/1.1" and first(h1, "RespProtocol") == "HTTP/1.1"


def test_proxy_listeners_speak_h2(static, pki, tmp_path):
    """After a PROXY header: prior knowledge on a PROXY,h2c listener, ALPN h2 on a
    PROXY,tls one; the request is the carried client's."""
    pol = tmp_path / "p.lua"
    pol.write_text(POLICY)
    pport, tport = free_port(), free_port()
    srv = static(params={"access_log": "access.log"}, args=[
        "-f", str(pol), "-a", "127.0.0.1:%d,PROXY,h2c" % pport,
        "-a", "127.0.0.1:%d,PROXY,tls,cert=%s,key=%s" % (tport, pki.a[0], pki.a[1])])
    hdr = b"PROXY TCP4 203.0.113.7 198.51.100.1 40001 8080\r\n"
    with H2(pport, prefix=hdr) as c:
        st = c.get("/index.html")
        assert st.status == 200 and st.header("x-proto") == "HTTP/2.0", st
    with H2(tport, tls_ca=srv.ca, prefix=hdr) as c:
        st = c.get("/index.html")
        assert st.status == 200 and st.header("x-proto") == "HTTP/2.0", st
    lines = srv.sg.wait_access_lines(2)
    assert all(ln.startswith("203.0.113.7 ") and "HTTP/2.0" in ln for ln in lines), lines
    assert srv.sg.stat("proxy_hdr") == 2


def test_unix_socket_h2c(static, tmp_path):
    path = str(tmp_path / "h2.sock")
    srv = static(args=["-a", path + ",h2c,mode=0600"])
    wait_until(lambda: os.path.exists(path), 5, "the socket")
    for proto in ("--http2-prior-knowledge", "--http1.1"):
        p = run([CURL, "-sS", "--max-time", "20", proto, "--unix-socket", path, "-o",
                 "/dev/null", "-w", "%{http_version} %{http_code}", "http://a.test/index.html"])
        assert p.stdout.decode() == ("2 200" if proto.startswith("--http2") else "1.1 200")
    assert srv.sg.stat("h2_sess") == 1


def test_authority_is_host(static):
    srv = static()
    with srv.h2() as c:
        st = c.get("/index.html", authority="x.test", headers=[("host", "x.test")])
        assert st.status == 200
        # both, and different: 400
        st = c.get("/index.html", authority="x.test", headers=[("host", "y.test")])
        assert st.status == 400
        # a Host alone is the authority; neither is a 400 as HTTP/1.1's missing Host
        st = c.get("/index.html", authority=None, headers=[("host", "x.test")])
        assert st.status == 200
        st = c.get("/index.html", authority=None)
        assert st.status == 400
        # and the connection goes on
        assert c.get("/index.html").status == 200
    assert srv.sg.stat("client_req_400") == 2


def test_static_files_range_conditional_head(static):
    srv = static()
    big = (srv.www / "big.bin").read_bytes()
    with srv.h2(tls=True) as c:
        st = c.get("/big.bin")
        assert st.status == 200 and st.header("content-length") == str(len(big))
        assert hashlib.sha256(st.data).digest() == hashlib.sha256(big).digest()
        st = c.get("/big.bin", headers=[("range", "bytes=1000-1009")])
        assert st.status == 206 and bytes(st.data) == big[1000:1010]
        lm = c.get("/index.html").header("last-modified")
        st = c.get("/index.html", headers=[("if-modified-since", lm)])
        assert st.status == 304 and st.data == b""
        st = c.get("/index.html", method="HEAD")
        assert st.status == 200 and st.data == b"" and st.header("content-length") == "40"
    # no sendfile(2) into frames: the file's bytes went in DATA frames, counted the same
    assert srv.sg.stat("sfb_sendfile_bytes") == len(big) + 10


def test_purge_over_h2(origin, surogat, pki):
    origin.route("/p", body=b"cached", headers={"Cache-Control": "max-age=60"})
    port = free_port()
    sg = surogat(args=["-a", "127.0.0.1:%d,h2c" % port])
    assert httpc.fetch(sg.port, path="/p").status == 200  # stored over HTTP/1.1
    with H2(port) as c:
        st = c.get("/p", authority="surogat.test")
        assert st.status == 200 and bytes(st.data) == b"cached" and st.header("age") is not None
        st = c.get("/p", method="PURGE", authority="surogat.test")
        assert st.status == 200, st
    assert httpc.fetch(sg.port, path="/p").status == 200
    assert origin.hits("/p") == 2


# -- counters and observability ----------------------------------------------------------


def test_counters_metrics_status(static):
    admin = free_port()
    srv = static(args=["-M", "127.0.0.1:%d" % admin])
    before = srv.sg.stat("h2_streams")
    with srv.h2() as c:
        for _ in range(5):
            assert c.get("/index.html").status == 200
        c.wait(lambda: srv.sg.stat("h2_sess_open") == 1, what="one open h2 connection")
    assert srv.sg.stat("h2_streams") == before + 5
    wait_until(lambda: srv.sg.stat("h2_sess_open") == 0, 5, "the connection to be closed")
    m = httpc.fetch(admin, path="/metrics").body.decode()
    assert re.search(r"^surogat_h2_streams_total 5$", m, re.M), m
    assert re.search(r"^surogat_h2_sess_total 1$", m, re.M)
    js = json.loads(httpc.fetch(admin, path="/status.json").body)
    assert js["counters"]["h2_streams"] == 5 and js["counters"]["h2_sess"] == 1


TLS_FACTS = """
function deliver(req, resp)
    resp.http.x_tls = tostring(client.tls) .. " " .. tostring(client.tls_version) .. " " ..
                      tostring(client.tls_cipher) .. " " .. tostring(client.sni)
end
"""


def test_tls13_records_leave_openssl(static, tmp_path):
    """Over TLS 1.3 an h2 connection's records are sealed by surogat after the handshake
    (OpenSSL's SSL object freed): curl, nghttp and h2load get their answers whole, the
    policy still sees the handshake's facts, and TLS 1.2 stays with OpenSSL."""
    pol = tmp_path / "facts.lua"
    pol.write_text(TLS_FACTS)
    srv = static(n_assets=3, args=["-f", str(pol)])
    out = srv.curl("--http2", "-D", "-", srv.turl("/index.html"), srv.turl("/a00.txt"),
                   srv.turl("/index.html"))
    text = out.stdout.decode(errors="replace")
    assert text.count("HTTP/2 200") == 3 and "hello over h2" in text, text
    facts = re.findall(r"^x-tls: (.*?)\r?$", text, re.M)
    assert len(facts) == 3 and len(set(facts)) == 1, facts
    assert re.fullmatch(r"true TLSv1\.3 TLS_\w+ a\.test", facts[0]), facts
    assert srv.sg.stat("tls_mux_own") == 1 and srv.sg.stat("h2_sess") == 1
    # TLS 1.2: OpenSSL keeps the records
    out = srv.curl("--http2", "--tls-max", "1.2", "-D", "-", srv.turl("/index.html"))
    text = out.stdout.decode(errors="replace")
    assert "HTTP/2 200" in text, text
    assert re.search(r"^x-tls: true TLSv1\.2 \S+ a\.test\r?$", text, re.M), text
    assert srv.sg.stat("tls_mux_own") == 1 and srv.sg.stat("h2_sess") == 2
    # many streams on many connections, 3 MiB bodies: each answer whole
    r = run([H2LOAD, "-n", "40", "-c", "4", "-m", "10", srv.iurl("/big.bin")], timeout=120)
    assert b"40 succeeded, 0 failed, 0 errored" in r.stdout, r.stdout
    assert srv.sg.stat("tls_mux_own") == 5
    r = run([NGHTTP, srv.iurl("/big.bin")], timeout=60)
    assert hashlib.sha256(r.stdout).digest() == hashlib.sha256((srv.www / "big.bin").read_bytes()).digest()
    assert srv.sg.stat("tls_mux_own") == 6 and srv.sg.stat("tls_handshake_fail") == 0


def test_status_page_shows_h2(static, tmp_path):
    from m_status_page_test import load_dom
    admin = free_port()
    srv = static(args=["-M", "127.0.0.1:%d" % admin])
    with srv.h2(tls=True) as c:
        for _ in range(7):
            assert c.get("/index.html").status == 200
        dom = load_dom("http://127.0.0.1:%d/" % admin, tmp_path, 3000)
        assert dom.by_id["h2-streams"]["attrs"]["data-value"] == "7", dom.by_id["h2-streams"]
        assert dom.by_id["h2-open"]["text"].strip() == "1"


# -- real clients --------------------------------------------------------------------------


def test_nghttp_many_assets_one_connection(static):
    srv = static(n_assets=30)
    urls = [srv.iurl("/a%02d.txt" % i) for i in range(30)]
    p = run([NGHTTP, "-ns", "--stat", srv.iurl("/index.html")] + urls, timeout=60,
            check=False)
    assert p.returncode == 0, p.stderr
    rows = [ln for ln in p.stdout.decode().splitlines() if re.search(r"\s200\s", ln)]
    assert len(rows) == 31, p.stdout.decode()
    assert srv.sg.stat("h2_sess") == 1 and srv.sg.stat("h2_streams") == 31


def test_h2load_many_streams(static):
    """1000 requests, 10 connections, 100 streams each at once: all succeed."""
    srv = static()
    p = run([H2LOAD, "-n", "2000", "-c", "10", "-m", "100", srv.iurl("/index.html")],
            timeout=120)
    out = p.stdout.decode()
    assert "2000 succeeded, 0 failed, 0 errored" in out, out
    assert "status codes: 2000 2xx" in out, out
    p = run([H2LOAD, "-n", "2000", "-c", "4", "-m", "100", srv.curl_url("/index.html")],
            timeout=120)
    assert "2000 succeeded, 0 failed, 0 errored" in p.stdout.decode()
    assert srv.sg.stat("h2_refused") == 0


PAGE = """<!doctype html>
<html><head><title>h2</title></head><body>
%s
<pre id="out">waiting</pre>
<script>
window.addEventListener("load", function () {
  var r = performance.getEntriesByType("resource").map(function (e) {
    return [e.name.replace(/^.*\\//, ""), e.nextHopProtocol];
  });
  var nav = performance.getEntriesByType("navigation")[0].nextHopProtocol;
  document.getElementById("out").textContent = JSON.stringify({page: nav, assets: r});
});
</script>
</body></html>
"""


def trust_ca(home, ca):
    """The test CA as a trusted root in the NSS database Chromium reads ($HOME/.pki/nssdb)."""
    db = home / ".pki" / "nssdb"
    db.mkdir(parents=True, exist_ok=True)
    run([CERTUTIL, "-d", "sql:%s" % db, "-N", "--empty-password"])
    run([CERTUTIL, "-d", "sql:%s" % db, "-A", "-t", "C,,", "-n", "surogat test CA", "-i", ca])


def test_chromium_page_with_30_assets_over_h2(static, pki, tmp_path):
    """Chromium loads a page and its 30 assets from a tls listener whose certificate the
    test CA issued, the CA trusted as a root: nothing about TLS is waived."""
    from m_status_page_test import chromium
    srv = static(n_assets=30, params={"access_log": "access.log"})
    imgs = "\n".join('<iframe src="/a%02d.txt"></iframe>' % i for i in range(30))
    (srv.www / "page.html").write_text(PAGE % imgs)
    trust_ca(tmp_path, pki.ca)
    out = chromium(["--host-resolver-rules=MAP a.test 127.0.0.1",
                    "--virtual-time-budget=10000", "--dump-dom", srv.turl("/page.html")],
                   tmp_path)
    m = re.search(r'<pre id="out">(\{.*\})</pre>', out)
    assert m, out[-3000:]
    got = json.loads(m.group(1).replace("&quot;", '"'))
    assert got["page"] == "h2", got
    assets = {name: proto for name, proto in got["assets"]}
    assert len([n for n in assets if n.startswith("a")]) == 30, got
    assert set(assets.values()) == {"h2"}, got
    lines = srv.sg.wait_access_lines(31)
    assert sum("HTTP/2.0" in ln for ln in lines) >= 31, lines
    assert srv.sg.stat("h2_streams") >= 31
