"""Storage: the file store (-s file,PATH,SIZE) serving hits from its mapping,
coming back warm after a clean stop and after kill -9 (bodies compared by
checksum with the origin's), never serving a corrupt body, eviction when
full, and several stores side by side."""

import hashlib
import os
import time

import pytest

from conftest import free_port, run_surogatd
from cstatus import forwarded

CACHED = {"Cache-Control": "max-age=600"}


def body_of(n, seed):
    """n bytes, different for every seed, not compressible to a pattern."""
    out = bytearray()
    block = hashlib.sha256(b"seed %d" % seed).digest()
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n])


def sha(b):
    return hashlib.sha256(b).hexdigest()


def is_hit(r):
    return (r.header("Cache-Status") or "").startswith("surogat; hit")


def store_spec(tmp_path, size="64m", name="store.bin"):
    return "file,%s,%s" % (tmp_path / name, size)


# Sizes around the store's unit (256 bytes), its first chunk (16 KiB) and
# its longest extent (8 MiB), with and without a Content-Length.
OBJECTS = [
    ("/empty", 0, False), ("/one", 1, False), ("/unit", 200, False), ("/k1", 1024, False),
    ("/chunky", 16 * 1024 + 1, True), ("/k70", 70000, False), ("/chunked-big", 300000, True),
    ("/m9", 9 * 1024 * 1024 + 3, False),
]


def fill(origin, sg, objects=OBJECTS):
    want = {}
    for i, (path, n, chunked) in enumerate(objects):
        body = body_of(n, i)
        origin.route(path, body=body, headers=CACHED, chunked=chunked)
        r = sg.get(path)
        assert r.status == 200 and sha(r.body) == sha(body), path
        assert forwarded(r.header("Cache-Status"), stored=True), (path, r)
        want[path] = sha(body)
    return want


def check_hits(sg, want, origin):
    """Every object a hit with the origin's bytes; the fraction recovered."""
    hits = 0
    for path, digest in want.items():
        before = origin.hits(path)
        r = sg.get(path)
        assert r.status == 200, (path, r)
        assert sha(r.body) == digest, "%s: body differs from the origin's" % path
        if is_hit(r):
            hits += 1
            assert origin.hits(path) == before, path
    return hits


def test_file_store_serves_what_the_origin_sent(origin, surogat, tmp_path):
    sg = surogat(args=["-s", store_spec(tmp_path)])
    want = fill(origin, sg)
    assert check_hits(sg, want, origin) == len(want)
    for path, _, _ in OBJECTS:
        assert origin.hits(path) == 1
    st = sg.stats()
    assert st["n_object"] == len(OBJECTS)
    assert st["sto_size"] > 60 * 1024 * 1024
    assert st["sto_bytes"] > 9 * 1024 * 1024
    out = sg.ctl("storage.list")
    assert out.returncode == 0
    assert "file" in out.stdout and str(tmp_path / "store.bin") in out.stdout, out.stdout


@pytest.mark.parametrize("how", ["kill -9", "SIGTERM"])
def test_store_comes_back_warm(origin, surogat, tmp_path, how):
    spec = store_spec(tmp_path)
    sg = surogat(args=["-s", spec])
    want = fill(origin, sg)
    # Vary variants come back as variants.
    origin.route("/v", body=lambda req: b"lang " + (req.header("Accept-Language") or "").encode(),
                 headers={"Cache-Control": "max-age=600", "Vary": "Accept-Language"})
    for lang in ("en", "fr"):
        assert sg.get("/v", {"Accept-Language": lang}).body == b"lang " + lang.encode()
    # A client may have its last byte before the object is sealed in the store: an
    # object is surely stored once it has been a hit, so a kill cannot beat the seal.
    assert check_hits(sg, want, origin) == len(want)
    for lang in ("en", "fr"):
        assert is_hit(sg.get("/v", {"Accept-Language": lang}))
    if how == "kill -9":
        sg.kill()
    else:
        assert sg.stop() == 0
    sg2 = surogat(args=["-s", spec])
    hits = check_hits(sg2, want, origin)
    print("%s: %d of %d objects recovered" % (how, hits, len(want)))
    assert hits == len(want)
    for lang in ("en", "fr"):
        r = sg2.get("/v", {"Accept-Language": lang})
        assert r.body == b"lang " + lang.encode() and is_hit(r), r
    assert origin.hits("/v") == 2
    assert sg2.stat("sto_recovered") == len(want) + 2
    # Recovered objects answer conditional and range requests from the cache too.
    r = sg2.get("/k70", {"Range": "bytes=100-199"})
    assert r.status == 206 and r.body == body_of(70000, 5)[100:200], r
    etag_less = sg2.get("/k1", {"If-Modified-Since": "Thu, 01 Jan 2099 00:00:00 GMT"})
    assert etag_less.status in (200, 304)
    assert origin.hits("/k70") == 1


def test_corrupt_body_is_never_served(origin, surogat, tmp_path):
    spec = store_spec(tmp_path)
    path = tmp_path / "store.bin"
    sg = surogat(args=["-s", spec])
    good = body_of(5000, 1)
    bad = body_of(5000, 2)
    origin.route("/good", body=good, headers=CACHED)
    origin.route("/bad", body=bad, headers=CACHED)
    assert sg.get("/good").body == good and sg.get("/bad").body == bad
    assert sg.stop() == 0
    data = bytearray(path.read_bytes())
    at = data.find(bad[1000:1100])
    assert at > 0, "body not found in the store file"
    data[at + 10] ^= 0xff
    path.write_bytes(bytes(data))
    sg2 = surogat(args=["-s", spec])
    r = sg2.get("/bad")
    assert r.status == 200 and r.body == bad, "the corrupt copy was served"
    assert not is_hit(r), r
    assert origin.hits("/bad") == 2
    assert sg2.stat("sto_verify_fail") == 1
    r = sg2.get("/good")
    assert is_hit(r) and r.body == good
    # The refetched copy is stored again and served from then on.
    r = sg2.get("/bad")
    assert is_hit(r) and r.body == bad


def test_torn_record_is_dropped_not_served(origin, surogat, tmp_path):
    spec = store_spec(tmp_path)
    path = tmp_path / "store.bin"
    sg = surogat(args=["-s", spec])
    origin.route("/torn", body=body_of(3000, 3), headers=CACHED)
    origin.route("/fine", body=body_of(3000, 4), headers=CACHED)
    for p in ("/torn", "/fine"):
        sg.get(p)
        assert is_hit(sg.get(p))  # sealed: see test_store_comes_back_warm
    sg.kill()
    data = bytearray(path.read_bytes())
    # The key (Host, NUL, path) is in the record, the stored head right after it
    # (encoded: its first byte is the encoding's mark, 0xa5); tear the head.
    at = data.find(b"\x00/torn")
    assert at > 0
    head = at + len(b"\x00/torn")
    assert data[head] == 0xA5, data[head : head + 16]
    data[head + 5] ^= 0x20
    path.write_bytes(bytes(data))
    sg2 = surogat(args=["-s", spec])
    r = sg2.get("/torn")
    assert r.status == 200 and r.body == body_of(3000, 3) and not is_hit(r)
    assert is_hit(sg2.get("/fine"))
    assert sg2.stat("sto_recovered") == 1


def test_replaced_and_invalidated_objects_stay_gone(origin, surogat, tmp_path):
    spec = store_spec(tmp_path)
    sg = surogat(args=["-s", spec], params={"default_keep": "0s"})
    origin.route("/a", body=b"version 1", headers={"Cache-Control": "max-age=1"})
    origin.route("/b", body=b"b body", headers=CACHED)
    assert sg.get("/a").body == b"version 1"
    assert sg.get("/b").body == b"b body"
    origin.route("/a", body=b"version 2", headers=CACHED)
    time.sleep(1.5)
    assert sg.get("/a").body == b"version 2"
    assert is_hit(sg.get("/a"))  # sealed before the kill
    origin.route("/b", status=204, body=b"")
    r = sg.request("POST", "/b", body=b"x")
    assert r.status == 204
    origin.route("/b", body=b"b body 2", headers=CACHED)
    sg.kill()
    sg2 = surogat(args=["-s", spec])
    r = sg2.get("/a")
    assert r.body == b"version 2" and is_hit(r), r
    r = sg2.get("/b")
    assert r.body == b"b body 2" and not is_hit(r), "an invalidated object came back"


def test_expired_objects_are_not_recovered(origin, surogat, tmp_path):
    spec = store_spec(tmp_path)
    params = {"default_keep": "0s", "default_grace": "0s", "default_stale_if_error": "0s"}
    sg = surogat(args=["-s", spec], params=params)
    origin.route("/short", body=b"short", headers={"Cache-Control": "max-age=1"})
    origin.route("/long", body=b"long", headers=CACHED)
    sg.get("/short")
    sg.get("/long")
    assert sg.stop() == 0
    time.sleep(1.5)
    sg2 = surogat(args=["-s", spec], params=params)
    assert sg2.stat("sto_recovered") == 1
    st = sg2.stats()
    assert st["n_object"] == 1


def test_full_file_store_evicts_and_stays_correct(origin, surogat, tmp_path):
    sg = surogat(args=["-s", store_spec(tmp_path, "2m")])
    want = {}
    for i in range(60):
        body = body_of(100000, 100 + i)
        origin.route("/e%d" % i, body=body, headers=CACHED)
        r = sg.get("/e%d" % i)
        assert r.status == 200 and r.body == body
        want["/e%d" % i] = sha(body)
    st = sg.stats()
    assert st["n_lru_nuked"] > 0
    assert st["sto_bytes"] <= st["sto_size"]
    assert st["n_object"] < 60
    # The latest objects are the ones kept.
    r = sg.get("/e59")
    assert is_hit(r) and sha(r.body) == want["/e59"]
    # Whatever is served, from the store or refetched, is the origin's.
    for path, digest in want.items():
        assert sha(sg.get(path).body) == digest


def test_malloc_and_file_stores_together(origin, surogat, tmp_path):
    # A new body goes to the store with the most room: equal sizes fill both.
    sg = surogat(args=["-s", "malloc,4m", "-s", store_spec(tmp_path, "4m")])
    want = {}
    for i in range(30):
        body = body_of(100000, 200 + i)
        origin.route("/t%d" % i, body=body, headers=CACHED)
        assert sg.get("/t%d" % i).body == body
        want["/t%d" % i] = sha(body)
    out = sg.ctl("storage.list").stdout.splitlines()
    assert len(out) == 2, out
    used = [int(line.split("used=")[1].split()[0]) for line in out]
    assert all(u > 0 for u in used), out  # both stores hold objects
    for path, digest in want.items():
        assert sha(sg.get(path).body) == digest


def test_bad_file_store_is_refused(tmp_path, origin):
    r = run_surogatd(["-F", "-a", "127.0.0.1:%d" % free_port(), "-b", origin.addr,
                      "-s", "file,%s,10m" % (tmp_path / "no-such-dir" / "x")])
    assert r.returncode == 2
    assert "no-such-dir" in r.stderr
    r = run_surogatd(["-F", "-a", "127.0.0.1:%d" % free_port(), "-b", origin.addr,
                      "-s", "file,%s,lots" % (tmp_path / "x")])
    assert r.returncode == 2 and "size" in r.stderr


def test_store_file_in_use_is_refused(origin, surogat, tmp_path):
    spec = store_spec(tmp_path)
    sg = surogat(args=["-s", spec])
    r = run_surogatd(["-F", "-a", "127.0.0.1:%d" % free_port(), "-b", origin.addr,
                      "-s", spec])
    assert r.returncode == 2
    assert "in use" in r.stderr, r.stderr
    assert sg.get("/").status in (200, 404)
    assert os.path.getsize(tmp_path / "store.bin") == 64 * 1024 * 1024


def test_purges_reach_recovered_objects(origin, surogat, tmp_path):
    spec = store_spec(tmp_path)
    sg = surogat(args=["-s", spec])
    origin.route("/tagged", body=b"tagged", headers={"Cache-Control": "max-age=600",
                                                     "Surrogate-Key": "t1 t2"})
    origin.route("/other", body=b"other", headers={"Cache-Control": "max-age=600",
                                                   "Surrogate-Key": "t3"})
    origin.route("/soft", body=b"soft", headers={"Cache-Control": "max-age=600"})
    for p in ("/tagged", "/other", "/soft"):
        sg.get(p)
        assert is_hit(sg.get(p))  # sealed before the kill
    r = sg.request("PURGE", "/soft", headers={"Purge-Mode": "soft"})
    assert r.status == 200, r
    sg.kill()
    sg2 = surogat(args=["-s", spec])
    # The soft purge was written to the store: the copy is stale, not fresh again.
    r = sg2.get("/soft")
    assert r.body == b"soft" and not is_hit(r), r
    assert origin.hits("/soft") == 2
    # Tags are indexed again from the stored heads.
    r = sg2.request("PURGE", "/", headers={"Surrogate-Key": "t2"})
    assert r.status == 200, r
    assert not is_hit(sg2.get("/tagged"))
    assert is_hit(sg2.get("/other"))


def test_small_objects_count_their_heads_against_a_malloc_store(origin, surogat):
    """Heads, Vary values and the index's entries are counted against a malloc
    store, not only body bytes: a store of tiny objects stays near its size."""
    origin.route("/tiny", body=b"0123456789", headers=CACHED)
    sg = surogat(args=["-s", "malloc,512k"])
    with sg.conn() as c:
        for i in range(3000):
            c.request("GET", "/tiny?%d" % i)
            assert c.read_response().body == b"0123456789"
    st = sg.stats()
    assert st["sto_bytes"] <= st["sto_size"] == 512 * 1024
    assert st["n_lru_nuked"] > 0, "3000 objects of 10 bytes must not fit in 512 KiB"
    per_object = st["sto_bytes"] / st["n_object"]
    assert per_object > 200, per_object
