"""vcl/wordpress.lua in front of an origin that answers as WordPress does:
anonymous pages without Cache-Control, pages that name the logged-in user,
a login that sets wordpress_logged_in_*, a dashboard that redirects
strangers, feeds, uploads and theme files, plugins' cookies.  The origin
counts the requests for each path, so every rule is checked by what
reached it and by what the client got."""

import re

import pytest

from conftest import REPO, run_surogatd
from cstatus import forwarded, hit_ttl, is_hit
from origins import Origin, Route

SCRIPT = REPO / "vcl" / "wordpress.lua"
LOGGED_IN = "wordpress_logged_in_5f4dcc3b=admin%7C1700000000%7Cabc"
# Sent by WordPress's nocache_headers() on the dashboard and the login page.
NOCACHE = [("Cache-Control", "no-cache, must-revalidate, max-age=0"),
           ("Expires", "Wed, 11 Jan 1984 05:00:00 GMT")]
PRIVATE_COOKIES = [
    LOGGED_IN,
    "wp-postpass_0123abcd=%24P%24Bxyz",
    "comment_author_0123abcd=Ann",
    "woocommerce_items_in_cart=1",
    "wp_woocommerce_session_0123abcd=42%7C%7C1700000000",
]
ANALYTICS = "_ga=GA1.2.1234.5678; _gid=GA1.2.99.5678; _fbp=fb.1.1.2"


class WordPress(Origin):
    """An origin whose every answer comes from app(req), as a PHP site's
    would: the path, the query and the cookies decide."""

    def _respond(self, s, req, route):
        status, headers, body = self.app(req)
        return super()._respond(s, req, Route(status=status, headers=headers, body=body))

    @staticmethod
    def cookies(req):
        out = {}
        for c in (req.header("Cookie") or "").split(";"):
            n, _, v = c.strip().partition("=")
            if n:
                out[n] = v
        return out

    def app(self, req):
        cookies = self.cookies(req)
        user = "admin" if any(n.startswith("wordpress_logged_in_") for n in cookies) else None
        html = [("Content-Type", "text/html; charset=UTF-8"), ("X-Powered-By", "PHP/8.2"),
                ("Link", '<http://wp.test/wp-json/>; rel="https://api.w.org/"')]
        q = dict(p.partition("=")[::2] for p in req.query.split("&") if p)
        p = req.path
        if p == "/wp-login.php":
            if req.method == "POST":
                return 302, [("Location", "/wp-admin/"), ("Set-Cookie", LOGGED_IN + "; path=/"),
                             ("Set-Cookie", "wordpress_sec_5f4dcc3b=x; path=/wp-admin")] + \
                    NOCACHE, b""
            return 200, html + NOCACHE + [
                ("Set-Cookie", "wordpress_test_cookie=WP%20Cookie%20check; path=/")], \
                b"<form>login</form>"
        if p.startswith("/wp-admin"):
            if user is None:
                return 302, [("Location", "/wp-login.php?redirect_to=%2Fwp-admin%2F")] + \
                    NOCACHE, b""
            return 200, html + NOCACHE, b"dashboard of " + user.encode()
        if p == "/wp-cron.php":
            return 200, [("Content-Type", "text/html")], b""
        if p == "/xmlrpc.php":
            if req.method != "POST":
                return 405, [("Content-Type", "text/plain"), ("Allow", "POST")], \
                    b"XML-RPC server accepts POST requests only."
            return 200, [("Content-Type", "text/xml")], b"<methodResponse/>"
        if p.startswith("/wp-content/") or p.startswith("/wp-includes/"):
            ext = p.rsplit(".", 1)[-1]
            ctype = {"jpg": "image/jpeg", "css": "text/css", "js": "application/javascript",
                     "php": "text/html"}.get(ext, "application/octet-stream")
            # a plugin that sets a cookie with every response, files included
            hdrs = [("Content-Type", ctype), ("Set-Cookie", "pll_language=en; path=/"),
                    ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")]
            if ext == "php":
                return 200, hdrs, b"plugin endpoint " + req.target.encode()
            return 200, hdrs, b"file " + p.encode()
        if p == "/feed/":
            return 200, [("Content-Type", "application/rss+xml; charset=UTF-8"),
                         ("Last-Modified", "Mon, 01 Jan 2024 00:00:00 GMT")], b"<rss/>"
        if p == "/set-session/":
            return 200, html + [("Set-Cookie", "PHPSESSID=abc; path=/")], b"session page"
        if p == "/set-analytics/":
            return 200, html + [("Set-Cookie", "_ga=GA1.2.1.1; path=/"),
                                ("Set-Cookie", "_gid=GA1.2.1.1; path=/")], b"tracked page"
        # a post or page: the body names the visitor and the query WordPress saw
        if q.get("preview") == "true":
            who = b"draft preview"
        elif user:
            who = b"logged in as " + user.encode()
        elif "wp-postpass_0123abcd" in cookies:
            who = b"protected content"
        elif any(n.startswith("comment_author_") for n in cookies):
            who = b"welcome back Ann"
        elif any(n.startswith("woocommerce") or n.startswith("wp_woocommerce") for n in cookies):
            who = b"1 item in your cart"
        else:
            who = b"anonymous"
        return 200, html, b"%s: %s ?%s" % (p.encode(), who, req.query.encode())


@pytest.fixture
def wp():
    o = WordPress()
    yield o
    o.stop()


@pytest.fixture
def sg(wp, surogat):
    return surogat(backend=wp.addr, args=["-f", str(SCRIPT)])


def bypassed(r):
    return r.header("Cache-Status") == "surogat; fwd=bypass; detail=policy"


def test_script_checks():
    r = run_surogatd(["-C", "-f", str(SCRIPT)])
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_anonymous_pages_cached_despite_analytics(wp, sg):
    r = sg.get("/hello-world/", headers={"Cookie": ANALYTICS + "; wordpress_test_cookie=x"})
    assert r.status == 200 and r.body == b"/hello-world/: anonymous ?", r
    assert forwarded(r.header("Cache-Status"), stored=True), r
    assert r.header("X-Policy") == "page" and not r.has("X-Powered-By"), r
    # no Cache-Control from WordPress: the script's page TTL (10 min)
    assert not wp.last("/hello-world/").has("Cookie")
    r = sg.get("/hello-world/", headers={"Cookie": "_ga=GA1.2.other; _hjSession_1=x"})
    assert is_hit(r) and 500 < hit_ttl(r) <= 600, r
    assert sg.get("/hello-world/").body == b"/hello-world/: anonymous ?"
    assert wp.hits("/hello-world/") == 1
    # tracking parameters dropped, the rest sorted: one object
    r = sg.get("/hello-world/?utm_source=news&b=2&fbclid=x&a=1&gclid=y")
    assert r.body == b"/hello-world/: anonymous ?a=1&b=2", r
    assert wp.last("/hello-world/").target == "/hello-world/?a=1&b=2"
    for url in ("/hello-world/?a=1&b=2", "/hello-world/?b=2&a=1&utm_medium=social"):
        assert is_hit(sg.get(url, headers={"Cookie": ANALYTICS})), url
    assert wp.hits("/hello-world/") == 2


@pytest.mark.parametrize("cookie", PRIVATE_COOKIES, ids=lambda c: c.split("=")[0][:24])
def test_private_cookies_never_cached(wp, sg, cookie):
    anon = sg.get("/post/")
    assert anon.body == b"/post/: anonymous ?" and forwarded(anon.header("Cache-Status"))
    assert is_hit(sg.get("/post/"))
    for i in range(3):
        r = sg.get("/post/", headers={"Cookie": ANALYTICS + "; " + cookie})
        assert r.status == 200 and bypassed(r) and r.header("X-Policy") == "private", r
        assert r.body != b"/post/: anonymous ?", r
        # WordPress gets the cookie it needs (the analytics ones too: a pass is untouched)
        assert cookie in wp.last("/post/").header("Cookie")
        assert wp.hits("/post/") == 2 + i
    if cookie == LOGGED_IN:
        assert r.body == b"/post/: logged in as admin ?", r
    # the anonymous copy is still the one served to strangers
    r = sg.get("/post/", headers={"Cookie": ANALYTICS})
    assert is_hit(r) and r.body == b"/post/: anonymous ?", r


def test_login_and_dashboard_pass_with_cookies(wp, sg):
    # the login form: never stored, and its test cookie reaches the browser
    for n in (1, 2):
        r = sg.get("/wp-login.php")
        assert r.status == 200 and bypassed(r) and r.header("X-Policy") == "never", r
        assert r.header("Set-Cookie").startswith("wordpress_test_cookie="), r
        assert wp.hits("/wp-login.php") == n
    r = sg.request("POST", "/wp-login.php", body=b"log=admin&pwd=x",
                   headers={"Cookie": "wordpress_test_cookie=WP%20Cookie%20check"})
    assert r.status == 302 and r.header("X-Policy") == "method", r
    assert any(v.startswith("wordpress_logged_in_") for v in r.headers_all("Set-Cookie")), r
    assert wp.last("/wp-login.php").body == b"log=admin&pwd=x"
    # the dashboard, with the cookies of the login, twice: both reach WordPress
    jar = "; ".join(v.split(";")[0] for v in r.headers_all("Set-Cookie")) + "; " + ANALYTICS
    for n in (1, 2):
        r = sg.get("/wp-admin/", headers={"Cookie": jar})
        assert r.status == 200 and r.body == b"dashboard of admin" and bypassed(r), r
        assert "wordpress_sec_5f4dcc3b=x" in wp.last("/wp-admin/").header("Cookie")
        assert wp.hits("/wp-admin/") == n
    # a stranger is redirected, and that redirect is not kept for the admin
    r = sg.get("/wp-admin/")
    assert r.status == 302 and bypassed(r), r
    r = sg.get("/wp-admin/", headers={"Cookie": jar})
    assert r.status == 200 and wp.hits("/wp-admin/") == 4
    r = sg.request("POST", "/wp-admin/admin-ajax.php", body=b"action=heartbeat",
                   headers={"Cookie": jar})
    assert r.status == 200 and wp.hits("/wp-admin/admin-ajax.php") == 1


@pytest.mark.parametrize("url", ["/wp-cron.php", "/wp-cron.php?doing_wp_cron=1700000000.1",
                                 "/xmlrpc.php", "/hello-world/?preview=true",
                                 "/?p=12&preview_id=12&preview_nonce=ab", "/cart/",
                                 "/checkout/", "/my-account/orders/", "/shop/?add-to-cart=7"])
def test_never_cached_urls(wp, sg, url):
    path = url.split("?")[0]
    for n in (1, 2):
        r = sg.get(url, headers={"Cookie": ANALYTICS})
        assert bypassed(r) and r.header("X-Policy") == "never", (url, r)
        assert wp.hits(path) == n
        # passed as it came: the query and the cookies untouched
        assert wp.last(path).target == url and wp.last(path).header("Cookie") == ANALYTICS
    if "preview=true" in url:
        assert b"draft preview" in r.body
    r = sg.request("POST", "/xmlrpc.php", body=b"<methodCall/>")
    assert r.status == 200 and r.body == b"<methodResponse/>"


def test_static_files_lose_cookies_and_stay_30_days(wp, sg):
    urls = ["/wp-content/uploads/2024/01/x.jpg", "/wp-content/themes/twentyfour/style.css?ver=6.4",
            "/wp-includes/js/jquery/jquery.min.js?ver=3.7.1", "/wp-content/plugins/p/a.JS"]
    for url in urls:
        path = url.split("?")[0]
        r = sg.get(url, headers={"Cookie": LOGGED_IN + "; " + ANALYTICS})
        assert r.status == 200 and r.body == b"file " + path.encode(), (url, r)
        assert forwarded(r.header("Cache-Status"), stored=True), (url, r)
        assert not r.has("Set-Cookie") and r.header("X-Policy") == "static", (url, r)
        assert not wp.last(path).has("Cookie"), url
        # a logged-in user and a stranger share the copy
        r = sg.get(url)
        assert is_hit(r) and hit_ttl(r) > 29 * 86400 and not r.has("Set-Cookie"), (url, r)
        assert wp.hits(path) == 1
    # a PHP file under wp-content is not a static file
    for n in (1, 2):
        r = sg.get("/wp-content/plugins/p/ajax.php?x=1", headers={"Cookie": LOGGED_IN})
        assert bypassed(r) and r.header("X-Policy") == "private", r
        assert wp.hits("/wp-content/plugins/p/ajax.php") == n


def test_feed_short_ttl(wp, sg):
    r = sg.get("/feed/")
    assert r.status == 200 and forwarded(r.header("Cache-Status"), stored=True), r
    r = sg.get("/feed/")
    assert is_hit(r) and 60 < hit_ttl(r) <= 120, r
    assert wp.hits("/feed/") == 1


def test_page_cookies(wp, sg):
    # a page that opens a session is nobody else's: not stored
    for n in (1, 2):
        r = sg.get("/set-session/")
        assert r.header("Set-Cookie") == "PHPSESSID=abc; path=/", r
        assert r.body == b"session page" and not is_hit(r), r
        assert not forwarded(r.header("Cache-Status"), stored=True), r
        assert wp.hits("/set-session/") == n
    # analytics Set-Cookie only: stored without them
    r = sg.get("/set-analytics/")
    assert forwarded(r.header("Cache-Status"), stored=True) and not r.has("Set-Cookie"), r
    r = sg.get("/set-analytics/")
    assert is_hit(r) and not r.has("Set-Cookie") and r.body == b"tracked page", r
    assert wp.hits("/set-analytics/") == 1


def test_purge_url_and_regex(wp, sg):
    urls = ["/a/", "/b/", "/category/news/", "/category/news/page/2/"]
    for url in urls:
        sg.get(url)
        assert is_hit(sg.get(url)), url
    r = sg.request("PURGE", "/a/")
    assert r.status == 200, r
    assert not is_hit(sg.get("/a/")) and is_hit(sg.get("/b/"))
    # Varnish HTTP Purge's form: a regex in the URL
    r = sg.request("PURGE", "/category/.*", headers={"X-Purge-Method": "regex"})
    assert r.status == 200 and b"Banned: " in r.body, r
    for url in urls[2:]:
        r = sg.get(url)
        assert not is_hit(r), url
    assert is_hit(sg.get("/b/")) and is_hit(sg.get("/a/"))
    r = sg.request("PURGE", "/(", headers={"X-Purge-Method": "regex"})
    assert r.status == 400, r
    assert wp.hits("/b/") == 1 and wp.hits("/a/") == 2 and wp.hits("/category/news/") == 2


def test_purge_refused_outside_the_list(wp, surogat, tmp_path):
    text = SCRIPT.read_text()
    assert 'surogat.acl{ "127.0.0.1", "::1" }' in text
    p = tmp_path / "wp.lua"
    p.write_text(text.replace('surogat.acl{ "127.0.0.1", "::1" }', 'surogat.acl{ "::1" }'))
    sg = surogat(backend=wp.addr, args=["-f", str(p)])
    sg.get("/a/")
    for hdrs in (None, {"X-Purge-Method": "regex"}):
        r = sg.request("PURGE", "/a/", headers=hdrs)
        assert r.status == 403 and b"not allowed from 127.0.0.1" in r.body, r
    assert is_hit(sg.get("/a/")) and wp.hits("/a/") == 1


def test_documented():
    readme = (REPO / "vcl" / "README.md").read_text()
    man = (REPO / "man" / "surogat-lua.7").read_text()
    assert "wordpress.lua" in readme and "wordpress.lua" in man
    # every TTL the README gives is the one in the script
    for name, text in (("PAGE_TTL", "10m"), ("FEED_TTL", "2m"), ("STATIC_TTL", "30d")):
        assert re.search(r'local %s = surogat.duration\("%s"\)' % (name, text),
                         SCRIPT.read_text()), name
