"""Operators: Varnish users at home and one reload story.

Varnish's parameter names (-p, the config file, param.set, param.show) and
its feature flags; param.show in varnishadm's forms; the vcl.* commands and
backend.list driven by Debian's varnishadm, and varnishreload run against
surogatd; the CLI's quoting and here documents on the wire.  SIGHUP and
`surogatctl reload`: the config file, the policy and the certificates
checked first and applied all together or not at all, one log line each
time; SIGUSR1 and `log.reopen` reopen the logs and nothing else; surogatd -t
for good and bad files of each kind.  Root without -j becomes the surogat
user, or is refused, in a mount namespace whose /etc/passwd says which.
The printed forms: listening on ADDR:PORT, sizes in storage.list, dates in
ban.list."""

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

import httpc
from conftest import (REPO, SUROGATD, free_port, have_ipv6_loopback, listening,
                      read_admin_reply, run_surogatd, wait_until)
from origins import Origin
from t_tls_test import OPENSSL, Pki

VARNISHADM = shutil.which("varnishadm") or "/usr/bin/varnishadm"
VARNISHRELOAD = "/usr/share/varnish/varnishreload"
SECRET = "ops-secret-3f9a0c\n"

STAMP = 'function deliver(req, resp)\n    resp.http["X-Stamp"] = "%s"\nend\n'


def need_varnishadm():
    if not os.access(VARNISHADM, os.X_OK):
        pytest.skip("varnishadm is not installed (Debian's varnish package, scripts/deps.sh)")


def vadm(sg, *args, timeout=20):
    """Debian's varnishadm against surogatd: (exit status, stdout, stderr)."""
    need_varnishadm()
    p = subprocess.run([VARNISHADM, "-T", "127.0.0.1:%d" % sg.admin_port, "-S", str(sg.secret)]
                       + list(args), capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def show_value(sg, name):
    """The value param.show NAME prints on its "Value is:" line."""
    p = sg.ctl("param.show", name)
    assert p.returncode == 0, p.stderr
    m = re.search(r"^        Value is: (.*?)(?: \[\w+\])?(?: \(default\))?$", p.stdout, re.M)
    assert m, p.stdout
    return m.group(1)


def log_lines(sg, what):
    return [ln for ln in sg.log_tail(400).splitlines() if what in ln]


def wait_log(sg, what, n=1, timeout=10):
    """The n-th daemon log line containing `what`."""
    wait_until(lambda: len(log_lines(sg, what)) >= n, timeout, "%r in the log" % what)
    return log_lines(sg, what)[n - 1]


# -- Varnish's parameter names ---------------------------------------------------------


def test_varnish_names_on_the_command_line_in_the_file_and_at_runtime(origin, surogat, tmp_path):
    conf = tmp_path / "s.conf"
    conf.write_text("connect_timeout = 1.500\nbetween_bytes_timeout = 0.5m\n"
                    "http_gzip_support = disable\n")
    sg = surogat(params={"first_byte_timeout": "12.000"}, args=["-c", str(conf)], secret=SECRET)
    assert show_value(sg, "backend_first_byte_timeout") == "12"
    assert show_value(sg, "backend_connect_timeout") == "1.5"
    assert show_value(sg, "backend_between_bytes_timeout") == "30"
    assert show_value(sg, "http_gzip_support") == "off"
    # the alias shows its parameter, and says the Varnish name
    p = sg.ctl("param.show", "first_byte_timeout")
    assert p.stdout.startswith("backend_first_byte_timeout\n        Value is: 12 [seconds]\n"
                               "        Default is: 60\n        Minimum is: 1ms\n"), p.stdout
    assert "        Varnish name: first_byte_timeout\n" in p.stdout
    assert sg.ctl("param.set", "first_byte_timeout", "2.5").returncode == 0
    assert show_value(sg, "backend_first_byte_timeout") == "2.5"
    p = sg.ctl("param.set", "connect_timeout", "0")
    assert p.returncode == 1 and "connect_timeout: 0 is below the minimum 1ms" in p.stderr
    changed = sg.ctl("param.show", "changed").stdout.splitlines()
    names = [ln.split()[0] for ln in changed]
    assert {"backend_first_byte_timeout", "backend_connect_timeout",
            "backend_between_bytes_timeout", "http_gzip_support"} <= set(names), changed
    assert all("(default)" not in ln for ln in changed), changed
    assert sg.ctl("param.reset", "first_byte_timeout").returncode == 0
    assert show_value(sg, "backend_first_byte_timeout") == "60"
    # -x params lists Varnish's names, for the man page and surogat.conf
    x = subprocess.run([SUROGATD, "-x", "params"], capture_output=True, text=True, timeout=10)
    assert "backend_first_byte_timeout\n\tType: seconds\n" in x.stdout
    assert "\tVarnish: first_byte_timeout\n" in x.stdout and "\tVarnish: default_ttl\n" in x.stdout


@pytest.mark.parametrize("value,why", [
    ("-http2", "-http2 is not possible: HTTP/2 is chosen per listen address"),
    ("-esi_ignore_other_elements", "elements other than ESI's are always passed through"),
    ("-validate_headers", "-validate_headers is not possible"),
    ("+no_such_feature", "unknown feature 'no_such_feature'"),
])
def test_feature_refused_clearly(origin, value, why):
    r = run_surogatd(["-F", "-a", "127.0.0.1:%d" % free_port(), "-b", origin.addr,
                      "-p", "feature=%s" % value])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r
    assert lines[0].startswith("surogatd: -p feature: ") and why in lines[0], lines[0]


def test_feature_accepted_when_it_says_what_surogat_does(origin, surogat):
    sg = surogat(params={"feature": "+http2,+validate_headers,+https_scheme,-esi_remove_bom"})
    p = sg.ctl("param.show", "feature")
    assert ("Value is: +http2,+https_scheme,+esi_ignore_other_elements,+esi_include_onerror,"
            "+wait_silo,+validate_headers,+busy_stats_rate") in p.stdout
    for name in ("http2", "esi_remove_bom", "validate_headers", "busy_stats_rate"):
        assert re.search(r"^ +[-+]%s +\S" % name, p.stdout, re.M), p.stdout


def test_every_feature_and_alias_is_documented():
    conf5 = (REPO / "man" / "surogat.conf.5").read_text()
    feats = re.findall(r"^FEATURE\((\w+),", (REPO / "include/surogat/tbl/features.h").read_text(),
                       re.M)
    vparams = re.findall(r"^VPARAM\((\w+), (\w+)\)",
                         (REPO / "include/surogat/tbl/vparams.h").read_text(), re.M)
    assert feats and vparams
    for f in feats:
        assert f.replace("_", "\\_") in conf5 or f in conf5, "feature %s not in surogat.conf.5" % f
    for v, s in vparams:
        assert v.replace("_", "\\_") in conf5 or v in conf5, "%s not in surogat.conf.5" % v


# -- varnishadm ------------------------------------------------------------------------


def test_varnishadm_param_commands(origin, surogat):
    sg = surogat(params={"default_ttl": "60"}, secret=SECRET)
    rc, out, err = vadm(sg, "param.show", "default_ttl")
    assert rc == 0, err
    assert out.startswith("default_ttl\n        Value is: 60 [seconds]\n        Default is: 0\n"
                          "        Minimum is: 0s\n"), out
    assert "        Flags: runtime\n" in out and "RFC 9111" in out
    rc, out, _ = vadm(sg, "param.show", "-l")
    assert rc == 0 and out.count("        Value is: ") > 60, out[:500]
    rc, out, _ = vadm(sg, "param.show")
    assert re.search(r"^default_ttl +60 \[seconds\]$", out, re.M), out
    assert re.search(r"^xff +on \[bool\] \(default\)$", out, re.M), out
    rc, out, _ = vadm(sg, "param.set", "between_bytes_timeout", "7.000")
    assert rc == 0
    rc, out, _ = vadm(sg, "param.show", "changed")
    assert re.search(r"^backend_between_bytes_timeout +7 \[seconds\]$", out, re.M), out
    rc, out, err = vadm(sg, "param.show", "nope")
    assert rc == 1 and 'Unknown parameter "nope"' in out + err
    assert "error code 106" in out + err
    rc, out, err = vadm(sg, "param.set", "thread_pools", "4")
    assert rc == 1 and "needs a restart" in out + err


def write(p, text):
    p.write_text(text)
    return p


def stamp(sg, path="/"):
    return sg.get(path).header("X-Stamp")


def test_varnishadm_vcl_commands(origin, surogat, tmp_path):
    origin.route("/", body=b"ok")
    boot = write(tmp_path / "boot.lua", STAMP % "boot")
    sg = surogat(args=["-f", str(boot)], secret=SECRET)
    assert stamp(sg) == "boot"
    two = write(tmp_path / "two.lua", STAMP % "two")
    rc, out, err = vadm(sg, "vcl.load", "two", str(two))
    assert (rc, out.strip()) == (0, "VCL compiled."), err
    rc, out, _ = vadm(sg, "vcl.list")
    # Varnish's columns: status, state/temperature, busy, name
    rows = [ln for ln in out.splitlines() if ln.strip()]
    assert re.fullmatch(r"active {6}auto {4}warm +\d+ {4}boot", rows[0]), rows
    assert re.fullmatch(r"available {3}auto {4}warm +0 {4}two", rows[1]), rows
    rc, out, _ = vadm(sg, "vcl.use", "two")
    assert (rc, out.strip()) == (0, "VCL 'two' now active")
    assert stamp(sg) == "two"
    # vcl.inline: a quoted Lua source, with Varnish's escapes
    src = '"function deliver(req, resp)\\n  resp.http[\\"X-Stamp\\"] = \\"quoted\\"\\nend\\n"'
    rc, out, err = vadm(sg, "vcl.inline", "q", src)
    assert (rc, out.strip()) == (0, "VCL compiled."), out + err
    # ... and as a here document, as varnish-cli(7) shows it
    rc, out, err = vadm(sg, "vcl.inline", "h", "<< EOF\n%sEOF" % (STAMP % "heredoc"))
    assert (rc, out.strip()) == (0, "VCL compiled."), out + err
    rc, out, _ = vadm(sg, "vcl.use", "h")
    assert stamp(sg) == "heredoc"
    rc, out, _ = vadm(sg, "vcl.show", "h")
    assert out.strip() == (STAMP % "heredoc").strip()
    rc, out, _ = vadm(sg, "vcl.show", "-v", "boot")
    assert out.startswith("// VCL.SHOW 0 %d %s\n%s" % (len(STAMP % "boot"), boot, STAMP % "boot"))
    assert "\n// VCL.SHOW 1 " in out and " <builtin>\n" in out
    assert vadm(sg, "vcl.use", "q")[0] == 0 and stamp(sg) == "quoted"
    # errors: file:line, unknown names, the program in use
    rc, out, err = vadm(sg, "vcl.inline", "bad", '"function deliver(\\n"')
    assert rc == 1 and "<inline:bad>:2:" in out + err and "error code 300" in out + err
    rc, out, err = vadm(sg, "vcl.use", "nope")
    assert rc == 1 and "No VCL named nope known" in out + err and "106" in out + err
    rc, out, err = vadm(sg, "vcl.discard", "q")
    assert rc == 1 and "in use" in out + err
    rc, out, err = vadm(sg, "vcl.load", "cold", str(two), "cold")
    assert rc == 1 and "warm" in out + err
    assert vadm(sg, "vcl.discard", "two", "h")[0] == 0
    rc, out, _ = vadm(sg, "vcl.list")
    assert [ln.split()[-1] for ln in out.splitlines() if ln.strip()] == ["boot", "q"]
    # globs, as Varnish's vcl.discard takes them
    assert vadm(sg, "vcl.use", "boot")[0] == 0 and vadm(sg, "vcl.discard", "?")[0] == 0
    rc, out, _ = vadm(sg, "vcl.list")
    assert [ln.split()[-1] for ln in out.splitlines() if ln.strip()] == ["boot"]
    assert stamp(sg) == "boot"


def test_varnishreload_works_unchanged(origin, surogat, tmp_path):
    """Debian's varnishreload, as it is: it finds the active program's file with
    vcl.show -v, loads it under a new name, uses it and discards old ones."""
    need_varnishadm()
    if not os.access(VARNISHRELOAD, os.R_OK):
        pytest.skip("varnishreload is not installed")
    origin.route("/", body=b"ok")
    pol = write(tmp_path / "site.lua", STAMP % "v1")
    sg = surogat(args=["-f", str(pol)], secret=SECRET)
    # varnishreload runs `varnishadm -n DIR -- CMD...`; a Varnish workdir holds -T and -S,
    # here a wrapper first in PATH says them.
    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "varnishadm"
    wrapper.write_text('#!/bin/sh\n[ "$1" = -n ] && shift 2\n[ "$1" = -- ] && shift\n'
                       'exec %s -T 127.0.0.1:%d -S %s "$@"\n'
                       % (VARNISHADM, sg.admin_port, sg.secret))
    wrapper.chmod(0o755)
    env = dict(os.environ, PATH="%s:%s" % (bindir, os.environ.get("PATH", "")))
    for n, tag in enumerate(("v2", "v3")):
        pol.write_text(STAMP % tag)
        p = subprocess.run(["sh", VARNISHRELOAD, "-n", str(tmp_path), "-m", "0"],
                           capture_output=True, text=True, timeout=60, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
        assert re.search(r"VCL 'reload_\d+_\d+_\d+' compiled", p.stdout), p.stdout
        assert stamp(sg) == tag
        time.sleep(1.1)  # its names have a resolution of one second
    names = [ln.split()[-1] for ln in vadm(sg, "vcl.list")[1].splitlines() if ln.strip()]
    assert len(names) == 2 and names[0] == "boot" and names[1].startswith("reload_"), names


@pytest.fixture
def two_origins():
    o = [Origin(), Origin()]
    yield o
    for x in o:
        x.stop()


def test_backend_list_names_programs_and_lists_directors(origin, two_origins, surogat, tmp_path):
    a, b = two_origins
    one = write(tmp_path / "one.lua", """
        backend "app" { host = "127.0.0.1", port = %d }
        backend "img" { host = "127.0.0.1", port = %d }
        director "pool" { type = "fallback", backends = { "app", "img" } }
        """ % (a.port, b.port))
    sg = surogat(args=["-f", str(one)], secret=SECRET)

    def listing():
        p = sg.ctl("backend.list")
        assert p.returncode == 0, p.stderr
        backends, _, directors = p.stdout.partition("\n\n")
        return ({ln.split()[0]: ln.split() for ln in backends.splitlines()[1:]},
                {ln.split()[0]: ln.split() for ln in directors.splitlines()[1:]})

    be, di = listing()
    # -b's backend belongs to no program: its own name, always
    assert set(be) == {"app", "img", "default"} and be["app"][1] == "127.0.0.1:%d" % a.port
    assert di == {"pool": ["pool", "fallback", "app,img"]}
    two = write(tmp_path / "two.lua", """
        backend "api" { host = "127.0.0.1", port = %d }
        director "rr" { type = "round_robin", backends = { "api" } }
        """ % b.port)
    assert sg.ctl("policy.load", "two", str(two)).returncode == 0
    be, di = listing()
    assert set(be) == {"boot.app", "boot.img", "two.api", "default"}, be
    assert di == {"boot.pool": ["boot.pool", "fallback", "app,img"],
                  "two.rr": ["two.rr", "round_robin", "api"]}, di
    rc, out, _ = vadm(sg, "backend.list")
    assert rc == 0 and re.search(r"^two\.api +127\.0\.0\.1:%d +healthy" % b.port, out, re.M)
    assert sg.ctl("policy.discard", "two").returncode == 0
    assert set(listing()[0]) == {"app", "img", "default"}


def test_here_document_arriving_in_pieces(origin, surogat, tmp_path):
    """The request ends at WORD alone on a line, however the bytes arrive;
    what follows is the next request."""
    sg = surogat()
    with socket.create_connection(("127.0.0.1", sg.admin_port), timeout=10) as s:
        f = s.makefile("rwb")
        assert read_admin_reply(f)[0] == 200  # the banner
        pieces = [b"vcl.inline h << END\r\n", b'function deliver(req, resp)\n  resp.http["X-Stamp"]',
                  b' = "pieces"\nend\n', b"EN", b"D\r\nvcl.use h\nvcl.list\n"]
        for piece in pieces:
            s.sendall(piece)
            time.sleep(0.15)
        replies = [read_admin_reply(f) for _ in range(3)]
    assert replies[0] == (200, b"VCL compiled."), replies
    assert replies[1] == (200, b"VCL 'h' now active"), replies
    assert b" h\n" in replies[2][1]
    assert stamp(sg) == "pieces"
    # a here document that never ends, then the end of the connection: no answer, no harm
    with socket.create_connection(("127.0.0.1", sg.admin_port), timeout=10) as s:
        s.sendall(b"vcl.inline x << EOF\nfunction recv(req)\n")
        s.shutdown(socket.SHUT_WR)
        time.sleep(0.3)
    assert sg.ctl("ping").returncode == 0 and "x" not in sg.ctl("policy.list").stdout.split()


# -- one reload story -------------------------------------------------------------------


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    p = Pki(tmp_path_factory.mktemp("opspki"))
    p.a = p.issue("a.test", ["a.test"])
    p.a2 = p.issue("a.test", ["a.test"], tag="-renewed")
    return p


def tls_serial(port):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="a.test") as s:
            der = s.getpeercert(binary_form=True)
    p = subprocess.run([OPENSSL, "x509", "-inform", "DER", "-noout", "-serial"], input=der,
                       capture_output=True, timeout=10)
    return int(p.stdout.decode().strip().split("=")[1], 16)


class Site:
    """A surogatd with a config file, a policy and a TLS listener, all in files a test rewrites."""

    def __init__(self, surogat, origin, certs, d, conf="default_ttl = 10s\n"):
        origin.route("/", body=b"ok")
        self.d = d
        self.conf = write(d / "site.conf", conf)
        self.pol = write(d / "site.lua", STAMP % "v1")
        self.crt, self.key = d / "site.crt", d / "site.key"
        self.install_cert(certs.a)
        self.certs = certs
        self.tport = free_port()
        spec = "127.0.0.1:%d,tls,cert=%s,key=%s" % (self.tport, self.crt, self.key)
        self.sg = surogat(args=["-c", str(self.conf), "-f", str(self.pol), "-a", spec],
                          params={"thread_pool_min": "4"}, secret=SECRET)
        wait_until(lambda: listening(self.tport), 10, "the TLS listener")

    def install_cert(self, pair):
        self.crt.write_bytes(pair[0].read_bytes())
        self.key.write_bytes(pair[1].read_bytes())

    def state(self):
        return (show_value(self.sg, "default_ttl"), stamp(self.sg), tls_serial(self.tport))

    def reload(self, ok):
        p = self.sg.ctl("reload")
        assert p.returncode == (0 if ok else 1), p.stdout + p.stderr
        return (p.stdout if ok else p.stderr).strip()


def test_reload_applies_all_three_at_once(origin, surogat, certs, tmp_path):
    s = Site(surogat, origin, certs, tmp_path)
    assert s.state() == ("10", "v1", certs.a[2])
    s.conf.write_text("default_ttl = 20s\n")
    s.pol.write_text(STAMP % "v2")
    s.install_cert(certs.a2)
    out = s.reload(True)
    assert out == "reload: ok (params 1 changed, policy boot reloaded, 1 certificate)", out
    assert s.state() == ("20", "v2", certs.a2[2])
    assert out in s.sg.log_tail()
    assert s.sg.stat("policy_reload") == 1 and s.sg.stat("tls_reload") == 1
    # SIGHUP does the same, with the same line in the log
    s.conf.write_text("default_ttl = 30s\n")
    s.sg.signal(signal.SIGHUP)
    line = wait_log(s.sg, "reload: ok (params 1 changed", n=2)
    assert line.endswith("reload: ok (params 1 changed, policy boot reloaded, 1 certificate)")
    assert s.state() == ("30", "v2", certs.a2[2])


@pytest.mark.parametrize("broken", ["config", "policy", "certificate"])
def test_reload_is_all_or_nothing(origin, surogat, certs, tmp_path, broken):
    s = Site(surogat, origin, certs, tmp_path)
    before = s.state()
    # each of the three changes; one of them is broken
    s.conf.write_text("default_ttl = 20s\npolicy_modules = util\n" +
                      ("thread_pools = many\n" if broken == "config" else ""))
    s.pol.write_text("function deliver(req, resp\n" if broken == "policy" else STAMP % "v2")
    if broken == "certificate":
        s.crt.write_text("-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n")
    else:
        s.install_cert(certs.a2)
    err = s.reload(False)
    assert err.startswith("reload: failed: ") and err.endswith("; nothing changed"), err
    where = {"config": "%s:3: thread_pools: 'many'" % s.conf,
             "policy": "site.lua:2:",  # Lua shortens a long path from the left
             "certificate": "cert %s: " % s.crt}[broken]
    assert where in err, err
    assert "error: " + err in s.sg.log_tail()
    # nothing changed: not the parameter, not the policy, not the certificate
    assert s.state() == before
    assert show_value(s.sg, "policy_modules") == '""'  # set for the loads, then put back
    assert s.sg.stat("policy_reload") == 0 and s.sg.stat("tls_reload") == 0
    # mended, the same reload goes through
    s.conf.write_text("default_ttl = 20s\npolicy_modules = util\n")
    s.pol.write_text(STAMP % "v2")
    s.install_cert(certs.a2)
    assert s.reload(True).startswith("reload: ok (params 2 changed, policy boot reloaded")
    assert s.state() == ("20", "v2", certs.a2[2])


def test_reload_parameter_rules(origin, surogat, certs, tmp_path):
    s = Site(surogat, origin, certs, tmp_path, conf="default_ttl = 10s\nx_cache = on\n")
    assert s.sg.ctl("param.set", "via", "off").returncode == 0
    s.conf.write_text("# x_cache is gone: back to its default\n"
                      "default_ttl = 10s\n"
                      "thread_pools = 4\n"          # read at startup only: reported, left
                      "thread_pool_min = 9\n"       # -p wins over the file
                      "listen = 127.0.0.1:1\n"      # listen lines need a restart too
                      "tls_ciphersuites = TLS_AES_256_GCM_SHA384\n"  # applied before the certs
                      "first_byte_timeout = 7\n")   # Varnish's name
    out = s.reload(True)
    assert out == ("reload: ok (params 3 changed, thread_pools, listen need a restart, "
                   "policy boot reloaded, 1 certificate)"), out
    assert show_value(s.sg, "x_cache") == "off"
    assert show_value(s.sg, "thread_pools") == "2"
    assert show_value(s.sg, "thread_pool_min") == "4"
    assert show_value(s.sg, "tls_ciphersuites") == "TLS_AES_256_GCM_SHA384"
    assert show_value(s.sg, "backend_first_byte_timeout") == "7"
    assert show_value(s.sg, "via") == "off"  # param.set of a parameter the file never named
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", s.tport), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="a.test") as t:
            assert t.cipher()[0] == "TLS_AES_256_GCM_SHA384", t.cipher()
    # the same file again: nothing to apply, the restart still to do
    assert s.reload(True) == ("reload: ok (params unchanged, thread_pools, listen need a "
                              "restart, policy boot reloaded, 1 certificate)")


def test_reload_long_values_whole(origin, surogat, certs, tmp_path):
    """A value longer than any fixed buffer: applied, compared and shown whole."""
    s = Site(surogat, origin, certs, tmp_path)
    acl = ",".join("10.%d.%d.0/24" % (i // 250, i % 250) for i in range(300))
    assert len(acl) > 3000
    s.conf.write_text("default_ttl = 10s\npurge_acl = %s\n" % acl)
    assert s.reload(True).startswith("reload: ok (params 1 changed,")
    assert show_value(s.sg, "purge_acl") == acl
    assert s.reload(True).startswith("reload: ok (params unchanged,")


def test_reload_module_list_applied_before_the_policy(origin, surogat, certs, tmp_path):
    s = Site(surogat, origin, certs, tmp_path)
    write(tmp_path / "util.lua", 'return { tag = "from-module" }\n')
    s.pol.write_text('local util = require("util")\n' + (STAMP % "%s") % '" .. util.tag .. "')
    assert "policy_modules" in s.reload(False)  # not allowed yet: refused, nothing changed
    s.conf.write_text("default_ttl = 10s\npolicy_modules = util\n")
    assert s.reload(True).startswith("reload: ok (params 1 changed, policy boot reloaded")
    assert stamp(s.sg) == "from-module"


def test_logrotate_signal_only_reopens_the_logs(origin, surogat, tmp_path):
    pol = write(tmp_path / "p.lua", STAMP % "v1")
    sg = surogat(params={"access_log": "access.log", "error_log": "error.log"},
                 args=["-f", str(pol)], secret=SECRET)
    wd = sg.workdir
    assert stamp(sg, "/one") == "v1"
    sg.wait_access_lines(1)
    pol.write_text(STAMP % "v2")  # changed on disk, not to be deployed by a rotation
    for n, how in enumerate(("SIGUSR1", "log.reopen")):
        os.rename(wd / "access.log", wd / ("access.log.%d" % n))
        os.rename(wd / "error.log", wd / ("error.log.%d" % n))
        if how == "SIGUSR1":
            sg.signal(signal.SIGUSR1)
        else:
            p = sg.ctl("log.reopen")
            assert (p.returncode, p.stdout.strip()) == (0, "logs reopened"), p.stderr
        wait_until(lambda: (wd / "error.log").exists() and (wd / "access.log").exists(), 10,
                   "logs reopened")
        assert stamp(sg, "/two") == "v1"
        wait_until(lambda: "/two" in (wd / "access.log").read_text(), 10, "the new access log")
    new = (wd / "error.log").read_text()
    assert "cli: log.reopen: logs reopened" in new and "reload" not in new, new
    assert "SIGUSR1: logs reopened" in (wd / "error.log.1").read_text()
    assert sg.stat("policy_reload") == 0
    # and SIGHUP is the reload, which reopens nothing: its line goes to the open file
    os.rename(wd / "error.log", wd / "error.log.2")
    sg.signal(signal.SIGHUP)
    wait_until(lambda: "reload: ok" in (wd / "error.log.2").read_text(), 10, "the reload")
    assert not (wd / "error.log").exists()
    assert stamp(sg, "/three") == "v2"


# -- surogatd -t ----------------------------------------------------------------------


def test_dash_t_good_and_bad(certs, tmp_path):
    conf = write(tmp_path / "s.conf", "default_ttl = 10s\nfirst_byte_timeout = 30\n")
    pol = write(tmp_path / "p.lua", STAMP % "t")
    crt, key = certs.a[0], certs.a[1]
    tls = "127.0.0.1:%d,tls,cert=%s,key=%s" % (free_port(), crt, key)

    def t(*args):
        p = subprocess.run([SUROGATD, "-t"] + list(args), capture_output=True, text=True,
                           timeout=20, cwd=str(tmp_path))
        return p.returncode, p.stdout, p.stderr

    rc, out, err = t("-c", str(conf), "-f", str(pol), "-a", tls, "-b", "127.0.0.1:1")
    assert (rc, err) == (0, ""), err
    assert out == ("surogatd: configuration file %s syntax is ok\n"
                   "surogatd: policy %s ok\n"
                   "surogatd: certificates of -a %s ok\n"
                   "surogatd: configuration test is successful\n" % (conf, pol, tls)), out
    # relative paths, from where it is started; nothing is bound, nothing written
    rc, out, _ = t("-c", "s.conf", "-f", "p.lua")
    assert rc == 0 and "configuration file s.conf syntax is ok" in out
    assert sorted(os.listdir(tmp_path)) == ["p.lua", "s.conf"]
    # the config file's own listen lines are checked too
    listen = write(tmp_path / "l.conf", "listen = %s\n" % tls.replace(str(key), str(crt)))
    cases = [
        (["-c", str(write(tmp_path / "b1.conf", "default_ttl = 1\nttl = 3\n"))],
         "b1.conf:2: unknown parameter 'ttl'"),
        (["-c", str(write(tmp_path / "b2.conf", "thread_pools = 0\n"))],
         "b2.conf:1: thread_pools: 0 is below the minimum 1"),
        (["-p", "feature=-http2"], "-p feature: -http2 is not possible"),
        (["-f", str(write(tmp_path / "b.lua", "x = 1\nfunction recv(req\n"))], "b.lua:3:"),
        (["-a", tls.replace(str(crt), str(tmp_path / "none.crt"))], "none.crt"),
        (["-a", tls.replace(str(key), str(certs.a2[1]))], "does not match"),
        (["-c", str(listen)], "%s: listen %s: key %s" % (listen, tls.replace(str(key), str(crt)),
                                                          crt)),
    ]
    for args, why in cases:
        rc, out, err = t(*args)
        assert rc == 1, (args, out, err)
        assert why in err and err.endswith("surogatd: configuration test failed\n"), (args, err)
    # the same files stop a real start with status 2, as before
    r = run_surogatd(["-F", "-c", str(tmp_path / "b1.conf"), "-b", "127.0.0.1:1"])
    assert r.returncode == 2 and "b1.conf:2: unknown parameter 'ttl'" in r.stderr


# -- root without -j -----------------------------------------------------------------


def in_namespace(tmp_path, with_user):
    """argv prefix: a mount namespace where /etc/passwd and /etc/group have, or
    lack, the surogat user; the system's own files are left as they are."""
    if os.geteuid() != 0:
        pytest.skip("needs root")
    if subprocess.run(["unshare", "-m", "true"], capture_output=True, timeout=10).returncode:
        pytest.skip("cannot make a mount namespace here")
    uid = 64123
    pw = [ln for ln in Path("/etc/passwd").read_text().splitlines()
          if not ln.startswith("surogat:")]
    gr = [ln for ln in Path("/etc/group").read_text().splitlines()
          if not ln.startswith("surogat:")]
    if with_user:
        pw.append("surogat:x:%d:%d:surogat test:/nonexistent:/usr/sbin/nologin" % (uid, uid))
        gr.append("surogat:x:%d:" % uid)
    (tmp_path / "passwd").write_text("\n".join(pw) + "\n")
    (tmp_path / "group").write_text("\n".join(gr) + "\n")
    script = ('mount --bind %s /etc/passwd && mount --bind %s /etc/group && exec "$@"'
              % (tmp_path / "passwd", tmp_path / "group"))
    return ["unshare", "-m", "sh", "-c", script, "sh"], uid


def test_root_without_j_becomes_the_surogat_user(origin, tmp_path):
    prefix, uid = in_namespace(tmp_path, True)
    port = free_port()
    wd = tmp_path / "wd"
    proc = subprocess.Popen(prefix + [SUROGATD, "-F", "-a", "127.0.0.1:%d" % port, "-b",
                                      origin.addr, "-n", str(wd), "-p", "error_log=error.log"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: proc.poll() is not None or listening(port), 20, "surogatd")
        assert proc.poll() is None
        assert httpc.fetch(port, "GET", "/").status == 200
        for t in os.listdir("/proc/%d/task" % proc.pid):
            st = Path("/proc/%d/task/%s/status" % (proc.pid, t)).read_text()
            uids = re.search(r"^Uid:\s+(.*)$", st, re.M).group(1).split()
            assert uids == [str(uid)] * 4, (t, uids)
        log = (wd / "error.log").read_text()
        assert "running as surogat (uid %d, gid %d), started as root without -j" % (uid, uid) in log
        assert wd.stat().st_uid == uid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    assert proc.returncode == 0


def test_root_without_j_and_without_the_user_is_refused(origin, tmp_path):
    prefix, _ = in_namespace(tmp_path, False)
    p = subprocess.run(prefix + [SUROGATD, "-F", "-a", "127.0.0.1:%d" % free_port(), "-b",
                                 origin.addr, "-n", str(tmp_path / "wd")],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 2, p
    assert ("running as root: give -j USER to drop root's rights once the sockets are bound "
            "(or create the user surogat), or -j none to run as root on purpose") in p.stderr


# -- printed forms ----------------------------------------------------------------------


def test_listening_line_storage_sizes_and_ban_dates(origin, surogat, tmp_path):
    sg = surogat(listen6=have_ipv6_loopback(), args=["-s", "malloc,256m", "-s",
                                                "file,%s,8m" % (tmp_path / "store")])
    log = sg.log_tail()
    assert "listening on 127.0.0.1:%d, backend %s" % (sg.port, origin.addr) in log, log
    if sg.port6:
        assert "listening on [::1]:%d, backend" % sg.port6 in log, log
    origin.route("/x", body=b"x" * 3000, headers={"Cache-Control": "max-age=60"})
    assert sg.get("/x").status == 200
    out = sg.ctl("storage.list").stdout.splitlines()
    assert re.fullmatch(r"s0 malloc size=268435456 used=\d+ \(256\.0 MiB, [\d.]+ (B|KiB) used\)",
                        out[0]), out
    assert re.fullmatch(r"s1 file size=\d+ used=\d+ \(8\.0 MiB, [\d.]+ (B|KiB|MiB) used\) "
                        r"path=\S+ free_extents=\d+ largest_free=\d+ \([\d.]+ (KiB|MiB)\) "
                        r"fragmentation=[\d.]+ sendfile=(on|off) quarantined=\d+", out[1]), out
    assert sg.ctl("ban", "req.url ~ ^/nothing").returncode == 0
    lines = sg.ctl("ban.list").stdout.splitlines()
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6})Z +\d+ [C-] req\.url ~ \"\^/nothing\"",
                     lines[1])
    assert m, lines
    when = datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc)
    assert abs((datetime.now(timezone.utc) - when).total_seconds()) < 60
