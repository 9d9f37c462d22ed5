/*
 * What a log stream prints of a trace group (trace.h): varnishlog-like
 * text or one JSON object, and the fields a query (tq.h) reads from it.
 * Pure functions of a reassembled group; the stream's thread.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/rlog.h"
#include "surogat/sb.h"
#include "surogat/trace.h"

#define TAG_COL 15 /* "BerespProtocol" and a space */

/* Payload bytes from the network, on one line: controls and high bytes as \xHH. */
static void
cat_payload(struct sb *sb, const char *p, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    char esc[4] = { '\\', 'x', 0, 0 };
    size_t run = 0, i;

    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        /* One compare for the common byte: printable ASCII but the backslash. */
        if ((unsigned char)(c - 0x20) < 0x5f && c != '\\')
            continue;
        sb_bcat(sb, p + run, i - run);
        run = i + 1;
        esc[2] = hex[c >> 4];
        esc[3] = hex[c & 15];
        sb_bcat(sb, esc, 4);
    }
    sb_bcat(sb, p + run, i - run);
}

static void
marks(struct sb *sb, char c, unsigned level)
{
    char m[8];
    unsigned n = SRG_MIN(level, 4u);

    memset(m, ' ', sizeof m);
    memset(m, c, n);
    sb_bcat(sb, m, 4);
}

static void
txn_text(struct sb *sb, const struct trace_txn *t, unsigned level, bool complete)
{
    const struct trace_item *it;
    const char *name;
    size_t nl;

    if (!t->begun)
        return; /* linked, never seen: its parent's Link says so */
    marks(sb, '*', level);
    sb_printf(sb, "<< %s >> %llu%s\n", t->kind == TRACE_K_REQ ? "Request " : "BeReq   ",
              (unsigned long long)t->id, complete ? "" : " (incomplete)");
    for (unsigned i = 0; i < t->nitem; i++) {
        it = &t->item[i];
        marks(sb, '-', level);
        name = trace_tag_name(it->tag);
        nl = strlen(name);
        sb_cat(sb, name);
        if (it->len > 0)
            sb_bcat(sb, "                ", TAG_COL > nl ? TAG_COL - nl : 1);
        cat_payload(sb, t->data + it->off, it->len);
        sb_cat(sb, "\n");
    }
    for (unsigned i = 0; i < t->nchild; i++)
        txn_text(sb, t->child[i], level + 1, complete);
}

void
trace_group_text(struct sb *sb, const struct trace_txn *root, bool complete)
{
    txn_text(sb, root, 1, complete);
    sb_cat(sb, "\n");
}

static void
txn_json(struct sb *sb, const struct trace_txn *t)
{
    const struct trace_item *it;
    const char *name;
    const char *sep = "";

    sb_printf(sb, "{\"id\":%llu,\"kind\":\"%s\",\"parent\":%llu,\"records\":[",
              (unsigned long long)t->id, t->kind == TRACE_K_REQ ? "req" : "bereq",
              (unsigned long long)t->parent);
    for (unsigned i = 0; i < t->nitem; i++) {
        it = &t->item[i];
        name = trace_tag_name(it->tag);
        sb_printf(sb, "%s[\"%s\",", i > 0 ? "," : "", name);
        rlog_json_str(sb, t->data + it->off, it->len);
        sb_cat(sb, "]");
    }
    sb_cat(sb, "],\"children\":[");
    for (unsigned i = 0; i < t->nchild; i++) {
        if (!t->child[i]->begun)
            continue;
        sb_cat(sb, sep);
        txn_json(sb, t->child[i]);
        sep = ",";
    }
    sb_cat(sb, "]}");
}

void
trace_group_json(struct sb *sb, const struct trace_txn *root, bool complete)
{
    sb_printf(sb, "{\"complete\":%s,\"tx\":", complete ? "true" : "false");
    txn_json(sb, root);
    sb_cat(sb, "}");
}

/*--------------------------------------------------------------------
 * Query fields.
 */

/* Where a field is read: the tag, and which part of the payload. */
enum part {
    P_ALL,
    P_FIRST_WORD, /* "default 127.0.0.1:8080 new": "default" */
    P_HEADER,     /* "Name: value": value, when Name is hname */
    P_END_TS,     /* "End: abs since-start since-prev": since-start */
    P_TTL,        /* "... ttl 60.000 ...": 60.000; "uncacheable: ...": 0 */
};

static bool
part_of(const char *p, size_t len, enum part part, const char *hname, struct tq_val *v)
{
    const char *e = p + len, *s;
    size_t hl;

    switch (part) {
    case P_ALL:
        *v = (struct tq_val){ p, len };
        return (true);
    case P_FIRST_WORD:
        s = memchr(p, ' ', len);
        *v = (struct tq_val){ p, s != NULL ? (size_t)(s - p) : len };
        return (true);
    case P_HEADER:
        hl = strlen(hname);
        if (len < hl + 1 || p[hl] != ':' || strncasecmp(p, hname, hl) != 0)
            return (false);
        for (s = p + hl + 1; s < e && (*s == ' ' || *s == '\t'); s++)
            continue;
        *v = (struct tq_val){ s, (size_t)(e - s) };
        return (true);
    case P_END_TS:
        if (len < 5 || memcmp(p, "End: ", 5) != 0)
            return (false);
        s = memchr(p + 5, ' ', len - 5); /* after the absolute time */
        if (s == NULL)
            return (false);
        p = s + 1;
        s = memchr(p, ' ', (size_t)(e - p));
        *v = (struct tq_val){ p, s != NULL ? (size_t)(s - p) : (size_t)(e - p) };
        return (true);
    case P_TTL:
        if (len >= 12 && memcmp(p, "uncacheable:", 12) == 0) {
            *v = (struct tq_val){ "0", 1 }; /* not stored: no time at all */
            return (true);
        }
        for (s = p; s + 4 < e; s++) {
            if (memcmp(s, "ttl ", 4) != 0 || (s > p && s[-1] != ' '))
                continue;
            const char *n = s + 4, *ne = n;
            while (ne < e && *ne != ' ' && *ne != ',' && *ne != ':')
                ne++;
            if (ne < e && *ne == ':')
                continue; /* words of a reason ("ttl 0: no freshness"), not a figure */
            *v = (struct tq_val){ n, (size_t)(ne - n) };
            return (true);
        }
        return (false);
    }
    return (false);
}

/* The i-th value of tag/part in t's subtree (depth first); *i counts down. */
static bool
find(const struct trace_txn *t, enum trace_tag tag, enum part part, const char *hname, bool subtree,
     unsigned *i, struct tq_val *v)
{
    for (unsigned k = 0; k < t->nitem; k++) {
        const struct trace_item *it = &t->item[k];
        if (it->tag != tag || !part_of(t->data + it->off, it->len, part, hname, v))
            continue;
        if ((*i)-- == 0)
            return (true);
    }
    for (unsigned c = 0; subtree && c < t->nchild; c++)
        if (find(t->child[c], tag, part, hname, subtree, i, v))
            return (true);
    return (false);
}

bool
trace_group_get(void *subj, enum tq_field f, const char *hname, unsigned i, struct tq_val *v)
{
    static const struct {
        enum trace_tag tag;
        enum part part;
        bool subtree; /* the backend transactions' records count too */
    } map[TQ_F__N] = {
        [TQ_F_REQ_URL] = { TRACE_T_REQ_URL, P_ALL, true },
        [TQ_F_REQ_METHOD] = { TRACE_T_REQ_METHOD, P_ALL, true },
        [TQ_F_REQ_HEADER] = { TRACE_T_REQ_HEADER, P_HEADER, true },
        [TQ_F_RESP_STATUS] = { TRACE_T_RESP_STATUS, P_ALL, true },
        [TQ_F_RESP_HEADER] = { TRACE_T_RESP_HEADER, P_HEADER, true },
        [TQ_F_BERESP_STATUS] = { TRACE_T_BERESP_STATUS, P_ALL, true },
        [TQ_F_BACKEND] = { TRACE_T_BACKEND, P_FIRST_WORD, true },
        [TQ_F_CLIENT] = { TRACE_T_REQ_START, P_FIRST_WORD, true },
        [TQ_F_DURATION] = { TRACE_T_TIMESTAMP, P_END_TS, false },
        [TQ_F_CACHE] = { TRACE_T_CACHE, P_ALL, true },
        [TQ_F_TTL] = { TRACE_T_STORE, P_TTL, true },
    };
    const struct trace_txn *root = subj;
    unsigned n = i;

    SRG_ASSERT((unsigned)f < TQ_F__N);
    if (find(root, map[f].tag, map[f].part, hname, map[f].subtree, &n, v))
        return (true);
    /* A hit stores nothing: its TTL is what the object has left, from its Lookup. */
    return (f == TQ_F_TTL && find(root, TRACE_T_LOOKUP, P_TTL, NULL, true, &n, v));
}
