"""Admission by frequency (tinylfu): when the store is full, a crawl of
URLs asked for once does not push out objects that are asked for again.
The same run with tinylfu off shows the crawl does push them out under
SIEVE alone, so the test can tell the two apart."""

CACHED = {"Cache-Control": "max-age=600"}
BODY = b"x" * 100000
POPULAR = ["/popular/%d" % i for i in range(6)]
CRAWL = ["/crawl/%d" % i for i in range(150)]


def run(origin, surogat, tinylfu):
    for p in POPULAR + CRAWL:
        origin.route(p, body=BODY, headers=CACHED)
    # Room for about 20 objects of 100 KB.
    sg = surogat(args=["-s", "malloc,2m"], params={"tinylfu": tinylfu})
    for _ in range(4):
        for p in POPULAR:
            assert sg.get(p).body == BODY
    for p in CRAWL:
        assert sg.get(p).body == BODY
    still = sum(1 for p in POPULAR
                if (sg.get(p).header("Cache-Status") or "").startswith("surogat; hit"))
    return sg, still


def test_crawl_does_not_flush_popular_objects(origin, surogat):
    sg, still = run(origin, surogat, "on")
    assert still == len(POPULAR), "%d of %d popular objects survived" % (still, len(POPULAR))
    st = sg.stats()
    assert st["cache_admission_rejected"] > 0
    assert st["n_lru_nuked"] > 0  # crawl objects still replace each other
    for p in POPULAR:
        assert origin.hits(p) == 1


def test_without_tinylfu_the_crawl_flushes_them(origin, surogat):
    sg, still = run(origin, surogat, "off")
    assert still < len(POPULAR)
    assert sg.stat("cache_admission_rejected") == 0


def test_new_objects_still_enter_a_full_store(origin, surogat):
    """Ties admit: in a store full of one-hit objects, the newest is kept."""
    for p in CRAWL:
        origin.route(p, body=BODY, headers=CACHED)
    sg = surogat(args=["-s", "malloc,2m"])
    for p in CRAWL[:60]:
        sg.get(p)
    r = sg.get(CRAWL[59])
    assert (r.header("Cache-Status") or "").startswith("surogat; hit"), r


def test_rejected_objects_leave_no_marker(origin, surogat):
    """An object the admission policy turned away was cacheable: the next
    request for it is a miss that may be stored, not a pass on a
    hit-for-miss marker (which would also hold memory no store counts)."""
    sg, _ = run(origin, surogat, "on")
    assert sg.stat("cache_admission_rejected") > 0
    for p in CRAWL:
        cs = sg.get(p).header("Cache-Status") or ""
        assert "hit-for-miss" not in cs, (p, cs)
    assert sg.stat("cache_hitmiss") == 0
