"""Per-backend counters and responses by status class, end to end: named
backends that fail each in their own way (refuse connections, let a
connect time out, never answer, stall in the body, answer garbage, answer
500, run out of connections) and one that works, checked in `surogatctl
stats` (flat, -l, -j, patterns, -r), in /metrics (labelled families,
through the real Prometheus parser) and in /status.json; health with its
probe history and time of last change; counters kept across a reload;
interim answers, a refused 101 and a refused framing, and a PROXY pool
over a Unix socket."""

import json
import os
import re
import shutil
import signal
import socket
import tempfile
import textwrap
import threading
import time

import pytest

import httpc
from conftest import REPO, free_port, listening, wait_until
from origins import Origin

parser = pytest.importorskip("prometheus_client.parser",
                             reason="python3-prometheus-client not installed (scripts/deps.sh)")

KINDS = ["connect", "connect_timeout", "first_byte_timeout", "between_bytes_timeout",
         "bad_resp", "busy"]
CLASSES = ["1xx", "2xx", "3xx", "4xx", "5xx"]

POLICY = """
    backend "good" { host = "127.0.0.1", port = %(good)d,
                     probe = { url = "/health", interval = 0.2, timeout = 1, window = 8,
                               threshold = 3 } }
    backend "flaky" { host = "127.0.0.1", port = %(good)d,
                      probe = { url = "/down", interval = 0.2, timeout = 1, window = 4,
                                threshold = 2, initial = 4 } }
    backend "tight" { host = "127.0.0.1", port = %(good)d, max_connections = 1 }
    backend "refused" { host = "127.0.0.1", port = %(dead)d }
    backend "blackhole" { host = "127.0.0.1", port = %(hole)d, connect_timeout = 0.5 }
    backend "slow" { host = "127.0.0.1", port = %(slow)d, first_byte_timeout = 0.5,
                     between_bytes_timeout = 0.5 }
    backend "garbage" { host = "127.0.0.1", port = %(garbage)d }
    backend "err" { host = "127.0.0.1", port = %(err)d }
    route { path = "^/tight/", to = "tight" }
    route { path = "^/refused/", to = "refused" }
    route { path = "^/blackhole/", to = "blackhole" }
    route { path = "^/slow/", to = "slow" }
    route { path = "^/garbage/", to = "garbage" }
    route { path = "^/err/", to = "err" }
    route { to = "good" }
    function recv(req) return "pass" end
"""


class Blackhole:
    """A listener that never accepts, its queue filled: Linux drops further
    SYNs, so a connect to it times out instead of being refused."""

    def __init__(self):
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(0)
        self.port = self.lsock.getsockname()[1]
        self.fill = []
        for _ in range(4):
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", self.port))
            self.fill.append(c)
        time.sleep(0.2)

    def close(self):
        for c in self.fill:
            c.close()
        self.lsock.close()


def with_admin(surogat, **kw):
    """surogat(**kw) with an admin listener (-M) on a free port, as sg.mport."""
    mport = free_port()
    sg = surogat(**dict(kw, args=list(kw.get("args", ())) + ["-M", "127.0.0.1:%d" % mport]))
    wait_until(lambda: listening(mport), 10, "the admin listener")
    sg.mport = mport
    return sg


def admin_get(sg, path):
    return httpc.fetch(sg.mport, "GET", path, {"Host": "127.0.0.1"})


def scrape(sg):
    r = admin_get(sg, "/metrics")
    assert r.status == 200, r
    text = r.body.decode()
    out = {}
    for fam in parser.text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    out["_families"] = {f.name: f.type for f in parser.text_string_to_metric_families(text)}
    return out


def sample(m, name, **labels):
    got = [v for lb, v in m.get(name, []) if all(lb.get(k) == v for k, v in labels.items())]
    assert len(got) == 1, "%s%s: %s" % (name, labels, m.get(name))
    return got[0]


def be_rows():
    text = (REPO / "include" / "surogat" / "tbl" / "be_stats.h").read_text()
    return re.findall(r"^BESTAT\((\w+), (COUNTER|GAUGE),", text, re.M)


@pytest.fixture
def rig(origins, surogat, tmp_path):
    good, slow, garbage, err = origins(4)
    good.route("/ok", body=b"fine")
    good.route("/missing", status=404, body=b"no")
    good.route("/health", body=b"ok")
    good.route("/down", status=500, body=b"down")
    slow.route("/slow/hang", hang=True)
    slow.route("/slow/stall", body=b"x" * 1000, stall_after=10)
    garbage.route("/garbage/x", garbage=b"this is not HTTP at all\r\n\r\n")
    err.route("/err/x", status=500, body=b"boom")
    hole = Blackhole()
    text = textwrap.dedent(POLICY % {"good": good.port, "dead": free_port(), "hole": hole.port,
                                     "slow": slow.port, "garbage": garbage.port,
                                     "err": err.port})
    pol = tmp_path / "backends.lua"
    pol.write_text(text)
    sg = with_admin(surogat, args=["-f", str(pol)])
    sg.policy_path = pol
    yield sg, good
    hole.close()


def drive(sg, good):
    """One request of each kind; returns the statuses the clients got."""
    answers = []
    for path in ("/ok", "/ok", "/ok", "/missing", "/err/x", "/err/x", "/garbage/x",
                 "/refused/x", "/blackhole/x", "/slow/hang"):
        answers.append(sg.get(path, timeout=20).status)
    # A stall in the body: the head (200) is out, then the client's connection is cut.
    try:
        r = sg.get("/slow/stall", timeout=20)
        assert len(r.body) < 1000, r
    except (OSError, ValueError, AssertionError, httpc.Incomplete):
        pass
    answers.append(200)
    # Busy: "tight" allows one connection, held by a request in flight.
    hold = good.route("/tight/hold", body=b"held", hold_head=True)
    good.route("/tight/ok", body=b"fine")
    got = []
    t = threading.Thread(target=lambda: got.append(sg.get("/tight/hold", timeout=20).status))
    t.start()
    try:
        assert hold.held.wait(10), "the held request never reached the origin"
        answers.append(sg.get("/tight/ok", timeout=20).status)  # 503: max_connections
    finally:
        hold.release.set()
        t.join(20)
    answers += got
    return answers


def test_failures_by_kind_and_status_classes(rig):
    sg, good = rig
    answers = drive(sg, good)
    assert sorted(answers) == sorted([200, 200, 200, 404, 500, 500, 502, 503, 503, 504, 200,
                                      503, 200]), answers
    st = sg.stats()

    def be(name, row):
        return st["backend.%s.%s" % (name, row)]

    # Failures, each counted once and under its backend only.
    want = {("refused", "connect"): 1, ("blackhole", "connect_timeout"): 1,
            ("slow", "first_byte_timeout"): 1, ("slow", "between_bytes_timeout"): 1,
            ("garbage", "bad_resp"): 1, ("tight", "busy"): 1}
    for name in ("good", "flaky", "tight", "refused", "blackhole", "slow", "garbage", "err"):
        for kind in KINDS:
            assert be(name, "fail_" + kind) == want.get((name, kind), 0), (name, kind)
    # Requests: a connection handed out (not for the failures to connect or busy).
    assert be("good", "requests") == 4 and be("good", "reused") >= 2
    assert be("tight", "requests") == 1 and be("tight", "resp_2xx") == 1
    assert be("good", "connections") + be("good", "reused") == be("good", "requests")
    assert be("err", "requests") == 2 and be("refused", "requests") == 0
    assert be("slow", "requests") == 2 and be("garbage", "requests") == 1
    # The backends' statuses by class; the client's.
    assert [be("good", "resp_" + c) for c in CLASSES] == [0, 3, 0, 1, 0]
    assert [be("err", "resp_" + c) for c in CLASSES] == [0, 0, 0, 0, 2]
    assert [be("slow", "resp_" + c) for c in CLASSES] == [0, 1, 0, 0, 0]  # the stalled one
    assert [st["client_resp_" + c] for c in CLASSES] == [0, 5, 0, 1, 7]
    # Bytes and times: the histograms count each answered request once.
    assert be("good", "bytes_out") > 4 * len("GET /ok HTTP/1.1\r\n\r\n")
    assert be("good", "bytes_in") >= 3 * len("HTTP/1.1 200 OK\r\n\r\nfine")
    # Timed: every answer that began (the garbage too, not the hang).
    for name, n in (("good", 4), ("tight", 1), ("err", 2), ("slow", 1), ("garbage", 1),
                    ("refused", 0)):
        fb = sum(be(name, r) for r, _ in be_rows() if r.startswith("fb_time_") and r != "fb_time_us")
        tot = sum(be(name, r) for r, _ in be_rows() if r.startswith("time_") and r != "time_us")
        assert fb == tot == n, (name, fb, tot)
    assert be("slow", "time_us") >= 500000  # the stall lasted between_bytes_timeout
    assert 1 <= be("good", "open_connections") <= be("good", "connections")
    assert be("good", "busy_connections") == 0

    # Health: the probes' history, the time of the last change.
    wait_until(lambda: sg.stats()["backend.flaky.healthy"] == 0, 5, "flaky sick")
    wait_until(lambda: sg.stats()["backend.good.probe_good"] == 8, 5, "good's window full")
    st = sg.stats()
    assert st["backend.good.healthy"] == 1 and st["backend.good.happy"] == 0xff
    assert st["backend.good.probe_window"] == 8
    assert st["backend.flaky.probe_window"] == 4 and st["backend.flaky.happy"] & 0b11 == 0
    now = time.time()
    assert now - 30 < st["backend.flaky.changed"] <= now + 1
    assert st["backend.refused.happy"] == 0 and st["backend.refused.probe_window"] == 0

    # /metrics: the same numbers, as labelled families.
    m = scrape(sg)
    for name in ("good", "flaky", "tight", "refused", "blackhole", "slow", "garbage", "err"):
        for kind in KINDS:
            assert sample(m, "surogat_backend_failures_total", backend=name,
                          kind=kind) == want.get((name, kind), 0), (name, kind)
        for c in CLASSES:
            assert sample(m, "surogat_backend_responses_total", backend=name,
                          **{"class": c}) == st["backend.%s.resp_%s" % (name, c)]
        assert sample(m, "surogat_backend_requests_total", backend=name) == \
            st["backend.%s.requests" % name]
        # Every answer that began, a bad one too (garbage's).
        assert sample(m, "surogat_backend_first_byte_seconds_count", backend=name) == sum(
            st["backend.%s.%s" % (name, r)] for r, _ in be_rows()
            if r.startswith("fb_time_le") or r == "fb_time_over_10s")
    assert m["_families"]["surogat_backend_first_byte_seconds"] == "histogram"
    assert m["_families"]["surogat_backend_duration_seconds"] == "histogram"
    buckets = sorted((float(lb["le"]), v) for lb, v in m["surogat_backend_duration_seconds_bucket"]
                     if lb["backend"] == "slow")
    assert len(buckets) == 15 and buckets[-1] == (float("inf"), 1.0)
    assert dict(buckets)[0.25] == 0 and dict(buckets)[2.5] == 1  # the stall: 0.5s and a bit
    for c in CLASSES:
        assert sample(m, "surogat_responses_total", **{"class": c}) == st["client_resp_" + c]
    assert sample(m, "surogat_backend_healthy", backend="flaky") == 0
    assert sample(m, "surogat_backend_happy", backend="good") == 0xff
    assert sample(m, "surogat_backend_health_changed_timestamp_seconds",
                  backend="flaky") == st["backend.flaky.changed"]
    # Declared by the policy loaded at start, which is named "boot"; -b's by none.
    progs = {lb["backend"]: lb.get("program") for lb, _ in m["surogat_backend_requests_total"]}
    assert progs.pop("default") is None and set(progs.values()) == {"boot"}, progs

    # /status.json: the same again, per backend.
    js = json.loads(admin_get(sg, "/status.json").body)
    bes = {b["name"]: b for b in js["backends"]}
    assert list(bes) == ["default", "good", "flaky", "tight", "refused", "blackhole", "slow",
                         "garbage", "err"]
    assert bes["good"]["probe"]["history"] == "HHHHHHHH" and bes["good"]["probe"]["window"] == 8
    assert bes["flaky"]["probe"]["history"].endswith("--") and not bes["flaky"]["healthy"]
    assert bes["refused"]["probe"] is None
    assert bes["slow"]["counters"]["fail_first_byte_timeout"] == 1
    assert sum(bes["good"]["first_byte"]["buckets"]) == 4
    assert bes["good"]["program"] == "boot"


def test_stats_options(rig):
    sg, good = rig
    for _ in range(3):
        assert sg.get("/ok").status == 200
    # Patterns: globs over the whole name, '*' crossing dots; several are or'ed.
    p = sg.ctl("stats", "backend.good.*")
    assert p.returncode == 0, p.stderr
    names = [ln.split()[0] for ln in p.stdout.splitlines()]
    assert names == ["backend.good." + r for r, _ in be_rows()]
    p = sg.ctl("stats", "cache_*", "backend.*.requests")
    names = [ln.split()[0] for ln in p.stdout.splitlines()]
    assert names and all(n.startswith("cache_") or n.endswith(".requests") for n in names)
    assert "backend.err.requests" in names and "cache_hit" in names
    assert sg.ctl("stats", "no.such.*").stdout == ""
    # -l: the description from the tables.
    p = sg.ctl("stats", "-l", "client_resp_2xx", "backend.good.fail_busy")
    lines = p.stdout.splitlines()
    assert len(lines) == 2, p.stdout
    f = lines[0].split(None, 2)
    assert f[:2] == ["client_resp_2xx", "3"] and f[2] == "Responses to clients with a 2xx status."
    f = lines[1].split(None, 2)
    assert f[0] == "backend.good.fail_busy" and f[2].startswith("Requests refused because")
    # -j, -j -l.
    js = json.loads(sg.ctl("stats", "-j", "backend.good.req*").stdout)
    assert js == {"backend.good.requests": 3}
    js = json.loads(sg.ctl("stats", "-j", "-l", "uptime").stdout)
    assert js["uptime"]["kind"] == "gauge" and "started" in js["uptime"]["description"]
    assert sg.ctl("stats", "-x").returncode == 1
    # -r: rates from two samples an interval apart.
    stop = threading.Event()

    def load():
        while not stop.is_set():
            sg.get("/ok")
            time.sleep(0.02)

    t = threading.Thread(target=load)
    t.start()
    try:
        p = sg.ctl("stats", "-r", "-d", "1", "-l", "client_req", "backend.good.requests")
    finally:
        stop.set()
        t.join(10)
    assert p.returncode == 0, p.stderr
    rows = [ln.split(None, 3) for ln in p.stdout.splitlines()]
    assert [r[0] for r in rows] == ["client_req", "backend.good.requests"], p.stdout
    for r in rows:
        assert 3 <= float(r[2]) <= 60, p.stdout  # a request every 20ms or so, at most
    assert rows[0][3] == "Complete client requests received."
    p = sg.ctl("-j", "stats", "-r", "-d", "0.2", "uptime")
    js = json.loads(p.stdout)
    assert set(js) == {"uptime"} and set(js["uptime"]) == {"value", "rate"}
    assert sg.ctl("stats", "-r", "-d", "0").returncode == 2


def test_counters_survive_a_reload_and_threads(rig):
    sg, good = rig
    for _ in range(4):
        assert sg.get("/ok").status == 200
    assert sg.stats()["backend.good.requests"] == 4
    sg.policy_path.write_text(sg.policy_path.read_text() + "\n-- reloaded\n")
    sg.signal(signal.SIGHUP)
    wait_until(lambda: sg.stat("policy_reload") == 1, 5, "reload")
    # The same backend objects: their counters did not start over.
    assert sg.get("/ok").status == 200
    st = sg.stats()
    assert st["backend.good.requests"] == 5 and st["backend.good.resp_2xx"] == 5
    assert st["threads_busy"] + st["threads_idle"] == st["threads"] > 0
    assert st["uptime"] >= 0 and st["n_expired"] == 0


def test_two_programs_label_their_backends(rig, tmp_path):
    sg, good = rig
    assert sg.get("/ok").status == 200
    # A second program declares "good" otherwise: two live backends of one name.
    canary = tmp_path / "canary.lua"
    canary.write_text('backend "good" { host = "127.0.0.1", port = %d, max_connections = 2 }\n'
                      'backend "err" { host = "127.0.0.1", port = %d }\n'
                      'route { to = "good" }\n'
                      % (good.port, int(re.search(r'"err" \{ host = "127.0.0.1", port = (\d+)',
                                                  sg.policy_path.read_text()).group(1))))
    p = sg.ctl("policy.load", "canary", str(canary))
    assert p.returncode == 0, p.stdout + p.stderr
    st = sg.stats()
    assert st["backend.good@boot.requests"] == 1 and st["backend.good@canary.requests"] == 0
    assert "backend.good.requests" not in st
    # "err" is declared alike by both: one backend, both programs.
    assert "backend.err.requests" in st
    m = scrape(sg)
    assert sample(m, "surogat_backend_requests_total", backend="good", program="boot") == 1
    assert sample(m, "surogat_backend_requests_total", backend="good", program="canary") == 0
    assert sample(m, "surogat_backend_requests_total", backend="err", program="boot,canary") == 0
    js = json.loads(admin_get(sg, "/status.json").body)
    assert sorted(b["program"] for b in js["backends"] if b["name"] == "good") == [
        "boot", "canary"]


def late_final(s, req, stop):
    """100 Continue at once, the final answer never within first_byte_timeout."""
    s.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    stop.wait(3)
    return False


def test_interim_upgrade_refusals_and_proxy_pools(origin, surogat, tmp_path):
    """The counting through the backend's safety checks and PROXY pools:
    interim answers are skipped (the first byte is the final answer's, and
    silence after one is a first-byte timeout), a refused 101 is a 1xx and
    a bad response, a refused framing a bad response, each under its
    backend as backend_bad_resp counts them; a PROXY pool over a Unix
    socket reuses a connection for its own client only, and shows its
    path as its address."""
    origin.route("/i", raw=b"HTTP/1.1 100 Continue\r\n\r\n"
                           b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
                           b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    origin.route("/u", garbage=b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n"
                               b"Connection: upgrade\r\n\r\n")
    origin.route("/c", garbage=b"HTTP/1.1 200 OK\r\nTransfer-Encoding: br, chunked\r\n\r\n"
                               b"0\r\n\r\n")
    origin.route("/late", script=late_final)
    d = tempfile.mkdtemp(prefix="sg-bem-")
    path = os.path.join(d, "p.sock")
    uds = Origin(path=path, proxy=True)
    try:
        uds.route("/p/x", body=b"via the socket")
        pol = tmp_path / "safety.lua"
        pol.write_text(textwrap.dedent("""
            backend "a" { host = "127.0.0.1", port = %d, first_byte_timeout = 1 }
            backend "p" { path = "%s", proxy_protocol = 2 }
            route { path = "^/p/", to = "p" }
            route { to = "a" }
            function recv(req) return "pass" end
            """ % (origin.port, path)))
        sg = with_admin(surogat, args=["-f", str(pol)])
        assert [sg.get(u, timeout=10).status for u in ("/i", "/u", "/c", "/late")] == [
            200, 502, 502, 504]
        # Two requests on one client connection, one on another.
        with sg.conn() as c:
            for _ in range(2):
                c.request("GET", "/p/x")
                assert c.read_response("GET").status == 200
        assert sg.get("/p/x").status == 200
        st = sg.stats()

        def be(name, row):
            return st["backend.%s.%s" % (name, row)]

        assert [be("a", "resp_" + c) for c in CLASSES] == [1, 2, 0, 0, 0]
        assert be("a", "fail_bad_resp") == 2 == st["backend_bad_resp"]
        assert be("a", "fail_first_byte_timeout") == 1
        assert be("a", "fail_between_bytes_timeout") == 0
        # Timed: the three answers that came, not the one still awaited after its 100.
        fb = sum(be("a", r) for r, _ in be_rows() if r.startswith("fb_time_") and r != "fb_time_us")
        assert fb == 3 and be("a", "requests") == 4
        assert be("p", "requests") == 3 and be("p", "reused") == 1
        assert be("p", "connections") == 2 and be("p", "fail_busy") == 0
        assert len({r.conn_id for r in uds.reqs("/p/x")}) == 2
        assert [be("p", "resp_" + c) for c in CLASSES] == [0, 3, 0, 0, 0]
        js = json.loads(admin_get(sg, "/status.json").body)
        assert {b["name"]: b["address"] for b in js["backends"]}["p"] == path
    finally:
        uds.stop()
        shutil.rmtree(d, ignore_errors=True)


def test_static_backend_shows_its_kind(surogat, tmp_path):
    """A backend that answers in place (-b DIR) has no address: its kind
    stands in it, in /status.json and in /metrics' info label."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "a.txt").write_text("static")
    sg = with_admin(surogat, backend=str(root))
    assert sg.get("/a.txt").status == 200
    js = json.loads(admin_get(sg, "/status.json").body)
    assert [(b["name"], b["address"]) for b in js["backends"]] == [("default", "static")]
    m = scrape(sg)
    assert sample(m, "surogat_backend_healthy", backend="default", address="static") == 1
