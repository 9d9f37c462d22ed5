/*
 * dir and be: backend references (reuse across reloads, bad confs, the
 * admin state), and the directors: round robin order, weighted random
 * spread, consistent hashing's remapping, fallback order, nesting, the
 * skip list and the all-sick answer.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"
#include "be_fixture.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/dir.h"
#include "surogat/http.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

static char ebuf[512];
static struct sb err;

static void
setup(void)
{
    par_init();
    AZ(stat_init());
    log_set_level(LOG_ERR); /* health changes log at LOG_WARNING */
    AZ(be_init());
    AZ(be_start());
    sb_init(&err, ebuf, sizeof ebuf);
}

static void
teardown(void)
{
    be_fini();
    stat_fini();
    par_fini();
}

static struct be *
mkbe(const char *name, unsigned weight)
{
    return (mkbe_err(name, weight, &err));
}

/* n leaves named b0..b(n-1), weight 1. */
static void
mkleaves(struct dir **leaf, struct be **be, unsigned n)
{
    char name[16];

    for (unsigned i = 0; i < n; i++) {
        snprintf(name, sizeof name, "b%u", i);
        be[i] = mkbe(name, 1);
        leaf[i] = dir_backend(be[i]);
    }
}

static struct dir *
mkdir_(const char *name, enum dir_type t, struct dir *const *m, unsigned n, const char *key)
{
    struct dir_conf c = { .name = name, .type = t, .members = m, .nmembers = n, .key = key };
    struct dir *d = dir_new(&c, &err);

    ck_assert_msg(d != NULL, "%s", ebuf);
    return (d);
}

/* The names of n successive picks, concatenated. */
static const char *
picks(struct dir *d, const struct dir_ctx *ctx, unsigned n)
{
    static char buf[256];
    struct be *be;

    buf[0] = '\0';
    for (unsigned i = 0; i < n; i++) {
        be = dir_pick(d, ctx);
        strcat(buf, be != NULL ? be->name : "-");
    }
    return (buf);
}

/*--------------------------------------------------------------------*/

START_TEST(be_reuse_and_conf)
{
    struct be_probe_conf pc = { .url = "/health", .window = 4, .threshold = 2, .initial = -1 };
    struct be_conf c;
    struct be *a, *b, *d;

    memset(&c, 0, sizeof c);
    c.name = "app";
    c.host = "127.0.0.1";
    c.port = "9";
    c.connect_timeout = c.first_byte_timeout = c.between_bytes_timeout = -1;
    ck_assert_int_eq(be_get(&c, &a, &err), 0);
    ck_assert_int_eq(be_get(&c, &b, &err), 0);
    ck_assert_ptr_eq(a, b); /* same name, same conf: a reload keeps it */
    ck_assert_str_eq(a->hostport, "127.0.0.1:9");
    ck_assert_uint_eq(a->weight, 1);
    c.weight = 3;
    ck_assert_int_eq(be_get(&c, &d, &err), 0);
    ck_assert_ptr_ne(a, d); /* another conf: another backend */
    ck_assert_ptr_eq(be_find("app"), d);
    be_release(&d);
    ck_assert_ptr_null(d);
    ck_assert_ptr_eq(be_find("app"), a);
    be_release(&a);
    ck_assert_ptr_eq(be_find("app"), b);
    be_release(&b);
    ck_assert_ptr_null(be_find("app"));
    ck_assert_int_eq(be_set_admin("app", BE_ADMIN_SICK), -1);

    c.port = "99999";
    ck_assert_int_eq(be_get(&c, &a, &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "backend app:"));
    ck_assert_ptr_nonnull(strstr(ebuf, "99999"));
    sb_init(&err, ebuf, sizeof ebuf);
    c.port = NULL; /* 80 */
    c.host = NULL;
    ck_assert_int_eq(be_get(&c, &a, &err), -1);
    ck_assert_str_eq(ebuf, "backend app: no host");
    sb_init(&err, ebuf, sizeof ebuf);
    c.host = "127.0.0.1";
    c.name = "a b";
    ck_assert_int_eq(be_get(&c, &a, &err), -1);
    sb_init(&err, ebuf, sizeof ebuf);
    c.name = "app";
    pc.threshold = 5;
    c.probe = &pc;
    ck_assert_int_eq(be_get(&c, &a, &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "backend app: probe needs"));
    ck_assert_ptr_null(a);
}
END_TEST

START_TEST(be_admin_state)
{
    struct be *a = mkbe("a", 1);
    char buf[1024];
    struct sb out;

    ck_assert(be_healthy(a));
    ck_assert_int_eq(be_set_admin("a", BE_ADMIN_SICK), 0);
    ck_assert(!be_healthy(a));
    ck_assert_uint_eq(stat_get(STAT_backend_health_changed), 1);
    ck_assert_int_eq(be_set_admin("a", BE_ADMIN_HEALTHY), 0);
    ck_assert(be_healthy(a));
    ck_assert_int_eq(be_set_admin("a", BE_ADMIN_AUTO), 0);
    ck_assert(be_healthy(a)); /* no probe: healthy */
    ck_assert_uint_eq(stat_get(STAT_backend_health_changed), 2);
    ck_assert_int_eq(be_set_admin("a", BE_ADMIN_SICK), 0);
    sb_init(&out, buf, sizeof buf);
    be_list(&out);
    ck_assert_msg(strstr(buf, "\na ") != NULL && strstr(buf, "127.0.0.1:9") != NULL &&
                      strstr(buf, " sick     sick ") != NULL,
                  "%s", buf);
    be_release(&a);
    sb_init(&out, buf, sizeof buf);
    be_list(&out);
    ck_assert_msg(strstr(buf, "\na ") == NULL, "released, still listed: %s", buf);
}
END_TEST

START_TEST(round_robin_order)
{
    struct dir *leaf[3], *rr;
    struct be *be[3];
    struct be *skip[1];
    struct dir_ctx ctx = { .skip = skip, .nskip = 1 };

    mkleaves(leaf, be, 3);
    rr = mkdir_("rr", DIR_ROUND_ROBIN, leaf, 3, NULL);
    ck_assert_str_eq(picks(rr, NULL, 7), "b0b1b2b0b1b2b0");
    AZ(be_set_admin("b2", BE_ADMIN_SICK));
    /* A sick member loses its turn; the next one does not get two. */
    ck_assert_str_eq(picks(rr, NULL, 4), "b1b0b1b0");
    AZ(be_set_admin("b2", BE_ADMIN_AUTO));
    skip[0] = be[1];
    ck_assert_str_eq(picks(rr, &ctx, 4), "b2b0b2b0");
    ck_assert(dir_healthy(rr));
    ck_assert_str_eq(dir_name(rr), "rr");
    ck_assert_str_eq(dir_name(leaf[0]), "b0");
    dir_free(&rr);
    ck_assert_ptr_null(rr);
    for (unsigned i = 0; i < 3; i++)
        dir_free(&leaf[i]);
}
END_TEST

START_TEST(random_weights)
{
    struct be *be[3] = { mkbe("w1", 1), mkbe("w2", 2), mkbe("w3", 3) };
    struct dir *leaf[3], *r;
    unsigned count[3] = { 0 }, n = 60000;
    struct be *got;

    for (unsigned i = 0; i < 3; i++)
        leaf[i] = dir_backend(be[i]);
    r = mkdir_("rnd", DIR_RANDOM, leaf, 3, NULL);
    dir_random_seed(42);
    for (unsigned i = 0; i < n; i++) {
        got = dir_pick(r, NULL);
        for (unsigned j = 0; j < 3; j++)
            count[j] += got == be[j];
    }
    /* 1:2:3; with n = 60000 one standard deviation is about 0.2%, allow 1%. */
    for (unsigned j = 0; j < 3; j++)
        ck_assert_msg(count[j] > n * (j + 1) / 6 - n / 100 && count[j] < n * (j + 1) / 6 + n / 100,
                      "weight %u: %u of %u", j + 1, count[j], n);
    AZ(be_set_admin("w3", BE_ADMIN_SICK));
    memset(count, 0, sizeof count);
    for (unsigned i = 0; i < n; i++) {
        got = dir_pick(r, NULL);
        for (unsigned j = 0; j < 3; j++)
            count[j] += got == be[j];
    }
    ck_assert_uint_eq(count[2], 0);
    ck_assert_msg(count[1] > n * 2 / 3 - n / 100 && count[1] < n * 2 / 3 + n / 100, "%u", count[1]);
    dir_free(&r);
    for (unsigned i = 0; i < 3; i++)
        dir_free(&leaf[i]);
}
END_TEST

/* The member each of NKEYS URLs hashes to, as an index into be[], or -1. */
#define NKEYS 20000
#define NBE   10

static void
hash_map(struct dir *d, struct be *const *be, int *map)
{
    struct http_hdr hdrs[4];
    struct http req;
    char url[32];
    struct dir_ctx ctx = { .req = &req };
    struct be *got;

    http_init(&req, hdrs, 4);
    for (unsigned k = 0; k < NKEYS; k++) {
        snprintf(url, sizeof url, "/obj/%u", k);
        req.url = (struct txt){ url, strlen(url) };
        got = dir_pick(d, &ctx);
        map[k] = -1;
        for (int j = 0; j < NBE; j++)
            if (got == be[j])
                map[k] = j;
    }
}

START_TEST(hash_consistent)
{
    static int before[NKEYS], after[NKEYS];
    struct dir *leaf[NBE], *h, *h9;
    struct be *be[NBE];
    unsigned per[NBE] = { 0 }, moved = 0;

    mkleaves(leaf, be, NBE);
    h = mkdir_("h", DIR_HASH, leaf, NBE, NULL);
    hash_map(h, be, before);
    for (unsigned k = 0; k < NKEYS; k++) {
        ck_assert_int_ge(before[k], 0);
        per[before[k]]++;
    }
    for (unsigned j = 0; j < NBE; j++) /* even: 2000 each, give or take */
        ck_assert_msg(per[j] > NKEYS / NBE * 8 / 10 && per[j] < NKEYS / NBE * 12 / 10, "%u: %u", j,
                      per[j]);
    /* Deterministic: the same map again. */
    hash_map(h, be, after);
    ck_assert_int_eq(memcmp(before, after, sizeof before), 0);

    /* b3 falls sick: only its keys move, and they spread over the others. */
    AZ(be_set_admin("b3", BE_ADMIN_SICK));
    hash_map(h, be, after);
    for (unsigned k = 0; k < NKEYS; k++) {
        if (before[k] != 3)
            ck_assert_int_eq(after[k], before[k]);
        else
            ck_assert_int_ne(after[k], 3);
        moved += after[k] != before[k];
    }
    ck_assert_msg(moved > NKEYS / NBE * 8 / 10 && moved < NKEYS / NBE * 12 / 10, "moved %u", moved);

    /* b9 leaves the director (a reload without it): again about 1/N move. */
    AZ(be_set_admin("b3", BE_ADMIN_AUTO));
    h9 = mkdir_("h", DIR_HASH, leaf, NBE - 1, NULL);
    hash_map(h9, be, after);
    moved = 0;
    for (unsigned k = 0; k < NKEYS; k++) {
        if (before[k] != 9)
            ck_assert_int_eq(after[k], before[k]);
        moved += after[k] != before[k];
    }
    ck_assert_msg(moved > NKEYS / NBE * 8 / 10 && moved < NKEYS / NBE * 12 / 10, "moved %u", moved);
    dir_free(&h);
    dir_free(&h9);
    for (unsigned i = 0; i < NBE; i++)
        dir_free(&leaf[i]);
}
END_TEST

START_TEST(hash_weighted_and_keys)
{
    struct be *be[2] = { mkbe("light", 1), mkbe("heavy", 3) };
    struct dir *leaf[2], *h, *hc, *hh;
    struct http_hdr hdrs[4];
    struct http req;
    struct dir_ctx ctx = { .req = &req };
    char url[32];
    unsigned heavy = 0;
    struct be *first, *got;

    for (unsigned i = 0; i < 2; i++)
        leaf[i] = dir_backend(be[i]);
    h = mkdir_("h", DIR_HASH, leaf, 2, "url");
    http_init(&req, hdrs, 4);
    for (unsigned k = 0; k < 8000; k++) {
        snprintf(url, sizeof url, "/w/%u", k);
        req.url = (struct txt){ url, strlen(url) };
        heavy += dir_pick(h, &ctx) == be[1];
    }
    ck_assert_msg(heavy > 5600 && heavy < 6400, "heavy got %u of 8000 (3/4 expected)", heavy);

    /* cookie:session: one session sticks to one backend whatever the URL. */
    hc = mkdir_("hc", DIR_HASH, leaf, 2, "cookie:session");
    AZ(http_add(&req, TXT_LIT("Cookie"), TXT_LIT("a=1; session=u123; b=2")));
    req.url = TXT_LIT("/x/0");
    first = dir_pick(hc, &ctx);
    for (unsigned k = 1; k < 200; k++) {
        snprintf(url, sizeof url, "/x/%u", k);
        req.url = (struct txt){ url, strlen(url) };
        ck_assert_ptr_eq(dir_pick(hc, &ctx), first);
    }
    /* Without the cookie, the URL decides: both backends get some. */
    req.nhdr = 0;
    heavy = 0;
    for (unsigned k = 0; k < 200; k++) {
        snprintf(url, sizeof url, "/x/%u", k);
        req.url = (struct txt){ url, strlen(url) };
        heavy += dir_pick(hc, &ctx) == be[1];
    }
    ck_assert(heavy > 0 && heavy < 200);

    /* header:X-User */
    hh = mkdir_("hh", DIR_HASH, leaf, 2, "header:X-User");
    AZ(http_add(&req, TXT_LIT("x-user"), TXT_LIT("alice")));
    req.url = TXT_LIT("/y/0");
    first = dir_pick(hh, &ctx);
    for (unsigned k = 1; k < 200; k++) {
        snprintf(url, sizeof url, "/y/%u", k);
        req.url = (struct txt){ url, strlen(url) };
        got = dir_pick(hh, &ctx);
        ck_assert_ptr_eq(got, first);
    }
    dir_free(&h);
    dir_free(&hc);
    dir_free(&hh);
    dir_free(&leaf[0]);
    dir_free(&leaf[1]);
}
END_TEST

START_TEST(fallback_nesting_skip)
{
    struct dir *leaf[4], *rr, *fb, *top[2];
    struct be *be[4];
    struct be *skip[2];
    struct dir_ctx ctx = { .skip = skip };

    mkleaves(leaf, be, 4);
    fb = mkdir_("fb", DIR_FALLBACK, leaf, 3, NULL);
    ck_assert_str_eq(picks(fb, NULL, 3), "b0b0b0");
    AZ(be_set_admin("b0", BE_ADMIN_SICK));
    ck_assert_str_eq(picks(fb, NULL, 2), "b1b1");
    skip[0] = be[1];
    ctx.nskip = 1;
    ck_assert_str_eq(picks(fb, &ctx, 2), "b2b2");
    AZ(be_set_admin("b0", BE_ADMIN_AUTO));
    ck_assert_str_eq(picks(fb, &ctx, 1), "b0");

    /* fallback(round_robin(b0, b1), b2, b3) */
    rr = mkdir_("rr", DIR_ROUND_ROBIN, leaf, 2, NULL);
    top[0] = rr;
    top[1] = leaf[2];
    dir_free(&fb);
    fb = mkdir_("fb", DIR_FALLBACK, top, 2, NULL);
    ck_assert_str_eq(picks(fb, NULL, 4), "b0b1b0b1");
    AZ(be_set_admin("b0", BE_ADMIN_SICK));
    ck_assert_str_eq(picks(fb, NULL, 2), "b1b1");
    skip[0] = be[1];
    ctx.nskip = 1;
    ck_assert_str_eq(picks(fb, &ctx, 2), "b2b2"); /* rr has nothing left: fall back */
    AZ(be_set_admin("b2", BE_ADMIN_SICK));
    ck_assert_ptr_null(dir_pick(fb, &ctx));
    ck_assert(dir_healthy(fb)); /* b1 is healthy, only skipped */
    AZ(be_set_admin("b1", BE_ADMIN_SICK));
    ck_assert(!dir_healthy(fb));
    ck_assert(!dir_healthy(rr));
    dir_free(&fb);
    dir_free(&rr);
    for (unsigned i = 0; i < 4; i++)
        dir_free(&leaf[i]);
}
END_TEST

START_TEST(all_sick_is_null)
{
    static const enum dir_type types[] = { DIR_ROUND_ROBIN, DIR_RANDOM, DIR_HASH, DIR_FALLBACK };
    struct dir *leaf[3], *d, *nest;
    struct be *be[3];
    uint64_t before;

    mkleaves(leaf, be, 3);
    for (unsigned i = 0; i < 3; i++)
        AZ(be_set_admin(be[i]->name, BE_ADMIN_SICK));
    before = stat_get(STAT_backend_unhealthy);
    for (size_t t = 0; t < ARRAY_LEN(types); t++) {
        d = mkdir_("d", types[t], leaf, 3, NULL);
        nest = mkdir_("n", types[t], &d, 1, NULL);
        ck_assert_ptr_null(dir_pick(d, NULL));
        ck_assert_ptr_null(dir_pick(nest, NULL));
        ck_assert(!dir_healthy(nest));
        AZ(be_set_admin("b1", BE_ADMIN_AUTO));
        ck_assert_ptr_eq(dir_pick(nest, NULL), be[1]);
        AZ(be_set_admin("b1", BE_ADMIN_SICK));
        dir_free(&nest);
        dir_free(&d);
    }
    ck_assert_uint_eq(stat_get(STAT_backend_unhealthy) - before, 2 * ARRAY_LEN(types));
    ck_assert_ptr_null(dir_pick(leaf[0], NULL));
    for (unsigned i = 0; i < 3; i++)
        dir_free(&leaf[i]);
}
END_TEST

START_TEST(bad_director_conf)
{
    struct dir *leaf[1];
    struct be *be[1];
    struct dir_conf c = { .name = "d", .type = DIR_HASH, .members = leaf, .nmembers = 1, .key = "body" };

    mkleaves(leaf, be, 1);
    ck_assert_ptr_null(dir_new(&c, &err));
    ck_assert_str_eq(ebuf, "director d: key 'body' is not url, hash, header:NAME or cookie:NAME");
    c.key = "header:";
    ck_assert_ptr_null(dir_new(&c, &err));
    c.key = "cookie:a";
    c.type = DIR_FALLBACK;
    ck_assert_ptr_null(dir_new(&c, &err));
    c.key = NULL;
    c.nmembers = 0;
    ck_assert_ptr_null(dir_new(&c, &err));
    c.nmembers = 1;
    c.type = DIR_BACKEND;
    ck_assert_ptr_null(dir_new(&c, &err));
    c.name = NULL;
    ck_assert_ptr_null(dir_new(&c, &err));
    dir_free(&leaf[0]);
}
END_TEST

/* Workers picking at once while the admin flips health: never a wrong or missing answer. */
struct race {
    struct dir *top;
    struct be *const *be; /* 5 */
    unsigned bad;
};

static void *
race_picker(void *arg)
{
    struct race *r = arg;
    struct http_hdr hdrs[2];
    struct http req;
    struct dir_ctx ctx = { .req = &req };
    char url[32];
    struct be *got;
    bool known;

    stat_thread_enter(); /* a NULL pick counts backend_unhealthy */
    http_init(&req, hdrs, 2);
    for (unsigned i = 0; i < 20000; i++) {
        snprintf(url, sizeof url, "/r/%u", i);
        req.url = (struct txt){ url, strlen(url) };
        got = dir_pick(r->top, &ctx);
        known = false;
        for (unsigned j = 0; j < 5; j++)
            known |= got == r->be[j];
        if (!known)
            __atomic_add_fetch(&r->bad, 1, __ATOMIC_RELAXED);
    }
    stat_thread_leave();
    return (NULL);
}

START_TEST(concurrent_picks)
{
    struct dir *leaf[5], *rr, *rnd, *h, *top, *mid[3];
    struct be *be[5];
    struct race r;
    pthread_t t[4];

    mkleaves(leaf, be, 5);
    rr = mkdir_("rr", DIR_ROUND_ROBIN, leaf, 2, NULL);
    rnd = mkdir_("rnd", DIR_RANDOM, leaf + 2, 2, NULL);
    h = mkdir_("h", DIR_HASH, leaf + 3, 2, NULL); /* b4 is never sick */
    mid[0] = rr;
    mid[1] = rnd;
    mid[2] = h;
    top = mkdir_("top", DIR_FALLBACK, mid, 3, NULL);
    r = (struct race){ top, be, 0 };
    for (unsigned i = 0; i < 4; i++)
        AZ(pthread_create(&t[i], NULL, race_picker, &r));
    for (unsigned i = 0; i < 2000; i++)
        AZ(be_set_admin(be[i % 4]->name, (i / 4) % 2 ? BE_ADMIN_AUTO : BE_ADMIN_SICK));
    for (unsigned i = 0; i < 4; i++)
        AZ(pthread_join(t[i], NULL));
    ck_assert_uint_eq(r.bad, 0);
    dir_free(&top);
    dir_free(&rr);
    dir_free(&rnd);
    dir_free(&h);
    for (unsigned i = 0; i < 5; i++)
        dir_free(&leaf[i]);
}
END_TEST

Suite *
dir_suite(void)
{
    Suite *s = suite_create("dir");
    TCase *tc = tcase_create("dir");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, be_reuse_and_conf);
    tcase_add_test(tc, be_admin_state);
    tcase_add_test(tc, round_robin_order);
    tcase_add_test(tc, random_weights);
    tcase_add_test(tc, hash_consistent);
    tcase_add_test(tc, hash_weighted_and_keys);
    tcase_add_test(tc, fallback_nesting_skip);
    tcase_add_test(tc, all_sick_is_null);
    tcase_add_test(tc, bad_director_conf);
    tcase_add_test(tc, concurrent_picks);
    suite_add_tcase(s, tc);
    return s;
}
