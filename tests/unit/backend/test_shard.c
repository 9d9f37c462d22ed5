/*
 * shard: the consistent-hash ring with bounded load.  Placement is a
 * function of the declaration (stable across orders, rebuilds and
 * processes); a backend leaving or joining moves about 1/N of the keys and
 * no others; weights give proportional shares; a sick backend is skipped
 * as if it had left; the load bound spills an overloaded backend's keys to
 * the next one and keeps every other backend under its bound; ramp-up
 * grows a returning backend's share linearly over the period.  Health is
 * set through the admin state; the clock and the load are injected.
 */
#include <math.h>
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
#include "surogat/shard.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

#define NKEYS 100000
#define NMAX  12

static char ebuf[512];
static struct sb err;
static struct be *be[NMAX]; /* b0 .. b11, weight 1 */

/* The injected clock and load. */
static double fake_now;
static unsigned fake_load[NMAX];

static double
clock_fake(void)
{
    return (fake_now);
}

static int
idx_of(const struct be *b)
{
    for (int i = 0; i < NMAX; i++)
        if (be[i] == b)
            return (i);
    return (-1);
}

static unsigned
load_fake(const struct be *b)
{
    int i = idx_of(b);

    ck_assert_int_ge(i, 0);
    return (fake_load[i]);
}

static uint64_t keys[NKEYS]; /* the hashes of "/obj/0" ... */

static uint64_t
key(unsigned k)
{
    char s[32];
    int n;

    if (k < NKEYS && keys[k] != 0)
        return (keys[k]);
    n = snprintf(s, sizeof s, "/obj/%u", k);
    return (shard_hash(s, (size_t)n));
}

/*
 * Check's assertions report each pass to the parent process, which costs
 * a system call: loops over 100,000 keys count their failures instead and
 * assert once, with the first one's story.
 */
static unsigned nbad;
static char first_bad[256];

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond) && nbad++ == 0)                                                                \
            snprintf(first_bad, sizeof first_bad, __VA_ARGS__);                                    \
    } while (0)
#define EXPECT_ALL() ck_assert_msg(nbad == 0, "%u failed, the first: %s", nbad, first_bad)

static struct be *
mkbe(const char *name, unsigned weight)
{
    return (mkbe_err(name, weight, &err));
}

static void
setup(void)
{
    char name[16];

    par_init();
    AZ(stat_init());
    log_set_level(LOG_ERR);
    AZ(be_init());
    sb_init(&err, ebuf, sizeof ebuf);
    /* Created before be_start(): healthy since the start, not ramping. */
    for (unsigned i = 0; i < NMAX; i++) {
        snprintf(name, sizeof name, "b%u", i);
        be[i] = mkbe(name, 1);
    }
    memset(fake_load, 0, sizeof fake_load);
    fake_now = 1000;
    nbad = 0;
    for (unsigned k = 0; k < NKEYS; k++)
        keys[k] = key(k);
}

static void
teardown(void)
{
    be_fini();
    stat_fini();
    par_fini();
}

static struct shard *
mkshard(struct be *const *m, unsigned n, const unsigned *w, double rampup, double factor)
{
    struct shard_conf c = { .name = "s",
                            .be = m,
                            .n = n,
                            .weight = w,
                            .rampup = rampup,
                            .balance_factor = factor,
                            .now = clock_fake,
                            .load = load_fake };
    struct shard *sh = shard_new(&c, &err);

    ck_assert_msg(sh != NULL, "%s", ebuf);
    return (sh);
}

/* map[k]: the index in be[] each key is picked to, -1 for NULL. */
static void
pick_map(const struct shard *sh, int *map)
{
    for (unsigned k = 0; k < NKEYS; k++)
        map[k] = idx_of(shard_pick(sh, key(k), NULL, 0));
}

static int map_a[NKEYS], map_b[NKEYS];

START_TEST(placement_stable)
{
    struct be *rev[NMAX];
    struct shard *a, *b;
    unsigned per[NMAX] = { 0 };
    /*
     * Which backend some keys belong to on the ring of b0..b4: the hash and
     * the points are part of the contract between nodes and versions, so a
     * change here moves cached objects between nodes.
     */
    static const struct {
        const char *key;
        size_t len;
        uint64_t hash;
        const char *owner;
    } golden[] = {
        { "/", 1, 0x7face396ae054c7dULL, "b0" },
        { "/obj/0", 6, 0x987a9ce7d19513eaULL, "b4" },
        { "/obj/1", 6, 0x4c66b4b75fe0036cULL, "b2" },
        { "example.com\0/a", 14, 0x733cc779bc282751ULL, "b2" },
        { "/static/app.js", 14, 0xae80cf04cb15dcfeULL, "b2" },
        { "/index.html", 11, 0xf6ad651c57d64427ULL, "b4" },
    };

    for (unsigned i = 0; i < 5; i++)
        rev[i] = be[4 - i];
    a = mkshard(be, 5, NULL, 0, 0);
    b = mkshard(rev, 5, NULL, 0, 0); /* another order, another ring: the same placement */
    ck_assert_uint_eq(shard_points(a), 5 * SHARD_REPLICAS_DEFAULT);
    pick_map(a, map_a);
    pick_map(b, map_b);
    ck_assert_int_eq(memcmp(map_a, map_b, sizeof map_a), 0);
    for (unsigned k = 0; k < NKEYS; k++) {
        EXPECT(map_a[k] >= 0 && shard_owner(a, key(k)) == be[map_a[k]], "key %u", k);
        per[map_a[k] >= 0 ? map_a[k] : 0]++;
    }
    EXPECT_ALL();
    for (unsigned i = 0; i < 5; i++)
        ck_assert_msg(fabs(per[i] / (NKEYS / 5.0) - 1) < 0.15, "b%u: %u keys", i, per[i]);
    for (unsigned g = 0; g < ARRAY_LEN(golden); g++) {
        uint64_t h = shard_hash(golden[g].key, golden[g].len);
        const char *got = shard_pick(a, h, NULL, 0)->name;
        ck_assert_msg(h == golden[g].hash, "%s: %016llx", golden[g].key, (unsigned long long)h);
        ck_assert_msg(strcmp(got, golden[g].owner) == 0, "%s: %s", golden[g].key, got);
    }
    shard_free(&a);
    shard_free(&b);
    ck_assert_ptr_null(a);
}
END_TEST

/*
 * With N = 3..10 backends, one leaving moves exactly the keys it owned,
 * about 1/N; one joining takes about 1/(N+1), each from its old owner, and
 * moves nothing else.  Bound: 15% of the expected share either way, at
 * about three standard deviations for 256 points per backend.
 */
START_TEST(join_leave_moves_one_nth)
{
    for (unsigned n = 3; n <= 10; n++) {
        struct shard *full = mkshard(be, n, NULL, 0, 0);
        struct shard *less = mkshard(be, n - 1, NULL, 0, 0); /* without b(n-1) */
        unsigned moved = 0, owned = 0;
        double want;

        pick_map(full, map_a);
        pick_map(less, map_b);
        for (unsigned k = 0; k < NKEYS; k++) {
            owned += map_a[k] == (int)n - 1;
            if (map_a[k] != map_b[k]) {
                moved++;
                /* Leave: only b(n-1)'s keys move.  Join: only to b(n-1). */
                EXPECT(map_a[k] == (int)n - 1, "N=%u: key %u moved from b%d", n, k, map_a[k]);
            }
        }
        EXPECT_ALL();
        ck_assert_uint_eq(moved, owned);
        want = (double)NKEYS / n;
        ck_assert_msg(fabs(moved / want - 1) < 0.15, "N=%u: %u moved, %.0f expected", n, moved,
                      want);
        /* Another one leaving from the middle: b0. */
        shard_free(&less);
        less = mkshard(be + 1, n - 1, NULL, 0, 0);
        pick_map(less, map_b);
        moved = 0;
        for (unsigned k = 0; k < NKEYS; k++) {
            if (map_a[k] != map_b[k]) {
                EXPECT(map_a[k] == 0, "N=%u: key %u moved from b%d", n, k, map_a[k]);
                moved++;
            }
        }
        EXPECT_ALL();
        ck_assert_msg(fabs(moved / want - 1) < 0.15, "N=%u: b0 leaving moved %u", n, moved);
        shard_free(&full);
        shard_free(&less);
    }
}
END_TEST

START_TEST(weights_proportional)
{
    static const unsigned w[4] = { 1, 2, 3, 4 };
    struct shard *sh = mkshard(be, 4, w, 0, 0);
    unsigned per[4] = { 0 };

    ck_assert_uint_eq(shard_points(sh), 10 * SHARD_REPLICAS_DEFAULT);
    pick_map(sh, map_a);
    for (unsigned k = 0; k < NKEYS; k++)
        per[map_a[k]]++;
    /* Within 2 points of percentage of w/10: 10%, 20%, 30%, 40%. */
    for (unsigned i = 0; i < 4; i++)
        ck_assert_msg(fabs(per[i] * 100.0 / NKEYS - w[i] * 10.0) < 2, "weight %u: %.2f%%", w[i],
                      per[i] * 100.0 / NKEYS);
    shard_free(&sh);

    /* The backends' own weights when the shard gives none. */
    {
        struct be *heavy[2] = { mkbe("light", 1), mkbe("heavy", 3) };
        unsigned h = 0;
        sh = mkshard(heavy, 2, NULL, 0, 0);
        ck_assert_uint_eq(shard_points(sh), 4 * SHARD_REPLICAS_DEFAULT);
        for (unsigned k = 0; k < NKEYS; k++)
            h += shard_pick(sh, key(k), NULL, 0) == heavy[1];
        ck_assert_msg(fabs(h * 100.0 / NKEYS - 75) < 3, "heavy: %u", h);
        shard_free(&sh);
    }
}
END_TEST

/* A sick backend's keys go where they would if it had left; the others stay. */
START_TEST(sick_skipped_as_if_gone)
{
    struct shard *full = mkshard(be, 6, NULL, 0, 0);
    struct shard *less;
    struct be *without[5];
    unsigned j = 0;

    for (unsigned i = 0; i < 6; i++)
        if (i != 2)
            without[j++] = be[i];
    less = mkshard(without, 5, NULL, 0, 0);
    pick_map(less, map_b);
    AZ(be_set_admin("b2", BE_ADMIN_SICK));
    pick_map(full, map_a);
    ck_assert_int_eq(memcmp(map_a, map_b, sizeof map_a), 0);
    /* The skip list (failover) does the same for one pick. */
    AZ(be_set_admin("b2", BE_ADMIN_AUTO));
    for (unsigned k = 0; k < 2000; k++) {
        struct be *skip = shard_owner(full, key(k));
        struct be *got = shard_pick(full, key(k), &skip, 1);
        ck_assert_ptr_nonnull(got);
        ck_assert_ptr_ne(got, skip);
        if (skip != be[2])
            continue;
        ck_assert_ptr_eq(got, be[map_b[k]]);
    }
    /* All sick: NULL; one back: it takes every key. */
    for (unsigned i = 0; i < 6; i++)
        AZ(be_set_admin(be[i]->name, BE_ADMIN_SICK));
    for (unsigned k = 0; k < 1000; k++)
        ck_assert_ptr_null(shard_pick(full, key(k), NULL, 0));
    AZ(be_set_admin("b4", BE_ADMIN_AUTO));
    for (unsigned k = 0; k < 1000; k++)
        ck_assert_ptr_eq(shard_pick(full, key(k), NULL, 0), be[4]);
    {
        struct be *skip = be[4];
        ck_assert_ptr_null(shard_pick(full, key(1), &skip, 1));
    }
    shard_free(&full);
    shard_free(&less);
}
END_TEST

/*
 * balance_factor 1.25 over 4 backends: b1 far above the bound hands each
 * of its keys to the next backend on the ring, as if it had left.
 */
START_TEST(bounded_load_spills)
{
    struct shard *sh = mkshard(be, 4, NULL, 0, 1.25);
    struct shard *without = mkshard((struct be *[]){ be[0], be[2], be[3] }, 3, NULL, 0, 0);
    struct shard *nobound = mkshard(be, 4, NULL, 0, 0);
    unsigned spilled = 0;

    fake_load[1] = 100; /* its bound: 1.25 * 100 / 4 + 1 = 32.25 */
    for (unsigned k = 0; k < NKEYS; k++) {
        struct be *owner = shard_owner(sh, key(k)), *got = shard_pick(sh, key(k), NULL, 0);
        if (owner == be[1]) {
            EXPECT(got == shard_owner(without, key(k)), "key %u: not to the next one", k);
            spilled++;
        } else {
            EXPECT(got == owner, "key %u: not to its owner", k);
        }
        /* Without a bound the load does not matter. */
        EXPECT(shard_pick(nobound, key(k), NULL, 0) == owner, "key %u: moved without a bound", k);
    }
    EXPECT_ALL();
    ck_assert_uint_gt(spilled, NKEYS / 8);
    /* Under its bound again (14 < 1.25 * 44 / 4 + 1 = 14.75), it takes its keys back. */
    fake_load[0] = fake_load[2] = fake_load[3] = 10;
    fake_load[1] = 14;
    for (unsigned k = 0; k < NKEYS; k++)
        EXPECT(shard_pick(sh, key(k), NULL, 0) == shard_owner(sh, key(k)), "key %u moved", k);
    EXPECT_ALL();
    /* A quiet fleet: one request in flight does not push the next key away. */
    memset(fake_load, 0, sizeof fake_load);
    fake_load[1] = 1;
    for (unsigned k = 0; k < NKEYS; k++)
        EXPECT(shard_pick(sh, key(k), NULL, 0) == shard_owner(sh, key(k)), "quiet: key %u", k);
    EXPECT_ALL();
    shard_free(&sh);
    shard_free(&without);
    shard_free(&nobound);
}
END_TEST

/*
 * Requests that stay in flight, placed one after another: whatever the
 * keys, no backend takes one while at c * L * w / W + 1 or more -- b0
 * starting far above it only takes keys once the others caught up -- and
 * each key still goes to its owner whenever the owner is under its bound.
 */
START_TEST(bounded_load_holds)
{
    static const unsigned w[5] = { 1, 1, 2, 1, 1 };
    struct shard *sh = mkshard(be, 5, w, 0, 1.25);
    unsigned total;

    fake_load[0] = 60;
    total = 60;
    for (unsigned k = 0; k < 3000; k++) {
        /* Skewed keys: a third of them the same few, as hot objects are. */
        uint64_t kh = key(k % 3 == 0 ? k % 7 : k);
        struct be *owner = shard_owner(sh, kh), *got = shard_pick(sh, kh, NULL, 0);
        int m = idx_of(got), o = idx_of(owner);
        double bound_m = 1.25 * total * w[m] / 6.0 + 1;
        double bound_o = 1.25 * total * w[o] / 6.0 + 1;

        ck_assert_msg(fake_load[m] < bound_m, "key %u: b%d holds %u, bound %.0f", k, m,
                      fake_load[m], bound_m);
        if (fake_load[o] < bound_o)
            ck_assert_int_eq(m, o);
        fake_load[m]++;
        total++;
        /* Some requests end: the oldest of a random backend. */
        if (k % 4 == 3) {
            unsigned r = (unsigned)(key(k + 7777) % 5);
            if (fake_load[r] > 0) {
                fake_load[r]--;
                total--;
            }
        }
    }
    for (unsigned i = 0; i < 5; i++)
        ck_assert_msg(fake_load[i] < 1.25 * total * w[i] / 6.0 + 2, "b%u: %u of %u", i,
                      fake_load[i], total);
    shard_free(&sh);
}
END_TEST

/*
 * b3 comes back healthy: over rampup = 100 s its share of its own keys
 * grows as the elapsed fraction, each key it took at 30% it still takes
 * at 60%, and the keys it lets go are picked as if it were away.
 */
START_TEST(rampup_linear)
{
    struct shard *sh = mkshard(be, 5, NULL, 100, 0);
    struct shard *away = mkshard((struct be *[]){ be[0], be[1], be[2], be[4] }, 4, NULL, 0, 0);
    static unsigned char took_prev[NKEYS];
    double t0;

    ck_assert(be_healthy_since(be[3]) == 0);
    fake_now = 5000;
    pick_map(sh, map_a); /* healthy since the start: no ramp whatever the clock */
    for (unsigned k = 0; k < NKEYS; k++)
        EXPECT(be[map_a[k]] == shard_owner(sh, key(k)), "key %u ramped", k);
    EXPECT_ALL();
    AZ(be_set_admin("b3", BE_ADMIN_SICK));
    AZ(be_set_admin("b3", BE_ADMIN_AUTO));
    t0 = be_healthy_since(be[3]);
    ck_assert(t0 > 0 && t0 <= tim_mono());
    memset(took_prev, 0, sizeof took_prev);
    for (unsigned step = 0; step <= 12; step++) {
        double f = step / 10.0;
        unsigned owned = 0, took = 0;

        fake_now = t0 + f * 100;
        for (unsigned k = 0; k < NKEYS; k++) {
            struct be *got = shard_pick(sh, key(k), NULL, 0);
            if (shard_owner(sh, key(k)) != be[3]) {
                EXPECT(got == shard_owner(sh, key(k)), "key %u of another moved", k);
                continue;
            }
            owned++;
            if (got == be[3]) {
                took++;
                took_prev[k] = 1;
            } else {
                EXPECT(!took_prev[k], "key %u taken earlier, refused at %.1f", k, f);
                EXPECT(got == shard_owner(away, key(k)), "key %u not to the next one", k);
            }
        }
        EXPECT_ALL();
        ck_assert_msg(fabs((double)took / owned - SRG_MIN(f, 1.0)) < 0.02, "at %.1f: %u of %u",
                      f, took, owned);
    }
    shard_free(&sh);
    shard_free(&away);
}
END_TEST

/*
 * Every usable backend ramping (all coming back at once): the first usable
 * backend on the ring takes the key rather than nobody.  A backend created
 * after be_start() (a reload declaring it) joins ramping.
 */
START_TEST(rampup_all_and_join)
{
    struct shard *sh = mkshard(be, 3, NULL, 60, 0);
    struct be *late;
    double t;

    for (unsigned i = 0; i < 3; i++) {
        AZ(be_set_admin(be[i]->name, BE_ADMIN_SICK));
        AZ(be_set_admin(be[i]->name, BE_ADMIN_AUTO));
    }
    /* b0 came back first; at that instant all three take nothing of their own. */
    fake_now = be_healthy_since(be[0]);
    for (unsigned k = 0; k < 5000; k++)
        ck_assert_ptr_eq(shard_pick(sh, key(k), NULL, 0), shard_owner(sh, key(k)));
    shard_free(&sh);

    AZ(be_start());
    t = tim_mono();
    late = mkbe("late", 1);
    ck_assert(be_healthy_since(late) >= t);
    ck_assert(be_healthy_since(be[5]) == 0);
}
END_TEST

START_TEST(bad_conf)
{
    struct shard_conf c = { .name = "s", .be = be, .n = 3 };
    struct be *twice[2] = { be[0], be[0] };
    static const unsigned zero[3] = { 1, 0, 1 };
    struct dir *leaf[2], *inner, *d;
    struct dir_conf dc;

    c.balance_factor = 0.5;
    ck_assert_ptr_null(shard_new(&c, &err));
    ck_assert_str_eq(ebuf, "director s: balance_factor must be 0 (no bound) or 1 to 100");
    c.balance_factor = 0;
    sb_init(&err, ebuf, sizeof ebuf);
    c.weight = zero;
    ck_assert_ptr_null(shard_new(&c, &err));
    ck_assert_str_eq(ebuf, "director s: the weight of b1 must be at least 1");
    c.weight = NULL;
    sb_init(&err, ebuf, sizeof ebuf);
    c.be = twice;
    c.n = 2;
    ck_assert_ptr_null(shard_new(&c, &err));
    ck_assert_str_eq(ebuf, "director s: backend b0 is listed twice");
    c.be = be;
    c.n = 3;
    sb_init(&err, ebuf, sizeof ebuf);
    c.replicas = SHARD_REPLICAS_MAX;
    c.weight = (const unsigned[]){ 1000, 1, 1 };
    ck_assert_ptr_null(shard_new(&c, &err));
    ck_assert_str_eq(ebuf, "director s: replicas x total weight is 4104192 points, more than "
                           "1048576: lower replicas or the weights");
    c.weight = NULL;
    c.rampup = -1;
    ck_assert_ptr_null(shard_new(&c, &err));

    /* Through dir_new(): a shard's members are backends; the shard fields are a shard's. */
    leaf[0] = dir_backend(be[0]);
    leaf[1] = dir_backend(be[1]);
    dc = (struct dir_conf){ .name = "rr", .type = DIR_ROUND_ROBIN, .members = leaf, .nmembers = 2 };
    inner = dir_new(&dc, &err);
    AN(inner);
    dc.rampup = 30;
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_ptr_null(dir_new(&dc, &err));
    ck_assert_str_eq(ebuf, "director rr: weights, replicas, rampup and balance_factor are a "
                           "shard director's");
    dc.name = "fleet";
    dc.type = DIR_SHARD;
    dc.members = (struct dir *[]){ leaf[0], inner };
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_ptr_null(dir_new(&dc, &err));
    ck_assert_str_eq(ebuf, "director fleet: rr is a director; a shard's members are backends");
    dc.members = leaf;
    d = dir_new(&dc, &err);
    AN(d);
    ck_assert_int_eq(dir_type(d), DIR_SHARD);
    dir_free(&d);
    dir_free(&inner);
    dir_free(&leaf[0]);
    dir_free(&leaf[1]);
}
END_TEST

/*
 * The director's keys: "hash" (the default) is the cache key when the
 * request has one, else Host (any case) and URL -- the same bytes as the
 * built-in cache key, so a pass and a lookup of the same URL agree.
 */
START_TEST(director_keys)
{
    struct shard *ring = mkshard(be, 6, NULL, 0, 0);
    struct dir *leaf[6], *d, *du;
    struct dir_conf dc;
    struct http_hdr hdrs[4];
    struct http req;
    struct dir_ctx ctx = { .req = &req };
    char url[32], ck[64];
    unsigned differ = 0;

    for (unsigned i = 0; i < 6; i++)
        leaf[i] = dir_backend(be[i]);
    dc = (struct dir_conf){ .name = "fleet", .type = DIR_SHARD, .members = leaf, .nmembers = 6 };
    d = dir_new(&dc, &err);
    AN(d);
    dc.key = "url";
    du = dir_new(&dc, &err);
    AN(du);
    http_init(&req, hdrs, 4);
    AZ(http_add(&req, TXT_LIT("Host"), TXT_LIT("WWW.Example.com")));
    for (unsigned k = 0; k < 2000; k++) {
        int n = snprintf(url, sizeof url, "/p/%u", k);
        size_t kl;
        struct be *by_req, *by_key;

        req.url = (struct txt){ url, (size_t)n };
        ctx.key = NULL;
        by_req = dir_pick(d, &ctx);
        kl = (size_t)snprintf(ck, sizeof ck, "www.example.com%c%s", 0, url);
        ctx.key = ck;
        ctx.keylen = kl;
        by_key = dir_pick(d, &ctx);
        ck_assert_ptr_eq(by_req, by_key);
        ck_assert_ptr_eq(by_key, shard_owner(ring, shard_hash(ck, kl)));
        /* hash_data pieces after the key change it; key "url" ignores them. */
        ck[kl] = '\0';
        memcpy(ck + kl + 1, "en", 2);
        ctx.keylen = kl + 3;
        differ += dir_pick(d, &ctx) != by_key;
        ck_assert_ptr_eq(dir_pick(du, &ctx), dir_pick(du, &(struct dir_ctx){ .req = &req }));
    }
    ck_assert_uint_gt(differ, 2000 / 2);
    dir_free(&d);
    dir_free(&du);
    shard_free(&ring);
    for (unsigned i = 0; i < 6; i++)
        dir_free(&leaf[i]);
}
END_TEST

Suite *
shard_suite(void)
{
    Suite *s = suite_create("shard");
    TCase *tc = tcase_create("shard");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, placement_stable);
    tcase_add_test(tc, join_leave_moves_one_nth);
    tcase_add_test(tc, weights_proportional);
    tcase_add_test(tc, sick_skipped_as_if_gone);
    tcase_add_test(tc, bounded_load_spills);
    tcase_add_test(tc, bounded_load_holds);
    tcase_add_test(tc, rampup_linear);
    tcase_add_test(tc, rampup_all_and_join);
    tcase_add_test(tc, bad_conf);
    tcase_add_test(tc, director_keys);
    suite_add_tcase(s, tc);
    return (s);
}
