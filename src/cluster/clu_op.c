/*
 * Invalidation ops: what a purge, a soft purge, a surrogate-key purge, a
 * ban or the admin purge does to this node's cache, in a form that can
 * be written on one line, sent to another member and applied there
 * exactly as here (see clu.h).
 *
 * A URL purge travels as its cache key, computed once where the PURGE
 * arrived (by the policy's hash hook, as a lookup would): every member
 * runs the same policy, so the key names the same objects everywhere.
 *
 * No state and no lock of its own: clu_op_apply() calls into the cache
 * (hsh_, xkey_, ban_), from any thread holding no lock.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "surogat/ban.h"
#include "surogat/clu.h"
#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/num.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/shard.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/xkey.h"

#include "clu_priv.h"

#define PURGE_WALK_STEP 1000 /* objects per shard-lock hold in a walk over the index */

static const char *const kind_names[] = {
    [CLU_OP_KEY] = "key",
    [CLU_OP_TAGS] = "tags",
    [CLU_OP_BAN] = "ban",
    [CLU_OP_URL] = "url",
};

const char *
clu_op_kind_name(enum clu_op_kind k)
{
    SRG_ASSERT((size_t)k < ARRAY_LEN(kind_names));
    return (kind_names[k]);
}

void
clu_op_init(struct clu_op *op, const char *self, enum clu_op_kind kind, bool soft, const void *arg,
            size_t arglen)
{
    uint64_t r = 0;

    AN(self);
    SRG_ASSERT(strlen(self) <= CLU_NAME_MAX);
    memset(op, 0, sizeof *op);
    /* 64 random bits: two ops of one member never share an id in the journal's lifetime. */
    if (getrandom(&r, sizeof r, 0) != sizeof r)
        r = (uint64_t)(tim_real() * 1e6) ^ (uint64_t)(uintptr_t)op;
    snprintf(op->id, sizeof op->id, "%s-%016llx", self, (unsigned long long)r);
    op->t = tim_real();
    op->kind = kind;
    op->soft = soft;
    op->arg = arg;
    op->arglen = arglen;
}

void
clu_op_print(const struct clu_op *op, struct sb *out)
{
    sb_printf(out, "%s %.6f %s %d ", op->id, op->t, clu_op_kind_name(op->kind), op->soft ? 1 : 0);
    for (size_t i = 0; i < op->arglen; i++) {
        unsigned char ch = (unsigned char)op->arg[i];
        if (ch <= ' ' || ch > '~' || ch == '%')
            sb_printf(out, "%%%02X", ch);
        else
            sb_bcat(out, &op->arg[i], 1);
    }
}

int
clu_op_parse(char *buf, struct clu_op *op)
{
    char *f[5], *p = buf, *end, *w;
    size_t k;

    memset(op, 0, sizeof *op);
    for (unsigned i = 0; i < 5; i++) {
        f[i] = p;
        if (i == 4)
            break;
        p = strchr(p, ' ');
        if (p == NULL)
            return (-1);
        *p++ = '\0';
    }
    if (strlen(f[0]) == 0 || strlen(f[0]) > CLU_ID_LEN)
        return (-1);
    strcpy(op->id, f[0]);
    op->t = strtod(f[1], &end);
    if (end == f[1] || *end != '\0' || !(op->t > 0))
        return (-1);
    for (k = 0; k < ARRAY_LEN(kind_names); k++)
        if (strcmp(f[2], kind_names[k]) == 0)
            break;
    if (k == ARRAY_LEN(kind_names) || (strcmp(f[3], "0") != 0 && strcmp(f[3], "1") != 0))
        return (-1);
    op->kind = (enum clu_op_kind)k;
    op->soft = f[3][0] == '1';
    /* Decode in place: the text only shrinks. */
    for (p = w = f[4]; *p != '\0'; p++) {
        if (*p <= ' ' || *p > '~')
            return (-1);
        if (*p != '%') {
            *w++ = *p;
            continue;
        }
        if (num_hexdigit(p[1]) < 0 || num_hexdigit(p[2]) < 0)
            return (-1);
        *w++ = (char)(num_hexdigit(p[1]) * 16 + num_hexdigit(p[2]));
        p += 2;
    }
    op->arg = f[4];
    op->arglen = (size_t)(w - f[4]);
    if (op->arglen == 0)
        return (-1);
    return (0);
}

/*--------------------------------------------------------------------
 * The invalidations applied lately (clu.h: clu_inval_since).  A ring of
 * CLU_RECENT entries under recent_mtx, written by _note(), read by
 * _since() only when one was noted since `since`: a fetch costs one
 * atomic load while no invalidation comes.
 */

#define RECENT_TAGS 8 /* tags remembered per surrogate-key purge; more: any object */

struct recent {
    uint64_t seq;
    double t;      /* tim_mono() when noted */
    bool any;      /* a ban, a URL on every host, too many tags */
    uint64_t key;  /* CLU_OP_KEY: shard_hash() of the key */
    unsigned ntag; /* CLU_OP_TAGS */
    uint64_t tag[RECENT_TAGS];
};

static pthread_mutex_t recent_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct recent recent[CLU_RECENT];
static uint64_t recent_seq; /* under recent_mtx */
static double recent_t;     /* atomic: the newest entry's t; written under recent_mtx */

void
clu_inval_note(enum clu_op_kind kind, const char *arg, size_t arglen)
{
    struct txt t[RECENT_TAGS + 1];
    struct recent *e;
    uint64_t s;
    unsigned n;

    AZ(pthread_mutex_lock(&recent_mtx));
    s = recent_seq + 1;
    e = &recent[s % CLU_RECENT];
    memset(e, 0, sizeof *e);
    e->seq = s;
    e->t = tim_mono();
    switch (kind) {
    case CLU_OP_KEY:
        e->key = shard_hash(arg, arglen);
        break;
    case CLU_OP_TAGS:
        n = xkey_split(arg, arglen, true, t, RECENT_TAGS + 1);
        if (n > RECENT_TAGS)
            e->any = true;
        for (unsigned i = 0; i < n && i < RECENT_TAGS; i++)
            e->tag[e->ntag++] = shard_hash(t[i].b, t[i].len);
        break;
    case CLU_OP_BAN:
    case CLU_OP_URL:
        e->any = true;
        break;
    }
    recent_seq = s;
    __atomic_store(&recent_t, &e->t, __ATOMIC_RELEASE);
    AZ(pthread_mutex_unlock(&recent_mtx));
}

double
clu_inval_last(void)
{
    double last;

    __atomic_load(&recent_t, &last, __ATOMIC_ACQUIRE);
    return (last);
}

bool
clu_inval_since(double since, const char *key, size_t keylen, const struct txt *tags,
                unsigned ntags)
{
    uint64_t kh = key != NULL ? shard_hash(key, keylen) : 0;
    bool hit = false;

    if (clu_inval_last() < since)
        return (false);
    AZ(pthread_mutex_lock(&recent_mtx));
    /* Newest first, back to `since`; an entry overwritten before that: more than remembered. */
    for (uint64_t s = recent_seq; s > 0 && !hit; s--) {
        const struct recent *e = &recent[s % CLU_RECENT];
        if (e->seq != s) {
            hit = true;
            break;
        }
        if (e->t < since)
            break;
        hit = e->any || (key != NULL && e->ntag == 0 && e->key == kh);
        for (unsigned i = 0; i < e->ntag && !hit; i++)
            for (unsigned j = 0; j < ntags && !hit; j++)
                hit = e->tag[i] == shard_hash(tags[j].b, tags[j].len);
    }
    AZ(pthread_mutex_unlock(&recent_mtx));
    return (hit);
}

double
clu_inval_window(const struct clu *c)
{
    return (clu_nmember(c) * par.cluster_timeout);
}

/*--------------------------------------------------------------------
 * A request-target on every host: a walk over the index.  A hash hook
 * may have appended pieces to the built-in key ("host NUL url"), each
 * after a NUL: the target still ends at a NUL or at the key's end.
 */

struct url_walk {
    const char *target;
    size_t len;
    unsigned n;
};

/* Under a shard lock. */
static bool
url_visit(struct cobj *oc, const char *key, size_t keylen, void *priv)
{
    struct url_walk *uw = priv;
    const char *t = memchr(key, '\0', keylen);
    size_t rest;

    (void)oc;
    if (t == NULL)
        return (false);
    t++;
    rest = keylen - (size_t)(t - key);
    if (rest < uw->len || memcmp(t, uw->target, uw->len) != 0 ||
        (rest > uw->len && t[uw->len] != '\0'))
        return (false);
    uw->n++;
    return (true);
}

static unsigned
purge_url(const char *target, size_t len)
{
    struct url_walk uw = { .target = target, .len = len };
    struct hsh_cursor cur;

    memset(&cur, 0, sizeof cur);
    while (!hsh_walk(&cur, PURGE_WALK_STEP, url_visit, &uw))
        continue;
    return (uw.n);
}

/* Under a shard lock: every object goes. */
static bool
all_visit(struct cobj *oc, const char *key, size_t keylen, void *priv)
{
    (void)oc;
    (void)key;
    (void)keylen;
    ++*(unsigned *)priv;
    return (true);
}

unsigned
clu_purge_all(void)
{
    struct hsh_cursor cur;
    unsigned n = 0;

    memset(&cur, 0, sizeof cur);
    while (!hsh_walk(&cur, PURGE_WALK_STEP, all_visit, &n))
        continue;
    return (n);
}

long
clu_op_apply(const struct clu_op *op, struct sb *err)
{
    double now = tim_real(), before;
    char *expr;
    int rv;

    /* Before the cache changes: a fetch under way then is not kept. */
    clu_inval_note(op->kind, op->arg, op->arglen);
    switch (op->kind) {
    case CLU_OP_KEY:
        return ((long)hsh_purge_key(op->arg, op->arglen, op->soft));
    case CLU_OP_TAGS:
        return ((long)xkey_purge(op->arg, op->arglen, op->soft));
    case CLU_OP_URL:
        return ((long)purge_url(op->arg, op->arglen));
    case CLU_OP_BAN:
        expr = malloc(op->arglen + 1);
        AN(expr);
        memcpy(expr, op->arg, op->arglen);
        expr[op->arglen] = '\0';
        /*
         * An op made a while ago (a retry, a member catching up) spares
         * the objects fetched since; a fresh one is a plain ban.
         */
        before = op->t + CLU_SKEW;
        rv = before < now ? ban_add_before(expr, before, err) : ban_add(expr, err);
        free(expr);
        return (rv == 0 ? 0 : -1);
    }
    SRG_WRONG("clu_op_apply: unknown kind");
}
