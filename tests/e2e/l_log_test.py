"""Logs: the live request log (`surogatctl log`) fed from the workers'
rings, with its filters, history (-d), JSON lines and missed-record
reports; the access log's json and custom formats, its reopening on
SIGHUP, and syslog for the access and daemon logs, read from a datagram
socket the test binds."""

import json
import os
import queue
import re
import signal
import socket
import subprocess
import textwrap
import threading
import time
from datetime import datetime

from conftest import SUROGATCTL, read_admin_reply, run_surogatd, wait_until
from httpc import build_request, parse_responses

CC60 = {"Cache-Control": "max-age=60"}

# 127.0.0.1:40000 [22/Nov/2026:10:44:45 +0000] "GET /a HTTP/1.1" 200 5 MISS backend=default
#   ttfb=0.001 total=0.002 restarts=0 retries=0 hooks=- host=surogat.test
TEXT_RE = re.compile(
    r'(?P<client>[0-9a-f.:]+):(?P<port>\d+) \[(?P<t>[^\]]+)\] "(?P<r>[^"]*)" (?P<status>\d{3}) '
    r'(?P<bytes>\d+) (?P<cache>\S+) backend=(?P<backend>\S+) ttfb=(?P<ttfb>[0-9.]+) '
    r'total=(?P<total>[0-9.]+) restarts=(?P<restarts>\d+) retries=(?P<retries>\d+) '
    r'hooks=(?P<hooks>\S+) host=(?P<host>\S+)$')


class LogTail:
    """`surogatctl log ARGS` running, its stdout lines collected by a thread."""

    def __init__(self, sg, *args):
        self.proc = subprocess.Popen(
            [SUROGATCTL, "-T", "127.0.0.1:%d" % sg.admin_port, "log"] + list(args),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines = queue.Queue()
        self.got = []
        # The OK answer goes to stderr; once it is there the reader is attached.
        first = self.proc.stderr.readline()
        assert first.startswith(b"Streaming the request log"), (first, self.proc.stderr.read())
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for ln in self.proc.stdout:
            self.lines.put(ln.decode().rstrip("\n"))
        self.lines.put(None)

    def take(self, n, timeout=10.0, pred=lambda ln: True):
        """Wait for n lines satisfying pred (others kept too); all lines so far."""
        deadline = time.monotonic() + timeout
        while sum(1 for ln in self.got if pred(ln)) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out waiting for %d log lines; got %r" % (n, self.got))
            try:
                ln = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if ln is None:
                raise AssertionError("log stream ended; got %r; stderr %r"
                                     % (self.got, self.proc.stderr.read()))
            self.got.append(ln)
        return self.got

    def settle(self, quiet=0.4):
        """Everything that arrives until nothing has come for `quiet` seconds (bounded)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                ln = self.lines.get(timeout=quiet)
            except queue.Empty:
                break
            if ln is None:
                break
            self.got.append(ln)
        return self.got

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # what Ctrl-C does
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc.stdout.close()
        self.proc.stderr.close()


def json_recs(lines):
    return [json.loads(ln) for ln in lines]


def test_log_stream_sees_every_request(origin, surogat):
    origin.route("/c", body=b"cached!", headers=CC60, delay=0.05)
    origin.route("/missing", status=404, body=b"nope")
    sg = surogat()
    tail = LogTail(sg, "-j")
    try:
        before = time.time()
        assert sg.get("/c").status == 200
        assert sg.get("/c").status == 200
        assert sg.get("/missing").status == 404
        assert sg.request("POST", "/form", body=b"x=1").status == 200
        recs = json_recs(tail.take(4))
        assert len(recs) == 4, recs
        by = {}
        for r in recs:
            by.setdefault(r["url"], []).append(r)
        c = sorted(by["/c"], key=lambda r: r["time"])
        assert [r["cache"] for r in c] == ["MISS", "HIT"], c
        for r in recs:
            assert r["client"] == "127.0.0.1" and 0 < r["port"] < 65536
            assert r["proto"] == "HTTP/1.1" and r["host"] == "surogat.test"
            assert r["backend"] == ("-" if r["cache"] == "HIT" else "default"), r
            assert r["restarts"] == 0 and r["retries"] == 0
            assert 0 <= r["ttfb"] <= r["total"] < 10
            t = datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
            assert before - 1 < t < time.time() + 1
            assert r["hooks"] == [] and r["url_truncated"] is False
        assert c[0]["status"] == 200 and c[0]["bytes"] == 7 and c[0]["method"] == "GET"
        assert c[0]["total"] >= 0.04, "the origin's 50 ms delay is in the MISS's total"
        assert c[1]["total"] < c[0]["total"]
        m = by["/missing"][0]
        assert m["status"] == 404 and m["bytes"] == 4 and m["cache"] == "MISS"
        p = by["/form"][0]
        assert p["method"] == "POST" and p["cache"] == "PASS"
    finally:
        tail.stop()
    # The stream ended with its client; the daemon goes on.
    assert sg.get("/c").status == 200


def test_text_lines_and_bad_bytes(origin, surogat):
    origin.route("/t", body=b"hello", headers=CC60)
    sg = surogat()
    tail = LogTail(sg)
    try:
        assert sg.get("/t?q=1").status == 200
        with sg.conn() as c:
            c.send(b"GET /nohost HTTP/1.1\r\n\r\n")
            assert c.read_response().status == 400
        lines = tail.take(2)
        recs = {}
        for ln in lines:
            m = TEXT_RE.match(ln)
            assert m, "log line not in the documented format: %r" % ln
            recs[m["r"]] = m
        a = recs["GET /t?q=1 HTTP/1.1"]
        assert a["client"] == "127.0.0.1" and a["status"] == "200" and a["bytes"] == "5"
        assert a["cache"] == "MISS" and a["backend"] == "default" and a["host"] == "surogat.test"
        assert float(a["ttfb"]) <= float(a["total"])
        t = datetime.strptime(a["t"], "%d/%b/%Y:%H:%M:%S %z").timestamp()
        assert abs(t - time.time()) < 60
        b = recs["GET /nohost HTTP/1.1"]
        assert b["status"] == "400" and b["cache"] == "SYNTH" and b["backend"] == "-"
    finally:
        tail.stop()


def test_long_url_truncated(origin, surogat):
    sg = surogat()
    url = "/long/" + "x" * 600
    origin.route(url, body=b"L")
    tail = LogTail(sg, "-j")
    try:
        assert sg.get(url).status == 200
        r = json_recs(tail.take(1))[0]
        assert r["url_truncated"] is True and url.startswith(r["url"]) and len(r["url"]) == 255
    finally:
        tail.stop()


def _from(ip, port, path):
    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(ip, 0))
    try:
        s.sendall(build_request("GET", path, headers={"Connection": "close"}))
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return parse_responses(data)[0]
    finally:
        s.close()


def test_filters(origin, surogat):
    origin.route("/keep/a", body=b"ok", headers=CC60)
    origin.route("/keep/b", status=503, body=b"ok")
    origin.route("/drop", body=b"ok")
    origin.route("/gone", status=404, body=b"ok")
    sg = surogat()
    tails = {
        "url": LogTail(sg, "-j", "-u", "^/keep/"),
        "5xx": LogTail(sg, "-j", "-s", "5xx,404"),
        "hit": LogTail(sg, "-j", "-c", "hit"),
        "ip": LogTail(sg, "-j", "-i", "127.0.0.0/8,!127.0.0.1"),
        "all": LogTail(sg, "-j", "-s", "200-299", "-u", "keep"),
    }
    try:
        for p in ("/keep/a", "/keep/a", "/keep/b", "/drop", "/gone"):
            sg.get(p)
        assert _from("127.0.0.2", sg.port, "/drop").status == 200
        want = {
            "url": [("/keep/a", 200), ("/keep/a", 200), ("/keep/b", 503)],
            "5xx": [("/gone", 404), ("/keep/b", 503)],
            "hit": [("/keep/a", 200)],
            "ip": [("/drop", 200)],
            "all": [("/keep/a", 200), ("/keep/a", 200)],
        }
        for name, t in tails.items():
            t.take(len(want[name]))
        for name, t in tails.items():
            got = sorted((r["url"], r["status"]) for r in json_recs(t.settle()))
            assert got == sorted(want[name]), (name, got)
        ip = json_recs(tails["ip"].got)[0]
        assert ip["client"] == "127.0.0.2"
    finally:
        for t in tails.values():
            t.stop()


def test_history_with_d(origin, surogat):
    origin.route("/early", body=b"ok")
    sg = surogat()
    for i in range(5):
        assert sg.get("/early?%d" % i).status == 200
    hist = LogTail(sg, "-d", "-j")
    live = LogTail(sg, "-j")
    try:
        early = sorted(r["url"] for r in json_recs(hist.take(5)))
        assert early == ["/early?%d" % i for i in range(5)]
        assert sg.get("/late").status == 200
        hist.take(6)
        got = [r["url"] for r in json_recs(live.take(1))]
        assert got == ["/late"], "a reader without -d starts now: %r" % got
    finally:
        hist.stop()
        live.stop()


def test_reader_behind_reports_missed_without_stalling(origin, surogat):
    origin.route("/p", body=b"p", headers=CC60)
    sg = surogat(params={"rlog_records": "16", "thread_pool_min": "1"})
    assert sg.get("/p").status == 200  # cached before the stream starts
    tail = LogTail(sg, "-j")
    n = 1500
    try:
        # One write of n pipelined hits: one worker serves them back to back, far faster
        # than a reader polling 16-record rings every 50 ms can follow.
        t0 = time.monotonic()
        with sg.conn(timeout=30) as c:
            c.send(build_request("GET", "/p") * n)
            for _ in range(n):
                assert c.read_response().status == 200
        burst = time.monotonic() - t0
        state = {"seen": 0, "missed": 0}

        def counted():
            state["seen"] = state["missed"] = 0
            for r in json_recs(tail.got):
                if "missed" in r:
                    state["missed"] += r["missed"]
                elif r.get("url") == "/p":
                    state["seen"] += 1
            return state["seen"] + state["missed"] >= n

        wait_until(lambda: tail.settle(0.2) and counted(), 15, "the stream to account for %d" % n)
        assert state["seen"] + state["missed"] == n, state
        assert state["missed"] > 0 and state["seen"] >= 16, state
        # The workers were never held up: the whole burst took no reader-paced time, and
        # the next request is served at once.
        assert burst < 20
        t1 = time.monotonic()
        assert sg.get("/p").status == 200
        assert time.monotonic() - t1 < 2
    finally:
        tail.stop()


def test_hooks_recorded(origin, surogat, tmp_path):
    origin.route("/h", body=b"h", headers=CC60)
    pol = tmp_path / "policy.lua"
    pol.write_text(textwrap.dedent("""\
        function recv(req) end
        function deliver(req, resp) resp.http["x-pol"] = "1" end
    """))
    sg = surogat(args=["-f", str(pol)])
    tail = LogTail(sg, "-j")
    try:
        r = sg.get("/h")
        assert r.status == 200 and r.header("x-pol") == "1"
        rec = json_recs(tail.take(1))[0]
        for h in ("recv", "hash", "backend_response", "deliver"):
            assert h in rec["hooks"], rec["hooks"]
        assert sg.get("/h").status == 200
        rec = json_recs(tail.take(2))[1]
        assert rec["cache"] == "HIT"
        assert "recv" in rec["hooks"] and "deliver" in rec["hooks"], rec["hooks"]
        assert "backend_response" not in rec["hooks"], rec["hooks"]
    finally:
        tail.stop()


def test_log_command_errors(origin, surogat):
    sg = surogat()
    for args, word in ((["-s", "2yy"], "-s"), (["-s", "600-500"], "-s"), (["-u", "(unclosed"], "-u"),
                       (["-x"], "Unknown option"), (["-u"], "needs a value"),
                       (["-i", "300.1.2.3"], "acl")):
        p = sg.ctl("log", *args)
        assert p.returncode == 1 and word in p.stderr, (args, p.returncode, p.stderr)
    # Streams whose clients left are reaped: more than the limit of 8 in turn all work.
    for _ in range(12):
        t = LogTail(sg)
        t.stop()
        time.sleep(0.1)
    t = LogTail(sg, "-j")
    try:
        assert sg.get("/").status == 200
        assert json_recs(t.take(1))[0]["url"] == "/"
    finally:
        t.stop()


def _raw_stream(sg, line="log -j"):
    """An admin connection turned into a log stream: (socket, status)."""
    s = socket.create_connection(("127.0.0.1", sg.admin_port), timeout=5)
    f = s.makefile("rwb")
    read_admin_reply(f)  # the banner
    f.write(line.encode() + b"\n")
    f.flush()
    status, body = read_admin_reply(f)
    return s, f, status, body


def test_stream_limit_and_interactive_refusal(origin, surogat):
    sg = surogat()
    held = [_raw_stream(sg) for _ in range(8)]
    try:
        assert all(h[2] == 200 for h in held), [h[2:] for h in held]
        s, f, status, body = _raw_stream(sg)
        assert status == 300 and b"Too many log streams" in body, (status, body)
        s.close()
        held.pop()[0].close()

        def try_stream():
            r = _raw_stream(sg)
            if r[2] != 200:
                r[0].close()
                return None
            return r

        s, f, status, body = wait_until(try_stream, 5, "a stream slot freed by a client that left")
        held.append((s, f, status, body))
        # The stream carries request lines after the answer.
        assert sg.get("/raw").status == 200
        rec = json.loads(f.readline())
        assert rec["url"] == "/raw"
    finally:
        for h in held:
            h[0].close()
    p = subprocess.run([SUROGATCTL, "-T", "127.0.0.1:%d" % sg.admin_port], input="log\nping\n",
                       capture_output=True, text=True, timeout=15)
    assert p.returncode == 1 and "log streams until Ctrl-C" in p.stderr, p
    assert "PONG" in p.stdout


def test_sigterm_with_streams_attached(origin, surogat):
    sg = surogat()
    tails = [LogTail(sg, "-j"), LogTail(sg, "-d")]
    try:
        assert sg.get("/").status == 200
        tails[0].take(1)
        t0 = time.monotonic()
        assert sg.stop() == 0
        assert time.monotonic() - t0 < 5, "a log stream held up the shutdown"
        for t in tails:
            assert t.proc.wait(5) == 0, "surogatctl log: the daemon's close ends it, exit 0"
    finally:
        for t in tails:
            t.stop()


# -- the access log -------------------------------------------------------------------


def test_access_log_json(origin, surogat):
    origin.route("/j", body=b"json!", headers=CC60)
    sg = surogat(params={"access_log": "access.log", "access_log_format": "json"})
    assert sg.get("/j", headers={"Referer": "http://r/\"q\"", "User-Agent": "ua\xe9"}).status \
        == 200
    assert sg.get("/j").status == 200
    lines = sg.wait_access_lines(2)
    # Each worker appends its own lines: two back-to-back requests may be logged in
    # either order (the first one's worker may still be finishing when the second ends).
    recs = sorted((json.loads(ln) for ln in lines), key=lambda r: r["cache"] != "MISS")
    assert [r["cache"] for r in recs] == ["MISS", "HIT"]
    a = recs[0]
    assert a["client"] == "127.0.0.1" and a["method"] == "GET" and a["url"] == "/j"
    assert a["status"] == 200 and a["bytes"] == 5 and a["proto"] == "HTTP/1.1"
    assert a["referer"] == "http://r/\"q\"" and a["user_agent"] == "ua\xe9"
    assert a["host"] == "surogat.test" and a["backend"] == "default"
    assert 0 <= a["ttfb_us"] <= a["duration_us"] and a["hooks"] == []
    assert recs[1]["referer"] is None


def test_access_log_custom_format(origin, surogat):
    origin.route("/f", body=b"0123456789", headers=CC60, delay=0.1)
    fmt = "%h|%{port}x|%m|%U|%q|%H|%s|%b|%B|%{cache}x|%{backend}x|%{X-Test}i|%{ms}T|%D|100%%"
    sg = surogat(params={"access_log": "access.log", "access_log_format": fmt})
    assert sg.get("/f?a=b", headers={"X-Test": "t 1"}).status == 200
    assert sg.request("HEAD", "/f?a=b").status == 200
    lines = sg.wait_access_lines(2)
    # Either order, as in the JSON test above: each worker appends its own lines.
    f = sorted((ln.split("|") for ln in lines), key=lambda x: x[2:3] != ["GET"])
    assert all(len(x) == 15 for x in f), lines
    a, b = f
    assert a[0] == "127.0.0.1" and 0 < int(a[1]) < 65536
    assert a[2:10] == ["GET", "/f", "?a=b", "HTTP/1.1", "200", "10", "10", "MISS"], a
    assert a[10] == "default" and a[11] == "t 1"
    assert int(a[12]) >= 90 and int(a[13]) >= 90000 and a[14] == "100%"
    assert b[2:10] == ["HEAD", "/f", "?a=b", "HTTP/1.1", "200", "-", "0", "HIT"], b
    assert b[11] == "-"


def test_access_log_bad_format_refused(origin, tmp_path):
    r = run_surogatd(["-F", "-a", "127.0.0.1:0", "-b", origin.addr, "-n", str(tmp_path / "w"),
                      "-p", "access_log_format=%h %{nope}x"])
    assert r.returncode != 0 and "access_log_format" in r.stderr and "nope" in r.stderr, r


def test_access_log_json_reopened_on_sigusr1(origin, surogat):
    sg = surogat(params={"access_log": "access.log", "access_log_format": "json"})
    assert sg.get("/before").status == 200
    sg.wait_access_lines(1)
    os.rename(sg.workdir / "access.log", sg.workdir / "access.log.1")
    sg.signal(signal.SIGUSR1)
    wait_until(lambda: (sg.workdir / "access.log").exists(), 5, "access.log reopened")
    assert sg.get("/after").status == 200
    lines = sg.wait_access_lines(1)
    assert [json.loads(ln)["url"] for ln in lines] == ["/after"]
    old = (sg.workdir / "access.log.1").read_text().splitlines()
    assert [json.loads(ln)["url"] for ln in old] == ["/before"]


# -- syslog ----------------------------------------------------------------------------

SYSLOG_RE = re.compile(rb"<(\d+)>([A-Z][a-z]{2}) ([ \d]\d) (\d\d):(\d\d):(\d\d) "
                       rb"surogatd\[(\d+)\]: (.*)$", re.S)


def _syslog_socket(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(str(path))
    s.settimeout(0.2)
    return s


def _drain(s, want, timeout=10.0):
    """Datagrams parsed as (pri, pid, message), until want(list) holds (bounded)."""
    out = []
    deadline = time.monotonic() + timeout
    while not want(out):
        if time.monotonic() > deadline:
            raise AssertionError("syslog: timed out; got %r" % out)
        try:
            d = s.recv(65536)
        except socket.timeout:
            continue
        m = SYSLOG_RE.match(d)
        assert m, "not an RFC 3164 message: %r" % d
        out.append((int(m.group(1)), int(m.group(7)), m.group(8).decode()))
    return out


def test_syslog_access_and_error_log(origin, surogat, tmp_path):
    path = tmp_path / "log.sock"
    s = _syslog_socket(path)
    try:
        sg = surogat(params={"syslog_socket": str(path), "syslog_facility": "local3",
                             "access_log_syslog": "on", "access_log_format": "json",
                             "error_log": "syslog"})
        # The daemon log: its start, at info.
        msgs = _drain(s, lambda o: any("listening on" in m for _, _, m in o))
        start = [x for x in msgs if "listening on" in x[2]][0]
        assert start[0] == 19 * 8 + 6 and start[1] == sg.pid and start[2].startswith("info: ")
        assert sg.get("/sys").status == 200
        msgs = _drain(s, lambda o: any(m.startswith("{") for _, _, m in o))
        acc = [x for x in msgs if x[2].startswith("{")]
        assert len(acc) == 1 and acc[0][0] == 19 * 8 + 6 and acc[0][1] == sg.pid
        rec = json.loads(acc[0][2])
        assert rec["url"] == "/sys" and rec["status"] == 200
        # No file: the access log went to syslog only.
        assert not (sg.workdir / "access.log").exists()
        # A warning reaches syslog at its own severity.
        p = sg.ctl("param.set", "log_level", "7")
        assert p.returncode == 0
        msgs = _drain(s, lambda o: any("param.set" in m for _, _, m in o))
        note = [x for x in msgs if "param.set" in x[2]][0]
        assert note[0] == 19 * 8 + 5 and note[2].startswith("notice: ")
    finally:
        s.close()


def test_syslog_absent_does_not_block(origin, surogat, tmp_path):
    # Nobody listens at the path: messages are dropped, requests are served.
    sg = surogat(params={"syslog_socket": str(tmp_path / "nobody.sock"),
                         "access_log_syslog": "on", "error_log": "syslog"})
    for _ in range(20):
        assert sg.get("/").status == 200


def test_syslog_bad_facility_refused(origin, tmp_path):
    r = run_surogatd(["-F", "-a", "127.0.0.1:0", "-b", origin.addr, "-n", str(tmp_path / "w"),
                      "-p", "syslog_facility=local9"])
    assert r.returncode != 0 and "syslog_facility" in r.stderr, r
