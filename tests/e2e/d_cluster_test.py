"""A self-routing cluster: three surogat nodes on loopback ports, one origin,
HAProxy in front with round robin (etc/haproxy-cluster.cfg), every node
running the same policy (vcl/cluster.lua and a cluster declaration).

(a) Whichever node is asked, and with all three asked at once, each object
    comes from the origin once for the fleet: the owner of its key fetches
    it, the others ask the owner.
(b) A purge, a soft purge, a surrogate-key purge, a ban (HTTP and
    surogatctl) and surogatctl purge sent to one node take effect on all
    three, each member's count in the answer; once a purge is acknowledged
    by all (200) no node serves what it removed.  A node that is down when
    it is sent gets it queued (202), and applies it before it serves again:
    its file store's copy is never served, and the queued message reaches it.
    Clients asking all the while as URLs change and are purged never get a
    version older than an acknowledged purge's.
(c) A node killed: its keys move to the others with no client error; back
    with its file store warm, it gets part of its keys within the ramp-up
    and all after it, serving them without asking the origin.  A node
    stopped with SIGTERM says draining; HAProxy and the members take it
    out before it stops, no client sees an error.  With the other members
    down a node owns every key, and with none usable it asks the origin.
(d) No loops: a broken peer list (names swapped, a member's address pointing
    back into the fleet through HAProxy, one pointing at the node itself)
    costs at most one hop, never a second member; a request that crossed a
    member goes to the origin; a forged hop header is not believed.
Also: the members' probe (ready, draining), declaration errors with file and
line, and bans replayed after a restart on a single node's file store."""

import hashlib
import hmac
import os
import re
import signal
import threading
import time

import pytest

import httpc
from conftest import (REPO, ROOT_OK, SUROGATD, STOP_TIMEOUT, Surogat, free_port, listening,
                      need_binaries, wait_until)
from d_shard_test import (KeepAlive, haproxy, haproxy_cmd,  # noqa: F401 (fixture)
                          refused, server_status)

SECRET = "fleet-secret-for-tests"
PROBE = "{ interval = 0.2, timeout = 0.5, window = 3, threshold = 2 }"
CLU_PATH = "/.well-known/surogat-cluster"
LOCAL_HOT = 3  # a node keeps a copy of a key it asked its owner for this often lately


def seconds(duration):
    """A policy duration ("1s", "500ms") in seconds."""
    m = re.fullmatch(r"([\d.]+)(ms|s)", duration)
    return float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)


def cluster_policy(origin_port, ports, local_ttl="60s", rampup="1s", secret=SECRET,
                   names=None, extra=""):
    names = names or ["node%d" % (i + 1) for i in range(len(ports))]
    peers = ", ".join('%s = "127.0.0.1:%d"' % (n, p) for n, p in zip(names, ports))
    sec = 'secret = "%s",' % secret if secret else ""
    return """
backend "origin" { host = "127.0.0.1", port = %d }
cluster "fleet" {
    peers = { %s },
    origin = "origin", local_ttl = "%s", local_hot = %d, rampup = "%s", %s
    probe = %s,
}
local cluster = require "cluster"
recv, backend_response, backend_error, synth =
    cluster.recv, cluster.backend_response, cluster.backend_error, cluster.synth
function backend_fetch(bereq)
    bereq.http["X-Fetched-By"] = server.identity
    cluster.backend_fetch(bereq)
end
function deliver(req, resp)
    resp.http["X-Node"] = server.identity
end
%s
""" % (origin_port, peers, local_ttl, LOCAL_HOT, rampup, sec, PROBE, extra)


class Fleet:
    """Nodes started with a given -n directory and port, so that one can be
    killed and started again with its state (journal, bans, file store)."""

    def __init__(self, origin, tmp_path, n=3, store=False, **kw):
        need_binaries()
        self.origin = origin
        self.tmp = tmp_path
        self.store = store
        self.ports = [free_port() for _ in range(n)]
        self.front = [free_port() for _ in range(n)]  # PROXY listeners for HAProxy
        self.names = ["node%d" % (i + 1) for i in range(n)]
        self.nodes = [None] * n
        self.all = []
        self.kw = kw
        self.texts = [cluster_policy(origin.port, self.ports, **kw)] * n

    def start(self, i, wait=True):
        name = self.names[i]
        pol = self.tmp / ("%s.lua" % name)
        pol.write_text(self.texts[i])
        params = {"identity": name, "policy_modules": "cluster",
                  "policy_module_path": str(REPO / "vcl"), "shutdown_timeout": "3s",
                  "cluster_timeout": "1s", "default_grace": "0s"}
        args = ["-f", str(pol), "-a", "127.0.0.1:%d,PROXY" % self.front[i]]
        if self.store:
            args += ["-s", "file,%s,32m" % (self.tmp / ("%s.store" % name))]
        sg = Surogat(self.tmp / name, self.origin.addr, params, args, port=self.ports[i])
        self.nodes[i] = sg
        self.all.append(sg)
        return sg

    def start_all(self):
        for i in range(len(self.names)):
            self.start(i)
        self.wait_healthy()
        # Each node ramps each member's share up over `rampup` from when it saw
        # it healthy: until then two nodes may name different owners for a key
        # (and both fetch it from the origin).
        time.sleep(seconds(self.kw.get("rampup", "1s")) + 0.2)
        return self.nodes

    def wait_healthy(self, timeout=10):
        def ok():
            for sg in self.nodes:
                if sg is None or not sg.alive():
                    continue
                rows = sg.ctl("backend.list").stdout
                for j, n in enumerate(self.names):
                    up = self.nodes[j] is not None and self.nodes[j].alive()
                    m = re.search(r"^%s\s+\S+\s+(\S+)" % n, rows, re.M)
                    if m is None and not up:
                        continue  # not started, and not on this node's list yet
                    if m is None or (m.group(1) == "healthy") != up:
                        return False
            return True
        wait_until(ok, timeout, "every node to see the members' health", interval=0.1)

    def stop(self):
        problems = []
        for sg in self.all:
            if sg.stopped:
                continue
            rc = sg.stop()
            if rc != 0:
                problems.append("%s exited %s:\n%s" % (sg.workdir.name, rc, sg.log_tail()))
        for sg in self.all:
            text = sg.log_path.read_text(errors="replace") if sg.log_path.exists() else ""
            for word in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
                if word in text:
                    problems.append("sanitizer report in %s" % sg.log_path)
        return problems


@pytest.fixture
def fleet(origin, tmp_path):
    made = []

    def make(**kw):
        f = Fleet(origin, tmp_path, **kw)
        made.append(f)
        return f

    yield make
    problems = []
    for f in made:
        problems += f.stop()
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


def versioned(origin, ttl=300, tags=None):
    """The origin answers "PATH vN", N its version of that path, bumped by the test."""
    version = {}

    def body(req):
        return ("%s v%d" % (req.path, version.get(req.path, 1))).encode()

    def headers_for(path):
        h = [("Cache-Control", "max-age=%d" % ttl)]
        if tags and path in tags:
            h.append(("Surrogate-Key", tags[path]))
        return h

    origin.default.body = body
    origin.default.headers = [("Cache-Control", "max-age=%d" % ttl)]
    for p, t in (tags or {}).items():
        origin.route(p, body=body, headers=headers_for(p))
    return version


def get(port, path, **kw):
    r = httpc.fetch(port, "GET", path, **kw)
    assert r.status == 200, (port, path, r.status, r.body)
    return r


def last_cache_status(r):
    v = r.headers_all("Cache-Status")
    return v[-1] if v else ""


def fetched_by(origin, path):
    return [r.header("X-Fetched-By") for r in origin.reqs(path)]


def origin_log(origin, path):
    """Who fetched path from the origin, with what (for failure messages)."""
    return [(r.header("X-Fetched-By"), r.header("Cache-Control"), r.headers_all("Via"))
            for r in origin.reqs(path)]


# -- (a) one fetch per object for the fleet ------------------------------------

def test_each_object_once_whichever_node_is_asked(origin, fleet):
    versioned(origin)
    f = fleet()
    nodes = f.start_all()
    urls = ["/a/%d" % i for i in range(90)]
    for u in urls:
        for sg in nodes:  # every node asked, in turn
            assert get(sg.port, u).body == (u + " v1").encode()
    for u in urls:
        assert origin.hits(u) == 1, (u, fetched_by(origin, u))
    # The owner fetched it; the others asked the owner: each node owns some.
    owners = {fetched_by(origin, u)[0] for u in urls}
    assert owners == set(f.names), owners
    st = [sg.stats() for sg in nodes]
    assert all(s["cluster_fwd"] >= 30 for s in st), [s["cluster_fwd"] for s in st]
    # Each origin fetch is one owner's (asked first) or one of a forwarded request.
    assert sum(s["cluster_owner"] + s["cluster_crossed"] for s in st) == 90
    # Asked again: from the owner's cache; a node keeps no copy of a key it
    # asked for once (cold: copies would evict what it owns) ...
    for u in urls[:30]:
        owner = fetched_by(origin, u)[0]
        for sg, name in zip(nodes, f.names):
            r = get(sg.port, u)
            cs = r.headers_all("Cache-Status")
            if name == owner:
                assert cs[-1].startswith("surogat; hit"), (u, name, cs)
            else:
                assert cs[-2].startswith("surogat; hit") and "stored" not in cs[-1], (u, name, cs)
    # ... until it asks for it again soon (hot): then it keeps one for local_ttl.
    u = urls[0]
    owner = fetched_by(origin, u)[0]
    other = nodes[(f.names.index(owner) + 1) % 3]
    for _ in range(LOCAL_HOT):
        get(other.port, u)
    assert last_cache_status(get(other.port, u)).startswith("surogat; hit")
    assert origin.hits() == 90
    assert other.stat("cluster_fwd_cold") >= 30


def test_three_nodes_asked_at_once_fetch_once(origin, fleet):
    versioned(origin)
    for i in range(20):
        origin.route("/slow/%d" % i, body=("slow %d" % i).encode(),
                     headers={"Cache-Control": "max-age=300"}, delay=0.4)
    nodes = fleet().start_all()
    errors = []

    def ask(port, u):
        try:
            r = httpc.fetch(port, "GET", u, timeout=20)
            if r.status != 200 or not r.body.startswith(b"slow"):
                errors.append((port, u, r.status))
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append((port, u, repr(e)))

    for i in range(20):
        ts = [threading.Thread(target=ask, args=(sg.port, "/slow/%d" % i)) for sg in nodes]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
    assert not errors, errors
    assert [origin.hits("/slow/%d" % i) for i in range(20)] == [1] * 20


def haproxy_cluster_conf(front, nodes, sock):
    """etc/haproxy-cluster.cfg for loopback: each node's PROXY port."""
    text = (REPO / "etc" / "haproxy-cluster.cfg").read_text()
    text = text.replace("log /dev/log local0 info", "log stderr format raw local0 info")
    text = text.replace("stats socket /run/haproxy/cluster.sock", "stats socket %s" % sock)
    text = text.replace("bind :80", "bind 127.0.0.1:%d" % front)
    text = text.replace("maxconn 20000", "maxconn 1000")
    text = text.replace("inter 1s fall 2 rise 2", "inter 200ms fall 2 rise 2")
    for i, port in enumerate(nodes, 1):
        text, n = re.subn(r"server node%d \S+" % i, "server node%d 127.0.0.1:%d" % (i, port), text)
        assert n == 1, "no server node%d line in etc/haproxy-cluster.cfg" % i
    return text


def backend_requests(sock):
    """Requests HAProxy's backend `surogat` took (health checks not counted)."""
    lines = haproxy_cmd(sock, "show stat").splitlines()
    cols = lines[0].lstrip("# ").split(",")
    for line in lines[1:]:
        fl = dict(zip(cols, line.split(",")))
        if fl.get("pxname") == "surogat" and fl.get("svname") == "BACKEND":
            return int(fl["req_tot"])
    raise AssertionError("no backend surogat in show stat")


def start_haproxy(haproxy, f, tmp_path):
    front, sock = free_port(), tmp_path / "haproxy.sock"
    haproxy(haproxy_cluster_conf(front, f.front, sock))
    wait_until(lambda: listening(front) and os.path.exists(sock), 10, "haproxy to listen")
    wait_until(lambda: server_status(sock) == {n: "UP" for n in f.names}, 10,
               "haproxy to see three nodes up")
    return front, sock


def test_round_robin_in_front_each_object_once(origin, fleet, haproxy, tmp_path):
    versioned(origin)
    f = fleet()
    f.start_all()
    front, _ = start_haproxy(haproxy, f, tmp_path)
    c = httpc.Conn(front)
    seen = {}
    urls = ["/rr/%d" % i for i in range(100)]
    for _ in range(3):
        for u in urls:
            c.request("GET", u, host="fleet.example")
            r = c.read_final("GET")
            assert r.status == 200 and r.body == (u + " v1").encode(), (u, r.status)
            seen.setdefault(u, set()).add(r.header("X-Node"))
    c.close()
    assert all(origin.hits(u) == 1 for u in urls), [u for u in urls if origin.hits(u) != 1]
    # Round robin spread each URL over the nodes, which asked its owner.
    assert sum(len(s) for s in seen.values()) > 200, seen


# -- (b) invalidations reach every node -----------------------------------------

def fill_everywhere(nodes, urls, want=b"v1"):
    """Each URL asked on each node until every node holds a copy (hot)."""
    for u in urls:
        for sg in nodes:
            for _ in range(LOCAL_HOT + 1):
                r = get(sg.port, u)
                assert r.body.endswith(want), (u, sg.port, r.body)
            assert last_cache_status(get(sg.port, u)).startswith("surogat; hit"), (u, sg.port)


def served_everywhere(nodes, u):
    return [get(sg.port, u).body.decode().split()[-1] for sg in nodes]


def report_lines(body):
    """{node: line} from a purge or ban answer."""
    out = {}
    for line in body.decode().splitlines():
        m = re.match(r"(node\d): (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def test_purges_and_bans_reach_every_node(origin, fleet):
    tags = {"/b/tag1": "grp other", "/b/tag2": "grp", "/b/untagged": "none"}
    version = versioned(origin, tags=tags)
    f = fleet()
    nodes = f.start_all()
    urls = ["/b/%d" % i for i in range(10)] + list(tags)
    fill_everywhere(nodes, urls)
    for u in urls:
        version[u] = 2
    assert all(origin.hits(u) == 1 for u in urls)

    # PURGE at node2: 200, each member's count, v2 on every node at once.
    r = httpc.fetch(nodes[1].port, "PURGE", "/b/0")
    assert r.status == 200, r.body
    lines = report_lines(r.body)
    assert set(lines) == set(f.names) and all(v == "1" for v in lines.values()), r.body
    assert served_everywhere(nodes, "/b/0") == ["v2"] * 3

    # Surrogate-key purge at node3: the tagged ones everywhere, not the others.
    r = httpc.fetch(nodes[2].port, "PURGE", "/", headers={"Surrogate-Key": "grp"})
    assert r.status == 200, r.body
    assert sorted(report_lines(r.body).values()) == ["2", "2", "2"], r.body
    assert served_everywhere(nodes, "/b/tag1") == ["v2"] * 3
    assert served_everywhere(nodes, "/b/tag2") == ["v2"] * 3
    assert served_everywhere(nodes, "/b/untagged") == ["v1"] * 3

    # Ban over HTTP at node1, and surogatctl ban at node2.
    r = httpc.fetch(nodes[0].port, "BAN", "/", headers={"X-Ban-Url": "^/b/[12]$"})
    assert r.status == 200, r.body
    assert set(report_lines(r.body)) == set(f.names), r.body
    p = nodes[1].ctl("ban", "req.url ~ ^/b/3$")
    assert p.returncode == 0, p.stdout + p.stderr
    assert set(report_lines(p.stdout.encode())) == set(f.names), p.stdout
    for u in ("/b/1", "/b/2", "/b/3"):
        assert served_everywhere(nodes, u) == ["v2"] * 3, u
    assert served_everywhere(nodes, "/b/4") == ["v1"] * 3

    # surogatctl purge at node3, with and without a host.
    p = nodes[2].ctl("purge", "/b/5", "surogat.test")
    assert p.returncode == 0 and "Purged 1 object." in p.stdout, p.stdout + p.stderr
    p = nodes[2].ctl("purge", "/b/6")
    assert p.returncode == 0 and sorted(report_lines(p.stdout.encode()).values()) == ["1"] * 3
    assert served_everywhere(nodes, "/b/5") == ["v2"] * 3
    assert served_everywhere(nodes, "/b/6") == ["v2"] * 3

    # Each refetch went to the origin once.
    for u in ("/b/0", "/b/1", "/b/2", "/b/3", "/b/5", "/b/6", "/b/tag1", "/b/tag2"):
        assert origin.hits(u) == 2, (u, fetched_by(origin, u))
    for sg in nodes:
        assert sg.stat("cluster_inval_queued") == 0


def test_a_purge_during_a_fetch_is_not_undone(origin, fleet):
    """A purge acknowledged while a node's fetch (from the owner, or the
    owner's from the origin) is under way: the answer that comes after it
    may be the old object, and is not kept anywhere."""
    versioned(origin)
    nodes = fleet().start_all()
    for i in range(6):
        u = "/race/%d" % i
        old = origin.route(u, body=b"old", headers={"Cache-Control": "max-age=300"},
                           hold_head=True)
        got = {}
        t = threading.Thread(target=lambda: got.update(r=httpc.fetch(nodes[0].port, "GET", u,
                                                                      timeout=20)))
        t.start()
        assert old.held.wait(10)
        origin.route(u, body=b"new", headers={"Cache-Control": "max-age=300"})
        r = httpc.fetch(nodes[1].port, "PURGE", u)
        assert r.status == 200, r.body
        old.release.set()
        t.join(20)
        assert got["r"].status == 200 and got["r"].body == b"old"  # it was under way
        for sg in nodes:
            r = get(sg.port, u)
            assert r.body == b"new", (u, sg.port, fetched_by(origin, u), str(r.headers))


def test_no_node_serves_what_an_acknowledged_purge_removed(origin, fleet):
    """Clients on every node ask for a few URLs the whole time (hot copies,
    fetches from the owner and from a slow origin always under way) while
    the origin's version of a URL moves and each change is purged at one
    node in turn: a request sent after a purge was acknowledged never gets
    a version older than the one the purge was for, on any node."""
    version = versioned(origin)

    def as_when_asked(s, req, stop_ev):
        """The version when the request came, answered 0.1 s later."""
        body = ("%s v%d" % (req.path, version.get(req.path, 1))).encode()
        if stop_ev.wait(0.1):
            return False
        s.sendall(b"HTTP/1.1 200 OK\r\nCache-Control: max-age=300\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        return True

    origin.default.script = as_when_asked
    urls = ["/p/%d" % i for i in range(2)]
    f = fleet()
    nodes = f.start_all()
    fill_everywhere(nodes, urls)
    acked = {u: 1 for u in urls}
    lock = threading.Lock()
    stop = threading.Event()
    errors, answered = [], [0]

    def client(sg):
        while not stop.is_set():
            for u in urls:
                with lock:
                    floor = acked[u]  # before the request goes out
                try:
                    r = httpc.fetch(sg.port, "GET", u, timeout=10)
                except (OSError, httpc.Incomplete) as e:
                    errors.append((sg.port, u, repr(e)))
                    continue
                got = int(r.body.decode().rsplit("v", 1)[1]) if r.status == 200 else -1
                if got < floor:
                    errors.append((sg.port, u, r.status, r.body, floor, str(r.headers)))
                answered[0] += 1

    threads = [threading.Thread(target=client, args=(sg,)) for sg in nodes for _ in range(2)]
    for th in threads:
        th.start()
    try:
        for k in range(40):  # each URL purged about every 0.1 s: a fetch is often under way
            u = urls[k % len(urls)]
            version[u] = version.get(u, 1) + 1
            r = httpc.fetch(nodes[k % 3].port, "PURGE", u)
            assert r.status == 200, r.body
            with lock:
                acked[u] = version[u]
            time.sleep(0.05)
    finally:
        stop.set()
        for th in threads:
            th.join(20)
    assert not errors, errors[:5]
    assert answered[0] > 40, answered
    # Purges did overtake fetches under way (else the test proved nothing).
    assert sum(sg.stat("cache_overtaken") for sg in nodes) > 0
    for u in urls:
        assert served_everywhere(nodes, u) == ["v%d" % version[u]] * 3


def test_soft_purge_reaches_every_node(origin, fleet):
    version = versioned(origin)
    f = fleet()
    nodes = f.start_all()
    for sg in nodes:
        assert sg.ctl("param.set", "default_grace", "60s").returncode == 0
    origin.route("/s", body=lambda req: ("/s v%d" % version.get("/s", 1)).encode(),
                 headers={"Cache-Control": "max-age=300, stale-while-revalidate=60"},
                 delay=0.3)
    fill_everywhere(nodes, ["/s"])
    version["/s"] = 2
    r = httpc.fetch(nodes[0].port, "PURGE", "/s", headers={"Purge-Mode": "soft"})
    assert r.status == 200 and r.body.startswith(b"Soft-purged 1 object."), r.body
    # Expired, not removed, on every node: the stale copy at once, refreshed behind.
    for sg in nodes:
        r = get(sg.port, "/s")
        assert r.body == b"/s v1" and "ttl=-" in last_cache_status(r), (sg.port, r.headers)
    wait_until(lambda: served_everywhere(nodes, "/s") == ["v2"] * 3, 10, "v2 everywhere")


def test_a_node_down_gets_its_purge_before_it_serves_again(origin, fleet):
    version = versioned(origin)
    f = fleet(store=True)
    nodes = f.start_all()
    urls = ["/d/%d" % i for i in range(30)]
    fill_everywhere(nodes, urls)
    node3 = nodes[2]
    node3.kill()
    f.wait_healthy()
    version["/d/0"] = version["/d/1"] = 2
    r = httpc.fetch(nodes[0].port, "PURGE", "/d/0")
    assert r.status == 202, r.body
    lines = report_lines(r.body)
    assert lines["node1"] == "1" and lines["node2"] == "1", r.body
    assert lines["node3"].startswith("queued"), r.body
    p = nodes[1].ctl("ban", "req.url ~ ^/d/1$")
    assert p.returncode == 0 and "node3: queued" in p.stdout, p.stdout
    assert served_everywhere(nodes[:2], "/d/0") == ["v2"] * 2

    # Back with its file store: the purged and banned copies are never served,
    # the others are (hits on its warm store).
    node3 = f.start(2)
    assert get(node3.port, "/d/0").body == b"/d/0 v2"
    assert get(node3.port, "/d/1").body == b"/d/1 v2"
    assert node3.stat("cluster_sync") == 2
    r = get(node3.port, "/d/2")
    assert r.body == b"/d/2 v1" and last_cache_status(r).startswith("surogat; hit"), r.headers
    # node1's and node2's outboxes reach it too (acknowledged as seen).
    nodes[0].wait_stat("cluster_inval_retried", 1, timeout=10)
    nodes[1].wait_stat("cluster_inval_retried", 1, timeout=10)
    assert "node3" in (f.tmp / "node1" / "cluster.journal").read_text()
    assert origin.hits("/d/2") == 1


def test_peer_list_reloaded_with_sighup(origin, fleet):
    """Membership is the declaration: a third node joins when the file
    lists it on every node and they reload."""
    versioned(origin)
    f = fleet()
    two = cluster_policy(origin.port, f.ports[:2])
    f.texts = [two, two, cluster_policy(origin.port, f.ports)]
    n1, n2 = f.start(0), f.start(1)
    f.wait_healthy()
    time.sleep(1.2)  # the rampup of each on the other's ring
    urls = ["/m/%d" % i for i in range(60)]
    for u in urls:
        get(n1.port, u)
    assert {fetched_by(origin, u)[0] for u in urls} == {"node1", "node2"}
    # node3 starts with the three of them; the others reload the same file.
    n3 = f.start(2)
    for i, sg in ((0, n1), (1, n2)):
        (f.tmp / ("%s.lua" % f.names[i])).write_text(f.texts[2])
        before = sg.stat("policy_reload")
        sg.signal(signal.SIGHUP)
        wait_until(lambda: sg.stat("policy_reload") > before, 10, "%s to reload" % f.names[i])
    f.wait_healthy()
    time.sleep(1.2)  # node3 joined node1's and node2's rings by a reload: its rampup (1s)
    more = ["/m2/%d" % i for i in range(90)]
    for u in more:
        get(n1.port, u)
    owners = [fetched_by(origin, u)[0] for u in more]
    assert set(owners) == {"node1", "node2", "node3"}, owners
    # Each member, asked, agrees with node1 on the owner: one fetch each.
    for u in more:
        for sg in (n2, n3):
            get(sg.port, u)
    assert all(origin.hits(u) == 1 for u in more)
    # And invalidations reach the newcomer.
    r = httpc.fetch(n1.port, "PURGE", "/", headers={"Surrogate-Key": "none"})
    assert set(report_lines(r.body)) == set(f.names), r.body


# -- (c) a node killed, and back ---------------------------------------------------

def sweep(client, urls, failures):
    """Each URL once through HAProxy on one keep-alive client (KeepAlive: a
    closed connection is opened again); what failed is collected."""
    for u in urls:
        try:
            r = client.get(u)
            if r.status != 200 or not r.body.startswith(u.encode()):
                failures.append((u, r.status))
        except (OSError, httpc.Incomplete) as e:
            failures.append((u, repr(e)))


def test_killed_node_keys_move_and_come_back_warm(origin, fleet, haproxy, tmp_path):
    versioned(origin)
    f = fleet(store=True, rampup="4s", local_ttl="1s")
    nodes = f.start_all()
    front, sock = start_haproxy(haproxy, f, tmp_path)
    urls = ["/c/%d" % i for i in range(121)]  # not a multiple of 3: round robin moves each URL
    client = KeepAlive(front)
    failures = []
    sweep(client, urls, failures)
    assert not failures, failures
    owner = {u: fetched_by(origin, u)[0] for u in urls}
    mine = [u for u in urls if owner[u] == "node3"]
    assert len(mine) > 20, len(mine)
    assert origin.hits() == len(urls)

    # Killed between two requests: nothing is in flight on it.
    nodes[2].kill()
    t_kill = time.monotonic()
    while time.monotonic() - t_kill < 4:  # past local_ttl: the others' copies expire
        sweep(client, urls, failures)
    assert not failures, failures[:10]
    # Its keys moved: each fetched once more, by another node; the others not again.
    for u in urls:
        assert origin.hits(u) == (2 if u in mine else 1), (u, origin_log(origin, u))
    assert all(fetched_by(origin, u)[1] != "node3" for u in mine)

    # Back, warm.  Within the members' ramp-up (4 s from their seeing it
    # healthy) they send it only part of its keys, the rest still going to
    # the members that took them over, which have them.
    node3 = f.start(2)
    f.wait_healthy()
    hits0 = node3.stat("cache_hit")
    for u in mine:
        assert get(nodes[0].port, u, vhost="fleet.example").body == (u + " v1").encode()
    early = node3.stat("cache_hit") - hits0
    assert early < 0.75 * len(mine), (early, len(mine))
    # After the ramp-up the others send it all of its keys again, and it
    # answers them from its store, without the origin.
    wait_until(lambda: server_status(sock)["node3"].startswith("UP"), 10, "haproxy: node3 up")
    time.sleep(4.5)
    hits0, fwd0 = node3.stat("cache_hit"), [sg.stat("cluster_fwd") for sg in nodes[:2]]
    sweep(client, urls, failures)
    for u in mine:
        for sg in (nodes[0], nodes[1], node3):
            r = get(sg.port, u, vhost="fleet.example")
            assert r.body == (u + " v1").encode(), r.body
    assert not failures, failures[:10]
    for u in urls:
        assert origin.hits(u) == (2 if u in mine else 1), (u, origin_log(origin, u))
    # Each of its keys: a hit asked directly, and one for the node that did not
    # take it over while it was away (the one that did has its own copy).
    assert node3.stat("cache_hit") - hits0 >= 2 * len(mine), (node3.stat("cache_hit"), len(mine))
    assert sum(sg.stat("cluster_fwd") for sg in nodes[:2]) - sum(fwd0) >= len(mine)
    client.close()


def test_a_stopping_node_drains_behind_haproxy(origin, fleet, haproxy, tmp_path):
    """SIGTERM: the node says draining on the members' probe, which is also
    HAProxy's health check; HAProxy and the other members take it out while
    it still serves (shutdown_delay), then it stops.  No client sees an
    error, and each of its keys is fetched once more at most, by its next
    owner (unless a copy a member kept of it, being hot, serves meanwhile)."""
    versioned(origin)
    f = fleet()
    nodes = f.start_all()
    front, sock = start_haproxy(haproxy, f, tmp_path)
    urls = ["/t/%d" % i for i in range(121)]
    client = KeepAlive(front)
    failures = []
    sweep(client, urls, failures)
    assert not failures, failures
    mine = [u for u in urls if fetched_by(origin, u)[0] == "node2"]
    assert len(mine) > 20, len(mine)
    node2 = nodes[1]
    assert node2.ctl("param.set", "shutdown_delay", "4s").returncode == 0
    node2.signal(signal.SIGTERM)

    def sick_in(sg):
        rows = sg.ctl("backend.list").stdout
        m = re.search(r"^node2\s+\S+\s+(\S+)", rows, re.M)
        return m is not None and m.group(1) == "sick"

    def taken_out():
        sweep(client, urls, failures)
        for sg in (nodes[0], nodes[2]):  # their own clients, for node2's keys
            for u in mine[:10]:
                try:
                    r = httpc.fetch(sg.port, "GET", u, vhost="fleet.example")
                    if r.status != 200 or r.body != (u + " v1").encode():
                        failures.append((sg.port, u, r.status))
                except (OSError, httpc.Incomplete) as e:
                    failures.append((sg.port, u, repr(e)))
        return (server_status(sock)["node2"].startswith("DOWN") and sick_in(nodes[0])
                and sick_in(nodes[2]))

    wait_until(taken_out, 10, "haproxy and the members to take node2 out", interval=0.1)
    assert node2.alive(), "node2 stopped before it was taken out"
    t0 = time.monotonic()
    while node2.alive() and time.monotonic() - t0 < STOP_TIMEOUT:
        sweep(client, urls, failures)
    node2.proc.wait(STOP_TIMEOUT)
    node2.stopped = True
    assert node2.proc.returncode == 0, node2.log_tail()
    sweep(client, urls, failures)
    assert not failures, failures[:10]
    for u in urls:
        assert origin.hits(u) <= (2 if u in mine else 1), (u, origin_log(origin, u))
    assert all(by in ("node1", "node3") for u in mine for by in fetched_by(origin, u)[1:])
    client.close()


def test_all_other_members_down_then_the_origin(origin, fleet):
    """The others killed: this node's forwards to them fail and are tried
    again, then it owns every key; and with itself draining as well, no
    member is usable and it fetches from the origin directly."""
    versioned(origin)
    f = fleet()
    nodes = f.start_all()
    urls = ["/z/%d" % i for i in range(60)]
    for u in urls:
        get(nodes[0].port, u)
    theirs = [u for u in urls if fetched_by(origin, u)[0] != "node1"]
    assert len(theirs) > 20, len(theirs)
    nodes[1].kill()
    nodes[2].kill()
    # At once, before node1's probes have seen them go: each forward fails,
    # and the fetch goes on to the next member, at last node1 itself.
    t0 = time.monotonic()
    for u in theirs:
        assert get(nodes[0].port, u).body == (u + " v1").encode()
    assert time.monotonic() - t0 < 10
    assert all(origin.hits(u) == 2 and fetched_by(origin, u)[1] == "node1" for u in theirs)
    f.wait_healthy()
    owner0 = nodes[0].stat("cluster_owner")
    fresh = ["/z2/%d" % i for i in range(30)]
    for u in fresh:
        assert get(nodes[0].port, u).body == (u + " v1").encode()
    assert nodes[0].stat("cluster_owner") - owner0 == len(fresh)
    # node1 draining too: its own probe says so and its ring has no member left.
    assert nodes[0].ctl("param.set", "shutdown_delay", "4s").returncode == 0
    nodes[0].signal(signal.SIGTERM)
    wait_until(lambda: "sick" in nodes[0].ctl("backend.list").stdout.split("node1", 1)[1][:60],
               5, "node1 to see itself draining")
    alone0 = nodes[0].stat("cluster_alone")
    last = ["/z3/%d" % i for i in range(10)]
    for u in last:
        assert get(nodes[0].port, u).body == (u + " v1").encode()
        assert fetched_by(origin, u) == ["node1"]
    assert nodes[0].stat("cluster_alone") - alone0 == len(last)
    nodes[0].proc.wait(STOP_TIMEOUT)
    nodes[0].stopped = True
    assert nodes[0].proc.returncode == 0


# -- (d) no loops ----------------------------------------------------------------

def test_a_request_crosses_one_member_at_most(origin, fleet, haproxy, tmp_path):
    versioned(origin)
    f = fleet()
    # Broken peer lists: node1 swaps node2's and node3's addresses; node2 sends
    # node3's keys into HAProxy, which drops the hop header on the way (only
    # the Via mark tells) and may hand them back to node2 itself; node3 calls
    # node1 by its own address.
    good = f.ports
    front_hp = free_port()
    f.texts = [
        cluster_policy(origin.port, [good[0], good[2], good[1]]),
        cluster_policy(origin.port, [good[0], good[1], front_hp]),
        cluster_policy(origin.port, [good[2], good[1], good[2]]),
    ]
    nodes = [f.start(i) for i in range(3)]
    for sg in nodes:  # a request waiting on its own fetch would show as a 30 s stall
        assert sg.ctl("param.set", "coalesce_timeout", "30s").returncode == 0
    sock = tmp_path / "haproxy.sock"
    conf = haproxy_cluster_conf(front_hp, f.front, sock).replace(
        "    balance roundrobin",
        "    balance roundrobin\n    http-request del-header X-Surogat-Hop")
    haproxy(conf)
    wait_until(lambda: listening(front_hp) and os.path.exists(sock), 10, "haproxy")
    wait_until(lambda: server_status(sock) == {n: "UP" for n in f.names}, 10, "haproxy up")
    f.wait_healthy()
    time.sleep(1.5)  # node2's "node3", HAProxy, came up after node2: its rampup
    urls = ["/l/%d" % i for i in range(90)]
    for k, u in enumerate(urls):
        first = k % 3  # each node is asked first for a third of the URLs
        for sg in nodes[first:] + nodes[:first]:
            t0 = time.monotonic()
            get(sg.port, u, timeout=10)
            assert time.monotonic() - t0 < 5, (u, sg.port)
    reqs = origin.reqs()
    assert reqs
    for r in reqs:
        marks = sum(v.count("(surogat fleet)") for v in r.headers_all("Via"))
        assert marks <= 1, (r.target, r.headers_all("Via"))
    assert origin.hits() <= 2 * len(urls)
    # Each broken path was taken: through HAProxy, and back to node3 itself.
    assert backend_requests(sock) >= 3
    assert "came back to it" in nodes[2].log_tail(100)
    assert sum(sg.stat("cluster_crossed") for sg in nodes) >= 30
    assert sum(sg.stat("cluster_fwd") for sg in nodes) >= 30


def sign(method, host, url, ts, sender="node1", body=b""):
    msg = ("surogat-hop-1\nfleet\n%s\n%s\n%s\n%s\n%s\n" % (sender, ts, method, host, url)).encode()
    mac = hmac.new(SECRET.encode(), msg + body, hashlib.sha256).hexdigest()[:32]
    return "%s %s %s" % (sender, ts, mac)


def test_hop_header_signed_or_stripped(origin, fleet):
    versioned(origin)
    f = fleet()
    nodes = f.start_all()
    # Find a URL node1 does not own: asked at node1, node1 forwards it.
    for i in range(50):
        u = "/h/%d" % i
        get(nodes[0].port, u)
        if fetched_by(origin, u)[0] != "node1":
            break
    owner = fetched_by(origin, u)[0]
    assert owner != "node1"
    # A request with a valid hop header from node2 for one of these: node1
    # fetches it from the origin itself, never forwards it.
    fwd0 = nodes[0].stat("cluster_fwd")
    v = "/h/x-%d" % time.time_ns()
    ts = "%.3f" % time.time()
    r = get(nodes[0].port, v, headers={"X-Surogat-Hop": sign("GET", "surogat.test", v, ts,
                                                              sender="node2")})
    assert fetched_by(origin, v) == ["node1"]
    assert nodes[0].stat("cluster_fwd") == fwd0 and nodes[0].stat("cluster_crossed") >= 1
    # The same header forged (another URL than signed): removed, routed as a client's.
    w = "/h/y-%d" % time.time_ns()
    before = nodes[0].stat("cluster_hop_refused")
    get(nodes[0].port, w, headers={"X-Surogat-Hop": sign("GET", "surogat.test", v, ts)})
    assert nodes[0].stat("cluster_hop_refused") == before + 1
    assert "X-Surogat-Hop" not in [n for n, _ in origin.last(w).headers]
    # A forged cluster message: 403, nothing purged.
    r = httpc.fetch(nodes[1].port, "PURGE", CLU_PATH, body=b"op x 1 key 0 a\n",
                    headers={"X-Surogat-Hop": "node1 %s %s" % (ts, "0" * 32)})
    assert r.status == 403, r.body
    # A genuine one (as another member would send it) is applied.
    body = ("op node9-1 %.6f url 0 %s\n" % (time.time(), u)).encode()
    host = "127.0.0.1:%d" % nodes[1].port
    r = httpc.fetch(nodes[1].port, "PURGE", CLU_PATH, body=body, vhost=host,
                    headers={"X-Surogat-Hop": sign("PURGE", host, CLU_PATH, ts, body=body)})
    assert r.status == 200 and r.body.startswith(b"applied "), r.body


# -- the probe, errors, single-node bans -------------------------------------------

def test_members_probe_ready_then_draining(origin, fleet):
    versioned(origin)
    f = fleet()
    nodes = f.start_all()
    r = httpc.fetch(nodes[0].port, "GET", CLU_PATH)
    assert r.status == 200 and b"node1" in r.body, r.body
    assert nodes[0].ctl("param.set", "shutdown_delay", "3s").returncode == 0
    nodes[0].signal(signal.SIGTERM)
    wait_until(lambda: httpc.fetch(nodes[0].port, "GET", CLU_PATH).status == 503, 3, "draining")
    # The others see it sick and route its keys elsewhere.
    wait_until(lambda: "sick" in nodes[1].ctl("backend.list").stdout.split("node1", 1)[1][:60],
               5, "node2 to see node1 sick")
    nodes[0].proc.wait(STOP_TIMEOUT)
    nodes[0].stopped = True


@pytest.mark.parametrize("decl,msg", [
    ('cluster "c" { }', "peers: the members"),
    ('cluster "c" { peers = { n1 = "127.0.0.1" } }', 'an address is "host:port"'),
    ('cluster "c" { peers = { n1 = "127.0.0.1:1" }, origin = "nope" }',
     'origin: no backend or director "nope"'),
    ('cluster "c" { peers = { n1 = "127.0.0.1:1" }, local_ttl = "0s" }', "local_ttl must be"),
    ('cluster "c" { peers = { n1 = "127.0.0.1:1" }, local_hot = 0 }', "local_hot must be"),
    ('cluster "c" { peers = { n1 = "127.0.0.1:1" }, colour = 1 }', 'unknown field "colour"'),
    ('cluster "c" { peers = { n2 = "127.0.0.1:1" } }', '"n1"'),
    ('cluster "c" { peers = { n1 = "127.0.0.1:1" }, secret = "a", secret_file = "/x" }',
     "either secret or secret_file"),
    ('cluster "c" { peers = { n1 = "127.0.0.1:1", ["n 2"] = "127.0.0.1:2" } }',
     "a name is 1-64 letters"),
])
def test_cluster_declaration_errors(tmp_path, decl, msg):
    out = refused(tmp_path, 'backend "o" { host = "127.0.0.1", port = 1 }\n' + decl + "\n",
                  ["-p", "identity=n1"])
    assert re.search(r"bad\.lua:2: (cluster|backend)", out) and msg in out, out


def test_bans_outlive_a_restart_of_a_file_store(origin, surogat, tmp_path):
    origin.default.headers = [("Cache-Control", "max-age=300")]
    wd = tmp_path / "one"
    args = ["-s", "file,%s,16m" % (tmp_path / "one.store")]
    # The lurker off: the ban is only tested at lookup, so the object stays on disk.
    params = {"ban_lurker_sleep": "0s"}
    sg = Surogat(wd, origin.addr, params, args)
    try:
        for u in ("/x", "/y"):
            assert get(sg.port, u).status == 200
        p = sg.ctl("ban", "req.url == /x")
        assert p.returncode == 0, p.stdout
        assert "req.url" in (wd / "bans").read_text()
        sg.proc.kill()
        sg.proc.wait(10)
        sg.kill()
        sg = Surogat(wd, origin.addr, params, args, port=sg.port)
        r = get(sg.port, "/y")
        assert last_cache_status(r).startswith("surogat; hit"), r.headers  # the store is warm
        get(sg.port, "/x")
        assert origin.hits("/x") == 2 and origin.hits("/y") == 1
        assert "req.url == \"/x\"" in sg.ctl("ban.list").stdout
    finally:
        sg.stop()
