/*
 * Answering a request from the files: the checks in the order that keeps
 * source code in, then the response.
 *
 *   method      GET and HEAD, else 405 with Allow
 *   path        sfb_path_norm(): 400 / 414, never resolved
 *   deny list   every segment: 404, as if absent (nothing to learn)
 *   open        under the root only (sfb__openat): 404, 403
 *   directory   301 to the slash form, index files, listing or 403
 *   file        304, 206, 416 or 200, with validators and expiry
 *
 * Runs on a worker, blocking on the client with send_timeout per write.
 * The head is built in the workspace; small bodies go from the open-file
 * cache's copy in the same writev(2), larger ones with sendfile(2) in
 * rounds of SFB_SENDFILE_ROUND bytes, each with its own deadline, so a
 * slow client reading a large file is not cut while it makes progress.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/h1.h"
#include "surogat/http.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/sfb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

#include "sfb_priv.h"

#define SFB_PATH_MAX       4096
#define SFB_SENDFILE_ROUND (1024 * 1024)
/* Entries a listing shows: a directory of a million files is no page to build per request. */
#define SFB_LIST_MAX 10000

static bool
is_method(const struct req *req, const char *m)
{
    return (req->http->method.len == strlen(m) &&
            memcmp(req->http->method.b, m, req->http->method.len) == 0);
}

static void
head_start(struct req *req, struct sb *sb, unsigned status)
{
    char date[TIM_HTTP_DATE_LEN + 1];

    tim_http_date(tim_real(), date);
    req->status = status;
    sb_printf(sb, "HTTP/1.1 %u %s\r\nDate: %s\r\nServer: surogat\r\n", status, http_reason(status),
              date);
}

static void
head_end(struct req *req, struct sb *sb)
{
    if (req->close || req->want_close || sess_draining())
        sb_cat(sb, "Connection: close\r\n");
    else if (req->keepalive_10)
        sb_cat(sb, "Connection: keep-alive\r\n");
    sb_cat(sb, "\r\n");
}

/*
 * The deliver hook on a finished head (*hp, *hlen in workspace): parsed
 * with room for more fields, run, serialised again.  0, or -1 when the
 * request was answered otherwise (synth, policy error, workspace full).
 */
static int
deliver_hook(struct req *req, char **hp, size_t *hlen)
{
    struct pol_synth syn;
    struct h1_limits lim;
    struct http_hdr *hdrs;
    struct http h;
    unsigned nhdr = 1;
    size_t used, room;
    struct sb sb;
    char *out;

    for (size_t i = 0; i < *hlen; i++)
        nhdr += (*hp)[i] == '\n';
    lim = (struct h1_limits){ *hlen + 1, *hlen + 1, nhdr };
    hdrs = ws_alloc(&req->wrk->ws, (nhdr + POL_HDR_ROOM) * sizeof *hdrs);
    if (hdrs == NULL)
        goto overflow;
    http_init(&h, hdrs, nhdr + POL_HDR_ROOM);
    if (h1_parse_response(*hp, *hlen, &lim, &h, &used) != H1_DONE)
        goto overflow;
    switch (pol_deliver(req, &h, 0, &syn)) {
    case POL_DELIVER:
        break;
    case POL_SYNTH:
        (void)req_synth_msg(req, syn.status, NULL, syn.reason);
        return (-1);
    default:
        (void)req_synth_msg(req, 503, NULL, "policy error");
        return (-1);
    }
    out = ws_reserve_all(&req->wrk->ws, &room);
    sb_init(&sb, out, room);
    h1_write_response(&sb, &h);
    if (!sb_ok(&sb)) {
        ws_release(&req->wrk->ws, 0);
        goto overflow;
    }
    ws_release(&req->wrk->ws, sb.len);
    req->status = h.status;
    *hp = out;
    *hlen = sb.len;
    return (0);
overflow:
    STAT_INC(ws_overflow);
    (void)req_synth_msg(req, 500, NULL, "workspace_client exhausted");
    return (-1);
}

/*
 * Send a head built by `build` into the workspace, through the deliver
 * hook, followed by body bytes from memory (body may be NULL).  0 when
 * the head went out, -1 when it did not (answered otherwise, or the
 * client is gone: req->close is then set).
 */
typedef void head_f(struct req *req, struct sb *sb, const void *priv);

static int
send_head(struct req *req, head_f *build, const void *priv, const char *body, size_t blen)
{
    struct iovec iov[2];
    size_t room;
    struct sb sb;
    char *head;

    head = ws_reserve_all(&req->wrk->ws, &room);
    if (room > 0) {
        sb_init(&sb, head, room);
        build(req, &sb, priv);
        head_end(req, &sb);
    }
    if (room == 0 || !sb_ok(&sb)) {
        ws_release(&req->wrk->ws, 0);
        STAT_INC(ws_overflow);
        (void)req_synth_msg(req, 500, NULL, "workspace_client exhausted");
        return (-1);
    }
    ws_release(&req->wrk->ws, sb.len);
    room = sb.len;
    if (pol_active() && pol_has_deliver() && deliver_hook(req, &head, &room) != 0)
        return (-1);
    iov[0].iov_base = head;
    iov[0].iov_len = room;
    iov[1].iov_base = (void *)(uintptr_t)body;
    iov[1].iov_len = req->head_only || body == NULL ? 0 : blen;
    req->t_first = tim_mono();
    if (sess_writev(req->sp, iov, 2, req_send_deadline(req)) != 0) {
        req->close = true;
        return (-1);
    }
    STAT_ADD(resp_head_bytes, room);
    req->resp_bytes = req->head_only || body == NULL ? 0 : blen;
    STAT_ADD(resp_body_bytes, req->resp_bytes);
    return (0);
}

/* An error page; 405 says what is allowed. */
static void
fail(struct req *req, unsigned status)
{
    (void)req_synth(req, status, status == 405 ? "Allow: GET, HEAD\r\n" : NULL);
}

/* What a file's response is: decided before the head is built. */
struct fresp {
    const struct sfb_file *f;
    int range; /* 1 206, 0 416, -1 200 (http_range()); 2 for a 304 */
    uint64_t first, last;
    uint64_t len; /* body bytes: Content-Length */
};

static void
file_head(struct req *req, struct sb *sb, const void *priv)
{
    const struct fresp *r = priv;
    const struct sfb_file *f = r->f;
    unsigned status = r->range == 2 ? 304 : r->range == 1 ? 206 : r->range == 0 ? 416 : 200;

    head_start(req, sb, status);
    if (status == 200 || status == 206)
        sb_printf(sb, "Content-Type: %s\r\n", f->type);
    if (status == 206)
        sb_printf(sb, "Content-Range: bytes %llu-%llu/%llu\r\n", (unsigned long long)r->first,
                  (unsigned long long)r->last, (unsigned long long)f->size);
    if (status == 416)
        sb_printf(sb, "Content-Range: bytes */%llu\r\nContent-Length: 0\r\n",
                  (unsigned long long)f->size);
    else if (status != 304)
        sb_printf(sb, "Content-Length: %llu\r\n", (unsigned long long)r->len);
    sb_printf(sb, "Last-Modified: %s\r\nETag: %s\r\n", f->lm, f->etag);
    if (status != 304)
        sb_cat(sb, "Accept-Ranges: bytes\r\n");
    if (f->expires >= 0) {
        char exp[TIM_HTTP_DATE_LEN + 1];

        tim_http_date(tim_real() + (double)f->expires, exp);
        sb_printf(sb, "Cache-Control: max-age=%ld\r\nExpires: %s\r\n", f->expires, exp);
    }
}

static void
send_file(struct req *req, struct sfb_file *f)
{
    struct txt etag = { f->etag, strlen(f->etag) }, lm = { f->lm, strlen(f->lm) };
    struct fresp r = { f, -1, 0, f->size > 0 ? f->size - 1 : 0, f->size };
    const char *body = NULL;
    uint64_t len;
    bool corked;

    if (http_not_modified(req->http, &etag, &lm)) {
        STAT_INC(sfb_not_modified);
        r.range = 2;
    } else {
        switch (http_range(req->http, &etag, &lm, f->size, &r.first, &r.last)) {
        case HTTP_RANGE_OK:
            r.range = 1;
            break;
        case HTTP_RANGE_UNSATISFIABLE:
            r.range = 0;
            break;
        case HTTP_RANGE_NONE:
            break;
        }
    }
    if (r.range == 1)
        r.len = r.last - r.first + 1;
    else if (r.range == 0 || r.range == 2)
        r.len = 0;
    len = r.len;
    if (f->mem != NULL && len > 0)
        body = f->mem + r.first;
    corked = body == NULL && len > 0 && !req->head_only;
    if (corked)
        sess_cork(req->sp, true);
    if (send_head(req, file_head, &r, body, len) != 0 || !corked) {
        if (corked)
            sess_cork(req->sp, false);
        return;
    }
    for (uint64_t off = r.first, left = len; left > 0;) {
        size_t n = left > SFB_SENDFILE_ROUND ? SFB_SENDFILE_ROUND : (size_t)left;

        if (sess_sendfile(req->sp, f->fd, (off_t)off, n, req_send_deadline(req)) != 0) {
            /* The head promised a length: only a cut connection says it was not kept. */
            req->abort = true;
            return;
        }
        off += n;
        left -= n;
        req->resp_bytes += n;
        STAT_ADD(resp_body_bytes, n);
        STAT_ADD(sfb_sendfile_bytes, n);
    }
    sess_cork(req->sp, false);
}

static void
redirect_head(struct req *req, struct sb *sb, const void *priv)
{
    const char *path = priv, *q = memchr(req->http->url.b, '?', req->http->url.len);

    head_start(req, sb, 301);
    /* Re-encoded from the normalised path, never the raw target: "//host" is no redirect. */
    sb_cat(sb, "Location: ");
    sfb__url_encode(sb, path);
    sb_cat(sb, "/");
    if (q != NULL)
        sb_bcat(sb, q, (size_t)(req->http->url.b + req->http->url.len - q));
    sb_cat(sb, "\r\nContent-Length: 0\r\n");
}

static void
html_escape(struct sb *sb, const char *s)
{
    for (; *s != '\0'; s++) {
        switch (*s) {
        case '<':
            sb_cat(sb, "&lt;");
            break;
        case '>':
            sb_cat(sb, "&gt;");
            break;
        case '&':
            sb_cat(sb, "&amp;");
            break;
        case '"':
            sb_cat(sb, "&quot;");
            break;
        case '\'':
            sb_cat(sb, "&#39;");
            break;
        default:
            sb_bcat(sb, s, 1);
        }
    }
}

static int
name_cmp(const void *a, const void *b)
{
    return (strcmp(*(char *const *)a, *(char *const *)b));
}

/*
 * Whether a directory entry may be listed: not denied, and its link leads
 * back to it through the normaliser (no control bytes, valid UTF-8).
 */
static bool
listable(const struct sfb *sfb, const char *name)
{
    char enc[1024], back[1024];
    struct sb sb;
    size_t n;

    if (sfb_denied(sfb, name))
        return (false);
    sb_init(&sb, enc, sizeof enc);
    sb_cat(&sb, "/");
    sfb__url_encode(&sb, name);
    return (sb_ok(&sb) && sfb_path_norm(enc, sb.len, back, sizeof back, &n) == SFB_PATH_OK &&
            strcmp(back + 1, name) == 0);
}

/* The listing of directory path (ending in '/') as an HTML page in *page (malloc'd). */
static int
build_listing(const struct sfb *sfb, const char *path, char **page, size_t *plen)
{
    char **names = NULL, line[2048];
    size_t n = 0, cap = 0;
    struct dirent *de;
    FILE *m;
    DIR *d;
    int fd;

    fd = sfb__openat(sfb, path, O_DIRECTORY);
    if (fd < 0 || (d = fdopendir(fd)) == NULL) {
        if (fd >= 0)
            close(fd);
        return (-1);
    }
    while ((de = readdir(d)) != NULL && n < SFB_LIST_MAX) {
        struct stat st;

        if (!listable(sfb, de->d_name) ||
            fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (n == cap) {
            cap = cap == 0 ? 64 : cap * 2;
            names = realloc(names, cap * sizeof *names);
            AN(names);
        }
        /* A directory's name carries its slash, so it sorts and links as one. */
        AN(asprintf(&names[n++], "%s%s", de->d_name, S_ISDIR(st.st_mode) ? "/" : "") > 0);
    }
    closedir(d);
    qsort(names, n, sizeof *names, name_cmp);
    m = open_memstream(page, plen);
    AN(m);
    for (size_t i = 0; i <= n + 1; i++) {
        struct sb sb;

        sb_init(&sb, line, sizeof line);
        if (i == 0) {
            sb_cat(&sb, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of ");
            html_escape(&sb, path);
            sb_cat(&sb, "</title></head>\n<body><h1>Index of ");
            html_escape(&sb, path);
            sb_cat(&sb, "</h1><ul>\n");
            if (strcmp(path, "/") != 0)
                sb_cat(&sb, "<li><a href=\"../\">../</a></li>\n");
        } else if (i <= n) {
            sb_cat(&sb, "<li><a href=\"");
            sfb__url_encode(&sb, names[i - 1]);
            sb_cat(&sb, "\">");
            html_escape(&sb, names[i - 1]);
            sb_cat(&sb, "</a></li>\n");
            free(names[i - 1]);
        } else {
            sb_cat(&sb, "</ul></body></html>\n");
        }
        if (sb_ok(&sb))
            fwrite(line, 1, sb.len, m);
    }
    free(names);
    AZ(fclose(m));
    return (0);
}

static void
listing_head(struct req *req, struct sb *sb, const void *priv)
{
    head_start(req, sb, 200);
    sb_printf(sb,
              "Content-Type: text/html; charset=utf-8\r\nContent-Length: %zu\r\n"
              "Cache-Control: no-cache\r\n",
              *(const size_t *)priv);
}

static void
send_listing(struct req *req, const struct sfb *sfb, const char *path)
{
    char *page = NULL;
    size_t len = 0;

    if (build_listing(sfb, path, &page, &len) != 0) {
        STAT_INC(sfb_forbidden);
        fail(req, 403);
        return;
    }
    (void)send_head(req, listing_head, &len, page, len);
    free(page);
}

/* A file or directory that could not be served. */
static void
fail_open(struct req *req, enum sfb__open o)
{
    switch (o) {
    case SFB_O_NOTFOUND:
        STAT_INC(sfb_not_found);
        fail(req, 404);
        break;
    case SFB_O_DENIED:
        STAT_INC(sfb_denied);
        fail(req, 404);
        break;
    case SFB_O_FORBIDDEN:
    case SFB_O_DIR:
        STAT_INC(sfb_forbidden);
        fail(req, 403);
        break;
    case SFB_O_ERROR:
    case SFB_O_FILE:
        fail(req, 503);
        break;
    }
}

/* A directory asked for with its slash: an index file, else the listing, else 403. */
static void
serve_dir(struct req *req, struct sfb *sfb, char *path, size_t plen)
{
    struct sfb_file *f;
    enum sfb__open o;

    for (unsigned i = 0; i < sfb->nindex; i++) {
        size_t il = strlen(sfb->index[i]);

        if (plen + il >= SFB_PATH_MAX || sfb_denied(sfb, sfb->index[i]))
            continue;
        memcpy(path + plen, sfb->index[i], il + 1);
        o = sfb__file_get(sfb, path, plen + il, &f);
        path[plen] = '\0';
        if (o == SFB_O_FILE) {
            send_file(req, f);
            sfb__file_put(sfb, &f);
            return;
        }
        if (o == SFB_O_ERROR) {
            fail_open(req, o);
            return;
        }
    }
    if (sfb->listing) {
        send_listing(req, sfb, path);
        return;
    }
    fail_open(req, SFB_O_DIR);
}

void
sfb_deliver(struct req *req, struct sfb *sfb)
{
    struct sfb_file *f;
    enum sfb__open o;
    size_t plen;
    char *path;

    OBJ_CHECK(req, REQ_MAGIC);
    OBJ_CHECK(sfb, SFB_MAGIC);
    STAT_INC(sfb_req);
    if (!is_method(req, "GET") && !is_method(req, "HEAD")) {
        fail(req, 405);
        req->outcome = REQ_O_STATIC;
        return;
    }
    path = ws_alloc(&req->wrk->ws, SFB_PATH_MAX);
    if (path == NULL) {
        STAT_INC(ws_overflow);
        (void)req_synth_msg(req, 500, NULL, "workspace_client exhausted");
        req->outcome = REQ_O_STATIC;
        return;
    }
    switch (sfb_path_norm(req->http->url.b, req->http->url.len, path, SFB_PATH_MAX, &plen)) {
    case SFB_PATH_OK:
        break;
    case SFB_PATH_TOO_LONG:
        STAT_INC(sfb_bad_path);
        fail(req, 414);
        req->outcome = REQ_O_STATIC;
        return;
    case SFB_PATH_BAD:
    case SFB_PATH_TRAVERSAL:
        STAT_INC(sfb_bad_path);
        fail(req, 400);
        req->outcome = REQ_O_STATIC;
        return;
    }
    if (sfb_denied(sfb, path)) {
        /* As if it did not exist: a 403 would confirm that it does. */
        STAT_INC(sfb_denied);
        fail(req, 404);
    } else if ((o = sfb__file_get(sfb, path, plen, &f)) == SFB_O_FILE) {
        /* "file/" never gets here: the kernel answers ENOTDIR, a 404. */
        send_file(req, f);
        sfb__file_put(sfb, &f);
    } else if (o == SFB_O_DIR && path[plen - 1] != '/') {
        (void)send_head(req, redirect_head, path, NULL, 0);
    } else if (o == SFB_O_DIR) {
        serve_dir(req, sfb, path, plen);
    } else {
        fail_open(req, o);
    }
    req->outcome = REQ_O_STATIC;
}
