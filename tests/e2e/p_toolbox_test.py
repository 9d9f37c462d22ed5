"""The policy toolbox of surogat-lua(7) through the real daemon: obj.hits
(X-Cache as ported VCL writes it), bereq.uncacheable (a login's
Set-Cookie kept on a pass, stripped from what is cached), req.xid,
surogat.healthy, a signed URL (HMAC, constant-time compare), a synth page
that echoes the URL escaped, cookies trimmed for the backend, a shared
dictionary used by two workers and kept across reloads, and the shipped
vcl/ratelimit.lua."""

import base64
import hashlib
import hmac
import math
import signal
import threading
import time

from conftest import REPO, free_port, wait_until
from cstatus import is_hit
from p_policy_test import script

CC60 = {"Cache-Control": "max-age=60"}


def with_policy(surogat, tmp_path, text, params=None, name="policy.lua"):
    p = script(tmp_path, text, name)
    return surogat(params=params, args=["-f", str(p)]), p


def parallel(n, fn):
    """Run fn(i) on n threads at once; their results in order."""
    out = [None] * n
    errs = []

    def run(i):
        try:
            out[i] = fn(i)
        except Exception as e:  # reported below, with the thread's number
            errs.append((i, e))

    ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
        assert not t.is_alive(), "a client thread is still running after 60s"
    assert not errs, errs
    return out


def keepalive_gets(sg, path, n):
    """n GETs of path on one connection: the responses."""
    out = []
    with sg.conn(timeout=10) as c:
        for _ in range(n):
            c.request("GET", path)
            out.append(c.read_response("GET"))
    return out


# -- obj.hits -----------------------------------------------------------------------


def test_obj_hits_in_hit_and_deliver(origin, surogat, tmp_path):
    origin.route("/a", body=b"a", headers=CC60)
    origin.route("/b", body=b"b", headers=CC60)
    origin.route("/p", body=b"p", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            if req.url == "/p" then return "pass" end
        end
        function hit(req, obj)
            req.ctx.hit_hits = obj.hits
        end
        -- The most common line of VCL there is.
        function deliver(req, resp, obj)
            if obj.hits > 0 then
                resp.http["X-Cache"] = "HIT"
            else
                resp.http["X-Cache"] = "MISS"
            end
            resp.http["X-Hits"] = tostring(obj.hits)
            resp.http["X-Hit-Hits"] = tostring(req.ctx.hit_hits)
        end
        """)
    got = [(r.header("X-Cache"), r.header("X-Hits"), r.header("X-Hit-Hits"))
           for r in (sg.get("/a") for _ in range(4))]
    assert got == [("MISS", "0", "nil"), ("HIT", "1", "1"), ("HIT", "2", "2"),
                   ("HIT", "3", "3")], got
    # per object
    assert [sg.get("/b").header("X-Hits") for _ in range(2)] == ["0", "1"]
    # a pass is never a hit, however often
    assert [sg.get("/p").header("X-Cache") for _ in range(3)] == ["MISS"] * 3
    assert origin.hits("/a") == 1 and origin.hits("/p") == 3


# -- bereq.uncacheable --------------------------------------------------------------


def test_bereq_uncacheable_keeps_a_logins_cookie(origin, surogat, tmp_path):
    """A ported DokuWiki/WordPress VCL strips Set-Cookie from what it caches,
    only when not bereq.uncacheable: a login (a pass) keeps its cookie."""
    origin.route("/login", body=b"welcome", headers={"Set-Cookie": "session=abc; HttpOnly"})
    origin.route("/page", body=b"page", headers={"Set-Cookie": "tracker=1", **CC60})
    origin.route("/private", body=b"mine",
                 headers={"Set-Cookie": "pc=1", "Cache-Control": "private"})
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            if req.method == "POST" then return "pass" end
            return "hash"
        end
        function backend_fetch(bereq)
            bereq.http["X-Uncacheable"] = tostring(bereq.uncacheable)
        end
        function backend_response(bereq, beresp)
            if not bereq.uncacheable then
                beresp.http["Set-Cookie"] = nil
            end
        end
        """)
    r = sg.request("POST", "/login", body=b"u=me&p=pw")
    assert r.status == 200 and r.header("Set-Cookie") == "session=abc; HttpOnly", r
    assert origin.last("/login").header("X-Uncacheable") == "true"
    # a cacheable page: its cookie stripped, and it is cached without it
    r = sg.get("/page")
    assert r.status == 200 and not r.has("Set-Cookie"), r
    assert origin.last("/page").header("X-Uncacheable") == "false"
    r = sg.get("/page")
    assert is_hit(r) and not r.has("Set-Cookie") and r.body == b"page", r
    assert origin.hits("/page") == 1
    # Not storable: the first fetch was a miss (stripped, as Varnish does);
    # the hit-for-miss marker then makes the next ones uncacheable fetches.
    r = sg.get("/private")
    assert not r.has("Set-Cookie") and origin.last("/private").header("X-Uncacheable") == "false"
    r = sg.get("/private")
    assert r.header("Set-Cookie") == "pc=1", r
    assert origin.last("/private").header("X-Uncacheable") == "true"


# -- req.xid, surogat.healthy, surogat.random ----------------------------------------


def test_xid_healthy_random(origin, surogat, tmp_path):
    origin.route("/x", body=b"x")
    dead = free_port()
    sg, _ = with_policy(surogat, tmp_path, """
        backend "dead" { host = "127.0.0.1", port = %d,
                         probe = { url = "/", interval = 0.2, timeout = 0.1 } }
        function recv(req)
            req.ctx.xid = req.xid
            return "pass"
        end
        function deliver(req, resp)
            resp.http["X-Xid"] = tostring(req.xid)
            resp.http["X-Xid-Recv"] = tostring(req.ctx.xid)
            resp.http["X-Healthy"] = tostring(surogat.healthy("default")) .. " " ..
                                     tostring(surogat.healthy("dead"))
            resp.http["X-Random"] = string.format("%%.6f", surogat.random(10, 20))
        end
        """ % dead)
    xids, rnd = set(), set()
    for _ in range(10):
        r = sg.get("/x")
        assert r.status == 200, r
        assert r.header("X-Xid") == r.header("X-Xid-Recv"), r
        assert int(r.header("X-Xid")) > 0
        xids.add(r.header("X-Xid"))
        assert r.header("X-Healthy") == "true false", r
        v = float(r.header("X-Random"))
        assert 10 <= v < 20
        rnd.add(v)
    assert len(xids) == 10 and len(rnd) == 10


# -- digests, encodings ---------------------------------------------------------------


SIGNED = """
    local SECRET = "s3cret"

    -- /signed/PATH?sig=BASE64URL(HMAC-SHA256(secret, path)), or 403.
    function recv(req)
        local path = surogat.url_path(req.url)
        if path:sub(1, 8) ~= "/signed/" then return nil end
        local sig = surogat.query_get(req.url, "sig")
        local want = surogat.hmac("sha256", SECRET, path, "base64url")
        if not sig or not surogat.equal(sig, want) then
            return surogat.synth(403, "Forbidden")
        end
        req.url = path
        req.http["X-Etag-Hint"] = surogat.hash("sha256", path):sub(1, 16)
        return "pass"
    end

    function synth(req, resp)
        if resp.status == 403 then
            resp.http["Content-Type"] = "text/html; charset=utf-8"
            resp.body = "<!DOCTYPE html>\\n<p>No valid signature for " ..
                        surogat.html_escape(req.url) .. "</p>\\n"
        end
    end
"""


def test_signed_url_and_an_escaped_synth_page(origin, surogat, tmp_path):
    origin.route("/signed/report.pdf", body=b"pdf")
    sg, _ = with_policy(surogat, tmp_path, SIGNED)
    sig = base64.urlsafe_b64encode(hmac.new(b"s3cret", b"/signed/report.pdf",
                                            hashlib.sha256).digest()).rstrip(b"=").decode()
    r = sg.get("/signed/report.pdf?sig=" + sig)
    assert r.status == 200 and r.body == b"pdf", r
    seen = origin.last("/signed/report.pdf")
    assert seen.target == "/signed/report.pdf"
    assert seen.header("X-Etag-Hint") == hashlib.sha256(b"/signed/report.pdf").hexdigest()[:16]
    for bad in ("", "?sig=", "?sig=" + sig[:-1] + ("A" if sig[-1] != "A" else "B"),
                "?sig=" + sig + "x"):
        r = sg.get("/signed/report.pdf" + bad)
        assert r.status == 403, (bad, r)
    assert origin.hits("/signed/report.pdf") == 1
    # the URL echoed in the page cannot inject markup
    r = sg.get("/signed/x?<script>alert('x')</script>")
    assert r.status == 403, r
    assert b"<script>" not in r.body, r.body
    assert b"&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in r.body, r.body


# -- cookies -------------------------------------------------------------------------


def test_cookies_trimmed_for_the_backend(origin, surogat, tmp_path):
    origin.route("/", body=b"home", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        -- Analytics cookies mean nothing to the site: gone, and a request
        -- left without cookies is cacheable.
        function recv(req)
            local c = surogat.cookie.parse(req.http.cookie)
            surogat.cookie.remove_re(c, "^(_ga|_gid|_fbp|__utm)")
            req.http.cookie = surogat.cookie.serialise(c)
            if req.http.cookie then return "pass" end
            return "hash"
        end
        """)
    r = sg.get("/", headers={"Cookie": "_ga=GA1.2; sess=s1; __utma=1; lang=\"fr CA\""})
    assert r.status == 200
    assert origin.last("/").header("Cookie") == 'sess=s1; lang="fr CA"'
    sg.get("/", headers={"Cookie": "_ga=GA1.2; _gid=x"})
    assert not origin.last("/").has("Cookie")
    r = sg.get("/", headers={"Cookie": "_fbp=fb"})
    assert is_hit(r), r
    assert origin.hits("/") == 2


# -- shared dictionaries ----------------------------------------------------------------


COUNTER = """
    shared "counts" {{ size = "{size}" }}
    local counts = surogat.shared("counts")
    local STATE = tostring(surogat.random())  -- one per worker state

    function recv(req)
        if req.url == "/flag/on" then
            counts:set("maintenance", true)
            return surogat.synth(200, "on")
        end
        if req.url == "/flag/off" then
            counts:delete("maintenance")
            return surogat.synth(200, "off")
        end
        if counts:get("maintenance") then
            return surogat.synth(503, "Maintenance")
        end
        if req.url == "/meet" then
            -- Held until a second request is in flight (2 s at most): a
            -- worker serves one request at a time, so the two that met
            -- ran on two workers at once, whatever the scheduler did with
            -- the threads; then counted like the others.
            local t = surogat.now()
            counts:incr("inflight", 1, 0)
            while not counts:get("met") and surogat.now() - t < 2 do
                if counts:get("inflight") >= 2 then counts:set("met", true) end
            end
            counts:incr("inflight", -1)
        end
        req.ctx.n = counts:incr("requests", 1, 0)
        return surogat.synth(200, "counted")
    end

    function synth(req, resp)
        resp.http["X-N"] = tostring(req.ctx.n)
        resp.http["X-State"] = STATE
        resp.http["X-Version"] = "{version}"
    end
"""


def test_shared_dictionary_across_workers_and_reloads(origin, surogat, tmp_path):
    # /meet's wait may be longer than a hook's usual bounds
    sg, p = with_policy(surogat, tmp_path, COUNTER.format(size="1m", version="1"),
                        params={"thread_pools": "2", "policy_max_time": "5s",
                                "policy_max_instructions": "1000000000"})
    # each client's first request waits for another one: two workers at once
    rs = [r for rr in parallel(4, lambda i: keepalive_gets(sg, "/meet", 1) +
                               keepalive_gets(sg, "/c", 24)) for r in rr]
    assert all(r.status == 200 for r in rs), rs
    # every increment counted once, whichever worker made it
    assert sorted(int(r.header("X-N")) for r in rs) == list(range(1, 101))
    assert len({r.header("X-State") for r in rs}) >= 2, "the workers share one Lua state"
    # a feature flag set through one connection holds on all of them
    assert sg.get("/flag/on").status == 200
    assert all(r.status == 503 for rr in parallel(4, lambda i: keepalive_gets(sg, "/c", 3))
               for r in rr)
    assert sg.get("/flag/off").status == 200
    assert sg.get("/c").header("X-N") == "101"

    # SIGHUP with the declaration unchanged: the values stay
    p.write_text(COUNTER.format(size="1m", version="2"))
    sg.signal(signal.SIGHUP)
    wait_until(lambda: sg.stat("policy_reload") == 1, 10, "reload")
    wait_until(lambda: sg.get("/c").header("X-Version") == "2", 10, "the new script")
    n = int(sg.get("/c").header("X-N"))
    assert n > 102, n
    # policy.load + policy.use of another file declaring it alike: still the same
    p3 = script(tmp_path, COUNTER.format(size="1m", version="3"), "v3.lua")
    assert sg.ctl("policy.load", "v3", str(p3)).returncode == 0
    assert sg.ctl("policy.use", "v3").returncode == 0
    r = sg.get("/c")
    assert r.header("X-Version") == "3" and int(r.header("X-N")) == n + 1, r
    # another size: a new dictionary, empty
    p4 = script(tmp_path, COUNTER.format(size="2m", version="4"), "v4.lua")
    assert sg.ctl("policy.load", "v4", str(p4)).returncode == 0
    assert sg.ctl("policy.use", "v4").returncode == 0
    r = sg.get("/c")
    assert r.header("X-Version") == "4" and r.header("X-N") == "1", r
    # and back: the first one is still there, with its programs
    assert sg.ctl("policy.use", "v3").returncode == 0
    assert int(sg.get("/c").header("X-N")) == n + 2


def test_shared_declaration_errors_name_the_line(origin, surogat, tmp_path):
    from conftest import run_surogatd
    p = script(tmp_path, """
        backend "app" { host = "127.0.0.1", port = 9 }
        shared "rl" { size = "1k" }
        """)
    r = run_surogatd(["-C", "-f", str(p)])
    assert r.returncode == 2 and "policy.lua:3:" in r.stderr and "64k" in r.stderr, r.stderr
    p.write_text('local d = surogat.shared("nope")\n')
    r = run_surogatd(["-C", "-f", str(p)])
    assert r.returncode == 2 and "policy.lua:1:" in r.stderr and '"nope"' in r.stderr, r.stderr


# -- vcl/ratelimit.lua ------------------------------------------------------------------


def test_ratelimit_example(origin, surogat, tmp_path):
    """The shipped script as a module, each worker stamping its answers: 10
    a second with bursts of 5, shared by the workers of two pools.  Each
    request let through holds its worker on the backend for a moment, so
    that the others are served by other workers: a worker taking ready
    connections would otherwise serve all four clients in a row."""
    origin.route("/r", body=b"r", delay=0.2, headers={"Cache-Control": "no-store"})
    sg, _ = with_policy(surogat, tmp_path, """
        require("ratelimit")
        local STATE = tostring(surogat.random())
        local limited = synth
        function synth(req, resp)
            resp.http["X-State"] = STATE
            return limited(req, resp)
        end
        function deliver(req, resp)
            resp.http["X-State"] = STATE
        end
        """, params={"thread_pools": "2", "policy_modules": "ratelimit",
                     "policy_module_path": str(REPO / "vcl")})
    t0 = time.monotonic()
    rs = [r for rr in parallel(4, lambda i: keepalive_gets(sg, "/r?q='x'", 5)) for r in rr]
    elapsed = time.monotonic() - t0
    ok = [r for r in rs if r.status == 200]
    limited = [r for r in rs if r.status == 429]
    assert len(ok) + len(limited) == 20, [r.status for r in rs]
    # the burst, and what the rate adds while the requests were made
    assert 5 <= len(ok) <= 5 + math.ceil(elapsed * 10), (len(ok), elapsed)
    assert len({r.header("X-State") for r in rs}) >= 2, "one worker served everything"
    for r in limited:
        assert int(r.header("Retry-After")) >= 1, r
        assert r.header("Cache-Control") == "no-store"
        assert b"/r?q=&#39;x&#39;" in r.body, r.body
    assert sg.stat("ratelimit_denied") == len(limited)
    assert origin.hits("/r") == len(ok)
    # a second later, the client is let in again
    time.sleep(1.1)
    assert sg.get("/r").status == 200
