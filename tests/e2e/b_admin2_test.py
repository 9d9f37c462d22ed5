"""The admin interface, command by command, through surogatctl: exit
statuses, authentication (and the secret never on the wire), parameter
validation, named policy programs switched under real traffic, purge,
`top`, the interactive mode on a terminal, and a Unix admin socket."""

import json
import os
import re
import select
import signal
import socket
import stat
import subprocess
import threading
import time

import pytest

from conftest import (ROOT_OK, SUROGATCTL, SUROGATD, free_port, listening, need_binaries, wait_until)
from cstatus import is_hit
import httpc

CC60 = {"Cache-Control": "max-age=60"}

# The commands the admin interface must offer (with purge and policy.*).
COMMANDS = ("ping", "status", "param.show", "param.set", "policy.load", "policy.use",
            "policy.list", "policy.discard", "ban", "ban.list", "purge", "backend.list",
            "backend.set_health", "storage.list", "stats", "help")

STAMP = """\
function deliver(req, resp)
    resp.http["X-Policy"] = "{tag}"
end
"""


def ctl_argv(sg, *args, secret=True):
    argv = [SUROGATCTL, "-T", "127.0.0.1:%d" % sg.admin_port]
    if secret and sg.secret is not None:
        argv += ["-S", str(sg.secret)]
    return argv + list(args)


def policy_rows(sg):
    """policy.list as {name: (state, file)}."""
    p = sg.ctl("policy.list")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines and lines[0].split()[:4] == ["State", "Workers", "Name", "File"], lines
    out = {}
    for ln in lines[1:]:
        state, workers, name, path = ln.split(None, 3)
        assert state in ("active", "available") and workers.isdigit(), ln
        out[name] = (state, path)
    return out


def stamp(sg, path="/"):
    r = sg.get(path)
    assert r.status == 200, r
    return r.header("X-Policy")


# -- every command, exit statuses --------------------------------------------------


def test_help_lists_every_command(origin, surogat):
    sg = surogat()
    p = sg.ctl("help")
    assert p.returncode == 0
    listed = {ln.split()[0] for ln in p.stdout.splitlines() if ln.strip()}
    missing = [c for c in COMMANDS if c not in listed]
    assert not missing, "help lacks %r" % missing
    for c in COMMANDS:
        h = sg.ctl("help", c)
        assert h.returncode == 0 and h.stdout.startswith(c), (c, h.stdout, h.stderr)


def test_every_command_answers(origin, surogat):
    origin.route("/n", body=b"news", headers=CC60)
    sg = surogat()
    assert sg.get("/n").status == 200
    p = sg.ctl("ping")
    assert p.returncode == 0 and re.fullmatch(r"PONG \d+ 1\.0\n", p.stdout), p.stdout
    assert sg.ctl("status").stdout.strip() == "Child in state running"
    p = sg.ctl("stats", "-j")
    assert p.returncode == 0 and json.loads(p.stdout)["client_req"] == 1
    p = sg.ctl("-j", "stats")  # -j before the command means the same
    assert p.returncode == 0 and json.loads(p.stdout)["client_req"] == 1
    p = sg.ctl("storage.list")
    assert p.returncode == 0 and "malloc" in p.stdout, p.stdout
    p = sg.ctl("backend.list")
    assert p.returncode == 0 and re.search(r"^default\s+127\.0\.0\.1:%d\s+healthy" % origin.port,
                                           p.stdout, re.M), p.stdout
    assert sg.ctl("backend.set_health", "default", "sick").returncode == 0
    assert sg.get("/x").status == 503
    assert sg.ctl("backend.set_health", "default", "auto").returncode == 0
    assert sg.ctl("ban", "req.url ~ ^/n").returncode == 0
    p = sg.ctl("ban.list")
    assert p.returncode == 0 and 'req.url ~ "^/n"' in p.stdout, p.stdout
    assert sg.get("/n").header("Cache-Status") != "surogat; hit"
    assert origin.hits("/n") == 2  # the ban sent it to the origin again
    p = sg.ctl("policy.list")
    assert p.returncode == 0 and p.stdout.split() == ["State", "Workers", "Name", "File"]
    p = sg.ctl("param.show", "default_ttl")
    assert p.returncode == 0 and p.stdout.split()[:3] == ["default_ttl", "Value", "is:"]


def test_exit_statuses(origin, surogat, tmp_path):
    sg = surogat()
    # 0: done, answer on stdout
    p = sg.ctl("ping")
    assert (p.returncode, p.stderr) == (0, "")
    # 1: the daemon refused, its message on stderr and nothing on stdout
    for args, msg in ((["no.such"], "Unknown request"),
                      (["param.set", "timeout_idle"], "Too few arguments"),
                      (["backend.set_health", "nope", "sick"], "No backend named"),
                      (["ban", "req.url =~ x"], ""),
                      (["policy.use", "nope"], "No program named"),
                      (["purge", "no-slash"], "Bad URL")):
        p = sg.ctl(*args)
        assert p.returncode == 1, (args, p.returncode, p.stdout, p.stderr)
        assert p.stdout == "" and p.stderr.strip() and msg in p.stderr, (args, p.stderr)
    # quit is no refusal
    assert sg.ctl("quit").returncode == 0
    # 2: usage of surogatctl itself, or no usable connection
    p = subprocess.run([SUROGATCTL, "-Z"], capture_output=True, text=True, timeout=15)
    assert p.returncode == 2 and "usage" in p.stderr
    p = subprocess.run([SUROGATCTL, "-t", "abc", "ping"], capture_output=True, text=True,
                       timeout=15)
    assert p.returncode == 2
    p = sg.ctl("top", "-x")
    assert p.returncode == 2 and "usage" in p.stderr
    p = subprocess.run([SUROGATCTL, "-T", "127.0.0.1:%d" % free_port(), "ping"],
                       capture_output=True, text=True, timeout=15)
    assert p.returncode == 2 and p.stderr.strip()
    p = subprocess.run([SUROGATCTL, "-T", str(tmp_path / "none.sock"), "ping"],
                       capture_output=True, text=True, timeout=15)
    assert p.returncode == 2 and "none.sock" in p.stderr


def test_stdin_mode_statuses(origin, surogat):
    sg = surogat()
    p = subprocess.run(ctl_argv(sg), input="ping\n\nstatus\n", capture_output=True, text=True,
                       timeout=15)
    assert p.returncode == 0, p.stderr
    assert "PONG" in p.stdout and "Child in state running" in p.stdout
    assert "surogat>" not in p.stdout + p.stderr  # no prompt when stdin is no terminal
    p = subprocess.run(ctl_argv(sg), input="ping\nno.such\nstatus\n", capture_output=True,
                       text=True, timeout=15)
    assert p.returncode == 1
    assert "101" in p.stderr and "Unknown request" in p.stderr
    assert "Child in state running" in p.stdout  # it went on after the refusal
    p = subprocess.run(ctl_argv(sg), input="ping\nquit\nno.such\n", capture_output=True,
                       text=True, timeout=15)
    assert p.returncode == 0 and "Unknown" not in p.stderr  # quit stops reading


def test_interactive_on_a_terminal(origin, surogat):
    sg = surogat(secret="tty-secret\n")
    master, slave = os.openpty()
    proc = subprocess.Popen(ctl_argv(sg), stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    seen = bytearray()

    def until(pattern, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not re.search(pattern, bytes(seen)):
            left = deadline - time.monotonic()
            assert left > 0, "no %r on the terminal; got %r" % (pattern, bytes(seen))
            if select.select([master], [], [], left)[0]:
                try:
                    seen.extend(os.read(master, 4096))
                except OSError:  # the other side closed
                    break
        return bytes(seen)

    try:
        until(rb"(?s)surogat admin interface.*surogat> ")  # the banner, then the prompt
        del seen[:]
        os.write(master, b"ping\n")
        until(rb"PONG \d+ 1\.0\r?\nsurogat> ")
        os.write(master, b"param.set nosuch 1\n")
        until(rb'106\r?\nUnknown parameter "nosuch"')
        os.write(master, b"quit\n")
        assert proc.wait(10) == 1  # one command was refused
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        os.close(master)


# -- authentication ----------------------------------------------------------------


class Relay:
    """A TCP relay on loopback that records every byte in both directions."""

    def __init__(self, port):
        self.target = port
        self.ls = socket.socket()
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(4)
        self.port = self.ls.getsockname()[1]
        self.wire = bytearray()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        self.ls.settimeout(0.2)
        while not self.stop.is_set():
            try:
                c, _ = self.ls.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self.pump, args=(c,), daemon=True).start()

    def pump(self, c):
        s = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        deadline = time.monotonic() + 20
        with c, s:
            while time.monotonic() < deadline:
                r, _, _ = select.select([c, s], [], [], 0.2)
                for a in r:
                    data = a.recv(65536)
                    if not data:
                        return
                    with self.lock:
                        self.wire += data
                    (s if a is c else c).sendall(data)

    def close(self):
        self.stop.set()
        self.ls.close()
        self.thread.join(5)


def test_secret_never_on_the_wire(origin, surogat, tmp_path):
    secret = "wire-secret-5d8e1f0c\n"
    sg = surogat(secret=secret)
    relay = Relay(sg.admin_port)
    try:
        p = subprocess.run([SUROGATCTL, "-T", "127.0.0.1:%d" % relay.port, "-S", str(sg.secret),
                            "param.show", "default_ttl"], capture_output=True, text=True,
                           timeout=15)
        assert p.returncode == 0, p.stderr
        wrong = tmp_path / "wrong"
        wrong.write_text("not-" + secret)
        p = subprocess.run([SUROGATCTL, "-T", "127.0.0.1:%d" % relay.port, "-S", str(wrong),
                            "ping"], capture_output=True, text=True, timeout=15)
        assert p.returncode == 2 and "authentication failed" in p.stderr
        time.sleep(0.3)
        with relay.lock:
            wire = bytes(relay.wire)
    finally:
        relay.close()
    # both sessions went through: the challenges, the answers, the commands
    assert len(re.findall(rb"^107 ", wire, re.M)) == 3, wire  # two challenges, one failure
    assert len(re.findall(rb"auth [0-9a-f]{64}\n", wire)) == 2, wire
    assert b"default_ttl" in wire
    for piece in (secret.strip(), "wire-secret", "5d8e1f0c"):
        assert piece.encode() not in wire, "%r seen on the wire" % piece


def test_wrong_secret_refused(origin, surogat, tmp_path):
    sg = surogat(secret="right\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("wrong\n")
    p = subprocess.run(ctl_argv(sg, "-S", str(wrong), "stats", secret=False),
                       capture_output=True, text=True, timeout=15)
    assert p.returncode == 2 and "sess_conn" not in p.stdout
    p = subprocess.run(ctl_argv(sg, "stats", secret=False), capture_output=True, text=True,
                       timeout=15)
    assert p.returncode == 2 and "-S" in p.stderr
    # the raw protocol: a wrong answer gets 107 and the connection closes
    with socket.create_connection(("127.0.0.1", sg.admin_port), timeout=5) as s:
        f = s.makefile("rwb")
        assert f.readline().startswith(b"107 ")
        f.readline()
        f.write(b"auth " + b"0" * 64 + b"\n")
        f.flush()
        time.sleep(0.2)
        rest = f.read()
        assert re.search(rb"^107 ", rest, re.M) and b"failed" in rest, rest
    assert sg.ctl("ping").returncode == 0


# -- param.set ---------------------------------------------------------------------


def test_param_set_validation(origin, surogat):
    sg = surogat(params={"default_grace": "10s"})

    def show(name):
        p = sg.ctl("param.show", name)
        assert p.returncode == 0, p.stderr
        m = re.search(r"^        Value is: (\S+)", p.stdout, re.M)
        assert m, p.stdout
        return m.group(1)

    before = show("default_grace")
    cases = (
        (("default_grace", "soon"), "default_grace"),      # not a duration
        (("default_grace", "-5s"), "default_grace"),       # below its minimum
        (("thread_pools", "4"), "restart"),                # read at startup only
        (("no_such_param", "1"), "Unknown parameter"),     # unknown
    )
    for args, msg in cases:
        p = sg.ctl("param.set", *args)
        assert p.returncode == 1, (args, p.stdout, p.stderr)
        assert msg in p.stderr, (args, p.stderr)
    assert show("default_grace") == before
    assert show("thread_pools") == "2"
    p = sg.ctl("param.set", "default_grace", "42s")
    assert p.returncode == 0, p.stderr
    assert show("default_grace") != before and "42" in show("default_grace")


# -- policy programs -----------------------------------------------------------------


def write(path, text):
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_policy_load_use_list_discard(origin, surogat, tmp_path):
    a, b = tmp_path / "a.lua", tmp_path / "b.lua"
    write(a, STAMP.format(tag="A"))
    write(b, STAMP.format(tag="B"))
    sg = surogat(args=["-f", str(a)])
    assert stamp(sg) == "A"
    assert policy_rows(sg) == {"boot": ("active", str(a))}

    p = sg.ctl("policy.load", "b", str(b))
    assert p.returncode == 0, p.stderr
    assert policy_rows(sg) == {"boot": ("active", str(a)), "b": ("available", str(b))}
    assert stamp(sg) == "A"  # loaded is not used

    p = sg.ctl("policy.use", "b")
    assert p.returncode == 0, p.stderr
    for _ in range(4):  # every worker switches, whichever serves the request
        assert stamp(sg) == "B"
    assert policy_rows(sg) == {"boot": ("available", str(a)), "b": ("active", str(b))}

    p = sg.ctl("policy.discard", "b")
    assert p.returncode == 1 and "in use" in p.stderr
    p = sg.ctl("policy.use", "boot")
    assert p.returncode == 0
    for _ in range(4):
        assert stamp(sg) == "A"
    p = sg.ctl("policy.discard", "b")
    assert p.returncode == 0, p.stderr
    assert policy_rows(sg) == {"boot": ("active", str(a))}
    assert sg.ctl("policy.use", "b").returncode == 1
    # the name is free again
    assert sg.ctl("policy.load", "b", str(b)).returncode == 0
    assert sg.ctl("policy.use", "b").returncode == 0 and stamp(sg) == "B"


def test_policy_load_errors_change_nothing(origin, surogat, tmp_path):
    a = tmp_path / "a.lua"
    write(a, STAMP.format(tag="A"))
    bad = tmp_path / "bad.lua"
    write(bad, 'function deliver(req, resp)\n    resp.http["X"] = \nend\n')
    undeclared = tmp_path / "undeclared.lua"
    write(undeclared, 'director "d" { type = "round_robin", backends = { "nowhere" } }\n')
    sg = surogat(args=["-f", str(a)])
    before = policy_rows(sg)
    p = sg.ctl("policy.load", "bad", str(bad))
    assert p.returncode == 1 and p.stdout == ""
    # Lua shortens a long path from the left ("...") but keeps its end
    assert re.search(r"bad\.lua:3: ", p.stderr), p.stderr
    p = sg.ctl("policy.load", "undeclared", str(undeclared))
    assert p.returncode == 1 and re.search(r"undeclared\.lua:1: ", p.stderr), p.stderr
    p = sg.ctl("policy.load", "gone", str(tmp_path / "missing.lua"))
    assert p.returncode == 1 and "missing.lua" in p.stderr
    p = sg.ctl("policy.load", "dir", str(tmp_path))  # a directory opens, and used to abort
    assert p.returncode == 1 and "not a regular file" in p.stderr, p.stderr
    for name in ("1abc", "a b", "x" * 65, "a/b"):
        p = sg.ctl("policy.load", name, str(a))
        assert p.returncode == 1 and "name" in p.stderr, (name, p.stderr)
    p = sg.ctl("policy.load", "boot", str(a))
    assert p.returncode == 1 and "loaded already" in p.stderr
    assert sg.ctl("policy.load", "onlyone").returncode == 1  # too few arguments
    assert policy_rows(sg) == before
    assert stamp(sg) == "A"


def test_policy_without_f_and_sighup_reloads_active(origin, surogat, tmp_path):
    b = tmp_path / "b.lua"
    write(b, STAMP.format(tag="B"))
    sg = surogat()  # no -f: the built-in policy
    assert stamp(sg) is None
    assert sg.ctl("policy.load", "b", str(b)).returncode == 0
    assert stamp(sg) is None
    assert sg.ctl("policy.use", "b").returncode == 0
    assert stamp(sg) == "B"
    # SIGHUP reloads the file of the program in use, under its name
    write(b, STAMP.format(tag="B2"))
    sg.signal(signal.SIGHUP)
    wait_until(lambda: stamp(sg) == "B2", 10, "the reloaded program in use")
    assert policy_rows(sg) == {"b": ("active", str(b))}
    assert sg.stat("policy_reload") == 1
    # a broken file leaves the running program as it was
    write(b, "function deliver(\n")
    sg.signal(signal.SIGHUP)
    wait_until(lambda: "reload: failed" in sg.log_tail(), 10, "the reload refused")
    assert stamp(sg) == "B2" and sg.stat("policy_reload") == 1


def test_policy_switch_under_traffic(origin, surogat, tmp_path):
    """Requests run while the programs are switched back and forth: none
    fails, each is stamped by one of them, and after the last switch every
    response carries the last one's stamp."""
    a, b = tmp_path / "a.lua", tmp_path / "b.lua"
    write(a, STAMP.format(tag="A"))
    write(b, STAMP.format(tag="B"))
    origin.route("/t", body=b"t", headers=CC60)
    sg = surogat(args=["-f", str(a)])
    assert sg.ctl("policy.load", "b", str(b)).returncode == 0
    stop = threading.Event()
    seen, errors = [], []

    def client():
        with sg.conn() as c:
            while not stop.is_set():
                try:
                    c.request("GET", "/t")
                    r = c.read_response()
                    seen.append((r.status, r.header("X-Policy")))
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(repr(e))
                    return

    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(6):
            assert sg.ctl("policy.use", "b" if i % 2 == 0 else "boot").returncode == 0
            time.sleep(0.15)
        # discarded while workers may still run it: they keep it until they move on
        assert sg.ctl("policy.discard", "b").returncode == 0
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(10)
    assert not errors, errors
    assert seen and all(s == 200 and tag in ("A", "B") for s, tag in seen), seen[:20]
    assert {tag for _, tag in seen} == {"A", "B"}
    for _ in range(4):
        assert stamp(sg, "/t") == "A"  # "boot" was used last


def test_loaded_program_backends_probed_and_listed(origin, surogat, tmp_path):
    """A loaded program's declared backends exist at once: backend.list
    shows each with its probe history, and policy.discard takes them away."""
    origin.route("/health", body=b"ok")
    p = tmp_path / "probed.lua"
    write(p, 'backend "probed" { host = "127.0.0.1", port = %d, '
             'probe = { url = "/health", interval = 0.1, window = 8, threshold = 3 } }\n'
          % origin.port)
    sg = surogat()
    assert sg.ctl("policy.load", "probed", str(p)).returncode == 0

    def row():
        out = sg.ctl("backend.list").stdout
        for ln in out.splitlines():
            f = ln.split()
            if f and f[0] == "probed":
                return f
        return None

    origin.wait_hits("/health", 4)  # past the initial results the window starts with
    f = row()
    assert f[-1].endswith("HHHH"), f
    assert f[1] == "127.0.0.1:%d" % origin.port and f[2] == "healthy", f
    assert re.fullmatch(r"[1-8]/8", f[-2]) and re.fullmatch(r"[H-]{8}", f[-1]), f
    # the probe sees the backend fail: the history shows it, then the health
    origin.route("/health", status=500, body=b"no")
    wait_until(lambda: row()[-1].endswith("---") and row()[2] == "sick", 10,
               "failed probes and a sick backend")
    assert sg.ctl("backend.set_health", "probed", "healthy").returncode == 0
    assert row()[2] == "healthy" and row()[3] == "healthy"
    assert sg.ctl("policy.discard", "probed").returncode == 0
    assert row() is None


# -- purge -----------------------------------------------------------------------------


def test_purge_url(origin, surogat):
    origin.route("/p", body=b"v1", headers=CC60)
    sg = surogat()

    def get(host):
        return httpc.fetch(sg.port, "GET", "/p", None, vhost=host)

    assert get("a.test").body == b"v1" and is_hit(get("a.test"))
    assert get("b.test").body == b"v1" and is_hit(get("B.test"))  # hosts compare lower-cased
    origin.route("/p", body=b"v2", headers=CC60)
    # one host: only its object goes
    p = sg.ctl("purge", "/p", "A.TEST")
    assert p.returncode == 0 and p.stdout.strip() == "Purged 1 object.", p.stdout
    assert get("a.test").body == b"v2"
    assert get("b.test").body == b"v1" and is_hit(get("b.test"))
    # the absolute form names the host itself
    p = sg.ctl("purge", "http://b.test/p")
    assert p.returncode == 0 and p.stdout.strip() == "Purged 1 object.", p.stdout
    assert get("b.test").body == b"v2"
    # without a host: that path on every host
    assert is_hit(get("a.test")) and is_hit(get("b.test"))
    p = sg.ctl("purge", "/p")
    assert p.returncode == 0 and p.stdout.strip() == "Purged 2 objects.", p.stdout
    assert not is_hit(get("a.test")) and not is_hit(get("b.test"))
    p = sg.ctl("purge", "/nothing", "a.test")
    assert p.returncode == 0 and p.stdout.strip() == "Purged 0 objects."
    st = sg.stats()
    assert st["purges"] == 4 and st["purge_objects"] == 4
    for args in (("p",), ("http:///p",), ("/p", "a b"), ("http://a.test/p", "a.test"),
                 ("/p#frag", "a.test")):
        p = sg.ctl("purge", *args)
        assert p.returncode == 1 and p.stderr.strip(), (args, p.stdout)


def test_purge_all_variants(origin, surogat):
    origin.route("/v", body=b"var", headers={"Cache-Control": "max-age=60", "Vary": "X-Lang"})
    sg = surogat()
    for lang in ("en", "de", "fr"):
        sg.get("/v", headers={"X-Lang": lang})
        assert is_hit(sg.get("/v", headers={"X-Lang": lang}))
    p = sg.ctl("purge", "/v", "surogat.test")  # httpc's default Host
    assert p.returncode == 0 and p.stdout.strip() == "Purged 3 objects.", p.stdout
    assert not is_hit(sg.get("/v", headers={"X-Lang": "de"}))


# -- top ---------------------------------------------------------------------------------


def test_top_one_frame(origin, surogat):
    origin.route("/h", body=b"hit me", headers=CC60)
    sg = surogat()
    sg.get("/h")
    stop = threading.Event()

    def load():
        while not stop.is_set():
            sg.get("/h")
            time.sleep(0.01)

    t = threading.Thread(target=load)
    t.start()
    try:
        t0 = time.monotonic()
        p = sg.ctl("top", "-1")
        took = time.monotonic() - t0
    finally:
        stop.set()
        t.join(10)
    assert p.returncode == 0, p.stderr
    assert took < 10
    out = p.stdout
    assert "\033" not in out  # no escape sequences when not on a terminal
    lines = out.splitlines()
    assert lines[0].startswith("surogat top  127.0.0.1:%d" % sg.admin_port), lines[0]
    m = re.match(r"Hit ratio: ([\d.]+)% last ([\d.]+)s", lines[1])
    assert m and float(m.group(1)) > 90, lines[1]  # every request but the first is a hit
    assert re.match(r"Requests:  [\d.]+/s", lines[2]) and float(lines[2].split()[1][:-2]) > 0
    assert lines[4].split() == ["NAME", "CURRENT", "CHANGE/s", "AVG/s", "DESCRIPTION"]
    rows = [ln.split() for ln in lines[5:]]
    names = [r[0] for r in rows]
    st = sg.stats()
    assert sorted(names) == sorted(st), "top shows every counter once"
    rates = [abs(float(r[2])) for r in rows]
    assert rates == sorted(rates, reverse=True), "most active first"
    byname = {r[0]: r for r in rows}
    assert float(byname["cache_hit"][2]) > 0 and float(byname["client_req"][2]) > 0
    assert names.index("cache_hit") < names.index("sto_size")
    # the values are the daemon's: counters only grew since
    for name in ("cache_hit", "client_req", "sess_conn"):
        assert 0 < int(byname[name][1]) <= st[name]
    assert int(byname["sto_size"][1]) == st["sto_size"]
    # Each row with its description, as `stats -l` gives it.
    assert " ".join(byname["cache_hit"][4:]) == "Requests answered from the cache."


def test_top_live_quits_on_q(origin, surogat):
    sg = surogat()
    master, slave = os.openpty()
    proc = subprocess.Popen(ctl_argv(sg, "top", "-d", "0.2"), stdin=slave, stdout=slave,
                            stderr=slave)
    os.close(slave)
    seen = bytearray()
    try:
        deadline = time.monotonic() + 10
        while seen.count(b"\033[H\033[2J") < 3 and time.monotonic() < deadline:
            if select.select([master], [], [], 0.5)[0]:
                seen.extend(os.read(master, 65536))
        assert seen.count(b"\033[H\033[2J") >= 3, bytes(seen[-500:])  # redrawn, in place
        assert b"Hit ratio" in seen and b"CHANGE/s" in seen
        os.write(master, b"q")
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        os.close(master)
    # Ctrl-C quits too, with status 0
    proc = subprocess.Popen(ctl_argv(sg, "top"), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err
        assert out.count(b"CHANGE/s") >= 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


# -- a Unix admin socket ------------------------------------------------------------


def test_unix_socket(origin, tmp_path):
    need_binaries()
    sock = tmp_path / "admin.sock"
    secret = tmp_path / "secret"
    secret.write_text("unix-secret\n")
    port = free_port()
    log = tmp_path / "surogatd.log"
    with open(log, "wb") as lf:
        proc = subprocess.Popen([SUROGATD, "-F"] + ROOT_OK + ["-a", "127.0.0.1:%d" % port, "-b", origin.addr,
                                 "-n", str(tmp_path / "wd"), "-T", str(sock), "-S", str(secret),
                                 "-p", "shutdown_timeout=3s"],
                                stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: proc.poll() is not None or (listening(port) and sock.exists()), 20,
                   "surogatd to listen")
        assert proc.poll() is None, log.read_text()
        assert stat.S_ISSOCK(sock.stat().st_mode)
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        base = [SUROGATCTL, "-T", str(sock), "-S", str(secret)]
        p = subprocess.run(base + ["ping"], capture_output=True, text=True, timeout=15)
        assert p.returncode == 0 and "PONG" in p.stdout, p.stderr
        p = subprocess.run(base[:3] + ["ping"], capture_output=True, text=True, timeout=15)
        assert p.returncode == 2  # the socket asks for the secret too
        p = subprocess.run(base + ["top", "-1"], capture_output=True, text=True, timeout=15)
        assert p.returncode == 0 and "Hit ratio" in p.stdout
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    assert proc.returncode == 0, log.read_text()
    assert "Sanitizer" not in log.read_text()
    assert not sock.exists()  # removed at exit


@pytest.mark.parametrize("cmd", ["policy.list", "ban.list", "backend.list", "storage.list"])
def test_listing_commands_take_no_arguments(origin, surogat, cmd):
    sg = surogat()
    p = sg.ctl(cmd, "extra")
    assert p.returncode == 1 and "Too many arguments" in p.stderr
