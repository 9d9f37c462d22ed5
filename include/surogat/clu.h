/*
 * clu -- a self-routing cluster of surogat nodes (surogatd(8), "Scaling
 * out"): several nodes behind any balancer cache each object once for
 * the fleet and ask the origin for it once, and an invalidation given to
 * any node reaches them all.
 *
 * Every node runs the same policy, whose `cluster` declaration (the
 * policy's, pol_decl.c) lists the members by name and address, this node
 * among them; a node knows itself by its server.identity (the identity
 * parameter).  No gossip: membership is the declaration, reloaded with
 * the policy (SIGHUP), and health is each member's probe, run by every
 * node against every member, itself included, so that the nodes' views
 * agree.
 *
 * Routing (clu.c).  A cache key belongs to one member: the first usable
 * one on a consistent-hash ring of the members (shard.h), so a member
 * that is down gives its keys to the next ones and takes them back,
 * ramping up, when it returns.  A node whose lookup misses asks the
 * owner, which answers from its cache or fetches once from the origin;
 * the owner fetches from the origin itself, and so does any node for a
 * request that already crossed a member: the hop header says so, and a
 * request never travels to a second member.
 *
 * The hop header, "X-Surogat-Hop: FROM TIME SIG": FROM the sending
 * member, TIME its clock (seconds since the epoch), SIG the first 128
 * bits of HMAC-SHA256, in hex, of the cluster's name, FROM, TIME, the
 * request's method, Host and URL, and the body of a cluster message,
 * under the cluster's secret.  It is believed within CLU_HOP_WINDOW of
 * the receiver's clock.  Without a secret SIG is "-" and the header is
 * believed only from the members' addresses.  The Via field carries
 * "1.1 NAME (surogat CLUSTER)" for each member crossed: a request with
 * such a mark but no valid hop header (a member whose peer list points
 * back into the fleet through a balancer) is not sent on to a member
 * either.
 *
 * Invalidations (clu_op.c, clu_peer.c, clu_jnl.c).  A purge, soft purge,
 * surrogate-key purge, ban or admin purge given to one node is applied
 * there (clu_op_apply), then sent to every other member as a cluster
 * message (a signed PURGE of CLU_PATH whose body says what to do), and
 * the caller gets a line per member.  Every node keeps what it applied
 * in a journal in its -n directory; what a member did not acknowledge is
 * kept in that member's outbox and sent again with backoff; and a node
 * that starts asks every other member for the journal since it last ran,
 * before it serves a request.
 *
 * Threads: routing and the hop header are lock-free reads of an
 * immutable struct clu, on workers.  The journal and the outboxes are
 * under one lock (clu_jnl.c); cluster messages are sent by workers (a
 * PURGE's fan-out), the CLI thread (ban, purge) and the cluster thread
 * (retries, the journal's upkeep), never holding it.
 */
#ifndef SUROGAT_CLU_H
#define SUROGAT_CLU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct be;
struct http;
struct sb;
struct txt;

#define CLU_MEMBERS_MAX 64
#define CLU_NAME_MAX    64 /* a member's or the cluster's name: letters, digits, . _ - */
#define CLU_SECRET_MAX  256
#define CLU_HOP_HEADER  "X-Surogat-Hop"
#define CLU_HOP_LEN     (CLU_NAME_MAX + 64) /* room for a hop header's value */
/* How far the sender's clock may be from the receiver's: signed messages are kept no longer. */
#define CLU_HOP_WINDOW 300.0
/*
 * The members' probe (GET, 200 when the node is ready, 503 while it
 * starts or drains: the policy answers it, see vcl/cluster.lua) and the
 * target of cluster messages (PURGE).
 */
#define CLU_PATH "/.well-known/surogat-cluster"
/* Bytes of a cluster message's body: the largest ban or key, percent-encoded. */
#define CLU_MSG_MAX (64 * 1024)

/* ---- the declaration ---- */

struct clu; /* immutable once built; refcounted (the program, and callers of pol_cluster()) */

struct clu_member_conf {
    const char *name; /* CLU_NAME_MAX at most: letters, digits, '.', '_', '-' */
    const char *addr; /* "host:port" as declared, for messages */
    struct be *be;    /* its backend: memory valid until be_fini() (be.h), so borrowed */
};

struct clu_conf {
    const char *name; /* the declaration's */
    const char *self; /* this node: one of the members */
    const struct clu_member_conf *member;
    unsigned nmember; /* 1 .. CLU_MEMBERS_MAX */
    /* The backend or director this node fetches from itself; NULL: the request's own route. */
    const char *origin;
    double local_ttl;   /* seconds a copy got from another member is kept, at most; 0: not kept */
    unsigned local_hot; /* ... of a key fetched from its owner this often lately; 0: the default */
    double rampup;      /* seconds, for the ring (shard.h) */
    const unsigned char *secret; /* NULL: hop headers believed from the members' addresses */
    size_t secretlen;            /* at most CLU_SECRET_MAX */
};

/*
 * NULL with a message naming the cluster on a bad conf: self not a
 * member, a name twice, a member's address that does not resolve (for the
 * check by address).  May block resolving.  Main or CLI thread.
 */
struct clu *clu_new(const struct clu_conf *c, struct sb *err);
struct clu *clu_ref(struct clu *c); /* returns c */
void clu_unref(struct clu **cp);    /* *cp = NULL; NULL is fine */

const char *clu_name(const struct clu *c);
const char *clu_self(const struct clu *c);
const char *clu_origin(const struct clu *c); /* NULL: the request's route */
double clu_local_ttl(const struct clu *c);
unsigned clu_nmember(const struct clu *c);
const char *clu_member_name(const struct clu *c, unsigned i);
const char *clu_member_addr(const struct clu *c, unsigned i);
struct be *clu_member_be(const struct clu *c, unsigned i);
unsigned clu_self_index(const struct clu *c);
/* The member of that name, or -1. */
int clu_member_find(const struct clu *c, const char *name);
/* A member other than this node. */
bool clu_is_peer(const struct clu *c, const char *name);

/* ---- routing ---- */

enum clu_route {
    CLU_R_PEER,  /* another member owns the key: *member */
    CLU_R_SELF,  /* this node owns it: the origin */
    CLU_R_ALONE, /* no member is usable, this node included: the origin */
};
/*
 * The owner of a cache key (the ring's hash of its bytes): the first
 * member on the ring that is healthy, not ramping up away from this key
 * and not failed lately (clu_failed).  Lock-free, any thread.
 */
enum clu_route clu_route(const struct clu *c, const char *key, size_t keylen, unsigned *member);
/* A fetch from member i failed: it owns nothing for a few seconds, until its probe decides. */
void clu_failed(const struct clu *c, unsigned i);
/*
 * Count one more fetch of a cache key from its owner, and say how many
 * this node made lately (a count-min sketch, halved every CLU_HOT_PERIOD
 * seconds and every 10 * CLU_HOT_WIDTH counts; racy by design, as the
 * cache's TinyLFU).  A node keeps a copy only of a key it asks for that
 * often (clu_local_hot(): hot): copies of the others' cooler keys would
 * evict the keys it owns, which the whole fleet asks it for, and a key
 * its store then refuses goes to the origin.  Any thread.
 */
#define CLU_HOT_WIDTH   16384
#define CLU_HOT_PERIOD  10
#define CLU_HOT_DEFAULT 16
unsigned clu_local_hot(const struct clu *c);
unsigned clu_hot_touch(const char *key, size_t keylen);

/* ---- the hop header ---- */

enum clu_hop {
    CLU_HOP_NONE, /* no hop header */
    CLU_HOP_OK,   /* from a member (*from), signed or from its address as configured */
    CLU_HOP_BAD,  /* a hop header that is not believed: forged, stale, unknown member */
};
/*
 * Judge req's hop header: the first X-Surogat-Hop field, the method, the
 * Host, the URL, and body (a cluster message's, or NULL) at now
 * (tim_real()), from client_ip (NULL: unknown, which fails the check by
 * address).
 */
enum clu_hop clu_hop_check(const struct clu *c, const struct http *req, const char *client_ip,
                           const void *body, size_t bodylen, double now, unsigned *from);
/*
 * The hop header's value for a request of this node ("SELF TIME SIG"),
 * into out (at least CLU_HOP_LEN bytes).  host NULL: none.
 */
void clu_hop_make(const struct clu *c, const struct txt *method, const struct txt *host,
                  const struct txt *url, const void *body, size_t bodylen, double now, char *out,
                  size_t outlen);
/* The Via element of this node in the cluster: "1.1 NAME (surogat CLUSTER)". */
void clu_via(const struct clu *c, struct sb *out);
/*
 * Whether req's Via fields carry a member's element of this cluster;
 * *self: this node's own among them (the request came back).
 */
bool clu_via_crossed(const struct clu *c, const struct http *req, bool *self);

/* ---- invalidations (clu_op.c) ---- */

enum clu_op_kind {
    CLU_OP_KEY,  /* every variant of a cache key (arg: the key's bytes) */
    CLU_OP_TAGS, /* every object carrying one of the surrogate keys (arg: the list) */
    CLU_OP_BAN,  /* a ban (arg: the expression) */
    CLU_OP_URL,  /* a request-target on every host (arg: it), as `purge URL` without a host */
};
#define CLU_ID_LEN (CLU_NAME_MAX + 18) /* "NAME-" and 16 hex digits */

struct clu_op {
    char id[CLU_ID_LEN + 1]; /* unique in the fleet: the first member's name, random bits */
    double t;                /* tim_real() of the member that got it first */
    enum clu_op_kind kind;
    bool soft;       /* KEY, TAGS, URL: expire rather than remove */
    const char *arg; /* not NUL-terminated: a key holds NULs */
    size_t arglen;
};

/* A new op of this node: id and t filled in. */
void clu_op_init(struct clu_op *op, const char *self, enum clu_op_kind kind, bool soft,
                 const void *arg, size_t arglen);
/*
 * Do it here; returns the objects it reached (0 for a ban, whose objects
 * go as they are tested).  A ban whose op is older than now applies to
 * the objects fetched before its time, give or take CLU_SKEW: one
 * replayed late spares what was fetched since.  -1 with the reason for a
 * ban that does not parse.
 */
#define CLU_SKEW 10.0 /* seconds of clock difference between members allowed for */
long clu_op_apply(const struct clu_op *op, struct sb *err);
/*
 * The invalidations applied here lately: a fetch under way when one was
 * applied may bring what it removed (read by the member or the origin
 * before the invalidation got there) and must not be kept.  _note()
 * records one, before it is applied (clu_op_apply and PURGE do), at
 * tim_mono(); _since() tells whether one noted at or after `since`
 * (tim_mono() seconds) may concern an object of cache key `key` tagged
 * tags[0..ntags): the same key, a tag in common, or one that may reach
 * any object (a ban, a URL on every host, more tags than kept, or more
 * invalidations since than remembered: CLU_RECENT).  Any thread.
 *
 * A fetch from the origin asks since it began.  A fetch from another
 * member asks from clu_inval_window() before it began: a member may
 * still answer from what an invalidation applied here removed until it
 * has the invalidation too, and the node that sends one to every member
 * acknowledges it only once they all have it, within that window of
 * this node's applying it (one cluster_timeout per member, in turn).
 */
#define CLU_RECENT 1024
void clu_inval_note(enum clu_op_kind kind, const char *arg, size_t arglen);
bool clu_inval_since(double since, const char *key, size_t keylen, const struct txt *tags,
                     unsigned ntags);
double clu_inval_last(void); /* tim_mono() of the newest noted; 0: none yet.  One atomic load. */
double clu_inval_window(const struct clu *c); /* seconds */
/*
 * The op as one line without its end: "ID TIME KIND SOFT ARG", ARG
 * percent-encoded outside '!'..'~' and for '%'.  _parse() reads it back
 * into op, whose arg then points into buf (decoded in place): 0, or -1.
 */
void clu_op_print(const struct clu_op *op, struct sb *out);
int clu_op_parse(char *buf, struct clu_op *op);
const char *clu_op_kind_name(enum clu_op_kind k);

/* ---- fan-out (clu_peer.c) ---- */

/*
 * After op was applied here (it reached `here` objects): journal it and
 * send it to every other member, waiting at most cluster_timeout for
 * each; a member that does not answer 200 (or whose probe says it is
 * down: not tried) gets it in its outbox, sent again later.  out gets a
 * line per member, this node first: "NAME: N" with the count it reached,
 * or "NAME: queued (why)".  Returns how many members did not
 * acknowledge.  May block: a worker, the CLI thread.
 */
unsigned clu_fanout(struct clu *c, const struct clu_op *op, long here, struct sb *out);
/*
 * A cluster message received (a PURGE of CLU_PATH, its body read): check
 * its hop header, apply an op (once: an id seen before is acknowledged
 * without being applied again) or answer the journal since a time.
 * Returns the status to answer and writes the text to answer (*big when
 * it outgrew it: the caller sends and frees that instead).  403 for a
 * message whose hop header is not believed.  Any worker.
 */
unsigned clu_serve(struct clu *c, const struct http *req, const char *client_ip, const char *body,
                   size_t bodylen, struct sb *answer, char **big, size_t *biglen);

/* ---- the node (clu_jnl.c) ---- */

/*
 * After the policy is loaded, hsh_recover() and ban_persist_open(),
 * before serving: open the journal and the outboxes in the -n directory
 * (cluster.journal), ask every other member of the current program's
 * cluster for what it applied since this node last ran (within
 * cluster_sync_timeout) and apply it, then start the cluster thread.
 * Without a cluster declared, only the thread starts (a reload may
 * declare one).  -1 with the reason in err when the journal cannot be
 * opened.
 */
int clu_start(struct sb *err);
void clu_stop(void);  /* before pol_fini(): joins the thread, closes the journal */
bool clu_ready(void); /* clu_start() has synced: the probe may say 200 */

#endif
