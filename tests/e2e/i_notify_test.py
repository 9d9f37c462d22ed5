"""sd_notify: what surogatd tells the service manager (the unit's Type=notify).

A fake manager: a Unix datagram socket the test binds and names in
NOTIFY_SOCKET, with SO_PASSCRED so that each message comes with the pid
and uid of its sender.  READY=1 must come from the main process, once the
port serves and root is dropped; RELOADING=1 then READY=1 around a SIGHUP;
STOPPING=1 on SIGTERM; STATUS= with each.  Without a manager nothing
changes (every other test runs so)."""

import os
import pwd
import signal
import subprocess
import time

import pytest

from conftest import SUROGATD, free_port, listening, wait_until
import httpc
from sdnotify import Manager, thread_uids


def built_with_libsystemd():
    p = subprocess.run(["ldd", SUROGATD], capture_output=True, text=True, timeout=20)
    return "libsystemd.so" in p.stdout


@pytest.fixture(autouse=True)
def _need_sd_notify():
    if not os.access(SUROGATD, os.X_OK):
        pytest.skip("%s not built" % SUROGATD)
    if not built_with_libsystemd():
        pytest.skip("surogatd built without libsystemd (-Dsystemd=disabled): no sd_notify")


def test_ready_once_serving_reloading_and_stopping(origin, surogat, monkeypatch):
    jail = []
    want_uid = os.geteuid()
    if os.geteuid() == 0:
        try:
            want_uid = pwd.getpwnam("nobody").pw_uid
            jail = ["-j", "nobody"]
        except KeyError:
            pass
    port = free_port()
    origin.route("/", body=b"served\n")

    def look(msg):
        if msg["fields"].get("READY") != "1":
            return None
        # At this instant the port must serve a request at once, and no
        # thread may still be root.
        seen = {"listening": listening(port), "uids": thread_uids(msg["pid"])}
        try:
            r = httpc.fetch(port, "GET", "/", timeout=2.0)
            seen["status"] = r.status
        except (OSError, httpc.Incomplete) as e:
            seen["status"] = repr(e)
        return seen

    mgr = Manager(look)
    try:
        monkeypatch.setenv("NOTIFY_SOCKET", mgr.path)
        t0 = time.monotonic()
        sg = surogat(port=port, args=jail)
        i, ready = mgr.wait_for("READY", "1")
        assert time.monotonic() - t0 < 20
        # Nothing said READY before; the sender is the main process, no longer root.
        assert all("READY" not in m["fields"] for m in mgr.all()[:i]), mgr.all()
        assert ready["pid"] == sg.pid and ready["uid"] == want_uid, ready
        seen = ready["seen"]
        assert seen["listening"] and seen["status"] == 200, seen
        assert len(seen["uids"]) >= 4 and set(seen["uids"].values()) == {want_uid}, seen
        assert ready["fields"]["STATUS"] == "serving, backend %s" % origin.addr, ready

        # SIGHUP: RELOADING=1 (dated), then READY=1 again once done.
        n = len(mgr.all())
        sg.signal(signal.SIGHUP)
        j, reloading = mgr.wait_for("RELOADING", "1", after=n)
        assert int(reloading["fields"]["MONOTONIC_USEC"]) > 0
        assert reloading["fields"]["STATUS"].startswith("reloading"), reloading
        k, ready2 = mgr.wait_for("READY", "1", after=j + 1)
        # its STATUS is the reload's outcome line
        assert ready2["fields"]["STATUS"].startswith("serving, reload: ok ("), ready2
        assert ready2["seen"]["status"] == 200
        assert ready2["pid"] == sg.pid
        assert sg.get("/").status == 200

        # SIGTERM: STOPPING=1 before the daemon exits 0.
        n = len(mgr.all())
        assert sg.stop() == 0, sg.log_tail()
        _, stopping = mgr.wait_for("STOPPING", "1", after=n, timeout=5)
        assert stopping["pid"] == sg.pid and stopping["fields"]["STATUS"].startswith("stopping")
        assert all("READY" not in m["fields"] for m in mgr.all()[n:]), mgr.all()[n:]
        assert "cannot notify" not in sg.log_tail(100)
    finally:
        mgr.close()


def test_unreachable_manager_is_logged_once_and_harmless(origin, surogat, monkeypatch,
                                                         tmp_path):
    """A NOTIFY_SOCKET nobody listens on: one warning, and the daemon serves,
    reloads and stops as ever."""
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens"))
    sg = surogat()
    assert sg.get("/").status == 200
    sg.signal(signal.SIGHUP)
    wait_until(lambda: "reload: ok" in sg.log_tail(100), 10, "the reload")
    assert sg.get("/").status == 200
    assert sg.stop() == 0
    log = sg.log_tail(200)
    assert log.count("cannot notify the service manager (NOTIFY_SOCKET)") == 1, log
