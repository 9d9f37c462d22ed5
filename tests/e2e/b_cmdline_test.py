"""The command line and the config file: errors exit 2 with one line that
names the problem; -V, -h, -c, -P and IPv6 listening work."""

import re
import socket

import pytest

import httpc
from conftest import REPO, free_port, have_ipv6_loopback, listening, run_surogatd, wait_until
from origins import Origin


def _base(tmp_path, port=None, admin=None):
    return ["-F", "-a", "127.0.0.1:%d" % (port or free_port()), "-b", "127.0.0.1:%d" % free_port(),
            "-n", str(tmp_path / "wd"), "-T", "127.0.0.1:%d" % (admin or free_port())]


def _one_line_error(p, *words):
    assert p.returncode == 2, "exit %s, stderr %r" % (p.returncode, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, "want one error line, got %r" % p.stderr
    for w in words:
        assert w in lines[0], "%r does not name %r" % (lines[0], w)
    return lines[0]


def test_version():
    p = run_surogatd(["-V"])
    assert p.returncode == 0, p.stderr
    want = re.search(r"version: '([^']+)'", (REPO / "meson.build").read_text()).group(1)
    assert want in p.stdout + p.stderr


def test_help():
    p = run_surogatd(["-h"])
    assert p.returncode == 0, p.stderr
    text = p.stdout + p.stderr
    for flag in ("-a", "-b", "-n", "-p", "-T"):
        assert flag in text, "-h does not mention %s" % flag


def test_unknown_flag():
    _one_line_error(run_surogatd(["-Z"]))


def test_missing_flag_argument():
    _one_line_error(run_surogatd(["-F", "-a"]))


@pytest.mark.parametrize("param,word", [
    ("nosuch=1", "nosuch"),
    ("timeout_idle=abc", "timeout_idle"),
    ("timeout_idle", "timeout_idle"),
    ("http_req_size=12q", "http_req_size"),
    ("thread_pool_min=0", "thread_pool_min"),
    ("http_max_hdr=5000", "http_max_hdr"),
    ("thread_queue_limit=-1", "thread_queue_limit"),
    ("xff=maybe", "xff"),
])
def test_bad_param(tmp_path, param, word):
    _one_line_error(run_surogatd(_base(tmp_path) + ["-p", param]), word)


@pytest.mark.parametrize("addr", ["127.0.0.1:99999", "127.0.0.1:", "not an address",
                                  "[::1:80", "256.0.0.1:80"])
def test_bad_listen_address(tmp_path, addr):
    args = _base(tmp_path)
    args[args.index("-a") + 1] = addr
    _one_line_error(run_surogatd(args))


def test_listen_port_in_use(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        _one_line_error(run_surogatd(_base(tmp_path, port=port)), str(port))
    finally:
        busy.close()


def test_admin_port_in_use(tmp_path):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    try:
        _one_line_error(run_surogatd(_base(tmp_path, admin=port)), str(port))
    finally:
        busy.close()


@pytest.mark.parametrize("text,line", [
    ("# a comment\ntimeout_idle = 1s\nnosuch = 1\n", 3),
    ("timeout_idle 1s\n", 1),
    ("\n\n# x\ntimeout_idle = abc\n", 4),
    ("http_max_hdr = 10\nhttp_max_hdr = 99999\n", 2),
    ("= 5\n", 1),
])
def test_bad_config_file(tmp_path, text, line):
    cf = tmp_path / "bad.conf"
    cf.write_text(text)
    msg = _one_line_error(run_surogatd(_base(tmp_path) + ["-c", str(cf)]))
    assert "%s:%d:" % (cf, line) in msg or "bad.conf:%d:" % line in msg, msg


def test_missing_config_file(tmp_path):
    cf = tmp_path / "missing.conf"
    _one_line_error(run_surogatd(_base(tmp_path) + ["-c", str(cf)]), "missing.conf")


def test_config_file_applies(origin, surogat):
    sg = surogat(conf='# surogat e2e\n\n  http_max_hdr = 10\naccess_log = "acc.log"\n'
                      'timeout_idle=2s\n')
    with sg.conn() as c:
        c.send(b"GET / HTTP/1.1\r\nHost: a\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(10))
               + b"\r\n")
        assert c.read_response().status == 431
    assert sg.get("/").status == 200
    sg.wait_access_lines(1, name="acc.log")


def test_workdir_created(origin, surogat, tmp_path):
    sg = surogat(params={"access_log": "access.log"})
    assert sg.workdir.is_dir()
    assert sg.get("/").status == 200
    sg.wait_access_lines(1)


def test_ipv6_listen(origin, surogat):
    if not have_ipv6_loopback():
        pytest.skip("no IPv6 loopback on this machine")
    sg = surogat(listen6=True)
    with sg.conn(v6=True) as c:
        c.request("GET", "/six")
        r = c.read_response()
    assert r.status == 200 and r.body == b"ok"
    assert origin.last("/six").header("X-Forwarded-For") == "::1"
    assert sg.get("/four").status == 200
    assert origin.last("/four").header("X-Forwarded-For") == "127.0.0.1"


def test_ipv6_backend(surogat):
    if not have_ipv6_loopback():
        pytest.skip("no IPv6 loopback on this machine")
    o6 = Origin(host="::1", family=socket.AF_INET6)
    try:
        sg = surogat(backend=o6.addr)
        r = sg.get("/v6")
        assert r.status == 200 and r.body == b"ok"
        assert o6.hits("/v6") == 1
    finally:
        o6.stop()


def test_two_listen_addresses_ipv4(origin, surogat):
    p2 = free_port()
    sg = surogat(args=["-a", "127.0.0.1:%d" % p2])
    wait_until(lambda: listening(p2), 10, "the second listen address")
    assert sg.get("/a").status == 200
    r = httpc.fetch(p2, path="/b")
    assert r.status == 200
