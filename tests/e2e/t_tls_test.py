"""TLS on client connections: a test CA and server certificates made here
with the openssl CLI, then the real surogatd spoken to by curl, openssl
s_client and Python's ssl module (all OpenSSL clients)."""

import hashlib
import os
import re
import signal
import socket
import ssl
import subprocess
import threading
import time

import pytest

import httpc
from conftest import free_port, wait_until

OPENSSL = "/usr/bin/openssl"
CURL = "/usr/bin/curl"


def run(argv, timeout=20, input=None, check=True):
    p = subprocess.run(argv, capture_output=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise AssertionError("%s: exit %d\n%s%s" % (" ".join(map(str, argv)), p.returncode,
                                                    p.stdout.decode(errors="replace"),
                                                    p.stderr.decode(errors="replace")))
    return p


class Pki:
    """A CA and server certificates, made with the openssl CLI in a directory."""

    def __init__(self, d):
        self.d = d
        self.ca_key, self.ca = d / "ca.key", d / "ca.crt"
        run([OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-keyout", self.ca_key, "-out", self.ca, "-subj", "/CN=surogat test CA",
             "-days", "2", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        self.serial = 0x1000

    def issue(self, name, sans, tag=""):
        """Certificate and key files for CN=name with the given DNS SANs; returns (crt, key, serial)."""
        self.serial += 1
        key = self.d / ("%s%s.key" % (name, tag))
        csr = self.d / ("%s%s.csr" % (name, tag))
        crt = self.d / ("%s%s.crt" % (name, tag))
        ext = self.d / ("%s%s.ext" % (name, tag))
        run([OPENSSL, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", key, "-out", csr, "-subj", "/CN=%s" % name])
        ext.write_text("subjectAltName=%s\nextendedKeyUsage=serverAuth\n"
                       % ",".join("DNS:" + s for s in sans))
        run([OPENSSL, "x509", "-req", "-in", csr, "-CA", self.ca, "-CAkey", self.ca_key,
             "-set_serial", str(self.serial), "-out", crt, "-days", "2", "-extfile", ext])
        return crt, key, self.serial


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = Pki(tmp_path_factory.mktemp("pki"))
    p.a = p.issue("a.test", ["a.test", "www.a.test"])
    p.b = p.issue("b.test", ["b.test", "*.b.test"])
    p.a2 = p.issue("a.test", ["a.test", "www.a.test"], tag="-renewed")
    return p


class Tls:
    """A surogatd with a TLS listen address (certificates copied where a test may replace them)."""

    def __init__(self, sg, port, ca, files):
        self.sg, self.port, self.ca, self.files = sg, port, ca, files

    def ctx(self, **kw):
        c = ssl.create_default_context(cafile=str(self.ca))
        for k, v in kw.items():
            setattr(c, k, v)
        return c

    def conn(self, sni="a.test", ctx=None, timeout=10.0):
        c = httpc.Conn(self.port, timeout=timeout)
        c.sock = (ctx or self.ctx()).wrap_socket(c.sock, server_hostname=sni)
        return c

    def get(self, path, sni="a.test", **kw):
        with self.conn(sni) as c:
            c.request("GET", path, **kw)
            return c.read_final()

    def serial(self, sni="a.test"):
        with self.conn(sni) as c:
            return int(c.sock.getpeercert()["serialNumber"], 16)

    def curl(self, *args, host="a.test", timeout=30, http="--http1.1"):
        """curl speaking HTTP/1.1 unless told (http="--http2"): these tests are about
        HTTP/1.1 over TLS; HTTP/2 has its own (h2_*_test.py)."""
        return run([CURL, "-sS", "--max-time", "20", "--cacert", self.ca, http,
                    "--resolve", "%s:%d:127.0.0.1" % (host, self.port)] + list(args),
                   timeout=timeout)

    def s_client(self, *args, stdin=b"", timeout=15):
        """openssl s_client output (stdout and stderr); stdin is sent, then closed."""
        p = run([OPENSSL, "s_client", "-connect", "127.0.0.1:%d" % self.port,
                 "-CAfile", self.ca] + list(args), input=stdin, timeout=timeout, check=False)
        return p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")


@pytest.fixture
def tls(surogat, pki, tmp_path):
    """Factory: tls(params=..., certs=[(crt, key)...], extra="") -> Tls."""

    def start(params=None, certs=None, extra="", relative=False, backend=None, args=()):
        """relative: name the files relative to the directory surogatd starts in (tmp_path),
        which is not its -n directory."""
        files = []
        spec = "127.0.0.1:%d,tls" % 0
        for i, (crt, key) in enumerate(certs or [pki.a[:2], pki.b[:2]]):
            c, k = tmp_path / ("srv%d.crt" % i), tmp_path / ("srv%d.key" % i)
            c.write_bytes(crt.read_bytes())
            k.write_bytes(key.read_bytes())
            files.append((c, k))
            spec += ",cert=%s,key=%s" % ((c.name, k.name) if relative else (c, k))
        port = free_port()
        spec = spec.replace(":0,", ":%d," % port, 1) + extra
        sg = surogat(params=params, args=["-a", spec] + list(args), backend=backend)
        return Tls(sg, port, pki.ca, files)

    return start


def subject_cn(out):
    m = re.search(r"subject=.*?CN ?= ?([^\s,/]+)", out)
    assert m, "no subject in s_client output:\n%s" % out
    return m.group(1)


# -- the basics ---------------------------------------------------------------


def test_curl_get_keepalive_alpn(origin, tls):
    origin.route("/k", body=b"kept", headers={"Cache-Control": "max-age=60"})
    origin.route("/p", body=b"passed")
    t = tls()
    before = t.sg.stat("sess_conn")
    p = t.curl("-v", "https://a.test:%d/k" % t.port, "https://a.test:%d/p" % t.port,
               "https://a.test:%d/k" % t.port)
    err = p.stderr.decode(errors="replace")
    assert p.stdout == b"keptpassedkept"
    assert "ALPN: server accepted http/1.1" in err
    assert "SSL certificate verify ok" in err
    assert err.count("Re-using existing connection") == 2, err
    assert t.sg.stat("sess_conn") == before + 1  # three requests, one connection
    assert t.sg.stat("tls_handshake") == 1
    assert origin.hits("/k") == 1  # the third was a cache hit, over TLS


def test_sni_selects_certificate(tls):
    t = tls()
    assert subject_cn(t.s_client("-servername", "a.test")) == "a.test"
    assert subject_cn(t.s_client("-servername", "b.test")) == "b.test"
    assert subject_cn(t.s_client("-servername", "www.b.test")) == "b.test"  # wildcard
    assert subject_cn(t.s_client("-servername", "www.a.test")) == "a.test"
    # No SNI, or a name no certificate has: the first certificate, the default.
    assert subject_cn(t.s_client("-noservername")) == "a.test"
    assert subject_cn(t.s_client("-servername", "other.test")) == "a.test"
    # A wildcard covers one label only.
    assert subject_cn(t.s_client("-servername", "x.y.b.test")) == "a.test"
    # And a verifying client agrees.
    assert t.get("/", sni="www.b.test").status == 200
    assert t.get("/", sni="a.test").status == 200


def test_default_is_the_first_pair(pki, tls):
    t = tls(certs=[pki.b[:2], pki.a[:2]])
    assert subject_cn(t.s_client("-noservername")) == "b.test"
    assert subject_cn(t.s_client("-servername", "a.test")) == "a.test"


@pytest.mark.parametrize("old", ["-tls1", "-tls1_1"])
def test_old_protocols_refused(tls, old):
    t = tls()
    before = t.sg.stat("tls_handshake_fail")
    # SECLEVEL=0 so that the client really offers the old protocol to the server.
    out = t.s_client(old, "-cipher", "DEFAULT@SECLEVEL=0", "-servername", "a.test")
    assert "protocol version" in out or "unsupported protocol" in out, out
    assert "Cipher is (NONE)" in out, out  # no session was made
    t.sg.wait_stat("tls_handshake_fail", before + 1)
    assert t.sg.stat("tls_handshake") == 0


@pytest.mark.parametrize("version,proto", [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")])
def test_modern_protocols(tls, version, proto):
    t = tls()
    out = t.s_client(version, "-servername", "a.test", "-alpn", "h2,http/1.1")
    assert "Protocol  : %s" % proto in out or "New, %s" % proto in out, out
    assert "ALPN protocol: h2" in out  # HTTP/2 first, when the client can
    assert "Verify return code: 0 (ok)" in out
    if proto == "TLSv1.2":
        assert re.search(r"Cipher is ECDHE-(ECDSA|RSA)-", out), out  # forward secrecy only


def test_alpn_without_http11_still_serves(tls):
    """A listener without HTTP/2 (h1only) offered h2 alone goes on without ALPN."""
    t = tls(extra=",h1only")
    out = t.s_client("-alpn", "h2", "-servername", "a.test", "-ign_eof",
                     stdin=b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
    assert "No ALPN negotiated" in out
    assert "HTTP/1.1 200" in out
    out = t.s_client("-alpn", "h2,http/1.1", "-servername", "a.test")
    assert "ALPN protocol: http/1.1" in out


def test_reused_ssl_serves_each_client_afresh(origin, tls, tmp_path):
    """The OpenSSL object of a connection that ended well serves the next client
    (tls_ssl_reused): each client sees the certificate its own SNI picks (the default
    without SNI), the ALPN protocol it offered, and a ticket of the last client resumes
    on a reset object without carrying that client's ALPN to the next."""
    origin.route("/r", body=b"r", headers={"Cache-Control": "max-age=60"})
    t = tls()
    sess = tmp_path / "sess.pem"
    req = b"GET /r HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"

    def py(sni, alpn):
        ctx = t.ctx()
        ctx.check_hostname = False  # the certificate's name is what is checked
        if alpn:
            ctx.set_alpn_protocols(alpn)
        with socket.create_connection(("127.0.0.1", t.port), timeout=10) as s:
            with ctx.wrap_socket(s, server_hostname=sni) as c:
                cn = dict(x[0] for x in c.getpeercert()["subject"])["commonName"]
                proto = c.selected_alpn_protocol()
                if proto == "h2":
                    return cn, proto  # curl speaks HTTP/2 below
                c.sendall(req)
                data = b""
                while True:  # to the server's close_notify: the connection ends well
                    b = c.recv(65536)
                    if not b:
                        break
                    data += b
        assert data.startswith(b"HTTP/1.1 200") and data.endswith(b"\r\n\r\nr"), data
        return cn, proto

    for _ in range(3):
        p = t.curl("-v", "--http2", "https://www.b.test:%d/r" % t.port, host="www.b.test",
                   http="--http2")
        err = p.stderr.decode(errors="replace")
        assert p.stdout == b"r" and "ALPN: server accepted h2" in err, err
        assert "CN=b.test" in err, err
        assert py(None, None) == ("a.test", None)
        assert py("a.test", ["http/1.1"]) == ("a.test", "http/1.1")
        assert py("x.b.test", ["h2", "http/1.1"]) == ("b.test", "h2")
        assert py("other.test", None) == ("a.test", None)
        out = t.s_client("-servername", "www.b.test", "-alpn", "h2,http/1.1")
        assert subject_cn(out) == "b.test" and "ALPN protocol: h2" in out, out
        assert subject_cn(t.s_client("-noservername")) == "a.test"
        out = t.s_client("-servername", "a.test", "-sess_out", str(sess), "-ign_eof",
                         "-alpn", "h2,http/1.1", stdin=b"")
        assert "ALPN protocol: h2" in out, out
        out = t.s_client("-servername", "a.test", "-sess_in", str(sess), "-ign_eof",
                         stdin=req)
        assert "Reused, TLSv1.3" in out and "No ALPN negotiated" in out, out
        assert "HTTP/1.1 200" in out, out
    assert t.sg.stat("tls_handshake_fail") == 0
    assert t.sg.stat("tls_ssl_reused") > 0


@pytest.mark.parametrize("version", ["-tls1_2", "-tls1_3"])
def test_resumption(tls, tmp_path, version):
    t = tls()
    sess = tmp_path / "sess.pem"
    # -ign_eof and a request keep the connection up until the TLS 1.3 ticket has arrived.
    req = b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
    out = t.s_client(version, "-servername", "a.test", "-sess_out", str(sess), "-ign_eof",
                     stdin=req)
    assert "New, TLSv1" in out and "HTTP/1.1 200" in out, out
    out = t.s_client(version, "-servername", "a.test", "-sess_in", str(sess), "-ign_eof",
                     stdin=req)
    assert "Reused, TLSv1" in out, out
    assert "HTTP/1.1 200" in out
    assert t.sg.stat("tls_resumed") == 1
    assert t.sg.stat("tls_handshake") == 2


def test_resumption_renews_the_ticket(tls, tmp_path):
    """A TLS 1.3 client resumes every connection after its first: each resumption brings
    the ticket the next one presents (a client offers a ticket once; without a new one,
    every other connection would be a full handshake)."""
    t = tls()
    req = b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
    sess = [tmp_path / f"s{i}.pem" for i in range(5)]
    out = t.s_client("-tls1_3", "-servername", "a.test", "-sess_out", str(sess[0]), "-ign_eof",
                     stdin=req)
    assert "New, TLSv1.3" in out and "HTTP/1.1 200" in out, out
    for i in range(1, 5):
        out = t.s_client("-tls1_3", "-servername", "a.test", "-sess_in", str(sess[i - 1]),
                         "-sess_out", str(sess[i]), "-ign_eof", stdin=req)
        assert "Reused, TLSv1.3" in out and "HTTP/1.1 200" in out, (i, out)
        assert sess[i].read_bytes() != sess[i - 1].read_bytes()  # a new ticket, not the old
    assert t.sg.stat("tls_resumed") == 4
    assert t.sg.stat("tls_handshake") == 5


def test_ticket_keys_rotate(tls, tmp_path):
    """A ticket opens with the current or the previous key, not after two rotations."""
    t = tls(params={"tls_ticket_rotate": "2s"})
    sess, sess2 = tmp_path / "s1.pem", tmp_path / "s2.pem"
    req = b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n"
    t.s_client("-tls1_3", "-servername", "a.test", "-sess_out", str(sess), "-ign_eof", stdin=req)
    time.sleep(2.5)  # one rotation: the ticket's key is now the previous one
    out = t.s_client("-tls1_3", "-servername", "a.test", "-sess_in", str(sess),
                     "-sess_out", str(sess2), "-ign_eof", stdin=req)
    assert "Reused, TLSv1.3" in out, out
    time.sleep(4.5)  # two more periods: both keys replaced
    out = t.s_client("-tls1_3", "-servername", "a.test", "-sess_in", str(sess), "-ign_eof",
                     stdin=req)
    assert "New, TLSv1.3" in out, out
    assert "HTTP/1.1 200" in out  # a full handshake instead, not a failure


# -- bodies, framing, headers ------------------------------------------------------


def test_large_responses(origin, tls, tmp_path):
    big = os.urandom(5 * 1024 * 1024 + 7)
    origin.route("/big", body=big, headers={"Cache-Control": "max-age=60"})
    origin.route("/chunked", body=big[:3 * 1024 * 1024], chunked=True)
    t = tls()
    want = hashlib.sha256(big).hexdigest()
    for i in range(2):  # a miss streamed while stored, then a hit from the cache
        out = tmp_path / ("big%d" % i)
        t.curl("-o", str(out), "https://a.test:%d/big" % t.port)
        assert hashlib.sha256(out.read_bytes()).hexdigest() == want
    assert origin.hits("/big") == 1
    r = t.get("/chunked")
    assert r.body == big[:3 * 1024 * 1024]


def test_request_bodies(origin, tls, tmp_path):
    origin.route("/up", echo_sha=True)
    t = tls()
    body = os.urandom(3 * 1024 * 1024 + 1)
    f = tmp_path / "body"
    f.write_bytes(body)
    p = t.curl("-X", "POST", "--data-binary", "@%s" % f, "-H",
               "Content-Type: application/octet-stream", "https://a.test:%d/up" % t.port)
    assert p.stdout.decode().strip() == hashlib.sha256(body).hexdigest()
    assert origin.last("/up").body == body
    # Chunked upload, and Expect: 100-continue, over one TLS connection.
    with t.conn() as c:
        c.send(httpc.build_request("PUT", "/up", {"Transfer-Encoding": "chunked"},
                                   httpc.chunked(body[:100000], size=7000)))
        r = c.read_final()
        assert r.body.decode().strip() == hashlib.sha256(body[:100000]).hexdigest()
        c.send(httpc.build_request("POST", "/up", {"Expect": "100-continue",
                                                   "Content-Length": "5"}))
        assert c.read_response().status == 100
        c.send(b"hello")
        assert c.read_final().body.decode().strip() == hashlib.sha256(b"hello").hexdigest()


def test_x_forwarded_proto(origin, surogat, tls):
    origin.route("/xfp", body=b"x")
    t = tls()
    assert t.get("/xfp", headers={"X-Forwarded-Proto": "http"}).status == 200
    assert origin.last("/xfp").headers_all("X-Forwarded-Proto") == ["https"]
    assert t.sg.get("/xfp", headers={"X-Forwarded-Proto": "https"}).status == 200
    assert origin.last("/xfp").headers_all("X-Forwarded-Proto") == ["http"]


def test_policy_sees_tls(origin, tls, tmp_path):
    origin.route("/t", body=b"t")
    p = tmp_path / "tls.lua"
    p.write_text("function recv(req)\n"
                 "    req.http.x_client_tls = tostring(client.tls)\n"
                 "    req.http.x_server_tls = tostring(server.tls)\n"
                 "    return 'pass'\n"
                 "end\n")
    t = tls(args=["-f", str(p)])
    assert t.get("/t").status == 200
    seen = origin.last("/t")
    assert (seen.header("X-Client-Tls"), seen.header("X-Server-Tls")) == ("true", "true")
    assert t.sg.get("/t").status == 200  # the plain listener
    seen = origin.last("/t")
    assert (seen.header("X-Client-Tls"), seen.header("X-Server-Tls")) == ("false", "false")


def test_pipelining_and_waiter(origin, tls):
    """Requests in one record, in several records, and after a rest in the waiter."""
    origin.route("/a", body=b"A")
    origin.route("/b", body=b"B" * 40000)
    t = tls(params={"timeout_linger": "10ms"})
    with t.conn() as c:
        c.send(httpc.build_request("GET", "/a") + httpc.build_request("GET", "/b") +
               httpc.build_request("GET", "/a"))
        assert [c.read_final().body for _ in range(3)] == [b"A", b"B" * 40000, b"A"]
        for _ in range(3):  # one record each, sent back to back
            c.send(httpc.build_request("GET", "/a"))
        assert [c.read_final().body for _ in range(3)] == [b"A"] * 3
        for _ in range(2):
            waited = t.sg.stat("sess_waited")
            c.request("GET", "/b")
            assert c.read_final().body == b"B" * 40000
            time.sleep(0.5)  # parked in the waiter, then woken by the next request
            assert t.sg.stat("sess_waited") > waited
        # A head larger than a TLS record (16 KiB), then a request behind it.
        big = {"X-Big%d" % i: "y" * 4000 for i in range(5)}
        c.send(httpc.build_request("GET", "/a", big) + httpc.build_request("GET", "/a"))
        assert [c.read_final().status for _ in range(2)] == [200, 200]
    assert t.sg.stat("sess_conn") == 1


def test_idle_timeout_and_close_notify(origin, tls):
    t = tls(params={"timeout_idle": "1s"})
    with t.conn() as c:
        c.request("GET", "/")
        assert c.read_final().status == 200
        c.sock.settimeout(5)
        # The server closes the idle session; Python's ssl reads the close_notify as b"".
        assert c.sock.recv(10) == b""
    with t.conn() as c:
        c.request("GET", "/", headers={"Connection": "close"})
        assert c.read_final().status == 200
        assert c.sock.recv(10) == b""  # close_notify, not a truncation error
    wait_until(lambda: t.sg.stat("sess_closed") >= 2, 5, "sessions closed")


# -- hostile clients ----------------------------------------------------------------


def client_hello():
    """The first flight of a real TLS client, as bytes."""
    ctx = ssl.create_default_context()
    inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(inc, out, server_hostname="a.test")
    with pytest.raises(ssl.SSLWantReadError):
        obj.do_handshake()
    return out.read()


def closed_by_server(s, timeout=5):
    """What the server sent before closing s (b"" for nothing); a reset counts as closed."""
    s.settimeout(timeout)
    got = b""
    try:
        while True:
            d = s.recv(4096)
            if not d:
                break
            got += d
    except ConnectionResetError:
        pass
    return got


def test_hostile_handshakes(tls):
    t = tls(params={"tls_handshake_timeout": "1s"})
    hello = client_hello()
    assert hello[0] == 0x16  # a handshake record
    fails = 0

    def raw(data, close_after=True):
        s = socket.create_connection(("127.0.0.1", t.port), timeout=5)
        if data:
            s.sendall(data)
        if close_after:
            s.close()
        return s

    # Plain HTTP to the TLS port: refused with an alert, the connection closed.
    s = raw(b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", close_after=False)
    got = closed_by_server(s)
    assert got == b"" or got[0] == 0x15, got  # nothing, or an alert record: never plaintext
    s.close()
    fails += 1
    for junk in (os.urandom(300), b"\x16\x03\x01\xff\xff" + os.urandom(50), b"\x00" * 100):
        raw(junk)
        fails += 1
    raw(hello[:40])  # half a ClientHello, then gone
    raw(hello)  # a whole ClientHello, gone before the reply
    raw(b"")  # connects, says nothing, leaves
    fails += 3
    silent = raw(b"", close_after=False)  # connects and stays silent: timed out
    half = raw(hello[:60], close_after=False)
    fails += 2
    t.sg.wait_stat("tls_handshake_fail", fails, timeout=10)
    for s in (silent, half):
        assert closed_by_server(s) == b""  # timed out and closed, with no reply
        s.close()
    # Still serving, and the failures were logged at a rate limit, not once each.
    assert t.get("/").status == 200
    assert t.sg.alive()
    lines = [ln for ln in t.sg.log_tail(200).splitlines() if "TLS handshake with" in ln]
    assert 1 <= len(lines) < fails, lines
    assert t.sg.stat("tls_handshake_fail") == fails


def test_unfinished_handshakes_hold_no_worker(tls):
    """A client that sent its ClientHello, got our flight and never finishes waits in the
    waiter, not on a worker: with two workers, twenty such clients leave a normal client
    served at once; each is closed at tls_handshake_timeout and counted as a failure."""
    t = tls(params={"thread_pools": "1", "thread_pool_min": "2", "thread_pool_max": "2",
                    "tls_handshake_timeout": "4s"})
    hello = client_hello()
    before = t.sg.stat("tls_handshake_fail")
    stuck = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", t.port), timeout=5)
        s.sendall(hello)
        stuck.append(s)
    for s in stuck:
        s.settimeout(5)
        assert s.recv(1) == b"\x16"  # our flight: the handshake is under way
    t0 = time.monotonic()
    assert t.get("/").status == 200
    assert time.monotonic() - t0 < 3.0  # not behind the stuck ones' 4 s deadlines
    assert t.sg.stat("tls_handshake_fail") == before
    t.sg.wait_stat("tls_handshake_fail", before + 20, timeout=15)
    for s in stuck:
        closed_by_server(s)  # closed by now, without waiting for us
        s.close()
    assert t.get("/").status == 200


def test_client_gone_mid_response(origin, tls):
    big = os.urandom(8 * 1024 * 1024)
    origin.route("/big", body=big)
    t = tls()
    for _ in range(3):
        c = t.conn()
        c.request("GET", "/big")
        c.sock.recv(1000)
        c.close()  # without close_notify, mid-body
    assert t.get("/").status == 200
    assert t.sg.alive()


def test_overload_closes_tls_without_plaintext(origin, tls):
    """A full queue cannot answer a canned 503 in plaintext on a TLS port: it closes."""
    origin.route("/slow", body=b"s", delay=2.0)
    # The slow request holds the one worker while its backend answers, so the
    # queue is full when the handshake arrives.
    t = tls(params={"thread_pools": "1", "thread_pool_min": "1", "thread_pool_max": "1",
                    "thread_queue_limit": "0", "backend_wait_worker": "on"})
    busy = t.conn()
    busy.request("GET", "/slow")
    time.sleep(0.3)
    s = socket.create_connection(("127.0.0.1", t.port), timeout=5)
    s.sendall(client_hello())
    assert closed_by_server(s) == b""
    s.close()
    assert busy.read_final().body == b"s"
    busy.close()
    assert t.sg.stat("sess_dropped") >= 1


def test_pipe_over_tls(tls, tmp_path):
    """A piped Upgrade: the client side of the copy loop reads and writes through TLS."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def serve():
        c, _ = srv.accept()
        c.settimeout(10)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += c.recv(65536)
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
        rest = buf.split(b"\r\n\r\n", 1)[1]
        while True:
            if rest:
                c.sendall(rest.upper())
            rest = c.recv(65536)
            if not rest:
                break
        c.close()

    th = threading.Thread(target=serve, daemon=True)
    th.start()
    script = tmp_path / "pipe.lua"
    script.write_text('function recv(req)\n  if req.http.upgrade then return "pipe" end\nend\n')
    t = tls(backend="127.0.0.1:%d" % srv.getsockname()[1], args=["-f", str(script)])
    c = t.conn()
    c.send(b"GET /ws HTTP/1.1\r\nHost: a.test\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\nhello")
    want = b"HELLO"
    data = bytes(range(97, 123)) * 4000  # 104,000 bytes: several records each way
    deadline = time.monotonic() + 15
    while len(c.buf) < len(b"HTTP/1.1 101") or want not in bytes(c.buf):
        assert time.monotonic() < deadline, bytes(c.buf)
        c._fill(deadline)
    assert bytes(c.buf).startswith(b"HTTP/1.1 101"), bytes(c.buf)
    c.buf.clear()
    c.send(data)
    while len(c.buf) < len(data):
        assert time.monotonic() < deadline, len(c.buf)
        c._fill(deadline)
    assert bytes(c.buf) == data.upper()
    c.close()
    th.join(10)
    srv.close()
    wait_until(lambda: t.sg.stat("policy_pipe") == 1, 5, "pipe counted")


# -- reload ---------------------------------------------------------------------------


def test_reload_renewed_certificate_during_traffic(pki, tls):
    t = tls(relative=True)
    assert t.serial() == pki.a[2]
    stop = threading.Event()
    results = {"ok": 0, "fail": []}
    lock = threading.Lock()

    def new_connections():
        while not stop.is_set():
            try:
                r = t.get("/")
                good = r.status == 200
            except Exception as e:  # pylint: disable=broad-except
                good, r = False, e
            with lock:
                if good:
                    results["ok"] += 1
                else:
                    results["fail"].append(repr(r))

    def keep_alive():
        with t.conn() as c:
            while not stop.is_set():
                try:
                    c.request("GET", "/")
                    good = c.read_final().status == 200
                except Exception as e:  # pylint: disable=broad-except
                    good = False
                    with lock:
                        results["fail"].append("keep-alive: %r" % e)
                    return
                with lock:
                    if good:
                        results["ok"] += 1
                    else:
                        results["fail"].append("keep-alive: bad status")
                time.sleep(0.01)

    threads = [threading.Thread(target=new_connections) for _ in range(3)]
    threads.append(threading.Thread(target=keep_alive))
    for th in threads:
        th.start()
    try:
        time.sleep(0.5)
        (crt, key) = t.files[0]
        crt.write_bytes(pki.a2[0].read_bytes())
        key.write_bytes(pki.a2[1].read_bytes())
        t.sg.signal(signal.SIGHUP)
        t.sg.wait_stat("tls_reload", 1)
        time.sleep(0.5)
    finally:
        stop.set()
        for th in threads:
            th.join(30)
    assert not results["fail"], results["fail"][:5]
    assert results["ok"] > 20
    assert t.serial() == pki.a2[2]  # new connections get the renewed certificate
    assert t.serial("b.test") == pki.b[2]
    assert t.sg.stat("tls_reload_fail") == 0


def test_reload_bad_certificate_keeps_the_old(pki, tls):
    t = tls()
    with t.conn() as kept:
        kept.request("GET", "/")
        assert kept.read_final().status == 200
        crt, key = t.files[0]
        crt.write_text("-----BEGIN CERTIFICATE-----\nnot a certificate\n")
        t.sg.signal(signal.SIGHUP)
        t.sg.wait_stat("tls_reload_fail", 1)
        wait_until(lambda: str(crt) in t.sg.log_tail(50), 5, "the error naming the file")
        assert t.serial() == pki.a[2]
        kept.request("GET", "/")
        assert kept.read_final().status == 200
        # A mismatched key is refused too, naming both files.
        crt.write_bytes(pki.a2[0].read_bytes())
        t.sg.signal(signal.SIGHUP)
        t.sg.wait_stat("tls_reload_fail", 2)
        wait_until(lambda: "does not match" in t.sg.log_tail(50), 5, "the mismatch logged")
        assert t.serial() == pki.a[2]
        # Fixed: the next SIGHUP takes it.
        key.write_bytes(pki.a2[1].read_bytes())
        t.sg.signal(signal.SIGHUP)
        t.sg.wait_stat("tls_reload", 1)
        assert t.serial() == pki.a2[2]
    assert t.sg.stat("tls_reload") == 1


# -- startup ------------------------------------------------------------------------


def test_bad_listen_specs_stop_the_start(pki, tmp_path):
    from conftest import run_surogatd
    port = free_port()
    crt, key = str(pki.a[0]), str(pki.a[1])
    cases = [
        ("127.0.0.1:%d,tls" % port, "tls needs cert=FILE,key=FILE"),
        ("127.0.0.1:%d,tls,cert=%s" % (port, crt), "has no key="),
        ("127.0.0.1:%d,tls,cert=%s,key=%s" % (port, tmp_path / "nope.crt", key), "nope.crt"),
        ("127.0.0.1:%d,tls,cert=%s,key=%s" % (port, crt, pki.b[1]), "does not match"),
        ("127.0.0.1:%d,tls,cert=%s,key=%s,ocsp=%s" % (port, crt, key, crt),
         "not a DER OCSP response"),
    ]
    for spec, says in cases:
        p = run_surogatd(["-F", "-a", spec, "-b", "127.0.0.1:9", "-n", str(tmp_path / "wd")])
        assert p.returncode == 2, (spec, p.stderr)
        assert says in p.stderr, (spec, p.stderr)


def test_ocsp_stapling(pki, tls, tmp_path):
    d = tmp_path
    idx = d / "index.txt"
    # The CA's database says the certificate is valid (V); openssl ocsp answers from it.
    enddate = run([OPENSSL, "x509", "-in", pki.a[0], "-noout", "-enddate"]).stdout.decode()
    end = time.strptime(enddate.strip().split("=", 1)[1], "%b %d %H:%M:%S %Y %Z")
    idx.write_text("V\t%s\t\t%X\tunknown\t/CN=a.test\n"
                   % (time.strftime("%y%m%d%H%M%SZ", end), pki.a[2]))
    reqf, resp = d / "req.der", d / "resp.der"
    run([OPENSSL, "ocsp", "-issuer", pki.ca, "-cert", pki.a[0], "-reqout", reqf, "-no_nonce"])
    run([OPENSSL, "ocsp", "-index", idx, "-rsigner", pki.ca, "-rkey", pki.ca_key, "-CA",
         pki.ca, "-reqin", reqf, "-respout", resp, "-ndays", "1"])
    t = tls(certs=[pki.b[:2], pki.a[:2]], extra=",ocsp=%s" % resp)
    # ocsp= belongs to the cert= before it, here a.test's.
    out = t.s_client("-servername", "a.test", "-status")
    assert "OCSP Response Status: successful" in out, out
    assert "Cert Status: good" in out, out
    out = t.s_client("-servername", "b.test", "-status")
    assert "OCSP response: no response sent" in out, out


def test_listen_in_config_file(pki, surogat, tmp_path):
    port = free_port()
    conf = ("thread_pools = 1\n"
            "listen = 127.0.0.1:%d,tls,cert=%s,key=%s  # the -a syntax\n" % (port, pki.a[0], pki.a[1]))
    sg = surogat(conf=conf)
    t = Tls(sg, port, pki.ca, [])
    assert t.get("/").status == 200
    assert t.serial() == pki.a[2]
    assert sg.get("/").status == 200  # the -a address is still there
