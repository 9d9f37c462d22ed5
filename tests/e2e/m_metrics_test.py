"""The HTTP admin listener (-M): /metrics read by the real Prometheus text
parser (python3-prometheus-client), /status.json, and what the listener
does with requests it must refuse or cannot parse."""

import json
import re
import socket
import time

import pytest

import httpc
from conftest import REPO, free_port, listening, run_surogatd, wait_until

parser = pytest.importorskip("prometheus_client.parser",
                             reason="python3-prometheus-client not installed (scripts/deps.sh)")

CACHEABLE = {"Cache-Control": "max-age=60"}
HIST = "surogat_request_duration_seconds"


def stat_rows():
    text = (REPO / "include" / "surogat" / "tbl" / "stats.h").read_text()
    return re.findall(r"^STAT\((\w+), (COUNTER|GAUGE),", text, re.M)


def be_rows():
    text = (REPO / "include" / "surogat" / "tbl" / "be_stats.h").read_text()
    return re.findall(r"^BESTAT\((\w+), (COUNTER|GAUGE),", text, re.M)


def start(surogat, params=None, args=()):
    mport = free_port()
    sg = surogat(params=params, args=["-M", "127.0.0.1:%d" % mport] + list(args))
    wait_until(lambda: listening(mport), 10, "the admin listener on %d" % mport)
    sg.mport = mport
    return sg


def admin_get(sg, path, method="GET"):
    return httpc.fetch(sg.mport, method, path, {"Host": "127.0.0.1"})


def scrape(sg):
    """{sample name: [(labels, value)]} from /metrics, through the real parser."""
    r = admin_get(sg, "/metrics")
    assert r.status == 200, r
    assert r.header("Content-Type").startswith("text/plain; version=0.0.4"), r
    text = r.body.decode()
    types = re.findall(r"^# TYPE (\S+) ", text, re.M)
    assert len(types) == len(set(types)), "a family twice: %s" % sorted(
        t for t in set(types) if types.count(t) > 1)
    fams = list(parser.text_string_to_metric_families(text))
    assert fams, "no metric families in %r" % r.body[:200]
    names = [f.name for f in fams]
    assert len(names) == len(set(names)), "two families under one name: %s" % sorted(
        n for n in set(names) if names.count(n) > 1)
    out = {}
    for fam in fams:
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    out["_families"] = {f.name: f.type for f in fams}
    return out


def one(m, name):
    assert name in m, "no sample %s in /metrics" % name
    assert len(m[name]) == 1, m[name]
    return m[name][0][1]


def test_metrics_count_hits_misses_and_latency(origin, surogat):
    origin.route("/a", body=b"A" * 1000, headers=CACHEABLE)
    origin.route("/b", body=b"B" * 5000, headers=CACHEABLE)
    origin.route("/p", body=b"private", headers={"Cache-Control": "no-store"})
    sg = start(surogat, args=["-s", "malloc,64m"])
    for path, n in (("/a", 6), ("/b", 2), ("/p", 3)):
        for _ in range(n):
            assert sg.get(path).status == 200
    # A client connection's close is counted when the server sees it, which can
    # be a moment after the client let go: wait for all 11 so that the two
    # readings below agree on the session counters.
    wait_until(lambda: sg.stat("sess_closed") == 11, 5, "11 client sessions closed")
    m = scrape(sg)

    # 11 requests: /a 1 miss + 5 hits, /b 1 miss + 1 hit, /p 1 miss, then its
    # hit-for-miss marker sends the other 2 forward.
    assert one(m, "surogat_client_req_total") == 11
    assert one(m, "surogat_cache_hit_total") == 6
    assert one(m, "surogat_cache_miss_total") == 3
    assert one(m, "surogat_cache_hitmiss_total") == 2
    assert one(m, "surogat_cache_hit_ratio") == pytest.approx(6 / 9, abs=1e-5)
    assert m["_families"]["surogat_cache_hit"] == "counter"
    assert m["_families"]["surogat_n_object"] == "gauge"

    # The histogram: one observation per request, cumulative buckets.
    assert m["_families"][HIST] == "histogram"
    buckets = sorted(((float(lb["le"]), v) for lb, v in m[HIST + "_bucket"]))
    assert buckets[-1][0] == float("inf")
    assert len(buckets) == 15
    counts = [v for _, v in buckets]
    assert counts == sorted(counts), "buckets not cumulative: %s" % buckets
    assert counts[-1] == one(m, HIST + "_count") == 11
    assert 0 < one(m, HIST + "_sum") < 11 * 10

    # Backends and stores as labels.
    (lb, v), = m["surogat_backend_healthy"]
    assert lb == {"backend": "default", "address": origin.addr} and v == 1
    (lb, size), = m["surogat_store_size_bytes"]
    assert lb == {"store": "s0", "kind": "malloc"} and size == 64 << 20
    (_, used), = m["surogat_store_used_bytes"]
    assert 6000 <= used < 64 << 20  # two bodies of 1000 and 5000 bytes, plus their heads
    (_, fill), = m["surogat_store_fill_ratio"]
    assert fill == pytest.approx(used / size, rel=1e-3)

    # Every counter row is exposed with its value, and agrees with surogatctl stats.
    st = sg.stats()
    for name, kind in stat_rows():
        # Shown as the histogram, as surogat_responses_total{class}, as surogat_uptime_seconds.
        if name.startswith(("req_time", "mon_", "client_resp_")) or name == "uptime":
            continue
        metric = "surogat_%s%s" % (name, "_total" if kind == "COUNTER" else "")
        if name.startswith("wtr_"):
            # The waiter's own: the scrape itself wakes it, and it may look
            # once more before the second reading.
            assert 0 <= one(m, metric) <= st[name], metric
        elif kind == "COUNTER" or name in ("n_object", "n_objecthead", "sto_bytes"):
            assert one(m, metric) == st[name], metric
        else:
            assert metric in m, metric


def test_latency_lands_in_its_bucket(origin, surogat):
    origin.route("/slow", body=b"slow", delay=0.3)
    origin.route("/fast", body=b"fast", headers=CACHEABLE)
    sg = start(surogat)
    assert sg.get("/fast").status == 200
    assert sg.get("/slow").status == 200
    for _ in range(3):
        assert sg.get("/fast").status == 200
    m = scrape(sg)
    b = {float(lb["le"]): v for lb, v in m[HIST + "_bucket"]}
    assert b[float("inf")] == 5
    # The slow request took 0.3 s and more: above 0.25, within 1; the others were quicker.
    assert b[0.25] == 4, b
    assert b[1.0] == 5, b
    assert one(m, HIST + "_sum") >= 0.3


def test_status_json(origin, surogat):
    origin.route("/big", body=b"x" * 200000, headers=CACHEABLE)
    origin.route("/small", body=b"y" * 10, headers=CACHEABLE)
    sg = start(surogat)
    for _ in range(40):
        assert sg.get("/small").status == 200
    assert sg.get("/big").status == 200
    r = admin_get(sg, "/status.json")
    assert r.status == 200 and r.header("Content-Type") == "application/json", r
    assert r.header("Cache-Control") == "no-store"
    st = json.loads(r.body)
    c = st["counters"]
    assert c["cache_hit"] == 39 and c["cache_miss"] == 2 and c["client_req"] == 41
    assert st["hit_ratio"] == pytest.approx(39 / 41, abs=1e-5)
    assert sum(st["latency"]["buckets"]) == 41
    assert len(st["latency"]["bounds"]) == len(st["latency"]["buckets"]) - 1
    (be,) = st["backends"]
    assert (be["name"], be["address"], be["healthy"], be["program"]) == (
        "default", origin.addr, True, "")
    assert be["counters"]["requests"] == 2 and be["counters"]["resp_2xx"] == 2, be
    assert sum(be["first_byte"]["buckets"]) == 2 and be["probe"] is None
    assert [s["name"] for s in st["stores"]] == ["s0"] and st["stores"][0]["used"] > 200000
    # 41 requests, one in 8 sampled per worker: /small must lead the table.
    items = st["top_urls"]["items"]
    assert items and items[0]["url"] == "/small", items
    assert st["top_urls"]["sample"] == 8
    big = st["biggest"]
    assert [o["bytes"] for o in big] == [200000, 10], big
    assert big[0]["key"].endswith(" /big") and big[0]["status"] == 200
    assert 0 < big[0]["ttl"] <= 60


def test_ctl_stats_json_has_every_counter(origin, surogat):
    sg = start(surogat)
    assert sg.get("/").status == 200
    p = sg.ctl("stats", "-j")
    assert p.returncode == 0, p.stderr
    js = json.loads(p.stdout)
    names = [n for n, _ in stat_rows()]
    assert list(js)[:len(names)] == names
    # Then each backend's rows, as backend.NAME.ROW.
    assert list(js)[len(names):] == ["backend.default." + n for n, _ in be_rows()]
    assert js["backend.default.requests"] == 1 and js["backend.default.resp_2xx"] == 1
    assert js["client_req"] == 1 and js["req_time_le_500us"] + js["req_time_le_1ms"] + sum(
        js[n] for n in names if n.startswith("req_time_") and n != "req_time_us") >= 1


def raw(port, data, timeout=5.0):
    """Send bytes, return what comes back until the server closes (or timeout)."""
    out = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                b = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not b:
                break
            out += b
    return out


def status_of(resp):
    m = re.match(rb"HTTP/1\.[01] (\d{3}) ", resp)
    return int(m.group(1)) if m else None


def test_refused_and_malformed_requests(origin, surogat):
    sg = start(surogat)
    p = sg.mport
    r = admin_get(sg, "/nope")
    assert r.status == 404 and b"/metrics" in r.body
    r = admin_get(sg, "/metrics", method="HEAD")
    assert r.status == 200 and r.body == b""
    r = httpc.fetch(p, "POST", "/metrics", {"Host": "x"}, b"abc")
    assert r.status == 405 and r.header("Allow") == "GET, HEAD"
    assert status_of(raw(p, b"DELETE / HTTP/1.1\r\nHost: x\r\n\r\n")) == 405
    assert status_of(raw(p, b"GET /metrics/../etc HTTP/1.1\r\nHost: x\r\n\r\n")) == 404
    assert status_of(raw(p, b"GET /status.json?x=%00 HTTP/1.0\r\n\r\n")) == 200

    assert status_of(raw(p, b"GET //metrics HTTP/1.1\r\nHost: x\r\n\r\n")) == 404
    assert status_of(raw(p, b"GET http://h/metrics HTTP/1.1\r\n\r\n")) == 200

    # Garbage: each answered 400, or 413 for a body, never a crash.
    for junk in (b"GARBAGE\r\n\r\n",
                 b"GET / HTTP/9.9\r\n\r\n",
                 b"\x00\x01\x02\xff\xfe\r\n\r\n",
                 b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\n\r\n",
                 b"GET / HTTP/1.1\r\n" + b"X: " + b"b" * 50000 + b"\r\n\r\n",
                 b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n",
                 b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                 b"GET / HTTP/1.1\r\nBad Header Line\r\n\r\n"):
        code = status_of(raw(p, junk))
        assert code in (400, 413), (junk[:40], code)
        assert sg.alive()

    # A client that sends half a head and stalls holds up nobody.
    stall = socket.create_connection(("127.0.0.1", p), timeout=5)
    try:
        stall.sendall(b"GET /metrics HTTP/1.1\r\nHost:")
        t0 = time.monotonic()
        assert admin_get(sg, "/metrics").status == 200
        assert time.monotonic() - t0 < 3
    finally:
        stall.close()

    st = sg.stats()
    assert st["mon_req_bad"] >= 4  # 404 twice, 405 twice
    assert st["client_req"] == 0, "admin requests counted as client traffic"
    assert sg.get("/").status == 200  # the client side is untouched


def test_param_and_bad_address(origin, surogat):
    mport = free_port()
    sg = surogat(params={"admin_http": "127.0.0.1:%d" % mport})
    wait_until(lambda: listening(mport), 10, "admin_http from the parameter")
    r = httpc.fetch(mport, "GET", "/metrics", {"Host": "x"})
    assert r.status == 200 and b"surogat_client_req_total 0" in r.body
    p = sg.ctl("param.show", "admin_http")
    assert "127.0.0.1:%d" % mport in p.stdout

    for bad in ("nonsense", "127.0.0.1:99999", "127.0.0.1:%d" % mport):
        r = run_surogatd(["-F", "-a", "127.0.0.1:%d" % free_port(), "-b", origin.addr,
                          "-M", bad])
        assert r.returncode == 2, (bad, r.stderr)
        assert "admin_http" in r.stderr, r.stderr


def test_declared_backends_with_their_health(origin, surogat, tmp_path):
    p = tmp_path / "be.lua"
    p.write_text('backend "app" { host = "127.0.0.1", port = %d }\n'
                 'backend "spare" { host = "127.0.0.1", port = %d }\n'
                 'route { to = "app" }\n' % (origin.port, origin.port))
    sg = start(surogat, args=["-f", str(p)])
    assert sg.ctl("backend.set_health", "spare", "sick").returncode == 0
    m = scrape(sg)
    health = {lab["backend"]: v for lab, v in m["surogat_backend_healthy"]}
    assert health == {"default": 1.0, "app": 1.0, "spare": 0.0}, health
    st = json.loads(admin_get(sg, "/status.json").body)
    assert {b["name"]: b["healthy"] for b in st["backends"]} == \
        {"default": True, "app": True, "spare": False}, st["backends"]
