"""A fake service manager for sd_notify(3): a Unix datagram socket bound in
a directory any user can reach, named by NOTIFY_SOCKET, with SO_PASSCRED so
that each message comes with its sender's pid and uid."""

import os
import shutil
import socket
import struct
import tempfile
import threading
from pathlib import Path

from conftest import wait_until


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
