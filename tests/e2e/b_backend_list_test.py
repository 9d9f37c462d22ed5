"""backend.list and backend.set_health on the -b backend: listed with its
address, health and connections; forced sick it gets no request (503),
given back to auto it serves again."""

import os
import signal
import subprocess

import httpc
from conftest import (ROOT_OK, START_TIMEOUT, STOP_TIMEOUT, SUROGATCTL, SUROGATD, free_port, listening,
                      need_binaries, wait_until)


def _rows(sg):
    p = sg.ctl("backend.list")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split()[:6] == ["Backend", "Address", "Health", "Admin", "Conns", "Probe"]
    return {f[0]: f for f in (l.split() for l in lines[1:] if l.strip())}


def test_default_backend_listed(origin, surogat):
    origin.route("/a", body=b"hello")
    sg = surogat()
    rows = _rows(sg)
    assert list(rows) == ["default"]
    name, addr, health, admin, conns, probe = rows["default"]
    assert addr == origin.addr
    assert (health, admin, conns, probe) == ("healthy", "auto", "0", "-")
    r = sg.get("/a")
    assert r.status == 200 and r.body == b"hello"
    # the keep-alive backend connection stays open in the pool
    assert _rows(sg)["default"][4] == "1"


def test_set_health_sick_gives_503(origin, surogat):
    origin.route("/a", body=b"hello")
    sg = surogat()
    assert sg.get("/a").status == 200
    p = sg.ctl("backend.set_health", "default", "sick")
    assert p.returncode == 0, p.stdout + p.stderr
    assert _rows(sg)["default"][2:4] == ["sick", "sick"]
    hits = origin.hits("/a")
    r = sg.get("/a")
    assert r.status == 503
    r = sg.request("POST", "/a", body=b"x")
    assert r.status == 503
    assert origin.hits("/a") == hits  # nothing reached the backend
    st = sg.stats()
    assert st["backend_health_changed"] == 1 and st["backend_unhealthy"] >= 2

    # forced healthy, then back to auto (no probe: healthy)
    assert sg.ctl("backend.set_health", "default", "healthy").returncode == 0
    assert _rows(sg)["default"][2:4] == ["healthy", "healthy"]
    assert sg.get("/a").status == 200
    assert sg.ctl("backend.set_health", "default", "auto").returncode == 0
    assert _rows(sg)["default"][2:4] == ["healthy", "auto"]
    assert sg.get("/a").body == b"hello"
    assert sg.stat("backend_health_changed") == 2
    assert "backend default: sick (set by the admin)" in sg.log_tail(200)


def test_set_health_bad_arguments(origin, surogat):
    sg = surogat()
    rs = sg.admin("backend.set_health nosuch sick", "backend.set_health default maybe",
                  "backend.set_health default", "backend.list extra")
    assert rs[0][0] == 104 and "No backend named 'nosuch'" in rs[0][1].decode()
    assert rs[1][0] == 104 and "auto, healthy or sick" in rs[1][1].decode()
    assert rs[2][0] == 102
    assert rs[3][0] == 102
    assert _rows(sg)["default"][2:4] == ["healthy", "auto"]
    help_ = sg.ctl("help").stdout
    assert "backend.list" in help_ and "backend.set_health" in help_


def test_dead_backend_listed_healthy_without_probe(surogat):
    # Without a probe nothing knows the backend is down: listed healthy, requests get 503.
    port = free_port()
    sg = surogat(backend="127.0.0.1:%d" % port)
    assert _rows(sg)["default"][1:3] == ["127.0.0.1:%d" % port, "healthy"]
    assert sg.get("/").status == 503
    assert sg.stat("backend_fail") >= 1


def test_detached_daemon_health_and_clean_stop(origin, tmp_path):
    # The probe thread starts after fork(): a detached daemon must run it and join it at exit.
    need_binaries()
    port, admin = free_port(), free_port()
    pidfile, log = tmp_path / "pid", tmp_path / "err.log"
    r = subprocess.run([SUROGATD] + ROOT_OK + ["-a", "127.0.0.1:%d" % port, "-b", origin.addr,
                        "-T", "127.0.0.1:%d" % admin, "-n", str(tmp_path / "wd"),
                        "-P", str(pidfile), "-p", "error_log=%s" % log],
                       capture_output=True, text=True, timeout=STOP_TIMEOUT)
    assert r.returncode == 0, r.stderr
    pid = int(pidfile.read_text())
    try:
        ctl = [SUROGATCTL, "-T", "127.0.0.1:%d" % admin]
        wait_until(lambda: listening(port) and listening(admin), START_TIMEOUT, "the daemon")
        p = subprocess.run(ctl + ["backend.set_health", "default", "sick"],
                           capture_output=True, text=True, timeout=STOP_TIMEOUT)
        assert p.returncode == 0, p.stdout + p.stderr
        with httpc.Conn(port) as c:
            c.request("GET", "/")
            assert c.read_response().status == 503
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not _alive(pid), STOP_TIMEOUT, "the daemon to exit")
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    text = log.read_text()
    assert "backend default: sick (set by the admin)" in text
    assert text.rstrip().endswith("stopped"), text


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
