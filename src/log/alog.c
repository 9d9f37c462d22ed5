/*
 * The access log.  Each worker formats its lines into its own buffer and
 * appends the buffer with one write(2) on an O_APPEND descriptor when it
 * fills, when it is a second old, or when the worker goes idle.  A reopen
 * (SIGHUP) swaps the descriptor; writers read it once per write, and the
 * old one is closed only after a grace period so that a write in flight
 * never lands on a recycled descriptor number.
 *
 * The format is compiled once, at alog_init(), into a list of fields
 * that every line walks; the list is read-only afterwards, so workers
 * share it without a lock.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "surogat/alog.h"
#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/req.h"
#include "surogat/rlog.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/tim.h"
#include "surogat/wrk.h"

#define ALOG_BUF_SIZE  (32 * 1024)
#define ALOG_LINE_MAX  8192
#define ALOG_FLUSH_AGE 1.0  /* seconds a line may wait in a buffer */
#define ALOG_FLUSH_GAP 1e-3 /* seconds between writes of a busy worker at least */
#define ALOG_URL_MAX   1024 /* bytes of the URL in %r: the rest is an attack or a mistake */
#define ALOG_HDR_MAX   1024 /* bytes of a header value, likewise */
#define ALOG_OPS_MAX   64

#define ALOG_COMBINED                                                                        \
    "%h %l %u [%t] \"%r\" %s %b \"%{Referer}i\" \"%{User-Agent}i\" %D %{ttfb}x %{backend}x " \
    "%{cache}x"

struct alog_buf {
    unsigned magic;
#define ALOG_BUF_MAGIC 0x6e2a91d4
    size_t len;
    double t_first;   /* tim_mono() of the oldest buffered line */
    double t_flushed; /* tim_mono() of the last write */
    char buf[ALOG_BUF_SIZE];
};

enum af_kind {
    AF_LIT,
    AF_CLIENT,
    AF_DASH,
    AF_TIME,
    AF_REQLINE,
    AF_METHOD,
    AF_PATH,
    AF_QUERY,
    AF_PROTO,
    AF_STATUS,
    AF_BYTES_CLF,
    AF_BYTES,
    AF_TIME_US,
    AF_TIME_MS,
    AF_TIME_S,
    AF_HDR,
    AF_CACHE,
    AF_BACKEND,
    AF_TTFB_US,
    AF_PORT,
    AF_RESTARTS,
    AF_RETRIES,
    AF_HOOKS,
    AF_ESI,
};

/* One piece of a compiled format: literal text, or a field with its argument. */
struct af_op {
    enum af_kind kind;
    const char *arg; /* AF_LIT: the text; AF_HDR: the header name; points into the format */
    size_t len;
};

struct af_prog {
    bool json;
    unsigned n;
    struct af_op op[ALOG_OPS_MAX];
};

static int alog_fd = -1;
static int alog_old_fd = -1;
static char *alog_path;
static bool alog_syslog;
static char *alog_fmt; /* the format's text: AF_LIT and AF_HDR arguments point into it */
static struct af_prog alog_prog;

static int
open_alog(const char *path)
{
    return (open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
}

/*--------------------------------------------------------------------
 * Formats.
 */

static const struct {
    const char *name; /* %{name}x */
    enum af_kind kind;
} xfields[] = {
    { "cache", AF_CACHE }, { "backend", AF_BACKEND },   { "ttfb", AF_TTFB_US },
    { "port", AF_PORT },   { "restarts", AF_RESTARTS }, { "retries", AF_RETRIES },
    { "hooks", AF_HOOKS }, { "esi", AF_ESI },
};

static int
add_op(struct af_prog *p, enum af_kind kind, const char *arg, size_t len, struct sb *err)
{
    if (p->n == ALOG_OPS_MAX) {
        sb_printf(err, "access_log_format: more than %d pieces", ALOG_OPS_MAX);
        return (-1);
    }
    p->op[p->n++] = (struct af_op){ kind, arg, len };
    return (0);
}

/* The field after '%' at *fp (with its {arg}); advances *fp.  0, or -1 with err. */
static int
compile_field(struct af_prog *p, const char **fp, const char *fmt, struct sb *err)
{
    static const struct {
        char c;
        enum af_kind kind;
    } simple[] = {
        { 'h', AF_CLIENT }, { 'a', AF_CLIENT },  { 'l', AF_DASH },   { 'u', AF_DASH },
        { 't', AF_TIME },   { 'r', AF_REQLINE }, { 'm', AF_METHOD }, { 'U', AF_PATH },
        { 'q', AF_QUERY },  { 'H', AF_PROTO },   { 's', AF_STATUS }, { 'b', AF_BYTES_CLF },
        { 'B', AF_BYTES },  { 'D', AF_TIME_US }, { 'T', AF_TIME_S },
    };
    const char *f = *fp, *arg = NULL, *end;
    size_t alen = 0;
    char c;

    if (*f == '{') {
        end = strchr(f, '}');
        if (end == NULL) {
            sb_printf(err, "access_log_format: '{' without '}' at offset %zu", (size_t)(f - fmt));
            return (-1);
        }
        arg = f + 1;
        alen = (size_t)(end - arg);
        f = end + 1;
    }
    c = *f;
    *fp = f + (c != '\0');
    if (c == 'i' && arg != NULL && alen > 0)
        return (add_op(p, AF_HDR, arg, alen, err));
    if (c == 'x' && arg != NULL) {
        for (size_t i = 0; i < sizeof xfields / sizeof xfields[0]; i++)
            if (strlen(xfields[i].name) == alen && memcmp(xfields[i].name, arg, alen) == 0)
                return (add_op(p, xfields[i].kind, NULL, 0, err));
    }
    if (c == 'T' && arg != NULL) {
        if (alen == 2 && memcmp(arg, "ms", 2) == 0)
            return (add_op(p, AF_TIME_MS, NULL, 0, err));
        if (alen == 2 && memcmp(arg, "us", 2) == 0)
            return (add_op(p, AF_TIME_US, NULL, 0, err));
        if (alen == 1 && *arg == 's')
            return (add_op(p, AF_TIME_S, NULL, 0, err));
    }
    if (arg == NULL) {
        for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++)
            if (simple[i].c == c)
                return (add_op(p, simple[i].kind, NULL, 0, err));
    }
    if (arg != NULL)
        sb_printf(err, "access_log_format: unknown field %%{%.*s}%c at offset %zu", (int)alen, arg,
                  c != '\0' ? c : ' ', (size_t)(arg - 2 - fmt));
    else
        sb_printf(err, "access_log_format: unknown field %%%c at offset %zu", c != '\0' ? c : ' ',
                  (size_t)(f - 1 - fmt));
    return (-1);
}

/* fmt must outlive p: literals and header names point into it. */
static int
compile(struct af_prog *p, const char *fmt, struct sb *err)
{
    const char *f, *lit;

    memset(p, 0, sizeof *p);
    if (strcmp(fmt, "json") == 0) {
        p->json = true;
        return (0);
    }
    if (strcmp(fmt, "combined") == 0)
        fmt = ALOG_COMBINED;
    for (f = fmt; *f != '\0';) {
        if (*f == '%' && f[1] != '%') {
            f++;
            if (compile_field(p, &f, fmt, err) != 0)
                return (-1);
            continue;
        }
        lit = f;
        if (*f == '%') {
            f += 2;
            lit++; /* "%%": the second '%' is the text */
        }
        while (*f != '\0' && *f != '%')
            f++;
        if (add_op(p, AF_LIT, lit, (size_t)(f - lit), err) != 0)
            return (-1);
    }
    return (0);
}

/* A header value for the log: quotes and control bytes escaped, "-" if absent. */
static void
cat_hdr(struct sb *sb, const struct http *hp, const char *name, size_t nlen)
{
    const struct http_hdr *h = NULL;
    char nm[128];

    if (hp->method.len > 0 && nlen < sizeof nm) {
        memcpy(nm, name, nlen);
        nm[nlen] = '\0';
        h = http_find(hp, nm);
    }
    if (h == NULL) {
        sb_cat(sb, "-");
        return;
    }
    for (size_t i = 0; i < h->val.len && i < ALOG_HDR_MAX; i++) {
        unsigned char c = (unsigned char)h->val.b[i];
        if (c == '"' || c == '\\' || c < 0x20 || c == 0x7f)
            sb_printf(sb, "\\x%02x", c);
        else
            sb_bcat(sb, &h->val.b[i], 1);
    }
}

static void
cat_url(struct sb *sb, const struct http *hp, bool path, bool query)
{
    size_t len = SRG_MIN(hp->url.len, (size_t)ALOG_URL_MAX);
    const char *q = memchr(hp->url.b, '?', len);
    size_t plen = q != NULL ? (size_t)(q - hp->url.b) : len;

    if (path)
        sb_bcat(sb, hp->url.b, plen);
    if (query)
        sb_bcat(sb, hp->url.b + plen, len - plen);
}

static const char *
proto_str(const struct http *hp)
{
    return (http_proto_name(hp->proto));
}

static double
t_total(const struct req *req)
{
    return (req->t_end - req->t_mono);
}

/*
 * The includes of an ESI page: "url:CACHE:status:ms" each, comma-separated,
 * "!" before a failed one, "+N" for those past the records kept; "-" for none.
 */
static void
esi_text(struct sb *sb, const struct esi_log *lg)
{
    if (lg == NULL || lg->total == 0) {
        sb_cat(sb, "-");
        return;
    }
    for (unsigned i = 0; i < lg->n; i++) {
        const struct esi_rec *r = &lg->rec[i];
        sb_printf(sb, "%s%s", i > 0 ? "," : "", r->failed ? "!" : "");
        /* From the page's markup: whatever would end the field or the list is escaped. */
        for (const char *u = r->url; *u != '\0'; u++) {
            unsigned char c = (unsigned char)*u;
            if (c <= 0x20 || c == '"' || c == '\\' || c == ',' || c == 0x7f)
                sb_printf(sb, "\\x%02x", c);
            else
                sb_bcat(sb, u, 1);
        }
        sb_printf(sb, ":%s:%u:%.1f", req_outcome_name(r->outcome), r->status,
                  (double)r->time * 1e3);
    }
    if (lg->total > lg->n)
        sb_printf(sb, ",+%u", lg->total - lg->n);
}

static void
run_op(const struct af_op *op, const struct req *req, struct sb *sb)
{
    const struct http *hp = req->http;
    char date[TIM_NCSA_LEN + 1];

    switch (op->kind) {
    case AF_LIT:
        sb_bcat(sb, op->arg, op->len);
        break;
    case AF_CLIENT:
        sb_cat(sb, req->sp->client_ip);
        break;
    case AF_DASH:
        sb_cat(sb, "-");
        break;
    case AF_TIME:
        tim_ncsa_date(req->t_start != 0 ? req->t_start : tim_real(), date);
        sb_cat(sb, date);
        break;
    case AF_REQLINE:
        if (hp->method.len == 0) {
            sb_cat(sb, "-");
            break;
        }
        sb_bcat(sb, hp->method.b, hp->method.len);
        sb_cat(sb, " ");
        cat_url(sb, hp, true, true);
        sb_cat(sb, " ");
        sb_cat(sb, proto_str(hp));
        break;
    case AF_METHOD:
        if (hp->method.len > 0)
            sb_bcat(sb, hp->method.b, hp->method.len);
        else
            sb_cat(sb, "-");
        break;
    case AF_PATH:
        if (hp->method.len > 0)
            cat_url(sb, hp, true, false);
        else
            sb_cat(sb, "-");
        break;
    case AF_QUERY:
        if (hp->method.len > 0)
            cat_url(sb, hp, false, true);
        break;
    case AF_PROTO:
        sb_cat(sb, hp->method.len > 0 ? proto_str(hp) : "-");
        break;
    case AF_STATUS:
        sb_uint(sb, req->status);
        break;
    case AF_BYTES_CLF:
        if (req->resp_bytes > 0)
            sb_uint(sb, req->resp_bytes);
        else
            sb_cat(sb, "-");
        break;
    case AF_BYTES:
        sb_uint(sb, req->resp_bytes);
        break;
    case AF_TIME_US:
        sb_printf(sb, "%.0f", t_total(req) * 1e6);
        break;
    case AF_TIME_MS:
        sb_printf(sb, "%.0f", t_total(req) * 1e3);
        break;
    case AF_TIME_S:
        sb_uint(sb, (unsigned long long)t_total(req));
        break;
    case AF_HDR:
        cat_hdr(sb, hp, op->arg, op->len);
        break;
    case AF_CACHE:
        sb_cat(sb, req_outcome_name(req->outcome));
        break;
    case AF_BACKEND:
        sb_cat(sb, req->be_name != NULL ? req->be_name : "-");
        break;
    case AF_TTFB_US:
        sb_printf(sb, "%.0f", (req->t_first - req->t_mono) * 1e6);
        break;
    case AF_PORT:
        sb_cat(sb, req->sp->client_port);
        break;
    case AF_RESTARTS:
        sb_uint(sb, req->restarts);
        break;
    case AF_RETRIES:
        sb_uint(sb, req->retries);
        break;
    case AF_HOOKS:
        rlog_hooks_cat(sb, req->hooks);
        break;
    case AF_ESI:
        esi_text(sb, req->esi_log);
        break;
    }
}

static void
esi_json(struct sb *sb, const struct esi_log *lg)
{
    if (lg == NULL || lg->total == 0)
        return;
    sb_printf(sb, ",\"esi_includes\":%u,\"esi_failed\":%u,\"esi\":[", lg->total, lg->failed);
    for (unsigned i = 0; i < lg->n; i++) {
        const struct esi_rec *r = &lg->rec[i];
        const char *c = req_outcome_name(r->outcome);
        sb_cat(sb, i > 0 ? ",{\"url\":" : "{\"url\":");
        rlog_json_str(sb, r->url, strlen(r->url));
        sb_cat(sb, ",\"cache\":");
        rlog_json_str(sb, c, strlen(c));
        sb_printf(sb, ",\"status\":%u,\"time_us\":%.0f,\"failed\":%s}", r->status,
                  (double)r->time * 1e6, r->failed ? "true" : "false");
    }
    sb_cat(sb, "]");
}

static void
json_key_str(struct sb *sb, const char *key, const char *s, size_t len)
{
    sb_printf(sb, ",\"%s\":", key);
    rlog_json_str(sb, s, len);
}

static void
json_key_hdr(struct sb *sb, const char *key, const struct http *hp, const char *name)
{
    const struct http_hdr *h = hp->method.len > 0 ? http_find(hp, name) : NULL;

    sb_printf(sb, ",\"%s\":", key);
    if (h == NULL)
        sb_cat(sb, "null");
    else
        rlog_json_str(sb, h->val.b, SRG_MIN(h->val.len, (size_t)ALOG_HDR_MAX));
}

static void
json_line(const struct req *req, struct sb *sb)
{
    const struct http *hp = req->http;
    const char *s;

    sb_cat(sb, "{\"time\":");
    rlog_json_time(sb, req->t_start != 0 ? req->t_start : tim_real());
    json_key_str(sb, "client", req->sp->client_ip, strlen(req->sp->client_ip));
    sb_printf(sb, ",\"port\":%s", req->sp->client_port[0] != '\0' ? req->sp->client_port : "0");
    if (hp->method.len > 0) {
        json_key_str(sb, "method", hp->method.b, hp->method.len);
        json_key_str(sb, "url", hp->url.b, SRG_MIN(hp->url.len, (size_t)ALOG_URL_MAX));
        sb_printf(sb, ",\"proto\":\"%s\"", proto_str(hp));
    } else {
        sb_cat(sb, ",\"method\":null,\"url\":null,\"proto\":null");
    }
    json_key_hdr(sb, "host", hp, "Host");
    sb_printf(sb, ",\"status\":%u,\"bytes\":%llu", req->status,
              (unsigned long long)req->resp_bytes);
    json_key_hdr(sb, "referer", hp, "Referer");
    json_key_hdr(sb, "user_agent", hp, "User-Agent");
    sb_printf(sb, ",\"duration_us\":%.0f,\"ttfb_us\":%.0f", t_total(req) * 1e6,
              (req->t_first - req->t_mono) * 1e6);
    s = req_outcome_name(req->outcome);
    json_key_str(sb, "cache", s, strlen(s));
    if (req->be_name != NULL)
        json_key_str(sb, "backend", req->be_name, strlen(req->be_name));
    else
        sb_cat(sb, ",\"backend\":null");
    sb_printf(sb, ",\"restarts\":%u,\"retries\":%u,\"hooks\":", req->restarts, req->retries);
    rlog_hooks_json(sb, req->hooks);
    esi_json(sb, req->esi_log);
    sb_cat(sb, "}");
}

static void
format_line(const struct af_prog *p, const struct req *req, struct sb *sb)
{
    if (p->json) {
        json_line(req, sb);
        return;
    }
    for (unsigned i = 0; i < p->n; i++)
        run_op(&p->op[i], req, sb);
}

int
alog_format_line(const char *format, const struct req *req, struct sb *sb, struct sb *err)
{
    struct af_prog *p;

    OBJ_CHECK(req, REQ_MAGIC);
    p = malloc(sizeof *p);
    AN(p);
    if (compile(p, format, err) != 0) {
        free(p);
        return (-1);
    }
    format_line(p, req, sb);
    free(p);
    return (0);
}

/*--------------------------------------------------------------------
 * Files and buffers.
 */

static void
slot_init(struct wrk *wrk)
{
    wrk->alog = alog_buf_new();
}

static void
slot_fini(struct wrk *wrk)
{
    alog_buf_free(&wrk->alog);
}

/* Between tasks at most once a millisecond; always before the worker sleeps. */
static void
slot_idle(struct wrk *wrk, enum wrk_moment when)
{
    if (when == WRK_BEFORE_SLEEP)
        alog_flush(wrk->alog);
    else
        alog_flush_soon(wrk->alog);
}

static const struct wrk_slot alog_slot = { "alog", slot_init, slot_fini, slot_idle };

int
alog_init(const char *path, const char *format, bool to_syslog, struct sb *err)
{
    wrk_slot_register(&alog_slot);
    alog_fmt = strdup(format != NULL ? format : "combined");
    AN(alog_fmt);
    if (compile(&alog_prog, alog_fmt, err) != 0)
        return (-1);
    alog_syslog = to_syslog;
    if (path == NULL || *path == '\0')
        return (0);
    alog_fd = open_alog(path);
    if (alog_fd < 0) {
        sb_printf(err, "access_log %s: %s", path, strerror(errno));
        return (-1);
    }
    alog_path = strdup(path);
    AN(alog_path);
    return (0);
}

void
alog_fini(void)
{
    if (alog_fd >= 0)
        close(alog_fd);
    if (alog_old_fd >= 0)
        close(alog_old_fd);
    alog_fd = alog_old_fd = -1;
    free(alog_path);
    alog_path = NULL;
    free(alog_fmt);
    alog_fmt = NULL;
    alog_syslog = false;
}

int
alog_reopen(void)
{
    int fd, old;

    if (alog_path == NULL)
        return (0);
    fd = open_alog(alog_path);
    if (fd < 0)
        return (-1);
    old = __atomic_exchange_n(&alog_fd, fd, __ATOMIC_ACQ_REL);
    /* The previous reopen's descriptor has had a whole SIGHUP interval to drain. */
    if (alog_old_fd >= 0)
        close(alog_old_fd);
    alog_old_fd = old;
    return (0);
}

bool
alog_enabled(void)
{
    return (alog_syslog || __atomic_load_n(&alog_fd, __ATOMIC_RELAXED) >= 0);
}

struct alog_buf *
alog_buf_new(void)
{
    struct alog_buf *ab;

    OBJ_NEW(ab, ALOG_BUF_MAGIC);
    return (ab);
}

void
alog_buf_free(struct alog_buf **abp)
{
    struct alog_buf *ab;

    OBJ_TAKE(ab, abp, ALOG_BUF_MAGIC);
    alog_flush(ab);
    OBJ_FREE(&ab);
}

void
alog_flush(struct alog_buf *ab)
{
    int fd;

    OBJ_CHECK(ab, ALOG_BUF_MAGIC);
    if (ab->len == 0)
        return;
    fd = __atomic_load_n(&alog_fd, __ATOMIC_ACQUIRE);
    if (fd >= 0)
        (void)!write(fd, ab->buf, ab->len);
    ab->len = 0;
    ab->t_flushed = tim_mono();
}

void
alog_flush_soon(struct alog_buf *ab)
{
    OBJ_CHECK(ab, ALOG_BUF_MAGIC);
    if (ab->len > 0 && tim_mono() - ab->t_flushed >= ALOG_FLUSH_GAP)
        alog_flush(ab);
}

void
alog_req(struct alog_buf *ab, const struct req *req)
{
    char line[ALOG_LINE_MAX];
    struct sb sb;
    double now;

    OBJ_CHECK(ab, ALOG_BUF_MAGIC);
    OBJ_CHECK(req, REQ_MAGIC);
    sb_init(&sb, line, sizeof line - 1);
    format_line(&alog_prog, req, &sb);
    if (!sb_ok(&sb))
        return; /* over ALOG_LINE_MAX though URL and headers are capped: a silly format */
    if (alog_syslog)
        log_syslog(LOG_INFO, sb.buf, sb.len);
    if (__atomic_load_n(&alog_fd, __ATOMIC_RELAXED) < 0)
        return;
    sb.buf[sb.len++] = '\n';
    now = tim_mono();
    if (ab->len + sb.len > sizeof ab->buf)
        alog_flush(ab);
    if (ab->len == 0)
        ab->t_first = now;
    memcpy(ab->buf + ab->len, sb.buf, sb.len);
    ab->len += sb.len;
    if (now - ab->t_first > ALOG_FLUSH_AGE)
        alog_flush(ab);
}
