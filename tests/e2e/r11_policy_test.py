"""Regressions of the policy's safety, tried as a hostile client or a careless script
would: a script cannot break a message's framing (Content-Length, Transfer-Encoding,
Connection, Keep-Alive and Upgrade, and TE and Trailer on bereq, are read-only; a status
change cannot add or remove a body); a hook's budgets cannot be escaped (pcall and
xpcall cannot catch the instruction limit; a deadline per hook, policy_max_time, bounds
the pattern functions, re.* and large allocations); one request's globals and library
changes never reach the next; `surogatd -C` refuses a constant answer the hook may not
give; the man page's example runs as printed."""

import time

import httpc
from conftest import REPO, run_surogatd
from p_policy_test import script

CC60 = {"Cache-Control": "max-age=60"}


def with_policy(surogat, tmp_path, text, params=None, backend=None):
    p = script(tmp_path, text)
    return surogat(params=params, backend=backend, args=["-f", str(p)]), p


def line_of(path, marker):
    """The line number of the first line of the script holding `marker`."""
    for n, ln in enumerate(path.read_text().splitlines(), 1):
        if marker in ln:
            return n
    raise AssertionError("no %r in %s" % (marker, path))


def logged(sg, path, marker, what):
    """Whether the daemon logged `what` at the line of `marker` (file:line)."""
    want = "%s:%d:" % (path.name, line_of(path, marker))
    return any(want in ln and what in ln for ln in sg.log_tail(400).splitlines())


def pipelined(sg, path, method="GET"):
    """`path` then GET /next (closing) on one connection: the responses, parsed strictly."""
    data = httpc.build_request(method, path) + \
        httpc.build_request("GET", "/next", headers={"Connection": "close"})
    return httpc.parse_responses(sg.exchange(data), method)


# -- 7: the framing is surogat's -----------------------------------------------------


FRAMING = """
    function recv(req)
        local u = req.url
        if u == "/r-cl" then req.http["Content-Length"] = "5" end           -- r-cl
        if u == "/r-te" then req.http:set("Transfer-Encoding", "chunked") end -- r-te
        if u == "/r-conn" then req.http:append("Connection", "close") end   -- r-conn
        if u == "/r-ka" then req.http:unset("Keep-Alive") end               -- r-ka
        if u == "/r-up" then req.http.upgrade = "h2c" end                   -- r-up
        if u == "/r-nil" then req.http.content_length = nil end             -- r-nil
        if u == "/s-te" then return surogat.synth(200, "synth") end
        if u == "/pipe" then return "pipe" end
        if u:sub(1, 3) == "/p-" then return "pass" end
    end
    function backend_fetch(bereq)
        local u = bereq.url
        if u == "/p-te" then bereq.http.te = "trailers" end                 -- p-te
        if u == "/p-trailer" then bereq.http["Trailer"] = "X-Sum" end       -- p-trailer
        if u == "/p-tenc" then bereq.http:set("TRANSFER-ENCODING", "chunked") end -- p-tenc
    end
    function backend_response(bereq, beresp)
        if bereq.url == "/p-beresp" then beresp.http["content-length"] = "0" end -- p-beresp
    end
    function deliver(req, resp)
        if req.url == "/p-resp" then resp.http:set("Content-Length", "0") end -- p-resp
        -- reading stays allowed
        if req.url == "/p-read" then
            resp.http["X-Length"] = resp.http["Content-Length"]
            resp.http["X-Conn"] = tostring(resp.http.connection)
        end
    end
    function synth(req, resp)
        if req.url == "/s-te" then resp.http["Transfer-Encoding"] = "chunked" end -- s-te
    end
    function pipe(req, bereq)
        bereq.http["Content-Length"] = "0"                                  -- pipe-cl
    end
    """


def test_framing_fields_read_only_in_every_header_table(origin, surogat, tmp_path):
    sg, p = with_policy(surogat, tmp_path, FRAMING)
    cases = ["r-cl", "r-te", "r-conn", "r-ka", "r-up", "r-nil", "p-te", "p-trailer", "p-tenc",
             "p-beresp", "p-resp", "s-te"]
    for c in cases:
        r = sg.get("/" + c)
        assert r.status == 503, (c, r)
        assert logged(sg, p, "-- " + c, "read-only"), (c, sg.log_tail())
    # the backend request was never sent when backend_fetch failed
    for c in ("p-te", "p-trailer", "p-tenc"):
        assert origin.hits("/" + c) == 0, c
    assert sg.stat("policy_error") >= len(cases)
    # reading them is allowed
    origin.route("/p-read", body=b"12345")
    r = sg.get("/p-read")
    assert r.status == 200 and r.body == b"12345", r
    assert r.header("X-Length") == "5" and r.header("X-Conn") == "nil", r
    # pipe's bereq too: nothing goes to the backend
    r = sg.get("/pipe")
    assert r.status == 503 and origin.hits("/pipe") == 0, r
    assert logged(sg, p, "-- pipe-cl", "read-only")


def test_backend_error_framing_read_only(origin, surogat, tmp_path):
    origin.route("/bad", garbage=b"not http\r\n\r\n")
    sg, p = with_policy(surogat, tmp_path, """
        function recv(req) return "pass" end
        function backend_error(bereq, beresp)
            beresp.http.connection = "keep-alive"       -- be-conn
            beresp.status = 200
            beresp.body = "fine"
            return "deliver"
        end
        """)
    r = sg.get("/bad")
    assert r.status == 502 and r.body != b"fine", r
    assert logged(sg, p, "-- be-conn", "read-only"), sg.log_tail()


CAUGHT = """
    function recv(req)
        if req.url == "/s204" then return surogat.synth(204, "Nothing") end
        if req.url == "/be204" then return "pass" end
    end
    function backend_error(bereq, beresp)
        beresp.status = 304
        beresp.body = "a body a 304 cannot have"
        return "deliver"
    end
    -- Each attempt is refused; the error is caught and the response goes out.
    function deliver(req, resp)
        local u = req.url
        local ok = true
        if u == "/cl0" then
            ok = pcall(function() resp.http["Content-Length"] = "0" end)
        elseif u == "/chunked" then
            ok = pcall(resp.http.set, resp.http, "Transfer-Encoding", "chunked")
        elseif u == "/unset" then
            ok = pcall(resp.http.unset, resp.http, "Content-Length")
        elseif u == "/304" then
            ok = pcall(function() resp.status = 304 end)
        elseif u == "/204" then
            ok = pcall(function() resp.status = 204 end)
        end
        resp.http["X-Refused"] = tostring(not ok)
    end
    """


def test_script_cannot_desync_the_client(origin, surogat, tmp_path):
    """Pipelined requests: whatever the script tried, each response is framed as its body
    is, and the next response starts where the client expects it."""
    body = b"0123456789" * 10
    for path in ("/cl0", "/chunked", "/unset", "/304", "/204"):
        origin.route(path, body=body, headers=CC60)
    origin.route("/next", body=b"next", headers=CC60)
    origin.route("/be204", garbage=b"not http\r\n\r\n")
    sg, _ = with_policy(surogat, tmp_path, CAUGHT)
    for path in ("/cl0", "/chunked", "/unset", "/304", "/204"):
        for _ in range(2):  # a miss, then a hit
            rs = pipelined(sg, path)
            assert [r.status for r in rs] == [200, 200], (path, rs)
            assert rs[0].body == body and rs[0].header("X-Refused") == "true", (path, rs[0])
            assert rs[1].body == b"next", (path, rs)
    # HEAD: no body either way
    with sg.conn() as c:
        c.request("HEAD", "/cl0")
        r = c.read_response("HEAD")
        assert r.status == 200 and r.header("Content-Length") == "100", r
        c.request("GET", "/next")
        assert c.read_response().body == b"next"
    # a synthetic 204, and a 304 from backend_error, go out without a body
    for path, st in (("/s204", 204), ("/be204", 304)):
        rs = pipelined(sg, path)
        assert [r.status for r in rs] == [st, 200], (path, rs)
        assert not rs[0].has("Content-Length") and not rs[0].has("Transfer-Encoding"), rs[0]
        assert rs[1].body == b"next", (path, rs)


def test_script_cannot_smuggle_to_the_backend(origin, surogat, tmp_path):
    origin.route("/up", echo=True)
    sg, _ = with_policy(surogat, tmp_path, """
        function backend_fetch(bereq)
            local refused = 0
            for _, f in ipairs({
                function() bereq.http["Transfer-Encoding"] = "chunked" end,
                function() bereq.http["Content-Length"] = "2" end,
                function() bereq.http:append("Content-Length", "2") end,
                function() bereq.http.te = "trailers" end,
                function() bereq.http:set("Connection", "keep-alive, Upgrade") end,
                function() bereq.http.upgrade = "websocket" end,
            }) do
                if not pcall(f) then refused = refused + 1 end
            end
            bereq.http["X-Refused"] = tostring(refused)
        end
        """)
    for _ in range(3):
        r = sg.request("POST", "/up", body=b"hello")
        assert r.status == 200 and r.body == b"hello", r
    assert origin.hits("/up") == 3 and not origin.errors, origin.errors
    for q in origin.reqs("/up"):
        assert q.header("X-Refused") == "6"
        assert q.headers_all("Content-Length") == ["5"] and not q.has("Transfer-Encoding")
        assert not q.has("TE") and not q.has("Upgrade") and q.body == b"hello"


# -- 8: budgets that cannot be escaped ------------------------------------------------


ESCAPES = """
    local function spin() while true do end end
    function recv(req)
        local u = req.url
        if u == "/pcall" then
            while true do pcall(spin) end
        elseif u == "/xpcall" then
            while true do xpcall(spin, function(e) return "handled" end) end
        elseif u == "/handler-spins" then
            while true do xpcall(spin, spin) end
        elseif u == "/table-error" then
            local n = 0
            while true do
                pcall(spin)
                n = n + 1
                pcall(error, { n = n })
            end
        elseif u == "/callback" then
            while true do pcall(string.gsub, ("x"):rep(100), ".", spin) end
        elseif u == "/sort" then
            local t = { 3, 2, 1 }
            while true do pcall(table.sort, t, function(a, b) spin() end) end
        elseif u == "/return-after" then
            pcall(spin)
            return "pass"
        elseif u == "/coroutine" then
            return surogat.synth(200, tostring(coroutine))
        end
        return surogat.synth(200, "fine")
    end
    """


def test_instruction_limit_cannot_be_caught(origin, surogat, tmp_path):
    sg, p = with_policy(surogat, tmp_path, ESCAPES,
                        params={"policy_max_instructions": "100000"})
    escapes = ["/pcall", "/xpcall", "/handler-spins", "/table-error", "/callback", "/sort",
               "/return-after"]
    for path in escapes:
        t0 = time.monotonic()
        r = sg.get(path, timeout=5)
        assert r.status == 503, (path, r)
        assert time.monotonic() - t0 < 2, path
        assert sg.get("/").reason == "fine"  # the worker is free again
    assert sg.stat("policy_error") == len(escapes) == sg.stat("policy_limit")
    assert origin.hits() == 0
    assert sg.log_tail(200).count("policy_max_instructions exceeded") >= len(escapes)
    # no coroutines in the sandbox: nothing runs beside the hook's own stack
    assert sg.get("/coroutine").reason == "nil"


DEADLINE = """
    local s = ("a"):rep(1500) .. "b"
    local evil = ".-.-.-c"
    function recv(req)
        local u = req.url
        if u == "/find" then
            s:find(evil)                                    -- find
        elseif u == "/match" then
            string.match(s, "(" .. evil .. ")")             -- match
        elseif u == "/gmatch" then
            for m in s:gmatch(evil) do end                  -- gmatch
        elseif u == "/gsub" then
            s:gsub(evil, "x")                               -- gsub
        elseif u:sub(1, 7) == "/route/" then
            -- an innocent-looking pattern, a URL chosen to defeat it
            local a, b, c = u:match("^/route/(.-)/(.-)/(.-)%.php$")   -- route
            if a then return "pass" end
        elseif u == "/pcall-find" then
            while true do pcall(string.find, s, evil) end   -- pcall-find
        elseif u == "/rep" then
            while true do pcall(string.rep, "x", 1e7) end
        elseif u == "/re" then
            local bad = ("a"):rep(100) .. "!"
            while true do pcall(re.match, bad, "(a+)+$") end
        elseif u == "/re-gsub" then
            -- one call: a few ms of backtracking before each of 2000 replacements
            re.gsub((("a"):rep(20) .. "!"):rep(2000), "(a+)+b|!", "")   -- re-gsub
        elseif u == "/huge-rep" then
            local t0 = os.clock()
            local ok1, err1 = pcall(string.rep, "x", 1e9)
            local ok2, err2 = pcall(string.rep, "x", 2^40, ",")
            assert(not ok1 and not ok2 and os.clock() - t0 < 0.01)
            return surogat.synth(200, err1 .. "; " .. err2)
        end
        return surogat.synth(200, "fine")
    end
    """


def test_deadline_bounds_patterns_re_and_allocations(origin, surogat, tmp_path):
    sg, p = with_policy(surogat, tmp_path, DEADLINE)
    attack = "/route/x" + "/" * 3000 + "y"
    for path in ("/find", "/match", "/gmatch", "/gsub", attack, "/pcall-find", "/rep", "/re",
                 "/re-gsub"):
        t0 = time.monotonic()
        r = sg.get(path, timeout=5)
        took = time.monotonic() - t0
        assert r.status == 503, (path[:20], r)
        assert took < 1.5, (path[:20], took)
        assert sg.get("/").reason == "fine"
    for marker in ("-- find", "-- match", "-- gmatch", "-- gsub", "-- route", "-- pcall-find",
                   "-- re-gsub"):
        assert logged(sg, p, marker, "policy_max_time exceeded"), (marker, sg.log_tail())
    assert sg.log_tail(400).count("policy_max_time exceeded") >= 9
    assert sg.stat("policy_limit") == 9
    # a string larger than policy_max_memory, or than any string, fails at once (an
    # error a script may catch)
    r = sg.get("/huge-rep")
    assert r.status == 200 and r.reason == "not enough memory; resulting string too large", r
    assert origin.hits() == 0


def test_policy_max_time_is_a_live_parameter(origin, surogat, tmp_path):
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            local t0 = os.clock()
            local s = ("a"):rep(200) .. "b"
            local ok, err = pcall(string.find, s, ".-.-.-c")
            return surogat.synth(200, string.format("%s %.2f", tostring(ok), os.clock() - t0))
        end
        """)
    # some 0.2 s of matching fits in 2 s: the search ends, without a match
    p = sg.ctl("param.set", "policy_max_time", "2s")
    assert p.returncode == 0, p.stdout + p.stderr
    r = sg.get("/")
    assert r.status == 200 and r.reason.startswith("true"), r
    p = sg.ctl("param.set", "policy_max_time", "10ms")
    assert p.returncode == 0, p.stdout + p.stderr
    r = sg.get("/")
    assert r.status == 503, r


ISOLATION = """
    -- configuration at the top level keeps working
    local SECRET_HEADER = "X-Secret"
    ROUTES = { ["/a"] = "alpha" }
    local served = 0
    function string.shout(s) return s:upper() .. "!" end

    function recv(req)
        local u = req.url
        served = served + 1
        if u == "/global" then
            leaked = req.http[SECRET_HEADER]
            assert(leaked == _G.leaked and rawget(_G, "leaked") == leaked)
        elseif u == "/library" then
            pcall(function() string.upper = function() return "pwned" end end)
            pcall(function() table.concat = nil end)
            pcall(rawset, string, "lower", function() return "pwned" end)
        elseif u == "/metatable" then
            pcall(function() getmetatable("").__index = { upper = function() return "pwned" end } end)
            pcall(setmetatable, _G, { __index = function() return "pwned" end })
            pcall(setmetatable, string, nil)
        elseif u == "/top-level" then
            ROUTES = {}                                             -- top-level
        elseif u == "/gc" then
            setmetatable({}, { __gc = function() leaked = "from a finalizer" end })  -- gc
        end
        return surogat.synth(200, table.concat({ tostring(leaked), ("a"):upper(), ("B"):lower(),
            ROUTES["/a"], ("hi"):shout(), tostring(served > 0), tostring(missing) }, " "))
    end
    """


def test_no_state_from_one_request_to_the_next(origin, surogat, tmp_path):
    # one worker: every request runs on the same Lua state
    sg, p = with_policy(surogat, tmp_path, ISOLATION, params={
        "thread_pools": "1", "thread_pool_min": "1", "thread_pool_max": "1"})
    clean = "nil A b alpha HI! true nil"
    r = sg.get("/global", headers={"X-Secret": "hunter2"})
    assert r.status == 200 and r.reason == "hunter2 A b alpha HI! true nil", r
    for path in ("/library", "/metatable"):
        r = sg.get(path)
        assert r.status == 200 and r.reason == clean, (path, r)
    for path in ("/top-level", "/gc"):
        assert sg.get(path).status == 503, path
    assert logged(sg, p, "-- top-level", "read-only")
    assert logged(sg, p, "-- gc", "__gc")
    for _ in range(3):
        r = sg.get("/")
        assert r.status == 200 and r.reason == clean, r


# -- surogatd -C: a constant answer the hook may not give -----------------------------


def test_check_refuses_a_constant_invalid_action(tmp_path):
    p = script(tmp_path, """
        function recv(req)
            if req.url == "/x" then return "pass" end
        end
        function hash(req)
            return "hsah"
        end
        """)
    r = run_surogatd(["-C", "-f", str(p)])
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "%s:%d:" % (p, line_of(p, '"hsah"')) in r.stderr and '"hsah"' in r.stderr, r.stderr
    assert '"lookup"' in r.stderr, r.stderr  # what hash may return
    # a vararg one-liner, and the same at startup
    p = script(tmp_path, 'function miss(...) return "deliver" end\n', "one.lua")
    r = run_surogatd(["-C", "-f", str(p)])
    assert r.returncode == 2 and "%s:1:" % p in r.stderr and '"deliver"' in r.stderr, r.stderr
    r = run_surogatd(["-F", "-j", "none", "-a", "127.0.0.1:0", "-b", "127.0.0.1:9",
                      "-n", str(tmp_path / "wd"), "-f", str(p)])
    assert r.returncode == 2 and "%s:1:" % p in r.stderr, r.stderr
    # constant answers that are actions of their hooks still load
    p = script(tmp_path, """
        function recv(req) return "pass" end
        function miss(req)
            return 'fetch'
        end
        function log(req, resp) return "anything" end
        """, "ok.lua")
    r = run_surogatd(["-C", "-f", str(p)])
    assert r.returncode == 0, r.stderr


# -- surogat-lua(7) ---------------------------------------------------------------------


def man_example():
    """The first script of surogat-lua(7)'s EXAMPLE section, as the page prints it."""
    text = (REPO / "man" / "surogat-lua.7").read_text()
    block = text.split("\n.SH EXAMPLE\n", 1)[1].split(".nf\n", 1)[1].split("\n.fi\n", 1)[0]
    for troff, plain in (("\\(dq", '"'), ("\\-", "-"), ("\\&", ""), ("\\\\", "\\")):
        block = block.replace(troff, plain)
    return block + "\n"


def test_man_page_example_runs(origin, surogat, tmp_path):
    src = man_example()
    assert "re.gsub(req.url" in src
    p = tmp_path / "example.lua"
    p.write_text(src)
    sg = surogat(args=["-f", str(p)])
    origin.route("/p", body=b"page", headers=CC60)
    origin.route("/style.css", body=b"css")
    r = sg.get("/p?utm_source=mail&a=1")
    assert r.status == 200 and r.body == b"page", r
    assert origin.last("/p").target == "/p?a=1", origin.last("/p").target
    assert sg.get("/p?a=1").header("Cache-Status").startswith("surogat; hit"), "one object"
    for _ in range(2):
        r = sg.get("/style.css")
        assert r.status == 200 and r.body == b"css", r
    assert origin.hits("/style.css") == 1
