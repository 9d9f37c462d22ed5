/*
 * The largest objects in the cache, for the status page.
 *
 * Found by walking the index with hsh_walk(), on the mon thread, rather
 * than kept in a heap updated at every insert: a heap would put a lock
 * and bookkeeping on the fetch path and would have to hear of every
 * eviction and purge, all for a page few people look at.  A walk costs
 * nothing while nobody asks.  It is bounded twice: each hsh_walk() call
 * holds one shard lock for about BIG_BATCH objects, like the ban lurker,
 * so lookups never wait long; and one status request walks at most
 * BIG_PER_CALL objects, carrying the cursor over to the next request, so
 * a cache of millions of objects is listed after a few polls instead of
 * stalling one.  The list shown is that of the newest finished pass, at
 * most BIG_MAX_AGE seconds old.  All state belongs to the mon thread.
 */
#include "config.h"

#include <string.h>

#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/tim.h"

#include "mon_priv.h"

#define BIG_BATCH    1000   /* objects per shard lock hold: ban_lurker_batch's default */
#define BIG_PER_CALL 200000 /* objects per status request */
#define BIG_MAX_AGE  2.0    /* seconds a finished list is shown before a new pass starts */

struct big_pass {
    struct mon_big v[MON_BIG_N]; /* largest first */
    unsigned n;
    double now; /* tim_real() at the start of the pass, for ttl_left */
};

static struct hsh_cursor cur;
static struct big_pass pass;  /* the walk in progress */
static struct big_pass shown; /* the newest finished walk */
static bool walking;
static double t_shown; /* tim_mono() when `shown` was finished; 0: never */

/* Under the object's shard lock (hsh_walk): only read what a published object no longer changes. */
static bool
visit(struct cobj *oc, const char *key, size_t keylen, void *priv)
{
    struct big_pass *p = priv;
    struct mon_big *b;
    uint64_t bytes;
    unsigned i;
    size_t hl;

    if (oc->flags & (COBJ_HFM | COBJ_DEAD | COBJ_BANNED))
        return (false);
    bytes = oc->body.len;
    if (p->n == MON_BIG_N && bytes <= p->v[MON_BIG_N - 1].bytes)
        return (false);
    i = p->n < MON_BIG_N ? p->n++ : MON_BIG_N - 1;
    for (; i > 0 && p->v[i - 1].bytes < bytes; i--)
        p->v[i] = p->v[i - 1];
    b = &p->v[i];
    b->bytes = bytes;
    b->status = oc->status;
    b->ttl_left = oc->fresh.t_origin + oc->fresh.ttl - p->now;
    /* The key is "host NUL url": shown as "host url". */
    hl = strnlen(key, keylen);
    keylen = SRG_MIN(keylen, sizeof b->key - 1);
    memcpy(b->key, key, keylen);
    b->key[keylen] = '\0';
    if (hl < keylen)
        b->key[hl] = ' ';
    return (false);
}

unsigned
mon__big_get(struct mon_big *out, double now)
{
    unsigned seen = 0;

    if (!walking && (t_shown == 0 || tim_mono() - t_shown > BIG_MAX_AGE)) {
        memset(&cur, 0, sizeof cur);
        memset(&pass, 0, sizeof pass);
        pass.now = now;
        walking = true;
    }
    while (walking && seen < BIG_PER_CALL) {
        if (hsh_walk(&cur, BIG_BATCH, visit, &pass)) {
            shown = pass;
            t_shown = tim_mono();
            walking = false;
        }
        seen += BIG_BATCH;
    }
    memcpy(out, shown.v, shown.n * sizeof *out);
    return (shown.n);
}

void
mon__big_fini(void)
{
    walking = false;
    t_shown = 0;
    memset(&shown, 0, sizeof shown);
}
