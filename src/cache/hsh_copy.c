/*
 * Copies: an object's body kept in other forms beside it (hsh.h).  The
 * deliverer makes one when enough clients needed the body in a form the
 * object does not hold -- a client without compression of an object
 * stored gzip -- so that the next ones are served from the copy without
 * decoding.
 *
 * An object's copies hang off its hsh_copies record, made with the first
 * demand and freed with the object; each slot holds a reference to its
 * copy.  A published copy is in its shard's SIEVE queue, so it ages and is
 * evicted like any object (hsh__unlink_obj() takes it out of its slot); an
 * object that leaves the index takes its copies out of the queue with it,
 * and frees them when it is freed itself -- by then nobody can reach them.
 *
 * A copy being made pins its objhead (nstream), whose key and hash the
 * store and eviction use, since its object may leave the index meanwhile.
 *
 * Locks: the shard lock of the object (hsh_priv.h) for the record's slots
 * and demand and the copies' flags; `forms` is also read without it.
 * Stores are written with no lock held, as for busy objects.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/par.h"
#include "surogat/stat.h"

#include "hsh_priv.h"

unsigned
hsh_copy_forms(const struct cobj *oc)
{
    const struct hsh_copies *cp;

    OBJ_CHECK(oc, COBJ_MAGIC);
    if (oc->flags & (COBJ_HFM | COBJ_COPY))
        return (0);
    cp = __atomic_load_n(&oc->copies, __ATOMIC_ACQUIRE);
    return (cp == NULL ? 0 : __atomic_load_n(&cp->forms, __ATOMIC_RELAXED));
}

struct cobj *
hsh_copy_get(struct cobj *oc, unsigned form)
{
    struct shard *sh = &hsh__shards[oc->shard];
    struct cobj *c = NULL;

    OBJ_CHECK(oc, COBJ_MAGIC);
    SRG_ASSERT(form < HSH_FORMS);
    AZ(pthread_mutex_lock(&sh->mtx));
    if (!(oc->flags & (COBJ_HFM | COBJ_COPY | COBJ_DEAD | COBJ_BUSY)) && oc->copies != NULL &&
        (c = oc->copies->copy[form]) != NULL && !(c->flags & COBJ_BUSY)) {
        __atomic_add_fetch(&c->refcnt, 1, __ATOMIC_RELAXED);
        c->visited = true;
    } else {
        c = NULL;
    }
    AZ(pthread_mutex_unlock(&sh->mtx));
    return (c);
}

/* The record of oc, made on first use.  Shard lock held. */
static struct hsh_copies *
record(struct cobj *oc)
{
    struct hsh_copies *cp = oc->copies;

    if (cp == NULL) {
        cp = calloc(1, sizeof *cp);
        AN(cp);
        /* Published for hsh_copy_forms(), which reads it without the lock. */
        __atomic_store_n(&oc->copies, cp, __ATOMIC_RELEASE);
    }
    return (cp);
}

struct cobj *
hsh_copy_begin(struct cobj *oc, unsigned form, unsigned after, const char *head, size_t head_len)
{
    struct shard *sh = &hsh__shards[oc->shard];
    struct hsh_copies *cp;
    struct cobj *c;

    OBJ_CHECK(oc, COBJ_MAGIC);
    SRG_ASSERT(form < HSH_FORMS);
    AN(head);
    if (after == 0 || head_len > UINT32_MAX)
        return (NULL);
    AZ(pthread_mutex_lock(&sh->mtx));
    if (oc->flags & (COBJ_HFM | COBJ_COPY | COBJ_DEAD | COBJ_BUSY | COBJ_BANNED)) {
        AZ(pthread_mutex_unlock(&sh->mtx));
        return (NULL);
    }
    cp = record(oc);
    if (cp->demand[form] < UINT16_MAX)
        cp->demand[form]++;
    if (cp->demand[form] < after || cp->copy[form] != NULL) {
        AZ(pthread_mutex_unlock(&sh->mtx));
        return (NULL);
    }
    OBJ_NEW(c, COBJ_MAGIC);
    c->flags = COBJ_BUSY | COBJ_COPY;
    c->form = (uint8_t)form;
    c->status = oc->status;
    c->shard = oc->shard;
    c->oh = oc->oh;
    c->fresh = oc->fresh;
    c->has_validator = oc->has_validator;
    c->body_complete = true; /* never streamed: complete when published */
    c->refcnt = 2;           /* the slot's and the maker's */
    cp->copy[form] = c;
    oc->oh->nstream++;
    AZ(pthread_mutex_unlock(&sh->mtx));
    hsh_head_set(c, head, head_len);
    /* Bound like an object, evicting for room; never sealed: a restart does not bring it back. */
    if (hsh_store_begin(c) != 0) {
        hsh_copy_end(oc, &c, false);
        return (NULL);
    }
    return (c);
}

int
hsh_copy_append(struct cobj *c, const void *p, size_t len)
{
    OBJ_CHECK(c, COBJ_MAGIC);
    SRG_ASSERT((c->flags & (COBJ_COPY | COBJ_BUSY)) == (COBJ_COPY | COBJ_BUSY));
    if (par.max_object_size > 0 && c->body.len + len > par.max_object_size)
        return (-1);
    return (hsh_append(c, p, len));
}

void
hsh_copy_end(struct cobj *oc, struct cobj **cp_, bool complete)
{
    struct shard *sh = &hsh__shards[oc->shard];
    struct cobj *c = *cp_, *slot_ref = NULL;
    struct hsh_copies *cp;
    struct objhead *oh;
    unsigned form;

    OBJ_CHECK(oc, COBJ_MAGIC);
    OBJ_CHECK(c, COBJ_MAGIC);
    SRG_ASSERT((c->flags & (COBJ_COPY | COBJ_BUSY)) == (COBJ_COPY | COBJ_BUSY));
    form = c->form;
    oh = c->oh;
    AZ(pthread_mutex_lock(&sh->mtx));
    cp = oc->copies;
    AN(cp);
    SRG_ASSERT(cp->copy[form] == c);
    SRG_ASSERT(oh->nstream > 0);
    oh->nstream--;
    if (complete && !(oc->flags & (COBJ_DEAD | COBJ_BANNED))) {
        /* Nobody reads it yet: the unused tail may go. */
        sto_body_trim(&c->body);
        c->flags &= (uint8_t)~COBJ_BUSY;
        hsh__sieve_insert(sh, c);
        __atomic_or_fetch(&cp->forms, 1u << form, __ATOMIC_RELEASE);
        STAT_INC(copy_made);
        STAT_INC(n_copy);
        STAT_ADD(copy_bytes, c->body.len);
    } else {
        /* Another delivery may try again, after as much demand. */
        cp->copy[form] = NULL;
        cp->demand[form] = 0;
        c->flags |= COBJ_DEAD;
        slot_ref = c;
        STAT_INC(copy_dropped);
    }
    hsh__oh_maybe_free(sh, oh);
    AZ(pthread_mutex_unlock(&sh->mtx));
    if (slot_ref != NULL)
        hsh_deref(&slot_ref);
    hsh_deref(cp_);
}

void
hsh__copies_unlink(struct shard *sh, struct cobj *oc)
{
    struct hsh_copies *cp;

    if (oc->flags & COBJ_COPY) {
        /* Evicted alone: out of its object's slot, whose reference the caller drops. */
        unsigned form = oc->form;

        SRG_ASSERT(!(oc->flags & COBJ_BUSY));
        for (struct cobj *o = oc->oh->objs; o != NULL; o = o->next) {
            if ((o->flags & (COBJ_BUSY | COBJ_HFM)) || (cp = o->copies) == NULL ||
                cp->copy[form] != oc)
                continue;
            cp->copy[form] = NULL;
            cp->demand[form] = 0;
            __atomic_and_fetch(&cp->forms, ~(1u << form), __ATOMIC_RELAXED);
            hsh__sieve_remove(sh, oc);
            return;
        }
        SRG_WRONG("a published copy without its object");
    }
    if ((cp = oc->copies) == NULL)
        return;
    /* The object goes: its copies can no longer be found, nor evicted on their own. */
    __atomic_store_n(&cp->forms, 0, __ATOMIC_RELAXED);
    for (unsigned f = 0; f < HSH_FORMS; f++) {
        struct cobj *c = cp->copy[f];
        if (c == NULL)
            continue;
        if (!(c->flags & COBJ_BUSY))
            hsh__sieve_remove(sh, c);
        c->flags |= COBJ_DEAD;
    }
}

void
hsh__copies_free(struct cobj *oc)
{
    struct hsh_copies *cp = oc->copies;

    if (cp == NULL)
        return;
    for (unsigned f = 0; f < HSH_FORMS; f++)
        if (cp->copy[f] != NULL)
            hsh_deref(&cp->copy[f]);
    free(cp);
    oc->copies = NULL;
}
