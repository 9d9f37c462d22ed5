"""vcl/apache-front.lua in front of the real Apache httpd: static files
lose their cookies and are kept for the time ExpiresByType-style rules
give their Content-Type; session cookies, POST and dynamic pages that set
a cookie never touch the cache; other pages follow RFC 9111.  Apache's
access log counts the requests that reached it."""

import os
import re
import subprocess

import pytest

from conftest import REPO, SUROGATD, wait_until

DAY = 86400
HIT_RE = re.compile(r"surogat; hit; ttl=(\d+)")

# A page whose caching the query decides: cc=N (max-age=N), cc=no-store,
# cookie=1 (Set-Cookie).  The body shows the Cookie header Apache got.
CGI_PAGE = r"""#!/usr/bin/python3
import os, sys
q = dict(p.partition("=")[::2] for p in os.environ.get("QUERY_STRING", "").split("&") if p)
head = ["Content-Type: text/html"]
cc = q.get("cc")
if cc:
    head.append("Cache-Control: " + (cc if cc == "no-store" else "max-age=" + cc))
if q.get("cookie"):
    head.append("Set-Cookie: cart=1; Path=/")
body = "cookie=%s\n" % os.environ.get("HTTP_COOKIE", "")
sys.stdout.write("\r\n".join(head) + "\r\n\r\n" + body)
"""

# A stylesheet made by a script that also sets a cookie (a theme chooser).
CGI_CSS = r"""#!/usr/bin/python3
import sys
sys.stdout.write("Content-Type: text/css\r\nSet-Cookie: theme=dark; Path=/\r\n\r\n"
                 "body { color: #333 }\n")
"""

STATIC = {
    "assets/site.css": b"body { margin: 0 }\n",
    "assets/app.js": b"console.log('surogat');\n",
    "img/logo.png": b"\x89PNG\r\n\x1a\n" + bytes(range(64)),
    "fonts/a.woff2": b"wOF2" + bytes(60),
}


def _write(path, data, mode):
    path.parent.mkdir(mode=0o755, exist_ok=True)
    os.chmod(path.parent, 0o755)  # Apache's children (www-data) read it
    path.write_bytes(data)
    os.chmod(path, mode)


@pytest.fixture(scope="module")
def site(apache):
    """The apache fixture's tree with this module's files added (Apache
    serves files as they appear: no restart needed)."""
    for name, data in STATIC.items():
        _write(apache.root / "htdocs" / name, data, 0o644)
    _write(apache.root / "cgi-bin" / "page.py", CGI_PAGE.encode(), 0o755)
    _write(apache.root / "cgi-bin" / "theme.css", CGI_CSS.encode(), 0o755)
    return apache


@pytest.fixture
def sg(site, surogat):
    return surogat(backend=site.addr, args=["-f", str(REPO / "vcl" / "apache-front.lua")])


def apache_hits(apache, method, path):
    """Requests for path in Apache's access log."""
    p = apache.root / "logs" / "access.log"
    want = '"%s %s HTTP/' % (method, path)
    return sum(1 for ln in p.read_text(errors="replace").splitlines() if want in ln)


def wait_apache_hits(apache, method, path, n):
    """Apache logs a request after answering it: wait for n lines, then
    check there are not more."""
    wait_until(lambda: apache_hits(apache, method, path) >= n, 10,
               "%d %s %s in Apache's access log" % (n, method, path))
    assert apache_hits(apache, method, path) == n


def hit_ttl(r):
    m = HIT_RE.fullmatch(r.header("Cache-Status") or "")
    return int(m.group(1)) if m else None


def test_script_checks():
    p = subprocess.run([SUROGATD, "-C", "-f", str(REPO / "vcl" / "apache-front.lua")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("path,ttl", [
    ("/assets/site.css", 7 * DAY),
    ("/assets/app.js", 7 * DAY),
    ("/img/logo.png", 30 * DAY),
    ("/fonts/a.woff2", 365 * DAY),
])
def test_static_cached_with_ttl_by_type(site, sg, path, ttl):
    # A tracking cookie, then a session cookie: a static file ignores both.
    r = sg.get(path, headers={"Cookie": "_ga=GA1.2.3.4; _gid=GA1.2.5"})
    assert r.status == 200 and r.body == STATIC[path[1:]]
    assert r.header("X-Policy") == "static"
    r = sg.get(path, headers={"Cookie": "PHPSESSID=abc123"})
    assert r.status == 200 and r.body == STATIC[path[1:]]
    got = hit_ttl(r)
    assert got is not None, r.header("Cache-Status")
    assert ttl - 5 <= got <= ttl
    wait_apache_hits(site, "GET", path, 1)


def test_static_set_cookie_stripped(site, sg):
    r = sg.get("/cgi-bin/theme.css")
    assert r.status == 200 and b"color" in r.body
    assert not r.has("Set-Cookie")
    r = sg.get("/cgi-bin/theme.css")
    assert hit_ttl(r) is not None and not r.has("Set-Cookie")
    wait_apache_hits(site, "GET", "/cgi-bin/theme.css", 1)


@pytest.mark.parametrize("cookie", ["PHPSESSID=abc123", "lang=fr; wordpress_logged_in_0f=u",
                                    "SESS5e2a=x"])
def test_session_cookie_never_cached(site, sg, cookie):
    path = "/cgi-bin/page.py?cc=60&s=%d" % len(cookie)
    for _ in range(2):
        r = sg.get(path, headers={"Cookie": cookie})
        assert r.status == 200 and r.header("X-Policy") == "session"
        assert r.body == ("cookie=%s\n" % cookie).encode()
    wait_apache_hits(site, "GET", path, 2)
    # Nothing was stored on the way: the same page without a cookie is a
    # miss, then a hit.
    r = sg.get(path)
    assert r.body == b"cookie=\n" and hit_ttl(r) is None
    assert hit_ttl(sg.get(path)) is not None
    wait_apache_hits(site, "GET", path, 3)


def test_authorization_passes(site, sg):
    path = "/assets/site.css?auth"
    for _ in range(2):
        r = sg.get(path, headers={"Authorization": "Basic dTpw"})
        assert r.status == 200 and r.header("X-Policy") == "authorization"
    wait_apache_hits(site, "GET", path, 2)


def test_post_passed(site, sg):
    path = "/cgi-bin/page.py?cc=60&post"
    assert hit_ttl(sg.get(path)) is None
    assert hit_ttl(sg.get(path)) is not None
    for _ in range(2):
        r = sg.request("POST", path, body=b"a=1", headers={"Content-Type": "text/plain"})
        assert r.status == 200 and r.header("X-Policy") == "method"
        assert hit_ttl(r) is None
    wait_apache_hits(site, "POST", path, 2)


def test_tracking_cookies_stripped(site, sg):
    path = "/cgi-bin/page.py?cc=60&track"
    r = sg.get(path, headers={"Cookie": "_ga=GA1.2.3; __utma=1.2; _gid=GA1.5"})
    assert r.status == 200 and r.body == b"cookie=\n" and r.header("X-Policy") == "page"
    r = sg.get(path, headers={"Cookie": "__utmz=9"})
    assert 55 <= hit_ttl(r) <= 60
    wait_apache_hits(site, "GET", path, 1)
    # Other cookies are kept, without the tracking ones, and the page passes.
    path = "/cgi-bin/page.py?cc=60&kept"
    for _ in range(2):
        r = sg.get(path, headers={"Cookie": "_ga=GA1.2.3; lang=fr; __utmb=2; ab=b"})
        assert r.body == b"cookie=lang=fr; ab=b\n" and r.header("X-Policy") == "cookie"
    wait_apache_hits(site, "GET", path, 2)


def test_dynamic_set_cookie_not_stored(site, sg):
    path = "/cgi-bin/page.py?cc=60&cookie=1"
    for _ in range(2):
        r = sg.get(path)
        assert r.status == 200 and r.header("Set-Cookie") == "cart=1; Path=/"
        assert hit_ttl(r) is None
    wait_apache_hits(site, "GET", path, 2)


@pytest.mark.parametrize("query,stored", [("cc=60&rfc", True), ("cc=no-store&rfc", False),
                                          ("rfc", False)])
def test_pages_follow_rfc(site, sg, query, stored):
    # A CGI answer without Cache-Control has no Last-Modified either: no
    # heuristic freshness, nothing stored.
    path = "/cgi-bin/page.py?" + query
    r = sg.get(path)
    assert r.status == 200 and r.header("X-Policy") == "page"
    r = sg.get(path)
    assert (hit_ttl(r) is not None) == stored
    wait_apache_hits(site, "GET", path, 1 if stored else 2)
