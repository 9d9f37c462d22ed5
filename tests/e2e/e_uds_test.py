"""Unix domain sockets: listeners and backends.

Listeners: -a /PATH,mode=,user=,group= (and `listen =`), served over the
socket, client.ip 0.0.0.0 unless a PROXY header says otherwise (HAProxy
sending send-proxy-v2 to the socket), the mode applied, a stale socket
file replaced, a symbolic link or a live socket refused, the file
removed at exit.

Backends: path = "/run/..." with a scriptable origin on a Unix socket
(keep-alive reuse, probes healthy and sick), a real nginx listening on
`unix:` (and with proxy_protocol, seeing the client surogat passes on),
and nginx in front of PHP-FPM, both on Unix sockets, as PHP-FPM speaks
FastCGI, not HTTP."""

import os
import shutil
import socket
import stat
import subprocess
import time

from conftest import free_port, run_surogatd, wait_until
from edge import ECHO_POLICY, TCP_DEFAULTS, Proc, get, haproxy, nginx
from origins import Origin

PHP_FPM = shutil.which("php-fpm8.2") or "/usr/sbin/php-fpm8.2"


def sock_dir(tmp_path):
    """A short directory for sockets: sun_path holds 107 bytes."""
    import tempfile
    d = tempfile.mkdtemp(prefix="sg-uds-")
    return d


def test_unix_listener_mode_client_and_cleanup(origin, surogat, tmp_path):
    d = sock_dir(tmp_path)
    path = os.path.join(d, "sg.sock")
    pol = tmp_path / "echo.lua"
    pol.write_text(ECHO_POLICY)
    sg = surogat(args=["-f", str(pol), "-a", path + ",mode=0660,user=root,group=root"]
                 if os.geteuid() == 0 else ["-f", str(pol), "-a", path + ",mode=0660"])
    st = os.lstat(path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o660
    r, _ = get(path, "/u")
    assert r.status == 200, r
    assert r.h("X-Client") == "0.0.0.0 0", r
    assert origin.last("/u").header("X-Forwarded-For") == "0.0.0.0"
    # a second daemon does not take a live socket from the first
    res = run_surogatd(["-a", path, "-b", origin.addr, "-n", str(tmp_path / "second")])
    assert res.returncode == 2 and "another process listens on it" in res.stderr, res.stderr
    assert sg.stop() == 0
    assert not os.path.exists(path)  # removed at exit
    shutil.rmtree(d)


def test_unix_listener_replaces_only_a_stale_socket(origin, surogat, tmp_path):
    d = sock_dir(tmp_path)
    path = os.path.join(d, "sg.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.close()  # what a crashed daemon leaves
    sg = surogat(args=["-a", path])
    r, _ = get(path, "/stale")
    assert r.status == 200
    sg.stop()
    # a symbolic link is never followed, a file never replaced
    target = os.path.join(d, "precious")
    with open(target, "w") as f:
        f.write("keep")
    os.symlink(target, path)
    res = run_surogatd(["-a", path, "-b", origin.addr, "-n", str(tmp_path / "w1")])
    assert res.returncode == 2 and "a symbolic link" in res.stderr, res.stderr
    os.unlink(path)
    res = run_surogatd(["-a", target, "-b", origin.addr, "-n", str(tmp_path / "w2")])
    assert res.returncode == 2 and "not a socket" in res.stderr, res.stderr
    assert open(target).read() == "keep"
    shutil.rmtree(d)


def test_unix_listener_behind_haproxy_with_proxy_v2(origin, surogat, tmp_path):
    d = sock_dir(tmp_path)
    path = os.path.join(d, "pp.sock")
    pol = tmp_path / "echo.lua"
    pol.write_text(ECHO_POLICY)
    surogat(conf="listen = %s,PROXY,mode=0600\n" % path, args=["-f", str(pol)])
    front = free_port()
    hp = haproxy(tmp_path, """
%slisten f
    bind 127.0.0.1:%d
    server s unix@%s send-proxy-v2
""" % (TCP_DEFAULTS, front, path), ports=(front,))
    try:
        r, myport = get(front, "/hp")
        assert r.status == 200, r
        assert r.h("X-Client") == "127.0.0.5 %d" % myport, r
        assert origin.last("/hp").header("X-Forwarded-For") == "127.0.0.5"
    finally:
        hp.stop()
    shutil.rmtree(d, ignore_errors=True)


def test_unix_backend_pool_and_probe(surogat, tmp_path):
    d = sock_dir(tmp_path)
    path = os.path.join(d, "o.sock")
    o = Origin(path=path)
    try:
        o.route("/health", body=b"up")
        pol = tmp_path / "uds.lua"
        pol.write_text('backend "app" { path = "%s", probe = { url = "/health", interval = 0.2,'
                       ' timeout = 1, window = 3, threshold = 2 } }\n'
                       'route { to = "app" }\nfunction recv(req) return "pass" end\n' % path)
        sg = surogat(args=["-f", str(pol)])
        with sg.conn() as c:
            for _ in range(3):
                c.request("GET", "/x")
                r = c.read_response("GET")
                assert r.status == 200
        xs = o.reqs("/x")
        assert len(xs) == 3 and len({x.conn_id for x in xs}) == 1  # pooled over the socket
        assert xs[0].header("Host") == "surogat.test"  # the client's, as over TCP
        wait_until(lambda: o.hits("/health") >= 2, 10, "probes over the socket")
        rows = sg.ctl("backend.list").stdout
        assert path in rows and "healthy" in rows, rows
        o.route("/health", status=500)
        wait_until(lambda: "sick" in sg.ctl("backend.list").stdout, 10, "the probe to fail")
        assert sg.get("/y").status == 503
    finally:
        o.stop()
    shutil.rmtree(d, ignore_errors=True)


def test_unix_backend_conf_errors(surogat, tmp_path):
    for body, says in (('path = "/run/x.sock", host = "127.0.0.1"', "either path"),
                       ('path = "/run/x.sock", tls = true', "Unix socket"),
                       ('path = "relative.sock"', "absolute path"),
                       ('host = "127.0.0.1", proxy_protocol = 3', "proxy_protocol must be"),
                       ('host = "127.0.0.1", proxy_protocol = 1.5', "proxy_protocol must be")):
        pol = tmp_path / "bad.lua"
        pol.write_text('\nbackend "b" { %s }\n' % body)
        res = run_surogatd(["-C", "-f", str(pol)])
        assert res.returncode != 0, (body, res.stderr)
        assert "bad.lua:2" in res.stderr and says in res.stderr, (body, res.stderr)


def test_nginx_on_a_unix_socket_as_backend(surogat, tmp_path):
    d = sock_dir(tmp_path)
    plain, pp = os.path.join(d, "ng.sock"), os.path.join(d, "ngpp.sock")
    ng = nginx(tmp_path, """
    server {
        listen unix:%s;
        location / { add_header X-Seen "$remote_addr" always; return 200 "nginx $request_uri\\n"; }
    }
    server {
        listen unix:%s proxy_protocol;
        location / { add_header X-Seen "$proxy_protocol_addr:$proxy_protocol_port" always;
                     return 200 "nginx-pp\\n"; }
    }
""" % (plain, pp), paths=(plain, pp))
    try:
        pol = tmp_path / "ng.lua"
        pol.write_text('backend "ng" { path = "%s" }\nbackend "ngpp" { path = "%s", '
                       'proxy_protocol = 2 }\nfunction recv(req)\n'
                       '  if req.url:sub(1, 3) == "/pp" then req.backend = "ngpp" '
                       'else req.backend = "ng" end\n  return "pass"\nend\n' % (plain, pp))
        sg = surogat(args=["-f", str(pol)])
        r, _ = get(sg.port, "/hello")
        assert r.status == 200 and r.body == b"nginx /hello\n", r
        assert r.h("X-Seen") == "unix:", r
        r, myport = get(sg.port, "/pp")
        assert r.status == 200 and r.body == b"nginx-pp\n", r
        assert r.h("X-Seen") == "127.0.0.5:%d" % myport, r
    finally:
        ng.stop()
    shutil.rmtree(d, ignore_errors=True)


def test_in_front_of_php_fpm(surogat, tmp_path):
    """PHP-FPM speaks FastCGI: nginx on a Unix socket passes to it on another."""
    from edge import need
    need(PHP_FPM)
    d = sock_dir(tmp_path)
    fpm_sock, ng_sock = os.path.join(d, "fpm.sock"), os.path.join(d, "ng.sock")
    www = tmp_path / "www"
    www.mkdir()
    (www / "index.php").write_text('<?php header("Cache-Control: max-age=60"); '
                                   'echo "php ", PHP_VERSION, " ", $_SERVER["HTTP_X_FORWARDED_FOR"];')
    os.chmod(tmp_path, 0o755)
    os.chmod(www, 0o755)
    os.chmod(www / "index.php", 0o644)
    fpm_conf = tmp_path / "fpm.conf"
    fpm_conf.write_text("""[global]
error_log = %s/fpm.log
daemonize = no
[www]
listen = %s
listen.mode = 0666
pm = static
pm.max_children = 2
clear_env = no
""" % (tmp_path, fpm_sock) + ("user = root\ngroup = root\n" if os.geteuid() == 0 else ""))
    argv = [PHP_FPM, "-n", "-y", str(fpm_conf), "-F"] + (["-R"] if os.geteuid() == 0 else [])
    fpm = Proc(argv, tmp_path / "fpm.stderr", paths=(fpm_sock,))
    ng = None
    try:
        ng = nginx(tmp_path, """
    server {
        listen unix:%s;
        root %s;
        location ~ \\.php$ {
            fastcgi_pass unix:%s;
            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
            fastcgi_param HTTP_X_FORWARDED_FOR $http_x_forwarded_for;
            include /etc/nginx/fastcgi_params;
        }
    }
""" % (ng_sock, www, fpm_sock), paths=(ng_sock,))
        pol = tmp_path / "php.lua"
        pol.write_text('backend "php" { path = "%s" }\nroute { to = "php" }\n' % ng_sock)
        sg = surogat(args=["-f", str(pol)])
        r, _ = get(sg.port, "/index.php")
        assert r.status == 200, (r, fpm.tail())
        # nginx sends it chunked: the PHP output is the one chunk
        assert b"\r\nphp 8." in b"\r\n" + r.body and b" 127.0.0.5\r\n" in r.body, r
        r2, _ = get(sg.port, "/index.php")
        assert b" 127.0.0.5" in r2.body and "hit" in (r2.h("Cache-Status") or ""), r2
    finally:
        if ng is not None:
            ng.stop()
        fpm.stop()
    shutil.rmtree(d, ignore_errors=True)
