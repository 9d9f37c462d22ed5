"""The static-file backend (-b /DIR) compressing: precompressed siblings
(file.br, .zst, .gz) chosen by Accept-Encoding and q-values, compressible
files compressed once and kept (sfb_compress_cache, keyed by the file's
identity), Vary, per-coding ETags, 304, ranges, HEAD, files changing on
disk, the memory bound, concurrent first requests; every body is decoded
(Python's zlib, brotli and zstandard, and curl's own decoders) and
compared with the file byte for byte."""

import gzip
import os
import random
import subprocess
import threading
import time

import brotli
import zstandard

from codings import decode, html_page

PAGE_SIZE = 100 * 1024


def css(size, seed=2):
    rnd = random.Random(seed)
    props = ["color: #%06x" , "margin: %dpx", "padding: %dpx %dpx", "font-size: %drem",
             "border: 1px solid #%06x", "display: flex", "line-height: 1.%d"]
    out, n = [], 0
    while n < size:
        sel = ".c%d > .item-%d:hover" % (rnd.randrange(500), rnd.randrange(50))
        body = ";\n  ".join(p % tuple(rnd.randrange(0xffffff) for _ in range(p.count("%")))
                            for p in rnd.sample(props, 4))
        s = "%s {\n  %s;\n}\n" % (sel, body)
        out.append(s)
        n += len(s)
    return "".join(out).encode()[:size]


def site(tmp_path):
    www = tmp_path / "www"
    (www / "js").mkdir(parents=True)
    (www / "page.html").write_bytes(html_page(PAGE_SIZE))
    (www / "style.css").write_bytes(css(30 * 1024))
    (www / "small.txt").write_bytes(b"tiny\n")  # below gzip_min_size
    (www / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + os.urandom(8000))
    app = css(20 * 1024, seed=3)
    (www / "js" / "app.js").write_bytes(app)
    # Precompressed siblings, made differently from surogat's own (levels, no checksum),
    # so that the bytes tell which was sent.
    (www / "js" / "app.js.br").write_bytes(brotli.compress(app, quality=11))
    (www / "js" / "app.js.gz").write_bytes(gzip.compress(app, compresslevel=9, mtime=0))
    (www / "js" / "app.js.zst").write_bytes(zstandard.ZstdCompressor(level=19).compress(app))
    return www


def get(sg, path, ae=None, headers=None, method="GET"):
    h = dict(headers or {})
    if ae is not None:
        h["Accept-Encoding"] = ae
    return sg.request(method, path, headers=h)


def check(r, want_coding, content):
    assert r.status == 200, r
    assert r.header("Content-Encoding") == want_coding, r.headers
    assert int(r.header("Content-Length")) == len(r.body)
    assert decode(want_coding, r.body) == content


def test_codings_by_accept_encoding(surogat, tmp_path):
    www = site(tmp_path)
    sg = surogat(backend=str(www), params={"compress_formats": "br,zstd,gzip"})
    page = (www / "page.html").read_bytes()
    identity_etag = sg.get("/page.html").header("ETag")
    cases = [
        ("br", "br"), ("gzip", "gzip"), ("zstd", "zstd"), ("x-gzip", "gzip"),
        ("gzip, deflate, br, zstd", "br"),            # a browser: the server's order
        ("gzip, deflate", "gzip"),                    # over http, no br
        ("gzip;q=1, br;q=0.5", "gzip"),               # q-values rule
        ("zstd;q=0.9, br;q=0.8, gzip", "gzip"),
        ("br;q=0, *", "zstd"),                        # * is every other coding
        ("*", "br"),
        ("identity;q=1, gzip;q=0.5", None),           # identity preferred
        ("deflate", None), ("", None), (None, None),  # none we have
        ("br;q=2, gzip", "gzip"),                     # a malformed weight is ignored
    ]
    for ae, want in cases:
        r = get(sg, "/page.html", ae)
        check(r, want, page)
        assert r.tokens("Vary") == ["accept-encoding"], (ae, r.headers)
        etag = r.header("ETag")
        if want is None:
            assert etag == identity_etag and r.header("Accept-Ranges") == "bytes"
        else:
            # weak (the bytes are ours), distinct per coding
            assert etag == "W/" + identity_etag[:-1] + "-" + want + '"', (ae, etag)
            assert not r.has("Accept-Ranges")
    # Each coding compressed once for all those requests.
    st = sg.stats()
    assert st["sfb_compressed"] == 3, st["sfb_compressed"]
    assert st["sfb_compress_hit"] >= 8
    assert 0 < st["sfb_compress_bytes"] < len(page)


def test_not_compressed(surogat, tmp_path):
    www = site(tmp_path)
    sg = surogat(backend=str(www))
    for path in ("/small.txt", "/logo.png"):
        r = get(sg, path, "gzip, br, zstd")
        assert r.status == 200 and r.body == (www / path[1:]).read_bytes()
        assert not r.has("Content-Encoding") and not r.has("Vary"), (path, r.headers)
        assert r.header("Accept-Ranges") == "bytes"
    assert sg.stat("sfb_compressed") == 0
    # the default list: br and gzip, no zstd
    r = get(sg, "/page.html", "zstd")
    assert not r.has("Content-Encoding") and r.tokens("Vary") == ["accept-encoding"]
    check(get(sg, "/page.html", "zstd, gzip"), "gzip", (www / "page.html").read_bytes())


def test_gzip_types_changed_live(surogat, tmp_path):
    """Whether a file's type is compressible is kept with the open file; a new
    gzip_types list is obeyed from the next request on, both ways."""
    www = site(tmp_path)
    data = css(20 * 1024, seed=4)
    (www / "data.bin").write_bytes(data)
    sg = surogat(backend=str(www))
    for _ in range(2):  # the second answer comes from what was kept
        r = get(sg, "/data.bin", "gzip")
        assert r.body == data and not r.has("Content-Encoding") and not r.has("Vary"), r.headers
    ctype = r.header("Content-Type")
    p = sg.ctl("param.set", "gzip_types", "text/html " + ctype)
    assert p.returncode == 0, p.stderr
    check(get(sg, "/data.bin", "gzip"), "gzip", data)
    check(get(sg, "/data.bin", "gzip"), "gzip", data)
    p = sg.ctl("param.set", "gzip_types", "text/html")
    assert p.returncode == 0, p.stderr
    r = get(sg, "/data.bin", "gzip")
    assert r.body == data and not r.has("Content-Encoding") and not r.has("Vary"), r.headers


def test_precompressed_siblings(surogat, tmp_path):
    www = site(tmp_path)
    sg = surogat(backend=str(www), params={"compress_formats": "br,zstd,gzip"})
    app = (www / "js" / "app.js").read_bytes()
    for ae, coding, ext in (("br", "br", ".br"), ("gzip", "gzip", ".gz"), ("zstd", "zstd", ".zst"),
                            ("gzip, br", "br", ".br")):
        r = get(sg, "/js/app.js", ae)
        check(r, coding, app)
        # the sibling's own bytes, with a strong ETag of its own, and ranges
        assert r.body == (www / "js" / ("app.js" + ext)).read_bytes()
        etag = r.header("ETag")
        assert etag.startswith('"') and etag.endswith('-%s"' % coding), etag
        assert r.header("Accept-Ranges") == "bytes"
        assert r.header("Content-Type") == "text/javascript"
        assert r.tokens("Vary") == ["accept-encoding"]
    assert sg.stat("sfb_precompressed") == 4 and sg.stat("sfb_compressed") == 0
    # A Range of a precompressed file is a range of its bytes, as nginx does.
    br = (www / "js" / "app.js.br").read_bytes()
    r = get(sg, "/js/app.js", "br", {"Range": "bytes=10-99"})
    assert r.status == 206 and r.body == br[10:100]
    assert r.header("Content-Range") == "bytes 10-99/%d" % len(br)
    assert r.header("Content-Encoding") == "br"
    # The sibling's own path is served as a file of its own.
    r = get(sg, "/js/app.js.gz")
    assert r.status == 200 and r.body == (www / "js" / "app.js.gz").read_bytes()
    # Off: siblings ignored, the file compressed on the fly instead.
    sg2 = surogat(backend=str(www), params={"sfb_precompressed": "off"})
    r = get(sg2, "/js/app.js", "br")
    check(r, "br", app)
    assert r.body != br and r.header("ETag").startswith("W/")
    assert sg2.stat("sfb_precompressed") == 0 and sg2.stat("sfb_compressed") == 1


def test_stale_sibling_not_sent(surogat, tmp_path):
    www = site(tmp_path)
    app = www / "js" / "app.js"
    old = time.time() - 3600
    os.utime(www / "js" / "app.js.br", (old, old))  # made from an older version
    sg = surogat(backend=str(www), params={"sfb_cache_check": "0s"})
    r = get(sg, "/js/app.js", "br")
    check(r, "br", app.read_bytes())
    assert r.body != (www / "js" / "app.js.br").read_bytes()
    assert sg.stat("sfb_precompressed") == 0
    # gzip's sibling is fresh: served
    r = get(sg, "/js/app.js", "gzip")
    assert r.body == (www / "js" / "app.js.gz").read_bytes()
    # Regenerated: now it is.
    os.utime(www / "js" / "app.js.br", None)
    r = get(sg, "/js/app.js", "br")
    assert r.body == (www / "js" / "app.js.br").read_bytes()


def test_conditional_head_and_range(surogat, tmp_path):
    www = site(tmp_path)
    sg = surogat(backend=str(www))
    page = (www / "page.html").read_bytes()
    r = get(sg, "/page.html", "br")
    etag, lm = r.header("ETag"), r.header("Last-Modified")
    # 304 for the coding's own ETag, with Vary; another coding's does not match.
    r = get(sg, "/page.html", "br", {"If-None-Match": etag})
    assert r.status == 304 and r.body == b"" and r.header("ETag") == etag
    assert r.tokens("Vary") == ["accept-encoding"] and not r.has("Content-Encoding")
    r = get(sg, "/page.html", "gzip", {"If-None-Match": etag})
    assert r.status == 200 and r.header("Content-Encoding") == "gzip"
    assert get(sg, "/page.html", "br", {"If-Modified-Since": lm}).status == 304
    # HEAD: the coded length, no body.
    r = get(sg, "/page.html", "br", method="HEAD")
    assert r.status == 200 and r.body == b""
    assert r.header("Content-Encoding") == "br"
    assert int(r.header("Content-Length")) == len(get(sg, "/page.html", "br").body)
    # A Range with a coding compressed on the fly: the whole coded body, as nginx does,
    # so that no download resumes identity bytes after compressed ones.
    r = get(sg, "/page.html", "br", {"Range": "bytes=0-99"})
    check(r, "br", page)
    # Without a coding, ranges as ever.
    r = get(sg, "/page.html", None, {"Range": "bytes=0-99"})
    assert r.status == 206 and r.body == page[:100]


def test_file_changed_on_disk(surogat, tmp_path):
    www = site(tmp_path)
    sg = surogat(backend=str(www), params={"sfb_cache_check": "0s"})
    p = www / "style.css"
    check(get(sg, "/style.css", "br"), "br", p.read_bytes())
    new = css(40 * 1024, seed=9)
    tmp = www / "style.css.tmp"
    tmp.write_bytes(new)
    os.rename(tmp, p)  # a new inode, as deployments do
    r = get(sg, "/style.css", "br")
    check(r, "br", new)
    # rewritten in place, same size, new mtime
    new2 = bytes(reversed(new))
    time.sleep(0.02)
    p.write_bytes(new2)
    check(get(sg, "/style.css", "br"), "br", new2)
    st = sg.stats()
    assert st["sfb_compressed"] == 3
    # the old versions were dropped, not kept beside the new one
    assert st["sfb_compress_bytes"] == len(get(sg, "/style.css", "br").body)


def noisy_page(size, seed):
    """Text that compresses only about 2:1 (hex tokens), so copies take room."""
    rnd = random.Random(seed)
    out, n = [], 0
    while n < size:
        s = "<p>%08x %08x</p>\n" % (rnd.getrandbits(32), rnd.getrandbits(32))
        out.append(s)
        n += len(s)
    return "".join(out).encode()[:size]


def test_memory_bound(surogat, tmp_path):
    www = tmp_path / "www"
    www.mkdir()
    for i in range(12):
        (www / ("f%d.html" % i)).write_bytes(noisy_page(20 * 1024, seed=100 + i))
    # A file over a quarter of the bound is not compressed on the fly.
    sg = surogat(backend=str(www), params={"sfb_compress_cache": "64k"})
    r = get(sg, "/f0.html", "br")
    assert not r.has("Content-Encoding") and r.tokens("Vary") == []
    assert sg.stat("sfb_compressed") == 0
    sg.stop()
    # 12 copies of about 10 KiB each do not fit in 100 KiB: the oldest go.
    sg = surogat(backend=str(www), params={"sfb_compress_cache": "100k"})
    bodies = {}
    for _ in range(2):
        for i in range(12):
            r = get(sg, "/f%d.html" % i, "gzip")
            check(r, "gzip", (www / ("f%d.html" % i)).read_bytes())
            bodies.setdefault(i, r.body)
            assert r.body == bodies[i]  # the same bytes however often made
            assert sg.stat("sfb_compress_bytes") <= 100 * 1024
    st = sg.stats()
    assert st["sfb_compress_evict"] > 0
    assert st["sfb_compressed"] > 12  # made again after eviction
    # Off: nothing compressed on the fly.
    sg2 = surogat(backend=str(www), params={"sfb_compress_cache": "0"})
    r = get(sg2, "/f1.html", "gzip")
    assert not r.has("Content-Encoding") and not r.has("Vary")


def test_concurrent_first_requests(surogat, tmp_path):
    www = site(tmp_path)
    sg = surogat(backend=str(www))
    page = (www / "page.html").read_bytes()
    results, errors = [], []

    def worker():
        try:
            for _ in range(5):
                r = get(sg, "/page.html", "br")
                results.append((r.header("Content-Encoding"), decode(r.header("Content-Encoding"),
                                                                     r.body)))
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not errors, errors
    assert len(results) == 40 and all(body == page for _, body in results)
    st = sg.stats()
    # compressed once; requests that came while it was made got the file as it is
    assert st["sfb_compressed"] == 1
    assert st["sfb_compress_hit"] + st["sfb_compress_busy"] + 1 >= 40
    assert sum(1 for c, _ in results if c == "br") >= 40 - st["sfb_compress_busy"]


def test_curl_decodes(surogat, tmp_path):
    www = site(tmp_path)
    sg = surogat(backend=str(www), params={"compress_formats": "zstd,br,gzip"})
    url = "http://127.0.0.1:%d/page.html" % sg.port
    page = (www / "page.html").read_bytes()
    for ae, coding in (("br", "br"), ("zstd", "zstd"), ("gzip", "gzip"),
                       ("gzip, deflate, br, zstd", "zstd")):
        out = subprocess.run(["curl", "-sS", "--max-time", "10", "-D", "-", "-o", "-",
                              "-H", "Accept-Encoding: " + ae, url],
                             capture_output=True, timeout=20, check=True).stdout
        head, body = out.split(b"\r\n\r\n", 1)
        assert b"\r\ncontent-encoding: " + coding.encode() in head.lower(), head
        assert decode(coding, body) == page
        # curl's own decoder agrees
        dec = subprocess.run(["curl", "-sS", "--max-time", "10", "--compressed",
                              "-H", "Accept-Encoding: " + ae, url],
                             capture_output=True, timeout=20, check=True).stdout
        assert dec == page
