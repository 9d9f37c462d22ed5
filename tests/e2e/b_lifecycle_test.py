"""Signals and files: SIGTERM draining, SIGUSR1 log reopening, the pid file,
the access log format."""

import os
import re
import signal
import socket
import threading
import time
from datetime import datetime

from conftest import wait_until


def _refused(port):
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=0.25)
    except (ConnectionRefusedError, ConnectionResetError):
        # a reset: the listener closed between the SYN and the accept
        return True
    except TimeoutError:
        # A SYN that reaches the listener while close() holds it is dropped
        # by the kernel, unanswered (Linux discards it once the socket is
        # closed); the next attempt is refused.
        return False
    s.close()
    return False


def test_sigterm_drains_inflight_request(origin, surogat):
    body = os.urandom(300000)
    origin.route("/slow", body=body, delay=1.5)
    sg = surogat(params={"shutdown_timeout": "10s"})
    res = {}

    def client():
        try:
            res["r"] = sg.get("/slow", timeout=20)
            res["t"] = time.monotonic()
        except Exception as e:  # noqa: BLE001
            res["e"] = e

    t = threading.Thread(target=client)
    t.start()
    origin.wait_hits("/slow", 1, 10)
    t_sig = time.monotonic()
    sg.signal(signal.SIGTERM)
    # new connections are refused while the old request is still running
    wait_until(lambda: _refused(sg.port), 1.0, "new connections to be refused after SIGTERM")
    assert sg.alive(), "surogatd exited with a request in flight"
    assert t.is_alive(), "in-flight request ended early"
    t.join(20)
    assert "e" not in res, "in-flight request failed: %r" % res.get("e")
    r = res["r"]
    assert r.status == 200 and r.body == body
    assert res["t"] - t_sig >= 1.0
    rc = sg.stop(timeout=15)
    assert rc == 0, "exit status %s after SIGTERM:\n%s" % (rc, sg.log_tail())


def test_sigterm_idle_keepalive_does_not_wait(origin, surogat):
    sg = surogat(params={"shutdown_timeout": "10s", "timeout_idle": "30s"})
    c = sg.conn()
    c.request("GET", "/")
    assert c.read_response().status == 200
    t0 = time.monotonic()
    sg.signal(signal.SIGTERM)
    try:
        sg.proc.wait(8)
    except Exception:  # noqa: BLE001
        pass
    dt = time.monotonic() - t0
    rc = sg.stop()
    c.close()
    assert rc == 0
    assert dt < 5, "an idle keep-alive connection held shutdown for %.1fs" % dt


def test_shutdown_timeout_bounds_drain(origin, surogat):
    origin.route("/forever", body=b"x", delay=30)
    sg = surogat(params={"shutdown_timeout": "1s"})
    c = sg.conn(timeout=20)
    c.request("GET", "/forever")
    origin.wait_hits("/forever", 1, 10)
    t0 = time.monotonic()
    sg.signal(signal.SIGTERM)
    try:
        sg.proc.wait(10)
    except Exception:  # noqa: BLE001
        pass
    dt = time.monotonic() - t0
    rc = sg.stop()
    c.close()
    assert dt < 6, "exit took %.1fs with shutdown_timeout=1s" % dt
    assert rc == 0


def test_pidfile(origin, surogat):
    sg = surogat(pidfile=True)
    wait_until(lambda: sg.pidfile.exists() and sg.pidfile.read_text().strip(), 5, "pid file")
    assert sg.pidfile.read_text().strip() == str(sg.pid)


LOG_RE = re.compile(
    r'^(?P<h>\S+) - (?P<u>\S+) \[(?P<t>[^\]]+)\] "(?P<r>[^"]*)" (?P<s>\d{3}) (?P<b>\d+|-) '
    r'"(?P<ref>[^"]*)" "(?P<ua>[^"]*)" (?P<D>\d+) (?P<F>\d+) (?P<B>\S+) (?P<C>\S+)$')


def _parse(lines):
    out = []
    for ln in lines:
        m = LOG_RE.match(ln)
        assert m, "access log line not in the documented format: %r" % ln
        out.append(m.groupdict())
    return out


def test_access_log_format(origin, surogat):
    origin.route("/logme", body=b"hello", delay=0.2)
    origin.route("/empty", status=404, body=b"")
    sg = surogat(params={"access_log": "access.log"})
    r = sg.get("/logme?x=1", headers={"Referer": "http://ref.example/",
                                      "User-Agent": "e2e-agent/1.0"})
    assert r.status == 200
    with sg.conn() as c:
        c.send(b"GET /empty HTTP/1.0\r\n\r\n")
        assert c.read_response().status == 404
    with sg.conn() as c:
        c.send(b"GET /nohost HTTP/1.1\r\n\r\n")
        assert c.read_response().status == 400
    lines = sg.wait_access_lines(3)
    recs = {m["r"].split(" ")[1] if m["r"].count(" ") == 2 else m["r"]: m for m in _parse(lines)}
    a = recs.get("/logme?x=1")
    assert a, lines
    assert a["h"] == "127.0.0.1" and a["u"] == "-"
    assert a["r"] == "GET /logme?x=1 HTTP/1.1"
    assert a["s"] == "200" and a["b"] == "5"
    assert a["ref"] == "http://ref.example/" and a["ua"] == "e2e-agent/1.0"
    t = datetime.strptime(a["t"], "%d/%b/%Y:%H:%M:%S %z").timestamp()
    assert abs(t - time.time()) < 60
    assert int(a["D"]) >= int(a["F"]) >= 150000, "%D/%F below the origin's 0.2s delay"
    assert int(a["D"]) < 10_000_000
    assert a["B"] != "-" and a["C"] == "MISS"  # a GET looked up in the cache
    b = recs.get("/empty")
    assert b, lines
    assert b["r"] == "GET /empty HTTP/1.0" and b["s"] == "404" and b["b"] in ("-", "0")
    assert b["ref"] == "-" and b["ua"] == "-"
    c = recs.get("/nohost")
    assert c, lines
    assert c["s"] == "400" and c["C"] == "SYNTH" and c["B"] == "-"


def test_access_log_path_relative_to_workdir(origin, surogat):
    sg = surogat(params={"access_log": "sub.log"})
    assert sg.get("/").status == 200
    sg.wait_access_lines(1, name="sub.log")
    assert not (sg.workdir.parent / "sub.log").exists()


def test_sigusr1_reopens_access_log(origin, surogat):
    sg = surogat(params={"access_log": "access.log"})
    assert sg.get("/before").status == 200
    sg.wait_access_lines(1)
    os.rename(sg.workdir / "access.log", sg.workdir / "access.log.1")
    sg.signal(signal.SIGUSR1)
    time.sleep(0.3)
    assert sg.alive()
    assert sg.get("/after").status == 200
    lines = sg.wait_access_lines(1)
    assert len(lines) == 1 and "/after" in lines[0], lines
    old = (sg.workdir / "access.log.1").read_text().splitlines()
    assert len(old) == 1 and "/before" in old[0], old


def test_sigusr1_reopens_error_log(origin, surogat):
    sg = surogat(params={"error_log": "error.log", "access_log": "access.log"})
    wait_until(lambda: (sg.workdir / "error.log").exists(), 5, "error.log")
    os.rename(sg.workdir / "error.log", sg.workdir / "error.log.1")
    sg.signal(signal.SIGUSR1)
    wait_until(lambda: (sg.workdir / "error.log").exists(), 5, "error.log reopened")
    assert sg.get("/").status == 200
