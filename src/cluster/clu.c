/*
 * A cluster declaration: its members, the ring that says which member
 * owns a key, and the hop header (see clu.h).
 *
 * A struct clu is built by the policy's declaration (pol_decl.c) on the
 * main or CLI thread and never changes; workers route and check hop
 * headers on it without a lock.  The only thing written after it is
 * built is each member's time of failure (clu_failed), a relaxed atomic
 * double: a fetch from a member that failed to connect takes that member
 * off the ring for CLU_FAILED_HOLD seconds, which is about when its probe
 * will have decided, so that the requests behind it go to the next
 * member at once instead of each waiting to fail in turn.
 *
 * Members' backends are borrowed: a backend's memory lives until
 * be_fini() (be.h), longer than any program, so a struct clu kept by a
 * caller past its program's end still reads valid backends.
 */
#include "config.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "surogat/be.h"
#include "surogat/clu.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/sb.h"
#include "surogat/shard.h"
#include "surogat/tim.h"

#include "clu_priv.h"

#define CLU_FAILED_HOLD \
    3.0                 /* seconds: the members' probe's interval times its threshold, and one */
#define CLU_ADDRS_MAX 8 /* addresses kept per member, for the check by address */

struct clu_member {
    char *name;
    char *addr;
    struct be *be;
    double t_failed; /* tim_mono() of the last failure seen by a fetch; atomic */
    unsigned naddr;
    char *ip[CLU_ADDRS_MAX]; /* numeric, as sess.client_ip spells them */
};

struct clu {
    unsigned magic;
#define CLU_MAGIC 0x4c7d20e9
    unsigned refcnt; /* atomic */
    char *name;
    char *origin;
    double local_ttl;
    unsigned local_hot;
    unsigned self;
    struct clu_member *m;
    unsigned n;
    struct shard *ring;
    unsigned char secret[CLU_SECRET_MAX];
    size_t secretlen;
};

static bool
name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > CLU_NAME_MAX)
        return (false);
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '_' || *s == '-'))
            return (false);
    return (true);
}

/* The numeric addresses of addr's host ("host:port", "[v6]:port"), for the check by address. */
static int
resolve(struct clu_member *m, struct sb *err, const char *cname)
{
    char host[256], ip[64];
    const char *h = m->addr, *colon;
    struct addrinfo hints, *res, *ai;
    size_t hl;
    int rv;

    if (*h == '[') {
        colon = strchr(h, ']');
        if (colon == NULL)
            goto bad;
        hl = (size_t)(colon - h - 1);
        h++;
    } else {
        colon = strrchr(h, ':');
        hl = colon != NULL ? (size_t)(colon - h) : strlen(h);
    }
    if (hl == 0 || hl >= sizeof host)
        goto bad;
    memcpy(host, h, hl);
    host[hl] = '\0';
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    if ((rv = getaddrinfo(host, NULL, &hints, &res)) != 0) {
        sb_printf(err, "cluster %s: member %s: %s: %s", cname, m->name, host, gai_strerror(rv));
        return (-1);
    }
    for (ai = res; ai != NULL && m->naddr < CLU_ADDRS_MAX; ai = ai->ai_next) {
        if (getnameinfo(ai->ai_addr, ai->ai_addrlen, ip, sizeof ip, NULL, 0, NI_NUMERICHOST) != 0)
            continue;
        m->ip[m->naddr] = strdup(ip);
        AN(m->ip[m->naddr]);
        m->naddr++;
    }
    freeaddrinfo(res);
    return (0);
bad:
    sb_printf(err, "cluster %s: member %s: address \"%s\" is not host:port", cname, m->name,
              m->addr);
    return (-1);
}

static void
clu_free(struct clu *c)
{
    for (unsigned i = 0; i < c->n; i++) {
        free(c->m[i].name);
        free(c->m[i].addr);
        for (unsigned j = 0; j < c->m[i].naddr; j++)
            free(c->m[i].ip[j]);
    }
    if (c->ring != NULL)
        shard_free(&c->ring);
    OPENSSL_cleanse(c->secret, sizeof c->secret);
    free(c->m);
    free(c->name);
    free(c->origin);
    OBJ_FREE(&c);
}

struct clu *
clu_new(const struct clu_conf *cf, struct sb *err)
{
    struct be *bes[CLU_MEMBERS_MAX];
    struct shard_conf sc;
    struct clu *c;

    AN(cf);
    AN(cf->name);
    if (!name_ok(cf->name)) {
        sb_printf(err, "cluster: the name must be 1 to %d letters, digits, '.', '_' or '-'",
                  CLU_NAME_MAX);
        return (NULL);
    }
    if (cf->nmember == 0 || cf->nmember > CLU_MEMBERS_MAX) {
        sb_printf(err, "cluster %s: needs 1 to %d members", cf->name, CLU_MEMBERS_MAX);
        return (NULL);
    }
    if (cf->secretlen > CLU_SECRET_MAX) {
        sb_printf(err, "cluster %s: the secret is longer than %d bytes", cf->name, CLU_SECRET_MAX);
        return (NULL);
    }
    OBJ_NEW(c, CLU_MAGIC);
    AN(c);
    c->refcnt = 1;
    c->name = strdup(cf->name);
    AN(c->name);
    c->origin = cf->origin != NULL ? strdup(cf->origin) : NULL;
    c->local_ttl = cf->local_ttl;
    c->local_hot = cf->local_hot > 0 ? cf->local_hot : CLU_HOT_DEFAULT;
    c->self = UINT32_MAX;
    c->m = calloc(cf->nmember, sizeof *c->m);
    AN(c->m);
    for (unsigned i = 0; i < cf->nmember; i++) {
        struct clu_member *m = &c->m[c->n];
        const struct clu_member_conf *mc = &cf->member[i];

        if (!name_ok(mc->name)) {
            sb_printf(err,
                      "cluster %s: member \"%.80s\": a name is 1 to %d letters, digits, '.', "
                      "'_' or '-'",
                      cf->name, mc->name, CLU_NAME_MAX);
            goto fail;
        }
        if (clu_member_find(c, mc->name) >= 0) {
            sb_printf(err, "cluster %s: member %s is listed twice", cf->name, mc->name);
            goto fail;
        }
        OBJ_CHECK(mc->be, BE_MAGIC);
        m->name = strdup(mc->name);
        m->addr = strdup(mc->addr);
        AN(m->name);
        AN(m->addr);
        m->be = bes[c->n] = mc->be;
        c->n++;
        if (cf->secretlen == 0 && resolve(m, err, cf->name) != 0)
            goto fail;
        if (cf->self != NULL && strcmp(mc->name, cf->self) == 0)
            c->self = c->n - 1;
    }
    if (c->self == UINT32_MAX) {
        sb_printf(err,
                  "cluster %s: this node, \"%s\" (server.identity: the identity parameter, else "
                  "the host name), is not one of its members",
                  cf->name, cf->self != NULL ? cf->self : "");
        goto fail;
    }
    memset(&sc, 0, sizeof sc);
    sc.name = cf->name;
    sc.be = bes;
    sc.n = c->n;
    sc.rampup = cf->rampup;
    /* No load bound: a key that moved under load would be fetched twice by the fleet. */
    sc.balance_factor = 0;
    if ((c->ring = shard_new(&sc, err)) == NULL)
        goto fail;
    memcpy(c->secret, cf->secret != NULL ? cf->secret : (const unsigned char *)"", cf->secretlen);
    c->secretlen = cf->secretlen;
    return (c);
fail:
    clu_free(c);
    return (NULL);
}

struct clu *
clu_ref(struct clu *c)
{
    OBJ_CHECK(c, CLU_MAGIC);
    __atomic_add_fetch(&c->refcnt, 1, __ATOMIC_RELAXED);
    return (c);
}

void
clu_unref(struct clu **cp)
{
    struct clu *c = *cp;

    *cp = NULL;
    if (c == NULL)
        return;
    OBJ_CHECK(c, CLU_MAGIC);
    if (__atomic_sub_fetch(&c->refcnt, 1, __ATOMIC_ACQ_REL) == 0)
        clu_free(c);
}

const char *
clu_name(const struct clu *c)
{
    OBJ_CHECK(c, CLU_MAGIC);
    return (c->name);
}

const char *
clu_self(const struct clu *c)
{
    OBJ_CHECK(c, CLU_MAGIC);
    return (c->m[c->self].name);
}

unsigned
clu_self_index(const struct clu *c)
{
    OBJ_CHECK(c, CLU_MAGIC);
    return (c->self);
}

const char *
clu_origin(const struct clu *c)
{
    OBJ_CHECK(c, CLU_MAGIC);
    return (c->origin);
}

double
clu_local_ttl(const struct clu *c)
{
    OBJ_CHECK(c, CLU_MAGIC);
    return (c->local_ttl);
}

unsigned
clu_local_hot(const struct clu *c)
{
    OBJ_CHECK(c, CLU_MAGIC);
    return (c->local_hot);
}

unsigned
clu_nmember(const struct clu *c)
{
    OBJ_CHECK(c, CLU_MAGIC);
    return (c->n);
}

const char *
clu_member_name(const struct clu *c, unsigned i)
{
    OBJ_CHECK(c, CLU_MAGIC);
    SRG_ASSERT(i < c->n);
    return (c->m[i].name);
}

const char *
clu_member_addr(const struct clu *c, unsigned i)
{
    OBJ_CHECK(c, CLU_MAGIC);
    SRG_ASSERT(i < c->n);
    return (c->m[i].addr);
}

struct be *
clu_member_be(const struct clu *c, unsigned i)
{
    OBJ_CHECK(c, CLU_MAGIC);
    SRG_ASSERT(i < c->n);
    return (c->m[i].be);
}

int
clu_member_find(const struct clu *c, const char *name)
{
    for (unsigned i = 0; name != NULL && i < c->n; i++)
        if (strcmp(c->m[i].name, name) == 0)
            return ((int)i);
    return (-1);
}

bool
clu_is_peer(const struct clu *c, const char *name)
{
    int i;

    OBJ_CHECK(c, CLU_MAGIC);
    i = clu_member_find(c, name);
    return (i >= 0 && (unsigned)i != c->self);
}

/*--------------------------------------------------------------------
 * Routing.
 */

enum clu_route
clu_route(const struct clu *c, const char *key, size_t keylen, unsigned *member)
{
    struct be *skip[CLU_MEMBERS_MAX], *be;
    double now = tim_mono();
    unsigned nskip = 0;

    OBJ_CHECK(c, CLU_MAGIC);
    for (unsigned i = 0; i < c->n; i++) {
        double tf;
        __atomic_load(&c->m[i].t_failed, &tf, __ATOMIC_RELAXED);
        if (tf > 0 && now - tf < CLU_FAILED_HOLD && i != c->self)
            skip[nskip++] = c->m[i].be;
    }
    be = shard_pick(c->ring, shard_hash(key, keylen), skip, nskip);
    if (be == NULL)
        return (CLU_R_ALONE);
    for (unsigned i = 0; i < c->n; i++) {
        if (c->m[i].be != be)
            continue;
        if (i == c->self)
            return (CLU_R_SELF);
        *member = i;
        return (CLU_R_PEER);
    }
    SRG_WRONG("clu_route: the ring picked a backend that is no member");
}

void
clu_failed(const struct clu *c, unsigned i)
{
    double now = tim_mono();

    OBJ_CHECK(c, CLU_MAGIC);
    SRG_ASSERT(i < c->n);
    __atomic_store(&c->m[i].t_failed, &now, __ATOMIC_RELAXED);
}

/* The sketch of clu_hot_touch(): 4 rows of saturating 8-bit counters. */
static uint8_t hot[4][CLU_HOT_WIDTH];
static uint64_t hot_adds;  /* atomic */
static int64_t hot_halved; /* atomic: tim_mono() seconds of the last halving */

/* Whether CLU_HOT_PERIOD passed since the last halving; true for one caller only. */
static bool
period_over(void)
{
    int64_t now = (int64_t)tim_mono(), last = __atomic_load_n(&hot_halved, __ATOMIC_RELAXED);

    return (now - last >= CLU_HOT_PERIOD &&
            __atomic_compare_exchange_n(&hot_halved, &last, now, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED));
}

unsigned
clu_hot_touch(const char *key, size_t keylen)
{
    uint64_t h = shard_hash(key, keylen);
    unsigned est = UINT8_MAX;

    _Static_assert((CLU_HOT_WIDTH & (CLU_HOT_WIDTH - 1)) == 0, "a power of two");
    for (unsigned r = 0; r < 4; r++) {
        uint8_t *ctr = &hot[r][shard_hash_end(h + r * 0x9e3779b97f4a7c15ULL) & (CLU_HOT_WIDTH - 1)];
        uint8_t v = __atomic_load_n(ctr, __ATOMIC_RELAXED);
        if (v < UINT8_MAX)
            __atomic_store_n(ctr, ++v, __ATOMIC_RELAXED);
        est = SRG_MIN(est, v);
    }
    if (__atomic_add_fetch(&hot_adds, 1, __ATOMIC_RELAXED) % (10 * CLU_HOT_WIDTH) == 0 ||
        period_over()) {
        /* Halved: what was asked for a while ago fades. */
        for (unsigned r = 0; r < 4; r++)
            for (unsigned i = 0; i < CLU_HOT_WIDTH; i++)
                __atomic_store_n(&hot[r][i], __atomic_load_n(&hot[r][i], __ATOMIC_RELAXED) / 2,
                                 __ATOMIC_RELAXED);
    }
    return (est);
}

/*--------------------------------------------------------------------
 * The hop header.
 */

/* SIG: hex of the first 16 bytes of the HMAC, into out[33]. */
static void
sign(const struct clu *c, const char *from, const char *ts, const struct txt *method,
     const struct txt *host, const struct txt *url, const void *body, size_t bodylen, char out[33])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    struct sb sb;
    size_t cap;
    char *buf;

    cap = 64 + strlen(c->name) + strlen(from) + strlen(ts) + method->len +
          (host != NULL ? host->len : 0) + url->len + bodylen;
    buf = malloc(cap);
    AN(buf);
    sb_init(&sb, buf, cap);
    sb_printf(&sb, "surogat-hop-1\n%s\n%s\n%s\n%.*s\n%.*s\n%.*s\n", c->name, from, ts,
              (int)method->len, method->b, host != NULL ? (int)host->len : 0,
              host != NULL ? host->b : "", (int)url->len, url->b);
    AN(sb_ok(&sb));
    if (bodylen > 0) {
        SRG_ASSERT(sb.len + bodylen <= cap);
        memcpy(buf + sb.len, body, bodylen);
    }
    AN(HMAC(EVP_sha256(), c->secret, (int)c->secretlen, (const unsigned char *)buf,
            sb.len + bodylen, md, &mdlen));
    free(buf);
    SRG_ASSERT(mdlen >= 16);
    for (unsigned i = 0; i < 16; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
}

void
clu_hop_make(const struct clu *c, const struct txt *method, const struct txt *host,
             const struct txt *url, const void *body, size_t bodylen, double now, char *out,
             size_t outlen)
{
    char ts[32], sig[33];

    OBJ_CHECK(c, CLU_MAGIC);
    SRG_ASSERT(outlen >= CLU_HOP_LEN);
    snprintf(ts, sizeof ts, "%.3f", now);
    if (c->secretlen > 0)
        sign(c, c->m[c->self].name, ts, method, host, url, body, bodylen, sig);
    else
        strcpy(sig, "-");
    snprintf(out, outlen, "%s %s %s", c->m[c->self].name, ts, sig);
}

enum clu_hop
clu_hop_check(const struct clu *c, const struct http *req, const char *client_ip, const void *body,
              size_t bodylen, double now, unsigned *from)
{
    const struct txt *v = http_value(req, CLU_HOP_HEADER);
    char buf[CLU_HOP_LEN], name[CLU_NAME_MAX + 1], ts[32], sig[40], want[33];
    const struct clu_member *m;
    double t;
    char *end;
    int i;

    OBJ_CHECK(c, CLU_MAGIC);
    if (v == NULL)
        return (CLU_HOP_NONE);
    if (v->len >= sizeof buf)
        return (CLU_HOP_BAD);
    memcpy(buf, v->b, v->len);
    buf[v->len] = '\0';
    if (sscanf(buf, "%64s %31s %39s", name, ts, sig) != 3 || (i = clu_member_find(c, name)) < 0)
        return (CLU_HOP_BAD);
    t = strtod(ts, &end);
    if (*end != '\0' || !(t > now - CLU_HOP_WINDOW && t < now + CLU_HOP_WINDOW))
        return (CLU_HOP_BAD);
    m = &c->m[i];
    if (c->secretlen > 0) {
        sign(c, name, ts, &req->method, http_value(req, "Host"), &req->url, body, bodylen, want);
        if (strlen(sig) != 32 || CRYPTO_memcmp(sig, want, 32) != 0)
            return (CLU_HOP_BAD);
    } else {
        unsigned j;
        if (strcmp(sig, "-") != 0 || client_ip == NULL)
            return (CLU_HOP_BAD);
        for (j = 0; j < m->naddr; j++)
            if (strcmp(m->ip[j], client_ip) == 0)
                break;
        if (j == m->naddr)
            return (CLU_HOP_BAD);
    }
    *from = (unsigned)i;
    return (CLU_HOP_OK);
}

void
clu_via(const struct clu *c, struct sb *out)
{
    OBJ_CHECK(c, CLU_MAGIC);
    sb_printf(out, "1.1 %s (surogat %s)", c->m[c->self].name, c->name);
}

bool
clu_via_crossed(const struct clu *c, const struct http *req, bool *self)
{
    char mark[CLU_NAME_MAX + 16], mine[2 * CLU_NAME_MAX + 24];
    size_t ml, sl;
    bool found = false;

    OBJ_CHECK(c, CLU_MAGIC);
    *self = false;
    ml = (size_t)snprintf(mark, sizeof mark, "(surogat %s)", c->name);
    sl = (size_t)snprintf(mine, sizeof mine, "1.1 %s (surogat %s)", c->m[c->self].name, c->name);
    for (unsigned i = 0; i < req->nhdr; i++) {
        const struct txt *val = &req->hdr[i].val;
        if (!http_name_eq(&req->hdr[i].name, "Via") || val->len < ml)
            continue;
        for (size_t k = 0; k + ml <= val->len; k++) {
            if (memcmp(val->b + k, mark, ml) != 0)
                continue;
            found = true;
            /* This node's own element: at the start of the field or after ", ". */
            if (k + ml >= sl && memcmp(val->b + k + ml - sl, mine, sl) == 0 &&
                (k + ml == sl || val->b[k + ml - sl - 1] == ' ' || val->b[k + ml - sl - 1] == ','))
                *self = true;
        }
    }
    return (found);
}
