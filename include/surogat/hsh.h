/*
 * hsh -- the cache index: objects by key (Host and URL), with Vary
 * variants, busy objects for request coalescing, and SIEVE eviction.
 *
 * The index is split into HSH_SHARDS shards, each with its own lock, hash
 * table and eviction queue, so lookups of different keys never contend.
 * A complete object is immutable: deliveries read it without a lock,
 * holding a reference.  A busy object (a fetch in progress) is written by
 * its fetch only; other requests for the key wait until the fetch knows
 * the response is stored (hsh_stream_open), then stream the body from the
 * busy object as it is appended (hsh_stream_wait), or until the object is
 * published (hsh_unbusy) or abandoned, at most coalesce_timeout.  A
 * request that can let go of its thread waits on the object's waiting
 * list instead (struct hsh_waiter), as Varnish's requests do.
 */
#ifndef SUROGAT_HSH_H
#define SUROGAT_HSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "surogat/fresh.h"
#include "surogat/sto.h"

struct ban;
struct http;
struct txt;
struct objhead;
struct sb;
struct ws;

enum cobj_flag {
    COBJ_BUSY = 1u << 0,   /* being fetched: not yet visible to lookups */
    COBJ_HFM = 1u << 1,    /* hit-for-miss marker: the response was not cacheable */
    COBJ_DEAD = 1u << 2,   /* unlinked from the index; freed with its last reference */
    COBJ_BANNED = 1u << 3, /* matched a ban: invisible to lookups, unlinked at the next chance */
    COBJ_STREAM = 1u << 4, /* busy, head stored: waiters may stream the body (hsh_stream_open) */
    COBJ_ORPHAN = 1u << 5, /* abandoned while streamed: the last reader frees the body */
    /*
     * Busy, and an invalidation concerning it came meanwhile (a purge of
     * its key or its tags, a ban matching it): the backend may have
     * answered before the invalidation, so no lookup joins it any more
     * and hsh_unbusy() drops it rather than publishing it.
     */
    COBJ_OVERTAKEN = 1u << 6,
    COBJ_COPY = 1u << 7,      /* another object's body in another form (hsh_copy_begin) */
};

struct hsh_copies; /* an object's copies, private to the cache */

struct cobj {
    unsigned magic;
#define COBJ_MAGIC 0x5e0c41a7
    unsigned refcnt;          /* atomic: the index holds one while linked */
    uint8_t flags;            /* enum cobj_flag, under the shard lock */
    /*
     * What the body is, opaque to the cache: its content coding as gz.h
     * records it (GZ_FORM_*), HSH_FORM_UNKNOWN when not recorded (objects
     * stored before it was).  Set by the fetch with the head, kept across
     * a restart, read-only afterwards; a copy's is the form it holds.
     */
    uint8_t form;
    uint16_t status;
    /*
     * Lookups that found it usable (hits, grace hits, requests joining
     * its fetch): the policy's obj.hits.  Bumped at lookup with a relaxed
     * atomic add, read without a lock: a count, nothing depends on it.
     */
    uint32_t hits;
    bool visited;             /* SIEVE: hit since the hand last passed; racy by design */
    uint8_t shard;            /* immutable: its shard, usable once the objhead is gone */
    bool body_complete;       /* the whole body is stored */
    bool has_validator;       /* ETag or Last-Modified: worth keeping for revalidation */
    uint32_t head_len;
    uint32_t vary_len;
    unsigned nreaders; /* requests streaming from it, under the shard lock */
    struct cobj *next; /* the objhead's variants, under the shard lock */
    /* Invalidation (ban.c, xkey.c). */
    struct ban *ban; /* the newest ban tested against (or current at creation); shard lock */
    /*
     * A marker never holds a body, so never copies of one: the two share
     * the room.
     */
    union {
        double t_hfm_end;          /* COBJ_HFM: tim_real() until which the marker stands */
        struct hsh_copies *copies; /* a published object's copies (hsh_copy_*), or NULL;
                                    * set once under the shard lock, freed with the object */
    };
    /*
     * Written by the fetch before hsh_unbusy(), read-only afterwards.
     * What a hit reads comes first: an object is 192 bytes, so always
     * starts a cache line (the allocator's class), and a hit reads the
     * first two -- the fields above and head, then fresh and the body's
     * first 32 bytes -- of its three.
     */
    /*
     * The response head as stored: encoded (shd.h), head_len bytes; read it
     * through hsh_head_text() or hsh_head_field().
     */
    char *head;
    struct fresh_obj fresh;
    struct sto_body body;
    char *vary;         /* the request's values of the Vary fields: "name\0value\0"... */
    struct objhead *oh; /* immutable */
    void *xkey; /* its entries in the tag index, NULL if untagged; xkey.c's locks */
    /*
     * A busy object streams; a published one or a marker is in its
     * shard's SIEVE queue: never both, so they share the room.  Whoever
     * clears COBJ_BUSY (under the shard lock) inserts it in the queue in
     * the same hold, and a reader of a stream that finds it cleared reads
     * body.len instead.
     */
    union {
        struct {
            /*
             * The count of body bytes readers may read: stored with release
             * semantics by hsh_append() after the bytes are in place, loaded
             * with acquire by readers, so a reader never sees a byte before
             * it is written.
             */
            uint64_t stream_len;
            uint64_t stream_clen; /* the announced length, UINT64_MAX if none */
        };
        struct {
            struct cobj *sv_newer; /* under the shard lock */
            struct cobj *sv_older;
        };
    };
};
/* Fields are ordered to pack: an object is 192 bytes, one allocator size class. */
#define HSH_FORM_UNKNOWN 0xff

/*
 * A stale object found by a miss: for revalidation, or to serve if the
 * backend fails.  With HSH_GRACE, the stale copy to deliver now.
 */
struct hsh_stale {
    struct cobj *oc;               /* referenced, or NULL */
    enum fresh_verdict verdict;    /* what fresh_decide() said of it */
    /*
     * RFC 9211's fwd= for a miss: "stale" (oc is set), "vary-miss" (the
     * key has objects, none for this request's Vary values), "uri-miss"
     * (nothing cached for the key), or "miss".
     */
    const char *fwd;
    /*
     * HSH_PASS: why, as RFC 9211's detail -- "hit-for-miss" (a marker:
     * the URL's last response was not cacheable; fwd "uri-miss"),
     * "coalesce-timeout" or "coalesce-full" (fwd "miss").
     */
    const char *detail;
    double waited; /* seconds the lookup waited for another request's fetch of the key */
};

enum hsh_result {
    HSH_HIT,  /* *ocp: a referenced, complete, usable object */
    HSH_MISS, /* *ocp: a new busy object; the caller fetches and publishes or abandons it */
    HSH_PASS, /* a hit-for-miss marker, or coalescing gave up: fetch, do not store */
    /*
     * *ocp: a referenced busy object whose head is stored: deliver it and
     * stream its body with hsh_stream_wait(), then hsh_stream_leave().
     */
    HSH_STREAM,
    /*
     * stale->oc: a referenced stale object within its stale-while-
     * revalidate (grace) window to deliver now; *ocp: a new busy object
     * for refreshing it in the background (fetch_bg), as on a miss.
     */
    HSH_GRACE,
    /*
     * Only with a waiter: someone is fetching the key, and the waiter is
     * on its waiting list.  The caller lets go of the request until
     * w->wake(w), then looks up again with the same waiter.
     */
    HSH_BUSY,
};

/*
 * A request waiting for a busy object without a thread: Varnish's
 * waiting list.  The caller embeds it in memory that stays put while the
 * request waits, sets `wake` and `priv`, zeroes the rest once per
 * request, and passes it to hsh_lookup().  HSH_BUSY puts it on the busy
 * object's objhead; wake(w) is then called exactly once, from any thread
 * and with no lock of the index held, when the fetch streams, is
 * published or abandoned, or when coalesce_timeout has passed since the
 * request first waited; the next lookup with w then returns what there is
 * (a hit, a stream, a miss to fetch itself) or HSH_PASS when the time is
 * up (coalesce_timeout counted).  wake() must not call back into hsh: it
 * schedules the request.
 *
 * Woken requests are let in a few at a time (coalesce_rush): each wake-up
 * of the list lets coalesce_rush of them go, and each of those that then
 * finds the object usable lets as many more go, so thousands of waiters
 * resume at the pace the workers serve them, not all at once into the
 * pool's queue -- and when the fetch failed, the first woken fetches
 * again while the rest wait for it.
 */
struct hsh_waiter {
    unsigned magic;
#define HSH_WAITER_MAGIC 0x7d30a5e1
    void (*wake)(struct hsh_waiter *w);
    void *priv;
    /* Private to hsh. */
    double t_first;               /* tim_mono() when it first waited (the busy wait's start) */
    double deadline;              /* tim_mono(): t_first + coalesce_timeout; 0: none yet */
    struct objhead *oh;           /* whose list it is on; NULL when not waiting */
    struct hsh_waiter *next;      /* the objhead's list, oldest first */
    struct hsh_waiter *prev;
    struct hsh_waiter *snext;     /* the shard's list by deadline, for the sweeper */
    struct hsh_waiter *sprev;
};
/* Requests parked on waiting lists now (the gauge coalesce_parked, exact). */
unsigned hsh_parked(void);

enum hsh_stream {
    HSH_S_MORE,    /* more bytes are stored: *avail grew */
    HSH_S_DONE,    /* the body is complete: *avail is its length */
    HSH_S_FAILED,  /* the fetch failed or gave up storing: the body will not complete */
    HSH_S_TIMEOUT, /* nothing new within the timeout */
};

int hsh_init(void);
void hsh_fini(void); /* drops every object; no lookup may run */
/*
 * Look up `key` for request `req` (for Vary) with directives qcc at time
 * now.  May block while another request fetches the same key, until the
 * fetch streams (HSH_STREAM) or ends -- unless a stale copy is within its
 * stale-while-revalidate (grace) window: then that copy is the hit, and
 * HSH_GRACE when nobody refreshes it yet.  On a miss, *stale holds the
 * newest stale variant (referenced) if there is one.
 *
 * A client's no-cache, max-age or min-fresh that turns a fresh object
 * into a miss revalidates it at most once per client_revalidate_interval
 * per key; other such requests in that interval get the object (their
 * directives ignored, as Varnish and nginx ignore them always): one
 * client must not be able to send every request to the backend.
 */
enum hsh_lookup_flag {
    /* Never wait for nor stream from a fetch in progress: fetch alongside it. */
    HSH_L_IGNORE_BUSY = 1u << 0,
    /*
     * qcc's no-cache is the policy's (a hit hook's "miss", hash_always_miss),
     * not a client's: revalidate whatever client_revalidate_interval says.
     */
    HSH_L_FORCE_REVALIDATE = 1u << 1,
};
/*
 * w: NULL to wait on the calling thread (a background fetch, a
 * subrequest), else the request's waiter: see struct hsh_waiter.
 */
enum hsh_result hsh_lookup(const char *key, size_t keylen, const struct http *req,
                           const struct cc *qcc, double now, unsigned lflags, struct cobj **ocp,
                           struct hsh_stale *stale, struct hsh_waiter *w);
void hsh_ref(struct cobj *oc); /* one more reference to an object the caller holds */
/*
 * Record the request's values for the response's Vary fields on a busy
 * object.  -1 if the object cannot be stored (Vary too large).
 */
int hsh_set_vary(struct cobj *oc, const struct http *req, const struct http *resp);
/*
 * The head, Vary values and timing of a busy object are set: bind it to
 * a store, evicting others to make room.  -1: give up storing.
 */
int hsh_store_begin(struct cobj *oc);
/* The object's timing changed after publication: tell a persistent store. */
void hsh_store_attr(struct cobj *oc);
/*
 * Store body bytes of a busy object, evicting others to make room, and
 * wake its streaming readers.  -1: give up storing.
 */
int hsh_append(struct cobj *oc, const void *p, size_t len);
/*
 * The fetch stored the head (and set the Vary values): requests waiting
 * for oc may stream it from now on, and a purge of its tags finds it.
 * clen: the announced body length, or UINT64_MAX when unknown (chunked,
 * close-delimited).
 */
void hsh_stream_open(struct cobj *oc, uint64_t clen);
/*
 * The fetching request's own client becomes a streaming reader of the
 * busy object oc (a reference and a reader, as HSH_STREAM gives), to read
 * back what was stored once it fell behind the fetch; hsh_stream_leave()
 * when done.  The object then keeps its bytes for it as for any reader.
 */
void hsh_stream_join(struct cobj *oc);
/*
 * No new readers may attach to oc (they wait for the end of the fetch
 * instead).  Returns whether readers are streaming from it: then its
 * body must be kept (and appended to) until it completes.
 */
bool hsh_stream_close(struct cobj *oc);
/*
 * A reader has sent `have` bytes: wait up to tmo seconds for more, and
 * say how many are readable (*avail).  Blocks; takes the shard lock.
 */
enum hsh_stream hsh_stream_wait(struct cobj *oc, uint64_t have, double tmo, uint64_t *avail);
void hsh_stream_leave(struct cobj **ocp); /* the reader is done; drops its reference */
/*
 * The length a reader of oc (a stream it was given) announces: the
 * fetch's Content-Length while it is busy, the stored length once it is
 * published, UINT64_MAX when unknown.  Takes the shard lock.
 */
uint64_t hsh_stream_clen(struct cobj *oc);
/*
 * The fetch completed: the object replaces older variants that match the
 * same request and becomes visible; waiters are woken.  An overtaken one
 * (COBJ_OVERTAKEN) is dropped instead, its streaming readers reading it
 * to the end.  Drops the caller's reference.
 */
void hsh_unbusy(struct cobj **ocp);
/*
 * An invalidation that concerns the busy object oc came while it was
 * fetched (one the index cannot see itself: hsh_purge_key(), hsh_kill()
 * and the bans overtake what they concern): as COBJ_OVERTAKEN.
 */
void hsh_overtake(struct cobj *oc);
/*
 * The fetch failed or the response is not cacheable.  With hfm_ttl > 0 a
 * hit-for-miss marker stays for that long so later requests do not queue
 * behind each other for an uncacheable URL.  Drops the caller's reference.
 * Streaming readers see the end as a failure unless body_complete was set
 * (a complete body that is not kept, e.g. over max_object_size); the
 * body is freed when the last of them leaves.
 */
void hsh_abandon(struct cobj **ocp, double hfm_ttl);
void hsh_deref(struct cobj **ocp);
/*
 * Object attributes, as Varnish's: what a fetch learns of a body only at
 * its end, kept with the object (a persistent store brings them back
 * after a restart).  Opaque bytes to the index.
 */
enum hsh_oa {
    HSH_OA_ESI,    /* the ESI program (esi.h) */
    HSH_OA_GZBITS, /* a gzip body's struct gz_bits: it can be spliced into a stitched page */
    HSH_OA__N
};
/*
 * Set the attributes of a busy object whose body is complete, all at
 * once, before hsh_unbusy(); an empty txt: none of that kind.  0, or -1
 * when no room could be made (the object must then be abandoned: it
 * would be incomplete without them).
 */
int hsh_oa_set(struct cobj *oc, const struct txt *oa); /* oa: HSH_OA__N of them */
/* Give the busy object dst the attributes of src (a renewed copy of it).  As hsh_oa_set(). */
int hsh_oa_copy(struct cobj *dst, const struct cobj *src);
/*
 * An attribute of an object whose body is complete: false when it has
 * none of that kind.  *v is valid as long as the caller's reference.
 */
bool hsh_oa_get(const struct cobj *oc, enum hsh_oa a, struct txt *v);
/*
 * The first field `name` of a published object's stored head (read-only,
 * no lock needed).  *val is valid as long as the caller's reference,
 * except a Date or Expires value: until the thread's next call.
 */
bool hsh_head_field(const struct cobj *oc, const char *name, struct txt *val);
/*
 * An object's stored head is kept encoded (shd.h): these are its only
 * readers and writer.  hsh_head_set() gives a busy object the head
 * `text` (status line, field lines, the empty line), replacing any.
 * hsh_head_text() writes the text into ws and returns it (*len its
 * length), or NULL when ws has no room; hsh_head_size() is that length,
 * and hsh_head_copy() writes the text at out and returns its length.
 * Read-only once published: no lock needed.
 */
void hsh_head_set(struct cobj *oc, const char *text, size_t len);
const char *hsh_head_text(const struct cobj *oc, struct ws *ws, size_t *len);
size_t hsh_head_size(const struct cobj *oc);
size_t hsh_head_copy(const struct cobj *oc, char *out); /* out: hsh_head_size() bytes */
/*
 * The stored head split (shd_split()): its status line's parts and its
 * field lines still encoded, for a delivery that writes them straight
 * where they go out (shd_decode_fields()); valid as long as the caller's
 * reference.  False when the head does not start with a status line.
 */
struct shd_head;
bool hsh_head_split(const struct cobj *oc, struct shd_head *h);
unsigned hsh_purge(const char *key, size_t keylen); /* drop every variant; returns how many */
/*
 * Whether a published object's body is intact: objects recovered from a
 * file store are checked on first use.  One that fails is killed and must
 * not be delivered.
 */
bool hsh_verify(struct cobj *oc);
/* Put back what the persistent stores hold; before any worker starts. */
void hsh_recover(void);

/* ---- purge, soft purge, tags and bans ---- */

/*
 * Purge every published variant of a key; returns how many.  Soft: they
 * stay but expire now (ttl ends; stale-while-revalidate, stale-if-error
 * and keep still apply, so grace and revalidation work as after a natural
 * expiry); hit-for-miss markers go either way.  Its fetches under way are
 * overtaken (COBJ_OVERTAKEN), soft or not: what they bring may be what
 * the purge removed.
 */
unsigned hsh_purge_key(const char *key, size_t keylen, bool soft);
/*
 * The same for one object the caller holds a reference to (tag purges).
 * False if it was already gone or is still busy (then it is overtaken:
 * see COBJ_OVERTAKEN).  Takes its shard lock: call with no other lock
 * held.
 */
bool hsh_kill(struct cobj *oc, bool soft);
/* Where a walk over the index stands; zero it to start. */
struct hsh_cursor {
    unsigned shard;
    size_t bucket;
};
/*
 * Called with the object's shard lock held, for a published object
 * (neither busy nor dead).  key is its cache key ("host NUL url").
 * Returns true to have the object unlinked.  May take ban_mtx, no other
 * lock.
 */
typedef bool hsh_visit_f(struct cobj *oc, const char *key, size_t keylen, void *priv);
/*
 * Visit objects from *cur on, shard by shard, holding one shard lock at a
 * time and only for about `max` objects, so lookups never wait long.
 * True when this call finished a pass over the whole index (*cur is back
 * at the start).
 */
bool hsh_walk(struct hsh_cursor *cur, unsigned max, hsh_visit_f *fn, void *priv);

/* ---- copies: an object's body kept in other forms (hsh_copy.c) ---- */

/*
 * A published object may keep copies of its body in other forms -- other
 * content codings, made by the deliverer once clients keep asking for one
 * the object does not hold.  A copy is a struct cobj of its own
 * (COBJ_COPY, its form in `form`) with its head and body, in a store and
 * in the SIEVE queue like any object, so it is counted against the store
 * and evicted alone when cold; but no lookup finds it: it is reached only
 * through its object (hsh_copy_get), which holds it, and whatever removes
 * the object -- purge, ban, tag purge, a newer variant, expiry, eviction --
 * takes its copies with it.  An object has at most one copy per form, in
 * forms below HSH_FORMS.  n_copy and copy_bytes count them.
 */
#define HSH_FORMS 8
/* The forms oc holds copies in (bit 1 << form): a hint read without a lock. */
unsigned hsh_copy_forms(const struct cobj *oc);
/* oc's complete copy in `form`, referenced (hsh_deref()), or NULL.  Takes the shard lock. */
struct cobj *hsh_copy_get(struct cobj *oc, unsigned form);
/*
 * A delivery of oc (referenced by the caller) makes its body in `form`
 * on the fly: count the demand.  Once `after` deliveries did (0: never),
 * while oc is published and in the index with no copy in that form, a
 * new busy copy with the serialised head `head` (status line, fields, the
 * empty line), bound to a store: the caller fills it with
 * hsh_copy_append() and ends it with hsh_copy_end().  Else NULL.  Takes
 * the shard lock, then may evict to make room.
 */
struct cobj *hsh_copy_begin(struct cobj *oc, unsigned form, unsigned after, const char *head,
                            size_t head_len);
/* Body bytes of a busy copy.  -1 when there is no room or it passes max_object_size. */
int hsh_copy_append(struct cobj *copy, const void *p, size_t len);
/*
 * The caller is done with the busy copy *copyp of oc: with `complete`
 * it is published beside oc, if oc is still in the index; otherwise it
 * is dropped (and the demand counts again from 0).  *copyp = NULL.
 */
void hsh_copy_end(struct cobj *oc, struct cobj **copyp, bool complete);

#endif
