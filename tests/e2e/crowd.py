#!/usr/bin/python3
"""
crowd -- many clients at once from one thread: each connects, sends one GET
for the same path and reads its answer, multiplexed with selectors.  For a
crowd waiting on one slow URL (tests/e2e/r12_waitlist_test.py,
bench/waitlist.py).  Python stdlib only; loopback only.
"""

import selectors
import socket
import time


class Crowd:
    """n keep-alive clients, each sending one GET for path and reading its
    answer, multiplexed on one thread."""

    def __init__(self, port, path, n, host="surogat.test"):
        self.sel = selectors.DefaultSelector()
        self.req = ("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (path, host)).encode()
        self.got = {}
        self.port = port
        self.n = n
        self.opened = 0

    def open(self, deadline):
        """Connect and send, at most 200 connections in flight at once."""
        pending = set()
        while self.opened < self.n or pending:
            assert time.monotonic() < deadline, "could not connect %d clients" % self.n
            while self.opened < self.n and len(pending) < 200:
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", self.port))
                self.sel.register(s, selectors.EVENT_WRITE)
                pending.add(s)
                self.opened += 1
            for key, _ in self.sel.select(0.5):
                s = key.fileobj
                if s in pending:
                    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    assert err == 0, "connect: errno %d" % err
                    s.send(self.req)
                    self.sel.modify(s, selectors.EVENT_READ)
                    self.got[s] = b""
                    pending.discard(s)
                else:
                    self.read(s)

    def read(self, s):
        try:
            b = s.recv(65536)
        except BlockingIOError:
            return
        if not b:
            self.sel.unregister(s)
            self.got[s] += b"<closed>"
            return
        self.got[s] += b

    def closed(self):
        """Connections the server closed without the answer they were waiting for."""
        return sum(1 for v in self.got.values() if v.endswith(b"<closed>"))

    def answered(self, body):
        return sum(1 for v in self.got.values() if v.endswith(body))

    def pump(self, until, timeout):
        end = time.monotonic() + timeout
        while not until() and time.monotonic() < end:
            for key, _ in self.sel.select(0.2):
                self.read(key.fileobj)
        return until()

    def close(self):
        for s in list(self.got):
            s.close()
        self.sel.close()
