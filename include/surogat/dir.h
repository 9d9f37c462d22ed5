/*
 * dir -- directors: pick a healthy backend for a request.
 *
 * A backend is a leaf director (dir_backend); the others pick among their
 * members, which may be backends or directors (nesting).  Every director
 * skips sick backends and the ones in the request's skip list (already
 * tried), so a pick is NULL only when nothing usable is left: the caller
 * answers 503.
 *
 *   round_robin  members in turn
 *   random       weighted by the backends' weights (a director member
 *                weighs the sum of its members)
 *   hash         weighted rendezvous hashing of a request key: a member
 *                that leaves or falls sick moves only its own keys
 *   fallback     the first usable member in order
 *   shard        a consistent-hash ring of backends with ramp-up and a
 *                load bound (shard.h), keyed by default by the request's
 *                cache key
 *
 * A director never owns its members or their backends: whoever built them
 * frees them, after the directors naming them.  Directors are immutable
 * after dir_new(), so dir_pick() runs on any number of workers at once;
 * the only shared write is round_robin's cursor, an atomic.  A shard
 * director reads each backend's health, ramp-up and load at each pick.
 */
#ifndef SUROGAT_DIR_H
#define SUROGAT_DIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct be;
struct http;
struct sb;

enum dir_type {
    DIR_BACKEND,
    DIR_ROUND_ROBIN,
    DIR_RANDOM,
    DIR_HASH,
    DIR_FALLBACK,
    DIR_SHARD,
};

struct dir;

#define DIR_MEMBERS_MAX 256

/* A leaf for `be`, named after it.  It takes no reference: be must outlive it. */
struct dir *dir_backend(struct be *be);

struct dir_conf {
    const char *name;
    enum dir_type type; /* not DIR_BACKEND: use dir_backend() */
    struct dir *const *members;
    unsigned nmembers; /* 1 .. DIR_MEMBERS_MAX */
    /*
     * DIR_HASH, DIR_SHARD: "url", "hash" (the cache key, dir_ctx.key),
     * "header:NAME", "cookie:NAME"; NULL: "url" for DIR_HASH, "hash" for
     * DIR_SHARD.
     */
    const char *key;
    /* DIR_SHARD only (shard.h); its members must be backends. */
    const unsigned *weights; /* NULL: the backends' weights; else nmembers, each >= 1 */
    unsigned replicas;       /* points per unit of weight; 0: SHARD_REPLICAS_DEFAULT */
    double rampup;           /* seconds; 0: none */
    double balance_factor;   /* 0: no load bound; else >= 1 */
};

/* NULL with a message naming the director on a bad conf. */
struct dir *dir_new(const struct dir_conf *c, struct sb *err);
void dir_free(struct dir **dp); /* this director only, not its members; *dp = NULL */
const char *dir_name(const struct dir *d);
enum dir_type dir_type(const struct dir *d);
const char *dir_type_name(enum dir_type t); /* "round_robin", as the policy declares it */
/* The members of a director (0 for a leaf), in declaration order. */
unsigned dir_nmembers(const struct dir *d);
const struct dir *dir_member(const struct dir *d, unsigned i);
bool dir_healthy(const struct dir *d); /* some backend under it is healthy */

struct dir_ctx {
    const struct http *req; /* url and headers, for DIR_HASH and DIR_SHARD; may be NULL */
    struct be *const *skip; /* backends already tried (retries) */
    unsigned nskip;
    /*
     * The request's cache key (Host, URL and the hash hook's hash_data:
     * req_cache_key(), pol_hash()), for key "hash"; a pass has the
     * built-in key.  NULL: the Host lower-cased and the URL.
     */
    const char *key;
    size_t keylen;
};

/*
 * A healthy backend not in skip, or NULL (all sick or skipped, counted as
 * backend_unhealthy): then the caller answers 503.  Lock-free.
 */
struct be *dir_pick(struct dir *d, const struct dir_ctx *ctx);

/*
 * Seed this thread's generator for DIR_RANDOM (tests: a fixed sequence).
 * Unseeded threads seed themselves from the kernel at their first pick.
 */
void dir_random_seed(uint64_t seed);

#endif
