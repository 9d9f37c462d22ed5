"""TLS to backends: a backend declared with tls = true in the policy, in
front of a TLS origin (Python's ssl module, i.e. OpenSSL, serving the
scripted origin of origins.py) and of real nginx.  Certificates come from
a test CA made here with the openssl CLI.  Covers certificate checks (CA
file, host name, IP address, unknown CA, self-signed, verify = false), SNI,
keep-alive reuse and session resumption of backend TLS connections,
caching, large bodies both ways, pipe, probes over TLS, and declaration
errors."""

import hashlib
import os
import socket
import ssl
import subprocess
import textwrap
import threading

import pytest

from conftest import free_port, listening, run_surogatd, wait_until
from cstatus import is_hit
from origins import Origin, upgrade_echo, upgrade_echo_client
from r_routing_test import test_declaration_errors_name_file_and_line as refused_at_load
from t_tls_test import OPENSSL, Pki, run

NGINX = "/usr/sbin/nginx"


def issue(pki, name, sans, tag=""):
    """Like Pki.issue, with SANs given whole ("DNS:x", "IP:127.0.0.1")."""
    pki.serial += 1
    base = pki.d / ("%s%s" % (name, tag))
    key, csr, crt, ext = (base.with_suffix(s) for s in (".key", ".csr", ".crt", ".ext"))
    run([OPENSSL, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", key, "-out", csr, "-subj", "/CN=%s" % name])
    ext.write_text("subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n" % ",".join(sans))
    run([OPENSSL, "x509", "-req", "-in", csr, "-CA", pki.ca, "-CAkey", pki.ca_key,
         "-set_serial", str(pki.serial), "-out", crt, "-days", "2", "-extfile", ext])
    return crt, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = Pki(tmp_path_factory.mktemp("pki"))
    p.a = issue(p, "a.test", ["DNS:a.test", "DNS:*.a.test"])
    p.ip = issue(p, "ip", ["IP:127.0.0.1"], tag="-ip")
    p.client = issue(p, "client.test", ["DNS:client.test"], tag="-client")
    # Another CA, which surogat is not told about.
    p.other = Pki(tmp_path_factory.mktemp("other"))
    p.other.a = issue(p.other, "a.test", ["DNS:a.test"])
    # Self-signed, the right name, no CA at all.
    d = tmp_path_factory.mktemp("self")
    p.self_crt, p.self_key = d / "self.crt", d / "self.key"
    run([OPENSSL, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", p.self_key, "-out", p.self_crt, "-subj", "/CN=a.test",
         "-days", "2", "-addext", "subjectAltName=DNS:a.test"])
    return p


class TlsOrigin(Origin):
    """The scripted origin behind TLS.  Records the SNI name of each
    handshake (None without SNI), failed handshakes, and resumed sessions."""

    def __init__(self, crt, key, client_ca=None):
        self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ctx.load_cert_chain(str(crt), str(key))
        if client_ca is not None:
            self.ctx.load_verify_locations(str(client_ca))
            self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.ctx.set_alpn_protocols(["h2", "http/1.1"])
        self.snis = []
        self.handshakes = 0
        self.resumed = 0
        self.failed = []
        self.alpn = []  # the protocol each handshake agreed on
        self.peers = []  # client certificate subjects
        self.ctx.sni_callback = self._sni
        super().__init__()

    def _sni(self, sock, name, ctx):
        with self.lock:
            self.snis.append(name)

    def _serve(self, s, cid):
        s.settimeout(10)
        try:
            ss = self.ctx.wrap_socket(s, server_side=True)
        except (ssl.SSLError, OSError) as e:
            with self.lock:
                self.failed.append(e)
                self.socks.discard(s)
            s.close()
            return
        ss.settimeout(None)
        with self.lock:
            self.socks.discard(s)
            self.socks.add(ss)
            self.handshakes += 1
            self.resumed += 1 if ss.session_reused else 0
            self.alpn.append(ss.selected_alpn_protocol())
            cert = ss.getpeercert()
            if cert:
                self.peers.append(dict(x[0] for x in cert["subject"])["commonName"])
        super()._serve(ss, cid)


@pytest.fixture
def torigins():
    made = []

    def make(crt, key, **kw):
        o = TlsOrigin(crt, key, **kw)
        made.append(o)
        return o

    yield make
    for o in made:
        o.stop()


def start(surogat, tmp_path, decl, params=None, extra=""):
    p = tmp_path / "backends.lua"
    p.write_text(textwrap.dedent(decl) + textwrap.dedent(extra))
    return surogat(params=params, args=["-f", str(p)])


def backend(port, **fields):
    """A `backend "default" {...}` declaration with tls = true and fields."""
    f = {"host": '"127.0.0.1"', "port": str(port), "tls": "true"}
    for k, v in fields.items():
        f[k] = ("true" if v else "false") if isinstance(v, bool) else '"%s"' % v
    return 'backend "default" { %s }\n' % ", ".join("%s = %s" % kv for kv in f.items())


# -- certificate checks ----------------------------------------------------


def test_valid_certificate_keepalive_and_sni(pki, torigins, surogat, tmp_path):
    o = torigins(*pki.a)
    o.route("/k", body=b"over tls")
    sg = start(surogat, tmp_path, backend(o.port, ca_file=pki.ca, sni="a.test"))
    for i in range(4):
        r = sg.get("/k", headers={"Cache-Control": "no-cache"})
        assert r.status == 200 and r.body == b"over tls", r
        # The connection goes back to the pool just after the client has its answer.
        sg.wait_stat("backend_recycle", i + 1)
    o.wait_hits("/k", 4)
    # The four requests went over one TLS connection, kept alive and reused.
    assert o.conns == 1 and o.handshakes == 1, (o.conns, o.handshakes)
    assert [r.conn_seq for r in o.reqs("/k")] == [1, 2, 3, 4]
    assert o.snis == ["a.test"]
    assert o.alpn == ["http/1.1"]  # never h2, which the origin would rather speak
    st = sg.stats()
    assert st["backend_tls_handshake"] == 1 and st["backend_tls_fail"] == 0, st
    assert st["backend_reuse"] >= 3 and st["backend_conn"] == 1, st


def test_ip_address_checked_against_ip_san_and_no_sni(pki, torigins, surogat, tmp_path):
    o = torigins(*pki.ip)
    o.route("/ip", body=b"by address")
    sg = start(surogat, tmp_path, backend(o.port, ca_file=pki.ca))
    r = sg.get("/ip")
    assert r.status == 200 and r.body == b"by address", r
    assert o.snis == [None]  # RFC 6066: never an address in SNI


def test_wrong_hostname_refused(pki, torigins, surogat, tmp_path):
    o = torigins(*pki.a)
    o.route("/w", body=b"must not be served")
    sg = start(surogat, tmp_path, backend(o.port, ca_file=pki.ca, sni="b.test"))
    r = sg.get("/w")
    assert r.status == 503 and b"must not be served" not in r.body, r
    st = sg.stats()
    assert st["backend_tls_fail"] == 1 and st["backend_fail"] >= 1, st
    assert st["backend_tls_handshake"] == 0, st
    assert o.hits("/w") == 0 and o.handshakes == 0
    assert o.snis == ["b.test"]
    wait_until(lambda: "hostname mismatch" in sg.log_path.read_text(errors="replace"), 5,
               "the reason in the log")
    # verify_host names what is checked, apart from the SNI name sent.
    sg2 = start(surogat, tmp_path, backend(o.port, ca_file=pki.ca, sni="b.test",
                                           verify_host="www.a.test"))
    assert sg2.get("/w").status == 200


@pytest.mark.parametrize("which", ["unknown_ca", "self_signed", "system_store"])
def test_untrusted_certificate_refused(pki, torigins, surogat, tmp_path, which):
    if which == "unknown_ca":
        o, fields = torigins(*pki.other.a), {"ca_file": pki.ca}
    elif which == "self_signed":
        o, fields = torigins(pki.self_crt, pki.self_key), {"ca_file": pki.ca}
    else:  # no ca_file: the system store, which knows no test CA
        o, fields = torigins(*pki.a), {}
    o.route("/u", body=b"must not be served")
    sg = start(surogat, tmp_path, backend(o.port, sni="a.test", **fields))
    for _ in range(3):
        r = sg.get("/u")
        assert r.status == 503 and b"must not be served" not in r.body, r
    assert o.hits("/u") == 0
    st = sg.stats()
    assert st["backend_tls_fail"] == 3 and st["backend_tls_handshake"] == 0, st
    log = sg.log_path.read_text(errors="replace")
    assert "backend default: TLS handshake failed: certificate:" in log, log
    # Rate-limited: three failures within a second make one line.
    assert log.count("TLS handshake failed") == 1, log


def test_verify_false_accepts_any_certificate(pki, torigins, surogat, tmp_path):
    o = torigins(*pki.other.a)
    o.route("/v", body=b"unchecked")
    sg = start(surogat, tmp_path, backend(o.port, sni="nothing.test", verify=False))
    r = sg.get("/v")
    assert r.status == 200 and r.body == b"unchecked", r
    assert sg.stat("backend_tls_fail") == 0


def test_plain_http_origin_behind_tls_backend_is_a_503(origin, surogat, tmp_path):
    origin.route("/p", body=b"plain")
    sg = start(surogat, tmp_path, backend(origin.port, verify=False))
    assert sg.get("/p").status == 503
    assert sg.stat("backend_tls_fail") == 1


def test_client_certificate(pki, torigins, surogat, tmp_path):
    o = torigins(*pki.a, client_ca=pki.ca)
    o.route("/c", body=b"client ok")
    sg = start(surogat, tmp_path, backend(o.port, ca_file=pki.ca, sni="a.test"))
    # The origin demands a certificate.  In TLS 1.3 it refuses after surogat's side of
    # the handshake is done, so the refusal comes as the answer: a 502, not a 503.
    assert sg.get("/c").status in (502, 503)
    assert o.hits("/c") == 0
    sg2 = start(surogat, tmp_path, backend(o.port, ca_file=pki.ca, sni="a.test",
                                           cert=pki.client[0], key=pki.client[1]))
    r = sg2.get("/c")
    assert r.status == 200 and r.body == b"client ok", r
    assert o.peers == ["client.test"]


# -- sessions, cache, bodies ------------------------------------------------


def test_session_resumed_on_new_connections(pki, torigins, surogat, tmp_path):
    o = torigins(*pki.a)
    o.route("/s", body=b"s", close_after=True)  # each request on a new connection
    sg = start(surogat, tmp_path, backend(o.port, ca_file=pki.ca, sni="a.test"))
    for _ in range(3):
        r = sg.get("/s", headers={"Cache-Control": "no-cache"})
        assert r.status == 200, r
    assert o.conns == 3 and o.handshakes == 3
    st = sg.stats()
    assert st["backend_tls_handshake"] == 3 and st["backend_tls_resumed"] == 2, st
    assert o.resumed == 2


def test_cached_objects_served_as_hits(pki, torigins, surogat, tmp_path):
    o = torigins(*pki.a)
    o.route("/c", body=b"cache me", headers={"Cache-Control": "max-age=60"})
    sg = start(surogat, tmp_path, backend(o.port, ca_file=pki.ca, sni="a.test"))
    assert sg.get("/c").body == b"cache me"
    r = sg.get("/c")
    assert r.status == 200 and r.body == b"cache me" and is_hit(r), r.headers
    assert o.hits("/c") == 1


@pytest.mark.parametrize("chunked", [False, True])
def test_large_body_intact(pki, torigins, surogat, tmp_path, chunked):
    body = os.urandom(6 << 20)
    o = torigins(*pki.a)
    o.route("/big", body=body, chunked=chunked, chunks=[body[i:i + 70000]
                                                        for i in range(0, len(body), 70000)],
            headers={"Cache-Control": "max-age=60"})
    sg = start(surogat, tmp_path, backend(o.port, ca_file=pki.ca, sni="a.test"))
    for _ in range(2):  # the miss streamed, then the hit
        r = sg.get("/big", timeout=30)
        assert r.status == 200 and len(r.body) == len(body), (r.status, len(r.body))
        assert hashlib.sha256(r.body).hexdigest() == hashlib.sha256(body).hexdigest()
    assert o.hits("/big") == 1


def test_post_body_forwarded(pki, torigins, surogat, tmp_path):
    o = torigins(*pki.a)
    o.route("/post", echo_sha=True)
    sg = start(surogat, tmp_path, backend(o.port, ca_file=pki.ca, sni="a.test"))
    body = os.urandom(3 << 20)
    r = sg.request("POST", "/post", body=body, timeout=30)
    assert r.status == 200 and r.body == hashlib.sha256(body).hexdigest().encode(), r
    req = o.last("/post")
    assert req.method == "POST" and len(req.body) == len(body)


def test_pipe_over_tls(pki, surogat, tmp_path):
    """A pipe copies bytes both ways through the backend's TLS session."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(pki.a[0]), str(pki.a[1]))
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    got = {}

    def serve():
        c, _ = srv.accept()
        c.settimeout(10)
        try:
            c = ctx.wrap_socket(c, server_side=True)
            upgrade_echo(c, got)
        except (OSError, ssl.SSLError) as e:
            got["error"] = e
        finally:
            c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    sg = start(surogat, tmp_path, backend(port, ca_file=pki.ca, sni="a.test"),
               extra='function recv(req)\n  if req.http.upgrade then return "pipe" end\nend\n')
    upgrade_echo_client(sg.port)
    t.join(10)
    srv.close()
    assert "error" not in got, got
    assert "Upgrade: echo" in got["head"], got


# -- probes -----------------------------------------------------------------


def test_probe_over_tls(pki, torigins, surogat, tmp_path):
    good = torigins(*pki.a)
    good.route("/health", body=b"ok")
    bad = torigins(*pki.other.a)
    bad.route("/health", body=b"ok")
    probe = '{ url = "/health", interval = 0.2, timeout = 1, window = 3, threshold = 2 }'
    sg = start(surogat, tmp_path, """
        backend "good" { host = "127.0.0.1", port = %d, tls = true, ca_file = "%s",
                         sni = "a.test", probe = %s }
        backend "bad" { host = "127.0.0.1", port = %d, tls = true, ca_file = "%s",
                        sni = "a.test", probe = %s }
        """ % (good.port, pki.ca, probe, bad.port, pki.ca, probe))

    def rows():
        p = sg.ctl("backend.list")
        assert p.returncode == 0, p.stdout + p.stderr
        return {f[0]: f for f in (l.split() for l in p.stdout.splitlines()[1:] if l.strip())}

    wait_until(lambda: good.hits("/health") >= 3 and bad.handshakes == 0
               and len(bad.failed) >= 3, 10, "probes on both")
    r = rows()
    assert r["good"][2] == "healthy" and r["bad"][2] == "sick", r
    assert bad.hits("/health") == 0  # nothing was sent over the unverified session
    assert all(q.header("Host") == "127.0.0.1:%d" % good.port for q in good.reqs("/health"))


# -- real nginx -------------------------------------------------------------


NGINX_CONF = """\
daemon off;
master_process off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log {root}/access.log;
    client_body_temp_path {root}/tmp;
    proxy_temp_path {root}/tmp;
    fastcgi_temp_path {root}/tmp;
    uwsgi_temp_path {root}/tmp;
    scgi_temp_path {root}/tmp;
    keepalive_requests 1000;
    server {{
        listen 127.0.0.1:{port} ssl;
        server_name a.test;
        ssl_certificate {crt};
        ssl_certificate_key {key};
        root {root}/www;
        location / {{ expires 60s; }}
        location /sni {{ return 200 "sni=$ssl_server_name reused=$ssl_session_reused\\n"; }}
        location /once {{
            keepalive_timeout 0;
            return 200 "reused=$ssl_session_reused\\n";
        }}
    }}
}}
"""


@pytest.fixture
def nginx(pki, tmp_path):
    if not os.access(NGINX, os.X_OK):
        pytest.fail("nginx is a test dependency (scripts/deps.sh): %s missing" % NGINX)
    root = tmp_path / "nginx"
    (root / "www").mkdir(parents=True)
    (root / "tmp").mkdir()
    port = free_port()
    (root / "nginx.conf").write_text(NGINX_CONF.format(root=root, port=port, crt=pki.a[0],
                                                       key=pki.a[1]))
    proc = subprocess.Popen([NGINX, "-c", str(root / "nginx.conf"), "-p", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: proc.poll() is not None or listening(port), 10, "nginx to listen")
        assert proc.poll() is None, (root / "error.log").read_text(errors="replace")
        yield root, port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def test_nginx_backend(pki, nginx, surogat, tmp_path):
    root, port = nginx
    body = os.urandom(2 << 20)
    (root / "www" / "big.bin").write_bytes(body)
    sg = start(surogat, tmp_path, backend(port, ca_file=pki.ca, sni="a.test"))
    r = sg.get("/sni")
    assert r.status == 200 and r.body.startswith(b"sni=a.test reused=."), r
    # The connection goes back to the pool just after the client has its answer.
    sg.wait_stat("backend_recycle", 1)
    for i in range(2):  # a miss, then a hit
        r = sg.get("/big.bin", timeout=30)
        assert r.status == 200 and hashlib.sha256(r.body).digest() == hashlib.sha256(body).digest()
        assert is_hit(r) == (i == 1), r.headers
    sg.wait_stat("backend_recycle", 2)
    st = sg.stats()
    # nginx keeps the connection alive: one handshake for both requests.
    assert st["backend_tls_handshake"] == 1 and st["backend_reuse"] == 1, st
    # Where nginx closes after each answer (the first goes on the open connection), each
    # next connection resumes the session.
    bodies = [sg.get("/once", headers={"Cache-Control": "no-cache"}).body for _ in range(3)]
    assert bodies == [b"reused=.\n", b"reused=r\n", b"reused=r\n"], bodies
    st = sg.stats()
    assert st["backend_tls_handshake"] == 3 and st["backend_tls_resumed"] == 2, st


# -- declaration errors -----------------------------------------------------


@pytest.mark.parametrize("decl,msg", [
    ('backend "a" { host = "127.0.0.1", ca_file = "/x" }', "need tls = true"),
    ('backend "a" { host = "127.0.0.1", tls = true, ca_file = "/nonexistent/ca.pem" }',
     "ca_file '/nonexistent/ca.pem'"),
    ('backend "a" { host = "127.0.0.1", tls = "yes" }', "tls must be true or false"),
    ('backend "a" { host = "127.0.0.1", tls = true, verify = 1 }', "verify must be true or false"),
    ('backend "a" { host = "127.0.0.1", tls = true, cert = "/etc/hostname" }',
     "cert and key go together"),
    ('backend "a" { host = "127.0.0.1", tls = true, ca_file = "ca.pem" }',
     "must be absolute paths"),
    ('backend "a" { host = "127.0.0.1", tls = true, sni = "%s" }' % ("x" * 300),
     "is not a host name"),
    ('backend "a" { host = "127.0.0.1", tls = true, verify_host = "a b" }',
     "verify_host 'a b' is not a host name or address"),
    ('backend "a" { host = "127.0.0.1", tls = true, tsl_ca = "/x" }', "tsl_ca"),
])
def test_declaration_errors(tmp_path, decl, msg):
    refused_at_load(tmp_path, decl, msg)


def test_default_port_is_443(pki, tmp_path):
    """backend.list is not needed: -C checks it; the port shows in the error of an
    unresolvable name's lookup, which names the port it used."""
    p = tmp_path / "p.lua"
    p.write_text('backend "a" { host = "no.such.host.invalid", tls = true }\n')
    r = run_surogatd(["-C", "-f", str(p)])
    assert r.returncode == 2 and "port 443" in r.stdout + r.stderr, r
