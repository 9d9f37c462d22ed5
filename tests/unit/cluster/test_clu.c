/*
 * clu: the cluster declaration's checks, the ring (an owner per key,
 * stable, moving off a sick or failed member only its keys), the hop
 * header (signed: a changed method, Host, URL or body, another secret, an
 * old time or an unknown member fail; by address without a secret), the
 * Via mark, invalidation ops on one line and back (NULs, blanks, '%'),
 * and the journal: an op applied once whatever the number of times it
 * arrives, what a member is owed, the answer to a member catching up,
 * and a cluster message served: signed or refused, applied once.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/ban.h"
#include "surogat/be.h"
#include "surogat/clu.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "src/cluster/clu_priv.h"

static char ebuf[512];
static struct sb err;
static struct be *be[3];
static const char *const names[3] = { "node1", "node2", "node3" };
static char dir[] = "/tmp/test_clu.XXXXXX";
static char olddir[4096];

static struct be *
mkbe(const char *name, const char *port)
{
    struct be_conf c;
    struct be *b;

    memset(&c, 0, sizeof c);
    c.name = name;
    c.host = "127.0.0.1";
    c.port = port;
    c.connect_timeout = c.first_byte_timeout = c.between_bytes_timeout = -1;
    ck_assert_msg(be_get(&c, &b, &err) == 0, "%s", err.buf);
    return (b);
}

static void
setup(void)
{
    strcpy(dir, "/tmp/test_clu.XXXXXX");
    par_init();
    AZ(stat_init());
    log_set_level(LOG_CRIT);
    AZ(be_init());
    AZ(ban_init());
    sb_init(&err, ebuf, sizeof ebuf);
    for (unsigned i = 0; i < 3; i++)
        be[i] = mkbe(names[i], i == 0 ? "9" : i == 1 ? "19" : "29");
    /* The journal lives in the working directory, as in -n. */
    AN(getcwd(olddir, sizeof olddir));
    AN(mkdtemp(dir));
    AZ(chdir(dir));
}

static void
teardown(void)
{
    clu_stop();
    (void)unlink("cluster.journal");
    (void)unlink("cluster.alive");
    AZ(chdir(olddir));
    (void)rmdir(dir);
    ban_fini();
    be_fini();
    stat_fini();
    par_fini();
}

static struct clu *
mkclu(const char *self, const char *secret, struct sb *e)
{
    struct clu_member_conf m[3];
    struct clu_conf c;

    for (unsigned i = 0; i < 3; i++) {
        m[i].name = names[i];
        m[i].addr = i == 0 ? "127.0.0.1:9" : i == 1 ? "127.0.0.1:19" : "127.0.0.1:29";
        m[i].be = be[i];
    }
    memset(&c, 0, sizeof c);
    c.name = "fleet";
    c.self = self;
    c.member = m;
    c.nmember = 3;
    c.local_ttl = 5;
    c.secret = (const unsigned char *)secret;
    c.secretlen = secret != NULL ? strlen(secret) : 0;
    return (clu_new(&c, e));
}

START_TEST(declaration_checks)
{
    struct clu_member_conf m[2] = { { "a", "127.0.0.1:9", NULL }, { "a", "127.0.0.1:19", NULL } };
    struct clu_conf c;
    struct clu *cl, *again;

    m[0].be = be[0];
    m[1].be = be[1];
    memset(&c, 0, sizeof c);
    c.name = "fleet";
    c.self = "a";
    c.member = m;
    c.nmember = 2;
    ck_assert_ptr_null(clu_new(&c, &err));
    ck_assert_msg(strstr(ebuf, "member a is listed twice") != NULL, "%s", ebuf);

    sb_init(&err, ebuf, sizeof ebuf);
    m[1].name = "b c";
    ck_assert_ptr_null(clu_new(&c, &err));
    ck_assert_msg(strstr(ebuf, "letters, digits") != NULL, "%s", ebuf);

    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_ptr_null(mkclu("node9", "s", &err));
    ck_assert_msg(strstr(ebuf, "\"node9\"") != NULL && strstr(ebuf, "not one of its members"), "%s",
                  ebuf);

    sb_init(&err, ebuf, sizeof ebuf);
    m[1].name = "b";
    m[1].addr = "no-such-host.invalid:80"; /* resolved for the check by address */
    ck_assert_ptr_null(clu_new(&c, &err));
    ck_assert_msg(strstr(ebuf, "no-such-host.invalid") != NULL, "%s", ebuf);

    cl = mkclu("node2", "s", &err);
    ck_assert_ptr_nonnull(cl);
    ck_assert_str_eq(clu_self(cl), "node2");
    ck_assert_uint_eq(clu_self_index(cl), 1);
    ck_assert(clu_is_peer(cl, "node1") && !clu_is_peer(cl, "node2") && !clu_is_peer(cl, "x"));
    ck_assert_int_eq(clu_member_find(cl, "node3"), 2);
    again = clu_ref(cl);
    ck_assert_ptr_eq(again, cl);
    clu_unref(&again);
    ck_assert_ptr_null(again);
    clu_unref(&cl); /* the last reference: freed (LeakSanitizer would say otherwise) */
}
END_TEST

START_TEST(ring_owner)
{
    struct clu *c1 = mkclu("node1", "s", &err), *c2 = mkclu("node2", "s", &err);
    unsigned owner[300], m, mine = 0, moved = 0;
    enum clu_route r;
    char key[32];
    size_t kl;

    ck_assert_ptr_nonnull(c1);
    ck_assert_ptr_nonnull(c2);
    for (unsigned k = 0; k < 300; k++) {
        kl = (size_t)snprintf(key, sizeof key, "site%c/k%u", 0, k);
        r = clu_route(c1, key, kl, &m);
        owner[k] = r == CLU_R_SELF ? 0 : m;
        ck_assert(r != CLU_R_ALONE);
        mine += r == CLU_R_SELF;
        /* Every member agrees: node2's view names the same owner. */
        r = clu_route(c2, key, kl, &m);
        ck_assert_uint_eq(r == CLU_R_SELF ? 1 : m, owner[k]);
    }
    ck_assert_msg(mine > 60 && mine < 140, "node1 owns %u of 300", mine);

    /* node3 sick: only its keys move. */
    ck_assert_int_eq(be_set_admin("node3", BE_ADMIN_SICK), 0);
    for (unsigned k = 0; k < 300; k++) {
        kl = (size_t)snprintf(key, sizeof key, "site%c/k%u", 0, k);
        r = clu_route(c1, key, kl, &m);
        m = r == CLU_R_SELF ? 0 : m;
        ck_assert(m != 2);
        if (owner[k] != 2)
            ck_assert_uint_eq(m, owner[k]);
        moved += owner[k] == 2;
    }
    ck_assert_uint_gt(moved, 50);
    ck_assert_int_eq(be_set_admin("node3", BE_ADMIN_AUTO), 0);

    /* A failed fetch takes node2 off node1's ring for a while; not off node2's own. */
    clu_failed(c1, 1);
    for (unsigned k = 0; k < 300; k++) {
        kl = (size_t)snprintf(key, sizeof key, "site%c/k%u", 0, k);
        r = clu_route(c1, key, kl, &m);
        ck_assert(!(r == CLU_R_PEER && m == 1));
    }
    /* Everyone sick, this node included: the origin. */
    for (unsigned i = 0; i < 3; i++)
        ck_assert_int_eq(be_set_admin(names[i], BE_ADMIN_SICK), 0);
    ck_assert_int_eq(clu_route(c2, "x", 1, &m), CLU_R_ALONE);
    clu_unref(&c1);
    clu_unref(&c2);
}
END_TEST

/* A request head with fields name, value, name, value ..., NULL. */
static void
mkreq(struct http *hp, struct http_hdr *hdrs, const char *method, const char *url, ...)
{
    va_list ap;
    const char *n;

    http_init(hp, hdrs, 16);
    hp->method = (struct txt){ method, strlen(method) };
    hp->url = (struct txt){ url, strlen(url) };
    hp->proto = 11;
    va_start(ap, url);
    while ((n = va_arg(ap, const char *)) != NULL) {
        const char *v = va_arg(ap, const char *);
        AZ(http_add(hp, (struct txt){ n, strlen(n) }, (struct txt){ v, strlen(v) }));
    }
    va_end(ap);
}

START_TEST(hop_signed)
{
    struct clu *c1 = mkclu("node1", "s3cret", &err), *c2 = mkclu("node2", "s3cret", &err);
    struct clu *other = mkclu("node2", "another", &err);
    struct http_hdr hdrs[16];
    struct http req;
    double now = tim_real();
    char hop[CLU_HOP_LEN], forged[CLU_HOP_LEN + 8];
    unsigned from = 99;

    clu_hop_make(c1, &TXT_LIT("GET"), &TXT_LIT("example.com"), &TXT_LIT("/a?b"), NULL, 0, now, hop,
                 sizeof hop);
    ck_assert_msg(strncmp(hop, "node1 ", 6) == 0 && strlen(hop) > 40, "%s", hop);

    mkreq(&req, hdrs, "GET", "/a?b", "Host", "example.com", CLU_HOP_HEADER, hop, NULL);
    ck_assert_int_eq(clu_hop_check(c2, &req, NULL, NULL, 0, now, &from), CLU_HOP_OK);
    ck_assert_uint_eq(from, 0);
    /* Another secret, a later clock, another URL, method or host: not believed. */
    ck_assert_int_eq(clu_hop_check(other, &req, NULL, NULL, 0, now, &from), CLU_HOP_BAD);
    ck_assert_int_eq(clu_hop_check(c2, &req, NULL, NULL, 0, now + CLU_HOP_WINDOW + 1, &from),
                     CLU_HOP_BAD);
    mkreq(&req, hdrs, "GET", "/a?c", "Host", "example.com", CLU_HOP_HEADER, hop, NULL);
    ck_assert_int_eq(clu_hop_check(c2, &req, NULL, NULL, 0, now, &from), CLU_HOP_BAD);
    mkreq(&req, hdrs, "PURGE", "/a?b", "Host", "example.com", CLU_HOP_HEADER, hop, NULL);
    ck_assert_int_eq(clu_hop_check(c2, &req, NULL, NULL, 0, now, &from), CLU_HOP_BAD);
    mkreq(&req, hdrs, "GET", "/a?b", "Host", "evil.example", CLU_HOP_HEADER, hop, NULL);
    ck_assert_int_eq(clu_hop_check(c2, &req, NULL, NULL, 0, now, &from), CLU_HOP_BAD);
    /* A body is signed too. */
    clu_hop_make(c1, &TXT_LIT("PURGE"), &TXT_LIT("h"), &TXT_LIT(CLU_PATH), "op x\n", 5, now, hop,
                 sizeof hop);
    mkreq(&req, hdrs, "PURGE", CLU_PATH, "Host", "h", CLU_HOP_HEADER, hop, NULL);
    ck_assert_int_eq(clu_hop_check(c2, &req, NULL, "op x\n", 5, now, &from), CLU_HOP_OK);
    ck_assert_int_eq(clu_hop_check(c2, &req, NULL, "op y\n", 5, now, &from), CLU_HOP_BAD);
    /* Another member's name on node1's signature, junk, none. */
    snprintf(forged, sizeof forged, "node3%s", hop + 5);
    mkreq(&req, hdrs, "PURGE", CLU_PATH, "Host", "h", CLU_HOP_HEADER, forged, NULL);
    ck_assert_int_eq(clu_hop_check(c2, &req, NULL, "op x\n", 5, now, &from), CLU_HOP_BAD);
    mkreq(&req, hdrs, "GET", "/", "Host", "h", CLU_HOP_HEADER, "nodeX 1 -", NULL);
    ck_assert_int_eq(clu_hop_check(c2, &req, NULL, NULL, 0, now, &from), CLU_HOP_BAD);
    mkreq(&req, hdrs, "GET", "/", "Host", "h", CLU_HOP_HEADER, "node1", NULL);
    ck_assert_int_eq(clu_hop_check(c2, &req, NULL, NULL, 0, now, &from), CLU_HOP_BAD);
    mkreq(&req, hdrs, "GET", "/", "Host", "h", NULL);
    ck_assert_int_eq(clu_hop_check(c2, &req, NULL, NULL, 0, now, &from), CLU_HOP_NONE);
    clu_unref(&c1);
    clu_unref(&c2);
    clu_unref(&other);
}
END_TEST

START_TEST(hop_by_address)
{
    struct clu *c1 = mkclu("node1", NULL, &err), *c2 = mkclu("node2", NULL, &err);
    struct http_hdr hdrs[16];
    struct http req;
    double now = tim_real();
    char hop[CLU_HOP_LEN];
    unsigned from;

    ck_assert_ptr_nonnull(c1);
    clu_hop_make(c1, &TXT_LIT("GET"), NULL, &TXT_LIT("/"), NULL, 0, now, hop, sizeof hop);
    ck_assert_msg(strcmp(hop + strlen(hop) - 2, " -") == 0, "%s", hop);
    mkreq(&req, hdrs, "GET", "/", CLU_HOP_HEADER, hop, NULL);
    ck_assert_int_eq(clu_hop_check(c2, &req, "127.0.0.1", NULL, 0, now, &from), CLU_HOP_OK);
    ck_assert_int_eq(clu_hop_check(c2, &req, "10.1.2.3", NULL, 0, now, &from), CLU_HOP_BAD);
    ck_assert_int_eq(clu_hop_check(c2, &req, NULL, NULL, 0, now, &from), CLU_HOP_BAD);
    clu_unref(&c1);
    clu_unref(&c2);
}
END_TEST

START_TEST(via_mark)
{
    struct clu *c1 = mkclu("node1", "s", &err);
    struct http_hdr hdrs[16];
    struct http req;
    char v[128];
    struct sb sb;
    bool self;

    sb_init(&sb, v, sizeof v);
    clu_via(c1, &sb);
    ck_assert_str_eq(v, "1.1 node1 (surogat fleet)");

    mkreq(&req, hdrs, "GET", "/", "Via", "1.1 surogat", "Via", "1.0 x, 1.1 node3 (surogat fleet)",
          NULL);
    ck_assert(clu_via_crossed(c1, &req, &self) && !self);
    mkreq(&req, hdrs, "GET", "/", "Via", "1.1 surogat, 1.1 node3 (surogat other)", NULL);
    ck_assert(!clu_via_crossed(c1, &req, &self) && !self);
    mkreq(&req, hdrs, "GET", "/", "Via", "1.1 surogat, 1.1 node1 (surogat fleet)", NULL);
    ck_assert(clu_via_crossed(c1, &req, &self) && self);
    mkreq(&req, hdrs, "GET", "/", "Via", "1.1 xnode1 (surogat fleet)", NULL);
    ck_assert(clu_via_crossed(c1, &req, &self) && !self);
    mkreq(&req, hdrs, "GET", "/", "Via", "1.1 node1 (surogat fleet)", NULL);
    ck_assert(clu_via_crossed(c1, &req, &self) && self);
    clu_unref(&c1);
}
END_TEST

START_TEST(op_line)
{
    static const char arg[] = "host\0/a b%c\xc3\xa9";
    struct clu_op op, back;
    char line[512], copy[512];
    struct sb sb;

    clu_op_init(&op, "node1", CLU_OP_KEY, true, arg, sizeof arg - 1);
    ck_assert_msg(strncmp(op.id, "node1-", 6) == 0 && strlen(op.id) == 22, "%s", op.id);
    sb_init(&sb, line, sizeof line);
    clu_op_print(&op, &sb);
    ck_assert_msg(strstr(line, " key 1 host%00/a%20b%25c%C3%A9") != NULL, "%s", line);
    ck_assert(strchr(line, '\n') == NULL);
    strcpy(copy, line);
    ck_assert_int_eq(clu_op_parse(copy, &back), 0);
    ck_assert_str_eq(back.id, op.id);
    ck_assert(back.kind == CLU_OP_KEY && back.soft);
    ck_assert_double_eq_tol(back.t, op.t, 1e-6);
    ck_assert_uint_eq(back.arglen, sizeof arg - 1);
    ck_assert(memcmp(back.arg, arg, back.arglen) == 0);

    static const char *const bad[] = {
        "",
        "id",
        "id 1 key 0",
        "id 1 key 0 ",
        "id x key 0 a",
        "id 1 nope 0 a",
        "id 1 key 2 a",
        "id 1 key 0 a%2",
        "id 1 key 0 a%zz",
        "id 1 key 0 a b",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        strcpy(copy, bad[i]);
        ck_assert_msg(clu_op_parse(copy, &back) == -1, "%s", bad[i]);
    }
}
END_TEST

START_TEST(recent_invalidations)
{
    double s0 = tim_mono(), s1, s2;
    struct txt mine[2] = { TXT_LIT("t1"), TXT_LIT("t9") }, other = TXT_LIT("t5");
    struct clu *c = mkclu("node1", "s", &err);

    ck_assert(!clu_inval_since(s0, "h\0/a", 4, mine, 2));
    clu_inval_note(CLU_OP_KEY, "h\0/a", 4);
    ck_assert(clu_inval_last() >= s0);
    ck_assert(clu_inval_since(s0, "h\0/a", 4, NULL, 0));
    ck_assert(!clu_inval_since(s0, "h\0/b", 4, NULL, 0));
    s1 = tim_mono();
    /* A tag in common, or not. */
    clu_inval_note(CLU_OP_TAGS, "t7 t9", 5);
    ck_assert(clu_inval_since(s1, "h\0/b", 4, mine, 2));
    ck_assert(!clu_inval_since(s1, "h\0/b", 4, &other, 1));
    ck_assert(!clu_inval_since(s1, "h\0/a", 4, NULL, 0)); /* the key purge came before s1 */
    /* A fetch from a member looks back a window: it sees the earlier one too. */
    ck_assert(clu_inval_since(s1 - clu_inval_window(c), "h\0/a", 4, NULL, 0));
    ck_assert_double_eq_tol(clu_inval_window(c), 3 * par.cluster_timeout, 1e-9);
    /* A ban, a URL on every host: any object. */
    s2 = tim_mono();
    clu_inval_note(CLU_OP_BAN, "req.url ~ ^/x", 13);
    ck_assert(clu_inval_since(s2, "h\0/b", 4, NULL, 0));
    /* More than remembered since: any object. */
    s2 = tim_mono();
    for (unsigned i = 0; i < CLU_RECENT; i++)
        clu_inval_note(CLU_OP_KEY, "h\0/zz", 5);
    ck_assert(clu_inval_since(s2, "h\0/b", 4, NULL, 0));
    s2 = tim_mono();
    clu_inval_note(CLU_OP_KEY, "h\0/zz", 5);
    ck_assert(!clu_inval_since(s2, "h\0/b", 4, NULL, 0));
    ck_assert(!clu_inval_since(tim_mono(), "h\0/zz", 5, NULL, 0));
    clu_unref(&c);
}
END_TEST

START_TEST(journal)
{
    struct clu_op op1, op2;
    size_t len;
    char *dump;
    FILE *f;
    char buf[4096];
    size_t n;

    clu_op_init(&op1, "node1", CLU_OP_BAN, false, "req.url ~ ^/a", 13);
    clu_op_init(&op2, "node2", CLU_OP_TAGS, true, "t1 t2", 5);
    op1.t = tim_real() - 100;
    ck_assert(clu__jnl_add(&op1));
    ck_assert(!clu__jnl_add(&op1)); /* seen: never applied twice */
    ck_assert(clu__jnl_add(&op2));
    clu__jnl_owe(op2.id, "node3");
    clu__jnl_owe(op2.id, "node3");

    dump = clu__jnl_dump(0, &len);
    ck_assert_msg(strncmp(dump, "journal ", 8) == 0, "%s", dump);
    ck_assert_msg(strstr(dump, op1.id) != NULL && strstr(dump, op2.id) != NULL, "%s", dump);
    ck_assert_uint_eq(len, strlen(dump));
    free(dump);
    /* Since a time: only what is newer. */
    dump = clu__jnl_dump(tim_real() - 50, &len);
    ck_assert_msg(strstr(dump, op1.id) == NULL && strstr(dump, op2.id) != NULL, "%s", dump);
    free(dump);

    /* On disk: the ops and what is owed, once. */
    f = fopen("cluster.journal", "r");
    AN(f);
    n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    ck_assert_msg(strncmp(buf, "C ", 2) == 0, "%s", buf);
    ck_assert_msg(strstr(buf, "E node1-") != NULL && strstr(buf, " ban 0 req.url%20~%20^/a\n"),
                  "%s", buf);
    ck_assert_msg(strstr(buf, " tags 1 t1%20t2\n") != NULL, "%s", buf);
    ck_assert_msg(strstr(buf, "O node2-") != NULL, "%s", buf);
    ck_assert_msg(strstr(strstr(buf, "O node2-") + 1, "O node2-") == NULL, "%s", buf);

    /* A restart reads it back: op1 is known, not applied again. */
    clu_stop();
    ck_assert(!clu__jnl_add(&op1));
    ck_assert(!clu__jnl_add(&op2));
}
END_TEST

START_TEST(serve_message)
{
    struct clu *c1 = mkclu("node1", "s3cret", &err), *c2 = mkclu("node2", "s3cret", &err);
    char body[512], hop[CLU_HOP_LEN], abuf[512], *big;
    struct http_hdr hdrs[16];
    struct http req;
    struct clu_op op;
    struct sb sb, ans;
    size_t biglen;

    clu_op_init(&op, "node1", CLU_OP_BAN, false, "req.url ~ ^/z", 13);
    sb_init(&sb, body, sizeof body);
    sb_cat(&sb, "op ");
    clu_op_print(&op, &sb);
    sb_cat(&sb, "\n");
    clu_hop_make(c1, &TXT_LIT("PURGE"), &TXT_LIT("127.0.0.1:19"), &TXT_LIT(CLU_PATH), body, sb.len,
                 tim_real(), hop, sizeof hop);
    mkreq(&req, hdrs, "PURGE", CLU_PATH, "Host", "127.0.0.1:19", CLU_HOP_HEADER, hop, NULL);

    sb_init(&ans, abuf, sizeof abuf);
    ck_assert_uint_eq(clu_serve(c2, &req, "127.0.0.1", body, sb.len, &ans, &big, &biglen), 200);
    ck_assert_str_eq(abuf, "applied 0\n");
    ck_assert_uint_eq(stat_get(STAT_bans_added), 1);
    /* The same message again: acknowledged, not applied. */
    sb_init(&ans, abuf, sizeof abuf);
    ck_assert_uint_eq(clu_serve(c2, &req, "127.0.0.1", body, sb.len, &ans, &big, &biglen), 200);
    ck_assert_str_eq(abuf, "seen\n");
    ck_assert_uint_eq(stat_get(STAT_bans_added), 1);
    /* Its body changed: refused. */
    body[sb.len - 2] = 'y';
    sb_init(&ans, abuf, sizeof abuf);
    ck_assert_uint_eq(clu_serve(c2, &req, "127.0.0.1", body, sb.len, &ans, &big, &biglen), 403);
    ck_assert_uint_eq(stat_get(STAT_cluster_hop_refused), 1);

    /* "sync": the journal, in `big`. */
    strcpy(body, "sync 0\n");
    clu_hop_make(c1, &TXT_LIT("PURGE"), &TXT_LIT("127.0.0.1:19"), &TXT_LIT(CLU_PATH), body,
                 strlen(body), tim_real(), hop, sizeof hop);
    mkreq(&req, hdrs, "PURGE", CLU_PATH, "Host", "127.0.0.1:19", CLU_HOP_HEADER, hop, NULL);
    sb_init(&ans, abuf, sizeof abuf);
    ck_assert_uint_eq(clu_serve(c2, &req, NULL, body, strlen(body), &ans, &big, &biglen), 200);
    ck_assert_ptr_nonnull(big);
    ck_assert_msg(strncmp(big, "journal ", 8) == 0 && strstr(big, op.id) != NULL, "%s", big);
    free(big);
    clu_unref(&c1);
    clu_unref(&c2);
}
END_TEST

Suite *
clu_suite(void)
{
    Suite *s = suite_create("clu");
    TCase *tc = tcase_create("clu");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, declaration_checks);
    tcase_add_test(tc, ring_owner);
    tcase_add_test(tc, hop_signed);
    tcase_add_test(tc, hop_by_address);
    tcase_add_test(tc, via_mark);
    tcase_add_test(tc, op_line);
    tcase_add_test(tc, recent_invalidations);
    tcase_add_test(tc, journal);
    tcase_add_test(tc, serve_message);
    suite_add_tcase(s, tc);
    return (s);
}
