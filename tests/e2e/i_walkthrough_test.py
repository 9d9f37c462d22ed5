"""README.md's first contact, run as written.

- The demo: scripts/run.sh itself, with its sample origin; /slow takes a
  second and then comes from the cache, as the start page and run.sh say.
- "Put it in front of your Apache": the walkthrough's commands, taken from
  the README, run against a copy of Debian's /etc/apache2 (the paths moved
  to the copy, port 8080 to a free one), a real Apache started from it with
  mod_remoteip, surogat started with the DAEMON_OPTS the walkthrough writes,
  and the walkthrough's curl run twice -- from 127.0.0.2, so that Apache's
  log can tell the client's address from surogat's 127.0.0.1.
- "Serve static files" and "Write a policy": the command and the script of
  the README, run.

The package steps (dpkg-buildpackage, apt install) are i_package_test.py's."""

import html
import os
import re
import shlex
import signal
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import APACHE, Apache, REPO, ROOT_OK, SUROGATD, free_port, listening, wait_until
import cstatus
import httpc
from unitfile import environment_file, unit_entries, unit_environment

README = REPO / "README.md"
CLIENT = "127.0.0.2"  # not 127.0.0.1, surogat's own address towards Apache


def readme_section(title):
    text = README.read_text()
    m = re.search(r"^## %s\n(.*?)(?=^## )" % re.escape(title), text, re.M | re.S)
    assert m, "README.md has no section %r" % title
    return m.group(1)


def code_blocks(section, lang):
    return re.findall(r"^```%s\n(.*?)^```" % lang, section, re.M | re.S)


def commands(block):
    """The block's shell commands: continuation lines joined, a line of
    `a && b` taken as its commands in turn (but the package line, whole)."""
    out = []
    for line in re.sub(r"\\\n", "", block).splitlines():
        out += [line] if "dpkg-buildpackage" in line else line.split(" && ")
    return out


def curl_run(cmd, port):
    """A README curl line sent to surogat on `port` from CLIENT: (status,
    {header: value}, seconds curl printed)."""
    argv = shlex.split(cmd)
    assert argv[0] == "curl" and "%{time_total}" in " ".join(argv), argv
    argv = [re.sub(r"^http://(localhost|127\.0\.0\.1(:\d+)?)/", "http://127.0.0.1:%d/" % port, a)
            for a in argv]
    p = subprocess.run(argv[:1] + ["--interface", CLIENT, "--max-time", "20"] + argv[1:],
                       capture_output=True, timeout=30)
    assert p.returncode == 0, p
    head, _, tail = p.stdout.decode().rpartition("\r\n\r\n")
    lines = head.split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    seconds = float(re.fullmatch(r"([0-9.]+) s\n", tail).group(1))
    return status, hdrs, seconds


# -- the demo ------------------------------------------------------------------


@pytest.fixture
def demo(tmp_path):
    """scripts/run.sh, as a user starts it, on free ports; stopped as Ctrl-C
    stops it (SIGINT to its process group)."""
    if not os.access(SUROGATD, os.X_OK):
        pytest.skip("%s not built" % SUROGATD)
    port, origin_port, admin = free_port(), free_port(), free_port()
    env = dict(os.environ, PORT=str(port), ORIGIN_PORT=str(origin_port),
               ADMIN="127.0.0.1:%d" % admin, BUILD=str(Path(SUROGATD).parent))
    out = open(tmp_path / "run.out", "wb")
    proc = subprocess.Popen(["sh", str(REPO / "scripts/run.sh")], cwd=str(tmp_path), env=env,
                            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_until(lambda: proc.poll() is not None or (
            listening(port) and listening(origin_port) and listening(admin)), 120,
            "run.sh to start surogat and the origin")
        assert proc.poll() is None, (tmp_path / "run.out").read_text()
        wait_until(lambda: "stop: Ctrl-C" in (tmp_path / "run.out").read_text(), 10, "run.sh")
        yield port, (tmp_path / "run.out"), proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        out.close()


def test_demo_shows_acceleration(demo):
    port, out, proc = demo
    said = out.read_text()
    # run.sh says how to see it, with its own port ...
    cmd = re.search(r"^\s+(curl .*/slow)$", said, re.M)
    assert cmd and "http://127.0.0.1:%d/slow" % port in cmd.group(1), said
    # ... and so does the start page.
    r = httpc.fetch(port, "GET", "/", headers={"Host": "127.0.0.1:%d" % port})
    page = html.unescape(r.body.decode())
    assert r.status == 200 and "See the difference" in page, page
    assert cmd.group(1) in page, page
    assert "Cache-Status: surogat; fwd=uri-miss; stored" in page
    assert "Cache-Status: surogat; hit; ttl=29" in page

    status, h1, t1 = curl_run(cmd.group(1), port)
    assert status == 200 and h1["cache-control"] == "max-age=30", h1
    assert t1 >= 1.0 and h1["cache-status"] == "surogat; fwd=uri-miss; stored", (t1, h1)
    status, h2, t2 = curl_run(cmd.group(1), port)
    assert status == 200 and re.fullmatch(r"surogat; hit; ttl=(29|30|28)", h2["cache-status"]), h2
    assert t2 < 0.25 and "age" in h2, (t2, h2)

    # Ctrl-C stops both, and run.sh cleans up after itself.
    kids = children(proc.pid)
    assert len(kids) == 2, kids  # the origin and surogatd
    sgd = next(argv for argv in kids.values() if argv[0].endswith("/surogatd"))
    work = Path(sgd[sgd.index("-n") + 1])
    assert work.is_dir()
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(20) == 0, out.read_text()
    for pid in kids:
        wait_until(lambda: not Path("/proc/%d" % pid).exists(), 10, "pid %d to exit" % pid)
    assert not listening(port) and not work.exists()


def children(ppid):
    """{pid: argv} of the processes whose parent is ppid."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            if int(stat.rpartition(")")[2].split()[1]) == ppid:
                out[int(d.name)] = (d / "cmdline").read_text().split("\0")[:-1]
        except (OSError, IndexError, ValueError):
            continue
    return out


# -- in front of Apache --------------------------------------------------------


APACHE_ETC = Path("/etc/apache2")


class DebianApache(Apache):
    """Apache from a copy of /etc/apache2, with its run-time directories in
    the copy: what `systemctl restart apache2` starts, on loopback.  Stopped
    and removed as conftest's Apache."""

    def __init__(self):
        self.root = Path(tempfile.mkdtemp(prefix="surogat-walkthrough-"))
        self.root.chmod(0o755)  # Apache's children (www-data) write its logs here
        self.etc = self.root / "etc-apache2"
        shutil.copytree(APACHE_ETC, self.etc, symlinks=True)
        for d in ("logs", "run", "lock", "state"):
            (self.root / d).mkdir()
        # a2enmod and a2enconf write to APACHE_CONFDIR, and record what the
        # admin enabled in APACHE_STATE_DIRECTORY (else /var/lib/apache2).
        self.env = dict(os.environ, APACHE_CONFDIR=str(self.etc),
                        APACHE_STATE_DIRECTORY=str(self.root / "state"), APACHE_RUN_USER="www-data",
                        APACHE_RUN_GROUP="www-data", APACHE_RUN_DIR=str(self.root / "run"),
                        APACHE_PID_FILE=str(self.root / "run/apache2.pid"),
                        APACHE_LOCK_DIR=str(self.root / "lock"),
                        APACHE_LOG_DIR=str(self.root / "logs"), LANG="C")
        self.proc = None

    def start(self, port):
        self.port = port
        self.log = open(self.root / "logs" / "stdout.log", "wb")
        self.proc = subprocess.Popen([APACHE, "-d", str(self.etc), "-f",
                                      str(self.etc / "apache2.conf"), "-DFOREGROUND"],
                                     env=self.env, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: self.proc.poll() is not None or listening(port), 20, "apache")
        assert self.proc.poll() is None, "apache exited:\n%s" % self.error_log()

    def access_lines(self, path):
        f = self.root / "logs" / "access.log"
        text = f.read_text(errors="replace") if f.exists() else ""
        return [ln for ln in text.splitlines() if '"GET %s HTTP/' % path in ln]

    def stop(self):
        if self.proc is None:  # never started
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            super().stop()


@pytest.fixture
def debian_apache():
    if not os.access(APACHE, os.X_OK) or not (APACHE_ETC / "apache2.conf").exists():
        pytest.skip("Debian's apache2 is not installed")
    if shutil.which("a2enmod") is None or shutil.which("curl") is None:
        pytest.skip("a2enmod or curl missing")
    if not os.path.exists("/usr/lib/apache2/modules/mod_remoteip.so"):
        pytest.skip("mod_remoteip missing")
    a = DebianApache()
    yield a
    a.stop()


def daemon_opts(defaults_file, port):
    """surogat's settings once the walkthrough wrote /etc/default/surogat: the
    backend (the unit's default, with the walkthrough's port moved as Apache's
    was) and DAEMON_OPTS with its paths moved to this tree and to -n."""
    unit = (REPO / "dist/surogat.service.in").read_text()
    env = unit_environment(unit_entries(unit), defaults_file.read_text())
    opts = env["DAEMON_OPTS"].split()
    assert opts[:2] == ["-a", ":80"], opts  # on port 80: the fixture gives a test port
    args = []
    for w in opts[2:]:
        w = w.replace("/etc/surogat/vcl/", str(REPO / "vcl") + "/")
        w = w.replace("/var/log/surogat/", "")  # into -n
        args.append(w)
    return env["BACKEND"].replace(":8080", ":%d" % port), args


def test_in_front_of_apache(debian_apache, surogat, tmp_path):
    apache = debian_apache
    block, = code_blocks(readme_section("Put it in front of your Apache"), "sh")
    apache_port = free_port()
    defaults = tmp_path / "default-surogat"  # /etc/default/surogat, as the package leaves it
    defaults.write_text((REPO / "debian/surogat.default").read_text())
    sg = curl = None
    steps = []
    for cmd in commands(block):
        if "dpkg-buildpackage" in cmd:
            # The package: i_package_test.py builds, installs and runs it.
            assert cmd == ("sh scripts/deps.sh && dpkg-buildpackage -us -uc -b && "
                           "apt install ../surogat_*.deb"), cmd
            steps.append("package")
        elif cmd == "systemctl restart apache2":
            apache.start(apache_port)
            steps.append("apache")
        elif cmd == "systemctl restart surogat":
            backend, args = daemon_opts(defaults, apache_port)
            assert backend == "127.0.0.1:%d" % apache_port, backend
            sg = surogat(backend=backend, args=args)
            steps.append("surogat")
        elif cmd.startswith("curl "):
            curl = cmd
            steps.append("curl")
        else:
            assert re.match(r"(sed|a2enmod|a2enconf|printf|echo) ", cmd), (
                "a walkthrough step this test does not know: %r" % cmd)
            cmd = cmd.replace("/etc/apache2/", str(apache.etc) + "/")
            cmd = cmd.replace("/etc/default/surogat", str(defaults))
            cmd = cmd.replace(":8080", ":%d" % apache_port)
            # Nothing of this machine's configuration is touched.
            assert not re.search(r"(^|[\s>])/etc/", cmd.split("'")[0] + cmd.split("'")[-1]), cmd
            p = subprocess.run(["sh", "-ec", cmd], env=apache.env, capture_output=True,
                               text=True, timeout=60)
            assert p.returncode == 0, (cmd, p.stdout, p.stderr)
            steps.append(cmd.split()[0])
    assert steps == ["package", "sed", "sed", "printf", "a2enmod", "a2enconf", "apache", "echo",
                     "surogat", "curl"], steps
    # What the steps did to Apache's configuration.
    assert (apache.etc / "mods-enabled/remoteip.load").exists()
    assert (apache.root / "state/module/enabled_by_admin/remoteip").exists()  # not /var/lib
    assert (apache.etc / "conf-enabled/surogat.conf").exists()
    assert "Listen 127.0.0.1:%d" % apache_port in (apache.etc / "ports.conf").read_text()

    # "Run the curl twice": Apache, then the cache.
    path = re.search(r"http://localhost(/\S*)", curl).group(1)
    status, h1, t1 = curl_run(curl, sg.port)
    assert status == 200 and cstatus.forwarded(h1["cache-status"], stored=True), h1
    status, h2, t2 = curl_run(curl, sg.port)
    assert status == 200 and re.fullmatch(r"surogat; hit; ttl=\d+", h2["cache-status"]), h2
    assert "age" in h2 and h2["x-policy"] == "static" and t2 < 0.25, (h2, t2)
    assert sg.stat("cache_hit") == 1

    # Apache saw one request, and logged the client's address, not surogat's.
    wait_until(lambda: apache.access_lines(path), 10, "apache's access log line")
    lines = apache.access_lines(path)
    assert len(lines) == 1 and lines[0].split()[0] == CLIENT, lines
    # A page, not from the cache: the same.
    r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--interface",
                        CLIENT, "http://127.0.0.1:%d/" % sg.port], capture_output=True,
                       text=True, timeout=30)
    assert r.stdout == "200", r
    wait_until(lambda: apache.access_lines("/"), 10, "the page in apache's access log")
    assert apache.access_lines("/")[0].split()[0] == CLIENT
    # X-Forwarded-For is believed from surogat only: a client's own is not.
    for via_port, url in ((sg.port, "/?through-surogat"), (apache_port, "/?direct")):
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-H",
                            "X-Forwarded-For: 203.0.113.9", "--interface", CLIENT,
                            "http://127.0.0.1:%d%s" % (via_port, url)],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r
        wait_until(lambda: apache.access_lines(url), 10, "%s in apache's log" % url)
        assert apache.access_lines(url)[0].split()[0] == CLIENT, apache.access_lines(url)
    assert "error" not in apache.error_log().lower(), apache.error_log()


# -- static files and a policy ---------------------------------------------------


def test_static_files_command(surogat, tmp_path):
    block, = code_blocks(readme_section("Serve static files"), "sh")
    argv = shlex.split(block.strip())
    assert argv[:5] == ["surogatd", "-j", "surogat", "-a", ":80"], argv
    assert argv[5] == "-b", argv
    www = tmp_path / "www"
    www.mkdir()
    (www / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(32))
    (www / "site.css").write_text("body { margin: 0 }\n")
    (www / "index.php").write_text("<?php echo 'secret';\n")
    sg = surogat(backend=str(www), args=argv[7:])
    r = sg.get("/logo.png")
    assert r.status == 200 and r.header("Cache-Control") == "max-age=2592000", r
    assert r.has("Expires") and r.has("ETag")
    assert sg.get("/site.css").header("Cache-Control") == "max-age=604800"
    assert sg.get("/index.php").status == 404


def test_policy_example(origin, surogat, tmp_path):
    section = readme_section("Write a policy")
    script, = code_blocks(section, "lua")
    assert script.startswith("-- /etc/surogat/site.lua\n")
    f = tmp_path / "site.lua"
    f.write_text(script)
    p = subprocess.run([SUROGATD] + ROOT_OK + ["-C", "-f", str(f)], capture_output=True,
                       text=True, timeout=20)
    assert p.returncode == 0 and p.stdout.strip() == "%s: ok" % f, p
    origin.route("/news/today", body=b"news", headers={"Cache-Control": "no-cache",
                                                       "X-Powered-By": "PHP/8.2"})
    origin.route("/news/login", body=b"hi", headers={"Set-Cookie": "s=1"})
    origin.route("/admin/", body=b"admin", headers={"Cache-Control": "max-age=600"})
    sg = surogat(args=["-f", str(f)])
    for _ in range(2):
        r = sg.get("/news/today")
        assert r.status == 200 and not r.has("X-Powered-By"), r
    assert cstatus.hit_ttl(r) is not None and 295 <= cstatus.hit_ttl(r) <= 300, r
    assert origin.hits("/news/today") == 1
    for _ in range(2):
        assert sg.get("/news/login").status == 200
        assert sg.get("/admin/").body == b"admin"
    assert origin.hits("/news/login") == 2 and origin.hits("/admin/") == 2
