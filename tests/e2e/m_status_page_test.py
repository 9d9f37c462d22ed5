"""The status page of the HTTP admin listener (-M), loaded in a real headless
Chromium in front of a real Apache, and in front of backends that fail: its
live values, the status-class and error panels and the per-backend table
checked against /status.json, and screenshots kept as test artifacts."""

import json
import os
import re
import shutil
import struct
import subprocess
import textwrap
import threading
import time
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

import httpc
from conftest import SUROGATD, free_port, listening, wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WINDOW = (1280, 1000)


def artifact_dir():
    """Where the screenshot goes: $SUROGAT_ARTIFACTS, else meson-logs of the build dir."""
    d = os.environ.get("SUROGAT_ARTIFACTS")
    d = Path(d) if d else Path(SUROGATD).resolve().parent / "meson-logs" / "e2e-artifacts"
    d.mkdir(parents=True, exist_ok=True)
    return d


def chromium(args, tmp_path, timeout=90):
    if CHROMIUM is None:
        pytest.skip("chromium not installed (scripts/deps.sh)")
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", "--user-data-dir=%s" % (tmp_path / "chromium-profile"),
            "--window-size=%d,%d" % WINDOW] + args
    p = subprocess.run(argv, capture_output=True, timeout=timeout,
                       env=dict(os.environ, HOME=str(tmp_path)))
    assert p.returncode == 0, "chromium exit %d: %s" % (p.returncode, p.stderr[-2000:])
    return p.stdout.decode(errors="replace")


class Dom(HTMLParser):
    """Text and attributes of every element with an id, and the rows of each tbody."""

    def __init__(self):
        super().__init__()
        self.by_id = {}
        self.rows = {}  # tbody id -> [[cell text]]
        self.stack = []  # (tag, id) of open elements
        self.cur_tbody = None
        self.polylines = {}  # svg id -> [points]
        self.svg = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        eid = a.get("id")
        self.stack.append((tag, eid))
        if eid:
            self.by_id[eid] = {"attrs": a, "text": ""}
        if tag == "tbody":
            self.cur_tbody = eid
            self.rows[eid] = []
        elif tag == "tr" and self.cur_tbody:
            self.rows[self.cur_tbody].append([])
        elif tag == "td" and self.cur_tbody:
            self.rows[self.cur_tbody][-1].append("")
        elif tag == "svg":
            self.svg = eid
            self.polylines[eid] = []
        elif tag == "polyline" and self.svg:
            self.polylines[self.svg].append(a.get("points", "").split())

    def handle_endtag(self, tag):
        while self.stack:
            t, _ = self.stack.pop()
            if t == tag:
                break
        if tag == "tbody":
            self.cur_tbody = None
        elif tag == "svg":
            self.svg = None

    def handle_data(self, data):
        for _, eid in self.stack:
            if eid:
                self.by_id[eid]["text"] += data
        if self.cur_tbody and self.rows[self.cur_tbody] and self.rows[self.cur_tbody][-1] and \
                self.stack and self.stack[-1][0] == "td":
            self.rows[self.cur_tbody][-1][-1] += data


def load_dom(url, tmp_path, budget_ms):
    d = Dom()
    d.feed(chromium(["--virtual-time-budget=%d" % budget_ms, "--dump-dom", url], tmp_path))
    return d


def status(mport):
    r = httpc.fetch(mport, "GET", "/status.json", {"Host": "x"})
    assert r.status == 200, r
    return json.loads(r.body)


def png_info(path):
    """(width, height, distinct byte values in the pixel data) of a PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG: %s" % path
    pos, w, h, idat = 8, 0, 0, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h = struct.unpack(">II", chunk[:8])
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + n
    return w, h, len(set(zlib.decompress(idat)))


class Traffic:
    """Requests for /small.txt in a thread for as long as the with block runs."""

    def __init__(self, sg):
        self.sg = sg
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            assert self.sg.get("/small.txt").status == 200
            time.sleep(0.002)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)


@pytest.fixture
def site(apache, surogat):
    # Apache's files are fresh by heuristic (10% of their age since Last-Modified): make them a
    # day old, so that they stay cached for the whole test.
    old = time.time() - 86400
    for name in apache.files:
        os.utime(apache.root / "htdocs" / name, (old, old))
    mport = free_port()
    sg = surogat(backend=apache.addr, args=["-M", "127.0.0.1:%d" % mport])
    wait_until(lambda: listening(mport), 10, "the admin listener")
    sg.mport = mport
    return sg


def test_page_shows_live_values(site, apache, tmp_path):
    sg = site
    for _ in range(12):
        assert sg.get("/small.txt").status == 200
    for _ in range(2):
        r = sg.get("/big.bin")
        assert r.status == 200 and len(r.body) == 1 << 20
    assert sg.get("/index.html").status == 200
    url = "http://127.0.0.1:%d/" % sg.mport

    # Live: while the page polls, traffic goes on; what it shows lies between the counts
    # before and after, and the graphs have several points.
    before = status(sg.mport)["counters"]["client_req"]
    # Virtual time runs ahead of real time: 20 one-second polls take well under a second
    # of real time, so ask for many to be sure that traffic falls between two of them.
    with Traffic(sg):
        dom = load_dom(url, tmp_path, 20000)
    after = status(sg.mport)["counters"]["client_req"]
    shown = int(dom.by_id["requests"]["attrs"]["data-value"])
    assert before < shown <= after, (before, shown, after)
    assert dom.by_id["state"]["text"].startswith("live"), dom.by_id["state"]
    points = dom.polylines["g-rps"]
    assert points and len(points[0]) >= 2, "throughput graph not drawn: %s" % points
    # A point above the baseline (y 118 of the 120 high box): some interval had traffic.
    assert min(float(pt.split(",")[1]) for pt in points[0]) < 118, points

    # Quiet: the page's numbers are exactly those of /status.json.
    dom = load_dom(url, tmp_path, 3000)
    st = status(sg.mport)
    c = st["counters"]
    for eid, name in (("hits", "cache_hit"), ("misses", "cache_miss"), ("requests", "client_req")):
        assert int(dom.by_id[eid]["attrs"]["data-value"]) == c[name], eid
        assert dom.by_id[eid]["text"].replace(",", "") == str(c[name]), eid
    assert c["cache_hit"] >= 12 and c["cache_miss"] >= 2
    assert dom.by_id["hit-ratio"]["text"] == "%.1f%%" % (st["hit_ratio"] * 100)
    assert dom.by_id["version"]["text"] == st["version"]

    # Backends, stores, top URLs, biggest objects.
    ((name, addr, health, probes, changed, reqs, errs, e5, fb, conns),) = dom.rows["backends"]
    assert (name, addr, health, probes, errs, e5) == ("default", apache.addr, "healthy", "-",
                                                     "0", "0")
    (be,) = st["backends"]
    assert int(reqs.replace(",", "")) == be["counters"]["requests"] >= 3
    assert changed.endswith(" ago") and re.fullmatch(r"[\d.]+ ms / [\d.]+ ms", fb), fb
    (store,) = dom.rows["stores"]
    assert store[:2] == ["s0", "malloc"] and store[3] == "256.0 MiB"
    top = dom.rows["top-urls"]
    assert top and top[0][0] == "/small.txt", top
    big = dom.rows["biggest"]
    assert big and big[0][0].endswith(" /big.bin") and big[0][2] == "1.0 MiB", big
    assert [b[0].split(" ")[1] for b in big] == [o["key"].split(" ")[1] for o in st["biggest"]]

    # The screenshot, kept for a person to look at.
    shot = artifact_dir() / "status-page.png"
    if shot.exists():
        shot.unlink()
    with Traffic(sg):  # so that the graphs have something to show
        chromium(["--virtual-time-budget=8000", "--hide-scrollbars", "--screenshot=%s" % shot,
                  url], tmp_path)
    assert shot.exists(), "no screenshot written"
    w, h, variety = png_info(shot)
    assert (w, h) == WINDOW
    assert variety > 50, "the screenshot looks blank (%d distinct byte values)" % variety
    print("status page screenshot: %s" % shot)


def test_page_is_self_contained(site):
    r = httpc.fetch(site.mport, "GET", "/", {"Host": "x"})
    assert r.status == 200 and r.header("Content-Type") == "text/html; charset=utf-8"
    html = r.body.decode()
    # No external asset: nothing loaded from another origin or another path but status.json.
    assert not re.search(r"""(src|href)\s*=\s*["'](?!data:|#)""", html), "external asset"
    assert "@import" not in html and "url(" not in html
    assert re.findall(r"""open\("GET",\s*"([^"]+)\"""", html) == ["status.json"]
    r = httpc.fetch(site.mport, "HEAD", "/", {"Host": "x"})
    assert r.status == 200 and r.body == b""


def element_ids(dom, prefix):
    return sorted(i for i in dom.by_id if i.startswith(prefix))


def test_backend_and_error_panels(origins, surogat, tmp_path):
    good, err, garbage = origins(3)
    good.route("/ok", body=b"fine")
    good.route("/missing", status=404, body=b"no")
    good.route("/health", body=b"ok")
    err.route("/err/x", status=500, body=b"boom")
    err.route("/health", status=500, body=b"down")
    garbage.route("/garbage/x", garbage=b"nonsense\r\n\r\n")
    dead = free_port()  # nothing listens there
    pol = tmp_path / "panels.lua"
    pol.write_text(textwrap.dedent("""
        backend "web" { host = "127.0.0.1", port = %d,
                        probe = { url = "/health", interval = 0.2, timeout = 1, window = 8,
                                  threshold = 3 } }
        backend "api" { host = "127.0.0.1", port = %d,
                        probe = { url = "/health", interval = 0.2, timeout = 1, window = 8,
                                  threshold = 3, initial = 8 } }
        backend "legacy" { host = "127.0.0.1", port = %d }
        backend "gone" { host = "127.0.0.1", port = %d }
        route { path = "^/err/", to = "api" }
        route { path = "^/garbage/", to = "legacy" }
        route { path = "^/gone/", to = "gone" }
        route { to = "web" }
        function recv(req) return "pass" end
        """ % (good.port, err.port, garbage.port, dead)))
    mport = free_port()
    sg = surogat(args=["-f", str(pol), "-M", "127.0.0.1:%d" % mport])
    wait_until(lambda: listening(mport), 10, "the admin listener")
    # Traffic of every kind before "api" turns sick (its first probes fail).
    for path, n in (("/ok", 20), ("/missing", 4), ("/err/x", 3), ("/garbage/x", 2),
                    ("/gone/x", 2)):
        for _ in range(n):
            sg.get(path)
    wait_until(lambda: not [b for b in status(mport)["backends"] if b["name"] == "api"][0][
        "healthy"], 10, "api sick")
    wait_until(lambda: [b for b in status(mport)["backends"] if b["name"] == "web"][0][
        "probe"]["history"].count("H") >= 6, 10, "web's probes")
    url = "http://127.0.0.1:%d/" % mport

    class Load(Traffic):
        def run(self):
            i = 0
            while not self.stop.is_set():
                self.sg.get(("/ok", "/ok", "/ok", "/missing", "/gone/x")[i % 5])
                i += 1
                time.sleep(0.005)

    # Live, then quiet: with nothing moving, the page's numbers are status.json's.
    with Load(sg):
        dom = load_dom(url, tmp_path, 20000)
    pts = dom.polylines["g-status"]
    assert len(pts) >= 3 and all(len(p) >= 2 for p in pts), "status classes not drawn: %s" % pts
    assert dom.polylines["g-err"], "errors graph not drawn"
    # Let the probe history settle: a strip compared with status.json must not move between.
    dom = load_dom(url, tmp_path, 3000)
    st = status(mport)
    bes = {b["name"]: b for b in st["backends"]}
    rows = {r[0]: r for r in dom.rows["backends"]}
    assert sorted(rows) == ["api (boot)", "default", "gone (boot)", "legacy (boot)", "web (boot)"]
    for name, b in bes.items():
        row = rows[name + (" (%s)" % b["program"] if b["program"] else "")]
        fails = sum(b["counters"]["fail_" + k] for k in (
            "connect", "connect_timeout", "first_byte_timeout", "between_bytes_timeout",
            "bad_resp", "busy"))
        assert row[1] == b["address"] and row[2] == ("healthy" if b["healthy"] else "sick")
        assert int(row[5].replace(",", "")) == b["counters"]["requests"], (name, row)
        assert int(row[6].replace(",", "")) == fails, (name, row)
        assert int(row[7].replace(",", "")) == b["counters"]["resp_5xx"], (name, row)
        assert row[4].endswith(" ago")
    assert rows["gone (boot)"][6] != "0" and rows["legacy (boot)"][6] == "2"
    assert rows["api (boot)"][2] == "sick" and rows["api (boot)"][7] == "3"
    n = sum(bes["web"]["first_byte"]["buckets"])
    avg = bes["web"]["first_byte"]["sum"] / n * 1000
    assert rows["web (boot)"][8].startswith("%.2f ms / " % avg if avg < 10 else "%.1f ms / " % avg)
    # The probe strips: a box per probe, as the history in status.json.
    strips = {}
    html = chromium(["--virtual-time-budget=3000", "--dump-dom", url], tmp_path)
    st = status(mport)
    for m in re.finditer(r'<td[^>]*data-value="([H-]+)"[^>]*><span class="strip" title="([H-]+)">(.*?)'
                         r'</span></td>', html):
        strips[m.group(1)] = re.findall(r'<i class="(g|b)">', m.group(3))
    assert strips, "no probe strip on the page"
    for hist, boxes in strips.items():
        assert len(boxes) == len(hist) == 8
        assert "".join("H" if b == "g" else "-" for b in boxes) == hist
    assert "-" * 8 in strips or any(h.endswith("---") for h in strips), strips  # api's

    # The errors panel: the client's 4xx and 5xx and each kind of backend failure.
    errs = {r[0]: r for r in dom.rows["errors"]}
    c = st["counters"]
    assert int(errs["client 4xx"][1].replace(",", "")) <= c["client_resp_4xx"]
    assert int(errs["client 5xx"][1].replace(",", "")) <= c["client_resp_5xx"]
    assert int(errs["bad response"][1]) == 2
    assert int(errs["refused or unreachable"][1].replace(",", "")) == \
        bes["gone"]["counters"]["fail_connect"] >= 2
    assert errs["busy (max_connections)"][1] == "0"
    total = sum(b["counters"]["fail_" + k] for b in bes.values() for k in (
        "connect", "connect_timeout", "first_byte_timeout", "between_bytes_timeout",
        "bad_resp", "busy"))
    assert int(errs["backend failures"][1].replace(",", "")) == total

    shot = artifact_dir() / "status-page-backends.png"
    if shot.exists():
        shot.unlink()
    with Load(sg):
        chromium(["--virtual-time-budget=12000", "--hide-scrollbars", "--screenshot=%s" % shot,
                  url], tmp_path)
    w, h, variety = png_info(shot)
    assert (w, h) == WINDOW and variety > 50
    print("status page screenshot: %s" % shot)
