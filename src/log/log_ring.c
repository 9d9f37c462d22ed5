/*
 * Lists of per-worker rings (log_priv.h): the bookkeeping the request
 * log and the request trace share, whatever their rings hold.  Workers
 * take and hand back rings under the list's lock, once per worker start
 * and exit; readers walk the list without it.
 */
#include "config.h"

#include "surogat/defs.h"

#include "log_priv.h"

bool
log__rings_started(struct log_rings *l)
{
    bool started;

    AZ(pthread_mutex_lock(&l->mtx));
    started = l->n > 0;
    AZ(pthread_mutex_unlock(&l->mtx));
    return (started);
}

struct log_ring *
log__ring_get(struct log_rings *l, log_ring_make_f *make)
{
    struct log_ring *r;

    AZ(pthread_mutex_lock(&l->mtx));
    r = l->free;
    if (r != NULL) {
        l->free = r->next_free;
        r->next_free = NULL;
    } else {
        r = make();
        AN(r);
        r->id = l->n++;
        r->next = l->head;
        __atomic_store_n(&l->head, r, __ATOMIC_RELEASE);
    }
    r->in_use = true;
    AZ(pthread_mutex_unlock(&l->mtx));
    return (r);
}

void
log__ring_put(struct log_rings *l, struct log_ring *r)
{
    AZ(pthread_mutex_lock(&l->mtx));
    SRG_ASSERT(r->in_use);
    r->in_use = false;
    r->next_free = l->free;
    l->free = r;
    AZ(pthread_mutex_unlock(&l->mtx));
}

void
log__rings_fini(struct log_rings *l, log_ring_free_f *destroy, const struct log_ring *mine)
{
    struct log_ring *r, **rp;

    AZ(pthread_mutex_lock(&l->mtx));
    for (rp = &l->head; (r = *rp) != NULL;) {
        if (r->in_use && r != mine) {
            rp = &r->next;
            continue;
        }
        *rp = r->next;
        destroy(r);
    }
    l->free = NULL;
    if (l->head == NULL)
        l->n = 0;
    AZ(pthread_mutex_unlock(&l->mtx));
}
