"""Accepting new connections: the listen sockets are served from the waiter's
set, by the worker taking ready sessions or, when none takes, by the waiter
thread.  New connections arriving while every worker is busy are all
answered (served or refused at once, never left hanging), a listener that
cannot accept (out of descriptors) recovers by itself, and listeners closed
by SIGTERM or kept across reloads while connections arrive lose nothing
they accepted."""

import os
import resource
import signal
import socket
import threading
import time

import httpc
from conftest import wait_until
from t_tls_test import pki, tls  # noqa: F401 -- fixtures


def _one(port, path, out, timeout=10):
    """One request on a new connection; records status, time and any error."""
    t0 = time.monotonic()
    res = {"status": None, "dt": None, "error": None, "body": b""}
    try:
        with httpc.Conn(port, timeout=timeout) as c:
            c.request("GET", path, headers={"Connection": "close"})
            r = c.read_response()
            res["status"], res["body"] = r.status, r.body
    except Exception as e:  # noqa: BLE001 - reported by the test
        res["error"] = repr(e)
    res["dt"] = time.monotonic() - t0
    out.append(res)


def _busy_pool(origin, surogat, params=None, args=()):
    """A daemon whose two workers are both held by slow fetches (2.5 s)."""
    # One URL per holder: two requests for one URL coalesce on its busy object,
    # and the second would wait on the waiting list, not on a worker.
    for i in (1, 2):
        origin.route("/slow%d" % i, body=b"slow", delay=2.5,
                     headers={"Cache-Control": "no-store"})
    origin.route("/fast", body=b"fast", headers={"Cache-Control": "no-store"})
    # Fetches hold their worker only when they wait for the backend on it.
    p = {"thread_pools": "1", "thread_pool_min": "2", "thread_pool_max": "2",
         "thread_queue_limit": "4", "backend_wait_worker": "on"}
    p.update(params or {})
    sg = surogat(params=p, args=args)
    slow = []
    holders = [threading.Thread(target=_one, args=(sg.port, "/slow%d" % i, slow))
               for i in (1, 2)]
    for t in holders:
        t.start()
    origin.wait_hits("/slow1", 1, 10)
    origin.wait_hits("/slow2", 1, 10)
    return sg, holders, slow


def test_connections_while_workers_busy_all_answered(origin, surogat):
    """60 new connections while both workers wait on a backend: the waiter accepts
    them, 4 wait in the queue and are served, the rest get a 503 at once."""
    sg, holders, slow = _busy_pool(origin, surogat)
    conn0 = sg.stat("sess_conn")
    out = []
    threads = [threading.Thread(target=_one, args=(sg.port, "/fast", out)) for _ in range(60)]
    for t in threads:
        t.start()
    for t in threads + holders:
        t.join(20)
    assert len(out) == 60
    lost = [r for r in out if r["error"] is not None]
    assert not lost, "connections that got no answer: %r" % lost[:5]
    ok = [r for r in out if r["status"] == 200]
    refused = [r for r in out if r["status"] == 503]
    assert len(ok) + len(refused) == 60, out
    assert len(ok) >= 4, "the queued connections were not served: %r" % out
    assert refused, "a full queue refused nobody"
    for r in refused:
        assert r["dt"] < 1.5, "a 503 took %.2fs: overload not answered at once" % r["dt"]
    assert all(r["body"] == b"fast" for r in ok)
    assert all(r["status"] == 200 for r in slow), slow
    st = sg.stats()
    assert st["sess_conn"] - conn0 == 60
    assert st["sess_dropped"] == len(refused)
    assert sg.get("/fast").status == 200


def test_tls_connections_while_workers_busy_closed_not_hung(origin, tls):
    """The same over TLS: no 503 can be written before a handshake, so a refused
    client sees its connection closed at once; none waits for its timeout."""
    # One URL per holder: two requests for one URL coalesce on its busy object,
    # and the second would wait on the waiting list, not on a worker.
    for i in (1, 2):
        origin.route("/slow%d" % i, body=b"slow", delay=2.5,
                     headers={"Cache-Control": "no-store"})
    origin.route("/fast", body=b"fast", headers={"Cache-Control": "no-store"})
    t = tls(params={"thread_pools": "1", "thread_pool_min": "2", "thread_pool_max": "2",
                    "thread_queue_limit": "4", "tls_handshake_timeout": "20s",
                    "backend_wait_worker": "on"})
    slow = []

    def get(path, out):
        t0 = time.monotonic()
        res = {"status": None, "error": None, "dt": None}
        try:
            with t.conn(timeout=15) as c:
                c.request("GET", path)
                res["status"] = c.read_final().status
        except Exception as e:  # noqa: BLE001 - reported by the test
            res["error"] = repr(e)
        res["dt"] = time.monotonic() - t0
        out.append(res)

    holders = [threading.Thread(target=get, args=("/slow%d" % i, slow)) for i in (1, 2)]
    for h in holders:
        h.start()
    origin.wait_hits("/slow1", 1, 10)
    origin.wait_hits("/slow2", 1, 10)
    out = []
    threads = [threading.Thread(target=get, args=("/fast", out)) for _ in range(40)]
    for th in threads:
        th.start()
    for th in threads + holders:
        th.join(30)
    assert len(out) == 40
    ok = [r for r in out if r["status"] == 200]
    closed = [r for r in out if r["error"] is not None]
    assert len(ok) + len(closed) == 40, out
    assert len(ok) >= 4, out
    for r in closed:
        assert "timed out" not in r["error"], r
        assert r["dt"] < 5, "a refused TLS client waited %.2fs" % r["dt"]
    assert all(r["status"] == 200 for r in slow), slow
    assert t.sg.stat("sess_dropped") == len(closed)
    assert t.get("/fast").status == 200


def _cpu_ticks(pid):
    """utime + stime of a process, in clock ticks."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def test_accept_recovers_from_emfile(origin, surogat):
    """Out of descriptors, a new connection waits in the backlog (sess_fail counts
    the failed accepts, the log says why) and no thread spins on it; once
    descriptors are free it is served without another client arriving to
    wake the listener."""
    origin.route("/x", body=b"x")
    sg = surogat()
    assert sg.get("/x").status == 200  # the backend connection is open and pooled
    fail0 = sg.stat("sess_fail")
    nfd = len(os.listdir("/proc/%d/fd" % sg.pid))
    old = resource.prlimit(sg.pid, resource.RLIMIT_NOFILE)
    idle, waiting = [], None
    try:
        resource.prlimit(sg.pid, resource.RLIMIT_NOFILE, (nfd + 4, old[1]))
        # Idle keep-alive clients, each answered once, until one is not accepted.
        for _ in range(12):
            c = httpc.Conn(sg.port, timeout=1.5)
            c.request("GET", "/x")
            try:
                r = c.read_response()
            except (httpc.Incomplete, OSError):
                waiting = c
                break
            assert r.status == 200, r
            idle.append(c)
        assert waiting is not None, "the descriptor limit was not reached"
        cpu0 = _cpu_ticks(sg.pid)
        assert waiting.is_open(1.5), "answered or closed while out of descriptors"
        assert _cpu_ticks(sg.pid) - cpu0 < 0.5 * os.sysconf("SC_CLK_TCK"), \
            "spinning on a listener it cannot accept from"
        for c in idle:
            c.close()
        idle = []
        t0 = time.monotonic()
        r = waiting.read_response(timeout=5)
        assert r.status == 200 and r.body == b"x"
        assert time.monotonic() - t0 < 3
    finally:
        for c in idle + ([waiting] if waiting else []):
            c.close()
        resource.prlimit(sg.pid, resource.RLIMIT_NOFILE, old)
    assert sg.stat("sess_fail") > fail0
    assert "accept on 127.0.0.1:%d" % sg.port in sg.log_tail(200)
    assert sg.get("/x").status == 200


def _hammer(ports, stop, out, path="/x"):
    """New connections one after another until stop is set: each outcome recorded."""
    while not stop.is_set():
        for port in ports:
            res = {"status": None, "error": None, "t": time.monotonic()}
            try:
                if isinstance(port, str):
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.settimeout(5)
                    s.connect(port)
                else:
                    s = socket.create_connection(("127.0.0.1", port), timeout=5)
                with s:
                    s.sendall(httpc.build_request("GET", path, {"Connection": "close"}))
                    data = b"".join(iter(lambda: s.recv(65536), b""))  # until EOF
                if data:
                    rs = httpc.parse_responses(data)
                    res["status"] = rs[0].status
                    res["body"] = rs[0].body
                else:
                    res["error"] = "closed without an answer"
            except (ConnectionRefusedError, FileNotFoundError) as e:
                res["error"] = "refused: %r" % e
            except (ConnectionResetError, BrokenPipeError) as e:
                # In the backlog when the listener closed: the kernel resets it,
                # and a send that comes after the reset fails with EPIPE.
                res["error"] = "reset: %r" % e
            except Exception as e:  # noqa: BLE001 - reported by the test
                res["error"] = repr(e)
            res["dt"] = time.monotonic() - res["t"]
            out.append(res)


def test_sigterm_while_connections_arrive(origin, surogat, tmp_path):
    """SIGTERM while clients keep connecting to a TCP and a Unix listener: every
    connection is answered whole, or refused/reset by the kernel once the
    listeners are closed; none hangs, and the daemon exits 0 at once."""
    origin.route("/x", body=b"x" * 1000)
    path = str(tmp_path / "s.sock")
    sg = surogat(args=["-a", path])
    wait_until(lambda: os.path.exists(path), 5, "the Unix socket")
    stop = threading.Event()
    out = []
    clients = [threading.Thread(target=_hammer, args=([sg.port, path], stop, out))
               for _ in range(4)]
    for c in clients:
        c.start()
    wait_until(lambda: sum(1 for r in out if r["status"] == 200) >= 50, 10, "traffic")
    t0 = time.monotonic()
    assert sg.stop(timeout=10) == 0, sg.log_tail()
    assert time.monotonic() - t0 < 5
    time.sleep(0.3)
    stop.set()
    for c in clients:
        c.join(15)
    assert not any(c.is_alive() for c in clients)
    served = [r for r in out if r["status"] is not None]
    assert all(r["status"] == 200 and r["body"] == b"x" * 1000 for r in served), \
        [r for r in served if r["status"] != 200][:5]
    bad = [r for r in out if r["error"] is not None and "refused" not in r["error"]
           and "reset" not in r["error"].lower() and r["error"] != "closed without an answer"]
    assert not bad, bad[:5]
    assert all(r["dt"] < 5 for r in out), "a connection hung across the stop"
    # After the stop the listeners are gone: the kernel refuses, the file is removed.
    assert any("refused" in (r["error"] or "") for r in out[-8:]), out[-8:]
    assert not os.path.exists(path)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", sg.port)) != 0


def test_reload_while_connections_arrive(origin, tls):
    """SIGHUP (certificates reloaded) while plain and TLS clients keep connecting:
    the listeners stay in the set, and every connection is served."""
    origin.route("/x", body=b"x" * 100)
    t = tls()
    stop = threading.Event()
    out, tls_out = [], []
    ctx = t.ctx()

    def tls_loop():
        while not stop.is_set():
            res = {"status": None, "error": None}
            try:
                with t.conn(ctx=ctx, timeout=5) as c:
                    c.request("GET", "/x")
                    res["status"] = c.read_final().status
            except Exception as e:  # noqa: BLE001 - reported by the test
                res["error"] = repr(e)
            tls_out.append(res)

    threads = [threading.Thread(target=_hammer, args=([t.sg.port], stop, out)),
               threading.Thread(target=tls_loop), threading.Thread(target=tls_loop)]
    for th in threads:
        th.start()
    reload0 = t.sg.stat("tls_reload")
    for _ in range(3):
        time.sleep(0.4)
        t.sg.signal(signal.SIGHUP)
    t.sg.wait_stat("tls_reload", reload0 + 3, timeout=10)
    time.sleep(0.4)
    stop.set()
    for th in threads:
        th.join(15)
    assert out and tls_out
    assert all(r["status"] == 200 for r in out), [r for r in out if r["status"] != 200][:5]
    assert all(r["status"] == 200 for r in tls_out), \
        [r for r in tls_out if r["status"] != 200][:5]
