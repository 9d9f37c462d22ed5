"""The fleet: the shard director inside one surogatd, and a real HAProxy
(etc/haproxy-fleet.cfg) in front of several surogatd nodes.

Shard director: keys spread over three origins and stay put, across a
restart with the backends listed in another order; a backend whose probe
fails gives up only its own keys, and takes them back (ramping up when
rampup is set); the key is the cache key, hash_data included; bad
declarations name their file and line.

Health: the admin listener's /health answers 200 "ok", then 503
"draining" from SIGTERM on while the node serves on for shutdown_delay.

HAProxy: 300 URLs through HAProxy reach the origin once each in all (each
URL lives on one node); a node given SIGTERM says draining, HAProxy takes
it out, and every request keeps succeeding, only its URLs moving."""

import os
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

import httpc
from conftest import REPO, free_port, listening, run_surogatd, wait_until
from cstatus import is_hit

HAPROXY = shutil.which("haproxy") or "/usr/sbin/haproxy"


def backend_rows(sg):
    p = sg.ctl("backend.list")
    assert p.returncode == 0, p.stdout + p.stderr
    # the backends: the lines up to the blank one before the directors
    rows = p.stdout.split("\n\n")[0].splitlines()[1:]
    return {f[0]: f for f in (l.split() for l in rows if l.strip())}


PROBE = 'probe = { url = "/health", interval = 0.2, timeout = 0.5, window = 3, threshold = 2 }'


def fleet_policy(ports, order=(0, 1, 2), extra="", hooks='function recv(req) return "pass" end'):
    backends = "\n".join('backend "o%d" { host = "127.0.0.1", port = %d, %s }'
                         % (i, ports[i], PROBE) for i in order)
    names = ", ".join('"o%d"' % i for i in order)
    return "%s\ndirector \"fleet\" { type = \"shard\", backends = { %s }%s }\n" \
           "route { to = \"fleet\" }\n%s\n" % (backends, names, extra, hooks)


def start(surogat, tmp_path, text, name="fleet.lua", params=None, args=()):
    p = tmp_path / name
    p.write_text(text)
    sg = surogat(params=params, args=["-f", str(p)] + list(args))
    return sg


def tagged(n, origins):
    os_ = origins(n)
    for i, o in enumerate(os_):
        o.default.headers = [("X-Origin", "o%d" % i), ("Cache-Control", "max-age=60")]
        o.route("/health", body=b"ok")
    return os_


def placement(sg, urls, headers=None):
    out = {}
    for u in urls:
        r = sg.get(u, headers=headers)
        assert r.status == 200, (u, r)
        out[u] = r.header("X-Origin")
    return out


def all_healthy(sg, names):
    rows = backend_rows(sg)
    return all(rows[n][2] == "healthy" for n in names)


def test_shard_spreads_keys_keeps_them_and_moves_only_a_sick_ones(origins, surogat, tmp_path):
    os_ = tagged(3, origins)
    ports = [o.port for o in os_]
    sg = start(surogat, tmp_path, fleet_policy(ports))
    wait_until(lambda: all_healthy(sg, ["o0", "o1", "o2"]), 5, "three healthy backends")
    urls = ["/k%d" % i for i in range(300)]
    first = placement(sg, urls)
    counts = {n: list(first.values()).count(n) for n in ("o0", "o1", "o2")}
    assert all(60 < c < 140 for c in counts.values()), counts  # about 100 each
    assert placement(sg, urls) == first  # stable

    # o1's probe fails: only its keys move, spread over the other two.
    os_[1].route("/health", status=500, body=b"down")
    wait_until(lambda: backend_rows(sg)["o1"][2] == "sick", 5, "o1 sick")
    after = placement(sg, urls)
    moved = {u for u in urls if after[u] != first[u]}
    assert moved == {u for u in urls if first[u] == "o1"}, sorted(moved)[:10]
    assert {after[u] for u in moved} == {"o0", "o2"}

    # Back: it takes exactly its keys again (no rampup declared).
    os_[1].route("/health", body=b"ok")
    wait_until(lambda: backend_rows(sg)["o1"][2] == "healthy", 5, "o1 back")
    assert placement(sg, urls) == first

    # Another process, the backends in another order: the same placement.
    assert sg.stop() == 0
    sg2 = start(surogat, tmp_path, fleet_policy(ports, order=(2, 0, 1)), name="fleet2.lua")
    wait_until(lambda: all_healthy(sg2, ["o0", "o1", "o2"]), 5, "three healthy backends")
    assert placement(sg2, urls) == first


def test_shard_key_is_the_cache_key_with_hash_data(origins, surogat, tmp_path):
    os_ = tagged(3, origins)
    hooks = """
        function hash(req) surogat.hash_data(req.http.x_lang or "") end
        """
    sg = start(surogat, tmp_path, fleet_policy([o.port for o in os_], hooks=hooks))
    wait_until(lambda: all_healthy(sg, ["o0", "o1", "o2"]), 5, "three healthy backends")
    urls = ["/p%d" % i for i in range(120)]
    en = placement(sg, urls, {"X-Lang": "en"})
    de = placement(sg, urls, {"X-Lang": "de"})
    # Two cache keys per URL, placed independently: 2/3 of URLs differ.
    differ = sum(en[u] != de[u] for u in urls)
    assert 50 < differ < 110, differ
    # Cached where they were fetched, once per key.
    assert placement(sg, urls, {"X-Lang": "en"}) == en
    assert sum(o.hits() for o in os_) - sum(o.hits("/health") for o in os_) == 240


def test_shard_a_pass_goes_where_its_lookup_would(origins, surogat, tmp_path):
    os_ = tagged(3, origins)
    hooks = 'function recv(req) if req.http.x_pass then return "pass" end end'
    sg = start(surogat, tmp_path, fleet_policy([o.port for o in os_], hooks=hooks))
    wait_until(lambda: all_healthy(sg, ["o0", "o1", "o2"]), 5, "three healthy backends")
    urls = ["/q%d" % i for i in range(90)]
    looked_up = placement(sg, urls, {"Host": "fleet.example"})
    # The same cache key: Host in another case, with its default port.
    passed = placement(sg, urls, {"Host": "FLEET.example:80", "X-Pass": "1"})
    assert passed == looked_up
    assert len(set(looked_up.values())) == 3


def test_shard_rampup_grows_a_returning_backends_share(origins, surogat, tmp_path):
    os_ = tagged(3, origins)
    sg = start(surogat, tmp_path, fleet_policy([o.port for o in os_], extra=', rampup = "4s"'))
    wait_until(lambda: all_healthy(sg, ["o0", "o1", "o2"]), 5, "three healthy backends")
    # Healthy for the first time at start: no ramp, each key on its owner at once.
    urls = ["/r%d" % i for i in range(240)]
    first = placement(sg, urls)
    mine = [u for u in urls if first[u] == "o2"]
    assert len(mine) > 40, len(mine)
    os_[2].route("/health", status=500, body=b"down")
    wait_until(lambda: backend_rows(sg)["o2"][2] == "sick", 5, "o2 sick")
    os_[2].route("/health", body=b"ok")
    wait_until(lambda: backend_rows(sg)["o2"][2] == "healthy", 5, "o2 back")
    t_back = time.monotonic()
    early = placement(sg, mine)
    t_early = time.monotonic() - t_back
    share = sum(v == "o2" for v in early.values()) / len(mine)
    # Less than the elapsed fraction allows (plus the probe's 0.2 s lag).
    assert share <= (t_early + 0.4) / 4 + 0.1, (share, t_early)
    # Its keys it does not take yet go to the others; theirs never move to it.
    assert all(placement(sg, [u])[u] == first[u] for u in urls[:60] if first[u] != "o2")
    wait_until(lambda: time.monotonic() - t_back > 4.5, 6, "the ramp to end")
    assert placement(sg, urls) == first


def refused(tmp_path, policy, args=()):
    """What surogatd -C says of a policy it must refuse (exit status 2)."""
    p = tmp_path / "bad.lua"
    p.write_text(policy)
    r = run_surogatd(["-C", "-f", str(p)] + list(args))
    assert r.returncode == 2, r
    return r.stdout + r.stderr


@pytest.mark.parametrize("decl,msg", [
    ('director "d" { type = "shard", backends = { "a" }, balance_factor = 0.5 }',
     'balance_factor must be 0 (no bound) or at least 1'),
    ('director "d" { type = "shard", backends = { "a" }, weights = { 1, 2 } }',
     'weights: one per backend'),
    ('director "d" { type = "shard", backends = { "a" }, rampup = "soon" }',
     'rampup must be a duration'),
    ('director "d" { type = "shard", backends = { "a" }, key = "body" }',
     "key 'body' is not url, hash, header:NAME or cookie:NAME"),
    ('director "r" { type = "round_robin", backends = { "a" } }\n'
     'director "d" { type = "shard", backends = { "a", "r" } }',
     'r is a director; a shard\'s members are backends'),
    ('director "d" { type = "round_robin", backends = { "a" }, rampup = "30s" }',
     "are a shard director's"),
    ('director "d" { type = "shard", backends = { "a" }, replicas = 5000 }',
     'replicas must be a number from 1 to 4096'),
])
def test_shard_declaration_errors_name_file_and_line(tmp_path, decl, msg):
    out = refused(tmp_path, 'backend "a" { host = "127.0.0.1", port = 1 }\n' + decl + "\n")
    assert re.search(r"bad\.lua:[23]: director \"?d\"?:", out) and msg in out, out


def admin_get(port, path):
    return httpc.fetch(port, "GET", path, {"Host": "127.0.0.1"})


def test_health_says_draining_from_sigterm_while_serving_on(origin, surogat):
    origin.route("/x", body=b"x")
    mport = free_port()
    sg = surogat(params={"shutdown_delay": "3s"}, args=["-M", "127.0.0.1:%d" % mport])
    wait_until(lambda: listening(mport), 10, "the admin listener")
    r = admin_get(mport, "/health")
    assert (r.status, r.body) == (200, b"ok\n"), r
    assert r.header("Cache-Control") == "no-store"
    t0 = time.monotonic()
    sg.signal(signal.SIGTERM)
    wait_until(lambda: admin_get(mport, "/health").status == 503, 2, "/health draining")
    r = admin_get(mport, "/health")
    assert r.body == b"draining\n", r
    # Still serving clients meanwhile, each connection closed after its answer.
    r = sg.get("/x")
    assert r.status == 200 and r.body == b"x" and r.header("Connection") == "close", r
    sg.proc.wait(10)
    sg.stopped = True
    assert sg.proc.returncode == 0
    assert time.monotonic() - t0 >= 2.9
    assert "serving on for 3s" in sg.log_tail()


def test_second_sigterm_cuts_the_delay_short(origin, surogat):
    sg = surogat(params={"shutdown_delay": "60s"})
    t0 = time.monotonic()
    stop_at_once(sg)
    assert time.monotonic() - t0 < 10
    assert "serving on for 60s" in sg.log_tail()
    assert "cut shutdown_delay short" in sg.log_tail()


# -- HAProxy in front ---------------------------------------------------------

def haproxy_conf(front, nodes, sock):
    """etc/haproxy-fleet.cfg for loopback: the front port, each node's client
    and admin ports, the runtime socket and the log in a test directory, and
    fewer connections."""
    text = (REPO / "etc" / "haproxy-fleet.cfg").read_text()
    text = text.replace("log /dev/log local0 info", "log stderr format raw local0 info")
    text = text.replace("stats socket /run/haproxy/fleet.sock", "stats socket %s" % sock)
    text = text.replace("bind :80", "bind 127.0.0.1:%d" % front)
    text = text.replace("maxconn 20000", "maxconn 1000")  # within a test machine's fd limit
    for i, (port, mport) in enumerate(nodes, 1):
        text, n = re.subn(r"server node%d \S+ check port \d+" % i,
                          "server node%d 127.0.0.1:%d check port %d" % (i, port, mport), text)
        assert n == 1, "no server node%d line in etc/haproxy-fleet.cfg" % i
    return text


def haproxy_cmd(sock, cmd):
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(5)
        s.connect(str(sock))
        s.sendall(cmd.encode() + b"\n")
        out = b""
        while True:
            d = s.recv(65536)
            if not d:
                return out.decode()
            out += d


def server_status(sock):
    """{node: status} from HAProxy's "show stat" (UP, DOWN, MAINT, "UP 1/2" ...)."""
    out = {}
    lines = haproxy_cmd(sock, "show stat").splitlines()
    cols = lines[0].lstrip("# ").split(",")
    for line in lines[1:]:
        f = dict(zip(cols, line.split(",")))
        if f.get("pxname") == "surogat" and f.get("svname", "").startswith("node"):
            out[f["svname"]] = f["status"]
    return out


@pytest.fixture
def haproxy(tmp_path):
    if not os.access(HAPROXY, os.X_OK):
        pytest.skip("haproxy not installed (scripts/deps.sh)")
    procs = []

    def run(conf_text):
        cf = tmp_path / "haproxy.cfg"
        cf.write_text(conf_text)
        chk = subprocess.run([HAPROXY, "-c", "-f", str(cf)], capture_output=True, text=True,
                             timeout=10)
        assert chk.returncode == 0, chk.stdout + chk.stderr
        log = open(tmp_path / "haproxy.log", "wb")
        p = subprocess.Popen([HAPROXY, "-db", "-f", str(cf)], stdin=subprocess.DEVNULL,
                             stdout=log, stderr=subprocess.STDOUT)
        procs.append((p, log))
        return p

    yield run
    for p, log in procs:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        log.close()


class KeepAlive:
    """A client on one keep-alive connection, as a browser or a front proxy
    is: HAProxy counts a request in flight on its server until the stream
    is released, which a closing connection does only after the next one
    may already have been balanced."""

    def __init__(self, port):
        self.port = port
        self.c = None

    def get(self, path):
        if self.c is None:
            self.c = httpc.Conn(self.port)
        try:
            self.c.request("GET", path, host="fleet.example")
            r = self.c.read_final("GET")
        except BaseException:
            self.close()
            raise
        if "close" in (r.header("Connection") or "").lower():
            self.close()
        return r

    def close(self):
        if self.c is not None:
            self.c.close()
            self.c = None


@pytest.mark.parametrize("name", ["haproxy-fleet.cfg", "haproxy-cluster.cfg"])
def test_shipped_haproxy_config_is_valid(name):
    if not os.access(HAPROXY, os.X_OK):
        pytest.skip("haproxy not installed (scripts/deps.sh)")
    r = subprocess.run([HAPROXY, "-c", "-f", str(REPO / "etc" / name)],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stdout + r.stderr


def test_haproxy_in_front_of_three_nodes(origin, surogat, haproxy, tmp_path):
    origin.default.headers = [("Cache-Control", "max-age=300")]
    nodes = []
    for i in range(1, 4):
        mport = free_port()
        hook = tmp_path / ("node%d.lua" % i)
        hook.write_text('function deliver(req, resp) resp.http.x_node = "node%d" end\n' % i)
        sg = surogat(params={"shutdown_delay": "10s", "admin_http": "127.0.0.1:%d" % mport},
                     args=["-f", str(hook)])
        wait_until(lambda: listening(mport), 10, "node%d's admin listener" % i)
        sg.mport = mport
        nodes.append(sg)
    front, sock = free_port(), tmp_path / "haproxy.sock"
    hp = haproxy(haproxy_conf(front, [(n.port, n.mport) for n in nodes], sock))
    wait_until(lambda: listening(front) and os.path.exists(sock), 10, "haproxy to listen")
    wait_until(lambda: server_status(sock) == {"node1": "UP", "node2": "UP", "node3": "UP"},
               10, "haproxy to see three nodes up")

    client = KeepAlive(front)

    def get(u):
        r = client.get(u)
        assert r.status == 200, (u, r)
        return r

    urls = ["/u/%d" % i for i in range(300)]
    where = {u: get(u).header("X-Node") for u in urls}
    again = {}
    for u in urls:
        r = get(u)
        again[u] = r.header("X-Node")
        assert is_hit(r), (u, where[u], r)  # the same node, which has it
    assert again == where
    assert all(origin.hits(u) == 1 for u in urls)  # each URL fetched once in all
    per = {n: list(where.values()).count(n) for n in ("node1", "node2", "node3")}
    assert all(per[n] > 40 for n in per), per
    for i, sg in enumerate(nodes, 1):
        assert sg.stat("cache_miss") == per["node%d" % i]

    # SIGTERM node2: it says draining, HAProxy takes it out while it still
    # listens, and requests keep succeeding throughout.
    node2 = nodes[1]
    node2.signal(signal.SIGTERM)
    wait_until(lambda: admin_get(node2.mport, "/health").status == 503, 3, "node2 draining")
    failures = []

    def sweep():
        for u in urls:
            try:
                r = client.get(u)
                if r.status != 200:
                    failures.append((u, r.status))
            except (OSError, httpc.Incomplete) as e:
                failures.append((u, repr(e)))

    def node2_down():
        sweep()
        return server_status(sock)["node2"].startswith("DOWN")

    wait_until(node2_down, 8, "haproxy to mark node2 down", interval=0.1)
    assert node2.alive(), "node2 stopped before haproxy took it out"
    sweep()
    node2.proc.wait(15)
    node2.stopped = True
    assert node2.proc.returncode == 0
    sweep()
    assert not failures, failures[:10]
    # Only node2's URLs moved, each fetched once more by its new node.
    mine = {u for u in urls if where[u] == "node2"}
    assert all(origin.hits(u) == (2 if u in mine else 1) for u in urls), \
        [(u, origin.hits(u)) for u in urls if origin.hits(u) != (2 if u in mine else 1)][:10]
    after = {u: get(u).header("X-Node") for u in urls}
    assert all(after[u] == where[u] for u in urls if u not in mine)
    assert hp.poll() is None
    client.close()
    for sg in (nodes[0], nodes[2]):
        stop_at_once(sg)


def stop_at_once(sg):
    """SIGTERM, and again once shutdown_delay started: exit without the wait."""
    sg.signal(signal.SIGTERM)
    wait_until(lambda: "serving on for" in sg.log_tail(), 5, "the delay to start")
    sg.signal(signal.SIGTERM)
    sg.proc.wait(10)
    sg.stopped = True
    assert sg.proc.returncode == 0
