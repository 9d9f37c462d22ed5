"""ESI end to end, against a real Apache with PHP: pages cached once whose
includes are per user, fetched in parallel and sent in document order as
they come, relative and absolute src=, pages and includes of megabytes,
nested to esi_max_depth, cycles, onerror="continue" and alt=, broken
includes that cut the page,
gzip stitched for clients that take it and identity for the others,
Surrogate-Control and beresp.do_esi, a file store that brings pages back
with their programs, and what the logs and counters say of includes.

Apache's access log counts what reached it: a page fetched once while
each client gets its own include proves the page was cached and the
include was not."""

import gzip
import json
import os
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest

import httpc
from conftest import Apache, APACHE, APACHE_MODULES, wait_until
from l_log_test import LogTail

PHP_MODULE = APACHE_MODULES + "/libphp8.2.so"

PHP_CONF = """
LoadModule php_module {mods}/libphp8.2.so
<FilesMatch "\\.php$">
  SetHandler application/x-httpd-php
</FilesMatch>
# Four includes at once must find four children ready.
StartServers 8
MinSpareServers 8
MaxSpareServers 16
"""

ESI = "header('Surrogate-Control: content=\"ESI/1.0\"'); header('Cache-Control: max-age=60');"

PHP = {
    # A page the same for everyone, with a per-user fragment.
    "shop.php": "<?php " + ESI + " ?><!DOCTYPE html>\n<html><body><h1>Shop</h1>\n"
                '<esi:include src="/frag/user.php"/>\n<p>catalogue</p>\n</body></html>\n',
    "frag/user.php": "<?php header('Cache-Control: private, no-store');"
                     "$u = $_COOKIE['user'] ?? 'anonymous';"
                     "echo '<div id=\"user\">Hello, ' . htmlspecialchars($u) . '</div>';",
    # A fragment origin that takes 200 ms, and a page of four of them.
    "sleep.php": "<?php header('Cache-Control: no-store'); usleep(200000);"
                 "echo '[slept ' . (int)($_GET['n'] ?? 0) . ']';",
    "par.php": "<?php " + ESI + " ?><html>"
               + "".join('<esi:include src="/sleep.php?n=%d"/>' % i for i in range(1, 5))
               + "</html>",
    # Includes itself one level deeper, forever.  The pages whose include will
    # fail (no c) take 100 ms, so that their page has begun before: cut, not 503.
    "depth.php": "<?php " + ESI + " $n = (int)($_GET['n'] ?? 0); $c = isset($_GET['c']);"
                 "if (!$c) usleep(100000);"
                 "echo \"<div>level $n</div>\";"
                 "echo '<esi:include src=\"/depth.php?n=' . ($n + 1) ."
                 " ($c ? '&amp;c=1\" onerror=\"continue' : '') . '\"/>';",
    # a includes b includes a.
    "a.php": "<?php " + ESI + " $c = isset($_GET['c']) ? '?c=1' : '';"
             "echo \"<p>A</p><esi:include src=\\\"/b.php$c\\\"/>\";",
    "b.php": "<?php " + ESI + " $c = isset($_GET['c']); if (!$c) usleep(100000);"
             "echo '<p>B</p><esi:include src=\"/a.php' . ($c ? '?c=1\" onerror=\"continue' : '')"
             " . '\"/>';",
    # A page whose one include the query names: src, alt, onerror; with slow, a
    # 200 ms include comes first, so that the page has begun when that one fails.
    "inc.php": "<?php " + ESI + " $a = isset($_GET['alt']) ? ' alt=\"' . $_GET['alt'] . '\"' : '';"
               "$c = isset($_GET['c']) ? ' onerror=\"continue\"' : '';"
               "$s = isset($_GET['slow']) ? '<esi:include src=\"/sleep.php\"/>' : '';"
               "echo '<html>' . $s . '[before]<esi:include src=\"' . $_GET['src'] . '\"' . $a . $c . '/>"
               "[after]</html>';",
    "frag/hello.php": "<?php header('Cache-Control: max-age=60'); echo '[hello]';",
    "err500.php": "<?php http_response_code(500); echo 'broken';",
    # Starts its body, then its process dies: the connection is cut mid-body.
    "cut.php": "<?php header('Cache-Control: no-store'); echo str_repeat('x', 5000);"
               "ob_flush(); flush(); usleep(100000); posix_kill(getmypid(), 9);",
    # Big enough to be stored gzip (gzip_min_size), with a cacheable gzip fragment.
    "big.php": "<?php " + ESI + " echo '<html><body>';"
               "for ($i = 0; $i < 50; $i++) echo \"<p>paragraph $i of the big page</p>\\n\";"
               "echo '<esi:include src=\"/frag/big.php\"/><esi:include src=\"/frag/user.php\"/>';"
               "echo '</body></html>';",
    "frag/big.php": "<?php header('Cache-Control: max-age=60');"
                    "for ($i = 0; $i < 50; $i++) echo \"<li>item $i of the big fragment</li>\\n\";",
    # The backend compresses it itself: decoded and compressed again in segments.
    "gzpage.php": "<?php ob_start('ob_gzhandler'); " + ESI + " echo '<html><body>';"
                  "for ($i = 0; $i < 50; $i++) echo \"<p>gzip line $i from PHP</p>\\n\";"
                  "echo '<esi:include src=\"/frag/hello.php\"/></body></html>';",
    # No Surrogate-Control: ESI only if the policy says beresp.do_esi.
    "plain.php": "<?php header('Cache-Control: max-age=60');"
                 "echo '<html>[plain]<esi:include src=\"/frag/hello.php\"/></html>';",
    "noesi.php": "<?php " + ESI + " echo '<html>[noesi]<esi:include src=\"/frag/hello.php\"/></html>';",
    # What the policy told the include about itself.
    "level.php": "<?php header('Cache-Control: no-store');"
                 "echo '[level=' . ($_SERVER['HTTP_X_ESI_LEVEL'] ?? '-') . ']';",
    "levels.php": "<?php " + ESI + " echo '<html><esi:include src=\"/level.php\"/></html>';",
    # An include of another host.
    "other.php": "<?php " + ESI + " $c = isset($_GET['c']) ? ' onerror=\"continue\"' : '';"
                 "echo '<html>[o]<esi:include src=\"http://' . $_GET['h'] . '/frag/hello.php\"'"
                 " . $c . '/>[p]</html>';",
    # Relative src= (against the page's directory) and an absolute one of the page's own host.
    "dir/rel.php": "<?php " + ESI + " echo '<html><esi:include src=\"hello.php\"/>|"
                   "<esi:include src=\"sub/hello.php?x=1&amp;y=2\"/>|"
                   "<esi:include src=\"http://' . $_SERVER['HTTP_HOST'] . '/frag/hello.php\"/>"
                   "</html>';",
    "dir/hello.php": "<?php header('Cache-Control: max-age=60'); echo '[dir hello]';",
    "dir/sub/hello.php": "<?php header('Cache-Control: no-store');"
                         "echo '[sub ' . $_GET['x'] . $_GET['y'] . ']';",
    # Answers after ms milliseconds, uncached.
    "nap.php": "<?php header('Cache-Control: no-store'); $ms = (int)$_GET['ms'];"
               "usleep($ms * 1000); echo \"[nap $ms]\";",
    # A slow include before a fast one: the page keeps its order.
    "order.php": "<?php " + ESI + " echo '<html>[a]<esi:include src=\"/nap.php?ms=1000\"/>[b]"
                 "<esi:include src=\"/nap.php?ms=0\"/>[c]</html>';",
    # Megabytes of page around its includes, and an include of megabytes itself.
    "large.php": "<?php " + ESI + " $n = 60000;"
                 "for ($i = 0; $i < $n; $i++) {"
                 "  if ($i == 0 || $i == $n / 2) echo '<esi:include src=\"/frag/user.php\"/>';"
                 "  if ($i == 10) echo '<esi:include src=\"/nap.php?ms=300\"/>';"
                 "  if ($i == 20) echo '<esi:include src=\"/frag/large.php\"/>';"
                 "  printf(\"<p>line %06d of a large page</p>\\n\", $i);"
                 "}"
                 "echo '<esi:include src=\"/frag/hello.php\"/>';",
    "frag/large.php": "<?php header('Cache-Control: no-store');"
                      "for ($i = 0; $i < 100000; $i++) printf(\"<li>%06d</li>\\n\", $i);",
    # A cacheable include that takes a second, beside an uncached one that does too.
    "slowc.php": "<?php header('Cache-Control: max-age=60'); usleep(1000000); echo '[slowc]';",
    "busy.php": "<?php " + ESI + " echo '<html><esi:include src=\"/slowc.php\"/>"
                "<esi:include src=\"/nap.php?ms=1000\"/></html>';",
    # Echoes the tag the include's recv put in its req.ctx, as its miss or pass hook read it.
    "tag.php": "<?php header('Cache-Control: no-store');"
               "echo '[' . ($_SERVER['HTTP_X_TAG'] ?? '-') . ']';",
    "tags.php": "<?php " + ESI + " echo '<html>';"
                "for ($i = 1; $i <= 8; $i++) echo '<esi:include src=\"/tag.php?n=' . $i . '\"/>';"
                "echo '</html>';",
    # ESI markup in a 404: not stored, not processed.
    "gone.php": "<?php http_response_code(404); " + ESI
                + " echo '<html><esi:include src=\"/frag/hello.php\"/></html>';",
}

POLICY = """
function recv(req)
  -- One page for everyone, cached whatever the cookies: its includes get them.
  if not req.is_esi_subreq and (req.url:find("^/shop") or req.url:find("^/big")) then
    return "hash"
  end
  -- The same for every user too, though its request carries their cookies.
  if req.url:find("^/frag/big") then return "hash" end
  if req.is_esi_subreq then req.http["X-Esi-Level"] = tostring(req.esi_level) end
  if not req.is_esi_subreq then req.ctx.page = req.url end
  if req.url:find("^/tag%.php") then req.ctx.tag = "tag" .. req.url:match("n=(%d+)") end
  if req.is_esi_subreq and req.http.host == "allowed.test" then req.esi_allow_host = true end
end

-- An include's req.ctx goes with it to the worker that fetches it.
function miss(req)
  if req.ctx.tag then req.http["X-Tag"] = req.ctx.tag end
end

function pass(req)
  if req.ctx.tag then req.http["X-Tag"] = req.ctx.tag end
end

-- The page's req.ctx is still its own after its includes ran their hooks on its worker.
function log(req, resp)
  if req.url == "/levels.php" then
    surogat.log("ctx of the page: " .. tostring(req.ctx.page))
  end
end

function backend_response(bereq, beresp)
  if bereq.url:find("^/plain") then beresp.do_esi = true end
  if bereq.url:find("^/noesi") then beresp.do_esi = false end
end
"""

WANT_SHOP = ('<!DOCTYPE html>\n<html><body><h1>Shop</h1>\n<div id="user">Hello, %s</div>\n'
             '<p>catalogue</p>\n</body></html>\n')


@pytest.fixture(scope="module")
def php():
    if not os.access(APACHE, os.X_OK) or not os.path.exists(PHP_MODULE):
        pytest.skip("apache2 with mod_php (libapache2-mod-php) not installed")
    a = Apache(PHP_CONF)
    for name, src in PHP.items():
        p = a.root / "htdocs" / name
        p.parent.mkdir(mode=0o755, exist_ok=True)
        os.chmod(p.parent, 0o755)
        p.write_text(src)
        os.chmod(p, 0o644)
    r = httpc.fetch(a.port, path="/frag/hello.php")
    assert r.status == 200 and r.body == b"[hello]", (r, a.error_log())
    yield a
    a.stop()


@pytest.fixture
def sg(php, surogat, tmp_path):
    # Apache serves the whole module: each test counts the requests made since it began.
    php.since = len(apache_log(php))
    pol = tmp_path / "esi.lua"
    pol.write_text(POLICY)

    def start(params=None, args=()):
        return surogat(backend=php.addr, params=params, args=["-f", str(pol)] + list(args))
    return start


def apache_log(php):
    p = php.root / "logs" / "access.log"
    return p.read_text(errors="replace").splitlines() if p.exists() else []


def apache_hits(php, path):
    """Requests for path (with its query) in Apache's access log since the test began."""
    want = '"GET %s HTTP/' % path
    return sum(1 for ln in apache_log(php)[php.since:] if want in ln)


def wait_apache_hits(php, path, n):
    """Apache logs a request after answering it: wait for n, then check there are not more."""
    wait_until(lambda: apache_hits(php, path) >= n, 5, "%d hits on %s" % (n, path))
    time.sleep(0.1)
    assert apache_hits(php, path) == n


def get(s, path, headers=None, **kw):
    return s.get(path, headers=headers, **kw)


def cut_off(s, path, headers=None):
    """A request whose response must not complete: every byte that came before the
    connection closed, which a strict reader must find short."""
    with s.conn() as c:
        c.request("GET", path, headers)
        raw = c.read_until_close(timeout=10)
    assert raw.startswith(b"HTTP/1.1 "), raw  # something was sent before the cut
    with pytest.raises(httpc.Incomplete):
        httpc.parse_responses(raw)
    return raw


# -- the per-user fragment ------------------------------------------------------


def test_each_user_sees_own_fragment_in_one_cached_page(php, sg):
    s = sg()
    r1 = get(s, "/shop.php", {"Cookie": "user=alice"})
    r2 = get(s, "/shop.php", {"Cookie": "user=bob"})
    r3 = get(s, "/shop.php", {"Cookie": "user=alice"})
    assert r1.status == 200 and r1.body.decode() == WANT_SHOP % "alice", r1
    assert r2.body.decode() == WANT_SHOP % "bob", r2
    assert r3.body.decode() == WANT_SHOP % "alice", r3
    # The page once from Apache, then from the cache; the fragment every time.
    assert "fwd=" in r1.header("Cache-Status") and "hit" in r2.header("Cache-Status")
    wait_apache_hits(php, "/shop.php", 1)
    wait_apache_hits(php, "/frag/user.php", 3)
    # Assembled anew each time: no length, no validators.
    assert r2.chunked and r2.header("Content-Length") is None and r2.header("ETag") is None
    st = s.stats()
    assert st["esi_parsed"] == 1 and st["esi_includes"] == 3 and st["esi_include_pass"] == 3


# -- parallel includes -------------------------------------------------------------


def timed(s, path):
    t = time.monotonic()
    r = get(s, path)
    return r, time.monotonic() - t


def test_includes_fetched_in_parallel(php, sg):
    want = b"<html>" + b"".join(b"[slept %d]" % i for i in range(1, 5)) + b"</html>"
    s = sg()
    r, _ = timed(s, "/par.php")  # the page is a miss the first time
    assert r.body == want, r
    r, dt = timed(s, "/par.php")
    assert r.body == want and "hit" in r.header("Cache-Status"), r
    # Four includes of 200 ms each: about 200 ms together, not 800.
    assert 0.19 <= dt < 0.6, "page with 4 x 200 ms includes took %.3f s" % dt
    assert s.stat("esi_parallel") >= 6
    # The same page one include at a time takes their sum: the check above can fail.
    assert s.ctl("param.set", "esi_max_parallel", "1").returncode == 0
    r, dt = timed(s, "/par.php")
    assert r.body == want, r
    assert dt >= 0.78, "one include at a time, yet %.3f s" % dt


def arrivals(s, path, marks, headers=None, timeout=10):
    """The response, and when (seconds after the request) each of marks first arrived."""
    seen = {}
    with s.conn() as c:
        c.request("GET", path, headers)
        t0 = time.monotonic()
        while not c.buf.endswith(b"0\r\n\r\n") and c._fill(t0 + timeout):
            for m in marks:
                if m not in seen and m in c.buf:
                    seen[m] = time.monotonic() - t0
        return httpc.parse_responses(bytes(c.buf))[0], seen


def test_page_streams_in_document_order(php, sg):
    s = sg()
    want = b"<html>[a][nap 1000][b][nap 0][c]</html>"
    assert get(s, "/order.php").body == want  # stored; its includes are fetched every time
    r, seen = arrivals(s, "/order.php", [b"[a]", b"[nap 1000]", b"[c]"])
    assert r.body == want and r.chunked and "hit" in r.header("Cache-Status"), r
    # What comes before the slow include is sent before it; the rest follows it, in order.
    assert seen[b"[a]"] < 0.7 and seen[b"[nap 1000]"] >= 0.95, seen
    assert seen[b"[c]"] - seen[b"[nap 1000]"] < 0.5, seen
    wait_apache_hits(php, "/nap.php?ms=0", 2)


def test_relative_and_absolute_src(php, sg):
    s = sg()
    # src="hello.php" from /dir/ is /dir/hello.php; http:// of the page's own Host needs no
    # policy (another host does: test_other_host_needs_the_policy).
    r = get(s, "/dir/rel.php")
    assert r.body == b"<html>[dir hello]|[sub 12]|[hello]</html>", r
    wait_apache_hits(php, "/dir/hello.php", 1)
    wait_apache_hits(php, "/dir/sub/hello.php?x=1&y=2", 1)
    wait_apache_hits(php, "/frag/hello.php", 1)


def large_want():
    out = []
    for i in range(60000):
        if i in (0, 30000):
            out.append('<div id="user">Hello, anonymous</div>')
        if i == 10:
            out.append("[nap 300]")
        if i == 20:
            out.append("".join("<li>%06d</li>\n" % j for j in range(100000)))
        out.append("<p>line %06d of a large page</p>\n" % i)
    out.append("[hello]")
    return "".join(out).encode()


def test_large_page_and_large_include(php, sg):
    # A page of 1.9 MB stored and parsed as it came; an include of 1.4 MB held back, 16 KiB
    # ahead at most, while a slower one before it is sent.
    s = sg(params={"esi_fragment_buffer": "16k"})
    want = large_want()
    for ae in (None, "gzip", None):
        r = get(s, "/large.php", {"Accept-Encoding": ae} if ae else None)
        assert r.status == 200 and r.header("Content-Encoding") == ae, r
        assert (gzip.decompress(r.body) if ae else r.body) == want
    assert "hit" in r.header("Cache-Status")
    wait_apache_hits(php, "/large.php", 1)
    wait_apache_hits(php, "/frag/large.php", 3)
    assert s.stat("esi_parsed") == 1 and s.stat("esi_gzip") == 1


def test_include_being_fetched_does_not_hold_the_page(php, sg):
    # An include that another request is fetching waits on the object's waiting list, not
    # on the page's worker: the page's next include is fetched meanwhile.
    s = sg()
    want = b"<html>[slowc][nap 1000]</html>"
    with ThreadPoolExecutor(1) as ex:
        first = ex.submit(get, s, "/slowc.php")  # answers in 1 s
        time.sleep(0.3)
        r, dt = timed(s, "/busy.php")
        assert first.result().body == b"[slowc]"
    assert r.body == want, r
    # About 0.7 s for /slowc.php to come, the second second of /nap.php meanwhile: 1 s; not
    # 1.7 s, /nap.php after /slowc.php.
    assert dt < 1.45, "an include waiting for a fetch held the page: %.3f s" % dt
    assert s.stat("cache_coalesced") == 1 and s.stat("coalesce_on_thread") == 0
    wait_apache_hits(php, "/slowc.php", 1)


def test_many_pages_wait_for_one_include(php, sg):
    # Twenty clients at once, and five that leave while their include waits: the include
    # is fetched once, every page that stays whole, the waiting lists empty after.
    s = sg()
    want = b"<html>[slowc][nap 1000]</html>"

    def leave():
        with s.conn() as c:
            c.request("GET", "/busy.php")
            time.sleep(0.3)

    with ThreadPoolExecutor(25) as ex:
        gone = [ex.submit(leave) for _ in range(5)]
        pages = [ex.submit(get, s, "/busy.php") for _ in range(20)]
        for p in pages:
            r = p.result()
            assert r.status == 200 and r.body == want, r
        for g in gone:
            g.result()
    wait_until(lambda: s.stat("coalesce_parked") == 0, 5, "no include left parked")
    assert s.stat("coalesce_on_thread") == 0
    wait_apache_hits(php, "/slowc.php", 1)
    assert get(s, "/busy.php").body == want


# -- depth, cycles, errors -----------------------------------------------------------


def test_depth_limit(php, sg):
    s = sg()
    r = get(s, "/depth.php?n=0&c=1")
    body = r.body.decode()
    # The page is level 0; esi_max_depth (5) includes below it, the sixth refused.
    assert r.status == 200 and body.count("<div>level") == 6, body
    assert "level 5" in body and "level 6" not in body, body
    assert s.stat("esi_depth_limit") == 1
    wait_apache_hits(php, "/depth.php?n=6&amp;c=1", 0)
    s.ctl("param.set", "esi_max_depth", "2")
    body = get(s, "/depth.php?n=0&c=1").body.decode()
    assert body.count("<div>level") == 3 and "level 3" not in body, body
    # Without onerror="continue" the refused include cuts the page.
    partial = cut_off(s, "/depth.php?n=10")
    assert b"level 10" in partial and b"0\r\n\r\n" not in partial, partial


def test_cycle(php, sg):
    s = sg()
    r = get(s, "/a.php?c=1")
    assert r.status == 200 and r.body == b"<p>A</p><p>B</p>", r
    assert s.stat("esi_cycles") == 1
    partial = cut_off(s, "/a.php")
    assert b"<p>A</p>" in partial and b"0\r\n\r\n" not in partial
    assert s.stat("esi_cycles") == 2


def test_onerror_continue_and_alt(php, sg):
    s = sg()
    r = get(s, "/inc.php?src=/nope.php&c=1")
    assert r.status == 200 and r.body == b"<html>[before][after]</html>", r
    r = get(s, "/inc.php?src=/err500.php&c=1")
    assert r.body == b"<html>[before][after]</html>", r
    r = get(s, "/inc.php?src=/nope.php&alt=/frag/hello.php")
    assert r.body == b"<html>[before][hello][after]</html>", r
    # feature -esi_include_onerror: every failing include is left out (Varnish's default).
    s.ctl("param.set", "feature", "-esi_include_onerror")
    r = get(s, "/inc.php?src=/err500.php")
    assert r.status == 200 and r.body == b"<html>[before][after]</html>", r
    assert s.stat("esi_include_failed") == 4


@pytest.mark.parametrize("src", ["/nope.php", "/err500.php", "/cut.php"])
def test_failing_include_cuts_the_page(php, sg, src):
    s = sg()
    partial = cut_off(s, "/inc.php?src=%s&slow=1" % src)
    assert partial.startswith(b"HTTP/1.1 200"), partial
    # What went out before the slow include; what was batched after it may be dropped.
    assert b"Transfer-Encoding: chunked" in partial and b"<html>" in partial, partial
    assert b"[after]" not in partial and not partial.endswith(b"0\r\n\r\n"), partial
    assert s.stat("esi_aborted") == 1
    # The daemon and the cache are fine: the same page with onerror completes -- an include
    # cut part-way is left where it broke.
    r = get(s, "/inc.php?src=%s&c=1" % src)
    cut = b"x" * len(r.body[14:-14]) if src == "/cut.php" else b""
    assert r.body == b"<html>[before]" + cut + b"[after]</html>", r


# -- gzip ------------------------------------------------------------------------------


def big_want(user):
    return ("<html><body>" + "".join("<p>paragraph %d of the big page</p>\n" % i for i in range(50))
            + "".join("<li>item %d of the big fragment</li>\n" % i for i in range(50))
            + '<div id="user">Hello, %s</div></body></html>' % user)


def test_gzip_stitched_and_identity(php, sg):
    s = sg()
    ae = {"Accept-Encoding": "gzip", "Cookie": "user=zed"}
    r0 = get(s, "/big.php", ae)  # the page and the big fragment stored gzip
    assert r0.status == 200, r0
    r1 = get(s, "/big.php", ae)
    assert r1.header("Content-Encoding") == "gzip" and "hit" in r1.header("Cache-Status"), r1
    assert "accept-encoding" in r1.tokens("Vary")
    assert gzip.decompress(r1.body).decode() == big_want("zed")
    # One member: a decoder that stops at its end sees nothing after it.
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    d.decompress(r1.body)
    assert d.eof and d.unused_data == b""
    # The cached fragment was spliced, neither decoded nor compressed.
    assert s.stat("esi_spliced") >= 1 and s.stat("esi_gzip") == 2
    r2 = get(s, "/big.php", {"Cookie": "user=zed"})
    assert r2.header("Content-Encoding") is None and r2.body.decode() == big_want("zed"), r2
    assert "hit" in r2.header("Cache-Status")
    wait_apache_hits(php, "/big.php", 1)


def test_backend_gzip_is_segmented_again(php, sg):
    want = ("<html><body>" + "".join("<p>gzip line %d from PHP</p>\n" % i for i in range(50))
            + "[hello]</body></html>").encode()
    s = sg()
    for _ in range(2):
        r = get(s, "/gzpage.php", {"Accept-Encoding": "gzip"})
        assert r.header("Content-Encoding") == "gzip", r
        assert gzip.decompress(r.body) == want
        r = get(s, "/gzpage.php")
        assert r.header("Content-Encoding") is None and r.body == want, r
    wait_apache_hits(php, "/gzpage.php", 1)
    assert s.stat("esi_gzip") == 2


# -- what enables it -------------------------------------------------------------------


def test_surrogate_control_and_do_esi_enable_it(php, sg, surogat):
    s = sg()
    assert get(s, "/plain.php").body == b"<html>[plain][hello]</html>"
    assert get(s, "/noesi.php").body == \
        b'<html>[noesi]<esi:include src="/frag/hello.php"/></html>'
    r = get(s, "/shop.php", {"Cookie": "user=sc"})
    assert b"Hello, sc" in r.body
    # The backend's Surrogate-Control is for us: clients never see it.
    assert r.header("Surrogate-Control") is None
    # Without the policy, Surrogate-Control alone: plain.php stays as it is.
    bare = surogat(backend=php.addr)
    assert get(bare, "/plain.php").body == b'<html>[plain]<esi:include src="/frag/hello.php"/></html>'
    assert get(bare, "/par.php").body.startswith(b"<html>[slept 1]")


def test_not_stored_is_not_processed(php, sg):
    s = sg()
    r = get(s, "/gone.php")
    assert r.status == 404 and b"<esi:include" in r.body, r
    r = s.request("HEAD", "/par.php")
    assert r.status == 200 and r.body == b""
    r = s.request("HEAD", "/par.php")
    assert r.status == 200 and "hit" in r.header("Cache-Status") and r.body == b""
    wait_apache_hits(php, "/sleep.php?n=1", 0)  # nothing included for a HEAD


def test_policy_sees_the_include(php, sg):
    s = sg()
    assert get(s, "/levels.php").body == b"<html>[level=1]</html>"
    assert get(s, "/levels.php").body == b"<html>[level=1]</html>"
    wait_until(lambda: s.log_tail(200).count("ctx of the page: /levels.php") == 2, 5,
               "the log hook's lines")


def test_include_ctx_follows_it_to_its_task(php, sg):
    s = sg()
    want = b"<html>" + b"".join(b"[tag%d]" % i for i in range(1, 9)) + b"</html>"
    for _ in range(3):
        assert get(s, "/tags.php").body == want
    # Most ran on tasks of their own, away from the worker where recv set req.ctx.
    assert s.stat("esi_parallel") - s.stat("esi_stolen") >= 8


def test_other_host_needs_the_policy(php, sg):
    s = sg()
    r = get(s, "/other.php?h=elsewhere.test&c=1")
    assert r.body == b"<html>[o][p]</html>", r
    r = get(s, "/other.php?h=allowed.test")
    assert r.body == b"<html>[o][hello][p]</html>", r
    wait_apache_hits(php, "/frag/hello.php", 1)


def test_http10_client(php, sg):
    s = sg()
    get(s, "/shop.php", {"Cookie": "user=old"})
    with s.conn() as c:
        c.request("GET", "/shop.php", {"Cookie": "user=old"}, version="1.0")
        r = c.read_final()
        assert r.body.decode() == WANT_SHOP % "old" and not r.chunked
        assert c.wait_closed(5)[0]


# -- restarts, logs ----------------------------------------------------------------------


def test_program_survives_file_store_restart(php, sg, tmp_path):
    store = "file,%s,16m" % (tmp_path / "store.bin")
    s = sg(args=["-s", store])
    assert get(s, "/shop.php", {"Cookie": "user=first"}).body.decode() == WANT_SHOP % "first"
    assert s.stop() == 0
    s2 = sg(args=["-s", store])
    assert s2.stat("sto_recovered") >= 1
    r = get(s2, "/shop.php", {"Cookie": "user=second"})
    assert r.body.decode() == WANT_SHOP % "second", r
    assert "hit" in r.header("Cache-Status")
    wait_apache_hits(php, "/shop.php", 1)


def test_includes_in_logs_and_counters(php, sg):
    s = sg(params={"access_log": "access.log", "access_log_format": "json"})
    get(s, "/frag/hello.php")
    get(s, "/inc.php?src=/frag/hello.php")
    get(s, "/inc.php?src=/nope.php&c=1")
    lines = [json.loads(ln) for ln in s.wait_access_lines(3)]
    page = [ln for ln in lines if ln["url"] == "/inc.php?src=/frag/hello.php"][0]
    assert page["esi_includes"] == 1 and page["esi_failed"] == 0
    inc = page["esi"][0]
    assert inc["url"] == "/frag/hello.php" and inc["cache"] == "HIT" and inc["status"] == 200
    assert inc["time_us"] >= 0 and not inc["failed"]
    bad = [ln for ln in lines if ln["url"] == "/inc.php?src=/nope.php&c=1"][0]
    assert bad["esi"][0]["status"] == 404 and bad["esi"][0]["failed"]
    # Not a line of their own in the access log: only the client's requests are.
    assert len(lines) == 3
    # The live log has a record for each include, with its level.
    tail = LogTail(s, "-d", "-j")
    try:
        recs = [json.loads(ln) for ln in tail.take(5)]
        recs = [json.loads(ln) for ln in tail.settle()]
    finally:
        tail.stop()
    subs = [r for r in recs if r["esi_level"] == 1]
    assert sorted(r["url"] for r in subs) == ["/frag/hello.php", "/nope.php"], recs
    assert [r for r in recs if r["url"] == "/inc.php?src=/frag/hello.php"][0]["esi"] == 1
    st = s.stats()
    assert st["esi_include_hit"] >= 1 and st["esi_include_miss"] >= 1
