/*
 * Fuzz the HTTP/2 transport through its real glue: frames after the
 * connection preface go into a connection (nghttp2 and h2t, the header
 * rules, the limits, the output buffer) in pieces whose sizes the input's
 * first byte chooses; the requests it makes are answered through h2t_ops
 * by a responder in place of req_serve() (bodies read, heads, bodies of
 * known and unknown length, writes after writable(), aborts, interim
 * responses), and what goes out is read back and checked to be frames.
 * Waits that would block are cut to nothing (h2_window_timeout,
 * timeout_idle), so a stalled stream ends at once.  Invariants: nothing
 * crashes or leaks; output is well-framed.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tp.h"
#include "surogat/wrk.h"
#include "src/proto/h2t_priv.h"

#include "fuzz.h"

static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
static struct wrk wrk;
static char out[64 * 1024]; /* what the server wrote, not yet parsed */
static size_t out_len;
static bool out_goaway;

static enum req_run
respond(struct req *req)
{
    static const char body[3000] = { 'x' };
    struct tp_head h = { .status = 200, .nblock = 1, .body = true };
    struct iovec iov[2];
    size_t n = req->http->url.len;
    const char *d;
    ssize_t k;

    req->head_only = req->http->method.len == 4 && memcmp(req->http->method.b, "HEAD", 4) == 0;
    h.block[0] = TXT_LIT("Content-Type: text/plain\r\n");
    while ((k = req_body_next(req, &d)) > 0)
        FUZZ_CHECK(d != NULL);
    if (n % 7 == 1) {
        struct txt link = TXT_LIT("Link: </a>; rel=preload\r\n");
        (void)req->tp->interim(req, 103, &link);
    }
    h.len = n % 3 == 0 ? TP_LEN_UNKNOWN : n % 3 == 1 ? sizeof body : 0;
    if (req->tp->head(req, &h) != 0)
        return (REQ_RUN_DONE);
    if (n % 5 == 4 && !req->tp->abort(req)) {
        /* dropped before anything went out: answer anew */
        h.status = 503;
        h.len = 0;
        if (req->tp->head(req, &h) != 0)
            return (REQ_RUN_DONE);
    }
    iov[0] = (struct iovec){ (void *)(uintptr_t)body, sizeof body / 2 };
    iov[1] = (struct iovec){ (void *)(uintptr_t)(body + sizeof body / 2), sizeof body / 2 };
    if (n % 13 == 6)
        (void)req->tp->writable(req); /* a promised write: what the windows leave is kept aside */
    if (h.len != 0 && req->tp->body(req, iov, 2) != 0)
        return (REQ_RUN_DONE);
    if (n % 11 != 10) /* now and then, a response that never ends */
        (void)req->tp->end(req);
    return (REQ_RUN_DONE);
}

/* Frames out are whole and sane: a 9-byte header, a length within 16384. */
static void
check_output(int fd)
{
    ssize_t n;
    size_t i;

    while ((n = read(fd, out + out_len, sizeof out - out_len)) > 0) {
        out_len += (size_t)n;
        for (i = 0; i + 9 <= out_len;) {
            size_t len = ((size_t)(uint8_t)out[i] << 16) | ((size_t)(uint8_t)out[i + 1] << 8) |
                         (uint8_t)out[i + 2];
            FUZZ_CHECK(len <= 16384);
            FUZZ_CHECK((uint8_t)out[i + 3] <= 9); /* we send no extension frames */
            if (i + 9 + len > out_len)
                break;
            if (out[i + 3] == 7)
                out_goaway = true;
            i += 9 + len;
        }
        memmove(out, out + i, out_len - i);
        out_len -= i;
    }
}

static void
init_once(void)
{
    static bool done;

    if (done)
        return;
    done = true;
    par_init();
    AZ(stat_init());
    AZ(h2t_init());
    h2t__serve = respond;
    par.h2_window_timeout = 0; /* below the parameter's minimum: no stall waits here */
    par.timeout_idle = 0;
    wrk.magic = WRK_MAGIC;
    wrk_buffers_fit(&wrk);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sess *sp;
    struct h2c *c;
    uint32_t seed;
    int fds[2];

    init_once();
    if (size < 1)
        return (0);
    seed = data[0] | 1u;
    data++;
    size--;
    AZ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds));
    sp = calloc(1, sizeof *sp);
    AN(sp);
    sp->magic = SESS_MAGIC;
    sp->fd = fds[0];
    out_len = 0;
    out_goaway = false;
    c = h2t__test_conn(sp);
    h2t__test_feed(c, &wrk, preface, sizeof preface - 1);
    check_output(fds[1]);
    while (size > 0 && !h2t__test_dead(c)) {
        size_t piece = seed & 1 ? size : 1 + fuzz_rand(&seed) % (size < 4096 ? size : 4096);
        if (piece > size)
            piece = size;
        h2t__test_feed(c, &wrk, data, piece);
        check_output(fds[1]);
        data += piece;
        size -= piece;
    }
    h2t__test_close(c, &wrk); /* closes sp and fds[0] */
    check_output(fds[1]);
    close(fds[1]);
    return (0);
}
