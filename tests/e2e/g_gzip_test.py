"""gzip: compressible responses are stored compressed once and negotiated per
client (http_gzip_support).  Bodies are checked byte for byte after
decompressing them with Python's zlib, against the real Apache (without
mod_deflate: it serves identity) and against scripted origins where the
backend must send gzip, send it broken, or hold its body."""

import gzip
import hashlib
import os
import random
import time
import zlib

import pytest

import httpc
from cstatus import forwarded, is_hit

@pytest.fixture
def surogat(surogat):
    """These tests are about gzip as the stored coding: compress_formats=gzip
    (br and zstd, and bodies made in another coding, are g_codecs_test.py's)."""
    def start(params=None, **kw):
        return surogat(params={"compress_formats": "gzip", **(params or {})}, **kw)
    return start


CC60 = {"Cache-Control": "max-age=60"}
GZ = {"Accept-Encoding": "gzip"}


def html(n, seed=1):
    """n bytes of compressible HTML-like text, different per seed."""
    rnd = random.Random(seed)
    words = [b"surogat", b"cache", b"<div class=\"x\">", b"</div>", b"gzip", b"proxy",
             b"<p>", b"</p>", b"varnish", b"\n", b"lorem", b"ipsum"]
    out = bytearray(b"<html><body>\n")
    while len(out) < n:
        out += rnd.choice(words) + b" " + str(rnd.randrange(1000)).encode() + b" "
    return bytes(out[:n])


def gunzip(b):
    """Decompress one gzip stream strictly: the whole input, CRC checked."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = d.decompress(b) + d.flush()
    assert d.eof and not d.unused_data, "not exactly one complete gzip stream"
    return out


def sha(b):
    return hashlib.sha256(b).hexdigest()


def vary_ae(r):
    return "accept-encoding" in r.tokens("Vary")


# -- the real Apache (no mod_deflate: it answers identity) ----------------------------------

PAGE = html(100 * 1024, seed=7)
CSS = html(5000, seed=8).replace(b"<", b"{")
TINY = b"<html>tiny</html>\n"


@pytest.fixture
def site(apache):
    """Files for these tests in the module's Apache, dated a week back so that
    the heuristic freshness (10% of their age) keeps them cached."""
    files = {"page.html": PAGE, "style.css": CSS, "tiny.html": TINY, "blob.bin": os.urandom(4000)}
    old = time.time() - 7 * 86400
    for name, data in files.items():
        p = apache.root / "htdocs" / name
        p.write_bytes(data)
        os.chmod(p, 0o644)
        os.utime(p, (old, old))
    return files


def apache_hits(apache, path, method="GET"):
    return apache.requests(path, method)


def test_apache_stored_once_served_both_ways(apache, site, surogat):
    sg = surogat(backend=apache.addr)
    base = apache_hits(apache, "/page.html")
    a = sg.get("/page.html", GZ)
    assert a.status == 200, a
    assert a.header("Content-Encoding") == "gzip"
    assert vary_ae(a)
    assert forwarded(a.header("Cache-Status"), stored=True)
    assert gunzip(a.body) == PAGE
    assert len(a.body) < len(PAGE) // 3, "compressible HTML barely compressed"
    # a hit for a gzip client: the stored bytes as they are, with a length
    b = sg.get("/page.html", {"Accept-Encoding": "gzip, deflate, br"})
    assert is_hit(b) and b.header("Content-Encoding") == "gzip"
    assert b.header("Content-Length") == str(len(b.body))
    assert gunzip(b.body) == PAGE
    # a client without gzip: gunzipped on the fly, identical bytes, same single object
    c = sg.get("/page.html")
    assert is_hit(c) and c.status == 200
    assert not c.has("Content-Encoding") and c.chunked and vary_ae(c)
    assert c.body == PAGE
    d = sg.get("/page.html", {"Accept-Encoding": "identity"})
    assert is_hit(d) and d.body == PAGE and not d.has("Content-Encoding")
    assert apache_hits(apache, "/page.html") == base + 1
    assert sg.stat("gzip_compressed") == 1
    assert sg.stat("gunzip_delivered") == 2
    assert sg.stat("gzip_errors") == 0
    assert sg.stat("gzip_bytes_in") == len(PAGE)
    assert sg.stat("gzip_bytes_out") == len(a.body)


def test_apache_etag_weakened_and_304(apache, site, surogat):
    sg = surogat(backend=apache.addr)
    direct = httpc.fetch(apache.port, path="/style.css")
    base = apache_hits(apache, "/style.css")
    strong = direct.header("ETag")
    assert strong and strong.startswith('"')
    a = sg.get("/style.css", GZ)
    assert a.header("Content-Encoding") == "gzip" and gunzip(a.body) == CSS
    assert a.header("ETag") == "W/" + strong
    b = sg.get("/style.css")
    assert b.body == CSS and b.header("ETag") == "W/" + strong
    for client in (GZ, {}):
        for tag in ("W/" + strong, strong):
            h = dict(client)
            h["If-None-Match"] = tag
            r = sg.get("/style.css", h)
            assert r.status == 304 and r.body == b"", (client, tag, r)
            assert r.header("ETag") == "W/" + strong
    # a weak validator cannot keep a Range (If-Range needs a strong match): 200 whole
    r = sg.get("/style.css", {"Accept-Encoding": "gzip", "Range": "bytes=0-9",
                              "If-Range": "W/" + strong})
    assert r.status == 200 and gunzip(r.body) == CSS
    assert apache_hits(apache, "/style.css") == base + 1


def test_apache_head_both_ways(apache, site, surogat):
    sg = surogat(backend=apache.addr)
    base = apache_hits(apache, "/page.html") + apache_hits(apache, "/page.html", "HEAD")
    with sg.conn() as c:
        c.request("HEAD", "/page.html", GZ)
        r = c.read_response("HEAD")
        assert r.status == 200 and r.header("Content-Encoding") == "gzip" and vary_ae(r)
        c.request("HEAD", "/page.html")
        r = c.read_response("HEAD")
        assert r.status == 200 and not r.has("Content-Encoding") and vary_ae(r)
        assert not r.has("Content-Length")
        # the connection is still in step: the next answer is the right one
        c.request("GET", "/page.html")
        assert c.read_response().body == PAGE
        c.request("GET", "/page.html", GZ)
        assert gunzip(c.read_response().body) == PAGE
    # one GET fetched it for the cache (a miss asks for the body even for HEAD)
    assert apache_hits(apache, "/page.html") + apache_hits(apache, "/page.html", "HEAD") \
        == base + 1


def test_apache_range_on_gzip_object(apache, site, surogat):
    sg = surogat(backend=apache.addr)
    assert sg.get("/page.html", GZ).status == 200
    # without gzip the gunzipped length is not known up front: the whole 200
    r = sg.get("/page.html", {"Range": "bytes=0-99"})
    assert r.status == 200 and r.body == PAGE and not r.has("Content-Range")
    # with gzip the range is of the stored gzip bytes, as sent whole before
    full = sg.get("/page.html", GZ).body
    r = sg.get("/page.html", {"Accept-Encoding": "gzip", "Range": "bytes=10-109"})
    assert r.status == 206 and r.body == full[10:110]
    assert r.header("Content-Range") == "bytes 10-109/%d" % len(full)


def test_apache_small_and_binary_not_compressed(apache, site, surogat):
    sg = surogat(backend=apache.addr)
    for path, body in (("/tiny.html", TINY), ("/blob.bin", site["blob.bin"])):
        for _ in range(2):
            r = sg.get(path, GZ)
            assert r.status == 200 and r.body == body, path
            assert not r.has("Content-Encoding")
            assert r.header("Content-Length") == str(len(body))
    assert sg.stat("gzip_compressed") == 0


def test_apache_http10_client_without_gzip(apache, site, surogat):
    sg = surogat(backend=apache.addr)
    assert sg.get("/page.html", GZ).status == 200
    with sg.conn() as c:
        c.request("GET", "/page.html", {"Host": "surogat.test"}, version="1.0")
        r = c.read_response()
        assert is_hit(r) and r.status == 200 and not r.chunked and not r.has("Content-Length")
        assert r.body == PAGE
        assert c.wait_closed(5)[0]


# -- scripted origins ---------------------------------------------------------------------

BODY = html(30_000, seed=3)


def test_backend_asked_for_gzip(origin, surogat):
    origin.route("/a", body=BODY, headers={"Content-Type": "text/html", **CC60})
    sg = surogat()
    for ae in (None, "br", "identity", "gzip;q=0"):
        origin.route("/a%s" % ae, body=BODY, headers={"Content-Type": "text/html", **CC60})
        r = sg.get("/a%s" % ae, {"Accept-Encoding": ae} if ae else {})
        assert r.status == 200 and r.body == BODY and not r.has("Content-Encoding")
        assert origin.last("/a%s" % ae).headers_all("Accept-Encoding") == ["gzip"]


def test_gzip_support_off(origin, surogat):
    origin.route("/a", body=BODY, headers={"Content-Type": "text/html", **CC60})
    sg = surogat(params={"http_gzip_support": "off"})
    r = sg.get("/a", {"Accept-Encoding": "br"})
    assert r.body == BODY and not r.has("Content-Encoding")
    assert origin.last("/a").headers_all("Accept-Encoding") == ["br"]
    r = sg.get("/a", GZ)
    assert r.body == BODY and not r.has("Content-Encoding")
    assert sg.stat("gzip_compressed") == 0


# Accept-Encoding as clients send it, and whether it lets us send gzip.
NEGOTIATION = [
    ("gzip", True),
    ("GZIP", True),
    ("x-gzip", True),
    ("gzip, deflate, br", True),
    ("br;q=1.0, gzip;q=0.8, *;q=0.1", True),
    ("  gzip  ;  q=0.5  ", True),
    ("gzip;Q=1", True),
    ("*", True),
    ("identity;q=0, *", True),
    ("gzip;q=0.001", True),
    ("gzip;q=0", False),
    ("gzip;q=0.000", False),
    ("gzip;q=0, *", False),
    ("*;q=0", False),
    ("deflate, br", False),
    ("", False),
    ("identity", False),
    ("gzip;q=0.2, identity;q=0.8", False),
    ("gzip;q=2", False),
    ("gzip;q=abc", False),
    ("gzipx", False),
    ("gzip;q=0, x-gzip", True),
]


def test_negotiation_table(origin, surogat):
    origin.route("/n", body=BODY, headers={"Content-Type": "text/html; charset=utf-8", **CC60})
    sg = surogat()
    for ae, want in NEGOTIATION:
        r = sg.get("/n", {"Accept-Encoding": ae})
        assert r.status == 200, ae
        if want:
            assert r.header("Content-Encoding") == "gzip", ae
            assert gunzip(r.body) == BODY, ae
        else:
            assert not r.has("Content-Encoding"), ae
            assert r.body == BODY, ae
    assert origin.hits("/n") == 1


def test_two_accept_encoding_fields(origin, surogat):
    origin.route("/t", body=BODY, headers={"Content-Type": "text/plain", **CC60})
    sg = surogat()
    r = httpc.fetch(sg.port, headers=[("Accept-Encoding", "br"), ("Accept-Encoding", "gzip")],
                    path="/t")
    assert r.header("Content-Encoding") == "gzip" and gunzip(r.body) == BODY


def test_no_transform_not_compressed(origin, surogat):
    origin.route("/nt", body=BODY, headers={"Content-Type": "text/html",
                                            "Cache-Control": "max-age=60, no-transform"})
    sg = surogat()
    for _ in range(2):
        r = sg.get("/nt", GZ)
        assert r.body == BODY and not r.has("Content-Encoding")
        assert r.header("Content-Length") == str(len(BODY))
    assert origin.hits("/nt") == 1 and sg.stat("gzip_compressed") == 0


def test_min_size_and_types_configurable(origin, surogat):
    origin.route("/s", body=BODY[:3000], headers={"Content-Type": "text/html", **CC60})
    origin.route("/j", body=BODY, headers={"Content-Type": "application/x-custom", **CC60})
    origin.route("/w", body=BODY, headers={"Content-Type": "text/x-whatever", **CC60})
    sg = surogat(params={"gzip_min_size": "4k", "gzip_types": "application/x-custom, text/*"})
    assert not sg.get("/s", GZ).has("Content-Encoding")
    r = sg.get("/j", GZ)
    assert r.header("Content-Encoding") == "gzip" and gunzip(r.body) == BODY
    r = sg.get("/w", GZ)
    assert r.header("Content-Encoding") == "gzip" and gunzip(r.body) == BODY


def test_level_changes_size(origin, surogat):
    body = os.urandom(20000).hex().encode()  # compressible only so far: hex digits
    origin.route("/l1", body=body, headers={"Content-Type": "text/plain", **CC60})
    origin.route("/l9", body=body, headers={"Content-Type": "text/plain", **CC60})
    sg = surogat(params={"gzip_level": "1"})
    r1 = sg.get("/l1", GZ)
    sg.ctl("param.set", "gzip_level", "9")
    r9 = sg.get("/l9", GZ)
    assert gunzip(r1.body) == body and gunzip(r9.body) == body
    assert len(r9.body) < len(r1.body)


def test_backend_gzip_stored_as_is(origin, surogat):
    gz = gzip.compress(BODY, mtime=0)
    origin.route("/g", body=gz, headers={"Content-Type": "text/html", "Content-Encoding": "gzip",
                                         "ETag": '"abc"', **CC60})
    sg = surogat()
    a = sg.get("/g", GZ)
    assert a.header("Content-Encoding") == "gzip" and a.body == gz, "not the backend's bytes"
    assert a.header("ETag") == '"abc"' and vary_ae(a)
    b = sg.get("/g", GZ)
    assert is_hit(b) and b.body == gz
    c = sg.get("/g")
    assert is_hit(c) and c.body == BODY and not c.has("Content-Encoding")
    assert origin.hits("/g") == 1
    assert sg.stat("gzip_compressed") == 0 and sg.stat("gzip_backend") == 1


def test_backend_gzip_to_client_without_gzip_on_the_miss(origin, surogat):
    gz = gzip.compress(BODY)
    origin.route("/g", body=gz, chunked=True,
                 headers={"Content-Type": "text/html", "Content-Encoding": "gzip", **CC60})
    sg = surogat()
    r = sg.get("/g")
    assert r.status == 200 and r.body == BODY and not r.has("Content-Encoding")
    assert sg.get("/g", GZ).body == gz
    assert origin.hits("/g") == 1


def test_uncacheable_backend_gzip_gunzipped(origin, surogat):
    """A miss asked for gzip; the answer is not stored, the client still gets
    what it can read."""
    gz = gzip.compress(BODY)
    origin.route("/u", body=gz, headers={"Content-Type": "text/html", "Content-Encoding": "gzip",
                                         "Cache-Control": "no-store"})
    sg = surogat()
    r = sg.get("/u")
    assert r.status == 200 and r.body == BODY and not r.has("Content-Encoding")
    r = sg.get("/u", GZ)
    assert r.body == gz and r.header("Content-Encoding") == "gzip"


@pytest.mark.parametrize("where", ["crc", "truncated", "garbage"])
def test_corrupt_backend_gzip_never_stored(origin, surogat, where):
    gz = bytearray(gzip.compress(BODY))
    if where == "crc":
        gz[-6] ^= 0xff  # the CRC-32 in the trailer
    elif where == "truncated":
        gz = gz[:-20]
    else:
        gz[len(gz) // 2:len(gz) // 2 + 40] = b"\x00" * 40
    origin.route("/c", body=bytes(gz), headers={"Content-Type": "text/html",
                                                "Content-Encoding": "gzip", **CC60})
    sg = surogat()
    for client in (GZ, {}, GZ):
        try:
            r = sg.get("/c", client)
        except httpc.Incomplete:
            continue  # cut off: the truncation shows
        assert r.status == 502, (client, r)
    assert origin.hits("/c") == 3, "a corrupt body was stored"
    assert sg.stat("gzip_errors") >= 3
    assert sg.stat("cache_stored") == 0


def test_corrupt_gzip_in_a_long_body_cuts_the_client(origin, surogat):
    good = gzip.compress(os.urandom(300_000))
    bad = bytearray(good)
    bad[-5] ^= 0x55  # the length in the trailer
    origin.route("/cc", body=bytes(bad), chunked=True, chunks=[bytes(bad[i:i + 8192]) for i in
                                                               range(0, len(bad), 8192)],
                 headers={"Content-Type": "application/octet-stream", "Content-Encoding": "gzip",
                          **CC60})
    sg = surogat()
    with pytest.raises(httpc.Incomplete):
        sg.get("/cc", GZ)
    with pytest.raises(httpc.Incomplete):
        sg.get("/cc")
    assert origin.hits("/cc") == 2 and sg.stat("cache_stored") == 0


def test_chunked_identity_compressed_while_streamed(origin, surogat):
    body = html(300_000, seed=11)
    origin.route("/ch", body=body, chunked=True, headers={"Content-Type": "text/css", **CC60})
    sg = surogat()
    r = sg.get("/ch")
    assert r.body == body and not r.has("Content-Encoding")
    assert vary_ae(r)
    r = sg.get("/ch", GZ)
    assert is_hit(r) and gunzip(r.body) == body
    r = sg.get("/ch", GZ)
    assert is_hit(r) and gunzip(r.body) == body


def test_miss_client_with_gzip_gets_compressed_stream(origin, surogat):
    body = html(300_000, seed=12)
    origin.route("/m", body=body, headers={"Content-Type": "application/json", "ETag": '"e1"',
                                           **CC60})
    sg = surogat()
    r = sg.get("/m", GZ)
    assert r.header("Content-Encoding") == "gzip" and r.chunked and gunzip(r.body) == body
    assert r.header("ETag") == 'W/"e1"' and vary_ae(r)
    h = sg.get("/m", GZ)
    assert is_hit(h) and h.body == r.body, "the miss and the hit sent different gzip bytes"


def test_coalesced_waiter_without_gzip_streams_gunzipped(origin, surogat):
    body = html(400_000, seed=13)
    route = origin.route("/w", body=body, hold_after=2000,
                         headers={"Content-Type": "text/html", **CC60})
    sg = surogat()
    a = httpc.Conn(sg.port, timeout=15)
    a.request("GET", "/w", GZ)
    assert route.held.wait(10)
    b = httpc.Conn(sg.port, timeout=15)
    b.request("GET", "/w")
    c = httpc.Conn(sg.port, timeout=15)
    c.request("GET", "/w", GZ)
    time.sleep(0.3)  # let them attach to the busy object (the test passes either way)
    route.release.set()
    ra, rb, rc = a.read_response(), b.read_response(), c.read_response()
    for x in (a, b, c):
        x.close()
    assert gunzip(ra.body) == body
    assert rb.body == body and not rb.has("Content-Encoding") and rb.chunked
    assert gunzip(rc.body) == body
    assert origin.hits("/w") == 1


def test_vary_accept_encoding_from_backend_is_one_variant(origin, surogat):
    origin.route("/v", body=BODY, headers={"Content-Type": "text/html",
                                           "Vary": "Accept-Encoding", **CC60})
    sg = surogat()
    for ae in ("gzip", "", "br", "gzip, br", None):
        r = sg.get("/v", {"Accept-Encoding": ae} if ae is not None else {})
        want = BODY if ae in ("", "br", None) else None
        assert (r.body if want else gunzip(r.body)) == BODY
        assert r.headers_all("Vary") == ["Accept-Encoding"], "Vary not kept once"
    assert origin.hits("/v") == 1


def test_vary_other_field_still_splits(origin, surogat):
    origin.route("/vl", body=lambda q: BODY + (q.header("Accept-Language") or "").encode(),
                 headers={"Content-Type": "text/html", "Vary": "Accept-Language", **CC60})
    sg = surogat()
    assert gunzip(sg.get("/vl", {"Accept-Encoding": "gzip", "Accept-Language": "de"}).body) \
        == BODY + b"de"
    assert sg.get("/vl", {"Accept-Language": "fr"}).body == BODY + b"fr"
    assert sg.get("/vl", {"Accept-Language": "de"}).body == BODY + b"de"
    assert origin.hits("/vl") == 2


def test_pass_compressed_on_the_fly(origin, surogat):
    origin.route("/p", body=BODY, headers={"Content-Type": "text/html"})
    sg = surogat(params={"gzip_pass": "on"})
    r = sg.get("/p", {"Accept-Encoding": "gzip", "Cookie": "s=1"})
    assert r.header("Content-Encoding") == "gzip" and r.chunked and gunzip(r.body) == BODY
    assert origin.last("/p").header("Accept-Encoding") == "gzip"
    r = sg.get("/p", {"Accept-Encoding": "br", "Cookie": "s=1"})
    assert r.body == BODY and not r.has("Content-Encoding")
    assert origin.last("/p").header("Accept-Encoding") == "br"
    assert sg.stat("gzip_pass") == 1
    sg.ctl("param.set", "gzip_pass", "off")
    r = sg.get("/p", {"Accept-Encoding": "gzip", "Cookie": "s=1"})
    assert r.body == BODY and not r.has("Content-Encoding")


def test_pass_backend_gzip_untouched(origin, surogat):
    gz = gzip.compress(BODY)
    origin.route("/pg", body=gz, headers={"Content-Type": "text/html", "Content-Encoding": "gzip"})
    sg = surogat(params={"gzip_pass": "on"})
    r = sg.get("/pg", {"Accept-Encoding": "gzip", "Cookie": "s=1"})
    assert r.body == gz and r.header("Content-Length") == str(len(gz))


def test_random_bodies_round_trip(origin, surogat):
    """Incompressible and mixed bodies of odd sizes, chunked and not, through
    compression, storage and gunzip."""
    sg = surogat(params={"gzip_min_size": "0"})
    rnd = random.Random(5)
    for i, n in enumerate((1, 17, 4095, 65537, 200_003)):
        body = bytes(rnd.randrange(256) for _ in range(n // 2)) + html(n - n // 2, seed=i)
        origin.route("/r%d" % i, body=body, chunked=bool(i % 2),
                     headers={"Content-Type": "text/plain", **CC60})
        a = sg.get("/r%d" % i, GZ)
        assert gunzip(a.body) == body, n
        assert sha(sg.get("/r%d" % i).body) == sha(body), n
        assert gunzip(sg.get("/r%d" % i, GZ).body) == body, n


def _head(c, deadline=10.0):
    raw = c._until(b"\r\n\r\n", time.monotonic() + deadline, "response head")
    r = httpc.Response()
    for ln in raw[:-4].split(b"\r\n")[1:]:
        n, _, v = ln.decode("latin-1").partition(":")
        r.headers.append((n, v.strip()))
    return r


def _chunk(c, deadline=10.0):
    t = time.monotonic() + deadline
    size = int(c._until(b"\r\n", t, "chunk size")[:-2], 16)
    return c._exactly(size + 2, t, "chunk")[:-2]


def test_compressed_bytes_stream_before_the_origin_finishes(origin, surogat):
    """The encoder is flushed after each backend read: neither the fetching
    client nor a waiter gunzipping the busy object waits for the whole body."""
    body = html(400_000, seed=14)
    route = origin.route("/early", body=body, hold_after=5000,
                         headers={"Content-Type": "text/html", **CC60})
    sg = surogat()
    a = httpc.Conn(sg.port, timeout=15)
    a.request("GET", "/early", GZ)
    ha = _head(a)
    assert ha.header("Content-Encoding") == "gzip" and ha.tokens("Transfer-Encoding") == ["chunked"]
    assert route.held.wait(10)
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    early = d.decompress(_chunk(a))
    assert len(early) >= 1000 and body.startswith(early)
    b = httpc.Conn(sg.port, timeout=15)
    b.request("GET", "/early")
    hb = _head(b)
    assert hb.header("Cache-Status").startswith("surogat; fwd=miss; collapsed"), hb
    assert not hb.has("Content-Encoding")
    got = _chunk(b)
    assert len(got) >= 1000 and body.startswith(got)
    assert not route.done.is_set()
    route.release.set()
    rest_a = bytearray()
    while True:
        ch = _chunk(a)
        if not ch:
            break
        rest_a += ch
    assert early + d.decompress(bytes(rest_a)) + d.flush() == body and d.eof
    rest_b = bytearray(got)
    while True:
        ch = _chunk(b)
        if not ch:
            break
        rest_b += ch
    assert bytes(rest_b) == body
    a.close()
    b.close()
    assert origin.hits("/early") == 1


def test_revalidated_object_stays_gzip_and_weak(origin, surogat):
    origin.route("/rv", body=BODY, conditional=True,
                 headers={"Content-Type": "text/html", "Cache-Control": "max-age=1",
                          "ETag": '"v1"'})
    sg = surogat()
    a = sg.get("/rv", GZ)
    assert a.header("ETag") == 'W/"v1"' and gunzip(a.body) == BODY
    time.sleep(1.5)
    r = sg.get("/rv")
    assert r.status == 200 and r.body == BODY and not r.has("Content-Encoding")
    assert origin.hits("/rv") == 2
    assert origin.last("/rv").header("If-None-Match") == 'W/"v1"'
    assert origin.last("/rv").answered == 304
    h = sg.get("/rv", GZ)
    assert is_hit(h) and h.header("ETag") == 'W/"v1"' and gunzip(h.body) == BODY
    assert h.header("Content-Encoding") == "gzip"
    assert origin.hits("/rv") == 2


def test_corrupt_backend_gzip_cuts_waiters_too(origin, surogat):
    """The CRC is only known at the end: requests streaming the busy object are
    sent it chunked, so that one that fails its check is cut, never complete by
    its Content-Length, and then they are cut."""
    bad = bytearray(gzip.compress(html(200_000, seed=15)))
    bad[-7] ^= 0x10
    route = origin.route("/cw", body=bytes(bad), hold_after=3000,
                         headers={"Content-Type": "text/html", "Content-Encoding": "gzip",
                                  **CC60})
    sg = surogat()
    a, b, c = (httpc.Conn(sg.port, timeout=15) for _ in range(3))
    a.request("GET", "/cw", GZ)
    assert route.held.wait(10)
    b.request("GET", "/cw", GZ)
    hb = _head(b)
    assert hb.header("Cache-Status").startswith("surogat; fwd=miss; collapsed"), hb
    assert hb.tokens("Transfer-Encoding") == ["chunked"] and not hb.has("Content-Length")
    c.request("GET", "/cw")
    hc = _head(c)
    assert hc.header("Cache-Status").startswith("surogat; fwd=miss; collapsed"), hc
    route.release.set()
    with pytest.raises(httpc.Incomplete):
        a.read_response()
    for x in (b, c):
        with pytest.raises(httpc.Incomplete):
            while _chunk(x):
                pass
    for x in (a, b, c):
        x.close()
    assert sg.stat("cache_stored") == 0
    assert sg.stat("gzip_errors") >= 1
