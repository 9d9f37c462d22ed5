"""The status page of the HTTP admin listener (-M), loaded in a real headless
Chromium in front of a real Apache: its live values checked against
/status.json, and a screenshot kept as a test artifact."""

import json
import os
import re
import shutil
import struct
import subprocess
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
    assert dom.rows["backends"] == [["default", apache.addr, "healthy"]]
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
