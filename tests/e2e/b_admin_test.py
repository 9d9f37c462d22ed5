"""The admin interface (-T): framing, commands, live parameters, -S auth."""

import re
import socket
import subprocess
import time

from conftest import REPO, SUROGATCTL, free_port, need_binaries, read_admin_reply


def _table(name, macro):
    text = (REPO / "include" / "surogat" / "tbl" / name).read_text()
    return re.findall(r"^%s\((\w+)," % macro, text, re.M)


STATS = _table("stats.h", "STAT")
PARAMS = _table("params.h", "PARAM")


def test_tables_found():
    assert "sess_conn" in STATS and "timeout_idle" in PARAMS


def test_ctl_ping(origin, surogat):
    sg = surogat()
    p = sg.ctl("ping")
    assert p.returncode == 0, p.stderr


def test_ctl_stats_has_every_counter(origin, surogat):
    sg = surogat()
    assert sg.get("/").status == 200
    st = sg.stats()
    missing = [s for s in STATS if s not in st]
    assert not missing, "counters missing from stats: %r" % missing
    assert st["sess_conn"] == 1 and st["client_req"] == 1 and st["backend_req"] == 1
    assert st["threads"] >= 1


def test_counters_count(origin, surogat):
    body = b"b" * 1000
    origin.route("/c", body=body)
    sg = surogat()
    with sg.conn() as c:
        for _ in range(3):
            c.request("POST", "/c", body=b"x" * 100)
            assert c.read_response().body == body
        # a body that arrives in a later read than its head
        c.send(b"POST /c HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n")
        time.sleep(0.2)
        c.send(b"y" * 100)
        assert c.read_response().body == body
    st = sg.stats()
    assert st["client_req"] == 4
    assert st["resp_body_bytes"] == 4000
    assert st["resp_head_bytes"] > 0
    assert st["backend_req"] == 4
    # every body byte counts, also those read together with the head
    assert st["client_body_bytes"] == 400


def test_raw_protocol_framing(origin, surogat):
    sg = surogat()
    replies = sg.admin("ping", "stats", "no.such.command", "param.show timeout_idle", "ping")
    codes = [c for c, _ in replies]
    assert codes[0] == 200 and codes[1] == 200 and codes[3] == 200 and codes[4] == 200, replies
    assert codes[2] != 200
    assert re.search(rb"^sess_conn \d+$", replies[1][1], re.M), replies[1][1][:300]
    assert b"timeout_idle" in replies[3][1]


def test_help_lists_commands(origin, surogat):
    sg = surogat()
    p = sg.ctl("help")
    assert p.returncode == 0
    for cmd in ("ping", "stats", "param.show", "param.set", "status"):
        assert cmd in p.stdout, "help does not list %s: %r" % (cmd, p.stdout)


def test_status(origin, surogat):
    sg = surogat()
    p = sg.ctl("status")
    assert p.returncode == 0 and p.stdout.strip()


def test_param_show_all(origin, surogat):
    sg = surogat()
    p = sg.ctl("param.show")
    assert p.returncode == 0
    missing = [n for n in PARAMS if n not in p.stdout]
    assert not missing, "param.show lacks %r" % missing


def test_param_set_live(origin, surogat):
    sg = surogat(params={"timeout_idle": "30s"})
    before = sg.ctl("param.show", "timeout_idle").stdout
    p = sg.ctl("param.set", "timeout_idle", "1s")
    assert p.returncode == 0, p.stdout + p.stderr
    after = sg.ctl("param.show", "timeout_idle").stdout
    assert after != before and "timeout_idle" in after
    # and it takes effect: an idle connection now closes after about 1s
    with sg.conn() as c:
        c.request("GET", "/")
        assert c.read_response().status == 200
        t0 = time.monotonic()
        closed, _ = c.wait_closed(8)
        assert closed and time.monotonic() - t0 < 5


def test_param_set_errors(origin, surogat):
    sg = surogat()
    assert sg.ctl("param.set", "nosuch", "1").returncode != 0
    assert sg.ctl("param.set", "timeout_idle", "abc").returncode != 0
    assert sg.ctl("param.set", "thread_pool_min", "0").returncode != 0
    assert sg.ctl("param.show", "nosuch").returncode != 0
    assert sg.ctl("ping").returncode == 0


def test_ctl_unreachable():
    need_binaries()
    p = subprocess.run([SUROGATCTL, "-T", "127.0.0.1:%d" % free_port(), "ping"],
                       capture_output=True, text=True, timeout=15)
    assert p.returncode != 0 and p.stderr.strip()


def test_auth_challenge(origin, surogat):
    sg = surogat(secret="e2e-secret\n")
    with socket.create_connection(("127.0.0.1", sg.admin_port), timeout=5) as s:
        f = s.makefile("rwb")
        code, body = read_admin_reply(f)
        assert code == 107, (code, body)
        assert re.match(rb"^[a-z]{32}\n", body) or len(body.split(b"\n")[0]) >= 16, body
        f.write(b"stats\n")
        f.flush()
        code, body = read_admin_reply(f)
        assert code != 200 and b"sess_conn" not in body


def test_auth_with_surogatctl(origin, surogat, tmp_path):
    sg = surogat(secret="e2e-secret\n")
    p = sg.ctl("stats")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "sess_conn" in p.stdout
    wrong = tmp_path / "wrong.secret"
    wrong.write_text("not-the-secret\n")
    p = sg.ctl("-S", str(wrong), "stats", secret=False)
    assert p.returncode != 0 and "sess_conn" not in p.stdout
    p = sg.ctl("stats", secret=False)
    assert p.returncode != 0 and "sess_conn" not in p.stdout
