/*
 * bcp -- backend connection pools.  One pool per endpoint.  A connection
 * has one owner: the pool while idle, a fetch while busy.  Idle
 * connections are reused last-in first-out so the warmest one goes first.
 */
#ifndef SUROGAT_BCP_H
#define SUROGAT_BCP_H

#include <stdbool.h>
#include <sys/socket.h>

struct bcp;

struct bcp_conn {
    unsigned magic;
#define BCP_CONN_MAGIC 0x1f8e5a73
    int fd;
    bool reused;   /* came from the idle list: may have been closed by the peer */
    double t_idle; /* tim_mono() when it went idle */
    struct bcp *pool;
    struct bcp_conn *next; /* idle list, under the pool lock */
};

enum bcp_err {
    BCP_OK,
    BCP_E_CONNECT, /* refused, unreachable or timed out: 503 */
    BCP_E_BUSY,    /* max connections reached: 503 */
};

/* max: most open connections, busy or idle; 0 means backend_max_connections. */
struct bcp *bcp_new(const struct sockaddr *sa, socklen_t salen, unsigned max);
void bcp_free(struct bcp **bpp); /* closes idle connections; none may be busy */
/*
 * A recycled connection unless `fresh`, else a new one within tmo seconds.
 * May block: workers only.
 */
enum bcp_err bcp_get(struct bcp *bp, double tmo, bool fresh, struct bcp_conn **out);
void bcp_recycle(struct bcp_conn **connp); /* back to the idle list */
void bcp_close(struct bcp_conn **connp);
unsigned bcp_idle_count(const struct bcp *bp);
unsigned bcp_conn_count(const struct bcp *bp); /* open, busy or idle */

#endif
