/*
 * hsh_priv -- shared by the files of the cache index: hsh.c (shards,
 * objheads, variants, Vary, lookup, recovery), hsh_busy.c (busy objects:
 * storing, streaming, publishing, abandoning) and hsh_evict.c (the SIEVE
 * queue, eviction with TinyLFU admission, purges and walks).
 *
 * Locks: one mutex per shard guards its hash table, its objheads, the
 * variant lists and flags of their objects, and its SIEVE queue.  Only
 * ban_mtx (ban.h) is taken while a shard lock is held, and object storage is
 * freed only after the lock is dropped (hsh_deref).  Reference counts are
 * atomic so a delivery drops its reference without the lock; the index's
 * own reference is dropped only by code holding the shard lock, after it
 * unlinked the object, so a count that reaches zero means nobody can find
 * the object any more.
 */
#ifndef SUROGAT_HSH_PRIV_H
#define SUROGAT_HSH_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "surogat/fresh.h"
#include "surogat/hsh.h"

struct timespec;

#define HSH_SHARDS 64 /* each with its own lock, hash table and SIEVE queue */

struct objhead {
    unsigned magic;
#define OBJHEAD_MAGIC 0x2f61c0d8
    unsigned nwaiting;     /* requests waiting for a busy object, on a thread or parked */
    struct objhead *hnext; /* hash chain */
    uint64_t hash;
    struct cobj *objs;          /* variants, busy ones included */
    struct hsh_waiter *wl_head; /* parked requests (hsh_wait.c), oldest first */
    struct hsh_waiter *wl_tail;
    /*
     * Requests streaming from a busy object, and copies being made
     * (hsh_copy_begin): keep the objhead, which they use.
     */
    unsigned nstream;
    unsigned nsleep;   /* atomic: streaming readers asleep, waiting for bytes */
    /*
     * When a client's directives last forced a revalidation, in ms of
     * tim_real() modulo 2^32 (differences stay right across the wrap);
     * under the shard lock.  32 bits: one per cached key.
     */
    uint32_t t_client_reval;
    uint32_t keylen; /* a key is part of one request head: far below 4 GiB */
    /*
     * keylen bytes and a NUL: one allocation with the objhead, of
     * HSH_OH_SIZE(keylen) bytes.  The fields above pack into 64 bytes, so
     * a typical key of 20 to 30 bytes keeps the whole in a 96-byte class.
     */
    char key[];
};
#define HSH_OH_SIZE(keylen) (offsetof(struct objhead, key) + (keylen) + 1)

struct shard {
    pthread_mutex_t mtx;
    struct objhead **buckets;
    size_t nbuckets; /* a power of two */
    size_t nheads;
    struct cobj *sv_head; /* newest */
    struct cobj *sv_tail; /* oldest */
    struct cobj *hand;    /* next to examine, moving towards the head; NULL: from the tail */
    /*
     * Broadcast when a busy object of the shard streams, is published or
     * abandoned, and when bytes are appended while its readers sleep.
     * One per shard, not per key: waiting is rare, and 48 bytes per
     * cached object are not.  Waiters re-check their own object.
     */
    pthread_cond_t cond;
    /* Parked requests of the shard's objheads by deadline, oldest first (hsh_wait.c). */
    struct hsh_waiter *sw_head;
    struct hsh_waiter *sw_tail;
} __attribute__((aligned(64)));

extern struct shard hsh__shards[HSH_SHARDS];

/*
 * What the index keeps of an object in a persistent store, to rebuild it
 * after a restart (hsh_busy.c writes it, hsh.c reads it back).  The
 * version changes whenever the layout does: an attr of another length is
 * refused, and its object dropped.
 */
struct hsh_attr {
    uint32_t version;
#define HSH_ATTR_VERSION 4 /* 2: fresh_obj.keep; 3: form; 4: the head encoded (shd.h) */
    uint32_t status;
    struct fresh_obj fresh;
    uint8_t has_validator;
    uint8_t form; /* since version 3 */
};

/*
 * Object attributes as the store keeps them (a body's tail, sto_set_tail):
 * "SOA1", then for each attribute its kind (1 byte), its length (4 bytes,
 * little-endian) and its bytes, then a CRC-32 of all before it (4 bytes,
 * little-endian), checked when a persistent store gives them back.
 */
#define HSH_OA_MAGIC "SOA1"
/* Whether tail[0..len) is a sound set of attributes (hsh_busy.c). */
bool hsh__oa_sound(const void *tail, size_t len);

/* FNV-1a, 64 bits: keys are short, and the key is compared in full anyway. */
static inline uint64_t
key_hash(const char *k, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)k[i];
        h *= 0x100000001b3ULL;
    }
    return (h ^ (h >> 29));
}

static inline struct shard *
shard_of(uint64_t hash)
{
    return (&hsh__shards[hash % HSH_SHARDS]);
}

/* Whether two variants answer the same requests: the same Vary values. */
static inline bool
hsh__same_vary(const struct cobj *a, const struct cobj *b)
{
    return (a->vary_len == b->vary_len &&
            (a->vary_len == 0 || memcmp(a->vary, b->vary, a->vary_len) == 0));
}

/* ---- hsh.c: objheads and variants, under the shard lock ---- */

struct objhead *hsh__oh_find(struct shard *sh, uint64_t hash, const char *key, size_t keylen);
/* Free an objhead nobody needs: no objects, nobody waiting. */
void hsh__oh_maybe_free(struct shard *sh, struct objhead *oh);
/*
 * Unlink a variant from the index.  Returns it with the index's reference
 * still counted: the caller drops it with hsh_deref() after unlocking.
 */
struct cobj *hsh__unlink_obj(struct shard *sh, struct cobj *oc);
/* Under the shard lock: an invalidation concerns the busy object oc (COBJ_OVERTAKEN). */
void hsh__overtake(struct cobj *oc);
/* The CLOCK_REALTIME instant `seconds` from now, for pthread_cond_timedwait(). */
void hsh__abs_deadline(struct timespec *ts, double seconds);
/*
 * Waiting lists (hsh_wait.c).  Under the shard lock: hsh__park() puts w
 * on oh's list (w->deadline set); hsh__rush() takes the n oldest off it
 * (0: all) and returns them chained by next, for hsh__wake() to wake
 * once the lock is dropped.  The caller of hsh__rush() frees the objhead
 * if that left it unused (hsh__oh_maybe_free()).
 */
void hsh__park(struct shard *sh, struct objhead *oh, struct hsh_waiter *w);
struct hsh_waiter *hsh__rush(struct shard *sh, struct objhead *oh, unsigned n);
void hsh__wake(struct hsh_waiter *chain);
void hsh__wait_init(void);
void hsh__wait_fini(void); /* stops the sweeper */

/* ---- hsh_copy.c ---- */

/* An object's copies (hsh.h), made at the first hsh_copy_begin(). */
struct hsh_copies {
    unsigned forms;               /* atomic: the forms of complete copies, a bit each */
    struct cobj *copy[HSH_FORMS]; /* shard lock: complete or busy copies, each referenced */
    uint16_t demand[HSH_FORMS];   /* shard lock: deliveries that made the form on the fly */
};
/*
 * Under the shard lock, from hsh__unlink_obj().  For an object: its
 * copies leave the SIEVE queue with it (they stay referenced by it until
 * it is freed).  For a copy: it leaves its object, the caller drops the
 * reference the object held.
 */
void hsh__copies_unlink(struct shard *sh, struct cobj *oc);
/* The object is freed: so are its copies that nobody delivers (no lock). */
void hsh__copies_free(struct cobj *oc);

/* ---- hsh_evict.c ---- */

/* The shard's SIEVE queue, under the shard lock. */
void hsh__sieve_insert(struct shard *sh, struct cobj *oc);
void hsh__sieve_remove(struct shard *sh, struct cobj *oc);
/*
 * Make room in oc's store for oc: 0, or -1 when oc should not be stored.
 * *nuked counts the objects evicted for oc, at most nuke_limit.  Takes
 * shard locks: call with none held.
 */
int hsh__make_room(struct cobj *oc, unsigned *nuked);

#endif
