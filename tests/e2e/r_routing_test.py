"""Backends, directors and routes declared in the policy script, through
the real daemon in front of several origins: routing by Host, path and
extension; round robin, weighted random, hash (and its remapping) and
fallback directors; health probes taking a backend out and back;
failover of idempotent requests when connecting fails; all sick -> 503
or stale; req.backend; declaration errors with file:line; a reload that
keeps probe history."""

import collections
import signal
import socket
import textwrap
import time

import pytest

from conftest import run_surogatd, wait_until
from cstatus import is_hit


def policy(surogat, tmp_path, text, params=None, name="routes.lua", **kw):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return surogat(params=params, args=["-f", str(p)], **kw), p


def who(r):
    return r.header("X-Origin")


def tag(origin, name, paths, **kw):
    for path in paths:
        origin.route(path, body=name.encode(), headers={"X-Origin": name}, **kw)


def dead_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def backend_rows(sg):
    p = sg.ctl("backend.list")
    assert p.returncode == 0, p.stdout + p.stderr
    # the backends: the lines up to the blank one before the directors
    rows = p.stdout.split("\n\n")[0].splitlines()[1:]
    return {f[0]: f for f in (l.split() for l in rows if l.strip())}


def test_routes_by_host_path_and_extension(origin, origins, surogat, tmp_path):
    app, api, img, wild = origins(4)
    tag(app, "app", ["/", "/page", "/api"])
    tag(api, "api", ["/api/v1/x"])
    tag(img, "img", ["/logo.PNG", "/a/b/c.css", "/page"])
    tag(wild, "wild", ["/page", "/x.css"])
    sg, _ = policy(surogat, tmp_path, """
        backend "app" { host = "127.0.0.1", port = %d }
        backend "api" { host = "127.0.0.1", port = %d }
        backend "img" { host = "127.0.0.1", port = %d }
        backend "wild" { host = "127.0.0.1", port = %d }
        route { host = "img.example.com", to = "img" }
        route { host = { "*.users.example.com", "~^tenant[0-9]+\\\\.example\\\\.org$" }, to = "wild" }
        route { path = "^/api/v[0-9]+/", to = "api" }
        route { ext = { "png", "css" }, to = "img" }
        route { to = "app" }
        function recv(req) return "pass" end
        """ % (app.port, api.port, img.port, wild.port))
    cases = [
        ("/page", "www.example.com", "app"),
        ("/page", "IMG.example.com:8080", "img"),      # case and port do not matter
        ("/page", "a.b.users.example.com", "wild"),    # one or more labels
        ("/page", "users.example.com", "app"),         # not the bare domain
        ("/page", "tenant42.example.org", "wild"),
        ("/api/v1/x", "www.example.com", "api"),
        ("/api", "www.example.com", "app"),
        ("/logo.PNG?v=3", "www.example.com", "img"),   # extension, any case, query ignored
        ("/a/b/c.css", "www.example.com", "img"),
        ("/x.css", "x.users.example.com", "wild"),     # first match wins: host before ext
    ]
    for path, host, want in cases:
        r = sg.get(path, headers={"Host": host})
        assert r.status == 200 and who(r) == want, (path, host, r)
    assert origin.hits() == 0  # -b's backend is not the default when "app" is routed to


def test_round_robin_random_and_their_failover(origins, surogat, tmp_path):
    a, b, c = origins(3)
    for o, n in ((a, "a"), (b, "b"), (c, "c")):
        tag(o, n, ["/rr", "/rnd"])
    sg, _ = policy(surogat, tmp_path, """
        backend "a" { host = "127.0.0.1", port = %d, weight = 3 }
        backend "b" { host = "127.0.0.1", port = %d, weight = 1 }
        backend "c" { host = "127.0.0.1", port = %d }
        backend "dead" { host = "127.0.0.1", port = %d, connect_timeout = 0.5 }
        director "rr" { type = "round_robin", backends = { "a", "b", "c" } }
        director "rnd" { type = "random", backends = { "a", "b" } }
        director "rr_dead" { type = "round_robin", backends = { "dead", "a" } }
        route { prefix = "/rr", to = "rr" }
        route { prefix = "/rnd", to = "rnd" }
        route { prefix = "/dead", to = "rr_dead" }
        function recv(req) return "pass" end
        """ % (a.port, b.port, c.port, dead_port()))
    seen = [who(sg.get("/rr")) for _ in range(30)]
    assert collections.Counter(seen) == {"a": 10, "b": 10, "c": 10}, seen
    assert all(seen[i] != seen[i + 1] for i in range(len(seen) - 1)), seen
    seen = collections.Counter(who(sg.get("/rnd")) for _ in range(400))
    assert 240 <= seen["a"] <= 360 and seen["a"] + seen["b"] == 400, seen  # 3:1 of 400
    # Half of these pick "dead" first: an idempotent request fails over to "a".
    tag(a, "a", ["/dead"])
    for _ in range(6):
        r = sg.get("/dead")
        assert r.status == 200 and who(r) == "a", r
    assert sg.stat("backend_failover") >= 2
    # A POST is not retried elsewhere: when it picks "dead" it gets a 503.
    statuses = collections.Counter(sg.request("POST", "/dead", body=b"x").status
                                   for _ in range(4))
    assert statuses[503] >= 1 and statuses[200] >= 1, statuses


def test_hash_director_keeps_keys_and_remaps_few(origins, surogat, tmp_path):
    os_ = origins(4)
    for i, o in enumerate(os_):
        o.default.headers = [("X-Origin", "o%d" % i)]
    sg, _ = policy(surogat, tmp_path, """
        backend "o0" { host = "127.0.0.1", port = %d }
        backend "o1" { host = "127.0.0.1", port = %d }
        backend "o2" { host = "127.0.0.1", port = %d }
        backend "o3" { host = "127.0.0.1", port = %d }
        director "h" { type = "hash", backends = { "o0", "o1", "o2", "o3" } }
        director "byuser" { type = "hash", key = "cookie:uid", backends = { "o0", "o1", "o2", "o3" } }
        route { prefix = "/u", to = "byuser" }
        route { to = "h" }
        function recv(req) return "pass" end
        """ % tuple(o.port for o in os_))
    urls = ["/k%d" % i for i in range(200)]
    first = {u: who(sg.get(u)) for u in urls}
    assert {u: who(sg.get(u)) for u in urls} == first  # stable
    assert len(set(first.values())) == 4
    assert sg.ctl("backend.set_health", "o2", "sick").returncode == 0
    after = {u: who(sg.get(u)) for u in urls}
    moved = [u for u in urls if after[u] != first[u]]
    # only the keys of the sick backend move
    assert all(first[u] == "o2" for u in moved), moved
    assert set(moved) == {u for u in urls if first[u] == "o2"}
    assert "o2" not in after.values()
    # keyed by a cookie: the same user sticks to one backend whatever the URL
    got = {who(sg.get("/u%d" % i, headers={"Cookie": "theme=x; uid=alice"})) for i in range(20)}
    assert len(got) == 1, got


def test_probes_take_a_backend_out_and_back_with_fallback(origins, surogat, tmp_path):
    primary, spare = origins(2)
    tag(primary, "primary", ["/p"])
    tag(spare, "spare", ["/p"])
    primary.route("/health", status=200, body=b"ok")
    sg, _ = policy(surogat, tmp_path, """
        backend "primary" { host = "127.0.0.1", port = %d,
                            probe = { url = "/health", interval = 0.2, timeout = 0.5,
                                      window = 4, threshold = 2 } }
        backend "spare" { host = "127.0.0.1", port = %d }
        director "fb" { type = "fallback", backends = { "primary", "spare" } }
        route { to = "fb" }
        function recv(req) return "pass" end
        """ % (primary.port, spare.port))
    wait_until(lambda: backend_rows(sg)["primary"][2] == "healthy", 5, "primary healthy")
    assert who(sg.get("/p")) == "primary"
    primary.route("/health", status=500, body=b"down")
    wait_until(lambda: backend_rows(sg)["primary"][2] == "sick", 5, "primary sick")
    assert who(sg.get("/p")) == "spare"
    assert "-" in backend_rows(sg)["primary"][6]  # failed probes in its history
    primary.route("/health", status=200, body=b"ok")
    wait_until(lambda: backend_rows(sg)["primary"][2] == "healthy", 5, "primary back")
    assert who(sg.get("/p")) == "primary"
    assert sg.stat("backend_health_changed") >= 2
    assert "backend primary" in sg.log_tail(200)


def test_all_sick_is_503_at_once_or_stale_in_grace(origins, surogat, tmp_path):
    (only,) = origins(1)
    only.route("/c", body=b"cached", headers={"Cache-Control": "max-age=1, stale-if-error=60"})
    sg, _ = policy(surogat, tmp_path, """
        backend "only" { host = "127.0.0.1", port = %d }
        director "d" { type = "round_robin", backends = { "only" } }
        route { to = "d" }
        """ % only.port)
    assert sg.get("/c").body == b"cached"
    assert sg.ctl("backend.set_health", "only", "sick").returncode == 0
    t0 = time.monotonic()
    r = sg.get("/nothing-cached")
    assert r.status == 503 and time.monotonic() - t0 < 2, r
    time.sleep(1.2)
    r = sg.get("/c")  # stale, the backend is sick: stale-if-error serves it
    assert r.status == 200 and r.body == b"cached", r
    assert only.hits("/c") == 1


def test_req_backend_reads_and_overrides_the_route(origins, surogat, tmp_path):
    a, b = origins(2)
    tag(a, "a", ["/x", "/y"])
    tag(b, "b", ["/x", "/y"])
    sg, _ = policy(surogat, tmp_path, """
        backend "a" { host = "127.0.0.1", port = %d }
        backend "b" { host = "127.0.0.1", port = %d }
        route { to = "a" }
        function recv(req)
            req.http.x_routed = req.backend
            if req.http.x_want then req.backend = req.http.x_want end
            return "pass"
        end
        function backend_fetch(bereq)
            if bereq.url == "/y" then bereq.backend = "b" end
        end
        function backend_response(bereq, beresp)
            beresp.http.x_bereq_backend = bereq.backend
        end
        """ % (a.port, b.port))
    r = sg.get("/x")
    assert who(r) == "a" and a.last("/x").header("X-Routed") == "a"
    r = sg.get("/x", headers={"X-Want": "b"})
    assert who(r) == "b" and r.header("X-Bereq-Backend") == "b", r
    r = sg.get("/y")
    assert who(r) == "b" and r.header("X-Bereq-Backend") == "b", r
    r = sg.get("/x", headers={"X-Want": "nosuch"})
    assert r.status == 503
    wait_until(lambda: 'no backend or director "nosuch"' in sg.log_tail(), 5, "log line")


@pytest.mark.parametrize("decl,msg", [
    ('backend "a" { hots = "127.0.0.1", port = 1 }', ':2: backend "a": unknown field "hots"'),
    ('backend "a" { host = "127.0.0.1", port = 1, probe = { intervall = 1 } }',
     'unknown field "intervall" in probe'),
    ('backend "a" { host = "127.0.0.1", weight = -2 }', 'weight must be a number'),
    ('director "d" { type = "round_robin", backends = { "nope" } }',
     'no backend or director "nope" declared before it'),
    ('director "d" { type = "roundrobin", backends = { "x" } }', 'type must be'),
    ('route { to = "nowhere" }', 'to: no backend or director "nowhere"'),
    ('route { path = "([", to = "default" }', 'route'),
    ('backend "a" { host = "no.such.host.invalid" }', "cannot resolve 'no.such.host.invalid'"),
    ('backend "a" { root = "/nonexistent/dir" }', 'static root /nonexistent/dir'),
    ('backend "a" { host = "127.0.0.1" }\nbackend "a" { host = "127.0.0.2" }', 'declared twice'),
])
def test_declaration_errors_name_file_and_line(tmp_path, decl, msg):
    p = tmp_path / "bad.lua"
    p.write_text("-- declarations\n" + decl + "\n")
    r = run_surogatd(["-C", "-f", str(p)])
    assert r.returncode == 2, r
    out = r.stdout + r.stderr
    assert "bad.lua:" in out and msg in out, out


def test_reload_keeps_probe_history_and_a_bad_one_is_refused(origins, surogat, tmp_path):
    (a,) = origins(1)
    tag(a, "a", ["/r"])
    a.route("/health", body=b"ok")
    text = """
        backend "a" { host = "127.0.0.1", port = %d,
                      probe = { url = "/health", interval = 0.2, window = 8, threshold = 3 } }
        route { to = "a" }
        function recv(req) return "pass" end
        -- %s
        """
    sg, p = policy(surogat, tmp_path, text % (a.port, "one"))
    wait_until(lambda: backend_rows(sg)["a"][6].count("H") >= 5, 5, "probe history")
    before = a.hits("/health")
    p.write_text(textwrap.dedent(text % (a.port, "two")))
    sg.signal(signal.SIGHUP)
    wait_until(lambda: sg.stat("policy_reload") == 1, 5, "reload")
    # the same backend object: its history did not start over
    assert backend_rows(sg)["a"][6].count("H") >= 5
    assert a.hits("/health") >= before
    p.write_text('backend "a" { host = "127.0.0.1", port = "x" }\nroute { to = "b" }\n')
    sg.signal(signal.SIGHUP)
    wait_until(lambda: "reload: failed" in sg.log_tail(), 5, "refused reload logged")
    assert who(sg.get("/r")) == "a"


def test_apache_behind_with_static_files_served_by_surogat(apache, surogat, tmp_path):
    site = tmp_path / "site"
    (site / "img").mkdir(parents=True)
    (site / "img" / "logo.png").write_bytes(b"\x89PNG fake image bytes")
    (site / "style.css").write_text("body { color: red }\n")
    sg, _ = policy(surogat, tmp_path, """
        backend "apache" { host = "127.0.0.1", port = %d }
        backend "static" { root = "%s", expires = { "image/*=2592000" } }
        route { ext = { "png", "css", "js" }, to = "static" }
        route { to = "apache" }
        """ % (apache.port, site))
    r = sg.get("/img/logo.png")
    assert r.status == 200 and r.body == b"\x89PNG fake image bytes", r
    assert r.header("Content-Type") == "image/png"
    assert "max-age=2592000" in (r.header("Cache-Control") or ""), r
    r = sg.get("/style.css")
    assert r.status == 200 and r.header("Content-Type").startswith("text/css"), r
    r = sg.get("/cgi-bin/echo.py?x=1")
    assert r.status == 200, r
    r = sg.get("/small.txt")
    assert r.body == apache.files["small.txt"]
    # the static backend never sends Apache's files, and never its own source
    assert sg.get("/missing.png").status == 404


def test_a_script_with_backends_needs_no_b(origin, tmp_path):
    import subprocess
    from conftest import ROOT_OK, SUROGATD, free_port, listening
    import httpc
    origin.route("/n", body=b"no -b needed")
    p = tmp_path / "only.lua"
    p.write_text('backend "app" { host = "127.0.0.1", port = %d }\n' % origin.port)
    port = free_port()
    proc = subprocess.Popen([SUROGATD, "-F"] + ROOT_OK + ["-a", "127.0.0.1:%d" % port, "-f", str(p),
                             "-n", str(tmp_path / "wd")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: proc.poll() is not None or listening(port), 10, "listening")
        r = httpc.fetch(port, path="/n")
        assert r.status == 200 and r.body == b"no -b needed", r
    finally:
        proc.terminate()
        proc.wait(10)
    # and a script declaring nothing, without -b, is refused at startup
    p.write_text("function recv(req) end\n")
    r = subprocess.run([SUROGATD, "-F"] + ROOT_OK + ["-a", "127.0.0.1:%d" % free_port(), "-f", str(p),
                        "-n", str(tmp_path / "wd2")], capture_output=True, text=True, timeout=10)
    assert r.returncode != 0 and "declares none and there is no -b" in r.stderr, r


def test_round_robin_and_random_skip_a_probed_sick_backend(origins, surogat, tmp_path):
    a, b = origins(2)
    for o, n in ((a, "a"), (b, "b")):
        tag(o, n, ["/rr", "/rnd"])
        o.route("/health", body=b"ok")
    probe = 'probe = { url = "/health", interval = 0.2, timeout = 0.5, window = 3, threshold = 2 }'
    sg, _ = policy(surogat, tmp_path, """
        backend "a" { host = "127.0.0.1", port = %d, %s }
        backend "b" { host = "127.0.0.1", port = %d, %s }
        director "rr" { type = "round_robin", backends = { "a", "b" } }
        director "rnd" { type = "random", backends = { "a", "b" } }
        route { prefix = "/rr", to = "rr" }
        route { to = "rnd" }
        function recv(req) return "pass" end
        """ % (a.port, probe, b.port, probe))
    wait_until(lambda: all(r[2] == "healthy" for r in backend_rows(sg).values()), 5, "healthy")
    assert collections.Counter(who(sg.get("/rr")) for _ in range(10)) == {"a": 5, "b": 5}
    b.route("/health", status=503, body=b"down")
    wait_until(lambda: backend_rows(sg)["b"][2] == "sick", 5, "b sick")
    assert {who(sg.get("/rr")) for _ in range(10)} == {"a"}
    assert {who(sg.get("/rnd")) for _ in range(20)} == {"a"}
    b.route("/health", body=b"ok")
    wait_until(lambda: backend_rows(sg)["b"][2] == "healthy", 5, "b healthy again")
    assert collections.Counter(who(sg.get("/rr")) for _ in range(10)) == {"a": 5, "b": 5}
    assert "b" in {who(sg.get("/rnd")) for _ in range(40)}
