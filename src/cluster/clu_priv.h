/*
 * Shared inside the cluster module: the journal and outboxes (clu_jnl.c)
 * and the messages between members (clu_peer.c).
 *
 * A cluster message is a PURGE of CLU_PATH whose body is one line:
 *   "op ID TIME KIND SOFT ARG"   apply an op (clu_op_print); answered
 *                                "applied N" (N objects) or "seen" (an id
 *                                applied before: not again)
 *   "sync SINCE"                 answered "journal COVERED", then the
 *                                journal's ops of TIME >= SINCE, a line
 *                                each; COVERED is the time from which the
 *                                journal is complete (see clu_jnl.c)
 * signed by the hop header over its method, Host, URL and body.
 */
#ifndef SUROGAT_CLU_PRIV_H
#define SUROGAT_CLU_PRIV_H

#include <stdbool.h>
#include <stddef.h>

struct clu;
struct clu_op;
struct sb;

/* ---- clu_jnl.c ---- */

/*
 * Record op as applied here (a copy).  False when an op of that id is in
 * the journal already: then it was applied before and must not be again.
 * Without an open journal (no cluster at start and none yet) it is
 * opened on first use.  Any thread; takes the journal lock, appends and
 * syncs the file.
 */
bool clu__jnl_add(const struct clu_op *op);
/* Op id is owed to member `name`: it goes to its outbox, sent again by the cluster thread. */
void clu__jnl_owe(const char *id, const char *name);
/*
 * The answer to "sync SINCE": "journal COVERED\n" and a line per op of
 * time >= since, oldest first.  malloc'd, *len its length.
 */
char *clu__jnl_dump(double since, size_t *len);

/* ---- clu_op.c ---- */

/* Remove every object in the cache (a member that cannot tell what it missed); how many. */
unsigned clu_purge_all(void);

/* ---- clu_peer.c ---- */

/*
 * Send a cluster message (body, one line with its '\n') to member i of c
 * and read the answer, all by deadline (tim_mono()).  0 when it answered
 * 200: *resp (malloc'd, NUL-terminated, the caller frees) is the answer's
 * body.  -1 with the reason in why.  Blocks: not under a lock.
 */
int clu__send(struct clu *c, unsigned i, const char *body, size_t len, double deadline, char **resp,
              size_t *resplen, struct sb *why);

#endif
