/*
 * hsh: streaming from a busy object -- a request that waits for a fetch
 * attaches once the fetch opens the object, reads what is appended, and
 * sees the end as complete (hsh_unbusy) or failed (hsh_abandon); the body
 * of an abandoned object lives until its last reader leaves.  The reader
 * runs on a second thread, as a coalesced request would.  Copies: an
 * object's body kept in another form beside it, made once enough
 * deliveries asked, found only through its object, counted in n_copy and
 * copy_bytes, evicted alone when cold, and gone with its object whatever
 * removes that -- also while it is still being made.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "cache_fixture.h"
#include "surogat/ban.h"
#include "surogat/cc.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/xkey.h"

#include "src/cache/hsh_priv.h"

static struct http req;
static struct cc qcc;

static void
setup(void)
{
    cache_setup(); /* stat_init(): counts for this thread too */
    http_init(&req, NULL, 0);
    cc_parse_request(&req, &qcc);
}

static enum hsh_result
lookup(const char *key, struct cobj **ocp)
{
    struct hsh_stale stale;
    enum hsh_result r = hsh_lookup(key, strlen(key), &req, &qcc, tim_real(), 0, ocp, &stale, NULL);

    ck_assert_ptr_null(stale.oc);
    return (r);
}

/* ---- what an object costs the store ---- */

START_TEST(heap_cost_is_the_size_class)
{
    /* jemalloc's classes (sto.c), each plus the same bookkeeping. */
    static const struct {
        size_t n, class;
    } v[] = { { 0, 8 },
              { 1, 8 },
              { 8, 8 },
              { 9, 16 },
              { 97, 112 },
              { 128, 128 },
              { 129, 160 },
              { 224, 224 },
              { 225, 256 },
              { 1024, 1024 },
              { 1025, 1280 },
              { 1333, 1536 },
              { 1537, 1792 },
              { 4096, 4096 },
              { 4097, 5120 },
              { 20000, 20480 },
              { 1 << 20, 1 << 20 },
              { (1 << 20) + 1, 1310720 } };
    size_t extra = sto_heap_cost(8) - 8;

    ck_assert_uint_gt(extra, 0);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        ck_assert_msg(sto_heap_cost(v[i].n) == v[i].class + extra, "%zu: %zu, want %zu", v[i].n,
                      sto_heap_cost(v[i].n), v[i].class + extra);
    for (size_t n = 1; n < 70000; n++) {
        ck_assert_uint_ge(sto_heap_cost(n), n + extra);
        ck_assert_uint_ge(sto_heap_cost(n), sto_heap_cost(n - 1));
        ck_assert_uint_le(sto_heap_cost(n) - extra, n + n / 4 + 16); /* at most a quarter more */
    }
}
END_TEST

/*
 * A 1 KiB object of announced length: its head and body are one block,
 * charged at its slab block's cost (below the heap's size class), and the object and its key head at theirs;
 * freeing it gives all of it back.
 */
START_TEST(store_charges_heap_classes)
{
    static const char head[] = CACHE_BUSY_HEAD;
    char body[1024];
    struct cobj *oc, *hit;
    uint64_t before = sto_used(), block, used;

    memset(body, 'b', sizeof body);
    oc = cache_busy_sized("k1k", 3, sizeof body);
    ck_assert(oc->body.meta_stored);
    used = sto_used() - before;
    /* The head is stored encoded: smaller than its text. */
    ck_assert_uint_lt(oc->head_len, sizeof head - 1);
    block = sto_block_cost(sizeof(struct sto_seg) + oc->head_len + sizeof body);
    ck_assert_uint_lt(block, sto_heap_cost(sizeof(struct sto_seg) + oc->head_len + sizeof body));
    ck_assert_uint_eq(used, oc->body.bytes);
    ck_assert_uint_ge(used, block + sto_heap_cost(sizeof *oc) + sto_heap_cost(3 + 1));
    ck_assert_uint_le(used, block + sto_heap_cost(sizeof *oc) + sto_heap_cost(128));
    ck_assert_int_eq(hsh_append(oc, body, sizeof body), 0);
    ck_assert_uint_eq(sto_used() - before, used); /* the body went where it was charged */
    oc->body_complete = true;
    hsh_unbusy(&oc);
    ck_assert_int_eq(lookup("k1k", &hit), HSH_HIT);
    ck_assert_mem_eq(hit->body.first->data, body, sizeof body);
    ck_assert_uint_eq(hsh_head_size(hit), sizeof head - 1);
    {
        char text[sizeof head];

        ck_assert_uint_eq(hsh_head_copy(hit, text), sizeof head - 1);
        ck_assert_mem_eq(text, head, sizeof head - 1);
    }
    hsh_deref(&hit);
    ck_assert_uint_eq(hsh_purge("k1k", 3), 1);
    ck_assert_uint_eq(sto_used(), before);
}
END_TEST

/* A busy object whose fetch has a fresh, storable 200 head. */
static struct cobj *
busy(const char *key)
{
    return (cache_busy(key, strlen(key)));
}

struct reader {
    const char *key;
    enum hsh_result r;
    struct cobj *oc;
};

static void *
reader_lookup(void *priv)
{
    struct reader *rd = priv;

    stat_thread_enter();
    rd->r = lookup(rd->key, &rd->oc);
    stat_thread_leave();
    return (NULL);
}

/* A second request for key, blocked until the fetch opens the object for streaming. */
static struct cobj *
attach(const char *key, struct cobj *oc)
{
    struct reader rd = { key, HSH_MISS, NULL };
    pthread_t t;

    ck_assert_int_eq(pthread_create(&t, NULL, reader_lookup, &rd), 0);
    usleep(50000); /* it waits for the busy object (either way the result is the same) */
    hsh_stream_open(oc, UINT64_MAX);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_int_eq(rd.r, HSH_STREAM);
    ck_assert_ptr_eq(rd.oc, oc);
    return (rd.oc);
}

START_TEST(stream_until_complete)
{
    struct cobj *oc = busy("k1"), *rd, *hit;
    uint64_t avail = 99;

    rd = attach("k1", oc);
    ck_assert_int_eq(hsh_stream_wait(rd, 0, 0.05, &avail), HSH_S_TIMEOUT);
    ck_assert_int_eq(hsh_append(oc, "abc", 3), 0);
    ck_assert_int_eq(hsh_stream_wait(rd, 0, 1, &avail), HSH_S_MORE);
    ck_assert_uint_eq(avail, 3);
    ck_assert_int_eq(memcmp(rd->body.first->data, "abc", 3), 0);
    ck_assert_int_eq(hsh_append(oc, "def", 3), 0);
    oc->body_complete = true;
    hsh_unbusy(&oc);
    /* Not trimmed under a reader: the last segment keeps its slack and does not move. */
    ck_assert_uint_gt(rd->body.last->cap, rd->body.last->len);
    ck_assert_int_eq(hsh_stream_wait(rd, 3, 1, &avail), HSH_S_DONE);
    ck_assert_uint_eq(avail, 6);
    hsh_stream_leave(&rd);
    ck_assert_ptr_null(rd);
    ck_assert_int_eq(lookup("k1", &hit), HSH_HIT);
    ck_assert_uint_eq(hit->body.len, 6);
    hsh_deref(&hit);
}
END_TEST

START_TEST(abandon_fails_readers_and_frees_after_them)
{
    uint64_t avail, before = sto_used();
    struct cobj *oc = busy("k2"), *rd;

    rd = attach("k2", oc);
    ck_assert_int_eq(hsh_append(oc, "partial", 7), 0);
    hsh_abandon(&oc, 0);
    ck_assert_ptr_null(oc);
    /* The reader still holds the body it may be sending. */
    ck_assert_uint_gt(sto_used(), before);
    ck_assert_int_eq(memcmp(rd->body.first->data, "partial", 7), 0);
    ck_assert_int_eq(hsh_stream_wait(rd, 0, 1, &avail), HSH_S_FAILED);
    hsh_stream_leave(&rd);
    ck_assert_uint_eq(sto_used(), before);
    ck_assert_int_eq(lookup("k2", &oc), HSH_MISS);
    hsh_abandon(&oc, 0);
}
END_TEST

START_TEST(trim_without_readers)
{
    struct cobj *oc = busy("k3"), *hit;

    ck_assert_int_eq(hsh_append(oc, "abc", 3), 0);
    oc->body_complete = true;
    hsh_unbusy(&oc);
    ck_assert_int_eq(lookup("k3", &hit), HSH_HIT);
    ck_assert_uint_eq(hit->body.last->cap, hit->body.last->len);
    hsh_deref(&hit);
}
END_TEST

START_TEST(attributes_stay_with_the_object)
{
    struct cobj *oc = busy("k4"), *hit, *renewed;
    struct txt oa[HSH_OA__N] = { [HSH_OA_ESI] = TXT_LIT("a program"),
                                 [HSH_OA_GZBITS] = TXT_LIT("") };
    uint64_t before;
    struct txt v;

    ck_assert_int_eq(hsh_append(oc, "abc", 3), 0);
    ck_assert(!hsh_oa_get(oc, HSH_OA_ESI, &v));
    before = sto_used();
    ck_assert_int_eq(hsh_oa_set(oc, oa), 0);
    ck_assert_uint_gt(sto_used(), before); /* charged to the store */
    oc->body_complete = true;
    hsh_unbusy(&oc);
    ck_assert_int_eq(lookup("k4", &hit), HSH_HIT);
    ck_assert(hsh_oa_get(hit, HSH_OA_ESI, &v));
    ck_assert_uint_eq(v.len, 9);
    ck_assert_int_eq(memcmp(v.b, "a program", 9), 0);
    ck_assert(!hsh_oa_get(hit, HSH_OA_GZBITS, &v));
    /* A renewed copy (a 304) keeps them. */
    renewed = busy("k5");
    ck_assert_int_eq(hsh_oa_copy(renewed, hit), 0);
    renewed->body_complete = true;
    hsh_unbusy(&renewed);
    ck_assert_int_eq(lookup("k5", &renewed), HSH_HIT);
    ck_assert(hsh_oa_get(renewed, HSH_OA_ESI, &v) && v.len == 9);
    hsh_deref(&renewed);
    hsh_deref(&hit);
    /* Nothing at all: no tail, and none is found. */
    oc = busy("k6");
    oa[HSH_OA_ESI] = TXT_LIT("");
    ck_assert_int_eq(hsh_oa_set(oc, oa), 0);
    ck_assert(!hsh_oa_get(oc, HSH_OA_ESI, &v));
    hsh_abandon(&oc, 0);
}
END_TEST

/* ---- waiting lists: requests parked without a thread ---- */

struct parked {
    struct hsh_waiter w;
    unsigned woken; /* atomic: wake() calls */
};

static void
on_wake(struct hsh_waiter *w)
{
    struct parked *p = w->priv;

    __atomic_add_fetch(&p->woken, 1, __ATOMIC_SEQ_CST);
}

static void
park_init(struct parked *p)
{
    memset(p, 0, sizeof *p);
    p->w.magic = HSH_WAITER_MAGIC;
    p->w.wake = on_wake;
    p->w.priv = p;
}

static enum hsh_result
wlookup(const char *key, struct cobj **ocp, struct parked *p)
{
    struct hsh_stale stale;
    enum hsh_result r =
        hsh_lookup(key, strlen(key), &req, &qcc, tim_real(), 0, ocp, &stale, &p->w);

    ck_assert_ptr_null(stale.oc);
    return (r);
}

static unsigned
nwoken(struct parked *p, unsigned n)
{
    unsigned k = 0;

    for (unsigned i = 0; i < n; i++)
        k += __atomic_load_n(&p[i].woken, __ATOMIC_SEQ_CST);
    return (k);
}

/*
 * Waiters park in order; the fetch's stream wakes coalesce_rush of them,
 * and each woken one that finds the object usable wakes as many more.
 */
START_TEST(parked_waiters_rush_in_waves)
{
    struct parked p[10];
    struct cobj *oc = busy("w1"), *rd;
    uint64_t coalesced = stat_get(STAT_cache_coalesced);

    par.coalesce_rush = 3;
    for (unsigned i = 0; i < 10; i++) {
        park_init(&p[i]);
        ck_assert_int_eq(wlookup("w1", &rd, &p[i]), HSH_BUSY);
        ck_assert_ptr_null(rd);
    }
    ck_assert_uint_eq(hsh_parked(), 10);
    ck_assert_uint_eq(stat_get(STAT_cache_coalesced) - coalesced, 10);
    ck_assert_uint_eq(nwoken(p, 10), 0);
    hsh_stream_open(oc, UINT64_MAX);
    /* The oldest three, and only they. */
    ck_assert_uint_eq(nwoken(p, 3), 3);
    ck_assert_uint_eq(nwoken(p, 10), 3);
    ck_assert_uint_eq(hsh_parked(), 7);
    /* A woken one finds the stream, and lets three more go. */
    ck_assert_int_eq(wlookup("w1", &rd, &p[0]), HSH_STREAM);
    ck_assert_uint_eq(nwoken(p, 6), 6);
    ck_assert_uint_eq(nwoken(p, 10), 6);
    /* Not counted twice as coalesced when it looks again. */
    ck_assert_uint_eq(stat_get(STAT_cache_coalesced) - coalesced, 10);
    hsh_stream_leave(&rd);
    /* The object is published: whoever looks gets it, and the rest follow. */
    oc->body_complete = true;
    hsh_unbusy(&oc);
    for (unsigned i = 1; i < 10; i++) {
        if (__atomic_load_n(&p[i].woken, __ATOMIC_SEQ_CST) == 0)
            continue;
        ck_assert_int_eq(wlookup("w1", &rd, &p[i]), HSH_HIT);
        hsh_deref(&rd);
    }
    ck_assert_uint_eq(hsh_parked(), 0);
    ck_assert_uint_eq(nwoken(p, 10), 10);
}
END_TEST

/* The fetch failed: the first woken fetches again, the others park on its fetch. */
START_TEST(abandoned_fetch_hands_over_to_one_waiter)
{
    struct parked p[3];
    struct cobj *oc = busy("w2"), *again, *rd;

    par.coalesce_rush = 3;
    for (unsigned i = 0; i < 3; i++) {
        park_init(&p[i]);
        ck_assert_int_eq(wlookup("w2", &rd, &p[i]), HSH_BUSY);
    }
    hsh_abandon(&oc, 0);
    ck_assert_uint_eq(nwoken(p, 3), 3);
    ck_assert_uint_eq(hsh_parked(), 0);
    ck_assert_int_eq(wlookup("w2", &again, &p[0]), HSH_MISS);
    ck_assert_int_eq(wlookup("w2", &rd, &p[1]), HSH_BUSY);
    ck_assert_int_eq(wlookup("w2", &rd, &p[2]), HSH_BUSY);
    ck_assert_uint_eq(hsh_parked(), 2);
    /* This time it says "not cacheable": both pass, neither waits again. */
    hsh_abandon(&again, 60);
    ck_assert_uint_eq(nwoken(p, 3), 5);
    ck_assert_int_eq(wlookup("w2", &rd, &p[1]), HSH_PASS);
    ck_assert_int_eq(wlookup("w2", &rd, &p[2]), HSH_PASS);
    ck_assert_uint_eq(hsh_parked(), 0);
}
END_TEST

/* Nobody ends the fetch: the sweeper wakes the waiter after coalesce_timeout, which passes. */
START_TEST(parked_waiter_times_out)
{
    struct parked p;
    struct cobj *oc = busy("w3"), *rd;
    uint64_t timeouts = stat_get(STAT_coalesce_timeout);
    double t0 = tim_mono();

    par.coalesce_timeout = 0.2;
    park_init(&p);
    ck_assert_int_eq(wlookup("w3", &rd, &p), HSH_BUSY);
    while (__atomic_load_n(&p.woken, __ATOMIC_SEQ_CST) == 0 && tim_mono() - t0 < 5)
        usleep(5000);
    ck_assert_uint_eq(p.woken, 1);
    ck_assert(tim_mono() - t0 >= 0.2);
    ck_assert(tim_mono() - t0 < 2);
    ck_assert_uint_eq(hsh_parked(), 0);
    ck_assert_int_eq(wlookup("w3", &rd, &p), HSH_PASS);
    ck_assert_uint_eq(stat_get(STAT_coalesce_timeout) - timeouts, 1);
    hsh_abandon(&oc, 0);
}
END_TEST

/* coalesce_max_waiters: one more goes to the backend itself. */
START_TEST(parked_waiters_bounded)
{
    struct parked p[3];
    struct cobj *oc = busy("w4"), *rd;

    par.coalesce_max_waiters = 2;
    for (unsigned i = 0; i < 3; i++)
        park_init(&p[i]);
    ck_assert_int_eq(wlookup("w4", &rd, &p[0]), HSH_BUSY);
    ck_assert_int_eq(wlookup("w4", &rd, &p[1]), HSH_BUSY);
    ck_assert_int_eq(wlookup("w4", &rd, &p[2]), HSH_PASS);
    hsh_abandon(&oc, 60);
    ck_assert_uint_eq(nwoken(p, 3), 2);
}
END_TEST

/* ---- invalidations that overtake a fetch ---- */

/* The busy object oc, just looked up, gets a fresh, storable 200 head with `fields` (CRLF each). */
static void
fill(struct cobj *oc, const char *fields)
{
    char head[256];
    int n = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n%s\r\n",
                     fields);

    ck_assert(n > 0 && (size_t)n < sizeof head);
    hsh_head_set(oc, head, (size_t)n);
    oc->status = 200;
    oc->fresh.t_origin = tim_real();
    oc->fresh.ttl = 60;
    ck_assert_int_eq(hsh_store_begin(oc), 0);
}

/*
 * A purge of the key while it is fetched: those who joined before read
 * it to the end; after the purge nobody joins it, and it is never
 * published -- the backend may have answered before the purge.
 */
START_TEST(purge_overtakes_a_fetch_under_way)
{
    struct cobj *oc = busy("o1"), *rd, *again, *hit;
    uint64_t avail, n0 = stat_get(STAT_cache_overtaken);
    struct parked p;

    par.coalesce_rush = 3;
    rd = attach("o1", oc); /* joined before the purge */
    ck_assert_int_eq(hsh_append(oc, "ol", 2), 0);
    ck_assert_uint_eq(hsh_purge_key("o1", 2, false), 0); /* nothing published to remove */
    ck_assert_uint_eq(stat_get(STAT_cache_overtaken) - n0, 1);
    ck_assert_uint_eq(hsh_purge_key("o1", 2, true), 0); /* counted once */
    ck_assert_uint_eq(stat_get(STAT_cache_overtaken) - n0, 1);
    /* Who comes after the purge fetches again, or waits for that fetch. */
    ck_assert_int_eq(lookup("o1", &again), HSH_MISS);
    ck_assert_ptr_ne(again, oc);
    park_init(&p);
    ck_assert_int_eq(wlookup("o1", &hit, &p), HSH_BUSY);
    cache_publish(&oc, "d");
    ck_assert_ptr_null(oc);
    ck_assert_int_eq(hsh_stream_wait(rd, 0, 1, &avail), HSH_S_DONE);
    ck_assert_uint_eq(avail, 3);
    ck_assert_int_eq(memcmp(rd->body.first->data, "old", 3), 0);
    hsh_stream_leave(&rd);
    /* Woken as the overtaken fetch ends, the waiter finds the new fetch still busy. */
    ck_assert_uint_eq(p.woken, 1);
    ck_assert_int_eq(wlookup("o1", &hit, &p), HSH_BUSY);
    fill(again, "");
    cache_publish(&again, "new");
    ck_assert_uint_eq(p.woken, 2);
    ck_assert_int_eq(wlookup("o1", &hit, &p), HSH_HIT);
    ck_assert_int_eq(memcmp(hit->body.first->data, "new", 3), 0);
    hsh_deref(&hit);
}
END_TEST

/* A purge of one of its tags, once the fetch stored its head. */
START_TEST(tag_purge_overtakes_a_streaming_fetch)
{
    struct cobj *oc, *rd, *again;
    uint64_t avail, n0 = stat_get(STAT_cache_overtaken);

    ck_assert_int_eq(lookup("o2", &oc), HSH_MISS);
    fill(oc, "Surrogate-Key: red blue\r\n");
    rd = attach("o2", oc); /* the head is stored: indexed */
    ck_assert_uint_eq(xkey_purge("green", 5, false), 0);
    ck_assert_uint_eq(stat_get(STAT_cache_overtaken), n0);
    ck_assert_uint_eq(xkey_purge("blue", 4, false), 0);
    ck_assert_uint_eq(stat_get(STAT_cache_overtaken) - n0, 1);
    ck_assert_int_eq(lookup("o2", &again), HSH_MISS);
    hsh_abandon(&again, 0);
    cache_publish(&oc, "old");
    ck_assert_int_eq(hsh_stream_wait(rd, 0, 1, &avail), HSH_S_DONE);
    hsh_stream_leave(&rd);
    ck_assert_int_eq(lookup("o2", &again), HSH_MISS);
    hsh_abandon(&again, 0);
}
END_TEST

/* A ban made while it streams: tested by the next lookup, as a published object would be. */
START_TEST(ban_overtakes_a_streaming_fetch)
{
    struct cobj *a, *b, *rd, *again;
    char ebuf[128];
    struct sb err;

    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(lookup("o3", &a), HSH_MISS);
    fill(a, "X-Grp: one\r\n");
    ck_assert_int_eq(lookup("o4", &b), HSH_MISS);
    fill(b, "X-Grp: two\r\n");
    hsh_stream_open(a, UINT64_MAX);
    hsh_stream_open(b, UINT64_MAX);
    ck_assert_int_eq(ban_add("obj.http.x-grp == one", &err), 0);
    ck_assert_int_eq(lookup("o3", &again), HSH_MISS);
    hsh_abandon(&again, 0);
    ck_assert_int_eq(lookup("o4", &rd), HSH_STREAM); /* not concerned: joined */
    ck_assert_ptr_eq(rd, b);
    hsh_stream_leave(&rd);
    cache_publish(&a, "old");
    cache_publish(&b, "two");
    ck_assert_int_eq(lookup("o3", &again), HSH_MISS);
    hsh_abandon(&again, 0);
    ck_assert_int_eq(lookup("o4", &rd), HSH_HIT);
    hsh_deref(&rd);
}
END_TEST

/* ---- copies: an object's body kept in another form beside it ---- */

static const char copy_head[] = "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\n\r\n";

/* Room for a few objects of SMALL_BODY: eviction comes soon. */
#define SMALL_BODY (256 * 1024)
static void
setup_small(void)
{
    cache_setup_store("malloc,1m");
    http_init(&req, NULL, 0);
    cc_parse_request(&req, &qcc);
    par.tinylfu = false; /* the newcomer always gets in: eviction is certain */
}

/* A published object of len bytes of c, referenced for the caller (a delivery's). */
static struct cobj *
object(const char *key, size_t len, char c)
{
    static char body[SMALL_BODY];
    struct cobj *oc = busy(key), *hit;

    ck_assert_uint_le(len, sizeof body);
    memset(body, c, len);
    oc->form = 2; /* opaque to the cache */
    ck_assert_int_eq(hsh_append(oc, body, len), 0);
    oc->body_complete = true;
    hsh_unbusy(&oc);
    ck_assert_int_eq(lookup(key, &hit), HSH_HIT);
    return (hit);
}

/* Make oc's copy in form, demanded `after` times; the copy's body is len bytes of c. */
static void
make_copy(struct cobj *oc, unsigned form, unsigned after, size_t len, char c, bool complete)
{
    static char body[SMALL_BODY];
    struct cobj *cp = NULL;

    memset(body, c, len);
    for (unsigned i = 1; i < after; i++)
        ck_assert_ptr_null(hsh_copy_begin(oc, form, after, copy_head, sizeof copy_head - 1));
    cp = hsh_copy_begin(oc, form, after, copy_head, sizeof copy_head - 1);
    ck_assert_ptr_nonnull(cp);
    /* One copy per form: another delivery meanwhile makes none. */
    ck_assert_ptr_null(hsh_copy_begin(oc, form, 1, copy_head, sizeof copy_head - 1));
    ck_assert_ptr_null(hsh_copy_get(oc, form)); /* not before it is complete */
    ck_assert_int_eq(hsh_copy_append(cp, body, len), 0);
    hsh_copy_end(oc, &cp, complete);
    ck_assert_ptr_null(cp);
}

START_TEST(copy_after_demand)
{
    struct cobj *oc = object("k", 1000, 'b'), *cp;

    ck_assert_uint_eq(hsh_copy_forms(oc), 0);
    ck_assert_ptr_null(hsh_copy_begin(oc, 0, 0, copy_head, sizeof copy_head - 1)); /* never */
    make_copy(oc, 0, 3, 4000, 'i', true);
    ck_assert_uint_eq(hsh_copy_forms(oc), 1u << 0);
    ck_assert_uint_eq(stat_get(STAT_copy_made), 1);
    ck_assert_uint_eq(stat_get(STAT_n_copy), 1);
    ck_assert_uint_eq(stat_get(STAT_copy_bytes), 4000);
    ck_assert_uint_eq(stat_get(STAT_n_object), 1); /* a copy is no object */
    cp = hsh_copy_get(oc, 0);
    ck_assert_ptr_nonnull(cp);
    ck_assert_uint_eq(cp->body.len, 4000);
    ck_assert_uint_eq(cp->form, 0);
    ck_assert_int_eq(cp->body.first->data[0], 'i');
    {
        char text[sizeof copy_head];

        ck_assert_uint_eq(hsh_head_size(cp), sizeof copy_head - 1);
        ck_assert_uint_eq(hsh_head_copy(cp, text), sizeof copy_head - 1);
        ck_assert_int_eq(memcmp(text, copy_head, sizeof copy_head - 1), 0);
    }
    ck_assert_ptr_null(hsh_copy_get(oc, 1));
    hsh_deref(&cp);
    /* Another form, independently. */
    make_copy(oc, 1, 1, 10, 'g', true);
    ck_assert_uint_eq(hsh_copy_forms(oc), (1u << 0) | (1u << 1));
    ck_assert_uint_eq(stat_get(STAT_copy_bytes), 4010);
    hsh_deref(&oc);
}
END_TEST

/* Whatever removes the object removes its copies: here a purge, while a copy is read. */
START_TEST(purge_takes_copies)
{
    struct cobj *oc = object("k", 1000, 'b'), *cp;

    make_copy(oc, 0, 1, 4000, 'i', true);
    cp = hsh_copy_get(oc, 0);
    ck_assert_uint_eq(hsh_purge("k", 1), 1);
    ck_assert_uint_eq(hsh_copy_forms(oc), 0);
    ck_assert_ptr_null(hsh_copy_get(oc, 0));
    ck_assert_ptr_null(hsh_copy_begin(oc, 0, 1, copy_head, sizeof copy_head - 1));
    /* The reader still has its bytes. */
    ck_assert_int_eq(cp->body.first->data[3999], 'i');
    hsh_deref(&oc);
    ck_assert_uint_eq(stat_get(STAT_n_copy), 1);
    hsh_deref(&cp);
    ck_assert_uint_eq(stat_get(STAT_n_copy), 0);
    ck_assert_uint_eq(stat_get(STAT_copy_bytes), 0);
    ck_assert_uint_eq(stat_get(STAT_n_object), 0);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

/* A copy being made when its object is invalidated is dropped, not published. */
START_TEST(invalidated_while_made)
{
    struct cobj *oc = object("k", 1000, 'b'), *cp;

    cp = hsh_copy_begin(oc, 0, 1, copy_head, sizeof copy_head - 1);
    ck_assert_ptr_nonnull(cp);
    ck_assert_int_eq(hsh_copy_append(cp, "abc", 3), 0);
    ck_assert(hsh_kill(oc, false)); /* as a ban or a tag purge does */
    ck_assert_int_eq(hsh_copy_append(cp, "def", 3), 0);
    hsh_copy_end(oc, &cp, true);
    ck_assert_uint_eq(stat_get(STAT_copy_dropped), 1);
    ck_assert_uint_eq(stat_get(STAT_copy_made), 0);
    ck_assert_uint_eq(stat_get(STAT_n_copy), 0);
    ck_assert_uint_eq(hsh_copy_forms(oc), 0);
    hsh_deref(&oc);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

/* A copy not completed (the body was bad, no room) is dropped, and demand starts again. */
START_TEST(incomplete_copy_dropped)
{
    struct cobj *oc = object("k", 1000, 'b');

    make_copy(oc, 0, 2, 100, 'i', false);
    ck_assert_uint_eq(hsh_copy_forms(oc), 0);
    ck_assert_uint_eq(stat_get(STAT_copy_dropped), 1);
    ck_assert_ptr_null(hsh_copy_begin(oc, 0, 2, copy_head, sizeof copy_head - 1));
    make_copy(oc, 0, 1, 100, 'i', true);
    ck_assert_uint_eq(hsh_copy_forms(oc), 1);
    hsh_deref(&oc);
}
END_TEST

START_TEST(copy_past_max_object_size)
{
    struct cobj *oc = object("k", 1000, 'b'), *cp;
    char big[2048] = { 0 };

    par.max_object_size = 1024;
    cp = hsh_copy_begin(oc, 0, 1, copy_head, sizeof copy_head - 1);
    ck_assert_int_eq(hsh_copy_append(cp, big, sizeof big), -1);
    hsh_copy_end(oc, &cp, false);
    ck_assert_uint_eq(stat_get(STAT_copy_dropped), 1);
    hsh_deref(&oc);
}
END_TEST

/* Fill the store with objects until done(priv) says so; false if it never did. */
static bool
fill_until(bool (*done)(struct cobj *), struct cobj *watch)
{
    for (unsigned i = 0; i < 64; i++) {
        char key[16];
        struct cobj *o;

        if (done(watch))
            return (true);
        snprintf(key, sizeof key, "fill%u", i);
        o = object(key, SMALL_BODY, 'f');
        hsh_deref(&o);
    }
    return (done(watch));
}

static bool
no_copy(struct cobj *oc)
{
    return (hsh_copy_forms(oc) == 0);
}

/*
 * A copy is counted against the store and evicted like any object: while
 * its object is in use (a delivery holds it), the cold copy goes, its
 * slot emptied, and the object stays.
 */
START_TEST(copy_evicted_alone)
{
    struct cobj *oc = object("a", SMALL_BODY, 'a'), *hit;

    make_copy(oc, 0, 1, SMALL_BODY, 'i', true);
    ck_assert_uint_ge(sto_used(), 2 * SMALL_BODY);
    ck_assert(fill_until(no_copy, oc));
    ck_assert_uint_ge(stat_get(STAT_n_lru_nuked), 1);
    ck_assert_ptr_null(hsh_copy_get(oc, 0));
    ck_assert_uint_eq(stat_get(STAT_n_copy), 0);
    ck_assert_uint_eq(stat_get(STAT_copy_bytes), 0);
    ck_assert_int_eq(lookup("a", &hit), HSH_HIT);
    ck_assert_ptr_eq(hit, oc);
    hsh_deref(&hit);
    /* Demand starts again: the next copy is made after as many deliveries. */
    ck_assert_ptr_null(hsh_copy_begin(oc, 0, 2, copy_head, sizeof copy_head - 1));
    hsh_deref(&oc);
}
END_TEST

static bool
copy_dead(struct cobj *cp)
{
    return ((cp->flags & COBJ_DEAD) != 0);
}

/* The object evicted takes its copy, even one being read. */
START_TEST(object_evicted_with_copy)
{
    struct cobj *oc = object("a", SMALL_BODY, 'a'), *cp, *o;

    make_copy(oc, 0, 1, 1000, 'i', true);
    cp = hsh_copy_get(oc, 0);
    hsh_deref(&oc);
    ck_assert(fill_until(copy_dead, cp)); /* "a" evicted: its copy went with it */
    ck_assert_int_ne(lookup("a", &o), HSH_HIT);
    hsh_abandon(&o, 0);
    ck_assert_uint_eq(stat_get(STAT_n_copy), 1); /* still read */
    ck_assert_int_eq(cp->body.first->data[999], 'i');
    hsh_deref(&cp);
    ck_assert_uint_eq(stat_get(STAT_n_copy), 0);
}
END_TEST

/* ---- what a persistent store brings back ---- */

static char store_path[64];

static void
setup_file(void)
{
    char spec[128];
    int fd;

    strcpy(store_path, "/tmp/surogat-unit-XXXXXX");
    fd = mkstemp(store_path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    snprintf(spec, sizeof spec, "file,%s,4m", store_path);
    cache_setup_store(spec);
    http_init(&req, NULL, 0);
    cc_parse_request(&req, &qcc);
}

static void
teardown_file(void)
{
    cache_teardown();
    unlink(store_path);
}

/*
 * A head is stored encoded since the index's attribute version 4.  An
 * object a store kept from before (version 3, its head as text) is not
 * read with the wrong format: it is dropped at recovery, and one stored
 * now comes back with its head as it was given.
 */
START_TEST(recovery_refuses_heads_of_an_older_format)
{
    static const char head[] = CACHE_BUSY_HEAD;
    struct hsh_attr attr;
    struct sto_body b;
    struct sto_meta m;
    struct cobj *oc;
    char spec[128], text[sizeof head];

    oc = cache_busy("new", 3);
    cache_publish(&oc, "new body");
    /* As a version 3 daemon stored its objects. */
    memset(&attr, 0, sizeof attr);
    attr.version = 3;
    attr.status = 200;
    attr.fresh.t_origin = tim_real();
    attr.fresh.ttl = 60;
    m = (struct sto_meta){ .key = "old",
                           .key_len = 3,
                           .head = head,
                           .head_len = sizeof head - 1,
                           .attr = &attr,
                           .attr_len = sizeof attr };
    memset(&b, 0, sizeof b);
    ck_assert_int_eq(sto_open(&b, &m), 0);
    ck_assert_int_eq(sto_append(&b, "old body", 8), 0);
    sto_seal(&b);
    sto_body_release(&b);
    ck_assert_uint_eq(stat_get(STAT_n_object), 1);
    cache_teardown();

    snprintf(spec, sizeof spec, "file,%s,4m", store_path);
    cache_setup_store(spec);
    hsh_recover();
    ck_assert_uint_eq(stat_get(STAT_n_object), 1);
    ck_assert_int_eq(lookup("old", &oc), HSH_MISS);
    hsh_abandon(&oc, 0);
    ck_assert_int_eq(lookup("new", &oc), HSH_HIT);
    ck_assert_uint_eq(hsh_head_size(oc), sizeof head - 1);
    ck_assert_uint_eq(hsh_head_copy(oc, text), sizeof head - 1);
    ck_assert_mem_eq(text, head, sizeof head - 1);
    ck_assert_uint_eq(oc->body.len, 8);
    ck_assert_mem_eq(oc->body.first->data, "new body", 8);
    hsh_deref(&oc);
}
END_TEST

Suite *
hsh_suite(void)
{
    Suite *s = suite_create("hsh");
    TCase *tc = tcase_create("stream");

    tcase_add_checked_fixture(tc, setup, cache_teardown);
    tcase_add_test(tc, stream_until_complete);
    tcase_add_test(tc, abandon_fails_readers_and_frees_after_them);
    tcase_add_test(tc, trim_without_readers);
    tcase_add_test(tc, attributes_stay_with_the_object);
    suite_add_tcase(s, tc);
    tc = tcase_create("memory");
    tcase_add_checked_fixture(tc, setup, cache_teardown);
    tcase_add_test(tc, heap_cost_is_the_size_class);
    tcase_add_test(tc, store_charges_heap_classes);
    suite_add_tcase(s, tc);
    tc = tcase_create("waiting_list");
    tcase_add_checked_fixture(tc, setup, cache_teardown);
    tcase_add_test(tc, parked_waiters_rush_in_waves);
    tcase_add_test(tc, abandoned_fetch_hands_over_to_one_waiter);
    tcase_add_test(tc, parked_waiter_times_out);
    tcase_add_test(tc, parked_waiters_bounded);
    suite_add_tcase(s, tc);
    tc = tcase_create("overtaken");
    tcase_add_checked_fixture(tc, setup, cache_teardown);
    tcase_add_test(tc, purge_overtakes_a_fetch_under_way);
    tcase_add_test(tc, tag_purge_overtakes_a_streaming_fetch);
    tcase_add_test(tc, ban_overtakes_a_streaming_fetch);
    suite_add_tcase(s, tc);
    tc = tcase_create("copies");
    tcase_add_checked_fixture(tc, setup, cache_teardown);
    tcase_add_test(tc, copy_after_demand);
    tcase_add_test(tc, purge_takes_copies);
    tcase_add_test(tc, invalidated_while_made);
    tcase_add_test(tc, incomplete_copy_dropped);
    tcase_add_test(tc, copy_past_max_object_size);
    suite_add_tcase(s, tc);
    tc = tcase_create("copies_evicted");
    tcase_add_checked_fixture(tc, setup_small, cache_teardown);
    tcase_add_test(tc, copy_evicted_alone);
    tcase_add_test(tc, object_evicted_with_copy);
    suite_add_tcase(s, tc);
    tc = tcase_create("recovery");
    tcase_add_checked_fixture(tc, setup_file, teardown_file);
    tcase_add_test(tc, recovery_refuses_heads_of_an_older_format);
    suite_add_tcase(s, tc);
    return s;
}
