"""Helpers for the edge tests (e_proxy_test.py, e_uds_test.py): raw HTTP
from a chosen loopback source address or over a Unix socket, and real
HAProxy, hitch and nginx processes in a test directory, stopped by pid."""

import os
import shutil
import socket
import subprocess
import time

from conftest import listening, wait_until

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"
HITCH = shutil.which("hitch") or "/usr/sbin/hitch"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"

# HAProxy in TCP mode, for a `listen` section after it.
TCP_DEFAULTS = """defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
"""

# What the policy knows of the client, echoed into the response.
ECHO_POLICY = """
function recv(req)
  req.ctx.client = client.ip .. " " .. tostring(client.port)
  if req.method ~= "PURGE" then return "pass" end
end
function deliver(req, resp)
  resp.http["X-Client"] = req.ctx.client
  resp.http["X-Server"] = tostring(server.ip) .. " " .. tostring(server.port)
  resp.http["X-Tls"] = tostring(client.tls) .. " " .. tostring(client.tls_version) .. " " ..
                       tostring(client.tls_cipher) .. " " .. tostring(client.sni)
  resp.http["X-Proxy"] = tostring(client.proxy)
end
"""


class Resp:
    def __init__(self, raw):
        self.raw = raw
        head, _, self.body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1]) if lines[0].startswith("HTTP/") else 0
        self.headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            self.headers[k.strip().lower()] = v.strip()

    def h(self, name):
        return self.headers.get(name.lower())

    def __repr__(self):
        return "Resp(%r)" % self.raw[:400]


def connect(addr, src="127.0.0.5", timeout=10.0):
    """addr: a port on 127.0.0.1, or a Unix socket path."""
    if isinstance(addr, (str, os.PathLike)):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(timeout)
        s.connect(str(addr))
        return s
    s = socket.socket()
    s.settimeout(timeout)
    if src:
        s.bind((src, 0))
    s.connect(("127.0.0.1", addr))
    return s


def read_all(s):
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                return out
            out += b
    except ConnectionResetError:
        return out + b"<RST>"
    except socket.timeout:
        return out + b"<TIMEOUT>"


def raw(addr, data, src="127.0.0.5", timeout=10.0):
    """Send data, read until the server closes: the bytes (b"<RST>" appended on a reset)."""
    with connect(addr, src, timeout) as s:
        s.sendall(data)
        return read_all(s)


def get(addr, path="/", headers=(), src="127.0.0.5", method="GET", prefix=b""):
    """One request with Connection: close; (Resp, the client's own port)."""
    hs = "".join("%s: %s\r\n" % kv for kv in headers)
    req = prefix + ("%s %s HTTP/1.1\r\nHost: t\r\n%sConnection: close\r\n\r\n"
                    % (method, path, hs)).encode()
    with connect(addr, src) as s:
        port = s.getsockname()[1] if s.family != socket.AF_UNIX else 0
        s.sendall(req)
        return Resp(read_all(s)), port


def https_get(port, path="/", ca=None, sni="a.test", src="127.0.0.5"):
    import ssl
    ctx = ssl.create_default_context(cafile=str(ca))
    with connect(port, src) as s0:
        myport = s0.getsockname()[1]
        with ctx.wrap_socket(s0, server_hostname=sni) as s:
            s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n"
                       % (path, sni)).encode())
            return Resp(read_all(s)), myport


class Proc:
    """A helper server process, stopped by pid at the end."""

    def __init__(self, argv, log, ports=(), paths=(), timeout=20):
        self.log = log
        self.fh = open(log, "wb")
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.fh,
                                  stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: self.p.poll() is not None or
                       (all(listening(x) for x in ports) and all(os.path.exists(x) for x in paths)),
                       timeout, "%s to listen" % argv[0])
            assert self.p.poll() is None, "%s exited %s:\n%s" % (argv[0], self.p.returncode,
                                                                  self.tail())
        except BaseException:
            self.stop()
            raise

    def tail(self):
        try:
            return open(self.log, errors="replace").read()[-3000:]
        except OSError:
            return ""

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)
        self.fh.close()


def need(path):
    import pytest
    if not os.access(path, os.X_OK):
        pytest.skip("%s not installed (scripts/deps.sh)" % path)


def haproxy(tmp_path, conf, ports=(), paths=()):
    need(HAPROXY)
    cf = tmp_path / "haproxy.cfg"
    cf.write_text(conf)
    chk = subprocess.run([HAPROXY, "-c", "-f", str(cf)], capture_output=True, text=True,
                         timeout=10)
    assert chk.returncode == 0, chk.stdout + chk.stderr
    return Proc([HAPROXY, "-db", "-f", str(cf)], tmp_path / "haproxy.log", ports, paths)


def nginx(tmp_path, server_block, paths=(), ports=()):
    """nginx in the foreground with one server block, everything under tmp_path."""
    need(NGINX)
    d = tmp_path / "nginx"
    d.mkdir(exist_ok=True)
    user = "user root;" if os.geteuid() == 0 else ""
    conf = """%s
daemon off;
master_process off;
worker_processes 1;
pid %s/nginx.pid;
error_log %s/error.log info;
events { worker_connections 64; }
http {
    access_log %s/access.log;
    client_body_temp_path %s/body;
    proxy_temp_path %s/proxy;
    fastcgi_temp_path %s/fastcgi;
    uwsgi_temp_path %s/uwsgi;
    scgi_temp_path %s/scgi;
    %s
}
""" % ((user,) + (d,) * 8 + (server_block,))
    (d / "nginx.conf").write_text(conf)
    return Proc([NGINX, "-p", str(d), "-c", str(d / "nginx.conf")], d / "stderr.log", ports,
                paths)


def wait_gone(proc, timeout=5):
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
