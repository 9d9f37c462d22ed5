"""Content codings for cached objects: a compressible object is stored once,
in the first coding of compress_formats (br by default), and each client
gets the coding its Accept-Encoding prefers among what can be made from it
-- the stored bytes, or a body made on the fly (decoded, and encoded again)
-- with Vary and a weak ETag per coding.  A client that keeps needing a
coding the object does not hold is served from a copy kept beside it
(compress_copy_after): counted against the store, evicted like any object,
and gone with its object (purge, ban, tag purge, eviction), also while it
is being made; a file store does not bring copies back after a restart.
Every body is decoded with Python's zlib, brotli and zstandard and
compared with the origin's byte for byte."""

import os
import socket
import time

import brotli
import pytest
import zstandard

import httpc
from codings import decode, html_page as page
from cstatus import forwarded, is_hit

CC60 = {"Cache-Control": "max-age=60", "Content-Type": "text/html"}


def get(sg, path, ae=None, headers=None, method="GET", **kw):
    h = dict(headers or {})
    if ae is not None:
        h["Accept-Encoding"] = ae
    return sg.request(method, path, headers=h, **kw)


def check(r, coding, content, why=""):
    """A 200 in `coding` (None: identity) whose body decodes to content, varying on
    Accept-Encoding."""
    assert r.status == 200, (why, r)
    assert r.header("Content-Encoding") == coding, (why, r.headers)
    assert decode(coding, r.body) == content, "body differs (%s)" % coding
    assert "accept-encoding" in r.tokens("Vary"), r.headers


PAGE = page(20000)


def stored_br(origin, surogat, path="/p", body=PAGE, headers=None, params=None, **kw):
    origin.route(path, body=body, headers={**CC60, **(headers or {})})
    sg = surogat(params=params, **kw)
    r = get(sg, path, "br, gzip")
    check(r, "br", body)
    assert forwarded(r.header("Cache-Status"), stored=True), r
    return sg


# -- item: stored once, in the coding each client prefers ----------------------------------


def test_stored_br_each_client_its_coding(origin, surogat):
    sg = stored_br(origin, surogat)
    assert origin.last("/p").header("Accept-Encoding") == "br, gzip", \
        "a miss offers the backend compress_formats and gzip"
    st = sg.stats()
    assert st["br_compressed"] == 1 and st["gzip_compressed"] == 0
    for ae, coding in [("br", "br"),
                       ("gzip, deflate, br, zstd", "br"),
                       ("gzip;q=0.5, br;q=0.1", "br"),   # the stored coding, taken, wins
                       ("gzip", "gzip"),                  # made from br on the fly
                       ("deflate, gzip;q=0.8", "gzip"),
                       ("zstd", None),                    # not in compress_formats
                       (None, None),
                       ("", None),
                       ("identity", None),
                       ("br;q=0.2, identity;q=0.9", None),  # identity preferred
                       ("br;q=0, *", "gzip"),
                       ("*;q=0, identity;q=0", None)]:    # nothing acceptable: identity all the same
        r = get(sg, "/p", ae)
        check(r, coding, PAGE, ae)
        assert is_hit(r), r
    assert origin.hits("/p") == 1
    # 9 clients needed gzip or identity: made on the fly until a copy was kept in each.
    st = sg.stats()
    assert st["transcode_delivered"] + st["copy_hit"] == 9, st
    assert st["copy_made"] == 2 and st["n_copy"] == 2 and st["gunzip_delivered"] == 0, st


def test_apache_page_stored_once_each_client_its_coding(apache, surogat):
    """The real Apache (no mod_deflate: identity) behind the defaults: one
    backend request, the page stored br, every client its coding, byte for
    byte, and the identity clients served from a copy once they keep coming."""
    page_ = page(60000, seed=11)
    p = apache.root / "htdocs" / "codings.html"
    p.write_bytes(page_)
    os.chmod(p, 0o644)
    old = time.time() - 7 * 86400  # heuristic freshness: 10% of a week
    os.utime(p, (old, old))
    base = apache.requests("/codings.html")
    sg = surogat(backend=apache.addr)
    r = get(sg, "/codings.html", "gzip, deflate, br, zstd")
    check(r, "br", page_)
    assert forwarded(r.header("Cache-Status"), stored=True), r
    assert len(r.body) < len(page_) // 3, "compressible HTML barely compressed"
    for ae, coding in [("br", "br"), ("gzip", "gzip"), ("zstd;q=1, gzip;q=0.5", "gzip"),
                       (None, None), ("identity", None), (None, None)]:
        r = get(sg, "/codings.html", ae)
        check(r, coding, page_, ae)
        assert is_hit(r), r
    assert apache.requests("/codings.html") == base + 1
    st = sg.stats()
    assert st["br_compressed"] == 1 and st["copy_made"] >= 1 and st["copy_hit"] >= 1, st


def test_zstd_first_in_compress_formats(origin, surogat):
    origin.route("/z", body=PAGE, headers=CC60)
    sg = surogat(params={"compress_formats": "zstd gzip br"})
    check(get(sg, "/z", "gzip, zstd"), "zstd", PAGE)
    assert origin.last("/z").header("Accept-Encoding") == "zstd, gzip, br"
    assert sg.stat("zstd_compressed") == 1
    check(get(sg, "/z", "br"), "br", PAGE)
    check(get(sg, "/z", "gzip"), "gzip", PAGE)
    check(get(sg, "/z", None), None, PAGE)


def test_etag_weak_per_coding_and_304(origin, surogat):
    sg = stored_br(origin, surogat, headers={"ETag": '"v1"'})
    tags = {}
    for ae, coding in [("br", "br"), ("gzip", "gzip"), (None, None)]:
        r = get(sg, "/p", ae)
        check(r, coding, PAGE)
        tags[coding] = r.header("ETag")
    assert tags == {"br": 'W/"v1-br"', "gzip": 'W/"v1"', None: 'W/"v1"'}
    # Each coding's validator matches its own representation only.
    r = get(sg, "/p", "br", {"If-None-Match": 'W/"v1-br"'})
    assert r.status == 304 and r.header("ETag") == 'W/"v1-br"', r
    r = get(sg, "/p", "gzip", {"If-None-Match": 'W/"v1-br"'})
    check(r, "gzip", PAGE)
    r = get(sg, "/p", "gzip", {"If-None-Match": 'W/"v1"'})
    assert r.status == 304, r
    r = get(sg, "/p", None, {"If-None-Match": '"v1"'})  # weak comparison
    assert r.status == 304, r
    assert origin.hits("/p") == 1


def test_range_stored_coding_and_made(origin, surogat):
    sg = stored_br(origin, surogat)
    whole = get(sg, "/p", "br").body
    r = get(sg, "/p", "br", {"Range": "bytes=10-99"})
    assert r.status == 206 and r.body == whole[10:100], r
    assert r.header("Content-Range") == "bytes 10-99/%d" % len(whole)
    # A body made on the fly has no length before its end: the whole 200.
    r = get(sg, "/p", "gzip", {"Range": "bytes=10-99"})
    check(r, "gzip", PAGE)


def test_head_in_each_coding(origin, surogat):
    sg = stored_br(origin, surogat)
    for ae, coding in [("br", "br"), ("gzip", "gzip"), (None, None)]:
        r = get(sg, "/p", ae, method="HEAD")
        assert r.status == 200 and r.body == b"" and r.header("Content-Encoding") == coding, r


def test_backend_br_checked_and_stored_as_is(origin, surogat):
    enc = brotli.compress(PAGE, quality=9)
    origin.route("/b", body=enc, headers={**CC60, "Content-Encoding": "br", "ETag": '"o1"'})
    sg = surogat()
    r = get(sg, "/b", "br")
    assert r.body == enc and r.header("ETag") == '"o1"', r  # the backend's own bytes
    assert sg.stat("br_backend") == 1 and sg.stat("br_compressed") == 0
    check(get(sg, "/b", "gzip"), "gzip", PAGE)
    r = get(sg, "/b", None)
    check(r, None, PAGE)
    assert r.header("ETag") == 'W/"o1"', r
    # The miss's own client without br gets its coding made from the backend's bytes.
    origin.route("/b2", body=enc, headers={**CC60, "Content-Encoding": "br"})
    check(get(sg, "/b2", "gzip"), "gzip", PAGE)
    check(get(sg, "/b2", "br"), "br", PAGE)
    origin.route("/b3", body=enc, headers={**CC60, "Content-Encoding": "br"})
    check(get(sg, "/b3", None), None, PAGE)
    check(get(sg, "/b3", "br"), "br", PAGE)
    assert origin.hits("/b") == 1 and origin.hits("/b2") == 1 and origin.hits("/b3") == 1


@pytest.mark.parametrize("ae,coding", [("gzip", "gzip"), (None, None), ("zstd, gzip;q=0.5", "gzip"),
                                       ("br", "br")])
def test_miss_client_gets_its_coding(origin, surogat, ae, coding):
    """The client whose miss fetches the object gets what a hit would give it: the
    compressor's output, the backend's bytes, or a second encoder's."""
    origin.route("/m", body=PAGE, headers=CC60)
    sg = surogat()
    r = get(sg, "/m", ae)
    check(r, coding, PAGE, ae)
    assert forwarded(r.header("Cache-Status"), stored=True), r
    check(get(sg, "/m", "br"), "br", PAGE)  # stored br whatever the first client took
    check(get(sg, "/m", ae), coding, PAGE, ae)
    assert origin.hits("/m") == 1


@pytest.mark.parametrize("coding", ["br", "zstd"])
def test_corrupt_backend_coding_never_stored(origin, surogat, coding):
    good = brotli.compress(PAGE) if coding == "br" else zstandard.ZstdCompressor().compress(PAGE)
    bad = good[:len(good) // 2] + bytes(64) + good[len(good) // 2 + 64:]
    origin.route("/c", body=bad, headers={**CC60, "Content-Encoding": coding})
    sg = surogat()
    r = None
    try:
        r = get(sg, "/c", None)
    except httpc.Incomplete:
        pass  # the head was out: a cut connection
    assert r is None or r.status == 502, r
    origin.route("/c", body=good, headers={**CC60, "Content-Encoding": coding})
    check(get(sg, "/c", None), None, PAGE)
    assert origin.hits("/c") == 2, "the corrupt body was not stored"


def test_coalesced_clients_each_their_coding(origin, surogat):
    """Clients that join a fetch in progress read the growing object in their own
    coding, made as the bytes arrive."""
    origin.route("/s", body=PAGE, headers=CC60, hold_after=3000)
    sg = surogat()
    conns = []
    for ae in ("br", "gzip", None, "br"):
        c = sg.conn(timeout=15)
        c.request("GET", "/s", {"Accept-Encoding": ae} if ae else {})
        conns.append((c, ae))
        if len(conns) == 1:
            assert origin.routes["/s"].held.wait(10)
    time.sleep(0.3)
    origin.routes["/s"].release.set()
    for c, ae in conns:
        r = c.read_response()
        check(r, {"br": "br", "gzip": "gzip", None: None}[ae], PAGE)
        c.close()
    assert origin.hits("/s") == 1


def test_revalidation_asks_with_the_origins_etag(origin, surogat):
    origin.route("/r", body=PAGE, conditional=True,
                 headers={"Cache-Control": "max-age=1", "Content-Type": "text/html",
                          "ETag": '"e1"'})
    sg = surogat(params={"default_grace": "0s", "default_keep": "60s"})
    check(get(sg, "/r", "br"), "br", PAGE)
    time.sleep(1.3)
    r = get(sg, "/r", "br")
    check(r, "br", PAGE)
    assert origin.last("/r").header("If-None-Match") == 'W/"e1"', "our -br suffix not sent"
    assert r.header("ETag") == 'W/"e1-br"', r
    assert sg.stat("cache_revalidated") == 1
    check(get(sg, "/r", None), None, PAGE)


def test_gzip_support_off_accept_encoding_normalised(origin, surogat):
    """Without negotiation in the cache, a backend's Vary: Accept-Encoding splits
    objects by the coding each client prefers, not by the field's spelling."""
    def body(req):
        return b"for " + (req.header("Accept-Encoding") or "none").encode()
    origin.route("/v", body=body, headers={"Cache-Control": "max-age=60",
                                           "Vary": "Accept-Encoding"})
    sg = surogat(params={"http_gzip_support": "off"})
    for ae, want in [("gzip, deflate", b"for gzip"), ("deflate, gzip", b"for gzip"),
                     ("gzip", b"for gzip"), ("x-gzip;q=0.5", b"for gzip"),
                     ("br, gzip", b"for br"), ("gzip, deflate, br, zstd", b"for br"),
                     ("zstd", b"for zstd"), (None, b"for none"), ("deflate", b"for none"),
                     ("identity", b"for none")]:
        r = get(sg, "/v", ae)
        assert r.status == 200 and r.body == want, (ae, r)
    assert origin.hits("/v") == 4


# -- item: copies for clients that need another coding -------------------------------------


def test_identity_copy_after_two(origin, surogat):
    sg = stored_br(origin, surogat, headers={"ETag": '"c1"'})
    r = get(sg, "/p", None)  # made on the fly: demand 1
    check(r, None, PAGE)
    assert sg.stat("n_copy") == 0
    r = get(sg, "/p", None)  # made on the fly, and kept
    check(r, None, PAGE)
    st = sg.stats()
    assert st["copy_made"] == 1 and st["n_copy"] == 1 and st["copy_bytes"] == len(PAGE), st
    assert st["sto_bytes"] >= len(PAGE) + st["copy_bytes"] // 10, "counted in the store"
    transcoded = st["transcode_delivered"]
    for _ in range(3):
        r = get(sg, "/p", None)
        check(r, None, PAGE)
        assert is_hit(r) and r.header("ETag") == 'W/"c1"', r
        assert int(r.header("Content-Length")) == len(PAGE), "a copy has its length"
    st = sg.stats()
    assert st["copy_hit"] == 3 and st["transcode_delivered"] == transcoded
    # Range and 304 work on the copy.
    r = get(sg, "/p", None, {"Range": "bytes=100-199"})
    assert r.status == 206 and r.body == PAGE[100:200], r
    assert r.header("Content-Range") == "bytes 100-199/%d" % len(PAGE)
    assert get(sg, "/p", None, {"If-None-Match": 'W/"c1"'}).status == 304
    # br clients still get the stored bytes; one backend fetch in all.
    check(get(sg, "/p", "br"), "br", PAGE)
    assert origin.hits("/p") == 1


def test_gzip_copy_for_gzip_clients(origin, surogat):
    sg = stored_br(origin, surogat, params={"compress_copy_after": "1"})
    check(get(sg, "/p", "gzip"), "gzip", PAGE)
    assert sg.stat("n_copy") == 1
    r = get(sg, "/p", "gzip, deflate")
    check(r, "gzip", PAGE)
    assert sg.stat("copy_hit") == 1
    # An identity client decodes the gzip copy or the br body: either way the page.
    check(get(sg, "/p", None), None, PAGE)


def test_copy_after_zero_never(origin, surogat):
    sg = stored_br(origin, surogat, params={"compress_copy_after": "0"})
    for _ in range(4):
        check(get(sg, "/p", None), None, PAGE)
    st = sg.stats()
    assert st["n_copy"] == 0 and st["copy_made"] == 0 and st["transcode_delivered"] == 4


def with_copy(origin, surogat, path="/p", headers=None, **kw):
    sg = stored_br(origin, surogat, path=path, headers=headers,
                   params={"compress_copy_after": "1", "ban_lurker_sleep": "0"}, **kw)
    check(get(sg, path, None), None, PAGE)
    st = sg.stats()
    assert st["n_copy"] == 1 and st["copy_bytes"] == len(PAGE), st
    return sg


def gone_with_object(sg, origin, path="/p", fetches=2):
    st = sg.stats()
    assert st["n_copy"] == 0 and st["copy_bytes"] == 0, st
    r = get(sg, path, None)
    check(r, None, PAGE)
    assert not is_hit(r), "the copy went with its object: %r" % r
    assert origin.hits(path) == fetches


def test_purge_drops_copies(origin, surogat):
    sg = with_copy(origin, surogat)
    r = sg.request("PURGE", "/p")
    assert r.status == 200 and b"Purged 1 object" in r.body, r
    gone_with_object(sg, origin)


def test_ban_drops_copies(origin, surogat):
    sg = with_copy(origin, surogat)
    p = sg.ctl("ban", "req.url ~ ^/p")
    assert p.returncode == 0, p.stderr
    # The next lookup finds the object banned; the copy goes when it is unlinked.
    r = get(sg, "/p", None)
    check(r, None, PAGE)
    assert not is_hit(r)
    assert sg.stat("bans_lookup_killed") == 1
    assert origin.hits("/p") == 2


def test_ban_lurker_drops_copies(origin, surogat):
    origin.route("/p", body=PAGE, headers=CC60)
    sg = surogat(params={"compress_copy_after": "1"})
    check(get(sg, "/p", "br"), "br", PAGE)
    check(get(sg, "/p", None), None, PAGE)
    assert sg.stat("n_copy") == 1
    assert sg.ctl("ban", "obj.http.content-type ~ html").returncode == 0
    sg.wait_stat("bans_lurker_killed", 1, timeout=10)
    gone_with_object(sg, origin)


def test_tag_purge_drops_copies(origin, surogat):
    sg = with_copy(origin, surogat, headers={"Surrogate-Key": "front news"})
    r = sg.request("PURGE", "/", headers={"Surrogate-Key": "news"})
    assert r.status == 200 and b"Purged 1 object" in r.body, r
    gone_with_object(sg, origin)


def test_expiry_drops_copies(origin, surogat):
    origin.route("/e", body=PAGE, headers={"Cache-Control": "max-age=1",
                                           "Content-Type": "text/html"})
    sg = surogat(params={"compress_copy_after": "1", "default_grace": "0s",
                         "default_keep": "0s"})
    check(get(sg, "/e", "br"), "br", PAGE)
    check(get(sg, "/e", None), None, PAGE)
    assert sg.stat("n_copy") == 1
    time.sleep(1.5)
    # Past all use: the next lookup drops the object, and its copy with it.
    r = get(sg, "/e", "br")
    check(r, "br", PAGE)
    assert not is_hit(r)
    st = sg.stats()
    assert st["n_copy"] == 0 and st["copy_bytes"] == 0 and st["n_object"] == 1, st


def test_newer_object_drops_old_copies(origin, surogat):
    sg = with_copy(origin, surogat)
    page2 = page(20000, seed=2)
    origin.route("/p", body=page2, headers=CC60)
    r = get(sg, "/p", "br", {"Cache-Control": "no-cache"})  # a refresh replaces the object
    check(r, "br", page2)
    assert sg.stat("n_copy") == 0
    check(get(sg, "/p", None), None, page2)


def test_copy_being_made_when_purged(origin, surogat):
    """A slow client holds a delivery that makes the copy; the object is purged
    meanwhile: the client still gets the whole page, the copy is dropped."""
    big = page(24 << 20, seed=5)
    origin.route("/big", body=big, headers=CC60)
    sg = surogat(params={"compress_copy_after": "1", "send_timeout": "30s"})
    r = get(sg, "/big", "br", timeout=60)
    check(r, "br", big)
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(60)
    s.connect(("127.0.0.1", sg.port))
    s.sendall(b"GET /big HTTP/1.1\r\nHost: surogat.test\r\n\r\n")
    got = bytearray(s.recv(65536))
    time.sleep(0.5)  # the delivery fills the socket and waits
    assert sg.stat("copy_made") == 0 and sg.stat("n_copy") == 0
    r = sg.request("PURGE", "/big")
    assert r.status == 200 and b"Purged 1 object" in r.body, r
    while not got.endswith(b"\r\n0\r\n\r\n"):
        b = s.recv(1 << 20)
        if not b:
            break
        got += b
    s.close()
    r = httpc.parse_responses(bytes(got))[0]
    assert r.status == 200 and r.header("Content-Encoding") is None, r
    assert r.body == big, "the slow client's page (%d of %d bytes)" % (len(r.body), len(big))
    sg.wait_stat("copy_dropped", 1, timeout=10)
    st = sg.stats()
    assert st["copy_made"] == 0 and st["n_copy"] == 0 and st["copy_bytes"] == 0, st


def test_eviction_under_a_small_store(origin, surogat):
    """Copies are counted against the store and evicted like objects; every client
    still gets its page."""
    pages = {"/e%d" % i: page(100 * 1024, seed=100 + i) for i in range(24)}
    for p, b in pages.items():
        origin.route(p, body=b, headers=CC60)
    sg = surogat(params={"compress_copy_after": "1"}, args=["-s", "malloc,2m"])
    for rnd in range(2):
        for p, b in pages.items():
            check(get(sg, p, "br"), "br", b)
            check(get(sg, p, None), None, b)
    st = sg.stats()
    print({k: st[k] for k in ("n_copy", "copy_bytes", "copy_made", "n_object",
                              "n_lru_nuked", "sto_bytes") if k in st})
    assert st["copy_made"] >= 20 and st["n_lru_nuked"] > 0, st
    assert st["copy_bytes"] == st["n_copy"] * 100 * 1024, st
    assert st["n_copy"] < 20, "copies evicted"
    used = sg.ctl("storage.list").stdout
    assert "size=2097152" in used.replace(" ", " "), used


def test_file_store_restart_forgets_copies(origin, surogat, tmp_path):
    spec = "file,%s,64m" % (tmp_path / "store")
    origin.route("/f", body=PAGE, headers=CC60)
    sg = surogat(args=["-s", spec], params={"compress_copy_after": "1"})
    check(get(sg, "/f", "br"), "br", PAGE)
    check(get(sg, "/f", None), None, PAGE)
    check(get(sg, "/f", None), None, PAGE)
    assert sg.stat("n_copy") == 1 and sg.stat("copy_hit") == 1
    assert sg.stop() == 0
    sg2 = surogat(args=["-s", spec], params={"compress_copy_after": "1"})
    assert sg2.stat("sto_recovered") == 1 and sg2.stat("n_copy") == 0
    r = get(sg2, "/f", None)
    check(r, None, PAGE)
    assert is_hit(r)
    assert sg2.stat("n_copy") == 1, "made again from the recovered object"
    r = get(sg2, "/f", None)
    check(r, None, PAGE)
    assert sg2.stat("copy_hit") == 1
    check(get(sg2, "/f", "br"), "br", PAGE)
    assert origin.hits("/f") == 1


def test_codings_and_copies_over_h2(origin, surogat):
    """The deliverer is one for both protocols: each coding, made or from a copy, with
    its length when it has one, over HTTP/2 too."""
    from conftest import free_port
    from h2util import H2
    port = free_port()
    origin.route("/p", body=PAGE, headers=CC60)
    sg = surogat(params={"compress_copy_after": "2"},
                 args=["-a", "127.0.0.1:%d,h2c" % port])
    check(get(sg, "/p", "br"), "br", PAGE)
    with H2(port) as c:
        for i, (ae, coding) in enumerate([("gzip", "gzip"), (None, None), (None, None),
                                          (None, None), ("br", "br"), ("gzip", "gzip")]):
            st = c.get("/p", authority="surogat.test",
                       headers=[("accept-encoding", ae)] if ae else [])
            assert st.status == 200, st
            assert st.header("content-encoding") == coding, (i, st.headers)
            assert decode(coding, bytes(st.data)) == PAGE, i
            assert "accept-encoding" in st.header("vary").lower()
            if i == 3:  # the identity copy: its length known
                assert st.header("content-length") == str(len(PAGE)), st.headers
    st = sg.stats()
    assert st["copy_made"] == 2 and st["copy_hit"] == 1, st  # identity, then gzip
    assert origin.hits("/p") == 1
