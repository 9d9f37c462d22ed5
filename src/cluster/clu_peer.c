/*
 * Messages between members (the format: clu_priv.h): sending one and
 * reading its answer, the fan-out of an invalidation to every member,
 * and serving one received.
 *
 * A message goes on a new connection to the member's backend (its pool,
 * its connect timeout, its PROXY header if it has one), closed after the
 * answer, which is read to the end of the connection: messages are rare
 * (invalidations, retries, a sync at start) and a connection of their
 * own keeps them from ever riding behind a slow fetch.  The fan-out
 * sends to the members one after the other; a member whose probe says
 * it is down is not tried (its messages go straight to its outbox), so
 * a dead member costs nothing and only a member that stopped answering
 * without closing costs cluster_timeout.
 *
 * No state of its own: what must survive is the journal's (clu_jnl.c).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/bcp.h"
#include "surogat/be.h"
#include "surogat/clu.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

#include "clu_priv.h"

#define ANSWER_MAX (256u << 20) /* bytes of an answer: a journal of bans, percent-encoded */

/* Read the whole answer (to EOF) into a growing buffer.  0, or -1 with why. */
static int
read_answer(struct bcp_conn *conn, double deadline, char **bufp, size_t *lenp, struct sb *why)
{
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    ssize_t n;

    AN(buf);
    for (;;) {
        if (len + 1 == cap) {
            if (cap >= ANSWER_MAX) {
                sb_printf(why, "answer larger than %u bytes", ANSWER_MAX);
                free(buf);
                return (-1);
            }
            cap *= 2;
            buf = realloc(buf, cap);
            AN(buf);
        }
        n = len == 0 ? bcp_read_wait(conn, buf + len, cap - 1 - len, deadline)
                     : bcp_read(conn, buf + len, cap - 1 - len, deadline);
        if (n == 0)
            break;
        if (n < 0) {
            sb_printf(why, "%s", errno == ETIMEDOUT ? "no answer in time" : strerror(errno));
            free(buf);
            return (-1);
        }
        len += (size_t)n;
    }
    buf[len] = '\0';
    *bufp = buf;
    *lenp = len;
    return (0);
}

/*
 * The status and the body of an answer read to its end; the body moved
 * to the front of buf.  The status, or 0 when it is no HTTP answer.
 */
static unsigned
parse_answer(char *buf, size_t len, size_t *bodylen)
{
    char *end = strstr(buf, "\r\n\r\n"), *cl;
    unsigned status;
    size_t blen;

    if (end == NULL || sscanf(buf, "HTTP/1.%*1[01] %3u", &status) != 1)
        return (0);
    *end = '\0';
    blen = len - (size_t)(end + 4 - buf);
    cl = strcasestr(buf, "\r\nContent-Length:");
    if (cl != NULL) {
        unsigned long long want = strtoull(cl + 17, NULL, 10);
        if (want < blen)
            blen = (size_t)want;
    }
    memmove(buf, end + 4, blen);
    buf[blen] = '\0';
    *bodylen = blen;
    return (status);
}

int
clu__send(struct clu *c, unsigned i, const char *body, size_t len, double deadline, char **resp,
          size_t *resplen, struct sb *why)
{
    const char *addr = clu_member_addr(c, i);
    char hop[CLU_HOP_LEN], head[1024], *ans;
    struct bcp_conn *conn;
    size_t anslen;
    unsigned status;
    struct sb sb;

    clu_hop_make(c, &TXT_LIT("PURGE"), &(struct txt){ addr, strlen(addr) }, &TXT_LIT(CLU_PATH),
                 body, len, tim_real(), hop, sizeof hop);
    sb_init(&sb, head, sizeof head);
    sb_printf(&sb,
              "PURGE " CLU_PATH " HTTP/1.1\r\nHost: %s\r\n" CLU_HOP_HEADER ": %s\r\n"
              "Content-Type: text/plain\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
              addr, hop, len);
    AN(sb_ok(&sb));
    if (be_conn_get(clu_member_be(c, i), NULL, true, &conn) != BCP_OK) {
        sb_cat(why, "cannot connect");
        return (-1);
    }
    if (bcp_write(conn, head, sb.len, deadline) != 0 || bcp_write(conn, body, len, deadline) != 0) {
        sb_printf(why, "cannot send: %s", strerror(errno));
        bcp_close(&conn);
        return (-1);
    }
    if (read_answer(conn, deadline, &ans, &anslen, why) != 0) {
        bcp_close(&conn);
        return (-1);
    }
    bcp_close(&conn);
    status = parse_answer(ans, anslen, resplen);
    if (status != 200) {
        if (status == 0)
            sb_cat(why, "not an HTTP answer");
        else
            sb_printf(why, "answered %u %.100s", status, ans);
        /* A one-line reason: what a policy or the peer said, up to its first line end. */
        why->buf[strcspn(why->buf, "\r\n")] = '\0';
        why->len = strlen(why->buf);
        free(ans);
        return (-1);
    }
    *resp = ans;
    return (0);
}

unsigned
clu_fanout(struct clu *c, const struct clu_op *op, long here, struct sb *out)
{
    unsigned self = clu_self_index(c), nack = 0;
    char *body, *resp, whybuf[160];
    size_t cap = 16 + CLU_ID_LEN + 64 + 3 * op->arglen, resplen;
    struct sb bsb, why;

    body = malloc(cap);
    AN(body);
    sb_init(&bsb, body, cap);
    sb_cat(&bsb, "op ");
    clu_op_print(op, &bsb);
    sb_cat(&bsb, "\n");
    AN(sb_ok(&bsb));
    (void)clu__jnl_add(op);
    sb_printf(out, "%s: %ld\n", clu_self(c), here);
    for (unsigned i = 0; i < clu_nmember(c); i++) {
        const char *name = clu_member_name(c, i);
        long n;

        if (i == self)
            continue;
        sb_init(&why, whybuf, sizeof whybuf);
        if (!be_healthy(clu_member_be(c, i))) {
            sb_cat(&why, "down");
        } else if (clu__send(c, i, body, bsb.len, tim_mono() + par.cluster_timeout, &resp, &resplen,
                             &why) == 0) {
            if (sscanf(resp, "applied %ld", &n) == 1) {
                sb_printf(out, "%s: %ld\n", name, n);
            } else if (strncmp(resp, "seen", 4) == 0) {
                sb_printf(out, "%s: 0 (applied before)\n", name);
            } else {
                sb_printf(&why, "answered %.60s", resp);
                why.buf[strcspn(why.buf, "\r\n")] = '\0';
                why.len = strlen(why.buf);
            }
            free(resp);
            if (why.len == 0) {
                STAT_INC(cluster_inval_sent);
                continue;
            }
        }
        nack++;
        clu__jnl_owe(op->id, name);
        STAT_INC(cluster_inval_queued);
        sb_printf(out, "%s: queued (%s)\n", name, why.buf);
        log_msg(LOG_WARNING, "cluster %s: %s %s not acknowledged by %s (%s): queued for retry",
                clu_name(c), clu_op_kind_name(op->kind), op->id, name, why.buf);
    }
    free(body);
    return (nack);
}

unsigned
clu_serve(struct clu *c, const struct http *req, const char *client_ip, const char *body,
          size_t bodylen, struct sb *answer, char **big, size_t *biglen)
{
    char *line, ebuf[256];
    struct clu_op op;
    struct sb err;
    unsigned from;
    double since;
    long n;

    *big = NULL;
    if (clu_hop_check(c, req, client_ip, body, bodylen, tim_real(), &from) != CLU_HOP_OK) {
        STAT_INC(cluster_hop_refused);
        sb_printf(answer, "Not a member of cluster %s (or its clock is %g s off).\n", clu_name(c),
                  CLU_HOP_WINDOW);
        return (403);
    }
    if (bodylen == 0 || body[bodylen - 1] != '\n' || memchr(body, '\0', bodylen) != NULL) {
        sb_cat(answer, "A cluster message is one line.\n");
        return (400);
    }
    line = malloc(bodylen);
    AN(line);
    memcpy(line, body, bodylen - 1);
    line[bodylen - 1] = '\0';
    if (strncmp(line, "sync ", 5) == 0) {
        since = strtod(line + 5, NULL);
        free(line);
        *big = clu__jnl_dump(since, biglen);
        STAT_INC(cluster_sync_served);
        return (200);
    }
    if (strncmp(line, "op ", 3) != 0 || clu_op_parse(line + 3, &op) != 0) {
        free(line);
        sb_cat(answer, "Not a cluster message this node knows.\n");
        return (400);
    }
    if (!clu__jnl_add(&op)) {
        free(line);
        sb_cat(answer, "seen\n");
        return (200);
    }
    sb_init(&err, ebuf, sizeof ebuf);
    n = clu_op_apply(&op, &err);
    STAT_INC(cluster_inval_received);
    free(line);
    if (n < 0) {
        log_msg(LOG_ERR, "cluster %s: from %s: %s", clu_name(c), clu_member_name(c, from), ebuf);
        sb_printf(answer, "%s\n", ebuf);
        return (400);
    }
    if (op.kind != CLU_OP_BAN)
        STAT_ADD(purge_objects, n);
    sb_printf(answer, "applied %ld\n", n);
    return (200);
}
