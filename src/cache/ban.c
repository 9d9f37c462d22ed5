/*
 * The ban list and the lurker (see ban.h for what bans mean).
 *
 * The list runs from the newest ban (`head`) to the oldest (`tail`).
 * Every object points at one ban, holding one of its `refcnt` counts:
 * the ban that was newest when the object was created, later the newest
 * it has been tested against.  So an object needs testing only against
 * the bans newer than its own, and a ban at the tail that no object
 * points at is needed by nobody and is freed.  ban_init() puts a first,
 * empty ban on the list so that every object has one to point at.
 *
 * Locks: ban_mtx guards the links, `refcnt`, `nbans` and the lurker's
 * wake-ups.  It ranks below the shard locks (hsh.c): lookups and the
 * lurker's visits take it while holding one, and nothing here takes a
 * shard lock while holding it.  `head` is also read without the lock
 * (an atomic load), by the lookup fast path.
 *
 * Why evaluating without ban_mtx is safe: an object's own ban cannot be
 * freed while the object points at it (refcnt > 0), and bans are freed
 * only from the tail, so every ban newer than it stays too; new bans go
 * in at the head and never change the `older` links below it.  A walk
 * from the head down to the object's ban therefore reads only links and
 * expressions that nobody writes.  A ban superseded by an identical newer
 * one (ban_dups) is only flagged, never unlinked from the middle.
 *
 * The lurker thread walks the index with hsh_walk(), ban_lurker_batch
 * objects per shard-lock hold and ban_lurker_sleep between batches,
 * testing each object against the bans newer than its own and moving it
 * to the newest; after a pass every object that was there has left the
 * old bans, and they are freed.  It pins the newest ban it works against
 * with a count of its own, since a newer ban may make it freeable.
 *
 * Persistence (ban_persist_open): the file holds one line per ban,
 * "T_ADDED EXPIRES EXPRESSION", the expression with '%', CR and LF
 * percent-encoded.  Lines are appended and synced as bans are added, and
 * the file is rewritten without the expired ones at open and whenever it
 * holds twice as many lines as live bans (plus some slack).  pst_mtx
 * guards the file and its list; it is never held with ban_mtx, and file
 * I/O is never done under ban_mtx, which lookups take under shard locks.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "surogat/ban.h"
#include "surogat/defs.h"
#include "surogat/fsu.h"
#include "surogat/hsh.h"
#include "surogat/log.h"
#include "surogat/num.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

enum ban_flag {
    BAN_F_DUP = 1u << 0,       /* an identical newer ban supersedes it: skip */
    BAN_F_RE_LOGGED = 1u << 1, /* a regex of it failed to evaluate, and that was logged */
};

struct ban {
    unsigned magic;
#define BAN_MAGIC 0x7a0b3c15
    unsigned refcnt;       /* objects (and the lurker) pointing at it; ban_mtx */
    unsigned flags;        /* enum ban_flag; atomic: evaluators read it without the lock */
    uint64_t seq;          /* immutable; newer bans have larger ones */
    double t_added;        /* tim_real() */
    double before;         /* > 0: only objects with fresh.t_origin before it (ban_add_before) */
    struct ban_expr *expr; /* immutable; NULL for the first, empty ban */
    char *text;            /* canonical form (ban_expr_print), for ban.list and dups */
    struct ban *newer;     /* ban_mtx */
    struct ban *older;     /* written before the ban is published, then only by trim() */
};

static pthread_mutex_t ban_mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lurker_cv; /* ban_add() and ban_lurker_stop() wake the lurker */
static struct ban *head;         /* newest; stores are releases, ban_check_obj loads it */
static struct ban *tail;         /* oldest */
static unsigned nbans;
static uint64_t next_seq;
static bool lurker_running, lurker_stop;
static pthread_t lurker_thr;

static struct ban *
ban_new(struct ban_expr *expr, const char *text)
{
    struct ban *b;

    OBJ_NEW(b, BAN_MAGIC);
    b->expr = expr;
    b->text = strdup(text);
    AN(b->text);
    b->t_added = tim_real();
    return (b);
}

static void
ban_free(struct ban *b)
{
    OBJ_CHECK(b, BAN_MAGIC);
    ban_expr_free(&b->expr);
    free(b->text);
    OBJ_FREE(&b);
}

/* Under ban_mtx.  b becomes the newest ban. */
static void
push(struct ban *b)
{
    b->seq = next_seq++;
    b->older = head;
    if (head != NULL)
        head->newer = b;
    else
        tail = b;
    __atomic_store_n(&head, b, __ATOMIC_RELEASE);
    nbans++;
    STAT_INC(bans);
}

/* Under ban_mtx: free the oldest bans nothing points at any more. */
static void
trim(void)
{
    while (tail != head && tail->refcnt == 0) {
        struct ban *b = tail;
        tail = b->newer;
        tail->older = NULL;
        nbans--;
        STAT_DEC(bans);
        STAT_INC(bans_trimmed);
        STAT_ADD(bans_completed, b->flags & BAN_F_DUP ? (uint64_t)-1 : 0);
        ban_free(b);
    }
}

int
ban_init(void)
{
    pthread_condattr_t ca;

    AZ(pthread_condattr_init(&ca));
    AZ(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC));
    AZ(pthread_cond_init(&lurker_cv, &ca));
    AZ(pthread_condattr_destroy(&ca));
    AZ(pthread_mutex_lock(&ban_mtx));
    AZ(head);
    push(ban_new(NULL, ""));
    AZ(pthread_mutex_unlock(&ban_mtx));
    return (0);
}

void
ban_fini(void)
{
    SRG_ASSERT(!lurker_running);
    AZ(pthread_mutex_lock(&ban_mtx));
    while (tail != NULL) {
        struct ban *b = tail;
        tail = b->newer;
        nbans--;
        STAT_DEC(bans);
        STAT_ADD(bans_completed, b->flags & BAN_F_DUP ? (uint64_t)-1 : 0);
        ban_free(b);
    }
    __atomic_store_n(&head, NULL, __ATOMIC_RELEASE);
    AZ(pthread_mutex_unlock(&ban_mtx));
    AZ(pthread_cond_destroy(&lurker_cv));
}

/* ---- persistence ---- */

struct pst_ent {
    double t, expires; /* tim_real() */
    char *text;        /* canonical expression */
};

static pthread_mutex_t pst_mtx = PTHREAD_MUTEX_INITIALIZER;
static int pst_fd = -1; /* the file, appending; -1: not persisting */
static char *pst_path;
static struct pst_ent *pst; /* the bans in the file not yet expired, oldest first */
static unsigned pst_n, pst_cap;
static unsigned pst_lines; /* lines in the file, expired ones included */

/* '%', CR and LF as %25, %0D, %0A: one ban, one line. */
static void
pct_encode(struct sb *out, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '%' || *s == '\r' || *s == '\n')
            sb_printf(out, "%%%02X", (unsigned char)*s);
        else
            sb_printf(out, "%c", *s);
    }
}

/* In place; -1 on a bad escape. */
static int
pct_decode(char *s)
{
    char *w = s;

    for (; *s != '\0'; s++) {
        if (*s != '%') {
            *w++ = *s;
            continue;
        }
        if (num_hexdigit(s[1]) < 0 || num_hexdigit(s[2]) < 0)
            return (-1);
        *w++ = (char)(num_hexdigit(s[1]) * 16 + num_hexdigit(s[2]));
        s += 2;
    }
    *w = '\0';
    return (0);
}

static void
pst_line(struct sb *out, const struct pst_ent *e)
{
    sb_printf(out, "%.6f %.6f ", e->t, e->expires);
    pct_encode(out, e->text);
    sb_cat(out, "\n");
}

/* Under pst_mtx: forget the expired entries. */
static void
pst_expire(double now)
{
    unsigned k = 0;

    for (unsigned i = 0; i < pst_n; i++) {
        if (pst[i].expires > now)
            pst[k++] = pst[i];
        else
            free(pst[i].text);
    }
    pst_n = k;
}

/* fsu_fill_f: the live entries, a line each. */
static int
pst_fill(int fd, void *priv)
{
    (void)priv;
    for (unsigned i = 0; i < pst_n; i++) {
        char line[8192];
        struct sb sb;
        sb_init(&sb, line, sizeof line);
        pst_line(&sb, &pst[i]);
        /* Always fits: expressions are at most 4 KB, tripled at worst. */
        if (sb_ok(&sb) && fsu_write_all(fd, line, sb.len) != 0)
            return (-1);
    }
    return (0);
}

/* Under pst_mtx: the file anew, with the live entries only.  -1 with errno. */
static int
pst_rewrite(void)
{
    if (fsu_replace(pst_path, pst_fill, NULL, &pst_fd) != 0)
        return (-1);
    pst_lines = pst_n;
    return (0);
}

/* Under pst_mtx: one more entry in the list. */
static void
pst_push(double t, double expires, const char *text)
{
    struct pst_ent *e;

    if (pst_n == pst_cap) {
        pst_cap = pst_cap > 0 ? 2 * pst_cap : 64;
        pst = realloc(pst, pst_cap * sizeof *pst);
        AN(pst);
    }
    e = &pst[pst_n++];
    e->t = t;
    e->expires = expires;
    e->text = strdup(text);
    AN(e->text);
}

/* Record a ban being added: appended and synced, or logged when the file fails. */
static void
pst_add(const char *text, double t)
{
    char line[8192];
    struct sb sb;

    AZ(pthread_mutex_lock(&pst_mtx));
    if (pst_fd < 0) {
        AZ(pthread_mutex_unlock(&pst_mtx));
        return;
    }
    pst_expire(tim_real());
    pst_push(t, t + par.ban_persist, text);
    sb_init(&sb, line, sizeof line);
    pst_line(&sb, &pst[pst_n - 1]);
    if (pst_lines > 2 * pst_n + 64) {
        if (pst_rewrite() != 0)
            log_msg(LOG_ERR, "ban: cannot rewrite %s: %s", pst_path, strerror(errno));
    } else if (!sb_ok(&sb) || fsu_write_all(pst_fd, line, sb.len) != 0 || fdatasync(pst_fd) != 0) {
        STAT_INC(bans_persist_fail);
        log_msg(LOG_ERR, "ban: cannot persist to %s: %s: the ban holds until a restart only",
                pst_path, strerror(errno));
    } else {
        pst_lines++;
    }
    AZ(pthread_mutex_unlock(&pst_mtx));
}

static int add(const char *text, double before, bool persist, struct sb *err);

/* Under pst_mtx: parse one line of the file and replay it.  1 replayed, 0 expired, -1 bad. */
static int
pst_replay(char *line, double now, unsigned lineno)
{
    char *end, *text, ebuf[256];
    double t, expires;
    struct sb err;

    t = strtod(line, &end);
    if (end == line || *end != ' ')
        return (-1);
    expires = strtod(end + 1, &text);
    if (text == end + 1 || *text != ' ' || pct_decode(++text) != 0 || !(t > 0))
        return (-1);
    if (expires <= now)
        return (0);
    sb_init(&err, ebuf, sizeof ebuf);
    if (add(text, t, false, &err) != 0) {
        log_msg(LOG_WARNING, "ban: %s:%u: %s: skipped", pst_path, lineno, ebuf);
        return (-1);
    }
    pst_push(t, expires, text);
    return (1);
}

int
ban_persist_open(const char *path, struct sb *err)
{
    unsigned lineno = 0, nreplayed = 0, nexpired = 0, nbad = 0;
    double now = tim_real();
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    FILE *f;

    AN(path);
    if (par.ban_persist <= 0)
        return (0);
    AZ(pthread_mutex_lock(&pst_mtx));
    SRG_ASSERT(pst_fd < 0);
    free(pst_path);
    pst_path = strdup(path);
    AN(pst_path);
    f = fopen(path, "re");
    if (f == NULL && errno != ENOENT) {
        sb_printf(err, "ban: %s: %s", path, strerror(errno));
        AZ(pthread_mutex_unlock(&pst_mtx));
        return (-1);
    }
    while (f != NULL && (len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        switch (pst_replay(line, now, lineno)) {
        case 1:
            nreplayed++;
            break;
        case 0:
            nexpired++;
            break;
        default:
            nbad++;
            break;
        }
    }
    free(line);
    if (f != NULL)
        (void)fclose(f);
    if (pst_rewrite() != 0) {
        sb_printf(err, "ban: %s: %s", path, strerror(errno));
        AZ(pthread_mutex_unlock(&pst_mtx));
        return (-1);
    }
    AZ(pthread_mutex_unlock(&pst_mtx));
    if (lineno > 0)
        log_msg(nbad > 0 ? LOG_WARNING : LOG_INFO,
                "ban: %u bans replayed from %s (%u expired, %u unreadable)", nreplayed, path,
                nexpired, nbad);
    return (0);
}

void
ban_persist_close(void)
{
    AZ(pthread_mutex_lock(&pst_mtx));
    if (pst_fd >= 0)
        (void)close(pst_fd);
    pst_fd = -1;
    for (unsigned i = 0; i < pst_n; i++)
        free(pst[i].text);
    free(pst);
    pst = NULL;
    pst_n = pst_cap = pst_lines = 0;
    free(pst_path);
    pst_path = NULL;
    AZ(pthread_mutex_unlock(&pst_mtx));
}

/* ---- adding ---- */

static int
add(const char *text, double before, bool persist, struct sb *err)
{
    struct ban_expr *expr = ban_expr_parse(text, err);
    char buf[4096];
    struct sb canon;
    struct ban *b;

    if (expr == NULL)
        return (-1);
    sb_init(&canon, buf, sizeof buf);
    ban_expr_print(expr, &canon);
    if (!sb_ok(&canon)) {
        sb_printf(err, "ban: expression longer than %zu bytes", sizeof buf - 1);
        ban_expr_free(&expr);
        return (-1);
    }
    b = ban_new(expr, canon.buf);
    if (before > 0 && before < b->t_added)
        b->t_added = b->before = before;
    /* Before it takes effect: a ban that applies is one a restart keeps. */
    if (persist)
        pst_add(b->text, b->t_added);
    AZ(pthread_mutex_lock(&ban_mtx));
    /*
     * An identical older ban covers a subset of this one's objects, and
     * can go -- unless this one only reaches objects older than it does.
     */
    if (par.ban_dups) {
        for (struct ban *o = head; o != NULL; o = o->older) {
            if (o->expr != NULL && strcmp(o->text, b->text) == 0 &&
                (b->before <= 0 || b->before >= o->t_added) &&
                !(__atomic_load_n(&o->flags, __ATOMIC_RELAXED) & BAN_F_DUP)) {
                __atomic_or_fetch(&o->flags, BAN_F_DUP, __ATOMIC_RELAXED);
                STAT_INC(bans_dups);
                STAT_INC(bans_completed);
            }
        }
    }
    push(b);
    trim();
    AZ(pthread_cond_signal(&lurker_cv));
    AZ(pthread_mutex_unlock(&ban_mtx));
    STAT_INC(bans_added);
    if (b->before > 0)
        log_msg(LOG_INFO, "ban: %s (objects fetched before %.3f)", b->text, b->before);
    else
        log_msg(LOG_INFO, "ban: %s", b->text);
    return (0);
}

int
ban_add(const char *text, struct sb *err)
{
    return (add(text, 0, true, err));
}

int
ban_add_before(const char *text, double before, struct sb *err)
{
    return (add(text, before, true, err));
}

unsigned
ban_count(void)
{
    unsigned n;

    AZ(pthread_mutex_lock(&ban_mtx));
    n = nbans;
    AZ(pthread_mutex_unlock(&ban_mtx));
    return (n);
}

void
ban_list(struct sb *out)
{
    AZ(pthread_mutex_lock(&ban_mtx));
    sb_cat(out, "Present bans:\n");
    for (const struct ban *b = head; b != NULL; b = b->older) {
        /* C: completed -- no object needs testing against it (the tail), or superseded. */
        bool done = b == tail || (b->flags & BAN_F_DUP);
        time_t sec = (time_t)b->t_added;
        struct tm tm;
        char when[32];
        /* ISO 8601 in UTC, to the microsecond: bans added in one second stay apart. */
        AN(gmtime_r(&sec, &tm));
        AN(strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm));
        sb_printf(out, "%s.%06uZ %10u %s %s\n", when,
                  (unsigned)((b->t_added - (double)sec) * 1e6) % 1000000, b->refcnt,
                  done ? "C" : "-", b->text);
    }
    AZ(pthread_mutex_unlock(&ban_mtx));
}

/* ---- objects ---- */

void
ban_obj_new(struct cobj *oc)
{
    AZ(oc->ban);
    AZ(pthread_mutex_lock(&ban_mtx));
    oc->ban = head;
    head->refcnt++;
    AZ(pthread_mutex_unlock(&ban_mtx));
}

void
ban_obj_free(struct cobj *oc)
{
    if (oc->ban == NULL)
        return;
    AZ(pthread_mutex_lock(&ban_mtx));
    SRG_ASSERT(oc->ban->refcnt > 0);
    oc->ban->refcnt--;
    oc->ban = NULL;
    trim();
    AZ(pthread_mutex_unlock(&ban_mtx));
}

/* Under the object's shard lock: move it from its ban to `to`, newer. */
static void
obj_move(struct cobj *oc, struct ban *to)
{
    AZ(pthread_mutex_lock(&ban_mtx));
    SRG_ASSERT(oc->ban->refcnt > 0);
    oc->ban->refcnt--;
    to->refcnt++;
    AZ(pthread_mutex_unlock(&ban_mtx));
    oc->ban = to;
}

/*
 * A regex of ban b could not be evaluated on the object at key (it counts
 * as a match): counted every time, logged the first time for each ban, so
 * that a pattern that backtracks catastrophically is seen without a line
 * per object.
 */
static void
re_failed(struct ban *b, const char *key, size_t keylen, int re_err)
{
    const char *nul = memchr(key, '\0', keylen);
    char buf[160];
    struct sb sb;

    STAT_INC(bans_regex_errors);
    if (__atomic_fetch_or(&b->flags, BAN_F_RE_LOGGED, __ATOMIC_RELAXED) & BAN_F_RE_LOGGED)
        return;
    AN(nul);
    sb_init(&sb, buf, sizeof buf);
    ban_expr_re_error(re_err, &sb);
    log_msg(LOG_WARNING,
            "ban: %s: regex not evaluated on %.*s%.*s (%s): taken as a match, the object is "
            "invalidated; further failures of this ban are only counted (bans_regex_errors)",
            b->text, (int)SRG_MIN((size_t)(nul - key), 256), key,
            (int)SRG_MIN(keylen - (size_t)(nul + 1 - key), 512), nul + 1, sb.buf);
}

/*
 * Test oc against the bans from `from` down to its own (excluded); no ban
 * lock needed (see the top of the file).  Returns whether one matched;
 * *ntested counts the expressions evaluated.
 */
static bool
test_obj(struct cobj *oc, struct ban *from, const char *key, size_t keylen, unsigned *ntested)
{
    int re_err;
    bool m;

    for (struct ban *b = from; b != oc->ban; b = b->older) {
        AN(b);
        if (b->expr == NULL || (__atomic_load_n(&b->flags, __ATOMIC_RELAXED) & BAN_F_DUP))
            continue;
        if (b->before > 0 && oc->fresh.t_origin >= b->before)
            continue; /* fetched after the ban was made */
        ++*ntested;
        m = ban_expr_match(b->expr, key, keylen, oc, &re_err);
        if (re_err != 0)
            re_failed(b, key, keylen, re_err);
        if (m)
            return (true);
    }
    return (false);
}

bool
ban_check_obj(struct cobj *oc, const char *key, size_t keylen)
{
    struct ban *h = __atomic_load_n(&head, __ATOMIC_ACQUIRE);
    unsigned ntested = 0;
    bool hit;

    AN(oc->ban);
    if (oc->flags & COBJ_BANNED)
        return (true);
    if (oc->ban == h)
        return (false);
    hit = test_obj(oc, h, key, keylen, &ntested);
    STAT_ADD(bans_lookup_tested, ntested);
    if (hit) {
        /* It keeps its ban until it is freed: that only delays trimming. */
        oc->flags |= COBJ_BANNED;
        STAT_INC(bans_lookup_killed);
        return (true);
    }
    obj_move(oc, h);
    return (false);
}

/* ---- the lurker ---- */

struct lurk {
    struct ban *target; /* pinned: the newest ban when the pass started */
    unsigned ntested;
    unsigned nkilled;
};

static bool
lurk_visit(struct cobj *oc, const char *key, size_t keylen, void *priv)
{
    struct lurk *lk = priv;

    if (oc->flags & COBJ_BANNED)
        return (true); /* a lookup found it banned: finish the job */
    /* Created, or moved by a lookup, since the pass began: nothing older to test. */
    if (oc->ban->seq >= lk->target->seq)
        return (false);
    if (test_obj(oc, lk->target, key, keylen, &lk->ntested)) {
        oc->flags |= COBJ_BANNED;
        lk->nkilled++;
        return (true);
    }
    obj_move(oc, lk->target);
    return (false);
}

/* Wait on lurker_cv until woken, stopped or `secs` passed.  Under ban_mtx. */
static void
lurker_wait(double secs)
{
    struct timespec ts;
    double t;

    AZ(clock_gettime(CLOCK_MONOTONIC, &ts));
    t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + secs;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - floor(t)) * 1e9);
    (void)pthread_cond_timedwait(&lurker_cv, &ban_mtx, &ts);
}

static void *
lurker_thread(void *arg)
{
    struct hsh_cursor cur = { 0, 0 };
    struct lurk lk;
    bool pass_done;

    stat_thread_enter();
    AZ(pthread_mutex_lock(&ban_mtx));
    while (!lurker_stop) {
        /* Nothing to do with one ban; ban_lurker_sleep 0 turns the lurker off. */
        if (nbans <= 1 || par.ban_lurker_sleep <= 0) {
            lurker_wait(1.0);
            continue;
        }
        lk = (struct lurk){ head, 0, 0 };
        head->refcnt++;
        do {
            AZ(pthread_mutex_unlock(&ban_mtx));
            pass_done = hsh_walk(&cur, par.ban_lurker_batch, lurk_visit, &lk);
            STAT_ADD(bans_lurker_tested, lk.ntested);
            STAT_ADD(bans_lurker_killed, lk.nkilled);
            lk.ntested = lk.nkilled = 0;
            AZ(pthread_mutex_lock(&ban_mtx));
            if (!pass_done && !lurker_stop)
                lurker_wait(par.ban_lurker_sleep);
        } while (!pass_done && !lurker_stop);
        lk.target->refcnt--;
        trim();
        /*
         * Old bans still held (a busy object, a banned one still being
         * delivered) are retried in a while, not in a tight loop -- unless
         * a new ban came meanwhile.
         */
        if (head == lk.target && !lurker_stop)
            lurker_wait(1.0);
    }
    AZ(pthread_mutex_unlock(&ban_mtx));
    stat_thread_leave();
    return (NULL);
}

int
ban_lurker_start(void)
{
    SRG_ASSERT(!lurker_running);
    lurker_stop = false;
    if (pthread_create(&lurker_thr, NULL, lurker_thread, NULL) != 0)
        return (-1);
    lurker_running = true;
    return (0);
}

void
ban_lurker_stop(void)
{
    if (!lurker_running)
        return;
    AZ(pthread_mutex_lock(&ban_mtx));
    lurker_stop = true;
    AZ(pthread_cond_signal(&lurker_cv));
    AZ(pthread_mutex_unlock(&ban_mtx));
    AZ(pthread_join(lurker_thr, NULL));
    lurker_running = false;
}
