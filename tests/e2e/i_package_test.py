"""The Debian package (debian/).

Built with `dpkg-buildpackage -us -uc -b` from a copy of the tree (the
unit tests are left to the suite: DEB_BUILD_OPTIONS=nocheck), inspected
(its files, modes, conffiles, dependencies, maintainer scripts, lintian
when installed), then installed on this machine with dpkg -i, started as
its systemd unit starts surogatd, made to serve, reload and stop, and
purged: nothing of it may be left but the system user, which Debian
practice keeps (files it owned may outlive the package).

When systemd runs this machine the unit itself is started, with a runtime
drop-in moving it to loopback test ports before dpkg even installs it.
Otherwise (a container) the test does what systemd would: the unit's
directories, its environment (Environment=, then /etc/default/surogat),
its ExecStart= expanded, run as root with a NOTIFY_SOCKET that the test
reads as systemd would for Type=notify; ExecReload= and SIGTERM.

The test needs root and installs a package: it skips, touching nothing,
when surogat is installed already or its files are present from another
install."""

import os
import pwd
import re
import resource
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import REPO, free_port, listening, wait_until
import cstatus
import httpc
from sdnotify import Manager, thread_uids
from unitfile import exec_argv, unit_entries, unit_environment

PKG = "surogat"
UNIT = "/lib/systemd/system/surogat.service"
DEFAULTS = "/etc/default/surogat"
RUNTIME_DIRS = {"StateDirectory": "/var/lib", "CacheDirectory": "/var/cache",
                "LogsDirectory": "/var/log", "RuntimeDirectory": "/run"}
# Where an earlier `meson install -Dprefix=/usr` would have put surogat:
# dpkg -i would silently take these files over, and the purge delete them.
FOREIGN = ["/usr/sbin/surogatd", "/usr/bin/surogatctl", "/etc/surogat", UNIT, DEFAULTS,
           "/usr/lib/systemd/system/surogat.service"]
MAN_PAGES = ["man1/surogatctl.1", "man5/surogat.conf.5", "man7/surogat-lua.7",
             "man7/surogat-params.7", "man8/surogatd.8"]
BUILD_TIMEOUT = 600


def run(argv, timeout=120, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def package_status():
    """dpkg's status of the package: "" when dpkg does not know it."""
    p = run(["dpkg-query", "-W", "-f=${Status}", PKG])
    return p.stdout.strip() if p.returncode == 0 else ""


def installed():
    return package_status().endswith(" installed")


def need_packaging():
    if os.geteuid() != 0:
        pytest.skip("installing a package needs root")
    for tool in ("dpkg-buildpackage", "dh", "dpkg-deb", "dpkg"):
        if shutil.which(tool) is None:
            pytest.skip("%s is not installed (scripts/deps.sh installs debhelper and dpkg-dev)"
                        % tool)
    status = package_status()
    if status not in ("", "unknown ok not-installed"):
        pytest.skip("the package %s is on this machine (%s): the test would replace and "
                    "purge it" % (PKG, status))
    there = [f for f in FOREIGN if os.path.lexists(f)]
    if there:
        pytest.skip("%s exist without the package: installing it would take them over"
                    % ", ".join(there))


def copy_tree(dst):
    """The source tree as git sees it (tracked and new files, not the build
    directories), or, outside git, everything but build*/ and .git."""
    p = run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard"])
    if p.returncode == 0 and p.stdout:
        for name in p.stdout.split("\0"):
            src = REPO / name
            if name and src.is_file():
                (dst / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst / name)
        return
    shutil.copytree(REPO, dst, symlinks=True,
                    ignore=shutil.ignore_patterns("build*", ".git", "__pycache__", "obj-*"))


def build_env():
    """The caller's environment without what would change the build: the
    compiler and flags come from dpkg-buildflags, as on a build daemon."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DEB_", "DH_")) and k not in (
               "CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "MAKEFLAGS")}
    env["DEB_BUILD_OPTIONS"] = "nocheck parallel=%d" % max(1, min(os.cpu_count() or 1, 4))
    return env


class Deb:
    def __init__(self, path, log):
        self.path = path
        self.log = log

    def field(self, name):
        p = run(["dpkg-deb", "-f", str(self.path), name])
        assert p.returncode == 0, p.stderr
        return p.stdout.strip()

    def control(self, member):
        """A control member (postinst, conffiles ...), "" when absent."""
        with tempfile.TemporaryDirectory() as d:
            p = run(["dpkg-deb", "-e", str(self.path), d])
            assert p.returncode == 0, p.stderr
            f = Path(d) / member
            return f.read_text() if f.exists() else ""

    def file(self, path):
        """The text of one file of the data archive."""
        p = subprocess.run("dpkg-deb --fsys-tarfile '%s' | tar -xOf - '.%s'" % (self.path, path),
                           shell=True, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return p.stdout

    def contents(self):
        """{path: (mode string, owner)} of the data archive."""
        p = run(["dpkg-deb", "-c", str(self.path)])
        assert p.returncode == 0, p.stderr
        out = {}
        for line in p.stdout.splitlines():
            f = line.split()
            path = f[5][1:].rstrip("/") or "/"
            out[path] = (f[0], f[1])
        return out


@pytest.fixture(scope="module")
def deb():
    need_packaging()
    work = Path(tempfile.mkdtemp(prefix="surogat-deb-"))
    try:
        src = work / PKG
        src.mkdir()
        copy_tree(src)
        p = run(["dpkg-buildpackage", "-us", "-uc", "-b"], timeout=BUILD_TIMEOUT, cwd=src,
                env=build_env())
        log = p.stdout + p.stderr
        assert p.returncode == 0, "dpkg-buildpackage failed:\n%s" % log[-6000:]
        debs = sorted(work.glob("%s_*.deb" % PKG))
        assert len(debs) == 1, "expected one %s .deb, built %s" % (
            PKG, sorted(f.name for f in work.iterdir()))
        yield Deb(debs[0], log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- the .deb ------------------------------------------------------------------


def expected_files():
    """{installed path: mode} of every file the package must ship."""
    want = {"/usr/sbin/surogatd": "-rwxr-xr-x", "/usr/bin/surogatctl": "-rwxr-xr-x"}
    for f in ("/etc/surogat/surogat.conf", "/etc/surogat/haproxy-fleet.cfg",
              "/etc/surogat/haproxy-cluster.cfg",
              "/etc/logrotate.d/surogat", DEFAULTS, UNIT,
              "/usr/lib/sysusers.d/surogat.conf", "/usr/share/doc/surogat/copyright",
              "/usr/share/doc/surogat/changelog.gz", "/usr/share/doc/surogat/README.md.gz"):
        want[f] = "-rw-r--r--"
    for m in MAN_PAGES:
        want["/usr/share/man/%s.gz" % m] = "-rw-r--r--"
    for f in sorted((REPO / "vcl").iterdir()):
        if f.suffix in (".lua", ".md"):
            want["/etc/surogat/vcl/" + f.name] = "-rw-r--r--"
    return want


def test_deb_holds_every_file_and_nothing_else(deb):
    got = deb.contents()
    want = expected_files()
    files = {p: m for p, (m, _) in got.items() if not m.startswith("d")}
    assert set(files) == set(want), "unexpected: %s; missing: %s" % (
        sorted(set(files) - set(want)), sorted(set(want) - set(files)))
    for path, mode in want.items():
        assert files[path] == mode, "%s: %s, want %s" % (path, files[path], mode)
    for path, (mode, owner) in got.items():
        assert owner == "root/root", "%s owned by %s" % (path, owner)
        assert mode[8] != "w", "%s is world-writable (%s)" % (path, mode)


def test_deb_control_and_maintainer_scripts(deb):
    changelog = (REPO / "debian/changelog").read_text().splitlines()[0]
    version = re.match(r"surogat \(([^)]+)\)", changelog).group(1)
    assert deb.field("Package") == PKG and deb.field("Version") == version
    meson_version = re.search(r"version: '([^']+)'", (REPO / "meson.build").read_text()).group(1)
    assert version.split("-")[0] == meson_version, (version, meson_version)
    depends = deb.field("Depends")
    # ${shlibs:Depends}: the libraries surogatd links, libsystemd for sd_notify
    # among them; ${misc:Depends}: systemd-sysusers for the user.
    for lib in ("libsystemd0", "libevent-core-2.1-7", "libssl3", "liblua5.4-0", "libpcre2-8-0"):
        assert lib in depends, "Depends lacks %s: %s" % (lib, depends)
    assert "systemd | systemd-standalone-sysusers" in depends, depends
    conffiles = set(deb.control("conffiles").split())
    etc = {p for p in expected_files() if p.startswith("/etc/")}
    assert conffiles == etc, (sorted(conffiles), sorted(etc))
    postinst = deb.control("postinst")
    assert "systemd-sysusers" in postinst and "surogat.conf" in postinst, postinst
    assert "deb-systemd-helper enable 'surogat.service'" in postinst, postinst
    assert "deb-systemd-invoke $_dh_action 'surogat.service'" in postinst, postinst
    postrm = deb.control("postrm")
    assert re.search(r'"\$1" = "purge".*\n\s*rm -rf /var/log/surogat /var/lib/surogat '
                     r'/var/cache/surogat /run/surogat', postrm), postrm
    assert "deb-systemd-helper purge 'surogat.service'" in postrm, postrm
    assert "userdel" not in postrm and "deluser" not in postrm  # the user stays
    prerm = deb.control("prerm")
    assert "deb-systemd-invoke stop 'surogat.service'" in prerm, prerm


def test_deb_unit_and_binary(deb, tmp_path):
    p = run(["dpkg-deb", "-x", str(deb.path), str(tmp_path)])
    assert p.returncode == 0, p.stderr
    unit = (tmp_path / UNIT.lstrip("/")).read_text()
    keys = dict(unit_entries(unit))
    assert keys["Type"] == "notify", unit
    start = keys["ExecStart"].split()
    assert start[:4] == ["/usr/sbin/surogatd", "-F", "-j", "surogat"], start
    assert start[start.index("-c") + 1] == "/etc/surogat/surogat.conf"
    assert "EnvironmentFile" in keys and keys["EnvironmentFile"] == "-" + DEFAULTS
    sysusers = (tmp_path / "usr/lib/sysusers.d/surogat.conf").read_text()
    assert re.search(r"^u surogat - .* /var/lib/surogat$", sysusers, re.M), sysusers
    logrotate = (tmp_path / "etc/logrotate.d/surogat").read_text()
    assert "create 0640 surogat adm" in logrotate, logrotate
    # Every variable the unit reads is described, commented out, in the defaults file.
    defaults = (tmp_path / DEFAULTS.lstrip("/")).read_text()
    env = unit_environment(unit_entries(unit))
    for var, val in env.items():
        assert re.search(r"^#%s=" % var, defaults, re.M), (var, defaults)
    sd = tmp_path / "usr/sbin/surogatd"
    p = run([str(sd), "-V"])
    assert p.returncode == 0 and p.stdout.startswith("surogatd (surogat-"), p
    ldd = run(["ldd", str(sd)]).stdout
    assert "libsystemd.so" in ldd, ldd
    # Stripped, with the symbols in the -dbgsym package.
    assert b".debug_info" not in sd.read_bytes()


def test_lintian_is_clean(deb):
    lintian = shutil.which("lintian")
    if lintian is None:
        pytest.skip("lintian is not installed")
    changes = sorted(deb.path.parent.glob("%s_*.changes" % PKG))
    assert len(changes) == 1
    p = run([lintian, "--allow-root", "--no-tag-display-limit", str(changes[0])], timeout=300)
    tags = [ln for ln in p.stdout.splitlines() if re.match(r"[EW]: ", ln)]
    assert tags == [], "lintian:\n%s" % p.stdout


# -- installed, running, purged ------------------------------------------------


def systemd_runs_this_machine():
    return os.path.isdir("/run/systemd/system") and shutil.which("systemctl") is not None


DROPIN_DIR = Path("/run/systemd/system/surogat.service.d")
DROPIN = DROPIN_DIR / "50-e2e-test.conf"


def service_settings(origin, port, admin_port, unit):
    """The settings `systemctl edit surogat` would make for the test:
    loopback addresses, the rest of the unit's options kept."""
    opts = unit_environment(unit_entries(unit))["DAEMON_OPTS"].split()
    assert opts[opts.index("-a") + 1] == ":80", opts
    opts[opts.index("-a") + 1] = "127.0.0.1:%d" % port
    return {"BACKEND": origin.addr, "ADMIN": "127.0.0.1:%d" % admin_port,
            "DAEMON_OPTS": " ".join(opts)}


def start_with_systemd():
    p = run(["systemctl", "restart", "surogat.service"], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    show = run(["systemctl", "show", "surogat.service", "-p", "Type", "-p", "ActiveState",
                "-p", "SubState", "-p", "MainPID", "-p", "StatusText"]).stdout
    props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
    assert props["Type"] == "notify" and props["ActiveState"] == "active", props
    assert props["StatusText"].startswith("serving"), props
    return int(props["MainPID"]), None


def start_as_the_unit(env, mgr, log):
    """ExecStart= run as systemd runs it, without systemd."""
    entries = unit_entries(Path(UNIT).read_text())
    keys = dict(entries)
    assert keys["Type"] == "notify" and "User" not in keys, keys
    for key, base in RUNTIME_DIRS.items():
        d = Path(base) / keys[key]
        d.mkdir(mode=0o755, exist_ok=True)  # systemd makes them, owned by User= (root)
    full = unit_environment(entries, Path(DEFAULTS).read_text())
    full.update(env)
    argv = exec_argv(keys["ExecStart"], full)
    nofile = int(keys["LimitNOFILE"])
    penv = dict(full, PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                LANG="C.UTF-8", NOTIFY_SOCKET=mgr.path)

    def as_systemd():
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        except (ValueError, OSError):
            # A container that may not raise its hard limit: as high as it goes.
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    proc = subprocess.Popen(argv, env=penv, cwd="/", stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, preexec_fn=as_systemd,
                            start_new_session=True)
    return proc.pid, proc


def stop_proc(proc):
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(10)


def test_install_start_serve_reload_stop_purge(deb, origin, tmp_path):
    port, admin_port = free_port(), free_port()
    origin.route("/pkg", body=b"through the package\n", headers={"Cache-Control": "max-age=60"})
    under_systemd = systemd_runs_this_machine()
    log = open(tmp_path / "surogatd.log", "wb")
    mgr = Manager(lambda m: {"listening": listening(port)}
                  if m["fields"].get("READY") == "1" else None)
    proc = None
    listed = []
    try:
        unit = deb.file(UNIT)
        env = service_settings(origin, port, admin_port, unit)
        if under_systemd:
            # In place before dpkg starts the service: never on :80 in a test.
            DROPIN_DIR.mkdir(parents=True, exist_ok=True)
            DROPIN.write_text("[Service]\n" + "".join(
                'Environment="%s=%s"\n' % kv for kv in env.items()))
            run(["systemctl", "daemon-reload"])

        p = run(["dpkg", "-i", str(deb.path)], timeout=300,
                env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        assert p.returncode == 0, "dpkg -i:\n%s%s" % (p.stdout, p.stderr)
        assert "warning" not in (p.stdout + p.stderr).lower(), p.stdout + p.stderr
        assert package_status() == "install ok installed"
        listed = run(["dpkg", "-L", PKG]).stdout.split()
        assert set(expected_files()) <= set(listed)
        assert Path(UNIT).read_text() == unit

        # postinst: the system user, and the unit enabled.
        pw = pwd.getpwnam("surogat")
        assert 0 < pw.pw_uid < 1000 and pw.pw_dir == "/var/lib/surogat", pw
        assert pw.pw_shell in ("/usr/sbin/nologin", "/sbin/nologin"), pw
        wants = Path("/etc/systemd/system/multi-user.target.wants/surogat.service")
        assert wants.is_symlink() and os.readlink(wants) == UNIT

        if under_systemd:
            pid, proc = start_with_systemd()
        else:
            pid, proc = start_as_the_unit(env, mgr, log)
            _, ready = mgr.wait_for("READY", "1", timeout=30)
            assert ready["pid"] == pid and ready["uid"] == pw.pw_uid, ready
            assert ready["seen"]["listening"], ready
            assert ready["fields"]["STATUS"] == "serving, backend %s" % origin.addr
        wait_until(lambda: listening(port) and listening(admin_port), 20, "the service to listen")

        # It serves, caches, and every thread runs as the package's user.
        r = httpc.fetch(port, "GET", "/pkg")
        assert r.status == 200 and r.body == b"through the package\n", r
        r = httpc.fetch(port, "GET", "/pkg")
        assert r.status == 200 and cstatus.is_hit(r), r
        assert origin.hits("/pkg") == 1
        uids = thread_uids(pid)
        assert len(uids) >= 4 and set(uids.values()) == {pw.pw_uid}, uids
        assert Path("/run/surogat/surogatd.pid").read_text().strip() == str(pid)
        assert Path("/var/lib/surogat").stat().st_uid == pw.pw_uid
        access = Path("/var/log/surogat/access.log")
        wait_until(lambda: access.exists() and access.read_text().count("/pkg") == 2, 10,
                   "two access log lines")
        st = access.stat()
        assert st.st_uid == pw.pw_uid and not st.st_mode & stat.S_IWOTH, st
        # The installed admin client, against the installed daemon.
        p = run(["/usr/bin/surogatctl", "-T", "127.0.0.1:%d" % admin_port, "stats"])
        assert p.returncode == 0 and re.search(r"^cache_hit\s+1$", p.stdout, re.M), p

        # ExecReload= and stop, as the unit says.
        if under_systemd:
            assert run(["systemctl", "reload", "surogat.service"]).returncode == 0
            wait_until(lambda: "reloaded" in run(["systemctl", "show", "surogat.service",
                                                  "-p", "StatusText"]).stdout, 10, "reloaded")
            assert httpc.fetch(port, "GET", "/pkg").status == 200
            assert run(["systemctl", "stop", "surogat.service"], timeout=120).returncode == 0
            show = run(["systemctl", "show", "surogat.service", "-p", "ActiveState",
                        "-p", "ExecMainStatus"]).stdout
            assert "ActiveState=inactive" in show and "ExecMainStatus=0" in show, show
        else:
            reload_cmd = dict(unit_entries(unit))["ExecReload"].replace("$MAINPID", str(pid))
            n = len(mgr.all())
            p = run(reload_cmd.split())
            assert p.returncode == 0, p.stderr
            j, _ = mgr.wait_for("RELOADING", "1", after=n)
            mgr.wait_for("READY", "1", after=j + 1)
            assert httpc.fetch(port, "GET", "/pkg").status == 200
            n = len(mgr.all())
            os.kill(pid, signal.SIGTERM)  # KillSignal= is systemd's default
            timeout = int(dict(unit_entries(unit))["TimeoutStopSec"])
            assert proc.wait(timeout) == 0, (tmp_path / "surogatd.log").read_text()
            mgr.wait_for("STOPPING", "1", after=n, timeout=5)
            text = (tmp_path / "surogatd.log").read_text()
            assert "running as surogat" in text and "cannot notify" not in text, text
            # The pid file outlives the daemon (its directory is root's):
            # systemd removes RuntimeDirectory= when the service stops.
            shutil.rmtree("/run/surogat")
        assert not Path("/run/surogat").exists()

        # Purge: nothing left but the user.
        p = run(["dpkg", "--purge", PKG], timeout=300)
        assert p.returncode == 0, "dpkg --purge:\n%s%s" % (p.stdout, p.stderr)
        assert package_status() in ("", "unknown ok not-installed"), package_status()
        left = [f for f in listed if os.path.lexists(f) and not os.path.isdir(f)]
        assert left == [], "left behind by the purge: %s" % left
        mine = ["/etc/surogat", "/usr/share/doc/surogat", "/var/log/surogat", "/var/lib/surogat",
                "/var/cache/surogat", "/run/surogat", str(wants)]
        assert [d for d in mine if os.path.lexists(d)] == [], mine
        helper = Path("/var/lib/systemd/deb-systemd-helper-enabled")
        assert not helper.exists() or not list(helper.rglob("surogat*")), list(
            helper.rglob("surogat*"))
        assert pwd.getpwnam("surogat").pw_uid == pw.pw_uid  # kept, as Debian does
    finally:
        stop_proc(proc)
        if under_systemd:
            run(["systemctl", "stop", "surogat.service"], timeout=120)
        if package_status() not in ("", "unknown ok not-installed"):
            run(["dpkg", "--purge", PKG], timeout=300)
        if under_systemd and DROPIN.exists():
            DROPIN.unlink()
            shutil.rmtree(DROPIN_DIR, ignore_errors=True)
            run(["systemctl", "daemon-reload"])
        mgr.close()
        log.close()
