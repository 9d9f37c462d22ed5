"""The rest of the VCL state machine in Lua, through the real daemon:
the synth, backend_fetch, backend_error, pipe and purge hooks; the
restart and retry actions with their limits; req.hash_always_miss and
req.hash_ignore_busy; beresp.keep; server; :each() as an
iterator; surogat.synth's reason in the status line; a request finishing
on the policy it began with when a reload comes in between."""

import os
import signal
import subprocess
import socket
import threading
import time

from conftest import wait_until
from cstatus import forwarded, is_hit
from p_policy_test import script
from origins import upgrade_echo, upgrade_echo_client


CC60 = {"Cache-Control": "max-age=60"}


def with_policy(surogat, tmp_path, text, params=None, backend=None, name="policy.lua"):
    p = script(tmp_path, text, name)
    return surogat(params=params, backend=backend, args=["-f", str(p)]), p


def test_synth_reason_in_status_line_and_synth_hook(origin, surogat, tmp_path):
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            if req.url == "/teapot" then return surogat.synth(418, "Short & Stout") end
            if req.url == "/plain" then return surogat.synth(404, "Nothing <here>") end
            if req.url == "/bad" then return surogat.synth(400, "a\\r\\nX-Injected: 1") end
        end
        function synth(req, resp)
            if req.url == "/teapot" then
                resp.http.content_type = "text/plain"
                resp.http.x_synth = tostring(resp.status)
                resp.body = "I am a teapot: " .. resp.reason .. "\\n"
                return "deliver"
            end
        end
        """)
    r = sg.get("/teapot")
    assert r.status == 418 and r.reason == "Short & Stout", r
    assert r.header("Content-Type") == "text/plain"
    assert r.header("X-Synth") == "418"
    assert r.body == b"I am a teapot: Short & Stout\n"
    r = sg.get("/plain")
    assert r.status == 404 and r.reason == "Nothing <here>", r
    # the reason is escaped in the default page
    assert b"Nothing &lt;here&gt;" in r.body and b"<here>" not in r.body
    # a reason that would split the head is a policy error, never sent
    r = sg.get("/bad")
    assert r.status == 503 and not r.has("X-Injected"), r
    assert origin.hits() == 0


def test_synth_restart_and_policy_errors_reach_synth(origin, surogat, tmp_path):
    origin.route("/fallback", body=b"fallback page", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            if req.url == "/err" then error("broken") end
            if req.url == "/gone" then return surogat.synth(410, "Gone") end
        end
        function synth(req, resp)
            if resp.status == 503 then resp.http.x_err_page = "1" end
            if resp.status == 410 and req.restarts == 0 then
                req.url = "/fallback"
                return "restart"
            end
        end
        """)
    r = sg.get("/err")
    assert r.status == 503 and r.header("X-Err-Page") == "1", r
    r = sg.get("/gone")
    assert r.status == 200 and r.body == b"fallback page", r
    assert sg.stat("policy_restart") == 1


def test_restart_from_hit_deliver_and_the_limit(origin, surogat, tmp_path):
    origin.route("/a", body=b"A", headers=CC60)
    origin.route("/b", body=b"B", headers=CC60)
    origin.route("/loop", body=b"L", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function hit(req, obj)
            if req.url == "/a" and req.http.x_go_b then
                req.url = "/b"
                return "restart"
            end
        end
        function deliver(req, resp)
            resp.http.x_restarts = tostring(req.restarts)
            if req.url == "/loop" then return "restart" end
            if resp.status == 200 and req.http.x_swap and req.restarts == 0 then
                req.url = "/b"
                return "restart"
            end
        end
        """, params={"max_restarts": "3"})
    assert sg.get("/a").body == b"A"
    r = sg.get("/a", headers={"X-Go-B": "1"})  # a hit on /a restarts into /b
    assert r.body == b"B" and r.header("X-Restarts") == "1", r
    r = sg.get("/a", headers={"X-Swap": "1"})  # deliver of a hit restarts
    assert r.body == b"B" and r.header("X-Restarts") == "1", r
    r = sg.get("/loop")
    assert r.status == 503 and b"too many restarts" in r.body, r
    wait_until(lambda: "past max_restarts (3)" in sg.log_tail(), 5, "log line")
    # deliver restarting on a miss: the object is not stored by that fetch
    r = sg.get("/loop")
    assert r.status == 503
    assert sg.alive()


def test_restart_of_a_request_with_a_body_is_refused(origin, surogat, tmp_path):
    origin.route("/post", body=b"posted")
    sg, _ = with_policy(surogat, tmp_path, """
        function deliver(req, resp)
            if req.method == "POST" then return "restart" end
        end
        """)
    r = sg.request("POST", "/post", body=b"payload")
    assert r.status == 503 and b"body was sent" in r.body, r
    assert origin.hits("/post") == 1


def test_backend_fetch_edits_the_backend_request_only(origin, surogat, tmp_path):
    origin.route("/f", body=b"f", headers=CC60)
    origin.route("/internal/f", body=b"internal f", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function backend_fetch(bereq)
            bereq.http.x_backend_only = "yes"
            bereq.http.cookie = nil
            if bereq.url == "/f" then bereq.url = "/internal/f" end
            if bereq.http.x_abandon then return "abandon" end
            bereq.http.x_retries = tostring(bereq.retries)
        end
        function backend_response(bereq, beresp)
            beresp.http.x_bereq_url = bereq.url
            beresp.http.x_bereq_hdr = bereq.http.x_backend_only
        end
        function recv(req) return "hash" end
        """)
    r = sg.get("/f", headers={"Cookie": "s=1"})
    assert r.body == b"internal f", r
    assert r.header("X-Bereq-Url") == "/internal/f"
    assert r.header("X-Bereq-Hdr") == "yes"
    seen = origin.last("/internal/f")
    assert seen.header("X-Backend-Only") == "yes" and not seen.has("Cookie")
    assert seen.header("X-Retries") == "0"
    # the cache key is the client's URL: the next /f is a hit
    assert is_hit(sg.get("/f"))
    r = sg.get("/g", headers={"X-Abandon": "1"})
    assert r.status == 503, r
    assert origin.hits("/g") == 0


def test_backend_response_retry_until_max_retries(origin, surogat, tmp_path):
    origin.route("/flaky", status=500, body=b"oops")
    origin.route("/never", status=500, body=b"never")
    sg, _ = with_policy(surogat, tmp_path, """
        function backend_fetch(bereq)
            bereq.http.x_try = tostring(bereq.retries)
        end
        function backend_response(bereq, beresp)
            if beresp.status >= 500 then
                if bereq.url == "/flaky" and bereq.retries >= 2 then
                    beresp.status = 200
                    beresp.ttl = 60
                    beresp.http.x_after = tostring(bereq.retries)
                    return "deliver"
                end
                return "retry"
            end
        end
        """, params={"max_retries": "3"})
    r = sg.get("/flaky")
    assert r.status == 200 and r.header("X-After") == "2", r
    assert [q.header("X-Try") for q in origin.reqs("/flaky")] == ["0", "1", "2"]
    assert is_hit(sg.get("/flaky"))
    r = sg.get("/never")
    assert r.status == 503, r
    assert origin.hits("/never") == 4  # the first try and max_retries more
    wait_until(lambda: "past max_retries (3)" in sg.log_tail(), 5, "log line")
    assert sg.stat("policy_retry") == 2 + 3


def test_backend_error_deliver_and_retry(surogat, tmp_path):
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()  # nothing listens there
    sg, _ = with_policy(surogat, tmp_path, """
        function backend_error(bereq, beresp)
            beresp.http.x_error_status = tostring(beresp.status)
            beresp.http.retry_after = "5"
            beresp.http.content_type = "text/plain"
            beresp.body = "maintenance: " .. bereq.url .. " try " .. bereq.retries .. "\\n"
            if bereq.url == "/again" and bereq.retries < 2 then return "retry" end
            return "deliver"
        end
        """, params={"backend_connect_timeout": "0.5"}, backend="127.0.0.1:%d" % dead_port)
    r = sg.get("/x")
    assert r.status == 503 and r.body == b"maintenance: /x try 0\n", r
    assert r.header("X-Error-Status") == "503" and r.header("Retry-After") == "5"
    r = sg.get("/again")
    assert r.status == 503 and r.body == b"maintenance: /again try 2\n", r
    assert sg.stat("policy_retry") == 2


def test_backend_error_on_a_bad_response(origin, surogat, tmp_path):
    origin.route("/garbage", garbage=b"this is not HTTP\r\n\r\n")
    sg, _ = with_policy(surogat, tmp_path, """
        function backend_error(bereq, beresp)
            beresp.body = "bad gateway page"
            return "deliver"
        end
        """)
    r = sg.get("/garbage")
    assert r.status == 502 and r.body == b"bad gateway page", r


def test_pipe_copies_bytes_both_ways(origin, surogat, tmp_path):
    # A backend speaking a made-up protocol after an Upgrade.
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    port = srv.getsockname()[1]
    got = {}

    def serve():
        c, _ = srv.accept()
        c.settimeout(10)
        upgrade_echo(c, got)
        c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            if req.http.upgrade then return "pipe" end
        end
        function pipe(req, bereq)
            bereq.http.x_piped = "1"
            if req.url == "/nope" then return surogat.synth(403, "no pipe") end
        end
        """, backend="127.0.0.1:%d" % port)
    r = sg.get("/nope", headers={"Upgrade": "echo", "Connection": "Upgrade"})
    assert r.status == 403, r
    upgrade_echo_client(sg.port)
    t.join(10)
    srv.close()
    assert "x-piped: 1" in got["head"].lower() and "Upgrade: echo" in got["head"], got
    wait_until(lambda: sg.stat("policy_pipe") == 1, 5, "pipe counted")


def test_purge_hook_and_custom_hash_purges_the_right_key(origin, surogat, tmp_path):
    origin.route("/p", body=b"p", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            if req.method == "PURGE" then return "purge" end
        end
        function hash(req)
            -- one object whatever the query string
            surogat.hash_data(req.http.host or "", (re.sub(req.url, "\\\\?.*$", "")))
            return "lookup"
        end
        function purge(req)
            return surogat.synth(200, "purged by policy")
        end
        """)
    sg.get("/p?a=1")
    assert is_hit(sg.get("/p?b=2"))
    r = sg.request("PURGE", "/p?c=3")
    assert r.status == 200 and r.reason == "purged by policy", r
    assert forwarded(sg.get("/p?a=1").header("Cache-Status"))
    assert origin.hits("/p") == 2


def test_hash_always_miss_refreshes_and_ignore_busy_does_not_wait(origin, surogat, tmp_path):
    origin.route("/warm", body=b"v1", headers=CC60)
    origin.route("/slow", body=b"slow", headers=CC60, delay=1.5)
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            if req.http.x_refresh then req.hash_always_miss = true end
            if req.http.x_no_wait then req.hash_ignore_busy = true end
        end
        """)
    sg.get("/warm")
    assert is_hit(sg.get("/warm"))
    origin.route("/warm", body=b"v2", headers=CC60)
    r = sg.get("/warm", headers={"X-Refresh": "1"})
    assert r.body == b"v2" and forwarded(r.header("Cache-Status")), r
    r = sg.get("/warm")
    assert r.body == b"v2" and is_hit(r)
    # Two requests for a slow object: the second would wait for the first
    # one's fetch; with hash_ignore_busy it fetches alongside.
    res = {}

    def first():
        res["a"] = sg.get("/slow")

    t = threading.Thread(target=first)
    t.start()
    origin.wait_hits("/slow", 1)
    r = sg.get("/slow", headers={"X-No-Wait": "1"})
    t.join()
    assert r.status == 200 and res["a"].status == 200
    assert origin.hits("/slow") == 2
    assert "collapsed" not in (r.header("Cache-Status") or "")


def test_keep_lets_a_stale_object_revalidate(origin, surogat, tmp_path):
    origin.route("/k", body=b"kept", headers={"Cache-Control": "max-age=1",
                                             "ETag": '"k1"'}, conditional=True)
    origin.route("/n", body=b"not kept", headers={"Cache-Control": "max-age=1",
                                                  "ETag": '"n1"'}, conditional=True)
    sg, _ = with_policy(surogat, tmp_path, """
        function backend_response(bereq, beresp)
            beresp.grace = 0
            if bereq.url == "/k" then beresp.keep = 60 else beresp.keep = 0 end
        end
        """, params={"default_keep": "0", "default_stale_if_error": "0"})
    sg.get("/k")
    sg.get("/n")
    time.sleep(1.3)
    r = sg.get("/k")
    assert r.status == 200 and r.body == b"kept"
    assert origin.last("/k").header("If-None-Match") == '"k1"'  # revalidated
    r = sg.get("/n")
    assert r.body == b"not kept"
    assert not origin.last("/n").has("If-None-Match")  # refetched in full


def test_server_and_each_iterator(origin, surogat, tmp_path):
    origin.route("/s", body=b"s")
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            local names = {}
            for name, value in req.http:each() do names[#names + 1] = name .. "=" .. value end
            req.http.x_names = table.concat(names, ";")
            req.http.x_local = server.ip .. ":" .. server.port
            req.http.x_server = server.hostname ~= "" and "named" or "unnamed"
            req.http.x_identity = server.identity
            return "pass"
        end
        """)
    sg.get("/s", headers={"X-A": "1", "X-B": "two"})
    seen = origin.last("/s")
    assert "X-A=1;X-B=two" in seen.header("X-Names"), seen.header("X-Names")
    assert seen.header("X-Local") == "127.0.0.1:%d" % sg.port
    assert seen.header("X-Server") == "named"
    assert seen.header("X-Identity") == socket.gethostname()


def test_request_finishes_on_the_policy_it_began_with(origin, surogat, tmp_path):
    origin.route("/slow", body=b"s", delay=1.0)
    p = script(tmp_path, """
        function recv(req) req.http.x_v = "one" return "pass" end
        function deliver(req, resp) resp.http.x_v = req.http.x_v .. "/one" end
        """)
    sg = surogat(args=["-f", str(p)])
    res = {}

    def slow():
        res["r"] = sg.get("/slow")

    t = threading.Thread(target=slow)
    t.start()
    origin.wait_hits("/slow", 1)
    script(tmp_path, """
        function recv(req) req.http.x_v = "two" return "pass" end
        function deliver(req, resp) resp.http.x_v = req.http.x_v .. "/two" end
        """)
    sg.signal(signal.SIGHUP)
    wait_until(lambda: "reloaded" in sg.log_tail(), 5, "reload logged")
    t.join()
    assert res["r"].header("X-V") == "one/one", res["r"]
    assert sg.get("/slow").header("X-V") == "two/two"


def test_require_loads_only_listed_modules(origin, surogat, tmp_path):
    origin.route("/m", body=b"m")
    (tmp_path / "mods" / "sites").mkdir(parents=True)
    (tmp_path / "mods" / "util.lua").write_text(
        "local M = {}\nfunction M.tag() return 'util-tag' end\nreturn M\n")
    (tmp_path / "mods" / "sites" / "blog.lua").write_text("return { name = 'blog' }\n")
    (tmp_path / "mods" / "secret.lua").write_text("return { leaked = true }\n")
    (tmp_path / "mods" / "broken.lua").write_text("return {\n  oops = \n")
    sg, _ = with_policy(surogat, tmp_path, """
        local util = require("util")
        local blog = require("sites.blog")
        function recv(req)
            req.http.x_tag = util.tag() .. "," .. blog.name
            if req.url == "/secret" then require("secret") end
            if req.url == "/escape" then require("../etc/passwd") end
            return "pass"
        end
        """, params={"policy_modules": "util, sites.blog broken",
                     "policy_module_path": str(tmp_path / "mods")})
    sg.get("/m")
    assert origin.last("/m").header("X-Tag") == "util-tag,blog"
    assert sg.get("/secret").status == 503
    wait_until(lambda: 'module "secret" is not in policy_modules' in sg.log_tail(), 5, "log")
    assert sg.get("/escape").status == 503
    wait_until(lambda: 'bad module name "../etc/passwd"' in sg.log_tail(), 5, "log")
    assert origin.hits("/secret") == 0
    # A listed module that does not compile: -C names its file and line.
    bad = script(tmp_path, 'local b = require("broken")\n', name="usesbroken.lua")
    r = subprocess.run([os.environ["SUROGATD"], "-C", "-f", str(bad), "-p",
                        "policy_modules=broken", "-p",
                        "policy_module_path=%s" % (tmp_path / "mods")],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode != 0
    assert "broken.lua:3:" in r.stderr + r.stdout, r


def test_a_request_joining_a_fetch_runs_the_hit_hook(origin, surogat, tmp_path):
    from c_stream_test import BODY, FIRST, Partial, held_route, sha
    route = held_route(origin, "/big")
    sg, _ = with_policy(surogat, tmp_path, """
        function hit(req, obj)
            req.ctx.hit = string.format("%s ttl>0:%s", obj.status, tostring(obj.ttl > 0))
            if req.http.x_refuse then return surogat.synth(409, "not while fetching") end
        end
        function deliver(req, resp)
            if req.ctx.hit then resp.http.x_hit = req.ctx.hit end
        end
        """)
    a = Partial(sg, "/big")
    a.head()
    a.some(FIRST)
    assert route.held.wait(5) and not route.done.is_set()
    b = Partial(sg, "/big")
    hb = b.head()
    assert hb.header("Cache-Status").startswith("surogat; fwd=miss; collapsed"), hb
    assert hb.header("X-Hit") == "200 ttl>0:true", hb
    r = sg.get("/big", headers={"X-Refuse": "1"})
    assert r.status == 409, r
    route.release.set()
    assert sha(a.rest()) == sha(BODY) and sha(b.rest()) == sha(BODY)
    a.close()
    b.close()
    assert origin.hits("/big") == 1


def test_do_gzip_do_gunzip_and_do_stream(origin, surogat, tmp_path):
    import gzip as gz
    import zlib
    big = b"binary-ish " * 400
    origin.route("/force", body=big, headers={"Cache-Control": "max-age=60",
                                             "Content-Type": "application/octet-stream"})
    origin.route("/never", body=b"<p>x</p>" * 500, headers={"Cache-Control": "max-age=60",
                                                          "Content-Type": "text/html"})
    origin.route("/zipped", body=gz.compress(b"decoded text " * 300),
                 headers={"Cache-Control": "max-age=60", "Content-Type": "text/plain",
                          "Content-Encoding": "gzip"})
    origin.route("/held", body=b"H" * 5000, headers={"Cache-Control": "max-age=60",
                                                    "ETag": '"h1"'})
    sg, _ = with_policy(surogat, tmp_path, """
        function backend_response(bereq, beresp)
            beresp.http.x_defaults = tostring(beresp.do_gzip) .. "," ..
                                     tostring(beresp.do_gunzip) .. "," ..
                                     tostring(beresp.do_stream)
            if bereq.url == "/force" then beresp.do_gzip = true end
            if bereq.url == "/never" then beresp.do_gzip = false end
            if bereq.url == "/zipped" then beresp.do_gunzip = true end
            if bereq.url == "/held" then beresp.do_stream = false end
        end
        """)
    AE = {"Accept-Encoding": "gzip"}
    # not a listed type, compressed anyway: stored gzip, gunzipped for others
    r = sg.get("/force", headers=AE)
    assert r.header("Content-Encoding") == "gzip" and zlib.decompress(r.body, 31) == big, r
    assert r.header("X-Defaults") == "false,false,true"
    assert sg.get("/force").body == big
    # a listed type, never compressed
    r = sg.get("/never", headers=AE)
    assert not r.has("Content-Encoding") and r.body == b"<p>x</p>" * 500, r
    # a gzip body stored decoded: every client gets identity, hits included
    for _ in range(2):
        r = sg.get("/zipped", headers=AE)
        assert not r.has("Content-Encoding") and r.body == b"decoded text " * 300, r
    assert origin.hits("/zipped") == 1
    # held: the whole object first, then delivered as from the cache
    r = sg.get("/held")
    assert r.status == 200 and r.body == b"H" * 5000, r
    assert r.header("Content-Length") == "5000", r
    assert "stored" in r.header("Cache-Status"), r
    assert sg.get("/held", headers={"If-None-Match": '"h1"'}).status == 304
    assert origin.hits("/held") == 1


def test_do_stream_false_sends_nothing_before_the_body_is_stored(origin, surogat, tmp_path):
    from c_stream_test import BODY, Partial, held_route, sha
    route = held_route(origin, "/slowbig")
    sg, _ = with_policy(surogat, tmp_path, """
        function backend_response(bereq, beresp) beresp.do_stream = false end
        """)
    a = Partial(sg, "/slowbig")
    assert route.held.wait(5)
    time.sleep(0.3)
    a.c.sock.setblocking(False)
    try:
        got = a.c.sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:  # nothing there to read
        got = None
    a.c.sock.settimeout(15)
    assert got is None, "bytes reached the client before the body was stored"
    route.release.set()
    h = a.head()
    assert h.status == 200 and h.header("Content-Length") == str(len(BODY)), h
    assert sha(a.rest()) == sha(BODY)
    a.close()


def test_detached_daemon_logs_policy_errors_in_its_directory(origin, tmp_path):
    import httpc
    from conftest import ROOT_OK, START_TIMEOUT, STOP_TIMEOUT, SUROGATD, free_port, listening
    origin.route("/ok", body=b"ok")
    p = script(tmp_path, """
        function recv(req)
            if req.url == "/boom" then error("kaboom") end
        end
        """, name="detached.lua")
    port, pidfile, wd = free_port(), tmp_path / "pid", tmp_path / "wd"
    r = subprocess.run([SUROGATD] + ROOT_OK + ["-a", "127.0.0.1:%d" % port, "-b", origin.addr, "-f", str(p),
                        "-n", str(wd), "-P", str(pidfile)],
                       capture_output=True, text=True, timeout=STOP_TIMEOUT)
    assert r.returncode == 0, r.stderr
    pid = int(pidfile.read_text())
    try:
        wait_until(lambda: listening(port), START_TIMEOUT, "the daemon")
        assert httpc.fetch(port, path="/boom").status == 503
        assert httpc.fetch(port, path="/ok").status == 200
        log = wd / "surogatd.log"
        wait_until(lambda: log.exists() and "detached.lua:3: kaboom" in log.read_text(), 5,
                   "the policy error in %s" % log)
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: _gone(pid), STOP_TIMEOUT, "the daemon to exit")


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_relative_script_path_is_from_the_start_directory(origin, surogat, tmp_path):
    # surogatd starts in tmp_path and works in its -n directory below it.
    origin.route("/rel", body=b"rel")
    (tmp_path / "rel.lua").write_text("function deliver(req, resp) resp.http.x_rel = 'yes' end\n")
    sg = surogat(args=["-f", "rel.lua"])
    assert sg.get("/rel").header("X-Rel") == "yes"
    (tmp_path / "rel.lua").write_text("function deliver(req, resp) resp.http.x_rel = 'two' end\n")
    sg.signal(signal.SIGHUP)
    wait_until(lambda: sg.get("/rel").header("X-Rel") == "two", 5, "the reload from the same file")
