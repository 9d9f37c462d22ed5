/*
 * The access log.  Each worker formats its lines into its own buffer and
 * appends the buffer with one write(2) on an O_APPEND descriptor when it
 * fills, when it is a second old, or when the worker goes idle.  A reopen
 * (SIGHUP) swaps the descriptor; writers read it once per write, and the
 * old one is closed only after a grace period so that a write in flight
 * never lands on a recycled descriptor number.
 */
#include "config.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "surogat/alog.h"
#include "surogat/defs.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/tim.h"

#define ALOG_BUF_SIZE (32 * 1024)
#define ALOG_LINE_MAX 4096
#define ALOG_FLUSH_AGE 1.0 /* seconds a line may wait in a buffer */

struct alog_buf {
    unsigned magic;
#define ALOG_BUF_MAGIC 0x6e2a91d4
    size_t len;
    double t_first; /* tim_mono() of the oldest buffered line */
    char buf[ALOG_BUF_SIZE];
};

static int alog_fd = -1;
static int alog_old_fd = -1;
static char *alog_path;

static int
open_alog(const char *path)
{
    return (open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
}

int
alog_init(const char *path)
{
    if (path == NULL || *path == '\0')
        return (0);
    alog_fd = open_alog(path);
    if (alog_fd < 0)
        return (-1);
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
    return (__atomic_load_n(&alog_fd, __ATOMIC_RELAXED) >= 0);
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
}

/* A header value for the log: quotes and control bytes escaped, "-" if absent. */
static void
cat_quoted_hdr(struct sb *sb, const struct http *hp, const char *name)
{
    const struct http_hdr *h = http_find(hp, name);

    sb_cat(sb, "\"");
    if (h == NULL) {
        sb_cat(sb, "-");
    } else {
        for (size_t i = 0; i < h->val.len; i++) {
            unsigned char c = (unsigned char)h->val.b[i];
            if (c == '"' || c == '\\' || c < 0x20 || c == 0x7f)
                sb_printf(sb, "\\x%02x", c);
            else
                sb_bcat(sb, &h->val.b[i], 1);
        }
    }
    sb_cat(sb, "\"");
}

void
alog_req(struct alog_buf *ab, const struct req *req)
{
    char line[ALOG_LINE_MAX], date[TIM_NCSA_LEN + 1];
    const struct http *hp = req->http;
    struct sb sb;
    double now;

    OBJ_CHECK(ab, ALOG_BUF_MAGIC);
    OBJ_CHECK(req, REQ_MAGIC);
    sb_init(&sb, line, sizeof line - 1);
    tim_ncsa_date(req->t_start != 0 ? req->t_start : tim_real(), date);
    sb_printf(&sb, "%s - - [%s] \"", req->sp->client_ip, date);
    if (hp->method.len > 0) {
        sb_bcat(&sb, hp->method.b, hp->method.len);
        sb_cat(&sb, " ");
        sb_bcat(&sb, hp->url.b, hp->url.len > 1024 ? 1024 : hp->url.len);
        sb_cat(&sb, hp->proto == 10 ? " HTTP/1.0" : " HTTP/1.1");
    } else {
        sb_cat(&sb, "-");
    }
    sb_printf(&sb, "\" %u ", req->status);
    if (req->resp_bytes > 0)
        sb_uint(&sb, req->resp_bytes);
    else
        sb_cat(&sb, "-");
    sb_cat(&sb, " ");
    cat_quoted_hdr(&sb, hp, "Referer");
    sb_cat(&sb, " ");
    cat_quoted_hdr(&sb, hp, "User-Agent");
    sb_printf(&sb, " %.0f %.0f %s %s", (req->t_end - req->t_mono) * 1e6,
              (req->t_first - req->t_mono) * 1e6, req->be_name != NULL ? req->be_name : "-",
              req->cache != NULL ? req->cache : "-");
    if (!sb_ok(&sb))
        return; /* a line over ALOG_LINE_MAX: the URL was capped, so headers are abusive */
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
