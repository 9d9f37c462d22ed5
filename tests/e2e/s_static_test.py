"""The static-file backend (-b /DIR) through the real daemon: headers
(type, validators, expiry), 304, ranges, HEAD, index files, redirects,
listings, a 20 MiB file by sha256, files changing on disk, and a list of
traversal and source-leak attacks sent as raw bytes (clients would
normalise them), none of which may return a protected file's bytes."""

import email.utils
import hashlib
import os
import textwrap
import time

import httpc
from conftest import run_surogatd

MARK = b"SECRET-MARKER-5c1e"  # in every file that must never be served
PASSWD = b"root:x:0:0"        # /etc/passwd's first line

# Files a default configuration must refuse: the path that reaches each.
SECRETS = {
    "x.php": b"<?php $db_password = 'x'; ?>",
    "Y.PHP": b"<?php upper case ?>",
    "x.phps": b"php source",
    "x.php.bak": b"backup of php",
    "x.inc": b"include",
    "config.inc.php": b"<?php config ?>",
    ".htaccess": b"Require all denied",
    ".htpasswd": b"admin:$apr1$",
    "sub/.htaccess": b"deny",
    ".git/config": b"[core]",
    ".git/HEAD": b"ref: refs/heads/main",
    ".env": b"DB_PASSWORD=x",
    "index.html~": b"old index",
    "notes.txt.bak": b"old notes",
    ".index.html.swp": b"vim swap",
    "docs/.hidden": b"hidden",
    "docs/x.php": b"<?php listed? ?>",
}


def make_tree(base):
    """A site under base/www, secrets inside and outside it; returns www."""
    www = base / "www"
    for d in ("site", "docs/inner", "sub", ".git", ".well-known/acme-challenge"):
        (www / d).mkdir(parents=True, exist_ok=True)
    (www / "index.html").write_bytes(b"<h1>home</h1>\n")
    (www / "style.css").write_bytes(b"body { color: black }\n")
    (www / "app.js").write_bytes(b"console.log(1);\n")
    (www / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
    (www / "readme.txt").write_bytes(b"0123456789abcdefghijklmnopqrstuvwxyz\n")
    (www / "empty.txt").write_bytes(b"")
    (www / "blob.xyz123").write_bytes(b"what is this")
    (www / "site" / "index.html").write_bytes(b"<h1>site</h1>\n")
    (www / "docs" / "a.txt").write_bytes(b"a")
    (www / "docs" / "b.txt").write_bytes(b"b")
    (www / "docs" / "we<ird> & name.txt").write_bytes(b"weird")
    (www / "docs" / "inner" / "c.txt").write_bytes(b"c")
    (www / ".well-known" / "acme-challenge" / "tok").write_bytes(b"acme-token")
    for path, text in SECRETS.items():
        (www / path).write_bytes(text + b"\n" + MARK + b"\n")
    out = base / "outside"
    out.mkdir()
    (out / "secret.txt").write_bytes(MARK + b" outside the root\n")
    (www / "escape").symlink_to("../outside")                  # a directory out of the root
    (www / "abs.txt").symlink_to(out / "secret.txt")            # absolute link out
    (www / "rel.txt").symlink_to("../outside/secret.txt")       # relative link out
    (www / "passwd").symlink_to("/etc/passwd")
    (www / "inside.txt").symlink_to("readme.txt")               # stays inside: fine
    (www / "innocent.txt").symlink_to("x.php")                  # inside, but to source
    (www / "gitlink").symlink_to(".git")                        # inside, to a dot-directory
    os.mkfifo(www / "fifo")                                     # must not hang a worker
    return www


def static(surogat, tmp_path, params=None, args=()):
    www = make_tree(tmp_path)
    return surogat(backend=str(www), params=params, args=args), www


def raw(sg, target, method="GET"):
    """The bytes answered to a request line sent exactly as given."""
    data = (b"%s %s HTTP/1.1\r\nHost: surogat.test\r\nConnection: close\r\n\r\n"
            % (method.encode(), target if isinstance(target, bytes) else target.encode()))
    return sg.exchange(data)


def status_of(resp_bytes):
    assert resp_bytes.startswith(b"HTTP/1.1 "), resp_bytes[:80]
    return int(resp_bytes[9:12])


def http_date(t):
    return email.utils.formatdate(t, usegmt=True)


# -- headers -----------------------------------------------------------------------


def test_types_validators_and_bodies(surogat, tmp_path):
    sg, www = static(surogat, tmp_path)
    for path, ctype in (("/style.css", "text/css"), ("/app.js", "text/javascript"),
                        ("/logo.png", "image/png"), ("/readme.txt", "text/plain"),
                        ("/index.html", "text/html"),
                        ("/blob.xyz123", "application/octet-stream")):
        r = sg.get(path)
        body = (www / path[1:]).read_bytes()
        assert r.status == 200, (path, r)
        assert r.body == body
        assert r.header("Content-Type") == ctype, (path, r.headers)
        assert r.header("Content-Length") == str(len(body))
        assert r.header("Accept-Ranges") == "bytes"
        st = os.stat(www / path[1:])
        assert r.header("Last-Modified") == http_date(st.st_mtime)
        etag = r.header("ETag")
        assert etag.startswith('"') and etag.endswith('"') and etag.endswith('-%x"' % st.st_size)
        assert not r.has("Cache-Control") and not r.has("Expires")  # no sfb_expires rule
        assert r.header("Server") == "surogat" and r.has("Date")
    r = sg.get("/empty.txt")
    assert r.status == 200 and r.body == b"" and r.header("Content-Length") == "0"
    r = sg.get("/inside.txt")  # a symlink inside the root is followed
    assert r.status == 200 and r.body == (www / "readme.txt").read_bytes()
    assert sg.get("/.well-known/acme-challenge/tok").body == b"acme-token"
    assert sg.get("/nope.html").status == 404
    assert sg.get("/readme.txt/").status == 404
    st = sg.stats()
    assert st["sfb_req"] == 11 and st["cache_miss"] == 0 and st["n_object"] == 0
    assert st["sfb_not_found"] >= 2


def test_expires_and_mime_overrides(surogat, tmp_path):
    sg, _ = static(surogat, tmp_path, params={
        "sfb_expires": "image/*=30d, text/css=604800",
        "sfb_mime": "html=text/html; charset=utf-8,xyz123=application/x-test",
    })
    now = time.time()
    r = sg.get("/logo.png")
    assert r.header("Cache-Control") == "max-age=2592000"
    exp = email.utils.parsedate_to_datetime(r.header("Expires")).timestamp()
    assert abs(exp - (now + 2592000)) < 60
    r = sg.get("/style.css")
    assert r.header("Cache-Control") == "max-age=604800"
    r = sg.get("/index.html")
    assert r.header("Content-Type") == "text/html; charset=utf-8"
    assert not r.has("Cache-Control") and not r.has("Expires")
    assert sg.get("/blob.xyz123").header("Content-Type") == "application/x-test"


def test_bad_config_is_refused(tmp_path):
    p = run_surogatd(["-F", "-a", "127.0.0.1:0", "-b", str(tmp_path / "none")])
    assert p.returncode == 2 and "No such file or directory" in p.stderr, p.stderr
    p = run_surogatd(["-F", "-a", "127.0.0.1:0", "-b", str(tmp_path), "-p",
                      "sfb_expires=image/*=soon"])
    assert p.returncode == 2 and "image/*=soon" in p.stderr, p.stderr


# -- conditional requests, ranges, HEAD --------------------------------------------


def test_conditional_requests(surogat, tmp_path):
    sg, _ = static(surogat, tmp_path, params={"sfb_expires": "text/css=1h"})
    r = sg.get("/style.css")
    etag, lm = r.header("ETag"), r.header("Last-Modified")
    for hdrs in ({"If-None-Match": etag}, {"If-None-Match": '"x", ' + etag},
                 {"If-None-Match": "W/" + etag}, {"If-None-Match": "*"},
                 {"If-Modified-Since": lm},
                 {"If-Modified-Since": http_date(time.time() + 60)}):
        r = sg.get("/style.css", headers=hdrs)
        assert r.status == 304, (hdrs, r)
        assert r.body == b"" and r.header("ETag") == etag and r.header("Last-Modified") == lm
        assert r.header("Cache-Control") == "max-age=3600"
    for hdrs in ({"If-None-Match": '"other"'},
                 {"If-Modified-Since": http_date(time.time() - 86400 * 365)},
                 # If-None-Match wins over If-Modified-Since (RFC 9110 13.2.2)
                 {"If-None-Match": '"other"', "If-Modified-Since": lm}):
        r = sg.get("/style.css", headers=hdrs)
        assert r.status == 200 and r.body == b"body { color: black }\n", (hdrs, r)
    assert sg.stat("sfb_not_modified") == 6


def test_ranges(surogat, tmp_path):
    sg, www = static(surogat, tmp_path)
    data = (www / "readme.txt").read_bytes()
    n = len(data)
    etag = sg.get("/readme.txt").header("ETag")
    for rng, first, last in (("bytes=0-9", 0, 9), ("bytes=10-", 10, n - 1),
                             ("bytes=-5", n - 5, n - 1), ("bytes=30-1000", 30, n - 1),
                             ("bytes=-1000", 0, n - 1)):
        r = sg.get("/readme.txt", headers={"Range": rng})
        assert r.status == 206, (rng, r)
        assert r.body == data[first:last + 1]
        assert r.header("Content-Range") == "bytes %d-%d/%d" % (first, last, n)
        assert r.header("Content-Length") == str(last - first + 1)
    for rng in ("bytes=%d-" % n, "bytes=1000-2000", "bytes=-0"):
        r = sg.get("/readme.txt", headers={"Range": rng})
        assert r.status == 416, (rng, r)
        assert r.header("Content-Range") == "bytes */%d" % n and r.body == b""
    # several ranges, or junk: the whole body is always a valid answer
    for rng in ("bytes=0-1,5-6", "bytes=5-2", "lines=1-2", "bytes=x-y"):
        r = sg.get("/readme.txt", headers={"Range": rng})
        assert r.status == 200 and r.body == data, (rng, r)
    r = sg.get("/readme.txt", headers={"Range": "bytes=0-3", "If-Range": etag})
    assert r.status == 206 and r.body == data[:4]
    r = sg.get("/readme.txt", headers={"Range": "bytes=0-3", "If-Range": '"stale"'})
    assert r.status == 200 and r.body == data
    # a range of the empty file cannot be satisfied
    assert sg.get("/empty.txt", headers={"Range": "bytes=0-"}).status == 416


def test_head_and_keepalive(surogat, tmp_path):
    sg, www = static(surogat, tmp_path)
    with sg.conn() as c:
        c.request("HEAD", "/logo.png")
        r = c.read_final("HEAD")
        assert r.status == 200 and r.body == b""
        assert r.header("Content-Length") == str(len((www / "logo.png").read_bytes()))
        assert r.header("Content-Type") == "image/png"
        # the connection stays usable: HEAD sent no body bytes
        for path, want in (("/readme.txt", 200), ("/nope", 404), ("/x.php", 404),
                           ("/site", 301), ("/index.html", 200)):
            c.request("GET", path)
            r = c.read_final()
            assert r.status == want, (path, r)
            assert "close" not in r.tokens("Connection")
        c.request("HEAD", "/docs/")  # 403 without listing, still no body
        assert c.read_final("HEAD").status == 403
        c.request("GET", "/readme.txt", headers={"Connection": "close"})
        r = c.read_final()
        assert r.status == 200 and "close" in r.tokens("Connection")
        assert c.wait_closed(5)[0]


def test_methods_and_access_log(surogat, tmp_path):
    sg, _ = static(surogat, tmp_path, params={"access_log": "access.log"})
    methods = ("POST", "PUT", "DELETE", "OPTIONS", "PATCH", "PURGE")
    for m in methods:
        r = sg.request(m, "/readme.txt", body=b"x" if m in ("POST", "PUT") else None)
        assert r.status == 405 and r.header("Allow") == "GET, HEAD", (m, r)
        assert b"0123456789" not in r.body
    assert sg.get("/readme.txt").status == 200
    lines = sg.wait_access_lines(len(methods) + 1)
    assert all(ln.endswith(" default STATIC") for ln in lines), lines
    # workers buffer their lines: the order across them is not the requests' order
    assert sum('"GET /readme.txt HTTP/1.1" 200 37 ' in ln for ln in lines) == 1, lines
    assert sum('" 405 ' in ln for ln in lines) == len(methods), lines


# -- directories --------------------------------------------------------------------


def test_index_and_redirects(surogat, tmp_path):
    sg, _ = static(surogat, tmp_path, params={"sfb_index": "default.htm, index.html"})
    assert sg.get("/").body == b"<h1>home</h1>\n"
    r = sg.get("/site")
    assert r.status == 301 and r.header("Location") == "/site/"
    r = sg.get("/site?a=1&b=2")
    assert r.status == 301 and r.header("Location") == "/site/?a=1&b=2"
    r = sg.get("//site")  # never a protocol-relative "//site/"
    assert r.status == 301 and r.header("Location") == "/site/"
    r = sg.get("/site/")
    assert r.status == 200 and r.body == b"<h1>site</h1>\n"
    assert r.header("Content-Type") == "text/html"
    r = sg.get("/docs/")  # no index, no listing
    assert r.status == 403 and b"a.txt" not in r.body
    assert sg.get("/docs/inner/c.txt").body == b"c"


def test_listing(surogat, tmp_path):
    sg, _ = static(surogat, tmp_path, params={"sfb_listing": "on", "sfb_cache_check": "0s"})
    r = sg.get("/docs/")
    assert r.status == 200 and r.header("Content-Type") == "text/html; charset=utf-8"
    page = r.body
    for want in (b'href="a.txt"', b'href="b.txt"', b'href="inner/"', b'href="../"',
                 b"we&lt;ird&gt; &amp; name.txt", b'href="we%3Cird%3E%20%26%20name.txt"'):
        assert want in page, (want, page)
    assert b".hidden" not in page and b"x.php" not in page and MARK not in page
    assert page.index(b"a.txt") < page.index(b"b.txt") < page.index(b"inner/")
    # the links lead back to the files
    assert sg.get("/docs/we%3Cird%3E%20%26%20name.txt").body == b"weird"
    # an index file still wins
    assert sg.get("/site/").body == b"<h1>site</h1>\n"
    r = sg.get("/")
    assert r.body == b"<h1>home</h1>\n"
    # the root without an index: listed, dotfiles and source left out
    os.unlink(tmp_path / "www" / "index.html")
    r = sg.get("/")
    assert r.status == 200 and b'href="readme.txt"' in r.body and b'href="../"' not in r.body
    for bad in (b".git", b".env", b"x.php", b".htaccess", b"index.html~", MARK):
        assert bad not in r.body, bad


# -- large files, changes on disk ---------------------------------------------------


def test_large_file_sendfile(surogat, tmp_path):
    sg, www = static(surogat, tmp_path, params={"sfb_cache_check": "1h"})
    big = os.urandom(20 << 20)
    (www / "big.bin").write_bytes(big)
    want = hashlib.sha256(big).hexdigest()
    for _ in range(2):
        r = sg.get("/big.bin", timeout=60)
        assert r.status == 200 and r.header("Content-Length") == str(len(big))
        assert hashlib.sha256(r.body).hexdigest() == want
    off = 10 << 20
    r = sg.get("/big.bin", headers={"Range": "bytes=%d-%d" % (off, off + 99999)})
    assert r.status == 206 and r.body == big[off:off + 100000]
    r = sg.get("/big.bin", headers={"Range": "bytes=-7"})
    assert r.body == big[-7:]
    st = sg.stats()
    assert st["sfb_sendfile_bytes"] == 2 * len(big) + 100000 + 7
    assert st["sfb_cache_hit"] >= 2  # opened once, then from the open-file cache


def test_file_changes_are_seen(surogat, tmp_path):
    sg, www = static(surogat, tmp_path, params={"sfb_cache_check": "0s"})
    r1 = sg.get("/readme.txt")
    (www / "readme.txt").write_bytes(b"new content, longer than before\n")
    r2 = sg.get("/readme.txt")
    assert r2.body == b"new content, longer than before\n"
    assert r2.header("ETag") != r1.header("ETag")
    # replaced by rename, same size: a new inode and mtime
    tmp = www / "readme.tmp"
    tmp.write_bytes(b"NEW content, longer than before\n")
    os.utime(tmp, (time.time() + 5, time.time() + 5))
    os.rename(tmp, www / "readme.txt")
    assert sg.get("/readme.txt").body == b"NEW content, longer than before\n"
    os.unlink(www / "readme.txt")
    assert sg.get("/readme.txt").status == 404


def test_open_file_cache_bounded(surogat, tmp_path):
    sg, www = static(surogat, tmp_path, params={"sfb_cache_entries": "4"})
    for i in range(12):
        (www / ("f%d.txt" % i)).write_bytes(b"%d" % i)
    for rnd in range(2):
        for i in range(12):
            assert sg.get("/f%d.txt" % i).body == b"%d" % i
    st = sg.stats()
    assert st["sfb_cache_evict"] >= 24 - 4 and st["sfb_cache_miss"] == 24


def test_deliver_hook_runs(surogat, tmp_path):
    www = make_tree(tmp_path)
    pol = tmp_path / "policy.lua"
    pol.write_text(textwrap.dedent("""
        function deliver(req, resp)
            resp.http["X-Static"] = tostring(resp.status)
            if req.url == "/style.css?gone" then return surogat.synth(410, "gone") end
        end
        """))
    sg = surogat(backend=str(www), args=["-f", str(pol)])
    r = sg.get("/readme.txt")
    assert r.status == 200 and r.header("X-Static") == "200" and r.body.startswith(b"0123")
    r = sg.get("/readme.txt", headers={"Range": "bytes=0-1"})
    assert r.status == 206 and r.header("X-Static") == "206" and r.body == b"01"
    r = sg.get("/style.css?gone")
    assert r.status == 410 and b"body {" not in r.body


# -- attacks --------------------------------------------------------------------------

ATTACKS = [
    "/../etc/passwd",
    "/../../../../../../etc/passwd",
    "/%2e%2e/etc/passwd",
    "/%2E%2E/%2E%2E/etc/passwd",
    "/%2e%2e%2fetc%2fpasswd",
    "/..%2fetc%2fpasswd",
    "/.%2e/etc/passwd",
    "/%2e./etc/passwd",
    "/%252e%252e/etc/passwd",
    "/%252e%252e%252fetc%252fpasswd",
    "/%c0%ae%c0%ae/etc/passwd",
    "/%c0%ae%c0%ae%c0%afetc%c0%afpasswd",
    "/%e0%80%ae%e0%80%ae/etc/passwd",
    "/%f0%80%80%ae%f0%80%80%ae/etc/passwd",
    "/..\\..\\etc\\passwd",
    "/..%5c..%5cetc%5cpasswd",
    "/%5c..%5cescape/secret.txt",
    "/sub/../../etc/passwd",
    "/./.././etc/passwd",
    "//../etc/passwd",
    "/.well-known/../x.php",
    "http://surogat.test/../etc/passwd",
    "/passwd",
    "/escape/secret.txt",
    "/escape/",
    "/abs.txt",
    "/rel.txt",
    "/x.php",
    "/Y.PHP",
    "/x.PhP",
    "/x.phps",
    "/x.php.bak",
    "/x.php%00.html",
    "/x.php%00",
    "/x.php/",
    "/x.php?download=1",
    "/x.php.",
    "/x.inc",
    "/config.inc.php",
    "/.htaccess",
    "/%2ehtaccess",
    "/.HTACCESS",
    "/.htpasswd",
    "/sub/.htaccess",
    "/.git/config",
    "/.git/",
    "/.git%2fconfig",
    "/.git/HEAD",
    "/.env",
    "/index.html~",
    "/index.html%7e",
    "/notes.txt.bak",
    "/.index.html.swp",
    "/docs/.hidden",
    "/docs/x.php",
    "/docs/..;/x.php",
    "/index.html%00.txt",
    "/readme.txt%0d%0aX-Injected:%201",
    "/fifo",
    "/innocent.txt",
    "/gitlink/config",
    "/gitlink/HEAD",
]


def test_attacks_refused(surogat, tmp_path):
    """Each attack is answered 400, 403, 404 (or 414), never with a protected byte."""
    assert len(ATTACKS) >= 30
    sg, _ = static(surogat, tmp_path, params={"sfb_listing": "on"})
    bad = []
    for target in ATTACKS:
        for method in ("GET", "HEAD"):
            out = raw(sg, target, method)
            st = status_of(out)
            if st not in (400, 403, 404, 414) or MARK in out or PASSWD in out \
                    or b"X-Injected" in out.split(b"\r\n\r\n")[0]:
                bad.append((method, target, out[:300]))
    # raw bytes no client would send: a NUL and a bare backslash in the request line
    for target in (b"/x.php\x00.html", b"/..\\x.php"):
        out = raw(sg, target)
        if status_of(out) not in (400, 404) or MARK in out:
            bad.append(("GET", target, out[:300]))
    assert not bad, "\n".join("%s %r -> %r" % b for b in bad)
    # the same daemon serves what it should: the refusals above were not blanket ones
    assert sg.get("/readme.txt").status == 200
    assert sg.get("/.well-known/acme-challenge/tok").body == b"acme-token"
    assert sg.get("/docs/a.txt").body == b"a"
    st = sg.stats()
    assert st["sfb_bad_path"] >= 20 and st["sfb_denied"] >= 20 and st["sfb_forbidden"] >= 4
    assert sg.alive()


def test_custom_deny_and_follow_symlinks(surogat, tmp_path):
    sg, _ = static(surogat, tmp_path, params={"sfb_deny": "*.txt, !a.txt",
                                               "sfb_follow_symlinks": "on"})
    assert sg.get("/readme.txt").status == 404
    assert sg.get("/docs/a.txt").status == 200  # the '!' exception
    assert sg.get("/docs/b.txt").status == 404
    assert sg.get("/inside.txt").status == 404  # a link to a denied name
    assert sg.get("/style.css").status == 200
    assert sg.get("/x.php").status == 200  # the list given replaces the default one
    # with follow_symlinks on, a link out of the root is served: the default refusal is real
    assert sg.get("/escape/secret.txt").status == 404  # still *.txt
    assert sg.get("/abs.txt").status == 404
    sg2, _ = static(surogat, tmp_path / "b", params={"sfb_follow_symlinks": "on"})
    r = sg2.get("/escape/secret.txt")
    assert r.status == 200 and MARK in r.body
    # ".." stays refused whatever follow_symlinks says
    assert status_of(raw(sg2, "/../outside/secret.txt")) == 400


def test_concurrent_reads_while_files_change(surogat, tmp_path):
    """Many clients while files are replaced (rename) and the small cache churns:
    every answer is one whole version, with its own length and validator."""
    import threading

    sg, www = static(surogat, tmp_path, params={"sfb_cache_check": "0s",
                                                 "sfb_cache_entries": "3"})
    versions = {
        "/v.txt": [b"a" * 100, b"b" * 200],
        "/v.bin": [b"c" * 100000, b"d" * 150000],  # past sfb_mem_max: sendfile
    }
    for path, v in versions.items():
        (www / path[1:]).write_bytes(v[0])
    stop = threading.Event()
    errors = []

    def writer():
        i = 0
        while not stop.is_set():
            i += 1
            for path, v in versions.items():
                tmp = www / (path[1:] + ".new")
                tmp.write_bytes(v[i % 2])
                os.rename(tmp, www / path[1:])
            time.sleep(0.002)

    def reader(n):
        try:
            with sg.conn(timeout=20) as c:
                for k in range(40):
                    path = ("/v.txt", "/v.bin", "/readme.txt", "/style.css")[(n + k) % 4]
                    c.request("GET", path)
                    r = c.read_final()
                    ok = r.status == 200 and r.header("Content-Length") == str(len(r.body))
                    if path in versions:
                        ok = ok and r.body in versions[path] and \
                            r.header("ETag").endswith('-%x"' % len(r.body))
                    if not ok:
                        errors.append((path, r.status, r.headers, r.body[:20]))
        except Exception as e:  # pylint: disable=broad-except
            errors.append(repr(e))

    w = threading.Thread(target=writer)
    w.start()
    readers = [threading.Thread(target=reader, args=(n,)) for n in range(8)]
    for t in readers:
        t.start()
    for t in readers:
        t.join(60)
    stop.set()
    w.join(10)
    assert not any(t.is_alive() for t in readers)
    assert not errors, errors[:5]
    st = sg.stats()
    assert st["sfb_req"] == 320 and st["sfb_cache_evict"] > 0
    assert sg.alive()


def test_backend_list_and_health(surogat, tmp_path):
    sg, _ = static(surogat, tmp_path)
    p = sg.ctl("backend.list")
    assert p.returncode == 0
    row = [ln for ln in p.stdout.splitlines() if ln.startswith("default ")]
    assert len(row) == 1 and "(static)" in row[0] and "healthy" in row[0], p.stdout
    assert sg.ctl("backend.set_health", "default", "sick").returncode == 0
    r = sg.get("/readme.txt")
    assert r.status == 503 and b"0123456789" not in r.body
    assert sg.ctl("backend.set_health", "default", "auto").returncode == 0
    assert sg.get("/readme.txt").status == 200


def test_over_tls(surogat, tmp_path):
    """A TLS session cannot use sendfile(2): large files go through tls_sendfile(), small
    ones with the head in one record; the bytes are the file's either way."""
    from conftest import free_port
    from t_tls_test import CURL, Pki, run

    (tmp_path / "pki").mkdir()
    crt, key, _ = Pki(tmp_path / "pki").issue("a.test", ["a.test"])
    www = make_tree(tmp_path)
    big = os.urandom((6 << 20) + 3)
    (www / "big.bin").write_bytes(big)
    port = free_port()
    sg = surogat(backend=str(www), params={"sfb_cache_check": "1h"},
                 args=["-a", "127.0.0.1:%d,tls,cert=%s,key=%s" % (port, crt, key)])
    curl = [CURL, "-sS", "--max-time", "30", "--cacert", str(tmp_path / "pki" / "ca.crt"),
            "--resolve", "a.test:%d:127.0.0.1" % port]
    out = tmp_path / "big.out"
    run(curl + ["-o", str(out), "https://a.test:%d/big.bin" % port], timeout=40)
    assert hashlib.sha256(out.read_bytes()).hexdigest() == hashlib.sha256(big).hexdigest()
    p = run(curl + ["-r", "1000000-1000009", "https://a.test:%d/big.bin" % port])
    assert p.stdout == big[1000000:1000010]
    p = run(curl + ["https://a.test:%d/readme.txt" % port])
    assert p.stdout == (www / "readme.txt").read_bytes()
    p = run(curl + ["-o", "/dev/null", "-w", "%{http_code}", "--path-as-is",
                    "https://a.test:%d/../etc/passwd" % port])
    assert p.stdout == b"400"
    assert sg.stat("sfb_sendfile_bytes") == len(big) + 10
