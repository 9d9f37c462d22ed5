"""The request trace (`surogatctl log -g`): per transaction the client
request, each policy hook and its answer, the cache key, the lookup (hit,
miss, hit-for-miss, grace, a busy wait and how long), the backend request
and response, the cacheability decision with its reason and the TTL's
source, the response sent and the timings; background fetches grouped
under the request that started them; the query language (-q), in trace
and line mode; Cache-Status's detail= for passes and responses not
stored; and the real byte count of synthetic responses."""

import json
import re
import subprocess
import threading
import time
from email.utils import formatdate

from conftest import SUROGATCTL, free_port, wait_until
from l_log_test import LogTail
from p_hooks_test import with_policy

CC60 = {"Cache-Control": "max-age=60"}


class Traces(LogTail):
    """`surogatctl log -g request -j [ARGS]`: each line a group, parsed."""

    def __init__(self, sg, *args, grouping="request"):
        super().__init__(sg, "-g", grouping, "-j", *args)

    def groups(self, n, timeout=10.0, pred=lambda g: True):
        lines = self.take(n, timeout=timeout, pred=lambda ln: pred(json.loads(ln)))
        return [g for g in (json.loads(ln) for ln in lines) if pred(g)]

    def group(self, url, nth=0, timeout=10.0):
        """The nth group whose request is for url."""
        gs = self.groups(nth + 1, timeout, lambda g: first(g["tx"], "ReqURL") == url)
        return gs[nth]


def recs(tx, tag):
    return [v for t, v in tx["records"] if t == tag]


def first(tx, tag):
    r = recs(tx, tag)
    return r[0] if r else None


def timestamps(tx):
    """{event: (absolute, since start, since previous)}"""
    out = {}
    for v in recs(tx, "Timestamp"):
        ev, rest = v.split(": ", 1)
        out[ev] = tuple(float(x) for x in rest.split())
    return out


def child(g):
    kids = g["tx"]["children"]
    assert len(kids) == 1, g
    return kids[0]


def busy_waiter(tr, url, n=2):
    """Of the first n groups for url, the one request that waited for another's fetch."""
    gs = tr.groups(n, pred=lambda g: first(g["tx"], "ReqURL") == url)
    w = [g["tx"] for g in gs if (first(g["tx"], "Lookup") or "").startswith("busy: ")]
    assert len(w) == 1, gs
    return w[0]


def in_order(tx):
    """Its records as written: Begin first, End last, every timestamp after the one
    before, wherever each part of it was written (a parked request resumes on any
    worker)."""
    assert tx["records"][0][0] == "Begin" and tx["records"][-1] == ["End", ""], tx
    ts = [float(v.split()[1]) for v in recs(tx, "Timestamp")]
    assert ts == sorted(ts) and recs(tx, "Timestamp")[0].startswith("Start: "), tx
    return True


def assert_begins(tx, kind, parent, why):
    assert first(tx, "Begin") == "%s %d %s" % (kind, parent, why), tx
    assert tx["records"][-1] == ["End", ""], tx


# -- the trace of a request ------------------------------------------------------------

def test_miss_and_hit_traced_in_full(origin, surogat):
    origin.route("/c", body=b"cached!", headers={"Cache-Control": "max-age=60",
                                                  "X-Origin": "yes"}, delay=0.05)
    sg = surogat()
    tr = Traces(sg)
    text = LogTail(sg, "-g", "request")
    try:
        r = sg.get("/c", headers={"X-Probe": "1"})
        assert r.header("Cache-Status") == "surogat; fwd=uri-miss; stored"
        assert sg.get("/c").header("Cache-Status").startswith("surogat; hit")
        miss = tr.group("/c")
        hit = tr.group("/c", nth=1)
        req = miss["tx"]
        assert miss["complete"] is True
        assert_begins(req, "req", 0, "rxreq")
        assert first(req, "ReqStart").startswith("127.0.0.1 ")
        assert first(req, "ReqMethod") == "GET" and first(req, "ReqProtocol") == "HTTP/1.1"
        assert "Host: surogat.test" in recs(req, "ReqHeader")
        assert "X-Probe: 1" in recs(req, "ReqHeader")
        assert recs(req, "Builtin") == ["recv hash"]
        assert recs(req, "Hash") == ["surogat.test | /c"]
        assert recs(req, "Lookup") == ["miss (uri-miss)"]
        assert first(req, "RespStatus") == "200" and first(req, "RespReason") == "OK"
        assert "Cache-Status: surogat; fwd=uri-miss; stored" in recs(req, "RespHeader")
        assert "X-Origin: yes" in recs(req, "RespHeader")
        assert recs(req, "Cache") == ["MISS"] and recs(req, "Length") == ["7"]
        # The backend transaction, linked both ways.
        be = child(miss)
        assert recs(req, "Link") == ["bereq %d fetch" % be["id"]]
        assert_begins(be, "bereq", req["id"], "fetch")
        assert first(be, "BereqMethod") == "GET" and first(be, "BereqURL") == "/c"
        assert "X-Forwarded-For: 127.0.0.1" in recs(be, "BereqHeader")
        assert "X-Probe: 1" in recs(be, "BereqHeader")
        assert first(be, "Backend").startswith("default %s " % origin.addr), be
        assert first(be, "BerespStatus") == "200" and first(be, "BerespReason") == "OK"
        assert "X-Origin: yes" in recs(be, "BerespHeader")
        st = recs(be, "Store")
        assert len(st) == 1 and re.fullmatch(r"storable: ttl (5\d\.\d{3}) grace 0\.000 keep 300\.000 "
                                             r"from max-age; age (0\.\d{3})", st[0]), st
        # The ttl is what is left of max-age=60 on arrival, after the origin's 50 ms.
        ttl, age = (float(x) for x in re.findall(r"\d+\.\d+", st[0])[0::3])
        assert 59 < ttl <= 60 and abs(ttl + age - 60) < 0.002, st
        # Timings: every event, in order, the origin's 50 ms where it belongs.
        ts, bts = timestamps(req), timestamps(be)
        assert list(ts) == ["Start", "Lookup", "Resp", "End"], ts
        assert list(bts) == ["Start", "Bereq", "Beresp", "BerespBody", "End"], bts
        assert 0 <= ts["Lookup"][1] <= ts["Resp"][1] <= ts["End"][1] < 5
        assert bts["Beresp"][2] >= 0.04, "the origin's delay is between Bereq and Beresp"
        assert ts["Start"][0] <= bts["Start"][0] <= bts["End"][0] <= ts["End"][0]
        for event, (_, since_start, since_prev) in list(ts.items()) + list(bts.items()):
            assert since_start >= 0 and since_prev >= 0, (event, ts, bts)
        # The hit: no backend transaction, the object's age and ttl.
        h = hit["tx"]
        assert h["children"] == [] and recs(h, "Link") == []
        lk = first(h, "Lookup")
        assert lk.startswith("hit: age ") and " ttl 5" in lk and lk.endswith(" hits 1"), lk
        assert recs(h, "Cache") == ["HIT"]
        # Text: varnishlog's layout, the backend transaction indented under its request.
        out = "\n".join(text.take(2, pred=lambda ln: ln.startswith("*   << Request  >> ")))
        text.take(1, pred=lambda ln: ln.startswith("**  << BeReq    >> "))
        out = "\n".join(text.settle())
        assert "-   ReqURL         /c\n" in out and "--  BerespStatus   200\n" in out
        assert "--  Store          storable: ttl 59." in out
    finally:
        tr.stop()
        text.stop()


def test_hooks_key_and_policy_ttl(origin, surogat, tmp_path):
    origin.route("/k", body=b"k", headers=CC60)
    origin.route("/p", body=b"p", headers=CC60)
    origin.route("/short", body=b"s", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            if req.url == "/p" then return "pass" end
        end
        function hash(req)
            surogat.hash_data(req.http.x_lang or "none")
        end
        function backend_response(bereq, beresp)
            if bereq.url == "/short" then beresp.ttl = 5; beresp.grace = 7 end
        end
        function deliver(req, resp)
            resp.http.x_d = "1"
        end
        """)
    tr = Traces(sg)
    try:
        sg.get("/k", headers={"X-Lang": "en"})
        r = sg.get("/p")
        assert r.header("Cache-Status") == "surogat; fwd=bypass; detail=policy", r
        sg.get("/short")
        k, p, s = tr.group("/k")["tx"], tr.group("/p")["tx"], tr.group("/short")["tx"]
        # recv: the script returned nil, builtin.lua answered; the key has the script's piece.
        assert recs(k, "Hook")[:2] == ["recv hash builtin", "hash lookup default"], k
        assert recs(k, "Hash") == ["surogat.test | /k | en"]
        assert "deliver deliver default" in recs(k, "Hook")
        assert "X-D: 1" in recs(k, "RespHeader") or "x-d: 1" in [h.lower() for h in
                                                                  recs(k, "RespHeader")]
        kb = k["children"][0]
        assert recs(kb, "Hook") == ["backend_response deliver builtin"], kb
        # A pass: the script said so, no key, a pass backend transaction.
        assert recs(p, "Hook")[0] == "recv pass script"
        assert recs(p, "Hash") == [] and recs(p, "Lookup") == []
        assert first(p, "Link").endswith(" pass") and recs(p, "Cache") == ["PASS"]
        # The policy's ttl and grace, and where they came from.
        sb = s["children"][0]
        assert recs(sb, "Store")[0].startswith("storable: ttl 5.000 grace 7.000 keep 300.000 "
                                               "from policy; age "), sb
    finally:
        tr.stop()


# -- lookups ---------------------------------------------------------------------------

def test_hit_for_miss_busy_wait_and_grace(origin, surogat):
    origin.route("/sc", body=b"x", headers={"Set-Cookie": "a=b", "Cache-Control": "max-age=60"})
    held = origin.route("/slow", body=b"slow", headers=CC60, hold_head=True)
    streaming = held
    origin.route("/g", body=b"v1", headers={"Cache-Control": "max-age=1, stale-while-revalidate=30"})
    sg = surogat()
    tr = Traces(sg)
    try:
        # hit-for-miss
        sg.get("/sc")
        r = sg.get("/sc")
        assert r.header("Cache-Status") == "surogat; fwd=uri-miss; detail=hit-for-miss", r
        g = tr.group("/sc", nth=1)
        assert recs(g["tx"], "Lookup") == ["hit-for-miss"]
        assert_begins(child(g), "bereq", g["tx"]["id"], "pass")
        # A busy wait: the second request parks on the waiting list of the first one's
        # fetch (its head held), and looks up again when the fetch streams or ends.
        res = []
        t1 = threading.Thread(target=lambda: res.append(sg.get("/slow")))
        t1.start()
        assert held.held.wait(10)
        t2 = threading.Thread(target=lambda: res.append(sg.get("/slow")))
        t2.start()
        wait_until(lambda: sg.stat("coalesce_parked") >= 1, 10, "the second request to park")
        time.sleep(0.5)
        held.release.set()
        t1.join(10)
        t2.join(10)
        assert [x.status for x in res] == [200, 200] and origin.hits("/slow") == 1
        waiter = busy_waiter(tr, "/slow")
        lks = recs(waiter, "Lookup")
        assert lks[0] == "busy: waits for another request's fetch", lks
        # Woken by the fetch: streamed from it, or a hit, after the whole wait.
        m = re.fullmatch(r"(hit|busy \(streams from the fetch in progress\)): age \S+ ttl \S+ "
                         r"grace \S+ hits \d+, after a busy wait of ([\d.]+) s", lks[-1])
        assert m and 0.45 <= float(m.group(2)) < 5, lks
        assert waiter["children"] == [] and timestamps(waiter)["Lookup"][2] >= 0.45
        # Busy: a request joins a fetch whose body is still coming, and streams it.
        streaming = origin.route("/stream", body=b"0123456789", headers=CC60, hold_after=2)
        t1 = threading.Thread(target=lambda: res.append(sg.get("/stream")))
        t1.start()
        assert streaming.held.wait(10)
        t2 = threading.Thread(target=lambda: res.append(sg.get("/stream")))
        t2.start()
        wait_until(lambda: sg.stat("cache_streamed") >= 1, 10, "the second request to stream")
        streaming.release.set()
        t1.join(10)
        t2.join(10)
        assert [x.body for x in res[2:]] == [b"0123456789"] * 2
        joined = tr.group("/stream", nth=1)["tx"]
        lk = first(joined, "Lookup")
        assert lk.startswith("busy (streams from the fetch in progress): age "), lk
        assert "busy wait" not in lk and recs(joined, "Cache") == ["COLLAPSED"]
        assert joined["children"] == []
        # Grace: the stale copy now, a background fetch grouped under this request.
        sg.get("/g")
        time.sleep(1.3)
        origin.route("/g", body=b"v2", headers={"Cache-Control": "max-age=60"}, delay=0.2)
        assert sg.get("/g").body == b"v1"
        g = tr.group("/g", nth=1)
        req = g["tx"]
        assert first(req, "Lookup").startswith("grace (stale, refreshed in the background)")
        assert recs(req, "Cache") == ["GRACE"]
        bg = child(g)
        assert recs(req, "Link") == ["bereq %d bgfetch" % bg["id"]]
        assert_begins(bg, "bereq", req["id"], "bgfetch")
        assert first(bg, "BerespStatus") == "200"
        assert re.fullmatch(r"storable: ttl 59\.\d+ grace 0\.000 keep 300\.000 from max-age; age 0\.\d+",
                            recs(bg, "Store")[0]), bg
        # The request ended before its background fetch; it waited for it all the same.
        assert timestamps(bg)["End"][0] > timestamps(req)["End"][0]
    finally:
        held.release.set()
        streaming.release.set()
        tr.stop()


def test_parked_requests_traced_in_order(origin, surogat):
    """Requests parked on another's fetch hold no worker while they wait and resume on
    any worker: each trace still reads in order, with the wait's length."""
    held = origin.route("/crowd", body=b"crowd", headers=CC60, hold_head=True)
    sg = surogat()
    tr = Traces(sg)
    res, lock = [], threading.Lock()

    def get():
        r = sg.get("/crowd")
        with lock:
            res.append(r)

    threads = [threading.Thread(target=get) for _ in range(20)]
    try:
        threads[0].start()
        assert held.held.wait(10)
        for t in threads[1:]:
            t.start()
        wait_until(lambda: sg.stat("coalesce_parked") >= 19, 10, "19 requests to park")
        time.sleep(0.3)
        held.release.set()
        for t in threads:
            t.join(15)
        assert len(res) == 20 and all(r.status == 200 and r.body == b"crowd" for r in res)
        assert origin.hits("/crowd") == 1
        gs = tr.groups(20, pred=lambda g: first(g["tx"], "ReqURL") == "/crowd")
        waiters = [g["tx"] for g in gs if first(g["tx"], "Lookup").startswith("busy: ")]
        assert len(waiters) == 19, gs
        for w in waiters:
            assert in_order(w) and w["children"] == []
            lks = recs(w, "Lookup")
            assert set(lks[:-1]) == {"busy: waits for another request's fetch"}, lks
            m = re.search(r"^(hit|busy \(streams from the fetch in progress\)): .*, after a "
                          r"busy wait of ([\d.]+) s$", lks[-1])
            assert m and 0.25 <= float(m.group(2)) < 10, lks
            assert recs(w, "Cache")[0] in ("HIT", "COLLAPSED"), w
    finally:
        held.release.set()
        tr.stop()


def test_waits_given_up_say_why(origin, surogat):
    """A request that waited coalesce_timeout for another's fetch, and one that found
    coalesce_max_waiters waiting, are passed: the trace and Cache-Status say which."""
    held = origin.route("/ct", body=b"ct", headers=CC60, hold_head=True)
    sg = surogat(params={"coalesce_timeout": "0.5s", "coalesce_max_waiters": "1"})
    tr = Traces(sg)
    res, lock = {}, threading.Lock()

    def get(name):
        r = sg.get("/ct", headers={"X-Who": name})
        with lock:
            res[name] = r

    threads = {n: threading.Thread(target=get, args=(n,)) for n in ("first", "timeout", "full")}
    try:
        threads["first"].start()
        assert held.held.wait(10)
        threads["timeout"].start()
        wait_until(lambda: sg.stat("coalesce_parked") == 1, 10, "a request to park")
        threads["full"].start()
        wait_until(lambda: sg.stat("coalesce_overflow") == 1, 10, "the list to be full")
        wait_until(lambda: sg.stat("coalesce_timeout") == 1, 10, "the wait to time out")
        wait_until(lambda: origin.hits("/ct") == 3, 10, "both passes at the origin")
        held.release.set()
        for t in threads.values():
            t.join(15)
        assert res["first"].header("Cache-Status") == "surogat; fwd=uri-miss; stored"
        assert res["timeout"].header("Cache-Status") == "surogat; fwd=miss; detail=coalesce-timeout"
        assert res["full"].header("Cache-Status") == "surogat; fwd=miss; detail=coalesce-full"
        gs = {g["tx"]["id"]: g for g in tr.groups(3, pred=lambda g: first(g["tx"], "ReqURL") ==
                                                   "/ct")}
        by = {[h for h in recs(g["tx"], "ReqHeader") if h.startswith("X-Who: ")][0][7:]: g
              for g in gs.values()}
        to, full = by["timeout"], by["full"]
        lks = recs(to["tx"], "Lookup")
        assert lks[0] == "busy: waits for another request's fetch", lks
        m = re.fullmatch(r"coalesce-timeout, after a busy wait of ([\d.]+) s", lks[-1])
        assert m and 0.45 <= float(m.group(1)) < 3, lks
        assert in_order(to["tx"]) and recs(to["tx"], "Cache") == ["PASS"]
        assert_begins(child(to), "bereq", to["tx"]["id"], "pass")
        assert recs(full["tx"], "Lookup") == ["coalesce-full"]
        assert_begins(child(full), "bereq", full["tx"]["id"], "pass")
        assert "Cache-Status: surogat; fwd=miss; detail=coalesce-full" in recs(full["tx"],
                                                                                "RespHeader")
    finally:
        held.release.set()
        tr.stop()


def test_esi_includes_under_their_page(origin, surogat):
    """An ESI page's includes are requests of their own, traced under the page that
    included them, each with its own lookup and backend transaction."""
    esi = {"Surrogate-Control": 'content="ESI/1.0"', "Cache-Control": "max-age=60"}
    origin.route("/page", body=b'<p><esi:include src="/frag"/>|<esi:include src="/hit"/></p>',
                 headers=esi)
    origin.route("/frag", body=b"F", headers={"Cache-Control": "no-store"})
    origin.route("/hit", body=b"H", headers=CC60)
    sg = surogat()
    assert sg.get("/hit").body == b"H"
    tr = Traces(sg)
    try:
        assert sg.get("/page").body == b"<p>F|H</p>"
        g = tr.group("/page")
        page = g["tx"]
        assert in_order(page) and recs(page, "Cache") == ["MISS"]
        kids = {first(k, "ReqURL") or first(k, "BereqURL"): k for k in page["children"]}
        assert sorted(recs(page, "Link")) == sorted(
            "%s %d %s" % ("req" if u in ("/frag", "/hit") else "bereq", k["id"],
                          "esi" if u in ("/frag", "/hit") else "fetch")
            for u, k in kids.items()), page
        assert set(kids) == {"/page", "/frag", "/hit"}, kids
        frag, hit = kids["/frag"], kids["/hit"]
        for inc in (frag, hit):
            assert inc["kind"] == "req" and in_order(inc)
            assert_begins(inc, "req", page["id"], "esi")
            assert recs(inc, "Hash") == ["surogat.test | %s" % first(inc, "ReqURL")], inc
        assert first(hit, "Lookup").startswith("hit: ") and recs(hit, "Cache") == ["HIT"]
        assert hit["children"] == []
        assert recs(frag, "Lookup") == ["miss (uri-miss)"] and recs(frag, "Cache") == ["MISS"]
        fb = child({"tx": frag})
        assert_begins(fb, "bereq", frag["id"], "fetch")
        assert first(fb, "BereqURL") == "/frag"
        assert recs(fb, "Store")[0].startswith("uncacheable: no-store ("), fb
        # Text: the includes under the page, their fetch one level further in.
        text = LogTail(sg, "-d", "-g", "request")
        try:
            out = "\n".join(text.take(1, pred=lambda ln: ln.startswith("*   << Request  >> ")))
            out = "\n".join(text.settle())
            assert "**  << Request  >> %d" % frag["id"] in out, out
            assert "*** << BeReq    >> %d" % fb["id"] in out, out
        finally:
            text.stop()
    finally:
        tr.stop()


# -- why (not) cached ------------------------------------------------------------------

REASONS = [
    # url, route kwargs, request headers, token in Store and Cache-Status
    ("/sc", dict(headers={"Set-Cookie": "a=b", "Cache-Control": "max-age=60"}), {},
     "set-cookie"),
    ("/ns", dict(headers={"Cache-Control": "no-store"}), {}, "no-store"),
    ("/pr", dict(headers={"Cache-Control": "private, max-age=60"}), {}, "private"),
    ("/nf", dict(headers={}), {}, "no-freshness"),
    ("/vs", dict(headers={"Vary": "*", "Cache-Control": "max-age=60"}), {}, "vary-star"),
    ("/big", dict(headers=CC60, body=b"b" * 5000), {}, "too-big"),
    ("/st", dict(status=302, headers={"Location": "/x"}), {}, "uncacheable-status"),
    ("/nc", dict(headers={"Cache-Control": "no-cache, max-age=60"}), {}, "no-cache"),
    ("/soa", dict(headers={"Cache-Control": "max-age=10", "Age": "20"}), {}, "stale-on-arrival"),
    ("/rns", dict(headers=CC60), {"Cache-Control": "no-store"}, "request-no-store"),
    ("/pc", dict(status=206, headers={"Content-Range": "bytes 0-1/10", "Cache-Control":
                                      "max-age=60"}, body=b"ab"), {}, "status"),
]


def test_each_reason_not_to_store(origin, surogat):
    for url, kw, _, _ in REASONS:
        origin.route(url, **kw)
    sg = surogat(params={"max_object_size": "1k"})
    tr = Traces(sg)
    try:
        for url, _, hdrs, token in REASONS:
            r = sg.get(url, headers=hdrs)
            assert r.header("Cache-Status").endswith("; detail=%s" % token), (url, r)
            assert r.header("Cache-Status").startswith("surogat; fwd=uri-miss; "), (url, r)
            be = child(tr.group(url))
            store = recs(be, "Store")
            assert len(store) == 1 and store[0].startswith("uncacheable: %s (" % token), (url, be)
        # The words say why.
        assert "the response sets a cookie" in recs(child(tr.group("/sc")), "Store")[0]
        nf = recs(child(tr.group("/nf")), "Store")[0]
        assert "ttl 0: no freshness information" in nf and nf.endswith("hit-for-miss 120.000")
        assert "Vary: *" in recs(child(tr.group("/vs")), "Store")[0]
        assert "max_object_size" in recs(child(tr.group("/big")), "Store")[0]
        # Reasons of this request alone leave no hit-for-miss marker behind.
        assert "hit-for-miss" not in recs(child(tr.group("/rns")), "Store")[0]
        assert sg.get("/rns").header("Cache-Status") == "surogat; fwd=uri-miss; stored"
    finally:
        tr.stop()


def test_policy_reasons(origin, surogat, tmp_path):
    origin.route("/pol", body=b"x", headers=CC60)
    origin.route("/auth", body=b"x", headers=CC60)
    origin.route("/post", body=b"x", headers=CC60)
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            return "hash"
        end
        function backend_response(bereq, beresp)
            if bereq.url == "/pol" then beresp.uncacheable = true end
        end
        """)
    tr = Traces(sg)
    try:
        for url, method, hdrs, token in [("/pol", "GET", {}, "policy"),
                                         ("/auth", "GET", {"Authorization": "Basic eDp5"},
                                          "authorization"),
                                         ("/post", "POST", {}, "method")]:
            r = sg.request(method, url, headers=hdrs, body=b"q" if method == "POST" else None)
            assert r.header("Cache-Status") == "surogat; fwd=uri-miss; detail=%s" % token, r
            st = recs(child(tr.group(url)), "Store")
            assert len(st) == 1 and st[0].startswith("uncacheable: %s (" % token), st
    finally:
        tr.stop()


def test_ttl_sources(origin, surogat):
    now = time.time()
    date = formatdate(now, usegmt=True)
    origin.route("/ma", headers={"Cache-Control": "max-age=60, stale-while-revalidate=30"})
    origin.route("/sm", headers={"Cache-Control": "s-maxage=90, max-age=10"})
    origin.route("/ex", headers={"Date": date, "Expires": formatdate(now + 120, usegmt=True)})
    origin.route("/he", headers={"Date": date, "Last-Modified": formatdate(now - 86400,
                                                                            usegmt=True)})
    origin.route("/df", headers={"ETag": '"e"'})
    sg = surogat(params={"default_ttl": "42s", "default_keep": "10s"})
    tr = Traces(sg)
    try:
        # ttl (what is left on arrival: 0.1 s of tolerance for the age), grace, keep, source
        want = {"/ma": (60, 30, 10, "max-age"), "/sm": (90, 0, 10, "s-maxage"),
                "/ex": (120, 0, 10, "expires"), "/he": (8640, 0, 10, "heuristic"),
                "/df": (42, 0, 10, "default")}
        for url, (ttl, grace, keep, src) in want.items():
            sg.get(url)
            st = recs(child(tr.group(url)), "Store")
            m = re.fullmatch(r"storable: ttl ([\d.]+) grace ([\d.]+) keep ([\d.]+) from (\S+); "
                             r"age ([\d.]+)", st[0]) if len(st) == 1 else None
            assert m, (url, st)
            # Date has whole seconds: up to one more or less (and a tenth of the heuristic's)
            assert ttl - 2 < float(m.group(1)) <= ttl + 1 and float(m.group(2)) == grace, (url, st)
            assert float(m.group(3)) == keep and m.group(4) == src, (url, st)
    finally:
        tr.stop()


# -- Cache-Status detail for passes ---------------------------------------------------------

def test_cache_status_says_why_it_passed(origin, surogat):
    origin.route("/x", body=b"x", headers=CC60)
    sg = surogat()
    tr = Traces(sg)
    try:
        cases = [("POST", {}, "surogat; fwd=method", "recv pass: the method is not GET or HEAD"),
                 ("GET", {"Cookie": "a=b"}, "surogat; fwd=bypass; detail=cookie",
                  "recv pass: the request has a Cookie"),
                 ("GET", {"Authorization": "Basic eDp5"},
                  "surogat; fwd=bypass; detail=authorization",
                  "recv pass: the request has Authorization")]
        for i, (method, hdrs, cs, builtin) in enumerate(cases):
            r = sg.request(method, "/x", headers=hdrs, body=b"a" if method == "POST" else None)
            assert r.header("Cache-Status") == cs, r
            g = tr.group("/x", nth=i)
            assert recs(g["tx"], "Builtin") == [builtin]
            assert "Cache-Status: " + cs in recs(g["tx"], "RespHeader")
    finally:
        tr.stop()


# -- the query language ----------------------------------------------------------------------

def test_query_selects_requests(origin, surogat):
    origin.route("/news/a", status=500, body=b"e")
    origin.route("/news/b", body=b"b", headers=CC60)
    origin.route("/other", status=500, body=b"e")
    origin.route("/slowone", body=b"s", delay=0.3)
    sg = surogat()
    q1 = Traces(sg, "-q", 'ReqURL ~ "^/news" && RespStatus >= 500')
    q2 = Traces(sg, "-q", 'Cache == "hit" || (BerespStatus == 500 && !ReqHeader:X-Skip)')
    q3 = Traces(sg, "-q", "Duration > 0.2 && TTL <= 0 || TTL > 50 && Backend == \"default\"")
    lines = LogTail(sg, "-j", "-q", 'RespStatus >= 500 && Client == "127.0.0.1"')
    try:
        for u, h in [("/news/a", {}), ("/news/b", {}), ("/news/b", {}), ("/other", {}),
                     ("/other", {"X-Skip": "1"}), ("/slowone", {})]:
            sg.get(u, headers=h)
        sg.get("/end")  # a 200 none of the queries selects
        a = q1.groups(1)
        assert [first(g["tx"], "ReqURL") for g in a] == ["/news/a"]
        b = q2.groups(3)
        assert sorted((first(g["tx"], "ReqURL"), first(g["tx"], "Cache")) for g in b) == [
            ("/news/a", "MISS"), ("/news/b", "HIT"), ("/other", "MISS")], b
        c = q3.groups(2)
        assert sorted(first(g["tx"], "ReqURL") for g in c) == ["/news/b", "/slowone"], c
        ls = [json.loads(x) for x in lines.take(3)]
        assert sorted(x["url"] for x in ls) == ["/news/a", "/other", "/other"], ls
        for t in (q1, q2, q3, lines):
            t.settle(0.5)
        assert len(q1.got) == 1 and len(q2.got) == 3 and len(q3.got) == 2 and len(lines.got) == 3
    finally:
        for t in (q1, q2, q3, lines):
            t.stop()


def test_bad_query_refused_with_its_place(origin, surogat):
    sg = surogat()
    base = [SUROGATCTL, "-T", "127.0.0.1:%d" % sg.admin_port, "log"]
    p = subprocess.run(base + ["-g", "request", "-q", 'ReqURL ~~ "x"'], capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 1 and p.stdout == ""
    assert '-q: at 9: expected a "string" or a number' in p.stderr, p.stderr
    assert '  ReqURL ~~ "x"\n          ^' in p.stderr, p.stderr
    p = subprocess.run(base + ["-q", "(Cache == \"HIT\""], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 1 and "a ( without its )" in p.stderr
    # A log line has no TTL nor most headers: said so, pointing at -g.
    p = subprocess.run(base + ["-q", 'ReqURL ~ "a" && TTL > 1'], capture_output=True, text=True,
                       timeout=10)
    assert p.returncode == 1 and "at 17: a log line has no such field" in p.stderr, p.stderr
    assert "-g request" in p.stderr
    p = subprocess.run(base + ["-g", "session"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 1 and "-g session: expected request" in p.stderr
    assert sg.get("/").status == 200


def test_history_and_one_transaction_at_a_time(origin, surogat):
    origin.route("/h", body=b"h", headers=CC60)
    sg = surogat()
    live = Traces(sg)  # workers trace only while a trace reader is attached
    try:
        sg.get("/h")
        live.group("/h")
        tx = Traces(sg, "-d", grouping="tx")
        try:
            got = tx.groups(2)
            kinds = sorted(g["tx"]["kind"] for g in got)
            assert kinds == ["bereq", "req"], got
            assert all(g["tx"]["children"] == [] for g in got)
        finally:
            tx.stop()
        text = LogTail(sg, "-d", "-g", "tx")
        try:
            out = text.take(2, pred=lambda ln: ln.startswith("*   << "))
            assert any(ln.startswith("*   << BeReq    >> ") for ln in out), out
        finally:
            text.stop()
    finally:
        live.stop()


# -- synthetic responses: their real byte count ------------------------------------------

def test_synthetic_responses_count_their_bytes(origin, surogat, tmp_path):
    sg, _ = with_policy(surogat, tmp_path, """
        function recv(req)
            if req.url == "/teapot" then return surogat.synth(418, "Short") end
            if req.url == "/custom" then return surogat.synth(200, "OK") end
        end
        function synth(req, resp)
            if req.url == "/custom" then resp.body = "twelve bytes"; return "deliver" end
        end
        function backend_error(bereq, beresp)
            beresp.body = "sorry"
            return "deliver"
        end
        """, backend="127.0.0.1:%d" % free_port(), params={"access_log": "access.log"})
    tr = Traces(sg)
    lines = LogTail(sg, "-j")
    try:
        sizes = {}
        for u in ("/teapot", "/custom", "/down"):
            r = sg.get(u)
            sizes[u] = len(r.body)
        assert sizes["/custom"] == 12 and sizes["/down"] == 5 and sizes["/teapot"] > 50
        with sg.conn() as c:
            c.send(b"GET /badhost HTTP/1.1\r\nHost: a b\r\n\r\n")
            bad = c.read_response()
        assert bad.status == 400
        sizes["/badhost"] = len(bad.body)
        assert sg.request("HEAD", "/teapot").status == 418
        recs_ = [json.loads(x) for x in lines.take(5)]
        got = {(x["url"], x["method"]): x["bytes"] for x in recs_}
        for u, n in sizes.items():
            assert got[(u, "GET")] == n, (u, got)
            assert first(tr.group(u)["tx"], "Length") == str(n)
        assert got[("/teapot", "HEAD")] == 0
        wait_until(lambda: len(sg.access_lines()) >= 5, 10, "access log lines")
        acc = sg.access_lines()
        for u, n in sizes.items():
            assert any((" %s " % u) in ln and (" %d " % n) in ln for ln in acc), (u, n, acc)
    finally:
        tr.stop()
        lines.stop()
