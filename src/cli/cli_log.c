/*
 * `log [-d] [-j] [-g request|tx] [-q QUERY] [-u REGEX] [-s STATUS] [-c CACHE]
 * [-i ACL]`: after the OK answer the admin connection becomes a stream of
 * one line per finished request, read from the workers' rings (rlog.h),
 * or with -g of request traces (trace.h), until the client closes it.
 *
 * Each stream has a thread of its own, which polls the rings every
 * LOG_TICK seconds and writes what passes its filters; it never touches
 * a worker, so a slow client only makes its own stream lose records, and
 * the stream says how many ("# missed N").  streams_mtx guards the list
 * of streams; a stream's other fields belong to its thread once started.
 * A thread that ended by itself is joined when the next stream starts or
 * at cli_fini().
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <sys/resource.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "surogat/defs.h"
#include "surogat/acl.h"
#include "surogat/cli.h"
#include "surogat/req.h"
#include "surogat/rlog.h"
#include "surogat/sb.h"
#include "surogat/tim.h"
#include "surogat/tq.h"
#include "surogat/trace.h"

#include "cli_priv.h"

#define LOG_TICK        0.05  /* seconds between two looks at the rings */
#define TRACE_TICK      0.005 /* the same while traces keep coming: a trace ring fills fast */
#define GROUP_MAX       (16u * 1024 * 1024) /* bytes of one trace group's text, at most */
#define LOG_STREAMS_MAX 8                   /* streams at once: each is a thread */
#define LOG_SEND_TMO    30.0  /* seconds a client may refuse our bytes before we give up */
#define LOG_OUT_MAX     65536 /* bytes buffered before they are sent */
#define LOG_FILTER_MAX  16    /* values in one -s or -c list */

struct log_stream {
    unsigned magic;
#define LOG_STREAM_MAGIC 0x4d7be2a0
    struct log_stream *next; /* under streams_mtx */
    bool done;               /* under streams_mtx: the thread returned */
    pthread_t thr;
    int fd;
    bool json, history;
    pcre2_code *url_re; /* -u, or NULL */
    pcre2_match_data *md;
    unsigned nstatus; /* -s: status ranges */
    unsigned status_lo[LOG_FILTER_MAX], status_hi[LOG_FILTER_MAX];
    unsigned ncache; /* -c */
    char cache[LOG_FILTER_MAX][12];
    struct acl *clients; /* -i, or NULL */
    struct tq *q;        /* -q, or NULL */
    bool trace;          /* -g: traces, not lines */
    enum trace_grouping grouping;
    struct rlog_reader *rd;
    struct trace_reader *trd;
    struct trace_grouper *grp;
    char *gbuf; /* one group's text, grown as needed */
    size_t gcap;
    bool dead; /* the client is gone or stuck: stop */
    size_t olen;
    char out[LOG_OUT_MAX + 4096]; /* room for one line past LOG_OUT_MAX */
};

static pthread_mutex_t streams_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct log_stream *streams;
static int stop_fd = -1; /* eventfd: readable when every stream must end */

/*--------------------------------------------------------------------
 * Output.
 */

/* Send buf[0 .. len) to the client, or mark the stream dead. */
static void
send_buf(struct log_stream *ls, const char *buf, size_t len)
{
    struct pollfd pfd[2] = { { .fd = ls->fd, .events = POLLOUT },
                             { .fd = stop_fd, .events = POLLIN } };
    size_t off = 0;
    double deadline = tim_mono() + LOG_SEND_TMO;
    ssize_t n;

    while (off < len && !ls->dead) {
        n = send(ls->fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && tim_mono() < deadline) {
            /*
             * Blocked on the client: the rings go on without us, and we
             * count what we miss.  A daemon that stops does not wait.
             */
            if (poll(pfd, 2, 100) > 0 && pfd[1].revents != 0)
                break;
            continue;
        }
        ls->dead = true;
    }
    if (off < len)
        ls->dead = true;
}

static void
send_out(struct log_stream *ls)
{
    send_buf(ls, ls->out, ls->olen);
    ls->olen = 0;
}

/* Bytes from the network, as text on one line: controls, spaces, quotes, high bytes as \xHH. */
static void
cat_text(struct sb *sb, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    char esc[4] = { '\\', 'x', 0, 0 };

    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c > 0x20 && c < 0x7f && c != '"' && c != '\\') {
            sb_bcat(sb, s, 1);
            continue;
        }
        esc[2] = hex[c >> 4];
        esc[3] = hex[c & 15];
        sb_bcat(sb, esc, 4);
    }
}

static void
line_text(struct sb *sb, const struct rlog_rec *r)
{
    char date[TIM_NCSA_LEN + 1];

    tim_ncsa_date(r->t_start, date);
    sb_printf(sb, "%s:%s [%s] \"", r->client, r->port, date);
    if (r->method[0] != '\0') {
        cat_text(sb, r->method);
        sb_cat(sb, " ");
        cat_text(sb, r->url);
        if (r->url_len >= sizeof r->url)
            sb_cat(sb, "...");
        sb_printf(sb, " %s", http_proto_name(r->proto));
    } else {
        sb_cat(sb, "-");
    }
    sb_printf(sb, "\" %u %llu %s backend=%s ttfb=%.6f total=%.6f restarts=%u retries=%u hooks=",
              r->status, (unsigned long long)r->bytes, r->cache, r->backend, (double)r->ttfb,
              (double)r->total, r->restarts, r->retries);
    rlog_hooks_cat(sb, r->hooks);
    sb_cat(sb, " host=");
    if (r->host[0] != '\0')
        cat_text(sb, r->host);
    else
        sb_cat(sb, "-");
    if (r->esi_level > 0)
        sb_printf(sb, " esi_level=%u", r->esi_level);
    if (r->esi > 0)
        sb_printf(sb, " esi=%u", r->esi);
}

static void
json_field(struct sb *sb, const char *key, const char *s)
{
    sb_printf(sb, ",\"%s\":", key);
    rlog_json_str(sb, s, strlen(s));
}

static void
line_json(struct sb *sb, const struct rlog_rec *r)
{
    sb_cat(sb, "{\"time\":");
    rlog_json_time(sb, r->t_start);
    json_field(sb, "client", r->client);
    sb_printf(sb, ",\"port\":%u", (unsigned)strtoul(r->port, NULL, 10));
    if (r->method[0] != '\0') {
        json_field(sb, "method", r->method);
        json_field(sb, "url", r->url);
        sb_printf(sb, ",\"url_truncated\":%s,\"proto\":\"%s\"",
                  r->url_len >= sizeof r->url ? "true" : "false",
                  http_proto_name(r->proto));
    } else {
        sb_cat(sb, ",\"method\":null,\"url\":null,\"url_truncated\":false,\"proto\":null");
    }
    if (r->host[0] != '\0')
        json_field(sb, "host", r->host);
    else
        sb_cat(sb, ",\"host\":null");
    sb_printf(sb, ",\"status\":%u,\"bytes\":%llu", r->status, (unsigned long long)r->bytes);
    json_field(sb, "cache", r->cache);
    json_field(sb, "backend", r->backend);
    sb_printf(sb, ",\"restarts\":%u,\"retries\":%u,\"ttfb\":%.6f,\"total\":%.6f,\"hooks\":",
              r->restarts, r->retries, (double)r->ttfb, (double)r->total);
    rlog_hooks_json(sb, r->hooks);
    sb_printf(sb, ",\"esi_level\":%u,\"esi\":%u", r->esi_level, r->esi);
    sb_cat(sb, "}");
}

static bool
wanted(struct log_stream *ls, const struct rlog_rec *r)
{
    bool ok;

    if (ls->clients != NULL && !acl_match_str(ls->clients, r->client))
        return (false);
    if (ls->nstatus > 0) {
        ok = false;
        for (unsigned i = 0; i < ls->nstatus && !ok; i++)
            ok = r->status >= ls->status_lo[i] && r->status <= ls->status_hi[i];
        if (!ok)
            return (false);
    }
    if (ls->ncache > 0) {
        ok = false;
        for (unsigned i = 0; i < ls->ncache && !ok; i++)
            ok = strcasecmp(ls->cache[i], r->cache) == 0;
        if (!ok)
            return (false);
    }
    if (ls->url_re != NULL &&
        pcre2_match(ls->url_re, (PCRE2_SPTR)r->url, strlen(r->url), 0, 0, ls->md, NULL) < 0)
        return (false);
    return (true);
}

/*--------------------------------------------------------------------
 * -q on log lines: the fields a record has.
 */

struct line_subj {
    const struct rlog_rec *r;
    char status[8];
    char total[32];
};

/* tq_check_f: what a log line can answer. */
static const char *
line_check(enum tq_field f, const char *hname)
{
    switch (f) {
    case TQ_F_REQ_URL:
    case TQ_F_REQ_METHOD:
    case TQ_F_RESP_STATUS:
    case TQ_F_BACKEND:
    case TQ_F_CLIENT:
    case TQ_F_DURATION:
    case TQ_F_CACHE:
        return (NULL);
    case TQ_F_REQ_HEADER:
        if (strcasecmp(hname, "Host") == 0)
            return (NULL);
        break;
    default:
        break;
    }
    return ("a log line has no such field (of the headers, only ReqHeader:Host): "
            "with -g request, the query reads the request's trace");
}

static bool
str_val(const char *s, struct tq_val *v)
{
    if (s[0] == '\0' || strcmp(s, "-") == 0)
        return (false);
    *v = (struct tq_val){ s, strlen(s) };
    return (true);
}

/* tq_get_f over a log line: one value per field. */
static bool
line_get(void *priv, enum tq_field f, const char *hname, unsigned i, struct tq_val *v)
{
    struct line_subj *ls = priv;
    const struct rlog_rec *r = ls->r;

    (void)hname;
    if (i > 0)
        return (false);
    switch (f) {
    case TQ_F_REQ_URL:
        return (r->method[0] != '\0' && str_val(r->url, v));
    case TQ_F_REQ_METHOD:
        return (str_val(r->method, v));
    case TQ_F_REQ_HEADER:
        return (str_val(r->host, v));
    case TQ_F_RESP_STATUS:
        snprintf(ls->status, sizeof ls->status, "%u", r->status);
        return (str_val(ls->status, v));
    case TQ_F_BACKEND:
        return (str_val(r->backend, v));
    case TQ_F_CLIENT:
        return (str_val(r->client, v));
    case TQ_F_DURATION:
        snprintf(ls->total, sizeof ls->total, "%.6f", (double)r->total);
        return (str_val(ls->total, v));
    case TQ_F_CACHE:
        return (str_val(r->cache, v));
    default:
        return (false);
    }
}

static void
emit(const struct rlog_rec *r, void *priv)
{
    struct log_stream *ls = priv;
    struct sb sb;

    if (ls->dead || !wanted(ls, r))
        return;
    if (ls->q != NULL && !tq_match(ls->q, line_get, &(struct line_subj){ .r = r }))
        return;
    sb_init(&sb, ls->out + ls->olen, sizeof ls->out - ls->olen - 1);
    if (ls->json)
        line_json(&sb, r);
    else
        line_text(&sb, r);
    if (!sb_ok(&sb))
        return; /* cannot happen: a record's strings are bounded well below the spare room */
    sb.buf[sb.len++] = '\n';
    ls->olen += sb.len;
    if (ls->olen >= LOG_OUT_MAX)
        send_out(ls);
}

static void
emit_missed(struct log_stream *ls, uint64_t missed)
{
    struct sb sb;

    sb_init(&sb, ls->out + ls->olen, sizeof ls->out - ls->olen);
    if (ls->json)
        sb_printf(&sb, "{\"missed\":%llu}\n", (unsigned long long)missed);
    else
        sb_printf(&sb, "# missed %llu records (the reader fell behind; see rlog_records)\n",
                  (unsigned long long)missed);
    if (sb_ok(&sb))
        ls->olen += sb.len;
}

/*--------------------------------------------------------------------
 * Traces (-g).
 */

/* trace_rec_f: into the stream's grouper. */
static void
trace_add(void *priv, const struct trace_record *rec)
{
    struct log_stream *ls = priv;

    trace_grouper_add(ls->grp, tim_mono(), rec);
}

/* The first value of field f in the group, as a string in buf. */
static void
group_str(const struct trace_txn *root, enum tq_field f, const char *hname, char *buf, size_t len)
{
    struct tq_val v;

    buf[0] = '\0';
    if (trace_group_get((void *)(uintptr_t)root, f, hname, 0, &v))
        snprintf(buf, len, "%.*s", (int)v.len, v.p);
}

/* -u, -s, -c, -i on a group: its request's URL, status, cache status and client. */
static bool
group_wanted(struct log_stream *ls, const struct trace_txn *root)
{
    struct rlog_rec r;
    char status[8];

    if (ls->url_re == NULL && ls->nstatus == 0 && ls->ncache == 0 && ls->clients == NULL)
        return (true);
    memset(&r, 0, sizeof r);
    group_str(root, TQ_F_REQ_URL, NULL, r.url, sizeof r.url);
    group_str(root, TQ_F_CACHE, NULL, r.cache, sizeof r.cache);
    group_str(root, TQ_F_CLIENT, NULL, r.client, sizeof r.client);
    group_str(root, TQ_F_RESP_STATUS, NULL, status, sizeof status);
    r.status = (uint16_t)strtoul(status, NULL, 10);
    return (wanted(ls, &r));
}

/* trace_group_f: a group is ready; print it if it passes the filters. */
static void
emit_group(void *priv, const struct trace_txn *root, bool complete)
{
    struct log_stream *ls = priv;
    struct sb sb;

    if (ls->dead || !group_wanted(ls, root))
        return;
    if (ls->q != NULL && !tq_match(ls->q, trace_group_get, (void *)(uintptr_t)root))
        return;
    for (;;) {
        sb_init(&sb, ls->gbuf, ls->gcap);
        if (ls->json)
            trace_group_json(&sb, root, complete);
        else
            trace_group_text(&sb, root, complete);
        if (sb_ok(&sb) && sb.len + 1 < ls->gcap)
            break;
        if (ls->gcap >= GROUP_MAX)
            return; /* cannot happen: records are bounded, and so are transactions */
        ls->gcap *= 2;
        ls->gbuf = realloc(ls->gbuf, ls->gcap);
        AN(ls->gbuf);
    }
    if (ls->json)
        ls->gbuf[sb.len++] = '\n';
    if (ls->olen + sb.len > LOG_OUT_MAX)
        send_out(ls);
    if (sb.len > LOG_OUT_MAX) {
        send_buf(ls, ls->gbuf, sb.len);
        return;
    }
    memcpy(ls->out + ls->olen, ls->gbuf, sb.len);
    ls->olen += sb.len;
}

/*--------------------------------------------------------------------
 * The stream thread.
 */

/* Whether the client is still there; reads and drops what it sends. */
static bool
client_alive(struct log_stream *ls)
{
    char junk[512];
    ssize_t n;

    for (;;) {
        n = recv(ls->fd, junk, sizeof junk, MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n < 0 && errno == EINTR)
            continue;
        return (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    }
}

static void *
stream_thread(void *priv)
{
    struct log_stream *ls = priv;
    struct pollfd pfd[2];
    uint64_t missed;
    bool busy;

    OBJ_CHECK(ls, LOG_STREAM_MAGIC);
    /*
     * The reader yields to the workers: on a saturated core it falls
     * behind and reports what it missed instead of taking their time.
     */
    (void)setpriority(PRIO_PROCESS, (id_t)gettid(), 19);
    while (!ls->dead) {
        missed = 0;
        if (ls->trace) {
            busy = trace_reader_poll(ls->trd, trace_add, ls, &missed) > 0;
            (void)trace_grouper_flush(ls->grp, tim_mono(), false, emit_group, ls);
        } else {
            busy = false;
            (void)rlog_reader_poll(ls->rd, emit, ls, &missed);
        }
        if (missed > 0)
            emit_missed(ls, missed);
        send_out(ls);
        pfd[0] = (struct pollfd){ .fd = ls->fd, .events = POLLIN | POLLRDHUP };
        pfd[1] = (struct pollfd){ .fd = stop_fd, .events = POLLIN };
        if (poll(pfd, 2, (int)((busy ? TRACE_TICK : LOG_TICK) * 1e3)) < 0 && errno != EINTR)
            break;
        if (pfd[1].revents != 0)
            break;
        if (pfd[0].revents != 0 && !client_alive(ls))
            break;
    }
    AZ(pthread_mutex_lock(&streams_mtx));
    ls->done = true;
    AZ(pthread_mutex_unlock(&streams_mtx));
    return (NULL);
}

static void
stream_free(struct log_stream **lsp)
{
    struct log_stream *ls;

    OBJ_TAKE(ls, lsp, LOG_STREAM_MAGIC);
    if (ls->fd >= 0)
        (void)close(ls->fd);
    if (ls->rd != NULL)
        rlog_reader_free(&ls->rd);
    if (ls->trd != NULL)
        trace_reader_free(&ls->trd);
    if (ls->grp != NULL)
        trace_grouper_free(&ls->grp);
    free(ls->gbuf);
    tq_free(&ls->q);
    pcre2_match_data_free(ls->md);
    pcre2_code_free(ls->url_re);
    acl_free(&ls->clients);
    OBJ_FREE(&ls);
}

/* Join and free the streams whose client left.  The number still running. */
static unsigned
reap(bool all)
{
    struct log_stream *ls, **pp, *dead = NULL;
    unsigned n = 0;

    AZ(pthread_mutex_lock(&streams_mtx));
    for (pp = &streams; (ls = *pp) != NULL;) {
        if (ls->done || all) {
            *pp = ls->next;
            ls->next = dead;
            dead = ls;
        } else {
            n++;
            pp = &ls->next;
        }
    }
    AZ(pthread_mutex_unlock(&streams_mtx));
    while ((ls = dead) != NULL) {
        dead = ls->next;
        AZ(pthread_join(ls->thr, NULL));
        stream_free(&ls);
    }
    return (n);
}

/* cli_stream_f: the answer went out; the connection is ours. */
static void
stream_start(int fd, void *priv)
{
    struct log_stream *ls = priv;
    sigset_t all, old;
    int e;

    OBJ_CHECK(ls, LOG_STREAM_MAGIC);
    ls->fd = fd;
    if (fd < 0) {
        stream_free(&ls);
        return;
    }
    AZ(sigfillset(&all));
    AZ(pthread_sigmask(SIG_SETMASK, &all, &old));
    e = pthread_create(&ls->thr, NULL, stream_thread, ls);
    AZ(pthread_sigmask(SIG_SETMASK, &old, NULL));
    if (e != 0) {
        stream_free(&ls); /* closing the connection tells the client */
        return;
    }
    AZ(pthread_mutex_lock(&streams_mtx));
    ls->next = streams;
    streams = ls;
    AZ(pthread_mutex_unlock(&streams_mtx));
}

/*--------------------------------------------------------------------
 * The command.
 */

/* "404", "5xx", "200-299", comma-separated.  0, or -1 with err. */
static int
parse_status(struct log_stream *ls, const char *arg, struct sb *err)
{
    const char *p = arg;
    char *end;
    unsigned long lo, hi;

    while (*p != '\0') {
        if (ls->nstatus == LOG_FILTER_MAX)
            goto bad;
        if (p[0] >= '1' && p[0] <= '9' && (p[1] == 'x' || p[1] == 'X') &&
            (p[2] == 'x' || p[2] == 'X') && (p[3] == ',' || p[3] == '\0')) {
            lo = (unsigned long)(p[0] - '0') * 100;
            hi = lo + 99;
            end = (char *)(uintptr_t)(p + 3);
        } else {
            lo = strtoul(p, &end, 10);
            hi = lo;
            if (end == p)
                goto bad;
            if (*end == '-') {
                p = end + 1;
                hi = strtoul(p, &end, 10);
                if (end == p)
                    goto bad;
            }
        }
        if (lo < 100 || hi > 999 || lo > hi || (*end != ',' && *end != '\0'))
            goto bad;
        ls->status_lo[ls->nstatus] = (unsigned)lo;
        ls->status_hi[ls->nstatus++] = (unsigned)hi;
        p = *end == ',' ? end + 1 : end;
    }
    if (ls->nstatus > 0)
        return (0);
bad:
    sb_printf(err, "-s %s: expected statuses like 404, 5xx or 200-299, comma-separated", arg);
    return (-1);
}

static int
parse_cache(struct log_stream *ls, const char *arg, struct sb *err)
{
    const char *p = arg, *e;
    size_t len;

    while (*p != '\0') {
        e = strchr(p, ',');
        len = e != NULL ? (size_t)(e - p) : strlen(p);
        if (len == 0 || len >= sizeof ls->cache[0] || ls->ncache == LOG_FILTER_MAX ||
            req_outcome_parse(p, len) == REQ_O__N) {
            sb_printf(err, "-c %s: expected cache statuses among", arg);
            for (int o = REQ_O_NONE + 1; o < REQ_O__N; o++)
                sb_printf(err, "%s%s", o == REQ_O_NONE + 1 ? " " : ",", req_outcome_name(o));
            return (-1);
        }
        memcpy(ls->cache[ls->ncache], p, len);
        ls->cache[ls->ncache++][len] = '\0';
        p += len + (e != NULL);
    }
    return (0);
}

static int
parse_url(struct log_stream *ls, const char *arg, struct sb *err)
{
    PCRE2_UCHAR msg[128];
    PCRE2_SIZE off;
    int ec;

    ls->url_re = pcre2_compile((PCRE2_SPTR)arg, PCRE2_ZERO_TERMINATED, 0, &ec, &off, NULL);
    if (ls->url_re == NULL) {
        (void)pcre2_get_error_message(ec, msg, sizeof msg);
        sb_printf(err, "-u %s: %s at offset %zu", arg, (const char *)msg, (size_t)off);
        return (-1);
    }
    ls->md = pcre2_match_data_create_from_pattern(ls->url_re, NULL);
    AN(ls->md);
    return (0);
}

/* -q: compiled once the mode is known (what a log line can answer is less). */
static int
parse_query(struct log_stream *ls, const char *src, struct sb *err)
{
    char msg[512];
    struct sb m;
    size_t pos = 0;

    sb_init(&m, msg, sizeof msg);
    ls->q = tq_compile(src, ls->trace ? NULL : line_check, &m, &pos);
    if (ls->q != NULL)
        return (0);
    if (!sb_ok(&m))
        msg[sizeof msg - 1] = '\0';
    sb_printf(err, "-q: at %zu: %s\n  %s\n  %*s^", pos + 1, msg, src, (int)pos, "");
    return (-1);
}

static int
parse_grouping(struct log_stream *ls, const char *arg, struct sb *err)
{
    ls->trace = true;
    if (strcmp(arg, "request") == 0) {
        ls->grouping = TRACE_G_REQUEST;
    } else if (strcmp(arg, "tx") == 0) {
        ls->grouping = TRACE_G_TX;
    } else {
        sb_printf(err,
                  "-g %s: expected request (a request with its backend transactions) or tx "
                  "(each transaction alone)",
                  arg);
        return (-1);
    }
    return (0);
}

static unsigned
cmd_log(int argc, char *const *argv, struct sb *out, void *priv)
{
    struct log_stream *ls;
    const char *a, *query = NULL;
    int rc = 0;

    (void)priv;
    OBJ_NEW(ls, LOG_STREAM_MAGIC);
    ls->fd = -1;
    for (int i = 1; i < argc && rc == 0; i++) {
        a = argv[i];
        if (strcmp(a, "-d") == 0) {
            ls->history = true;
        } else if (strcmp(a, "-j") == 0) {
            ls->json = true;
        } else if (a[0] == '-' && a[1] != '\0' && strchr("uscigq", a[1]) != NULL && a[2] == '\0') {
            if (i + 1 == argc) {
                sb_printf(out, "%s needs a value.", a);
                rc = -2;
                break;
            }
            a = argv[++i];
            switch (argv[i - 1][1]) {
            case 'u':
                rc = parse_url(ls, a, out);
                break;
            case 's':
                rc = parse_status(ls, a, out);
                break;
            case 'c':
                rc = parse_cache(ls, a, out);
                break;
            case 'g':
                rc = parse_grouping(ls, a, out);
                break;
            case 'q':
                query = a;
                break;
            default: /* 'i' */
                acl_free(&ls->clients);
                ls->clients = acl_parse(a, out);
                rc = ls->clients == NULL ? -1 : 0;
                break;
            }
        } else {
            sb_printf(out, "Unknown option '%s'.", a);
            rc = -2;
        }
    }
    if (rc == 0 && query != NULL)
        rc = parse_query(ls, query, out);
    if (rc == 0 && reap(false) >= LOG_STREAMS_MAX) {
        sb_printf(out, "Too many log streams (%d).", LOG_STREAMS_MAX);
        rc = -3;
    }
    /*
     * The reader starts before the OK goes out: a request the client makes
     * once it has the OK is in the stream (and, with -g, traced: a request
     * is traced, or not, from its start).
     */
    if (rc == 0 && ls->trace) {
        ls->grp = trace_grouper_new(ls->grouping);
        ls->gcap = 65536;
        ls->gbuf = malloc(ls->gcap);
        AN(ls->gbuf);
        ls->trd = trace_reader_new(ls->history);
    } else if (rc == 0) {
        ls->rd = rlog_reader_new(ls->history);
    }
    if (rc == 0 && cli__stream(stream_start, ls) != 0) {
        sb_cat(out, "log streams only on an admin connection.");
        rc = -3;
    }
    if (rc != 0) {
        stream_free(&ls);
        return (rc == -1 ? CLI_BADVAL : rc == -2 ? CLI_USAGE : CLI_FAILED);
    }
    if (ls->trace)
        sb_printf(out, "Streaming the request log%s: a trace per %s.",
                  ls->history ? " (history first)" : "",
                  ls->grouping == TRACE_G_REQUEST ? "request" : "transaction");
    else
        sb_printf(out, "Streaming the request log%s: one line per request.",
                  ls->history ? " (history first)" : "");
    return (CLI_OK);
}

void
cli__log_init(void)
{
    if (stop_fd < 0) {
        stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        AN(stop_fd >= 0);
    }
    cli_register("log",
                 "[-d] [-j] [-g request|tx] [-q <query>] [-u <regex>] [-s <status>] [-c <cache>] "
                 "[-i <acl>]",
                 "Stream one line per finished request until the connection closes: -d first "
                 "the requests the rings still hold, -j JSON lines; -g request: instead, the "
                 "trace of each request with its backend transactions (-g tx: each transaction "
                 "alone); -q only what the query selects (ReqURL ~ \"^/news\" && RespStatus >= "
                 "500); only URLs matching regex, statuses (404, 5xx, 200-299, comma-separated), "
                 "cache statuses (HIT,MISS ...), clients (addresses and prefixes as in purge_acl: "
                 "10.0.0.0/8,!10.0.0.1).",
                 0, -1, cmd_log, NULL);
}

void
cli__log_fini(void)
{
    uint64_t one = 1;

    if (stop_fd < 0)
        return;
    AN(write(stop_fd, &one, sizeof one) == sizeof one);
    (void)reap(true);
    (void)close(stop_fd);
    stop_fd = -1;
}
