"""Lua policy scripts (-f): the recv, hash, hit, miss, pass,
backend_response, deliver and log hooks and the client and obj objects
through the real daemon, builtin.lua's fallback, failures answered
503 with file:line in the log, -C, and SIGHUP reload."""

import signal
import textwrap

from conftest import REPO, run_surogatd, wait_until
from cstatus import forwarded, is_hit

CC60 = {"Cache-Control": "max-age=60"}


def script(tmp_path, text, name="policy.lua"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def with_policy(surogat, tmp_path, text, params=None, name="policy.lua"):
    p = script(tmp_path, text, name)
    return surogat(params=params, args=["-f", str(p)]), p


# -- recv ---------------------------------------------------------------------------


def test_recv_pass_synth_and_request_edits(origin, surogat, tmp_path):
    origin.route("/c", body=b"cached", headers=CC60)
    origin.route("/p", body=b"passed", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            req.http.x_policy = "seen"
            req.http["X-Drop"] = nil
            if req.url == "/p" then return "pass" end
            if req.url:sub(1, 6) == "/deny/" then
                return surogat.synth(403, "no entry for " .. req.url)
            end
        end
        """)
    for _ in range(2):
        r = sg.get("/p", headers={"X-Drop": "1"})
        assert r.status == 200 and r.body == b"passed"
        assert r.header("Cache-Status") == "surogat; fwd=bypass; detail=policy", r
    assert origin.hits("/p") == 2
    assert origin.last("/p").header("X-Policy") == "seen"
    assert not origin.last("/p").has("X-Drop")
    # nil from the script's recv: builtin.lua looks GET up
    assert forwarded(sg.get("/c").header("Cache-Status"), stored=True)
    assert is_hit(sg.get("/c"))
    assert origin.hits("/c") == 1
    r = sg.get("/deny/x")
    assert r.status == 403 and b"no entry for /deny/x" in r.body, r
    assert origin.hits("/deny/x") == 0
    # builtin.lua: a cookie passes, as the built-in C policy does
    assert sg.get("/c", headers={"Cookie": "a=1"}).header("Cache-Status") == \
        "surogat; fwd=bypass; detail=policy"


def test_recv_purge_through_builtin(origin, surogat, tmp_path):
    origin.route("/x", body=b"x", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, "function recv(req) end\n")
    sg.get("/x")
    assert is_hit(sg.get("/x"))
    assert sg.request("PURGE", "/x").status == 200
    assert forwarded(sg.get("/x").header("Cache-Status"))
    assert origin.hits("/x") == 2


# -- hash ---------------------------------------------------------------------------


def test_hash_override_ignores_query(origin, surogat, tmp_path):
    origin.route("/q", body=b"q", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function hash(req)
            surogat.hash_data(req.http.host or "", (re.sub(req.url, "\\\\?.*$", "")))
            return "lookup"
        end
        """)
    r1 = sg.get("/q?a=1")
    r2 = sg.get("/q?b=2")
    assert r1.body == b"q" and is_hit(r2), r2
    assert origin.hits() == 1


def test_hash_data_adds_to_builtin_key(origin, surogat, tmp_path):
    origin.route("/v", body=b"v", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function hash(req)
            surogat.hash_data(req.http["X-Variant"] or "none")
        end
        """)
    sg.get("/v", headers={"X-Variant": "a"})
    sg.get("/v", headers={"X-Variant": "b"})
    assert is_hit(sg.get("/v", headers={"X-Variant": "a"}))
    assert origin.hits("/v") == 2
    # the key is still the built-in one plus the data: PURGE of the URL alone misses it
    assert sg.request("PURGE", "/v").status == 200


def test_recv_normalises_query_to_one_object(origin, surogat, tmp_path):
    origin.route("/n", body=b"n", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            req.url = surogat.query_sort(surogat.query_remove(req.url, "utm_*", "fbclid"))
        end
        """)
    r = sg.get("/n?b=2&a=1&utm_source=x")
    assert r.body == b"n" and forwarded(r.header("Cache-Status"), stored=True), r
    assert origin.last("/n").target == "/n?a=1&b=2"
    for url in ("/n?a=1&b=2", "/n?fbclid=z&b=2&&a=1", "/n?utm_medium=m&b=2&a=1"):
        assert is_hit(sg.get(url)), url
    assert origin.hits() == 1
    assert not is_hit(sg.get("/n?a=2&b=1"))


# -- backend_response ---------------------------------------------------------------


def test_backend_response_ttl_and_pass(origin, surogat, tmp_path):
    origin.route("/nottl", body=b"n")                       # no freshness: not stored by RFC
    origin.route("/store", body=b"s", headers={"Cache-Control": "no-store"})
    origin.route("/keepout", body=b"k", headers=CC60)       # storable, refused by the policy
    sg, _ = with_policy(surogat, tmp_path, """
        function backend_response(bereq, beresp)
            beresp.http["X-Seen-TTL"] = tostring(math.floor(beresp.ttl + 0.5))
            beresp.http["X-Uncacheable"] = tostring(beresp.uncacheable)
            if bereq.url == "/nottl" then beresp.ttl = 120 end
            if bereq.url == "/store" then beresp.ttl = 30; beresp.uncacheable = false end
            if bereq.url == "/keepout" then return "pass" end
        end
        """)
    r = sg.get("/nottl")
    assert r.header("X-Seen-TTL") == "0" and r.header("X-Uncacheable") == "true", r
    assert forwarded(r.header("Cache-Status"), stored=True), r
    r = sg.get("/nottl")
    assert is_hit(r) and r.header("X-Seen-TTL") == "0", r
    ttl = int(r.header("Cache-Status").rsplit("=", 1)[1])
    assert 100 <= ttl <= 120, r
    sg.get("/store")
    assert is_hit(sg.get("/store"))
    r = sg.get("/keepout")
    assert r.header("X-Seen-TTL") == "60" and r.header("X-Uncacheable") == "false", r
    assert not is_hit(sg.get("/keepout"))
    assert origin.hits("/nottl") == 1 and origin.hits("/store") == 1
    assert origin.hits("/keepout") == 2


def test_backend_response_abandon(origin, surogat, tmp_path):
    origin.route("/a", body=b"a", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function backend_response(bereq, beresp)
            if beresp.status == 200 and beresp.http.x_bad == nil then return "abandon" end
        end
        """)
    assert sg.get("/a").status == 503
    assert sg.request("POST", "/a", body=b"1").status == 503


# -- deliver ------------------------------------------------------------------------


def test_deliver_edits_hits_and_misses(origin, surogat, tmp_path):
    origin.route("/d", body=b"dd", headers=dict(CC60, **{"X-Secret": "1"}))
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            req.ctx.seen = "recv:" .. req.url
        end
        function deliver(req, resp)
            resp.http["X-Secret"] = nil
            resp.http:append("X-Deliver", "one")
            resp.http:append("X-Deliver", "two")
            resp.http["X-Ctx"] = req.ctx.seen
            resp.http["X-Status"] = tostring(resp.status)
            if req.url == "/d?teapot" then resp.status = 418 end
        end
        """)
    for hit in (False, True, True):
        r = sg.get("/d")
        assert r.status == 200 and r.body == b"dd", r
        assert is_hit(r) == hit, r
        assert not r.has("X-Secret")
        assert r.headers_all("X-Deliver") == ["one", "two"], r
        assert r.header("X-Ctx") == "recv:/d" and r.header("X-Status") == "200"
        assert r.headers_all("Content-Length") == ["2"]
    assert origin.hits("/d") == 1
    r = sg.get("/d?teapot")
    assert r.status == 418 and r.body == b"dd", r
    # the stored copy is untouched: a HEAD hit is edited the same way
    with sg.conn() as c:
        c.request("HEAD", "/d")
        r = c.read_response("HEAD")
        assert r.status == 200 and is_hit(r) and r.headers_all("X-Deliver") == ["one", "two"]


def test_deliver_synth(origin, surogat, tmp_path):
    origin.route("/s", body=b"s", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function deliver(req, resp)
            if resp.http["X-No"] then return surogat.synth(451, "gone") end
        end
        """)
    origin.route("/n", body=b"n", headers=dict(CC60, **{"X-No": "1"}))
    assert sg.get("/s").status == 200
    r = sg.get("/n")
    assert r.status == 451 and b"gone" in r.body
    r = sg.get("/n")  # the hit too
    assert r.status == 451


# -- hit, miss, pass, client ---------------------------------------------------------


def test_hit_actions_and_obj(origin, surogat, tmp_path):
    origin.route("/h", body=b"hh", headers=dict(CC60, **{"X-Tag": "t1"}))
    sg, _ = with_policy(surogat, tmp_path, """
        function hit(req, obj)
            local a = req.http["X-Act"]
            if a == "read" then
                return surogat.synth(299, string.format("%d %s %s %d %s",
                    obj.status, obj.http.x_tag, obj.http:get("X-Tag"),
                    obj.ttl > 50 and obj.ttl <= 60 and 1 or 0, tostring(obj.age < 5)))
            end
            if a == "pass" then return "pass" end
            if a == "synth" then return surogat.synth(410, "gone from " .. obj.http.x_tag) end
            if a == "miss" then return "miss" end
            if a == "bad" then return "fetch" end
            if a == "write" then obj.http.x_tag = "changed" end
        end
        """)
    assert sg.get("/h").body == b"hh"
    assert origin.hits("/h") == 1
    r = sg.get("/h", headers={"X-Act": "read"})
    assert r.status == 299 and b"200 t1 t1 1 true" in r.body, r
    # pass: the origin sees the request, the object stays
    r = sg.get("/h", headers={"X-Act": "pass"})
    assert r.status == 200 and r.body == b"hh" and not is_hit(r), r
    assert origin.hits("/h") == 2 and origin.last("/h").header("X-Act") == "pass"
    assert is_hit(sg.get("/h"))
    r = sg.get("/h", headers={"X-Act": "synth"})
    assert r.status == 410 and b"gone from t1" in r.body, r
    assert origin.hits("/h") == 2
    # miss: fetched again, and the new response replaces the object
    origin.route("/h", body=b"h2", headers=dict(CC60, **{"X-Tag": "t2"}))
    r = sg.get("/h", headers={"X-Act": "miss"})
    assert r.status == 200 and r.body == b"h2" and not is_hit(r), r
    assert origin.hits("/h") == 3
    r = sg.get("/h")
    assert is_hit(r) and r.body == b"h2" and r.header("X-Tag") == "t2", r
    # an action hit may not return, or a write to obj: 503
    errs = sg.stat("policy_error")
    assert sg.get("/h", headers={"X-Act": "bad"}).status == 503
    assert sg.get("/h", headers={"X-Act": "write"}).status == 503
    assert sg.stat("policy_error") == errs + 2
    assert "hit returned \"fetch\"" in sg.log_tail()
    assert origin.hits("/h") == 3


def test_miss_and_pass_hooks(origin, surogat, tmp_path):
    origin.route("/m", body=b"m", headers=CC60)
    origin.route("/p", body=b"p", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            if req.url == "/p" then return "pass" end
        end
        function miss(req)
            if req.http["X-Miss"] == "synth" then return surogat.synth(404, "not cached") end
            if req.http["X-Miss"] == "pass" then return "pass" end
            if req.http["X-Miss"] == "bad" then return "deliver" end
        end
        function pass(req)
            if req.http["X-Pass"] == "synth" then return surogat.synth(429, "slow down") end
            req.http["X-Passed"] = client.ip
        end
        """)
    r = sg.get("/m", headers={"X-Miss": "synth"})
    assert r.status == 404 and b"not cached" in r.body, r
    assert origin.hits("/m") == 0
    # miss -> pass: fetched through the pass hook, not stored
    r = sg.get("/m", headers={"X-Miss": "pass"})
    assert r.status == 200 and r.body == b"m" and r.header("Cache-Status") == \
        "surogat; fwd=bypass; detail=policy", r
    assert origin.last("/m").header("X-Passed") == "127.0.0.1"
    assert sg.get("/m", headers={"X-Miss": "bad"}).status == 503
    assert origin.hits("/m") == 1
    # the busy objects given up do not stand in the way: a plain miss stores
    assert forwarded(sg.get("/m").header("Cache-Status"), stored=True)
    assert is_hit(sg.get("/m"))
    r = sg.get("/p", headers={"X-Pass": "synth"})
    assert r.status == 429 and b"slow down" in r.body, r
    assert origin.hits("/p") == 0
    r = sg.get("/p")
    assert r.status == 200 and origin.last("/p").header("X-Passed") == "127.0.0.1"


def test_client_object(origin, surogat, tmp_path):
    origin.route("/c", body=b"c", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            req.ctx.peer = client.ip .. " " .. type(client.port)
        end
        function deliver(req, resp)
            resp.http["X-Client"] = req.ctx.peer
            resp.http["X-Port"] = tostring(client.port)
        end
        """)
    with sg.conn() as c:
        c.request("GET", "/c")
        r = c.read_response("GET")
        port = c.sock.getsockname()[1]
    assert r.header("X-Client") == "127.0.0.1 number", r
    assert r.header("X-Port") == str(port)


def test_log_hook(origin, surogat, tmp_path):
    origin.route("/l", body=b"l", headers=CC60)
    sg, p = with_policy(surogat, tmp_path, """
        function recv(req)
            req.ctx.t = "from-recv"
        end
        function log(req, resp)
            if req.url == "/boom" then error("log failed") end
            surogat.log("served", req.method, req.url, resp.status, req.ctx.t, client.ip)
        end
        """)
    origin.route("/nothere", status=404, body=b"no")
    assert sg.get("/l").status == 200
    r = sg.get("/nothere")
    wait_until(lambda: "policy: served GET /l 200 from-recv 127.0.0.1" in sg.log_tail(), 5,
               "the log hook's line")
    assert r.status == 404, r
    wait_until(lambda: "policy: served GET /nothere 404 from-recv" in sg.log_tail(), 5,
               "the log hook's line for a 404: %s" % sg.log_tail())
    # a failing log hook: logged and counted, the response is untouched
    origin.route("/boom", body=b"fine", headers=CC60)
    r = sg.get("/boom")
    assert r.status == 200 and r.body == b"fine", r
    wait_until(lambda: "%s:6: log failed" % p.name in sg.log_tail(), 5,
               "the error logged: %s" % sg.log_tail())
    assert sg.stat("policy_error") == 1
    assert sg.get("/boom").status == 200


# -- failures -----------------------------------------------------------------------


def test_runtime_errors_answer_503_with_file_line(origin, surogat, tmp_path):
    origin.route("/ok", body=b"ok", headers=CC60)
    sg, p = with_policy(surogat, tmp_path, """
        function recv(req)
            if req.url == "/nil" then
                local t = nil
                return t.field
            end
            if req.url == "/action" then return "deliver" end
            if req.url == "/loop" then while true do end end
            if req.url == "/io" then return io.open("/etc/passwd") end
            if req.url == "/os" then return os.execute("true") end
            if req.url == "/mem" then
                local t = {}
                for i = 1, 1e8 do t[i] = string.rep("x", 64) .. i end
            end
            if req.url == "/hdr" then req.http["X-Bad"] = "a\\r\\nInjected: 1" end
        end
        """, params={"policy_max_memory": "2m"})
    name = p.name
    cases = {
        "/nil": "%s:5: attempt to index a nil value" % name,
        "/action": "%s:2: recv returned \"deliver\"" % name,
        "/loop": "%s:8: policy_max_instructions exceeded" % name,
        "/io": "%s:9: attempt to index a nil value (global 'io')" % name,
        "/os": "%s:10: attempt to call a nil value (field 'execute')" % name,
        "/mem": "%s: not enough memory (policy_max_memory)" % name,
        "/hdr": "%s:15: header value with CR, LF or NUL" % name,
    }
    for path, msg in cases.items():
        r = sg.get(path)
        assert r.status == 503, (path, r)
        wait_until(lambda: msg in sg.log_tail(200), 5, "log line %r" % msg)
        # the worker's state survives: the next request works
        assert sg.get("/ok").status == 200
    assert sg.stat("policy_error") == len(cases)
    assert origin.hits("/nil") == 0


def test_backend_response_error_is_503(origin, surogat, tmp_path):
    origin.route("/e", body=b"e", headers=CC60)
    sg, p = with_policy(surogat, tmp_path, """
        function backend_response(bereq, beresp)
            beresp.ttl = -1
        end
        """)
    assert sg.get("/e").status == 503
    wait_until(lambda: "%s:3: beresp.ttl" % p.name in sg.log_tail(), 5, "log line")
    assert sg.alive()


def test_startup_with_bad_script_exits_2(tmp_path, origin):
    p = script(tmp_path, "function recv(req)\n  return 'pass'\n\nend end\n", "bad.lua")
    r = run_surogatd(["-F", "-a", "127.0.0.1:0", "-b", origin.addr, "-f", str(p),
                      "-n", str(tmp_path / "wd")])
    assert r.returncode == 2
    assert "bad.lua:4:" in r.stderr, r.stderr


def test_check_mode(tmp_path):
    good = script(tmp_path, "function recv(req) return 'pass' end\n", "good.lua")
    r = run_surogatd(["-C", "-f", str(good)])
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout
    bad = script(tmp_path, "local x = \nfunction recv(req) end\nx(\n", "bad.lua")
    r = run_surogatd(["-C", "-f", str(bad)])
    assert r.returncode == 2 and "bad.lua:" in r.stderr, r.stderr
    # the top level runs in the sandbox too: errors there are reported with the line
    top = script(tmp_path, "\n\nio.write('x')\n", "top.lua")
    r = run_surogatd(["-C", "-f", str(top)])
    assert r.returncode == 2 and "top.lua:3:" in r.stderr, r.stderr
    r = run_surogatd(["-C", "-f", str(tmp_path / "missing.lua")])
    assert r.returncode == 2 and "missing.lua" in r.stderr
    r = run_surogatd(["-C"])
    assert r.returncode == 2


def test_shipped_scripts_compile():
    names = sorted(p.name for p in (REPO / "vcl").glob("*.lua"))
    assert {"builtin.lua", "normalize.lua", "apache-front.lua", "apache-static.lua",
            "purge.lua", "wordpress.lua"} <= set(names), names
    for name in names:
        r = run_surogatd(["-C", "-f", str(REPO / "vcl" / name)])
        assert r.returncode == 0, (name, r.stderr)


# -- reload -------------------------------------------------------------------------


def test_sighup_reload(origin, surogat, tmp_path):
    origin.route("/r", body=b"r")
    sg, p = with_policy(surogat, tmp_path, """
        function recv(req) return surogat.synth(200, "version one") end
        """)
    assert b"version one" in sg.get("/r").body
    p.write_text('function recv(req) return surogat.synth(200, "version two") end\n')
    sg.signal(signal.SIGHUP)
    wait_until(lambda: sg.stat("policy_reload") == 1, 5, "reload")
    # every worker picks the new program up at its next request
    for _ in range(10):
        assert b"version two" in sg.get("/r").body
    # a script that does not compile is refused: the old one keeps running
    p.write_text("function recv(req\n")
    sg.signal(signal.SIGHUP)
    wait_until(lambda: "reload: failed" in sg.log_tail(), 5, "refusal logged")
    assert "policy.lua:2:" in sg.log_tail()
    assert b"version two" in sg.get("/r").body
    assert sg.stat("policy_reload") == 1


def test_normalize_example(origin, surogat):
    origin.route("/a.css", body=b"css", headers={"Set-Cookie": "x=1"})
    origin.route("/page", body=b"page", headers=CC60)
    sg = surogat(args=["-f", str(REPO / "vcl" / "normalize.lua")])
    r = sg.get("/a.css?utm_source=news&v=2", headers={"Cookie": "_ga=1"})
    assert r.status == 200 and r.header("X-Static") == "1" and not r.has("Server"), r
    seen = origin.last("/a.css")
    assert seen.target == "/a.css?v=2" and not seen.has("Cookie"), seen
    assert is_hit(sg.get("/a.css?utm_medium=x&v=2"))
    assert sg.get("/healthz").status == 200 and origin.hits("/healthz") == 0
    # analytics cookies only: cached; a session cookie passes
    sg.get("/page", headers={"Cookie": "_ga=1"})
    assert is_hit(sg.get("/page", headers={"Cookie": "_ga=2"}))
    assert sg.get("/page", headers={"Cookie": "session=abc"}).header("Cache-Status") == \
        "surogat; fwd=bypass; detail=policy"


def test_purge_example(origin, surogat, tmp_path):
    for path in ("/p", "/news/1", "/news/2", "/img/a.png", "/img/b.gif"):
        origin.route(path, body=path.encode(), headers=CC60)
    sg = surogat(args=["-f", str(REPO / "vcl" / "purge.lua")])

    def cached(*paths):
        for path in paths:
            sg.get(path)
            assert is_hit(sg.get(path)), path

    cached("/p", "/news/1", "/news/2", "/img/a.png", "/img/b.gif")
    r = sg.request("PURGE", "/p")
    assert r.status == 200 and b"Purged 1 object." in r.body, r
    assert not is_hit(sg.get("/p"))
    # BAN: the target as a regex, on the request's Host only
    r = sg.request("BAN", "/news/")
    assert r.status == 200 and b"req.url ~ " in r.body, r
    assert not is_hit(sg.get("/news/1")) and not is_hit(sg.get("/news/2"))
    assert is_hit(sg.get("/img/a.png"))
    r = sg.request("BAN", "/", headers={"X-Ban-Url": "^/img/.*\\.png$"})
    assert r.status == 200, r
    assert not is_hit(sg.get("/img/a.png")) and is_hit(sg.get("/img/b.gif"))
    r = sg.request("BAN", "/", headers={"X-Ban-Url": "("})
    assert r.status == 400, r
    assert sg.get("/p").status == 200 and sg.request("POST", "/p").status == 200

    # the same script with 127.0.0.1 left out of its list: 403, nothing removed
    p = tmp_path / "purge.lua"
    text = (REPO / "vcl" / "purge.lua").read_text()
    assert '{ "127.0.0.1", "::1" }' in text
    p.write_text(text.replace('{ "127.0.0.1", "::1" }', '{ "::1" }'))
    sg2 = surogat(args=["-f", str(p)])
    sg2.get("/img/b.gif")
    assert is_hit(sg2.get("/img/b.gif"))
    for method, path in (("PURGE", "/img/b.gif"), ("BAN", "/img/")):
        r = sg2.request(method, path)
        assert r.status == 403 and b"not allowed from 127.0.0.1" in r.body, r
    assert is_hit(sg2.get("/img/b.gif"))
