"""Installation and running as a service.

`meson install --destdir` from the build the suite runs (the directory of
$SUROGATD) into a staging directory: every file where it belongs with sane
modes, each manual page rendered by man(1) without a warning, the systemd
unit checked by `systemd-analyze verify` and the logrotate snippet by
`logrotate -d`.  Then -j: started as root on a port below 1024, every thread
of surogatd runs as nobody, serves, and survives a real logrotate run whose
postrotate SIGUSR1 makes it reopen its logs and nothing else: a policy
changed on disk waits for a reload (SIGHUP, `surogatctl reload`)."""

import grp
import json
import os
import pwd
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, SUROGATD, free_port, listening, run_surogatd, wait_until
import httpc
from unitfile import exec_argv, unit_entries, unit_environment

MAN_PAGES = ["man1/surogatctl.1", "man5/surogat.conf.5", "man7/surogat-lua.7",
             "man7/surogat-params.7", "man8/surogatd.8"]


def build_dir():
    """The meson build directory surogatd comes from."""
    d = Path(os.environ.get("MESON_BUILD_ROOT") or Path(SUROGATD).resolve().parent)
    if not (d / "meson-private").is_dir():
        pytest.fail("%s is not a meson build directory (set MESON_BUILD_ROOT)" % d)
    return d


class Staged:
    """A `meson install --destdir` of the build, and where each part went."""

    def __init__(self, root):
        b = build_dir()
        p = subprocess.run(["meson", "install", "-C", str(b), "--destdir", str(root),
                            "--no-rebuild", "--quiet"],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, "meson install failed:\n%s%s" % (p.stdout, p.stderr)
        p = subprocess.run(["meson", "introspect", "--buildoptions", str(b)],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        self.opt = {o["name"]: o["value"] for o in json.loads(p.stdout)}
        self.root = Path(root)
        prefix = self.opt["prefix"]
        # As meson joins them: an absolute directory option ignores the prefix.
        self.path = {k: os.path.join(prefix, self.opt[k])
                     for k in ("bindir", "sbindir", "mandir", "sysconfdir")}
        self.user = self.opt["service_user"]
        self.unitdir = self.opt["systemdunitdir"] or os.path.join(prefix, "lib/systemd/system")
        self.prefix = prefix

    def at(self, *parts):
        """The staged copy of an installed path."""
        return self.root / os.path.join(*parts).lstrip("/")

    def expected(self):
        """{installed path: mode} of everything the install must put in place."""
        etc = os.path.join(self.path["sysconfdir"], "surogat")
        want = {os.path.join(self.path["sbindir"], "surogatd"): 0o755,
                os.path.join(self.path["bindir"], "surogatctl"): 0o755,
                os.path.join(etc, "surogat.conf"): 0o644,
                os.path.join(etc, "haproxy-fleet.cfg"): 0o644,
                os.path.join(etc, "haproxy-cluster.cfg"): 0o644,
                os.path.join(self.unitdir, "surogat.service"): 0o644,
                os.path.join(self.path["sysconfdir"], "logrotate.d", "surogat"): 0o644,
                os.path.join(self.prefix, "lib/sysusers.d/surogat.conf"): 0o644}
        for m in MAN_PAGES:
            want[os.path.join(self.path["mandir"], m)] = 0o644
        for f in sorted((REPO / "vcl").iterdir()):
            if f.suffix in (".lua", ".md"):
                want[os.path.join(etc, "vcl", f.name)] = 0o644
        return want


@pytest.fixture(scope="module")
def staged():
    root = tempfile.mkdtemp(prefix="surogat-stage-")
    try:
        yield Staged(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


# -- files ---------------------------------------------------------------------


def test_install_puts_every_file_in_place(staged):
    want = staged.expected()
    for path, mode in want.items():
        f = staged.at(path)
        assert f.is_file(), "%s not installed (staging %s)" % (path, staged.root)
        got = stat.S_IMODE(f.stat().st_mode)
        assert got == mode, "%s: mode %o, want %o" % (path, got, mode)
    # Nothing else, and nothing writable by others, anywhere in the tree.
    found = set()
    for d, dirs, files in os.walk(staged.root):
        for name in dirs + files:
            f = Path(d) / name
            assert not f.stat().st_mode & stat.S_IWOTH, "%s is world-writable" % f
            if f.is_file():
                found.add("/" + str(f.relative_to(staged.root)))
    assert found == set(want), "unexpected: %s; missing: %s" % (
        sorted(found - set(want)), sorted(set(want) - found))


def test_installed_programs_and_config_work(staged):
    sd = staged.at(staged.path["sbindir"], "surogatd")
    p = subprocess.run([str(sd), "-V"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and p.stdout.startswith("surogatd (surogat-"), p
    p = subprocess.run([str(staged.at(staged.path["bindir"], "surogatctl")), "-h"],
                       capture_output=True, text=True, timeout=10)
    assert p.returncode == 0 and "usage" in (p.stdout + p.stderr).lower(), p
    etc = staged.at(staged.path["sysconfdir"], "surogat")
    assert (etc / "surogat.conf").read_bytes() == (REPO / "etc/surogat.conf").read_bytes()
    assert (etc / "haproxy-fleet.cfg").read_bytes() == (REPO / "etc/haproxy-fleet.cfg").read_bytes()
    # The sample configuration loads, and every installed policy script compiles,
    # with the installed daemon.
    for script in sorted((etc / "vcl").glob("*.lua")):
        p = subprocess.run([str(sd), "-c", str(etc / "surogat.conf"), "-f", str(script), "-C"],
                           capture_output=True, text=True, timeout=20)
        assert p.returncode == 0 and p.stdout.strip() == "%s: ok" % script, p


# -- manual pages --------------------------------------------------------------


@pytest.mark.parametrize("page", MAN_PAGES)
def test_man_page_renders_without_warnings(staged, page):
    f = staged.at(staged.path["mandir"], page)
    env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8", MAN_KEEP_FORMATTING="")
    p = subprocess.run(["man", "--warnings", "-l", str(f)], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stderr == "", "man --warnings -l %s:\n%s" % (page, p.stderr)
    assert re.search(r"^NAME\n", p.stdout, re.M) and re.search(r"^SEE ALSO\n", p.stdout, re.M)
    p = subprocess.run(["groff", "-ww", "-z", "-man", str(f)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0 and p.stderr == "", "groff -ww:\n%s" % p.stderr
    # Every surogat page it points to is installed too.
    names = {Path(m).name for m in MAN_PAGES}
    for name, sec in re.findall(r"\b(surogat[a-z.\\-]*)\s*\\?f?[RP]?\((\d)\)", f.read_text()):
        ref = name.replace("\\-", "-") + "." + sec
        assert ref in names, "%s refers to %s(%s), which is not installed" % (page, name, sec)


def test_conf_page_example_loads():
    """The example in surogat.conf(5) is a configuration surogatd accepts."""
    text = (REPO / "man/surogat.conf.5").read_text()
    ex = text.split(".SH EXAMPLES", 1)[1].split(".EX\n", 1)[1].split(".EE", 1)[0]
    conf = ex.replace("\\-", "-").replace("\\e", "\\")
    assert "listen = " in conf and "purge_acl" in conf
    with tempfile.TemporaryDirectory() as d:
        cf = Path(d) / "surogat.conf"
        cf.write_text(conf)
        p = run_surogatd(["-c", str(cf), "-f", str(REPO / "vcl/purge.lua"), "-C"])
        assert p.returncode == 0, p.stderr
        # and a line the page calls an error is one
        cf.write_text(conf + "thread_pools = 99\n")
        p = run_surogatd(["-c", str(cf), "-f", str(REPO / "vcl/purge.lua"), "-C"])
        n = len(conf.splitlines()) + 1
        assert p.returncode == 2 and "%s:%d: thread_pools" % (cf, n) in p.stderr, p.stderr


# -- systemd unit, logrotate ---------------------------------------------------


def test_systemd_unit(staged):
    unit = staged.at(staged.unitdir, "surogat.service")
    text = unit.read_text()
    e = unit_entries(text)
    keys = dict(e)
    sbin = os.path.join(staged.path["sbindir"], "surogatd")
    start = keys["ExecStart"].split()
    assert start[0] == sbin, "ExecStart %r does not run the installed %s" % (start[0], sbin)
    assert ["-j", staged.user] == start[start.index("-j"):start.index("-j") + 2]
    # Type=notify wants the READY=1 of a build with libsystemd (sd_notify).
    ldd = subprocess.run(["ldd", str(staged.at(sbin))], capture_output=True, text=True,
                         timeout=20).stdout
    assert "-F" in start and keys["Type"] == ("notify" if "libsystemd" in ldd else "exec")
    conf = os.path.join(staged.path["sysconfdir"], "surogat", "surogat.conf")
    assert start[start.index("-c") + 1] == conf
    assert re.fullmatch(r"/(usr/)?bin/kill -HUP \$MAINPID", keys["ExecReload"])
    assert keys["ProtectSystem"] == "strict"
    for k in ("ProtectHome", "PrivateTmp", "NoNewPrivileges"):
        assert keys[k] == "yes", k
    caps = set(keys["CapabilityBoundingSet"].split())
    assert {"CAP_NET_BIND_SERVICE", "CAP_SETUID", "CAP_SETGID"} <= caps
    assert not caps & {"CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_NET_ADMIN"}, caps
    assert int(keys["LimitNOFILE"]) >= 65536
    n = start[start.index("-n") + 1]
    rw = {p.lstrip("-") for p in keys["ReadWritePaths"].split()}
    assert n in rw and "/var/cache/surogat" in rw, rw
    verify = shutil.which("systemd-analyze")
    if verify is None:
        pytest.skip("systemd-analyze is not installed (scripts/deps.sh installs systemd)")
    # verify checks that ExecStart exists and that man finds each Documentation=
    # page: point both at the staging directory.
    with tempfile.TemporaryDirectory() as d:
        u = Path(d) / "surogat.service"
        u.write_text(text.replace(sbin, str(staged.at(sbin))))
        env = dict(os.environ, MANPATH=str(staged.at(staged.path["mandir"])))
        p = subprocess.run([verify, "verify", str(u)], capture_output=True, text=True,
                           timeout=60, env=env)
    assert p.returncode == 0 and p.stdout + p.stderr == "", (
        "systemd-analyze verify:\n%s%s" % (p.stdout, p.stderr))


def logrotate_config(staged, user, logdir=None, rundir=None):
    """The installed snippet; for a test, its user and directories replaced."""
    text = staged.at(staged.path["sysconfdir"], "logrotate.d", "surogat").read_text()
    assert re.search(r"^\s*create 0640 %s " % re.escape(staged.user), text, re.M), text
    text = re.sub(r"(create 0640) %s " % re.escape(staged.user), r"\1 %s " % user, text)
    if logdir:
        text = text.replace("/var/log/surogat/", logdir + "/")
    if rundir:
        text = text.replace("/run/surogat/", rundir + "/")
    return text


def test_logrotate_snippet_parses(staged):
    lr = shutil.which("logrotate") or "/usr/sbin/logrotate"
    text = staged.at(staged.path["sysconfdir"], "logrotate.d", "surogat").read_text()
    assert "/var/log/surogat/*.log" in text and "postrotate" in text
    assert 'kill -USR1 "$(cat /run/surogat/surogatd.pid)"' in text
    assert "-HUP" not in text  # rotating the logs must not reload the policy
    # The unit writes the pid file the snippet signals.
    unit = staged.at(staged.unitdir, "surogat.service").read_text()
    assert "-P /run/surogat/surogatd.pid" in unit
    try:
        pwd.getpwnam(staged.user)
        user = staged.user
    except KeyError:  # not created here (sysusers.d does it on install)
        user = "nobody"
    with tempfile.TemporaryDirectory() as d:
        cf = Path(d) / "surogat"
        cf.write_text(logrotate_config(staged, user))
        p = subprocess.run([lr, "-d", "-s", str(Path(d) / "state"), str(cf)],
                           capture_output=True, text=True, timeout=60)
    out = p.stdout + p.stderr
    assert p.returncode == 0 and "error" not in out.lower(), out
    assert "rotating pattern: /var/log/surogat/*.log" in out, out


# -- -j: dropping root ---------------------------------------------------------


def need_root_and_nobody():
    if os.geteuid() != 0:
        pytest.skip("-j needs the tests to run as root")
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")


def low_port():
    """A free TCP port below 1024 on 127.0.0.1: only root may bind it."""
    ports = list(range(600, 1024))
    random.shuffle(ports)
    for port in ports:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    pytest.fail("no free port below 1024")


def proc_ids(pid):
    """{tid: {Uid, Gid, Groups, CapEff, CapPrm}} of every thread of pid."""
    out = {}
    for t in os.listdir("/proc/%d/task" % pid):
        try:
            text = Path("/proc/%d/task/%s/status" % (pid, t)).read_text()
        except OSError:  # a worker that just exited
            continue
        f = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        out[int(t)] = {k: f[k].split() for k in ("Uid", "Gid", "Groups", "CapEff", "CapPrm")}
    return out


@pytest.fixture
def jaildir():
    """A directory nobody can traverse (the test's tmp_path is root's 0700)."""
    d = Path(tempfile.mkdtemp(prefix="surogat-jail-"))
    d.chmod(0o755)
    for sub in ("log", "run", "etc", "lib"):
        (d / sub).mkdir(mode=0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


POLICY = 'function deliver(req, resp)\n    resp.http["X-Policy"] = "%s"\nend\n'


def test_jail_runs_every_thread_as_the_user(origin, surogat, staged, jaildir):
    pw = need_root_and_nobody()
    policy = jaildir / "etc/policy.lua"
    policy.write_text(POLICY % "v1")
    policy.chmod(0o644)
    port = low_port()
    log, run = jaildir / "log", jaildir / "run"
    sg = surogat(port=port,
                 params={"access_log": str(log / "access.log"),
                         "error_log": str(log / "error.log")},
                 args=["-j", "nobody", "-f", str(policy), "-P", str(run / "surogatd.pid"),
                       "-s", "file,store,8m"])
    r = sg.get("/before")
    assert r.status == 200 and r.header("X-Policy") == "v1", r

    ids = proc_ids(sg.pid)
    assert len(ids) >= 4, "expected surogatd's threads, found %s" % sorted(ids)
    groups = {str(g) for g in os.getgrouplist("nobody", pw.pw_gid)}
    for tid, f in ids.items():
        assert f["Uid"] == [str(pw.pw_uid)] * 4, "thread %d: Uid %s" % (tid, f["Uid"])
        assert f["Gid"] == [str(pw.pw_gid)] * 4, "thread %d: Gid %s" % (tid, f["Gid"])
        assert set(f["Groups"]) == groups, "thread %d: Groups %s" % (tid, f["Groups"])
        assert int(f["CapEff"][0], 16) == 0 and int(f["CapPrm"][0], 16) == 0, (tid, f)
    # What it made as root is the user's now: -n, the store, the logs.
    for f in (sg.workdir, sg.workdir / "store", log / "access.log", log / "error.log"):
        st = f.stat()
        assert (st.st_uid, st.st_gid) == (pw.pw_uid, pw.pw_gid), "%s owned by %d:%d" % (
            f, st.st_uid, st.st_gid)
    assert (run / "surogatd.pid").read_text().strip() == str(sg.pid)
    assert "running as nobody (uid %d" % pw.pw_uid in (log / "error.log").read_text()

    # logrotate, with the installed snippet: its postrotate SIGUSR1 makes the
    # daemon, no longer root, reopen both logs -- and not deploy the policy
    # script changed on disk meanwhile.
    wait_until(lambda: "/before" in (log / "access.log").read_text(), 10, "access log line")
    policy.write_text(POLICY % "v2")
    cf = jaildir / "logrotate.conf"
    cf.write_text(logrotate_config(staged, "nobody", str(log), str(run)))
    p = subprocess.run([shutil.which("logrotate") or "/usr/sbin/logrotate", "-f", "-s",
                        str(jaildir / "state"), str(cf)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "/before" in (log / "access.log.1").read_text()
    assert "running as nobody" in (log / "error.log.1").read_text()
    wait_until(lambda: "SIGUSR1: logs reopened" in (log / "error.log").read_text(), 10,
               "the reopening logged in the new error.log")
    new = (log / "error.log").read_text()
    assert "cannot reopen" not in new and "reload" not in new, new
    assert sg.stat("policy_reload") == 0
    r = sg.get("/after")
    assert r.status == 200 and r.header("X-Policy") == "v1", r  # still the running policy
    # The reload deploys it, as the user the daemon runs as.
    p = sg.ctl("reload")
    assert p.returncode == 0 and p.stdout.startswith("reload: ok (") and "policy boot reloaded" in (
        p.stdout), p.stdout + p.stderr
    assert sg.get("/after2").header("X-Policy") == "v2"
    assert "reload: ok (" in (log / "error.log").read_text()
    wait_until(lambda: "/after2" in (log / "access.log").read_text(), 10, "new access log lines")
    assert "/after" not in (log / "access.log.1").read_text()
    st = (log / "access.log").stat()
    assert st.st_uid == pw.pw_uid and stat.S_IMODE(st.st_mode) == 0o640
    assert sg.alive()
    assert sg.stop() == 0, sg.log_tail()


def test_jail_unix_syntax_and_group(origin, surogat):
    """Varnish's -j unix,user=U,group=G: G wins over U's own group."""
    pw = need_root_and_nobody()
    others = [g for g in grp.getgrall() if g.gr_gid not in (0, pw.pw_gid)]
    if not others:
        pytest.skip("no group to choose")
    g = others[0]
    sg = surogat(args=["-j", "unix,user=nobody,group=%s" % g.gr_name])
    assert sg.get("/").status == 200
    for f in proc_ids(sg.pid).values():
        assert f["Uid"] == [str(pw.pw_uid)] * 4 and f["Gid"] == [str(g.gr_gid)] * 4, f
    assert (sg.workdir.stat().st_uid, sg.workdir.stat().st_gid) == (pw.pw_uid, g.gr_gid)


def test_root_with_jail_none_stays_root(origin, surogat, tmp_path):
    """Root without -j is o_ops_test's (the surogat user, or a refusal)."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    sg2 = surogat(args=["-j", "none"])
    wait_until(lambda: "running as root (-j none)" in sg2.log_tail(), 5, "the notice")
    assert "warning" not in sg2.log_tail()
    for f in proc_ids(sg2.pid).values():
        assert f["Uid"][0] == "0"


@pytest.mark.parametrize("spec,msg", [
    ("root", "'root' is root; give -j none"),
    ("nosuchuser-xyz", "no such user 'nosuchuser-xyz'"),
    ("unix", "expected unix,user=USER"),
    ("unix,user=nobody,jailroot=/x", "unexpected 'jailroot=/x'"),
    ("unix,user=nobody,group=root", "group 'root' is root's"),
    ("unix,user=nobody,group=nosuchgroup-xyz", "no such group"),
    ("a=b", "expected USER, unix,user=USER[,group=GROUP] or none"),
])
def test_jail_bad_spec(spec, msg):
    p = run_surogatd(["-j", spec, "-b", "127.0.0.1:1", "-a", "127.0.0.1:0"])
    assert p.returncode == 2, p
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("surogatd: -j %s: " % spec), p.stderr
    assert msg in lines[0], lines[0]


def test_jail_unprivileged_start_cannot_switch():
    """Started as nobody, surogatd cannot become another user: exit 2, one line."""
    pw = need_root_and_nobody()
    other = next((p for p in pwd.getpwall() if p.pw_uid not in (0, pw.pw_uid)), None)
    if other is None:
        pytest.skip("no other user")

    def become_nobody():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)

    if not os.access(SUROGATD, os.X_OK) or subprocess.run(
            [SUROGATD, "-V"], preexec_fn=become_nobody, capture_output=True,
            timeout=10).returncode != 0:
        pytest.skip("nobody cannot run %s" % SUROGATD)
    with tempfile.TemporaryDirectory() as d:
        os.chmod(d, 0o777)
        port = socket.socket()
        port.bind(("127.0.0.1", 0))
        n = port.getsockname()[1]
        port.close()
        p = subprocess.run([SUROGATD, "-F", "-j", other.pw_name, "-a", "127.0.0.1:%d" % n,
                            "-b", "127.0.0.1:1", "-n", os.path.join(d, "wd")],
                           preexec_fn=become_nobody, capture_output=True, text=True,
                           timeout=20)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert p.returncode == 2 and len(lines) == 1, p
    assert "only root can become %s (running as uid %d)" % (other.pw_name, pw.pw_uid) in lines[0]


def unit_command(staged, jaildir, env):
    """The unit's ExecStart as systemd expands it, with its directories, user
    and addresses moved to the test's."""
    text = staged.at(staged.unitdir, "surogat.service").read_text()
    e = unit_entries(text)
    argv = exec_argv(dict(e)["ExecStart"], dict(unit_environment(e), **env))
    moved = {"/var/lib/surogat": str(jaildir / "lib"), "/run/surogat": str(jaildir / "run"),
             "/var/log/surogat": str(jaildir / "log")}
    out = []
    for w in argv:
        for a, b in moved.items():
            w = w.replace(a, b)
        out.append(w)
    sbin = os.path.join(staged.path["sbindir"], "surogatd")
    conf = os.path.join(staged.path["sysconfdir"], "surogat", "surogat.conf")
    out = [str(staged.at(sbin)) if w == sbin else str(staged.at(conf)) if w == conf else w
           for w in out]
    out[out.index("-j") + 1] = "nobody"
    return out


def test_unit_command_line_runs(origin, staged, jaildir):
    """What the unit starts works: its options parse, it binds, drops to the
    user, serves and logs where the logrotate snippet looks."""
    pw = need_root_and_nobody()
    port = low_port()
    admin = socket.socket()
    admin.bind(("127.0.0.1", 0))
    admin_port = admin.getsockname()[1]
    admin.close()
    argv = unit_command(staged, jaildir, {"BACKEND": origin.addr,
                                          "ADMIN": "127.0.0.1:%d" % admin_port})
    assert argv.count("-a") == 1 and argv[argv.index("-a") + 1] == ":80", argv
    argv[argv.index("-a") + 1] = "127.0.0.1:%d" % port  # loopback only, in a test
    out = open(jaildir / "stderr", "wb")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: proc.poll() is not None or (listening(port) and listening(admin_port)),
                   20, "the unit's surogatd to listen")
        assert proc.poll() is None, (jaildir / "stderr").read_text()
        r = httpc.fetch(port, "GET", "/unit")
        assert r.status == 200, r
        wait_until(lambda: (jaildir / "log/access.log").exists()
                   and "/unit" in (jaildir / "log/access.log").read_text(), 10, "access log")
        assert (jaildir / "run/surogatd.pid").read_text().strip() == str(proc.pid)
        assert (jaildir / "lib").stat().st_uid == pw.pw_uid
        for f in proc_ids(proc.pid).values():
            assert f["Uid"] == [str(pw.pw_uid)] * 4, f
        assert "running as nobody" in (jaildir / "stderr").read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, (jaildir / "stderr").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        out.close()
    text = (jaildir / "stderr").read_text()
    assert "Sanitizer" not in text and "runtime error:" not in text, text
