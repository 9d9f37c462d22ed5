/*
 * 103 Early Hints (RFC 8297): an interim response whose Link fields let a
 * browser fetch a page's resources while the page itself is still being
 * made.  Two sources, both to the request's transport (tp_ops.interim),
 * which sends them to HTTP/1.1 clients only, before the final head:
 *
 *   - the backend's, forwarded as they arrive during a pass or a miss
 *     (fetch.c hands them up through the busy object, never storing
 *     them: a hit later gets none of the backend's);
 *   - the policy's: surogat.early_hints{...} in recv or hit collects
 *     Link values (req->hints), sent as one 103 when the hook returns,
 *     so that a page from the cache, or one whose fetch is slow, has its
 *     hints out at once.
 *
 * A 103 is never required: a client that failed here fails again on the
 * final response, which decides.
 */
#include "config.h"

#include "surogat/defs.h"
#include "surogat/req.h"
#include "surogat/stat.h"
#include "surogat/tp.h"

#include "req_priv.h"

int
req__interim(void *priv, unsigned status, const struct txt *fields)
{
    struct req *req = priv;
    int rv;

    OBJ_CHECK(req, REQ_MAGIC);
    SRG_ASSERT(status == 103);
    /* Interims go before the final head only: after a restart that sent one, nothing. */
    if (req->t_first != 0)
        return (0);
    rv = req->tp->interim(req, status, fields);
    if (rv > 0)
        STAT_INC(resp_early_hints);
    return (rv);
}

void
req__hints_send(struct req *req)
{
    struct txt h = req->hints;

    if (h.len == 0)
        return;
    req->hints = (struct txt){ NULL, 0 };
    (void)req__interim(req, 103, &h);
}
