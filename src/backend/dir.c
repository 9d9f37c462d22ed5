/*
 * Directors.
 *
 * A director is immutable once built; workers pick through it at the
 * same time without a lock.  Round robin keeps one atomic cursor, written
 * with relaxed stores: two workers picking at the same instant may both
 * get the same member, which costs a little evenness and nothing else.
 * Random draws from a per-thread xorshift generator.
 *
 * Hash is weighted rendezvous (highest random weight) hashing: each
 * member scores weight / -ln(u), u a uniform value hashed from the
 * request key and the member's name, and the best usable score wins.
 * When a member leaves or falls sick only the keys it held move, each to
 * its own second best, so the others keep their cache-warm backends.
 *
 * Shard hands its backends and its key hash to a ring (shard.c), which
 * also weighs health, ramp-up and load.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/dir.h"
#include "surogat/http.h"
#include "surogat/sb.h"
#include "surogat/shard.h"
#include "surogat/stat.h"

enum dir_key {
    DIR_KEY_URL,
    DIR_KEY_CACHE, /* "hash": the cache key */
    DIR_KEY_HEADER,
    DIR_KEY_COOKIE,
};

struct dir {
    unsigned magic;
#define DIR_MAGIC 0x4d1ae6c3
    enum dir_type type;
    char *name;          /* owned, except a leaf's: its backend's */
    struct be *be;       /* DIR_BACKEND */
    struct dir **member; /* owned array; the members are not */
    uint64_t *mhash;     /* DIR_HASH: hash of each member's name */
    unsigned n;
    uint64_t weight; /* the backend's, or the sum of the members' */
    enum dir_key key;
    char *keyname;   /* header or cookie name */
    struct shard *shard; /* DIR_SHARD */
    unsigned cursor; /* DIR_ROUND_ROBIN: atomic, the next member to try */
};

/* A bitmap of members a pick has ruled out. */
struct excl {
    uint64_t w[(DIR_MEMBERS_MAX + 63) / 64];
};

static bool
is_excl(const struct excl *x, unsigned i)
{
    return ((x->w[i / 64] >> (i % 64)) & 1);
}

static void
set_excl(struct excl *x, unsigned i)
{
    x->w[i / 64] |= (uint64_t)1 << (i % 64);
}

/* The hashes are the shard ring's (shard.h): stable across processes. */
#define mix64(x)           shard_hash_end(x)
#define hash_bytes(p, len) shard_hash(p, len)

/*--------------------------------------------------------------------
 * Building.
 */

struct dir *
dir_backend(struct be *be)
{
    struct dir *d;

    OBJ_CHECK(be, BE_MAGIC);
    OBJ_NEW(d, DIR_MAGIC);
    d->type = DIR_BACKEND;
    d->name = be->name;
    d->be = be;
    d->weight = be->weight;
    return (d);
}

static int
parse_key(struct dir *d, const char *key, struct sb *err)
{
    const char *name = NULL;

    if (key == NULL)
        key = d->type == DIR_SHARD ? "hash" : "url";
    if (strcmp(key, "url") == 0 || strcmp(key, "hash") == 0) {
        d->key = key[0] == 'u' ? DIR_KEY_URL : DIR_KEY_CACHE;
        return (0);
    }
    if (strncmp(key, "header:", 7) == 0) {
        d->key = DIR_KEY_HEADER;
        name = key + 7;
    } else if (strncmp(key, "cookie:", 7) == 0) {
        d->key = DIR_KEY_COOKIE;
        name = key + 7;
    }
    if (name == NULL || *name == '\0' || strpbrk(name, " \t\r\n:;=") != NULL) {
        sb_printf(err, "director %s: key '%.64s' is not url, hash, header:NAME or cookie:NAME",
                  d->name, key);
        return (-1);
    }
    d->keyname = strdup(name);
    AN(d->keyname);
    return (0);
}

/* The ring of a shard director, whose members are all backends. */
static int
new_shard(struct dir *d, const struct dir_conf *c, struct sb *err)
{
    struct be *be[DIR_MEMBERS_MAX];
    struct shard_conf sc;

    for (unsigned i = 0; i < d->n; i++) {
        if (d->member[i]->type != DIR_BACKEND) {
            sb_printf(err, "director %s: %s is a director; a shard's members are backends",
                      d->name, d->member[i]->name);
            return (-1);
        }
        be[i] = d->member[i]->be;
    }
    memset(&sc, 0, sizeof sc);
    sc.name = d->name;
    sc.be = be;
    sc.n = d->n;
    sc.weight = c->weights;
    sc.replicas = c->replicas;
    sc.rampup = c->rampup;
    sc.balance_factor = c->balance_factor;
    d->shard = shard_new(&sc, err);
    return (d->shard != NULL ? 0 : -1);
}

struct dir *
dir_new(const struct dir_conf *c, struct sb *err)
{
    struct dir *d;

    AN(c);
    if (c->name == NULL || *c->name == '\0') {
        sb_cat(err, "director without a name");
        return (NULL);
    }
    if (c->type != DIR_ROUND_ROBIN && c->type != DIR_RANDOM && c->type != DIR_HASH &&
        c->type != DIR_FALLBACK && c->type != DIR_SHARD) {
        sb_printf(err, "director %s: unknown type", c->name);
        return (NULL);
    }
    if (c->nmembers == 0 || c->nmembers > DIR_MEMBERS_MAX) {
        sb_printf(err, "director %s: needs 1 to %u backends or directors", c->name,
                  DIR_MEMBERS_MAX);
        return (NULL);
    }
    if (c->key != NULL && c->type != DIR_HASH && c->type != DIR_SHARD) {
        sb_printf(err, "director %s: only a hash or shard director takes a key", c->name);
        return (NULL);
    }
    if ((c->weights != NULL || c->replicas != 0 || c->rampup != 0 || c->balance_factor != 0) &&
        c->type != DIR_SHARD) {
        sb_printf(err,
                  "director %s: weights, replicas, rampup and balance_factor are a shard "
                  "director's",
                  c->name);
        return (NULL);
    }
    OBJ_NEW(d, DIR_MAGIC);
    d->type = c->type;
    d->name = strdup(c->name);
    AN(d->name);
    if (parse_key(d, c->key, err) != 0) {
        free(d->name);
        OBJ_FREE(&d);
        return (NULL);
    }
    d->n = c->nmembers;
    d->member = calloc(d->n, sizeof *d->member);
    d->mhash = calloc(d->n, sizeof *d->mhash);
    AN(d->member);
    AN(d->mhash);
    for (unsigned i = 0; i < d->n; i++) {
        struct dir *m = c->members[i];
        OBJ_CHECK(m, DIR_MAGIC);
        d->member[i] = m;
        d->mhash[i] = hash_bytes(m->name, strlen(m->name));
        d->weight += m->weight;
    }
    if (d->type == DIR_SHARD && new_shard(d, c, err) != 0) {
        dir_free(&d);
        return (NULL);
    }
    return (d);
}

void
dir_free(struct dir **dp)
{
    struct dir *d;

    OBJ_TAKE(d, dp, DIR_MAGIC);
    if (d->type != DIR_BACKEND)
        free(d->name);
    free(d->member);
    free(d->mhash);
    free(d->keyname);
    if (d->shard != NULL)
        shard_free(&d->shard);
    OBJ_FREE(&d);
}

const char *
dir_name(const struct dir *d)
{
    OBJ_CHECK(d, DIR_MAGIC);
    return (d->name);
}

enum dir_type
dir_type(const struct dir *d)
{
    OBJ_CHECK(d, DIR_MAGIC);
    return (d->type);
}

unsigned
dir_nmembers(const struct dir *d)
{
    OBJ_CHECK(d, DIR_MAGIC);
    return (d->type == DIR_BACKEND ? 0 : d->n);
}

const struct dir *
dir_member(const struct dir *d, unsigned i)
{
    OBJ_CHECK(d, DIR_MAGIC);
    SRG_ASSERT(d->type != DIR_BACKEND && i < d->n);
    return (d->member[i]);
}

const char *
dir_type_name(enum dir_type t)
{
    switch (t) {
    case DIR_BACKEND:
        return ("backend");
    case DIR_ROUND_ROBIN:
        return ("round_robin");
    case DIR_RANDOM:
        return ("random");
    case DIR_HASH:
        return ("hash");
    case DIR_FALLBACK:
        return ("fallback");
    case DIR_SHARD:
        return ("shard");
    }
    SRG_WRONG("bad director type");
}

bool
dir_healthy(const struct dir *d)
{
    OBJ_CHECK(d, DIR_MAGIC);
    if (d->type == DIR_BACKEND)
        return (be_healthy(d->be));
    for (unsigned i = 0; i < d->n; i++)
        if (dir_healthy(d->member[i]))
            return (true);
    return (false);
}

/*--------------------------------------------------------------------
 * Picking.
 */

static __thread uint64_t rng_state;

void
dir_random_seed(uint64_t seed)
{
    rng_state = seed != 0 ? seed : 1; /* xorshift stays at 0 forever */
}

/* xorshift64*: plenty for spreading load, and cheap. */
static uint64_t
rng_next(void)
{
    uint64_t x = rng_state;

    if (x == 0) {
        if (getrandom(&x, sizeof x, GRND_NONBLOCK) != sizeof x || x == 0)
            x = (uint64_t)(uintptr_t)&rng_state | 1;
    }
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return (x * 0x2545f4914f6cdd1dULL);
}

static bool
skipped(const struct be *be, const struct dir_ctx *ctx)
{
    if (ctx == NULL)
        return (false);
    for (unsigned i = 0; i < ctx->nskip; i++)
        if (ctx->skip[i] == be)
            return (true);
    return (false);
}

/* Whether member m is ruled out at once; directors are only known by trying. */
static bool
leaf_unusable(const struct dir *m, const struct dir_ctx *ctx)
{
    return (m->type == DIR_BACKEND && (!be_healthy(m->be) || skipped(m->be, ctx)));
}

static struct be *pick(struct dir *d, const struct dir_ctx *ctx);

static struct be *
pick_rr(struct dir *d, const struct dir_ctx *ctx)
{
    unsigned start = __atomic_load_n(&d->cursor, __ATOMIC_RELAXED);
    struct be *be;

    for (unsigned i = 0; i < d->n; i++) {
        unsigned idx = (start + i) % d->n;
        be = pick(d->member[idx], ctx);
        if (be != NULL) {
            /* Past the one taken, as Varnish does: a sick member's turn is not doubled up. */
            __atomic_store_n(&d->cursor, (idx + 1) % d->n, __ATOMIC_RELAXED);
            return (be);
        }
    }
    return (NULL);
}

static struct be *
pick_fallback(struct dir *d, const struct dir_ctx *ctx)
{
    struct be *be;

    for (unsigned i = 0; i < d->n; i++)
        if ((be = pick(d->member[i], ctx)) != NULL)
            return (be);
    return (NULL);
}

static struct be *
pick_random(struct dir *d, const struct dir_ctx *ctx)
{
    struct excl x;
    uint64_t total, r;
    unsigned i;
    struct be *be;

    memset(&x, 0, sizeof x);
    for (;;) {
        total = 0;
        for (i = 0; i < d->n; i++) {
            if (!is_excl(&x, i) && leaf_unusable(d->member[i], ctx))
                set_excl(&x, i);
            if (!is_excl(&x, i))
                total += d->member[i]->weight;
        }
        if (total == 0)
            return (NULL);
        r = rng_next() % total;
        for (i = 0; i < d->n; i++) {
            if (is_excl(&x, i))
                continue;
            if (r < d->member[i]->weight)
                break;
            r -= d->member[i]->weight;
        }
        SRG_ASSERT(i < d->n);
        if ((be = pick(d->member[i], ctx)) != NULL)
            return (be);
        set_excl(&x, i); /* a director with nothing usable under it */
    }
}

/*
 * The built-in cache key's hash without building it: the Host
 * lower-cased, a NUL, the request-target (req_cache_key()'s bytes).
 */
static uint64_t
host_url_hash(const struct http *hp)
{
    const struct txt *host = http_value(hp, "Host");
    uint64_t h = SHARD_HASH_INIT;

    for (size_t i = 0; host != NULL && i < host->len; i++) {
        char c = host->b[i];
        c = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
        h = shard_hash_add(h, &c, 1);
    }
    h = shard_hash_add(h, "", 1);
    return (shard_hash_end(shard_hash_add(h, hp->url.b, hp->url.len)));
}

/*
 * The request's hash key: the cache key for "hash"; else the URL unless
 * the configured header or cookie is there.
 */
static uint64_t
key_hash(const struct dir *d, const struct dir_ctx *ctx)
{
    const struct http *hp = ctx != NULL ? ctx->req : NULL;
    size_t nl;

    if (d->key == DIR_KEY_CACHE && ctx != NULL && ctx->key != NULL)
        return (hash_bytes(ctx->key, ctx->keylen));
    if (hp == NULL)
        return (hash_bytes("", 0));
    if (d->key == DIR_KEY_CACHE)
        return (host_url_hash(hp));
    if (d->key == DIR_KEY_HEADER) {
        const struct txt *v = http_value(hp, d->keyname);
        if (v != NULL)
            return (hash_bytes(v->b, v->len));
    } else if (d->key == DIR_KEY_COOKIE) {
        nl = strlen(d->keyname);
        for (unsigned i = 0; i < hp->nhdr; i++) {
            const char *p, *e;
            if (!http_name_eq(&hp->hdr[i].name, "Cookie"))
                continue;
            p = hp->hdr[i].val.b;
            e = p + hp->hdr[i].val.len;
            /* "a=1; name=v; b=2": pairs separated by ';' and blanks. */
            while (p < e) {
                const char *q;
                while (p < e && (*p == ' ' || *p == '\t' || *p == ';'))
                    p++;
                q = memchr(p, ';', (size_t)(e - p));
                if (q == NULL)
                    q = e;
                if ((size_t)(q - p) > nl && p[nl] == '=' && memcmp(p, d->keyname, nl) == 0)
                    return (hash_bytes(p + nl + 1, (size_t)(q - p) - nl - 1));
                p = q;
            }
        }
    }
    return (hash_bytes(hp->url.b, hp->url.len));
}

static struct be *
pick_hash(struct dir *d, const struct dir_ctx *ctx)
{
    uint64_t kh = key_hash(d, ctx);
    struct excl x;
    struct be *be;
    double best, score, u;
    unsigned i, bi;

    memset(&x, 0, sizeof x);
    for (;;) {
        best = -1;
        bi = d->n;
        for (i = 0; i < d->n; i++) {
            if (is_excl(&x, i) || leaf_unusable(d->member[i], ctx))
                continue;
            /* u in (0, 1): 53 bits of the mixed hash, never 0 nor 1. */
            u = ((double)(mix64(kh ^ d->mhash[i]) >> 11) + 0.5) * 0x1.0p-53;
            score = (double)d->member[i]->weight / -log(u);
            if (score > best) {
                best = score;
                bi = i;
            }
        }
        if (bi == d->n)
            return (NULL);
        if ((be = pick(d->member[bi], ctx)) != NULL)
            return (be);
        set_excl(&x, bi);
    }
}

static struct be *
pick(struct dir *d, const struct dir_ctx *ctx)
{
    OBJ_CHECK(d, DIR_MAGIC);
    switch (d->type) {
    case DIR_BACKEND:
        return (leaf_unusable(d, ctx) ? NULL : d->be);
    case DIR_ROUND_ROBIN:
        return (pick_rr(d, ctx));
    case DIR_RANDOM:
        return (pick_random(d, ctx));
    case DIR_HASH:
        return (pick_hash(d, ctx));
    case DIR_FALLBACK:
        return (pick_fallback(d, ctx));
    case DIR_SHARD:
        return (shard_pick(d->shard, key_hash(d, ctx), ctx != NULL ? ctx->skip : NULL,
                           ctx != NULL ? ctx->nskip : 0));
    }
    SRG_WRONG("director type");
}

struct be *
dir_pick(struct dir *d, const struct dir_ctx *ctx)
{
    struct be *be = pick(d, ctx);

    if (be == NULL)
        STAT_INC(backend_unhealthy);
    return (be);
}
