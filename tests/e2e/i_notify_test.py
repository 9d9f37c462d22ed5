"""sd_notify: what surogatd tells the service manager (the unit's Type=notify).

A fake manager: a Unix datagram socket the test binds and names in
NOTIFY_SOCKET, with SO_PASSCRED so that each message comes with the pid
and uid of its sender.  READY=1 must come from the main process, once the
port serves and root is dropped; RELOADING=1 then READY=1 around a SIGHUP;
STOPPING=1 on SIGTERM; STATUS= with each.  Without a manager nothing
changes (every other test runs so)."""

import os
import pwd
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import SUROGATD, free_port, listening, wait_until
import httpc


def built_with_libsystemd():
    p = subprocess.run(["ldd", SUROGATD], capture_output=True, text=True, timeout=20)
    return "libsystemd.so" in p.stdout


@pytest.fixture(autouse=True)
def _need_sd_notify():
    if not os.access(SUROGATD, os.X_OK):
        pytest.skip("%s not built" % SUROGATD)
    if not built_with_libsystemd():
        pytest.skip("surogatd built without libsystemd (-Dsystemd=disabled): no sd_notify")


class Manager:
    """The service manager's end: every datagram, with its sender's
    credentials and what the test saw at the moment it arrived."""

    def __init__(self, on_message=None):
        # A directory the -j user can reach: pytest's tmp_path is root's 0700.
        self.dir = Path(tempfile.mkdtemp(prefix="surogat-notify-"))
        self.dir.chmod(0o755)
        self.path = str(self.dir / "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        os.chmod(self.path, 0o777)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.settimeout(0.2)
        self.on_message = on_message
        self.messages = []  # [{"fields": {K: V}, "pid", "uid", "seen": on_message's}]
        self.lock = threading.Lock()
        self.done = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        ucred = struct.calcsize("3i")
        while not self.done:
            try:
                data, anc, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(ucred))
            except socket.timeout:
                continue
            except OSError:
                return
            pid = uid = None
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid, uid, _ = struct.unpack("3i", payload[:ucred])
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if line)
            msg = {"fields": fields, "pid": pid, "uid": uid, "raw": data}
            # Look now, before the daemon goes on: what holds when the message arrives.
            if self.on_message is not None:
                msg["seen"] = self.on_message(msg)
            with self.lock:
                self.messages.append(msg)

    def all(self):
        with self.lock:
            return list(self.messages)

    def wait_for(self, key, value, after=0, timeout=20.0):
        """The first message from index `after` on with key=value."""
        def find():
            for i, m in enumerate(self.all()[after:], after):
                if m["fields"].get(key) == value:
                    return i, m
            return None
        return wait_until(find, timeout, "%s=%s from surogatd (got %s)" % (
            key, value, [m["fields"] for m in self.all()]))

    def close(self):
        self.done = True
        self.thread.join(5)
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def thread_uids(pid):
    """{tid: real uid} of every thread of pid."""
    out = {}
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            for line in Path("/proc/%d/task/%s/status" % (pid, t)).read_text().splitlines():
                if line.startswith("Uid:"):
                    out[int(t)] = int(line.split()[1])
        except OSError:
            continue
    return out


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
        assert "reloaded" in ready2["fields"]["STATUS"] and ready2["seen"]["status"] == 200
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
    wait_until(lambda: "SIGHUP: logs reopened" in sg.log_tail(100), 10, "the reload")
    assert sg.get("/").status == 200
    assert sg.stop() == 0
    log = sg.log_tail(200)
    assert log.count("cannot notify the service manager (NOTIFY_SOCKET)") == 1, log
