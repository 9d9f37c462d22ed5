/*
 * Answering a request from the files: the checks in the order that keeps
 * source code in, then the response.
 *
 *   method      GET and HEAD, else 405 with Allow
 *   path        sfb_path_norm(): 400 / 414, never resolved
 *   deny list   every segment: 404, as if absent (nothing to learn)
 *   open        under the root only (sfb__openat): 404, 403
 *   directory   301 to the slash form, index files, listing or 403
 *   file        304, 206, 416 or 200, with validators and expiry, in the
 *               coding the client prefers (identity, a precompressed
 *               sibling, or a copy compressed once: sfb_zcache.c)
 *
 * The answer is a response for the request core to deliver (sfb_resp): a
 * status, field lines built in the caller's workspace, and where the body
 * is -- the open-file cache's copy of a small file, a listing, a
 * compressed copy, or a range of an open file (the file or a sibling),
 * which the deliverer sends with sendfile(2).  Nothing here writes to a
 * client.
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

#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/gz.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/sfb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/ws.h"

#include "sfb_priv.h"

#define SFB_PATH_MAX 4096
/* Entries a listing shows: a directory of a million files is no page to build per request. */
#define SFB_LIST_MAX 10000

static bool
is_method(const struct http *req, const char *m)
{
    return (req->method.len == strlen(m) && memcmp(req->method.b, m, req->method.len) == 0);
}

/* Field lines start with these on every answer. */
static void
head_start(struct sb *sb)
{
    char date[TIM_HTTP_DATE_LEN + 1];

    tim_http_date(tim_real(), date);
    /* sb_cat, not sb_printf, here and below: formatting was a tenth of a small file's CPU. */
    sb_cat(sb, "Date: ");
    sb_cat(sb, date);
    sb_cat(sb, "\r\nServer: surogat\r\n");
}

/* "name: value" and its CRLF; name ends in ": ". */
static void
field(struct sb *sb, const char *name, const char *value)
{
    sb_cat(sb, name);
    sb_cat(sb, value);
    sb_cat(sb, "\r\n");
}

/* r->fields from sb, or a 500 when the workspace ran out. */
static void
set_fields(struct sfb_resp *r, struct ws *ws, char *buf, struct sb *sb)
{
    if (!sb_ok(sb)) {
        ws_release(ws, 0);
        STAT_INC(ws_overflow);
        r->status = 500;
        r->error = true;
        r->fields = (struct txt){ "", 0 };
        return;
    }
    ws_release(ws, sb->len);
    r->fields = (struct txt){ buf, sb->len };
}

/* An error page; 405 says what is allowed. */
static void
fail(struct sfb_resp *r, unsigned status)
{
    r->status = status;
    r->error = true;
    r->body = false;
    r->fields = status == 405 ? TXT_LIT("Allow: GET, HEAD\r\n") : (struct txt){ "", 0 };
}

/*
 * The representation of a file a response sends: the file itself, a
 * precompressed sibling, or a compressed copy, with its validator and
 * size.  Ranges are honoured on the first two, which are files with
 * stable bytes, as nginx's gzip_static does; a copy compressed on the fly
 * is sent whole, as nginx's gzip filter does, so that no client resumes a
 * compressed download with identity bytes.
 */
struct variant {
    enum gz_coding coding;
    struct sfb_file *file;   /* the bytes, when from a file (f or a sibling) */
    struct sfb_zcopy *zcopy; /* the bytes, when a compressed copy */
    uint64_t size;
    char etag[80];
    bool ranges;
    bool vary; /* the answer depends on Accept-Encoding */
};

/* "mtime-size" made per coding: strong for a sibling's bytes, weak for a copy's. */
static void
variant_etag(struct variant *v, const char *etag, bool weak)
{
    size_t n = strlen(etag);

    SRG_ASSERT(n >= 2 && n + 8 < sizeof v->etag);
    snprintf(v->etag, sizeof v->etag, "%s%.*s-%s\"", weak ? "W/" : "", (int)(n - 1), etag,
             gz_coding_name(v->coding));
}

/* The sibling of f in coding c, if it can be opened and is still not older than f. */
static struct sfb_file *
sibling(struct sfb *sfb, const struct sfb_file *f, enum gz_coding c)
{
    char path[SFB_PATH_MAX + 8];
    struct sfb_file *s;
    const char *ext = sfb__sibling_ext(c);

    if (f->plen + strlen(ext) >= SFB_PATH_MAX)
        return (NULL);
    memcpy(path, f->path, f->plen);
    strcpy(path + f->plen, ext);
    if (sfb__file_get(sfb, path, f->plen + strlen(ext), &s) != SFB_O_FILE)
        return (NULL);
    if (s->mtime.tv_sec < f->mtime.tv_sec ||
        (s->mtime.tv_sec == f->mtime.tv_sec && s->mtime.tv_nsec < f->mtime.tv_nsec)) {
        sfb__file_put(sfb, &s);
        return (NULL);
    }
    return (s);
}

/* Which representation of f goes to this client. */
static void
choose(struct sfb *sfb, const struct http *req, struct sfb_file *f, struct variant *v)
{
    enum gz_coding formats[GZ_C__N];
    unsigned nformats, sibs, avail;
    struct gz_ae ae;
    struct gz_pick pk;

    memset(v, 0, sizeof *v);
    v->coding = GZ_C_IDENTITY;
    v->file = f;
    v->size = f->size;
    v->ranges = true;
    snprintf(v->etag, sizeof v->etag, "%s", f->etag);
    /* compress_formats is checked here, not when set: a bad list compresses nothing. */
    nformats = gz_formats_now(formats);
    sibs = sfb__siblings(sfb, f);
    avail = GZ_SET(GZ_C_IDENTITY) | sibs;
    if (par.sfb_compress_cache > 0 && sfb__compressible(f))
        for (unsigned i = 0; i < nformats; i++)
            avail |= GZ_SET(formats[i]);
    if (avail == GZ_SET(GZ_C_IDENTITY))
        return;
    v->vary = true;
    gz_ae_req(&ae, req);
    pk = gz_negotiate(&ae, avail, formats, nformats);
    if (pk.send == GZ_C_IDENTITY)
        return;
    if (sibs & GZ_SET(pk.send)) {
        struct sfb_file *s = sibling(sfb, f, pk.send);

        if (s != NULL) {
            STAT_INC(sfb_precompressed);
            v->coding = pk.send;
            v->file = s;
            v->size = s->size;
            variant_etag(v, s->etag, false);
            return;
        }
    }
    if (!(avail & ~sibs & GZ_SET(pk.send)))
        return; /* the sibling went away, and the type is not compressed on the fly */
    v->zcopy = sfb__zcopy_get(sfb, f, pk.send);
    if (v->zcopy == NULL)
        return; /* being made by another request, or not worth it: the file as it is */
    v->coding = pk.send;
    v->file = NULL;
    v->size = v->zcopy->len;
    v->ranges = false;
    variant_etag(v, f->etag, true);
}

/* Consumes *fp: it ends in r (held for the body) or released. */
static void
file_resp(const struct http *req, struct ws *ws, struct sfb *sfb, struct sfb_file **fp,
          struct sfb_resp *r)
{
    struct sfb_file *f = *fp;
    struct variant v;
    struct txt etag, lm = { f->lm, strlen(f->lm) };
    uint64_t first = 0, last;
    size_t room;
    char *buf;
    struct sb sb;

    *fp = NULL;
    choose(sfb, req, f, &v);
    etag = (struct txt){ v.etag, strlen(v.etag) };
    last = v.size > 0 ? v.size - 1 : 0;
    buf = ws_reserve_all(ws, &room);
    r->status = 200;
    r->len = v.size;
    if (http_not_modified(req, &etag, &lm)) {
        STAT_INC(sfb_not_modified);
        r->status = 304;
    } else if (v.ranges) {
        switch (http_range(req, &etag, &lm, v.size, &first, &last)) {
        case HTTP_RANGE_OK:
            r->status = 206;
            r->len = last - first + 1;
            break;
        case HTTP_RANGE_UNSATISFIABLE:
            r->status = 416;
            r->len = 0;
            break;
        case HTTP_RANGE_NONE:
            break;
        }
    }
    sb_init(&sb, buf, room);
    head_start(&sb);
    if (r->status == 200 || r->status == 206)
        field(&sb, "Content-Type: ", f->type);
    if (v.coding != GZ_C_IDENTITY && (r->status == 200 || r->status == 206))
        field(&sb, "Content-Encoding: ", gz_coding_name(v.coding));
    if (v.vary)
        sb_cat(&sb, "Vary: Accept-Encoding\r\n");
    if (r->status == 206)
        sb_printf(&sb, "Content-Range: bytes %llu-%llu/%llu\r\n", (unsigned long long)first,
                  (unsigned long long)last, (unsigned long long)v.size);
    if (r->status == 416)
        sb_printf(&sb, "Content-Range: bytes */%llu\r\n", (unsigned long long)v.size);
    field(&sb, "Last-Modified: ", f->lm);
    field(&sb, "ETag: ", v.etag);
    if (r->status != 304 && v.ranges)
        sb_cat(&sb, "Accept-Ranges: bytes\r\n");
    if (f->expires >= 0) {
        char exp[TIM_HTTP_DATE_LEN + 1];

        tim_http_date(tim_real() + (double)f->expires, exp);
        sb_printf(&sb, "Cache-Control: max-age=%ld\r\nExpires: %s\r\n", f->expires, exp);
    }
    set_fields(r, ws, buf, &sb);
    if (r->error) {
        if (v.file != NULL && v.file != f)
            sfb__file_put(sfb, &v.file);
        if (v.zcopy != NULL)
            sfb__zcopy_put(sfb, &v.zcopy);
        sfb__file_put(sfb, &f);
        return;
    }
    r->body = r->status != 304;
    r->off = (off_t)first;
    if (v.zcopy != NULL) {
        r->mem = v.zcopy->data;
        r->zcopy = v.zcopy;
        r->file = f; /* unused for the body, held to the end like the others */
        return;
    }
    if (r->len > 0 && v.file->mem != NULL)
        r->mem = v.file->mem + first;
    else
        r->fd = v.file->fd;
    r->file = v.file;
    if (v.file != f)
        r->base = f;
}

static void
redirect_resp(const struct http *req, struct ws *ws, const char *path, struct sfb_resp *r)
{
    const char *q = memchr(req->url.b, '?', req->url.len);
    size_t room;
    char *buf = ws_reserve_all(ws, &room);
    struct sb sb;

    sb_init(&sb, buf, room);
    head_start(&sb);
    /* Re-encoded from the normalised path, never the raw target: "//host" is no redirect. */
    sb_cat(&sb, "Location: ");
    sfb__url_encode(&sb, path);
    sb_cat(&sb, "/");
    if (q != NULL)
        sb_bcat(&sb, q, (size_t)(req->url.b + req->url.len - q));
    sb_cat(&sb, "\r\n");
    r->status = 301;
    r->body = true;
    r->len = 0;
    set_fields(r, ws, buf, &sb);
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
            sb_html_escape(&sb, path);
            sb_cat(&sb, "</title></head>\n<body><h1>Index of ");
            sb_html_escape(&sb, path);
            sb_cat(&sb, "</h1><ul>\n");
            if (strcmp(path, "/") != 0)
                sb_cat(&sb, "<li><a href=\"../\">../</a></li>\n");
        } else if (i <= n) {
            sb_cat(&sb, "<li><a href=\"");
            sfb__url_encode(&sb, names[i - 1]);
            sb_cat(&sb, "\">");
            sb_html_escape(&sb, names[i - 1]);
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
listing_resp(struct ws *ws, const struct sfb *sfb, const char *path, struct sfb_resp *r)
{
    size_t room, len = 0;
    char *page = NULL, *buf;
    struct sb sb;

    if (build_listing(sfb, path, &page, &len) != 0) {
        STAT_INC(sfb_forbidden);
        fail(r, 403);
        return;
    }
    buf = ws_reserve_all(ws, &room);
    sb_init(&sb, buf, room);
    head_start(&sb);
    sb_cat(&sb, "Content-Type: text/html; charset=utf-8\r\nCache-Control: no-cache\r\n");
    r->status = 200;
    r->body = true;
    r->len = len;
    r->mem = page;
    r->page = page;
    set_fields(r, ws, buf, &sb);
}

/* A file or directory that could not be served. */
static void
fail_open(struct sfb_resp *r, enum sfb__open o)
{
    switch (o) {
    case SFB_O_NOTFOUND:
        STAT_INC(sfb_not_found);
        fail(r, 404);
        break;
    case SFB_O_DENIED:
        STAT_INC(sfb_denied);
        fail(r, 404);
        break;
    case SFB_O_FORBIDDEN:
    case SFB_O_DIR:
        STAT_INC(sfb_forbidden);
        fail(r, 403);
        break;
    case SFB_O_ERROR:
    case SFB_O_FILE:
        fail(r, 503);
        break;
    }
}

/* A directory asked for with its slash: an index file, else the listing, else 403. */
static void
serve_dir(const struct http *req, struct ws *ws, struct sfb *sfb, char *path, size_t plen,
          struct sfb_resp *r)
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
            file_resp(req, ws, sfb, &f, r);
            return;
        }
        if (o == SFB_O_ERROR) {
            fail_open(r, o);
            return;
        }
    }
    if (sfb->listing) {
        listing_resp(ws, sfb, path, r);
        return;
    }
    fail_open(r, SFB_O_DIR);
}

void
sfb_answer(struct sfb *sfb, const struct http *req, struct ws *ws, struct sfb_resp *r)
{
    struct sfb_file *f;
    enum sfb__open o;
    size_t plen;
    char *path;

    OBJ_CHECK(sfb, SFB_MAGIC);
    OBJ_CHECK(req, HTTP_MAGIC);
    memset(r, 0, sizeof *r);
    r->fd = -1;
    STAT_INC(sfb_req);
    if (!is_method(req, "GET") && !is_method(req, "HEAD")) {
        fail(r, 405);
        return;
    }
    path = ws_alloc(ws, SFB_PATH_MAX);
    if (path == NULL) {
        STAT_INC(ws_overflow);
        fail(r, 500);
        return;
    }
    switch (sfb_path_norm(req->url.b, req->url.len, path, SFB_PATH_MAX, &plen)) {
    case SFB_PATH_OK:
        break;
    case SFB_PATH_TOO_LONG:
        STAT_INC(sfb_bad_path);
        fail(r, 414);
        return;
    case SFB_PATH_BAD:
    case SFB_PATH_TRAVERSAL:
        STAT_INC(sfb_bad_path);
        fail(r, 400);
        return;
    }
    if (sfb_denied(sfb, path)) {
        /* As if it did not exist: a 403 would confirm that it does. */
        STAT_INC(sfb_denied);
        fail(r, 404);
    } else if ((o = sfb__file_get(sfb, path, plen, &f)) == SFB_O_FILE) {
        /* "file/" never gets here: the kernel answers ENOTDIR, a 404. */
        file_resp(req, ws, sfb, &f, r);
    } else if (o == SFB_O_DIR && path[plen - 1] != '/') {
        redirect_resp(req, ws, path, r);
    } else if (o == SFB_O_DIR) {
        serve_dir(req, ws, sfb, path, plen, r);
    } else {
        fail_open(r, o);
    }
}

void
sfb_resp_done(struct sfb *sfb, struct sfb_resp *r)
{
    OBJ_CHECK(sfb, SFB_MAGIC);
    if (r->file != NULL)
        sfb__file_put(sfb, &r->file);
    if (r->base != NULL)
        sfb__file_put(sfb, &r->base);
    if (r->zcopy != NULL)
        sfb__zcopy_put(sfb, &r->zcopy);
    free(r->page);
    r->page = NULL;
}

static void
be_answer(void *priv, const struct http *req, struct ws *ws, struct sfb_resp *r)
{
    sfb_answer(priv, req, ws, r);
}

static void
be_done(void *priv, struct sfb_resp *r)
{
    sfb_resp_done(priv, r);
}

const struct be_ops sfb_be_ops = { "static", be_answer, be_done };
