/*
 * trace: the per-worker byte rings of tagged records and their readers
 * (nothing is written without a reader; a reader gets every record once,
 * intact, in order, and counts what the writer overwrote before it got
 * there, even while the writer runs), the grouping of transactions into
 * requests with their backend transactions, and what a stream prints.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/tim.h"
#include "surogat/tq.h"
#include "surogat/trace.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

static struct wrk wrk;
static char wsblock[256 * 1024];
static struct sess sess;
static struct http_hdr hdrs[8];
static struct req the_req;

/* r on worker w, whose workspace is block, with room for nh header fields in h; no head. */
static void
init_req(struct req *r, struct wrk *w, char *block, size_t size, struct http_hdr *h, unsigned nh)
{
    OBJ_INIT(w, WRK_MAGIC);
    ws_init(&w->ws, block, size);
    OBJ_INIT(r, REQ_MAGIC);
    r->wrk = w;
    r->ws = &w->ws;
    r->sp = &sess;
    snprintf(sess.client_ip, sizeof sess.client_ip, "192.0.2.7");
    snprintf(sess.client_port, sizeof sess.client_port, "4711");
    http_init(r->http, h, nh);
}

static struct req *
mkreq(const char *url)
{
    init_req(&the_req, &wrk, wsblock, sizeof wsblock, hdrs, 8);
    the_req.http->method = TXT_LIT("GET");
    the_req.http->url = (struct txt){ url, strlen(url) };
    the_req.http->proto = 11;
    AZ(http_add(the_req.http, TXT_LIT("Host"), TXT_LIT("example.test")));
    the_req.t_start = tim_real();
    the_req.t_mono = tim_mono();
    return (&the_req);
}

/* Records as a reader got them. */
struct got {
    unsigned n;
    uint64_t tx[65536];
    enum trace_tag tag[65536];
    char p[65536][48];
};

static void
collect(void *priv, const struct trace_record *rec)
{
    struct got *g = priv;

    ck_assert_uint_lt(g->n, 65536);
    g->tx[g->n] = rec->tx;
    g->tag[g->n] = rec->tag;
    snprintf(g->p[g->n], sizeof g->p[0], "%.*s", (int)rec->len, rec->p);
    g->n++;
}

static struct got got;

START_TEST(tags_table)
{
    for (int i = 0; i < TRACE_T__N; i++) {
        ck_assert_ptr_nonnull(trace_tag_name((enum trace_tag)i));
        ck_assert_uint_gt(strlen(trace_tag_doc((enum trace_tag)i)), 10);
        ck_assert_uint_le(strlen(trace_tag_name((enum trace_tag)i)), 14);
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(trace_tag_name((enum trace_tag)i), trace_tag_name((enum trace_tag)j));
    }
    ck_assert_ptr_null(trace_tag_name(TRACE_T__N));
    ck_assert_str_eq(trace_tag_name(TRACE_T_REQ_URL), "ReqURL");
}
END_TEST

START_TEST(nothing_without_a_reader)
{
    struct trace_reader *rd;
    struct req *r;

    ck_assert_int_eq(trace_init(0), 0);
    r = mkreq("/a");
    ck_assert(!trace_wanted());
    r->trace = trace_req_begin(r);
    ck_assert_ptr_null(r->trace);
    /* Every emission point is a no-op on a NULL transaction. */
    TRACE(r->trace, HOOK, "recv %s", "hash");
    TRACE_TS(r->trace, "Lookup");
    ck_assert_ptr_null(trace_fetch(r->trace, r->ws, "fetch"));
    TRACE_REQ_END(r);
    /* A reader with history finds nothing: no ring was even made. */
    rd = trace_reader_new(true);
    ck_assert(trace_wanted());
    memset(&got, 0, sizeof got);
    ck_assert_uint_eq(trace_reader_poll(rd, collect, &got, NULL), 0);
    ck_assert_uint_eq(got.n, 0);
    trace_reader_free(&rd);
    ck_assert(!trace_wanted());
    trace_fini();
}
END_TEST

/* A request with a miss's backend transaction, as the core writes it. */
static void
write_request(const char *url, bool fetch)
{
    struct req *r = mkreq(url);
    struct trace_tx *b;
    struct http beresp;
    struct http_hdr bh[4];

    r->trace = trace_req_begin(r);
    ck_assert_ptr_nonnull(r->trace);
    TRACE(r->trace, HOOK, "recv %s %s", "hash", "builtin");
    TRACE_KEY(r->trace, "example.test\0/a\0lang=en", 23);
    if (fetch) {
        b = trace_fetch(r->trace, r->ws, "fetch");
        ck_assert_ptr_nonnull(b);
        ck_assert_ptr_eq(trace_fetch(r->trace, r->ws, "fetch"), b); /* a retry: the same one */
        http_init(&beresp, bh, 4);
        beresp.proto = 11;
        beresp.status = 200;
        beresp.reason = TXT_LIT("OK");
        AZ(http_add(&beresp, TXT_LIT("Cache-Control"), TXT_LIT("max-age=60")));
        TRACE_HTTP(b, BERESP, &beresp);
        TRACE(b, STORE, "storable: ttl %.3f grace 10.000 keep 0.000 from max-age", 60.0);
    }
    r->outcome = fetch ? REQ_O_MISS : REQ_O_HIT;
    r->resp_bytes = 1234;
    r->t_end = tim_mono();
    TRACE_REQ_END(r);
    ck_assert_ptr_null(r->trace);
}

struct groups {
    unsigned n;
    char text[8][8192];
    char json[8][8192];
    bool complete[8];
    bool matched[8];
    struct tq *q;
};

static void
take_group(void *priv, const struct trace_txn *root, bool complete)
{
    struct groups *gs = priv;
    struct sb sb;

    ck_assert_uint_lt(gs->n, 8);
    sb_init(&sb, gs->text[gs->n], sizeof gs->text[0]);
    trace_group_text(&sb, root, complete);
    ck_assert(sb_ok(&sb));
    sb_init(&sb, gs->json[gs->n], sizeof gs->json[0]);
    trace_group_json(&sb, root, complete);
    ck_assert(sb_ok(&sb));
    gs->complete[gs->n] = complete;
    if (gs->q != NULL)
        gs->matched[gs->n] = tq_match(gs->q, trace_group_get, (void *)(uintptr_t)root);
    gs->n++;
}

static struct trace_grouper *grp_for_add;
static double now_for_add;

static void
to_grouper(void *priv, const struct trace_record *rec)
{
    (void)priv;
    trace_grouper_add(grp_for_add, now_for_add, rec);
}

/* What write_request("/a?x=1", true) prints, in part. */
static const char *const miss_lines[] = {
    "-   Begin          req 0 rxreq\n",
    "-   ReqStart       192.0.2.7 4711\n",
    "-   ReqURL         /a?x=1\n",
    "-   ReqHeader      Host: example.test\n",
    "-   Hash           example.test | /a | lang=en\n",
    "-   Cache          MISS\n",
    "-   Length         1234\n",
    "**  << BeReq    >> ",
    "--  BerespStatus   200\n",
    "--  BerespHeader   Cache-Control: max-age=60\n",
    "--  Store          storable: ttl 60.000",
    "--  End\n",
};

START_TEST(request_with_its_backend_transaction)
{
    static struct groups gs;
    struct trace_reader *rd;
    char err[256];
    struct sb eb;

    ck_assert_int_eq(trace_init(0), 0);
    rd = trace_reader_new(false);
    write_request("/a?x=1", true);
    write_request("/hit", false);
    grp_for_add = trace_grouper_new(TRACE_G_REQUEST);
    now_for_add = 100;
    ck_assert_uint_gt(trace_reader_poll(rd, to_grouper, NULL, NULL), 0);
    sb_init(&eb, err, sizeof err);
    gs.q = tq_compile("ReqURL ~ \"^/a\" && BerespStatus == 200 && TTL >= 60 && Cache == \"miss\" "
                      "&& Client == \"192.0.2.7\" && ReqHeader:host == \"example.test\" && "
                      "Duration < 5",
                      NULL, &eb, NULL);
    ck_assert_msg(gs.q != NULL, "%s", err);
    ck_assert_uint_eq(trace_grouper_flush(grp_for_add, 100, false, take_group, &gs), 2);
    ck_assert_uint_eq(gs.n, 2);
    ck_assert(gs.complete[0] && gs.complete[1]);
    ck_assert(gs.matched[0] && !gs.matched[1]);
    /* The request, then its backend transaction indented under it. */
    ck_assert_msg(strstr(gs.text[0], "*   << Request  >> ") == gs.text[0], "%s", gs.text[0]);
    for (size_t i = 0; i < ARRAY_LEN(miss_lines); i++)
        ck_assert_msg(strstr(gs.text[0], miss_lines[i]) != NULL, "%s not in %s", miss_lines[i],
                      gs.text[0]);
    ck_assert(strstr(gs.text[0], "**  << BeReq") > strstr(gs.text[0], "-   End\n"));
    ck_assert_ptr_null(strstr(gs.text[1], "BeReq"));
    ck_assert_ptr_nonnull(strstr(gs.json[0],
                                 "\"kind\":\"req\",\"parent\":0,\"records\":[[\"Begin\","
                                 "\"req 0 rxreq\"]"));
    ck_assert_ptr_nonnull(strstr(gs.json[0], "\"children\":[{\"id\":"));
    ck_assert_ptr_nonnull(strstr(gs.json[0], "[\"BerespStatus\",\"200\"]"));
    ck_assert_msg(strncmp(gs.json[0], "{\"complete\":true,\"tx\":{", 23) == 0, "%s", gs.json[0]);
    tq_free(&gs.q);
    trace_grouper_free(&grp_for_add);
    trace_reader_free(&rd);
    trace_fini();
}
END_TEST

/* n records of transaction tx, payloads "rec <i>" padded to about len bytes. */
static void
write_n(struct trace_tx *tx, unsigned from, unsigned n, size_t len)
{
    char buf[TRACE_PAYLOAD_MAX];

    for (unsigned i = from; i < from + n; i++) {
        int k = snprintf(buf, sizeof buf, "rec %u ", i);
        memset(buf + k, 'x', len - (size_t)k);
        trace_rec(tx, TRACE_T_REQ_HEADER, buf, len);
    }
}

/* Each record read is "rec <i>", i increasing; returns how many. */
static unsigned
check_sequence(const struct got *g, unsigned *first, unsigned *last)
{
    unsigned prev = 0, k = 0;

    for (unsigned i = 0; i < g->n; i++) {
        unsigned v;
        if (g->tag[i] != TRACE_T_REQ_HEADER)
            continue;
        ck_assert_int_eq(sscanf(g->p[i], "rec %u", &v), 1);
        if (k > 0)
            ck_assert_uint_gt(v, prev);
        else
            *first = v;
        prev = v;
        k++;
    }
    *last = prev;
    return (k);
}

START_TEST(overwritten_records_are_counted)
{
    struct trace_reader *rd, *hist;
    struct req *r;
    uint64_t missed = 0;
    unsigned first = 0, last = 0, n;

    ck_assert_int_eq(trace_init(64 * 1024), 0); /* the smallest: 16 segments of 4 KiB */
    rd = trace_reader_new(false);
    r = mkreq("/");
    r->trace = trace_req_begin(r);
    memset(&got, 0, sizeof got);
    (void)trace_reader_poll(rd, collect, &got, &missed);
    ck_assert_uint_eq(missed, 0);
    /* 2000 records of 120 bytes (136 in the ring): about four rings' worth. */
    write_n(r->trace, 0, 2000, 120);
    memset(&got, 0, sizeof got);
    (void)trace_reader_poll(rd, collect, &got, &missed);
    n = check_sequence(&got, &first, &last);
    ck_assert_uint_eq(last, 1999);
    ck_assert_uint_eq(n, 2000 - first);
    ck_assert_uint_eq(n + missed, 2000); /* every record delivered or counted */
    ck_assert_uint_gt(missed, 1000);
    ck_assert_uint_gt(n, 300); /* resynchronised near the oldest intact byte, not at the head */
    /* A new reader with history starts at the oldest intact record, missing nothing it wants. */
    hist = trace_reader_new(true);
    missed = 0;
    memset(&got, 0, sizeof got);
    (void)trace_reader_poll(hist, collect, &got, &missed);
    ck_assert_uint_eq(check_sequence(&got, &first, &last), 2000 - first);
    ck_assert_uint_eq(last, 1999);
    ck_assert_uint_eq(missed, 0);
    /* Both go on from where they are. */
    write_n(r->trace, 2000, 10, 40);
    missed = 0;
    memset(&got, 0, sizeof got);
    (void)trace_reader_poll(rd, collect, &got, &missed);
    ck_assert_uint_eq(check_sequence(&got, &first, &last), 10);
    ck_assert_uint_eq(first, 2000);
    ck_assert_uint_eq(missed, 0);
    trace_reader_free(&hist);
    trace_reader_free(&rd);
    trace_fini();
}
END_TEST

/* A worker of its own ring writing as fast as it can while a reader reads. */
struct writer {
    unsigned n;
    volatile int done;
};

static void *
writer_thread(void *priv)
{
    struct writer *w = priv;
    static char block[65536];
    static struct wrk w2;
    static struct req r2;
    static struct http_hdr h2[4];

    init_req(&r2, &w2, block, sizeof block, h2, 4);
    r2.trace = trace_req_begin(&r2); /* no method: no head records */
    ck_assert_ptr_nonnull(r2.trace);
    for (unsigned i = 0; i < w->n; i++) {
        char buf[200] = { 0 };
        /* The payload repeats its number: a torn record would not. */
        int k = snprintf(buf, sizeof buf, "%u:%u:%u:%u:%u", i, i, i, i, i);
        trace_rec(r2.trace, TRACE_T_REQ_HEADER, buf, (size_t)k + (i % 7) * 13);
    }
    __atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
    return (NULL);
}

static unsigned conc_n, conc_prev;
static bool conc_any;

static void
conc_check(void *priv, const struct trace_record *rec)
{
    const char *p = rec->p;
    size_t len = rec->len;
    unsigned a, b, c, d, e;
    char buf[256];

    (void)priv;
    if (rec->tag != TRACE_T_REQ_HEADER)
        return;
    ck_assert_uint_lt(len, sizeof buf);
    memcpy(buf, p, len);
    buf[len] = '\0';
    ck_assert_int_eq(sscanf(buf, "%u:%u:%u:%u:%u", &a, &b, &c, &d, &e), 5);
    ck_assert(a == b && b == c && c == d && d == e);
    ck_assert_uint_eq(len, strlen(buf) + (a % 7) * 13);
    if (conc_any)
        ck_assert_uint_gt(a, conc_prev);
    conc_prev = a;
    conc_any = true;
    conc_n++;
}

START_TEST(concurrent_reader_sees_no_torn_record)
{
    struct writer w = { .n = 300000 };
    struct trace_reader *rd;
    uint64_t missed = 0;
    pthread_t t;

    ck_assert_int_eq(trace_init(64 * 1024), 0);
    rd = trace_reader_new(false);
    AZ(pthread_create(&t, NULL, writer_thread, &w));
    while (!__atomic_load_n(&w.done, __ATOMIC_ACQUIRE))
        (void)trace_reader_poll(rd, conc_check, NULL, &missed);
    AZ(pthread_join(t, NULL));
    (void)trace_reader_poll(rd, conc_check, NULL, &missed);
    ck_assert_uint_eq(conc_prev, w.n - 1);
    /* Begin, Timestamp and ReqStart came first; each record was delivered or counted. */
    ck_assert_uint_le(conc_n + missed, w.n + 3);
    ck_assert_uint_ge(conc_n + missed, w.n);
    ck_assert_uint_gt(conc_n, 0);
    trace_reader_free(&rd);
    trace_fini();
}
END_TEST

/* Feed the grouper the records of a transaction's part given as "Tag payload" strings. */
static void
feed_part(struct trace_grouper *g, double now, uint64_t tx, unsigned part, const char *const *recs)
{
    for (; *recs != NULL; recs++) {
        const char *sp = strchr(*recs, ' ');
        size_t tl = sp != NULL ? (size_t)(sp - *recs) : strlen(*recs);
        const char *pl = sp != NULL ? sp + 1 : "";
        int tag = -1;
        for (int i = 0; i < TRACE_T__N; i++)
            if (strlen(trace_tag_name((enum trace_tag)i)) == tl &&
                strncmp(trace_tag_name((enum trace_tag)i), *recs, tl) == 0)
                tag = i;
        ck_assert_int_ge(tag, 0);
        trace_grouper_add(g, now,
                          &(struct trace_record){ tx, (enum trace_tag)tag, part, pl, strlen(pl) });
    }
}

static void
feed(struct trace_grouper *g, double now, uint64_t tx, const char *const *recs)
{
    feed_part(g, now, tx, 0, recs);
}

/* A parked request resumed on another worker: its records go on in that worker's ring. */
static void *
resumed_thread(void *priv)
{
    struct trace_tx *tx = priv;

    TRACE(tx, LOOKUP, "hit: after a busy wait of %s s", "0.5");
    TRACE(tx, RESP_STATUS, "%u", 200u);
    return (NULL);
}

START_TEST(parked_request_read_in_order)
{
    static struct groups gs;
    struct trace_reader *rd;
    struct req *r;
    pthread_t t;
    const char *p[6];

    ck_assert_int_eq(trace_init(0), 0);
    rd = trace_reader_new(false);
    r = mkreq("/parked");
    r->trace = trace_req_begin(r);
    TRACE(r->trace, LOOKUP, "%s", "busy: waits for another request's fetch");
    AZ(pthread_create(&t, NULL, resumed_thread, r->trace));
    AZ(pthread_join(t, NULL));
    r->outcome = REQ_O_HIT;
    TRACE_REQ_END(r); /* back on the first ring: a third part */
    /*
     * The rings are read newest first: the second thread's records come
     * before the first part's, and the grouper puts them back in order.
     */
    grp_for_add = trace_grouper_new(TRACE_G_REQUEST);
    (void)trace_reader_poll(rd, to_grouper, NULL, NULL);
    ck_assert_uint_eq(trace_grouper_flush(grp_for_add, 0, false, take_group, &gs), 1);
    ck_assert(gs.complete[0]);
    p[0] = strstr(gs.text[0], "-   Begin          req 0 rxreq\n");
    p[1] = strstr(gs.text[0], "-   ReqURL         /parked\n");
    p[2] = strstr(gs.text[0], "-   Lookup         busy: waits for another request's fetch\n");
    p[3] = strstr(gs.text[0], "-   Lookup         hit: after a busy wait of 0.5 s\n");
    p[4] = strstr(gs.text[0], "-   RespStatus     200\n");
    p[5] = strstr(gs.text[0], "-   Cache          HIT\n");
    for (unsigned i = 0; i < 6; i++) {
        ck_assert_msg(p[i] != NULL, "%u: %s", i, gs.text[0]);
        if (i > 0)
            ck_assert_msg(p[i] > p[i - 1], "%u out of order: %s", i, gs.text[0]);
    }
    ck_assert_msg(strstr(gs.text[0], "-   End\n") != NULL &&
                      strstr(gs.text[0], "-   End\n")[strlen("-   End\n")] == '\n',
                  "%s", gs.text[0]);
    trace_grouper_free(&grp_for_add);
    trace_reader_free(&rd);
    trace_fini();
}
END_TEST

START_TEST(parts_ordered_across_the_wrap)
{
    static struct groups gs;
    struct trace_grouper *g = trace_grouper_new(TRACE_G_TX);
    static const char *const a[] = { "Begin req 0 rxreq", "ReqURL /w", NULL };
    static const char *const b[] = { "Lookup second", NULL };
    static const char *const c[] = { "Lookup third", "End", NULL };

    /* Parts 255, 0, 1 (a transaction that moved 256 times and more), read 1, 255, 0. */
    feed_part(g, 0, 7, 1, c);
    feed_part(g, 0, 7, 255, a);
    feed_part(g, 0, 7, 0, b);
    ck_assert_uint_eq(trace_grouper_flush(g, 0, false, take_group, &gs), 1);
    ck_assert_msg(strstr(gs.text[0],
                         "-   Begin          req 0 rxreq\n-   ReqURL         /w\n-   "
                         "Lookup         second\n-   Lookup         third\n-   End\n") != NULL,
                  "%s", gs.text[0]);
    trace_grouper_free(&g);
}
END_TEST

START_TEST(background_fetch_under_its_request)
{
    static struct groups gs;
    struct trace_grouper *g = trace_grouper_new(TRACE_G_REQUEST);
    static const char *const bg_begin[] = { "Begin bereq 10 bgfetch", NULL };
    static const char *const bg_rest[] = { "BerespStatus 304", "Timestamp End: 1 0.2 0", "End",
                                           NULL };
    static const char *const req[] = { "Begin req 0 rxreq",
                                       "ReqURL /g",
                                       "Lookup grace",
                                       "Link bereq 11 bgfetch",
                                       "Cache GRACE",
                                       "Timestamp End: 1 0.001 0",
                                       "End",
                                       NULL };

    /* Another ring was read first: the background fetch began before its link was read. */
    feed(g, 1.0, 11, bg_begin);
    feed(g, 1.0, 10, req);
    ck_assert_uint_eq(trace_grouper_flush(g, 1.0, false, take_group, &gs), 0); /* waits */
    feed(g, 1.1, 11, bg_rest);
    ck_assert_uint_eq(trace_grouper_flush(g, 1.1, false, take_group, &gs), 1);
    ck_assert(gs.complete[0]);
    ck_assert_ptr_nonnull(strstr(gs.text[0], "**  << BeReq    >> 11\n--  Begin          bereq 10 "
                                             "bgfetch\n--  BerespStatus   304\n"));
    ck_assert_uint_eq(trace_grouper_flush(g, 2.0, true, take_group, &gs), 0);
    trace_grouper_free(&g);
}
END_TEST

START_TEST(grouping_gives_up_in_time)
{
    static struct groups gs;
    struct trace_grouper *g = trace_grouper_new(TRACE_G_REQUEST), *tx;
    static const char *const req[] = { "Begin req 0 rxreq", "Link bereq 21 bgfetch", "End", NULL };
    static const char *const orphan[] = { "Begin bereq 99 bgfetch", "End", NULL };
    static const char *const open[] = { "Begin req 0 rxreq", "ReqURL /slow", NULL };
    static const char *const headless[] = { "ReqURL /lost", "End", NULL };

    feed(g, 0, 20, req);      /* its bgfetch was skipped or lost: never begins */
    feed(g, 0, 30, orphan);   /* its request was printed before */
    feed(g, 0, 40, open);     /* never ends */
    feed(g, 0, 50, headless); /* its Begin was overwritten */
    ck_assert_uint_eq(trace_grouper_flush(g, 0.5, false, take_group, &gs), 0);
    /* The orphan after ORPHAN_WAIT, the request once its link is given up on. */
    ck_assert_uint_eq(trace_grouper_flush(g, 1.5, false, take_group, &gs), 1);
    ck_assert_ptr_nonnull(strstr(gs.text[0], ">> 30\n"));
    ck_assert_uint_eq(trace_grouper_flush(g, TRACE_LINK_WAIT + 0.1, false, take_group, &gs), 1);
    ck_assert_ptr_nonnull(strstr(gs.text[1], ">> 20\n"));
    ck_assert(gs.complete[1]);
    ck_assert_ptr_nonnull(strstr(gs.text[1], "-   Link           bereq 21 bgfetch\n"));
    ck_assert_ptr_null(strstr(gs.text[1], "BeReq"));
    /* Quiet for TRACE_GROUP_TMO: printed, marked incomplete; the headless one never. */
    ck_assert_uint_eq(trace_grouper_flush(g, TRACE_GROUP_TMO + 1, false, take_group, &gs), 1);
    ck_assert(!gs.complete[2]);
    ck_assert_ptr_nonnull(strstr(gs.text[2], ">> 40 (incomplete)\n"));
    ck_assert_ptr_null(strstr(gs.text[2], "/lost"));
    ck_assert_uint_eq(trace_grouper_flush(g, 1e9, true, take_group, &gs), 0);
    trace_grouper_free(&g);

    /* -g tx: each transaction alone, at its end. */
    tx = trace_grouper_new(TRACE_G_TX);
    feed(tx, 0, 20, req);
    feed(tx, 0, 21, orphan);
    ck_assert_uint_eq(trace_grouper_flush(tx, 0, false, take_group, &gs), 2);
    ck_assert_ptr_nonnull(strstr(gs.text[4], "*   << BeReq    >> 21\n"));
    trace_grouper_free(&tx);
}
END_TEST

START_TEST(payload_escaped_and_cut)
{
    static struct groups gs;
    struct trace_reader *rd;
    struct req *r;
    char big[TRACE_PAYLOAD_MAX + 500];

    ck_assert_int_eq(trace_init(0), 0);
    rd = trace_reader_new(false);
    r = mkreq("/\x01\xff\"");
    r->trace = trace_req_begin(r);
    memset(big, 'b', sizeof big);
    trace_rec(r->trace, TRACE_T_REQ_HEADER, big, sizeof big);
    TRACE_REQ_END(r);
    grp_for_add = trace_grouper_new(TRACE_G_REQUEST);
    (void)trace_reader_poll(rd, to_grouper, NULL, NULL);
    ck_assert_uint_eq(trace_grouper_flush(grp_for_add, 0, false, take_group, &gs), 1);
    ck_assert_ptr_nonnull(strstr(gs.text[0], "ReqURL         /\\x01\\xff\"\n"));
    ck_assert_ptr_nonnull(strstr(gs.json[0], "[\"ReqURL\",\"/\\u0001\\u00ff\\\"\"]"));
    /* A record is cut at TRACE_PAYLOAD_MAX bytes. */
    const char *b = strstr(gs.text[0], "ReqHeader      bbb");
    ck_assert_ptr_nonnull(b);
    b += strlen("ReqHeader      ");
    ck_assert_uint_eq(strspn(b, "b"), TRACE_PAYLOAD_MAX);
    ck_assert_int_eq(b[TRACE_PAYLOAD_MAX], '\n');
    trace_grouper_free(&grp_for_add);
    trace_reader_free(&rd);
    trace_fini();
}
END_TEST

/* The manual page path under the source tree, read whole; NULL when not found. */
static char *
read_man(const char *name)
{
    const char *src = getenv("SUROGAT_SRCDIR");
    char path[4096];
    char *buf;
    FILE *f;
    long n;

    if (src == NULL)
        return (NULL);
    snprintf(path, sizeof path, "%s/man/%s", src, name);
    f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    rewind(f);
    buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return (buf);
}

/* Whether word (with roff's \- for each -) is in text as a word. */
static bool
has_word(const char *text, const char *word)
{
    char w[128];
    size_t n = 0;

    for (const char *p = word; *p != '\0' && n + 2 < sizeof w; p++) {
        if (*p == '-')
            w[n++] = '\\';
        w[n++] = *p;
    }
    w[n] = '\0';
    for (const char *p = strstr(text, w); p != NULL; p = strstr(p + 1, w)) {
        char before = p > text ? p[-1] : ' ', after = p[n];
        if ((before == ' ' || before == '\n' || before == '=' || before == '(') &&
            (after == ' ' || after == '\n' || after == ',' || after == ')' || after == '"'))
            return (true);
    }
    return (false);
}

START_TEST(manuals_name_every_tag_and_reason)
{
    char *ctl = read_man("surogatctl.1"), *d = read_man("surogatd.8");
    char *traces, *end;

    if (ctl == NULL || d == NULL)
        return; /* run outside meson: nothing to compare with */
    traces = strstr(ctl, "\n.SH TRACES\n");
    ck_assert_ptr_nonnull(traces);
    end = strstr(traces, "\n.SH QUERIES\n");
    ck_assert_ptr_nonnull(end);
    *end = '\0';
    for (int i = 0; i < TRACE_T__N; i++)
        ck_assert_msg(has_word(traces, trace_tag_name((enum trace_tag)i)),
                      "surogatctl(1) TRACES does not name %s", trace_tag_name((enum trace_tag)i));
    for (int i = 0; i < FRESH_STORE__N; i++)
        ck_assert_msg(has_word(d, fresh_store_name((enum fresh_store)i)),
                      "surogatd(8) does not name the Cache-Status detail %s",
                      fresh_store_name((enum fresh_store)i));
    for (int i = 0; i < TQ_F__N; i++)
        ck_assert_msg(strstr(end + 1, tq_field_name((enum tq_field)i)) != NULL,
                      "surogatctl(1) QUERIES does not name %s", tq_field_name((enum tq_field)i));
    free(ctl);
    free(d);
}
END_TEST

Suite *
trace_suite(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("trace");

    tcase_add_test(tc, tags_table);
    tcase_add_test(tc, nothing_without_a_reader);
    tcase_add_test(tc, request_with_its_backend_transaction);
    tcase_add_test(tc, overwritten_records_are_counted);
    tcase_add_test(tc, concurrent_reader_sees_no_torn_record);
    tcase_add_test(tc, background_fetch_under_its_request);
    tcase_add_test(tc, grouping_gives_up_in_time);
    tcase_add_test(tc, payload_escaped_and_cut);
    tcase_add_test(tc, parked_request_read_in_order);
    tcase_add_test(tc, parts_ordered_across_the_wrap);
    tcase_add_test(tc, manuals_name_every_tag_and_reason);
    suite_add_tcase(s, tc);
    return s;
}
