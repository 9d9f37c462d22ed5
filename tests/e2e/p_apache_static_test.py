"""vcl/apache-static.lua, the complete example of Apache behind surogat with
the static files served by surogat, run as shipped but for its addresses:
the real Apache httpd for pages and CGI, surogat's static backend for
files by extension, Apache's health probed, cookies handled for pages."""

import os

from conftest import REPO, wait_until
from cstatus import forwarded, is_hit


def start(apache, surogat, tmp_path, params=None):
    site = tmp_path / "site"
    (site / "img").mkdir(parents=True)
    (site / "img" / "logo.png").write_bytes(b"\x89PNG not really" * 100)
    (site / "css").mkdir()
    (site / "css" / "site.css").write_text("body { margin: 0 }\n" * 50)
    (site / "secret.php").write_text("<?php $password = 'SECRET-MARKER'; ?>\n")
    (site / ".htaccess").write_text("SECRET-MARKER\n")
    text = (REPO / "vcl" / "apache-static.lua").read_text()
    assert 'port = 8080' in text and '"/var/www/html"' in text and "/server-status?auto" in text
    text = text.replace("port = 8080", "port = %d" % apache.port, 1)
    text = text.replace('"/var/www/html"', '"%s"' % site)
    text = text.replace("/server-status?auto", "/small.txt", 1)
    text = text.replace("interval = 5", "interval = 0.3", 1)
    p = tmp_path / "apache-static.lua"
    p.write_text(text)
    sg = surogat(params=params, args=["-f", str(p)])
    return sg, site


def apache_log_count(apache, path):
    log = apache.root / "logs" / "access.log"
    if not log.exists():
        return 0
    return sum(1 for ln in log.read_text(errors="replace").splitlines() if '"GET %s ' % path in ln)


def test_static_files_from_surogat_pages_from_apache(apache, surogat, tmp_path):
    sg, site = start(apache, surogat, tmp_path)
    r = sg.get("/img/logo.png")
    assert r.status == 200 and r.body == (site / "img" / "logo.png").read_bytes(), r
    assert r.header("Content-Type") == "image/png"
    assert "max-age=2592000" in r.header("Cache-Control"), r
    r = sg.get("/css/site.css", headers={"Cookie": "PHPSESSID=abc"})
    assert r.status == 200 and "max-age=604800" in r.header("Cache-Control"), r
    etag = r.header("ETag")
    assert sg.get("/css/site.css", headers={"If-None-Match": etag}).status == 304
    assert apache_log_count(apache, "/img/logo.png") == 0
    assert apache_log_count(apache, "/css/site.css") == 0
    # Apache's own pages and CGI
    r = sg.get("/cgi-bin/echo.py?x=1")
    assert r.status == 200 and r.header("X-Cgi") == "yes", r
    # the static root never shows its source, and .php is not a static route
    for path in ("/secret.php", "/.htaccess"):
        r = sg.get(path)
        assert r.status in (403, 404) and b"SECRET-MARKER" not in r.body, (path, r)


def test_pages_cached_for_anonymous_never_for_sessions(apache, surogat, tmp_path):
    sg, _ = start(apache, surogat, tmp_path)
    # A page last changed a year ago: Apache sends no Cache-Control, and
    # heuristic freshness (RFC 9111 4.2.2) keeps it for a while.
    page = apache.root / "htdocs" / "old-page.html"
    page.write_bytes(b"<html>an old page</html>\n")
    os.chmod(page, 0o644)
    os.utime(page, (1.0e9, 1.0e9))
    r = sg.get("/old-page.html", headers={"Cookie": "_ga=GA1.2.3; _gid=x"})
    assert r.status == 200 and forwarded(r.header("Cache-Status"), stored=True), r
    r = sg.get("/old-page.html", headers={"Cookie": "_ga=GA1.2.4"})
    assert is_hit(r), r
    r = sg.get("/old-page.html", headers={"Cookie": "PHPSESSID=s1"})
    assert not is_hit(r) and r.header("Cache-Status") == "surogat; fwd=bypass; detail=policy", r
    r = sg.request("POST", "/cgi-bin/echo.py", body=b"a=1")
    assert r.status == 200 and b"method=POST" in r.body


def test_apache_probed_sick_gives_503_at_once(apache, surogat, tmp_path):
    sg, _ = start(apache, surogat, tmp_path)
    rows = lambda: {l.split()[0]: l.split()  # the backends, not the directors after them
                    for l in sg.ctl("backend.list").stdout.split("\n\n")[0].splitlines()[1:]
                    if l.strip()}
    wait_until(lambda: rows()["apache"][2] == "healthy", 5, "apache probed healthy")
    htdocs = apache.root / "htdocs" / "small.txt"
    data = htdocs.read_bytes()
    os.rename(htdocs, str(htdocs) + ".away")  # the probe URL now answers 404
    try:
        wait_until(lambda: rows()["apache"][2] == "sick", 10, "apache probed sick")
        r = sg.get("/cgi-bin/echo.py?y=2")
        assert r.status == 503, r
        # static files do not need Apache
        assert sg.get("/img/logo.png").status == 200
    finally:
        os.rename(str(htdocs) + ".away", htdocs)
    assert htdocs.read_bytes() == data
    wait_until(lambda: rows()["apache"][2] == "healthy", 10, "apache healthy again")
    assert sg.get("/cgi-bin/echo.py?y=3").status == 200
