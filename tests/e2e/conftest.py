"""Fixtures for the e2e suite: a scripted origin, a real Apache, and the
surogatd binary itself, all on loopback.  Everything started here is
stopped here, by pid, even when the test fails."""

import os
import re
import select
import shutil
import signal
from signal import SIGTERM
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import httpc
from origins import Origin

REPO = Path(__file__).resolve().parents[2]
SUROGATD = os.environ.get("SUROGATD", str(REPO / "build" / "surogatd"))
SUROGATCTL = os.environ.get("SUROGATCTL", str(REPO / "build" / "surogatctl"))
APACHE = "/usr/sbin/apache2"
APACHE_MODULES = "/usr/lib/apache2/modules"

# Sanitizer builds are slower: every bound is generous, and short timeouts
# are set through parameters rather than waited out.
START_TIMEOUT = 20.0
STOP_TIMEOUT = 15.0


_handed_out = set()


def free_port(family=socket.AF_INET, host="127.0.0.1"):
    """A port nothing listens on now and that no earlier call returned: the
    kernel may offer a just-closed port again, and a test that asks for a
    dead backend's port and then for the daemon's own must not get the same
    one twice."""
    while True:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.bind((host, 0))
        port = s.getsockname()[1]
        s.close()
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def have_ipv6_loopback():
    try:
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.bind(("::1", 0))
        s.close()
        return True
    except OSError:
        return False


def listening(port):
    """Whether something listens on TCP `port` (from /proc: no connection is made,
    so the daemon's counters are not disturbed)."""
    want = ":%04X" % port
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(f) as fh:
                next(fh)
                for line in fh:
                    fields = line.split()
                    if fields[1].endswith(want) and fields[3] == "0A":
                        return True
        except OSError:
            continue
    return False


def wait_until(pred, timeout, what, interval=0.02):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


# Started as root, surogatd wants -j: the tests keep root on purpose (a test
# of -j itself passes its own).
ROOT_OK = ["-j", "none"] if os.geteuid() == 0 else []


def need_binaries():
    for b in (SUROGATD, SUROGATCTL):
        if not os.access(b, os.X_OK):
            pytest.skip("%s not built (set SUROGATD/SUROGATCTL or build first)" % b)


def run_surogatd(args, timeout=8, cwd=None):
    """Run surogatd to completion (for command-line tests); bounded."""
    need_binaries()
    try:
        return subprocess.run([SUROGATD] + ROOT_OK + args, capture_output=True, text=True,
                              timeout=timeout, cwd=cwd)
    except subprocess.TimeoutExpired as e:  # run() has killed it
        raise AssertionError("surogatd %s still running after %ss (it should have exited); "
                             "stderr: %r" % (" ".join(args), timeout, e.stderr)) from None


class Surogat:
    """One running surogatd."""

    def __init__(self, workdir, backend, params, args, listen6=False, conf=None, secret=None,
                 pidfile=False, port=None):
        self.workdir = Path(workdir)  # not created here: -n must create it
        self.backend = backend
        self.params = dict(params)
        self.port = port or free_port()
        self.admin_port = free_port()
        self.port6 = free_port(socket.AF_INET6, "::1") if listen6 else None
        self.secret = None
        self.log_path = self.workdir.parent / (self.workdir.name + ".stderr")
        self.stopped = False
        self.rc = None
        argv = [SUROGATD, "-F", "-a", "127.0.0.1:%d" % self.port] + ROOT_OK
        if listen6:
            argv += ["-a", "[::1]:%d" % self.port6]
        argv += ["-b", backend, "-n", str(self.workdir), "-T", "127.0.0.1:%d" % self.admin_port]
        if secret is not None:
            self.secret = self.workdir.parent / (self.workdir.name + ".secret")
            self.secret.write_text(secret)
            argv += ["-S", str(self.secret)]
        self.pidfile = None
        if pidfile:
            self.pidfile = self.workdir.parent / (self.workdir.name + ".pid")
            argv += ["-P", str(self.pidfile)]
        if conf is not None:
            cf = self.workdir.parent / (self.workdir.name + ".conf")
            cf.write_text(conf)
            argv += ["-c", str(cf)]
        for k, v in self.params.items():
            argv += ["-p", "%s=%s" % (k, v)]
        argv += list(args)
        self.argv = argv
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT, cwd=str(self.workdir.parent))
        self.pid = self.proc.pid
        try:
            ports = [self.port, self.admin_port] + ([self.port6] if listen6 else [])
            wait_until(lambda: self.proc.poll() is not None or all(listening(p) for p in ports),
                       START_TIMEOUT, "surogatd to listen")
            if self.proc.poll() is not None:
                raise AssertionError("surogatd exited %s at startup:\n%s\nargv: %s"
                                     % (self.proc.returncode, self.log_tail(), argv))
        except BaseException:
            self.kill()
            raise

    # -- process -----------------------------------------------------------

    def log_tail(self, n=30):
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def signal(self, sig):
        assert self.proc.poll() is None, "surogatd already exited (%s):\n%s" % (
            self.proc.returncode, self.log_tail())
        os.kill(self.pid, sig)

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM and wait; returns the exit status (None if it had to be killed)."""
        self.stopped = True
        if self.proc.poll() is None:
            os.kill(self.pid, SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        self.rc = self.proc.returncode
        return self.rc

    def kill(self):
        self.stopped = True
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()

    def alive(self):
        return self.proc.poll() is None

    # -- HTTP --------------------------------------------------------------

    def conn(self, timeout=10.0, v6=False):
        if v6:
            return httpc.Conn(self.port6, host="::1", timeout=timeout)
        return httpc.Conn(self.port, timeout=timeout)

    def get(self, path="/", headers=None, **kw):
        return httpc.fetch(self.port, "GET", path, headers, **kw)

    def request(self, method, path="/", headers=None, body=None, **kw):
        return httpc.fetch(self.port, method, path, headers, body, **kw)

    def exchange(self, data, timeout=10.0):
        return httpc.exchange(self.port, data, timeout=timeout)

    # -- admin -------------------------------------------------------------

    def ctl(self, *args, secret=True, timeout=15):
        argv = [SUROGATCTL, "-T", "127.0.0.1:%d" % self.admin_port]
        if secret and self.secret is not None:
            argv += ["-S", str(self.secret)]
        return subprocess.run(argv + list(args), capture_output=True, text=True,
                              timeout=timeout)

    def stats(self):
        p = self.ctl("stats")
        assert p.returncode == 0, "surogatctl stats: exit %d: %s%s" % (
            p.returncode, p.stdout, p.stderr)
        out = {}
        for line in p.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2 and re.fullmatch(r"-?\d+", parts[1]):
                out[parts[0]] = int(parts[1])
        assert out, "surogatctl stats printed no counters: %r" % p.stdout
        return out

    def stat(self, name):
        st = self.stats()
        assert name in st, "no counter %r in stats (have %s)" % (name, sorted(st))
        return st[name]

    def wait_stat(self, name, at_least, timeout=5.0):
        last = [None]

        def ok():
            last[0] = self.stat(name)
            return last[0] >= at_least

        try:
            wait_until(ok, timeout, "%s >= %d" % (name, at_least), interval=0.05)
        except AssertionError:
            raise AssertionError("%s is %s after %.1fs, wanted >= %d"
                                 % (name, last[0], timeout, at_least)) from None
        return last[0]

    def admin(self, *lines, timeout=5.0):
        """Raw admin exchange: [(status, body)] for each line sent."""
        return admin_exchange(self.admin_port, lines, timeout)

    # -- access log --------------------------------------------------------

    def access_lines(self, name="access.log"):
        p = self.workdir / name
        if not p.exists():
            return []
        return p.read_text(errors="replace").splitlines()

    def wait_access_lines(self, n, name="access.log", timeout=10.0):
        return wait_until(lambda: len(self.access_lines(name)) >= n and self.access_lines(name),
                          timeout, "%d access log lines in %s" % (n, name))


def read_admin_reply(f):
    """One admin reply from a file object: (status, body)."""
    line = f.readline()
    if not line:
        raise AssertionError("admin connection closed")
    m = re.fullmatch(rb"(\d{3}) (\d+) *\n", line)
    assert m, "bad admin status line %r" % line
    n = int(m.group(2))
    body = f.read(n)
    assert len(body) == n, "admin body cut short"
    nl = f.read(1)
    assert nl == b"\n", "admin body not followed by newline: %r" % nl
    return int(m.group(1)), body


def admin_exchange(port, lines, timeout=5.0):
    """Send each line, return [(status, body)].  A banner the server sends on
    connect (Varnish style, status 200) is read and checked first."""
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        f = s.makefile("rwb")
        if select.select([s], [], [], 1.0)[0]:
            code, _ = read_admin_reply(f)
            assert code == 200, "admin banner status %d" % code
        for ln in lines:
            f.write(ln.encode() + b"\n")
            f.flush()
            out.append(read_admin_reply(f))
    return out


@pytest.fixture
def origin():
    o = Origin()
    yield o
    o.stop()


@pytest.fixture
def origins():
    """Factory: origins(n) -> n more Origins, all stopped on teardown."""
    made = []

    def make(n):
        for _ in range(n):
            made.append(Origin())
        return made[-n:]

    yield make
    for o in made:
        o.stop()


@pytest.fixture
def surogat(origin, tmp_path):
    """Factory: surogat(params={...}, backend="host:port", args=[...], ...).

    The backend defaults to the `origin` fixture.  shutdown_timeout defaults
    to 3s so a test that leaves a request hanging cannot stall teardown.
    On teardown each daemon is SIGTERMed (then SIGKILLed); a daemon that
    died on its own, did not exit 0 on SIGTERM, or logged a sanitizer
    report fails the test."""
    need_binaries()
    started = []

    def start(params=None, backend=None, args=(), **kw):
        p = {"shutdown_timeout": "3s"}
        p.update(params or {})
        for attempt in range(3):
            wd = tmp_path / ("sg%d" % (len(started) + attempt * 100))
            try:
                sg = Surogat(wd, backend or origin.addr, p, args, **kw)
            except AssertionError as e:
                # a free port taken between picking and binding: try new ports
                if "exited 2" in str(e) and attempt < 2 and "port" not in kw:
                    continue
                raise
            started.append(sg)
            return sg
        raise AssertionError("unreachable")

    yield start

    problems = []
    for sg in started:
        if sg.stopped:
            sg.log.close()
            continue
        if sg.proc.poll() is not None:
            problems.append("surogatd exited by itself with %s during the test:\n%s"
                            % (sg.proc.returncode, sg.log_tail()))
            sg.log.close()
            continue
        rc = sg.stop()
        sg.log.close()
        if rc is None:
            problems.append("surogatd did not exit within %ss of SIGTERM (killed):\n%s"
                            % (STOP_TIMEOUT, sg.log_tail()))
        elif rc != 0:
            problems.append("surogatd exited %s on SIGTERM:\n%s" % (rc, sg.log_tail(8)))
    for sg in started:
        text = sg.log_path.read_text(errors="replace") if sg.log_path.exists() else ""
        for word in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
            if word in text:
                i = text.index(word)
                problems.append("sanitizer report in the daemon log (%s):\n%s"
                                % (sg.log_path, text[max(0, i - 200):i + 3000]))
                break
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


# -- Apache -----------------------------------------------------------------

CGI_ECHO = r"""#!/usr/bin/python3
import hashlib, os, sys
body = sys.stdin.buffer.read()
out = ["method=%s" % os.environ.get("REQUEST_METHOD", ""),
       "query=%s" % os.environ.get("QUERY_STRING", ""),
       "body_len=%d" % len(body),
       "body_sha256=%s" % hashlib.sha256(body).hexdigest()]
for h in ("HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_PROTO", "HTTP_VIA", "HTTP_HOST",
          "HTTP_CONNECTION", "HTTP_KEEP_ALIVE", "HTTP_TE", "HTTP_X_TEST", "CONTENT_LENGTH",
          "HTTP_TRANSFER_ENCODING"):
    out.append("%s=%s" % (h, os.environ.get(h, "")))
data = ("\n".join(out) + "\n").encode()
sys.stdout.buffer.write(b"Content-Type: text/plain\r\nX-Cgi: yes\r\n\r\n" + data)
"""

APACHE_CONF = """\
ServerRoot {root}
ServerName 127.0.0.1
Listen 127.0.0.1:{port}
PidFile {root}/run/httpd.pid
DefaultRuntimeDir {root}/run
ErrorLog {root}/logs/error.log
LogLevel warn
LogFormat "%h %l %u %t \\"%r\\" %>s %b %{{X-Forwarded-For}}i" x
CustomLog {root}/logs/access.log x
User www-data
Group www-data
LoadModule mpm_prefork_module {mods}/mod_mpm_prefork.so
LoadModule authz_core_module {mods}/mod_authz_core.so
LoadModule mime_module {mods}/mod_mime.so
LoadModule dir_module {mods}/mod_dir.so
LoadModule alias_module {mods}/mod_alias.so
LoadModule cgi_module {mods}/mod_cgi.so
LoadModule env_module {mods}/mod_env.so
LoadModule headers_module {mods}/mod_headers.so
TypesConfig /etc/mime.types
StartServers 2
MinSpareServers 2
MaxSpareServers 6
MaxRequestWorkers 32
KeepAlive On
MaxKeepAliveRequests 0
KeepAliveTimeout 30
Timeout 30
DocumentRoot {root}/htdocs
<Directory />
  Require all denied
  AllowOverride None
</Directory>
<Directory {root}/htdocs>
  Require all granted
</Directory>
ScriptAlias /cgi-bin/ {root}/cgi-bin/
<Directory {root}/cgi-bin>
  Require all granted
  Options +ExecCGI
</Directory>
DirectoryIndex index.html
"""


class Apache:
    def __init__(self, extra_conf=""):
        self.root = Path(tempfile.mkdtemp(prefix="surogat-e2e-apache-"))
        # the children run as www-data: the tree must be readable by them
        # (pytest's tmp_path is under a 0700 directory, so it cannot be used)
        os.chmod(self.root, 0o755)
        for d in ("htdocs", "cgi-bin", "logs", "run"):
            (self.root / d).mkdir()
            os.chmod(self.root / d, 0o755)
        self.files = {
            "index.html": b"<html><body>surogat e2e</body></html>\n",
            "small.txt": b"hello from apache\n",
            "big.bin": os.urandom(1 << 20),
        }
        for name, data in self.files.items():
            (self.root / "htdocs" / name).write_bytes(data)
            os.chmod(self.root / "htdocs" / name, 0o644)
        cgi = self.root / "cgi-bin" / "echo.py"
        cgi.write_text(CGI_ECHO)
        os.chmod(cgi, 0o755)
        self.port = free_port()
        self.addr = "127.0.0.1:%d" % self.port
        conf = self.root / "httpd.conf"
        conf.write_text(APACHE_CONF.format(root=self.root, port=self.port, mods=APACHE_MODULES)
                        + extra_conf.format(root=self.root, mods=APACHE_MODULES))
        self.log = open(self.root / "logs" / "stdout.log", "wb")
        self.proc = subprocess.Popen([APACHE, "-d", str(self.root), "-f", str(conf),
                                      "-DFOREGROUND"], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            wait_until(lambda: self.proc.poll() is not None or listening(self.port), 20,
                       "apache to listen")
            if self.proc.poll() is not None:
                raise AssertionError("apache exited %s:\n%s" % (self.proc.returncode,
                                                                 self.error_log()))
            r = httpc.fetch(self.port, path="/small.txt")
            assert r.status == 200, "apache direct GET: %r\n%s" % (r, self.error_log())
        except BaseException:
            self.stop()
            raise

    def requests(self, path, method="GET"):
        """Requests for path in the access log.  Apache logs a request after
        its response went out, so the count is read until it holds still
        (compare with a count taken first: a module's tests share one Apache)."""
        log = self.root / "logs" / "access.log"
        want = '"%s %s ' % (method, path)

        def count():
            if not log.exists():
                return 0
            return sum(1 for ln in log.read_text(errors="replace").splitlines() if want in ln)
        n = count()
        for _ in range(50):
            time.sleep(0.05)
            m = count()
            if m == n:
                return n
            n = m
        return n

    def error_log(self):
        p = self.root / "logs" / "error.log"
        return p.read_text(errors="replace") if p.exists() else ""

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                # its own process group: the parent we started and its children
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="module")
def apache():
    if not os.access(APACHE, os.X_OK):
        pytest.skip("%s not installed" % APACHE)
    for m in ("mpm_prefork", "authz_core", "mime", "dir", "alias", "cgi", "env", "headers"):
        if not os.path.exists("%s/mod_%s.so" % (APACHE_MODULES, m)):
            pytest.skip("apache module mod_%s missing" % m)
    a = Apache()
    yield a
    a.stop()
