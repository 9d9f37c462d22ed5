"""Large cached bodies sent by reference (sendfile_min_size): from the file
store's file and from the malloc store's memory files.

The kernel sends such bodies as references to the store's pages, and a
client on this host holds those pages in its receive queue until it reads
them -- long after surogat's send queue is empty.  So: a slow client still
reading an object whose space is purged, freed and rewritten by new objects
gets the old bytes, whole; the held space comes back once the client has
read or gone; a store full of held space still answers; and a restart holds
what a client of the previous run may still have to read."""

import atexit
import hashlib
import os
import shutil
import socket
import tempfile
import time

import pytest

from conftest import wait_until
from t_tls_test import pki, tls  # noqa: F401  (fixtures)

CACHED = {"Cache-Control": "max-age=600"}
MIB = 1024 * 1024


def body_of(n, seed):
    """n bytes, different for every seed, not compressible to a pattern."""
    out = bytearray()
    block = hashlib.sha256(b"sendfile %d" % seed).digest()
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block * 64
    return bytes(out[:n])


def is_hit(r):
    return (r.header("Cache-Status") or "").startswith("surogat; hit")


def _on_tmpfs(path):
    """Whether path is on tmpfs (the longest mount point that holds it)."""
    best, fstype = "", ""
    with open("/proc/mounts") as f:
        for line in f:
            mnt, typ = line.split()[1:3]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                best, fstype = mnt, typ
    return fstype == "tmpfs"


def store_dir(tmp_path):
    """Where a file store goes: tmp_path, unless it is on tmpfs, where the
    store sends by copy -- then a directory of /var/tmp, removed at exit."""
    if not _on_tmpfs(str(tmp_path)):
        return tmp_path
    d = tempfile.mkdtemp(prefix="surogat-e2e-store-", dir="/var/tmp")
    atexit.register(shutil.rmtree, d, True)
    os.chmod(d, 0o755)
    return d


def start(surogat, tmp_path, kind, size, **params):
    """surogatd with a store of `kind` (file or malloc) and the access log."""
    spec = ("file,%s,%s" % (os.path.join(store_dir(tmp_path), "store.bin"), size)
            if kind == "file" else "malloc,%s" % size)
    p = {"sendfile_min_size": "64k", "access_log": "access.log"}
    p.update(params)
    return surogat(args=["-s", spec], params=p), spec


class Slow:
    """A client that asks for a path and reads the answer at its own pace, with
    a small receive buffer, so that the server's delivery ends long before it
    has read the body."""

    def __init__(self, port, path, rcvbuf=128 * 1024):
        self.s = socket.socket()
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.s.settimeout(10)
        self.s.connect(("127.0.0.1", port))
        self.s.sendall(b"GET %s HTTP/1.1\r\nHost: surogat.test\r\nConnection: close\r\n\r\n"
                       % path.encode())
        self.data = b""
        self.eof = False

    def read(self, n):
        while n > 0 and not self.eof:
            k = self.s.recv(min(n, 65536))
            if not k:
                self.eof = True
                break
            self.data += k
            n -= len(k)

    def read_to_end(self):
        while not self.eof:
            self.read(1 << 20)

    def body(self):
        head, sep, body = self.data.partition(b"\r\n\r\n")
        assert sep, "no complete head: %r" % self.data[:200]
        assert head.startswith(b"HTTP/1.1 200"), head
        return body

    def close(self):
        self.s.close()


def delivered(sg, n):
    """Wait until the access log has n lines: the n-th response was all written."""
    sg.wait_access_lines(n, timeout=20)


def read_until_delivered(sg, c, lines):
    """Read slowly until the server has written the whole response (its access
    log line), then stop: the rest sits in the socket queues."""
    deadline = time.monotonic() + 30
    while len(sg.access_lines()) < lines:
        assert time.monotonic() < deadline, "the delivery did not end"
        c.read(16 * 1024)
        time.sleep(0.01)


def sendfile_on(sg):
    """The store sends from its file here (not on tmpfs)."""
    return "sendfile=off" not in sg.ctl("storage.list").stdout


def held_by_a_slow_client(origin, surogat, tmp_path, body, size):
    """A file store of `size` holding `body` at /old, read by a slow client
    that has the head; /old purged, and the delivery over (its access log
    line, the third: miss, PURGE, this one) while most of the body waits in
    the socket queues: the body's space is held.  (sg, spec, client)."""
    origin.route("/old", body=body, headers=CACHED)
    sg, spec = start(surogat, tmp_path, "file", size)
    if not sendfile_on(sg):
        pytest.skip("the store's file is on tmpfs here: no sendfile to test")
    assert sg.get("/old").body == body
    c = Slow(sg.port, "/old")
    try:
        c.read(4096)
        assert sg.request("PURGE", "/old").status == 200
        read_until_delivered(sg, c, 3)
        sg.wait_stat("sto_quarantine_bytes", len(body))
    except BaseException:
        c.close()
        raise
    return sg, spec, c


def fill_store(origin, sg, n, size, seed):
    """n new objects of size bytes through the cache: all answered whole."""
    for i in range(n):
        path = "/new/%d/%d" % (seed, i)
        body = body_of(size, seed * 1000 + i)
        origin.route(path, body=body, headers=CACHED)
        r = sg.get(path)
        assert r.status == 200 and r.body == body, path


@pytest.mark.parametrize("kind", ["file", "malloc"])
def test_freed_space_rewritten_while_a_slow_client_reads(origin, surogat, tmp_path, kind):
    old = body_of(3 * MIB, 1)
    origin.route("/old", body=old, headers=CACHED)
    sg, _ = start(surogat, tmp_path, kind, "12m")
    if kind == "file" and not sendfile_on(sg):
        pytest.skip("the store's file is on tmpfs here: no sendfile to test")
    assert sg.get("/old").body == old
    sent0 = sg.stat("resp_sendfile_bytes")
    r = sg.get("/old")
    assert is_hit(r) and r.body == old
    assert sg.stat("resp_sendfile_bytes") - sent0 == len(old), "the hit did not use sendfile"
    c = Slow(sg.port, "/old")
    try:
        c.read(4096)  # the head: the delivery holds the object now
        assert sg.request("PURGE", "/old").status == 200
        read_until_delivered(sg, c, 4)  # miss, hit, PURGE, this one
        before = len(c.data)
        # Delivered and purged: the body is freed, though the client has most of it to read.
        assert len(old) - before > 256 * 1024, "too little left in the queues to tell"
        if kind == "file":
            assert sg.wait_stat("sto_quarantine_bytes", len(old)) >= len(old)
        else:
            wait_until(lambda: sg.stat("sto_mfiles") == 0, 5, "the memory file closed")
        # New objects take the whole store, twice over: freed space is rewritten.
        fill_store(origin, sg, 24, 1 * MIB, 2)
        c.read_to_end()
        assert c.body() == old, "the slow client got bytes other than the object's"
        if kind == "file":
            wait_until(lambda: sg.stat("sto_quarantine_bytes") == 0, 10,
                       "the held space back once the client has read it")
    finally:
        c.close()
    assert sg.get("/old").body == old


@pytest.mark.parametrize("kind", ["file", "malloc"])
def test_client_gone_mid_body(origin, surogat, tmp_path, kind):
    old = body_of(6 * MIB, 3)
    origin.route("/old", body=old, headers=CACHED)
    sg, _ = start(surogat, tmp_path, kind, "32m")
    assert sg.get("/old").body == old
    for _ in range(3):
        c = Slow(sg.port, "/old", rcvbuf=64 * 1024)
        c.read(200 * 1024)
        c.close()  # unread bytes in its queue: a reset
    assert sg.request("PURGE", "/old").status == 200
    # The deliveries fail, the object goes, and nothing stays held for clients that left.
    wait_until(lambda: sg.stat("sto_quarantine_bytes") == 0 and sg.stat("sto_mfiles") == 0,
               10, "nothing held once the clients are gone")
    fill_store(origin, sg, 8, 2 * MIB, 4)
    r = sg.get("/old")
    assert r.status == 200 and r.body == old
    assert sg.alive()


def test_store_full_while_space_is_held(origin, surogat, tmp_path):
    old = body_of(3 * MIB + 512 * 1024, 5)
    sg, _, c = held_by_a_slow_client(origin, surogat, tmp_path, old, "4m")
    try:
        # Most of the store is held: a new MiB cannot be stored, but is answered whole.
        big = body_of(MIB, 6)
        origin.route("/big", body=big, headers=CACHED)
        for _ in range(2):
            r = sg.get("/big")
            assert r.status == 200 and r.body == big and not is_hit(r)
        assert sg.stat("sto_quarantine_bytes") > 0
        c.read_to_end()
        assert c.body() == old
    finally:
        c.close()
    # The client is done: the space comes back and the next MiB is stored.
    wait_until(lambda: sg.stat("sto_quarantine_bytes") == 0, 10, "the held space back")
    assert sg.get("/big").body == big
    r = sg.get("/big")
    assert is_hit(r) and r.body == big


@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
def test_restart_holds_what_a_client_may_still_read(origin, surogat, tmp_path, how):
    old = body_of(3 * MIB, 7)
    sg, spec, c = held_by_a_slow_client(origin, surogat, tmp_path, old, "12m")
    try:
        before = len(c.data)
        if how == "kill -9":
            sg.kill()
        else:
            assert sg.stop() == 0
        sg2 = surogat(args=["-s", spec], params={"sendfile_min_size": "64k"})
        assert sg2.stat("sto_quarantine_bytes") >= len(old), "the new run does not hold it"
        fill_store(origin, sg2, 24, MIB, 8)
        c.read_to_end()
        got = c.body()
        # The old run's socket sends on after its exit; all that arrives is the object's.
        assert len(c.data) > before + 256 * 1024
        assert got == old[:len(got)], "the client got bytes other than the object's"
        wait_until(lambda: sg2.stat("sto_quarantine_bytes") == 0, 10, "the held space back")
    finally:
        c.close()


@pytest.mark.parametrize("kind", ["file", "malloc"])
def test_ranges_heads_and_pipelining(origin, surogat, tmp_path, kind):
    big = body_of(2 * MIB + 12345, 9)
    chunked = body_of(700 * 1024, 10)
    origin.route("/big", body=big, headers=CACHED)
    origin.route("/chunked", body=chunked, headers=CACHED, chunked=True)
    sg, _ = start(surogat, tmp_path, kind, "32m")
    for path, body in (("/big", big), ("/chunked", chunked)):
        assert sg.get(path).body == body
        r = sg.get(path)
        assert is_hit(r) and r.body == body
    for first, last in ((0, 0), (100, 70000), (65536, 2 * MIB), (2 * MIB, len(big) - 1)):
        r = sg.get("/big", {"Range": "bytes=%d-%d" % (first, last)})
        assert r.status == 206 and r.body == big[first:last + 1], (first, last)
    r = sg.request("HEAD", "/big")
    assert r.status == 200 and r.header("Content-Length") == str(len(big)) and r.body == b""
    # Pipelined hits on one connection: each response framed right.
    with sg.conn() as conn:
        for _ in range(3):
            conn.request("GET", "/big")
        for _ in range(3):
            r = conn.read_response()
            assert r.status == 200 and r.body == big


@pytest.mark.parametrize("kind", ["file", "malloc"])
def test_tls_and_http2_clients_get_a_copy(origin, tls, tmp_path, kind):
    """A large hit to a TLS client (HTTP/1.1 or HTTP/2) is encrypted from memory:
    whole, and not counted as sent by reference."""
    big = body_of(MIB + 777, 11)
    origin.route("/big", body=big, headers=CACHED)
    spec = ("file,%s,32m" % os.path.join(store_dir(tmp_path), "store.bin") if kind == "file"
            else "malloc,32m")
    t = tls(params={"sendfile_min_size": "64k"}, args=["-s", spec])
    url = "https://a.test:%d/big" % t.port
    for http in ("--http1.1", "--http2"):
        p = t.curl("-s", url, url, http=http)
        assert p.returncode == 0 and p.stdout == big + big, (http, p.stderr[-300:])
    assert t.sg.stat("cache_hit") >= 3
    assert t.sg.stat("resp_sendfile_bytes") == 0


@pytest.mark.parametrize("kind", ["file", "malloc"])
def test_copy_in_another_coding_by_reference(origin, surogat, tmp_path, kind):
    """A copy of an object in another coding (compress_copy_after) is stored like any
    body: a large one goes by reference too, and whole."""
    from codings import decode, html_page

    page = html_page(600 * 1024)
    origin.route("/page", body=page, headers={**CACHED, "Content-Type": "text/html"})
    sg, _ = start(surogat, tmp_path, kind, "32m", compress_copy_after="1")
    r = sg.get("/page", {"Accept-Encoding": "br"})
    assert r.header("Content-Encoding") == "br" and decode("br", r.body) == page
    r = sg.get("/page")  # made on the fly from the br body, and kept
    assert r.status == 200 and r.header("Content-Encoding") is None and r.body == page
    assert sg.stat("n_copy") == 1
    sent0 = sg.stat("resp_sendfile_bytes")
    r = sg.get("/page")
    assert is_hit(r) and r.header("Content-Encoding") is None and r.body == page
    assert sg.stat("copy_hit") == 1
    # A copy's length is not known as it is made: as for a body without a
    # Content-Length, what follows about its first sendfile_min_size bytes goes by
    # reference (the file store: from its first page-owning extent on).
    sent = sg.stat("resp_sendfile_bytes") - sent0
    assert len(page) - 80 * 1024 <= sent <= len(page), "the copy went by copy"
    assert origin.hits("/page") == 1
