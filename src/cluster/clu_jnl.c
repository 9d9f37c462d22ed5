/*
 * The node's side of a cluster: the journal of invalidations, the
 * outboxes, the cluster thread, and catching up at start (see clu.h).
 *
 * The journal holds every op this node applied as a member -- its own
 * and those other members sent -- for cluster_journal seconds (at most
 * cluster_journal_max ops), with, for each, the members that did not
 * acknowledge it yet: their outboxes.  It is what a member that starts
 * asks for ("sync SINCE": the ops since it last ran), and what the
 * cluster thread sends again, oldest first, to each member it owes
 * something, waiting 1, 2, 4 ... up to 60 seconds between rounds while
 * that member does not answer.  `covered` is the time from which the
 * journal holds everything this node applied: its creation, then moved
 * forward by every op forgotten, and to the end of this node's own
 * absence when no member could tell it what happened meanwhile.  A
 * member catching up from a journal that does not reach back to its
 * SINCE has missed ops it cannot name: it purges every object it has
 * (all fetched before it went away, so before the ops it missed).
 *
 * Files, in the -n directory: cluster.journal, one record a line --
 *   C COVERED      E OPLINE      O ID MEMBER (owed)      D ID MEMBER (delivered)
 * -- appended and synced as ops come, rewritten at start and when it has
 * grown to twice its live records; and cluster.alive, the time this
 * node last ran, written every second by the cluster thread.
 *
 * Locks: jnl_mtx guards everything here and the files; it is taken by
 * workers (a PURGE, a message from a member), the CLI thread and the
 * cluster thread, never while sending a message, and no other lock is
 * taken under it (it ranks below nothing and above nothing: clu_op_apply
 * is called without it).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "surogat/ban.h"
#include "surogat/be.h"
#include "surogat/clu.h"
#include "surogat/defs.h"
#include "surogat/fsu.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/sb.h"
#include "surogat/shard.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

#include "clu_priv.h"

#define JNL_PATH    "cluster.journal"
#define ALIVE_PATH  "cluster.alive"
#define JHASH       4096 /* id hash buckets */
#define SYNC_MARGIN 60.0 /* seconds asked for before this node's last sign of life */
#define BACKOFF_MAX 60.0 /* seconds between two rounds of retries to a silent member */
#define PUSH_BATCH  256  /* ops sent to one member per round */

struct jent {
    struct clu_op op; /* op.arg points into arg */
    char *arg;
    char **owed; /* members that did not acknowledge it */
    unsigned nowed;
    struct jent *next;  /* journal order, oldest first */
    struct jent *hnext; /* the id's hash chain */
};

/* A member's outbox: when to try it again. */
struct obx {
    char name[CLU_NAME_MAX + 1];
    double next;    /* tim_mono() */
    double backoff; /* seconds */
};

static pthread_mutex_t jnl_mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jnl_cv = PTHREAD_COND_INITIALIZER; /* the thread's sleep (CLOCK_REALTIME) */
static bool jopen; /* the journal was read and the file is open */
static int jfd = -1;
static unsigned jlines; /* records in the file */
static struct jent *jhead, *jtail;
static unsigned jcount;
static struct jent *jhash[JHASH];
static double jcovered;
static struct obx obx[2 * CLU_MEMBERS_MAX];
static unsigned nobx;
static bool thr_running, thr_stop, ready;
static pthread_t thr;

static unsigned
id_bucket(const char *id)
{
    return ((unsigned)(shard_hash(id, strlen(id)) % JHASH));
}

/* Under jnl_mtx. */
static struct jent *
find(const char *id)
{
    for (struct jent *e = jhash[id_bucket(id)]; e != NULL; e = e->hnext)
        if (strcmp(e->op.id, id) == 0)
            return (e);
    return (NULL);
}

static void
jent_free(struct jent *e)
{
    for (unsigned i = 0; i < e->nowed; i++)
        free(e->owed[i]);
    free(e->owed);
    free(e->arg);
    free(e);
}

/* Under jnl_mtx: a copy of op at the end of the journal. */
static struct jent *
insert(const struct clu_op *op)
{
    struct jent *e = calloc(1, sizeof *e);
    unsigned b;

    AN(e);
    e->op = *op;
    e->arg = malloc(op->arglen + 1);
    AN(e->arg);
    memcpy(e->arg, op->arg, op->arglen);
    e->arg[op->arglen] = '\0';
    e->op.arg = e->arg;
    b = id_bucket(op->id);
    e->hnext = jhash[b];
    jhash[b] = e;
    if (jtail != NULL)
        jtail->next = e;
    else
        jhead = e;
    jtail = e;
    jcount++;
    return (e);
}

/* Under jnl_mtx: forget the oldest op. */
static void
drop_oldest(void)
{
    struct jent *e = jhead, **pp;

    AN(e);
    for (unsigned i = 0; i < e->nowed; i++)
        log_msg(LOG_WARNING,
                "cluster: %s %s forgotten (cluster_journal) before %s acknowledged it: that "
                "member catches up by banning what it fetched before it, when it restarts",
                clu_op_kind_name(e->op.kind), e->op.id, e->owed[i]);
    jcovered = SRG_MAX(jcovered, e->op.t);
    for (pp = &jhash[id_bucket(e->op.id)]; *pp != e; pp = &(*pp)->hnext)
        AN(*pp);
    *pp = e->hnext;
    jhead = e->next;
    if (jhead == NULL)
        jtail = NULL;
    jcount--;
    jent_free(e);
}

static bool
owes(const struct jent *e, const char *name)
{
    for (unsigned i = 0; i < e->nowed; i++)
        if (strcmp(e->owed[i], name) == 0)
            return (true);
    return (false);
}

static void
owe(struct jent *e, const char *name)
{
    if (owes(e, name))
        return;
    e->owed = realloc(e->owed, (e->nowed + 1) * sizeof *e->owed);
    AN(e->owed);
    e->owed[e->nowed] = strdup(name);
    AN(e->owed[e->nowed]);
    e->nowed++;
}

static void
delivered(struct jent *e, const char *name)
{
    for (unsigned i = 0; i < e->nowed; i++) {
        if (strcmp(e->owed[i], name) != 0)
            continue;
        free(e->owed[i]);
        e->owed[i] = e->owed[--e->nowed];
        return;
    }
}

/*--------------------------------------------------------------------
 * The file.
 */

/* Under jnl_mtx: append one record, synced.  A failure is logged, counted, and only costs a
 * restart's memory. */
static void record(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void
record(const char *fmt, ...)
{
    char small[1024], *buf = small;
    va_list ap;
    int n;

    if (jfd < 0)
        return;
    va_start(ap, fmt);
    n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof small) {
        buf = malloc((size_t)n + 1);
        AN(buf);
        va_start(ap, fmt);
        (void)vsnprintf(buf, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    if (fsu_write_all(jfd, buf, (size_t)n) != 0 || fdatasync(jfd) != 0) {
        STAT_INC(cluster_journal_fail);
        log_msg(LOG_ERR, "cluster: cannot write %s: %s", JNL_PATH, strerror(errno));
    } else {
        jlines++;
    }
    if (buf != small)
        free(buf);
}

/* An op's line in workspace of its own: malloc'd, the caller frees it. */
static char *
op_line(const struct clu_op *op)
{
    size_t cap = CLU_ID_LEN + 64 + 3 * op->arglen;
    char *buf = malloc(cap);
    struct sb sb;

    AN(buf);
    sb_init(&sb, buf, cap);
    clu_op_print(op, &sb);
    AN(sb_ok(&sb));
    return (buf);
}

/* fsu_fill_f, under jnl_mtx: the live records. */
static int
jnl_fill(int fd, void *priv)
{
    char cov[64];

    (void)priv;
    snprintf(cov, sizeof cov, "C %.6f\n", jcovered);
    if (fsu_write_all(fd, cov, strlen(cov)) != 0)
        return (-1);
    for (struct jent *e = jhead; e != NULL; e = e->next) {
        char *l = op_line(&e->op);
        int rv = fsu_write_all(fd, "E ", 2) == 0 && fsu_write_all(fd, l, strlen(l)) == 0 &&
                         fsu_write_all(fd, "\n", 1) == 0
                     ? 0
                     : -1;
        free(l);
        if (rv != 0)
            return (-1);
        for (unsigned i = 0; i < e->nowed; i++) {
            char o[CLU_ID_LEN + CLU_NAME_MAX + 8];
            snprintf(o, sizeof o, "O %s %s\n", e->op.id, e->owed[i]);
            if (fsu_write_all(fd, o, strlen(o)) != 0)
                return (-1);
        }
    }
    return (0);
}

/* Under jnl_mtx: the file anew, live records only.  -1 with errno. */
static int
rewrite(void)
{
    unsigned n = 1;

    if (fsu_replace(JNL_PATH, jnl_fill, NULL, &jfd) != 0)
        return (-1);
    for (struct jent *e = jhead; e != NULL; e = e->next)
        n += 1 + e->nowed;
    jlines = n;
    return (0);
}

/* Under jnl_mtx: the ops past their time or their number go. */
static void
expire(double now)
{
    while (jhead != NULL &&
           (jhead->op.t < now - par.cluster_journal || jcount > par.cluster_journal_max))
        drop_oldest();
}

/* Under jnl_mtx: read the file, if any, and open it for appending. */
static int
jnl_open(struct sb *err)
{
    unsigned lineno = 0, nbad = 0;
    char *line = NULL, *id, *name;
    size_t cap = 0;
    ssize_t len;
    FILE *f;

    if (jopen)
        return (0);
    jcovered = tim_real();
    f = fopen(JNL_PATH, "re");
    if (f == NULL && errno != ENOENT) {
        sb_printf(err, "cluster: %s: %s", JNL_PATH, strerror(errno));
        return (-1);
    }
    while (f != NULL && (len = getline(&line, &cap, f)) >= 0) {
        struct clu_op op;
        struct jent *e;

        lineno++;
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        if (len > 2 && line[0] == 'C' && line[1] == ' ') {
            jcovered = strtod(line + 2, NULL);
        } else if (len > 2 && line[0] == 'E' && line[1] == ' ' &&
                   clu_op_parse(line + 2, &op) == 0) {
            if (find(op.id) == NULL)
                (void)insert(&op);
        } else if (len > 2 && (line[0] == 'O' || line[0] == 'D') && line[1] == ' ' &&
                   (id = strtok(line + 2, " ")) != NULL && (name = strtok(NULL, " ")) != NULL) {
            if ((e = find(id)) != NULL && line[0] == 'O')
                owe(e, name);
            else if (e != NULL)
                delivered(e, name);
        } else {
            nbad++;
        }
    }
    free(line);
    if (f != NULL)
        (void)fclose(f);
    if (nbad > 0)
        log_msg(LOG_WARNING, "cluster: %s: %u of %u lines unreadable, skipped", JNL_PATH, nbad,
                lineno);
    expire(tim_real());
    if (rewrite() != 0) {
        sb_printf(err, "cluster: %s: %s", JNL_PATH, strerror(errno));
        return (-1);
    }
    jopen = true;
    return (0);
}

bool
clu__jnl_add(const struct clu_op *op)
{
    char ebuf[256], *l;
    struct sb err;
    bool fresh;

    AZ(pthread_mutex_lock(&jnl_mtx));
    sb_init(&err, ebuf, sizeof ebuf);
    if (!jopen && jnl_open(&err) != 0)
        log_msg(LOG_ERR, "%s: the journal is kept in memory only", ebuf);
    jopen = true;
    fresh = find(op->id) == NULL;
    if (fresh) {
        (void)insert(op);
        l = op_line(op);
        record("E %s\n", l);
        free(l);
        expire(tim_real());
    }
    AZ(pthread_mutex_unlock(&jnl_mtx));
    return (fresh);
}

void
clu__jnl_owe(const char *id, const char *name)
{
    struct jent *e;

    AZ(pthread_mutex_lock(&jnl_mtx));
    if ((e = find(id)) != NULL && !owes(e, name)) {
        owe(e, name);
        record("O %s %s\n", id, name);
    }
    AZ(pthread_mutex_unlock(&jnl_mtx));
}

char *
clu__jnl_dump(double since, size_t *len)
{
    size_t cap = 64, n;
    char *buf, *l;

    AZ(pthread_mutex_lock(&jnl_mtx));
    for (struct jent *e = jhead; e != NULL; e = e->next)
        if (e->op.t >= since)
            cap += CLU_ID_LEN + 64 + 3 * e->op.arglen + 1;
    buf = malloc(cap);
    AN(buf);
    n = (size_t)snprintf(buf, cap, "journal %.6f\n", jcovered);
    for (struct jent *e = jhead; e != NULL; e = e->next) {
        if (e->op.t < since)
            continue;
        l = op_line(&e->op);
        n += (size_t)snprintf(buf + n, cap - n, "%s\n", l);
        free(l);
    }
    AZ(pthread_mutex_unlock(&jnl_mtx));
    SRG_ASSERT(n < cap);
    *len = n;
    return (buf);
}

/*--------------------------------------------------------------------
 * cluster.alive: when this node last ran.
 */

static double
alive_read(void)
{
    char buf[64];
    ssize_t n;
    int fd = open(ALIVE_PATH, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return (0);
    n = read(fd, buf, sizeof buf - 1);
    (void)close(fd);
    if (n <= 0)
        return (0);
    buf[n] = '\0';
    return (strtod(buf, NULL));
}

static void
alive_write(void)
{
    char buf[64];
    int fd = open(ALIVE_PATH, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    int n;

    if (fd < 0)
        return;
    /* Fixed width: overwritten in place, never seen half-written as a smaller number. */
    n = snprintf(buf, sizeof buf, "%020.3f\n", tim_real());
    if (pwrite(fd, buf, (size_t)n, 0) != n)
        log_msg(LOG_ERR, "cluster: cannot write %s: %s", ALIVE_PATH, strerror(errno));
    (void)close(fd);
}

/*--------------------------------------------------------------------
 * Catching up at start.
 */

/* Apply the ops of a "journal" answer; the count applied, -1 when it is no journal. */
static long
apply_journal(char *ans, double *covered)
{
    char *save = NULL, *l, ebuf[256];
    struct clu_op op;
    struct sb err;
    long n = 0;

    l = strtok_r(ans, "\n", &save);
    if (l == NULL || sscanf(l, "journal %lf", covered) != 1)
        return (-1);
    while ((l = strtok_r(NULL, "\n", &save)) != NULL) {
        if (clu_op_parse(l, &op) != 0) {
            log_msg(LOG_WARNING, "cluster: a journal line that does not parse: skipped");
            continue;
        }
        if (!clu__jnl_add(&op))
            continue;
        sb_init(&err, ebuf, sizeof ebuf);
        if (clu_op_apply(&op, &err) < 0)
            log_msg(LOG_ERR, "cluster: %s %s: %s", clu_op_kind_name(op.kind), op.id, ebuf);
        n++;
    }
    return (n);
}

/*
 * Ask every other member for its journal since this node last ran
 * (`last`, 0: never) and apply it, within cluster_sync_timeout.  An
 * answer is complete when its journal reaches back to `last`: before
 * that, this node was there to get the ops itself.  When none is, ban
 * what the gap may have missed (see the top of the file).
 */
static void
sync_with(struct clu *c, double last)
{
    /* The ops' times are the senders' clocks: ask for some before this node's last sign of life. */
    double since = last > 0 ? last - SYNC_MARGIN : 0;
    double deadline = tim_mono() + par.cluster_sync_timeout, covered, min_cov = INFINITY;
    unsigned answered = 0, others = 0;
    bool complete = false;
    char body[64], whybuf[160], *ans;
    size_t alen;
    struct sb why;
    long n;

    snprintf(body, sizeof body, "sync %.6f\n", since);
    for (unsigned i = 0; i < clu_nmember(c); i++) {
        if (i == clu_self_index(c))
            continue;
        others++;
        sb_init(&why, whybuf, sizeof whybuf);
        if (tim_mono() >= deadline) {
            log_msg(LOG_WARNING, "cluster %s: no time left (cluster_sync_timeout) to ask %s",
                    clu_name(c), clu_member_name(c, i));
            continue;
        }
        if (clu__send(c, i, body, strlen(body), SRG_MIN(deadline, tim_mono() + par.cluster_timeout),
                      &ans, &alen, &why) != 0) {
            log_msg(LOG_WARNING, "cluster %s: cannot catch up from %s: %s", clu_name(c),
                    clu_member_name(c, i), why.buf);
            continue;
        }
        n = apply_journal(ans, &covered);
        free(ans);
        if (n < 0) {
            log_msg(LOG_WARNING, "cluster %s: %s answered no journal", clu_name(c),
                    clu_member_name(c, i));
            continue;
        }
        answered++;
        STAT_INC(cluster_sync);
        min_cov = SRG_MIN(min_cov, covered);
        complete |= last > 0 && covered <= last;
        log_msg(LOG_INFO, "cluster %s: caught up from %s: %ld invalidations applied", clu_name(c),
                clu_member_name(c, i), n);
    }
    AZ(pthread_mutex_lock(&jnl_mtx));
    if (others > 0 && answered == 0) {
        /* What happened while this node was away is unknown here: its journal starts now. */
        jcovered = tim_real();
        record("C %.6f\n", jcovered);
    } else if (!complete && answered > 0) {
        jcovered = SRG_MAX(jcovered, min_cov);
        record("C %.6f\n", jcovered);
    }
    AZ(pthread_mutex_unlock(&jnl_mtx));
    if (others > 0 && answered == 0) {
        log_msg(LOG_WARNING,
                "cluster %s: no member answered: serving without catching up; what they hold "
                "for this node comes with their retries",
                clu_name(c));
    } else if (!complete && answered > 0) {
        /*
         * Everything cached now was fetched before the gap ended (this node
         * was away meanwhile, and serves nothing yet): it all goes, at once
         * and for good, before the first request.
         */
        unsigned np = clu_purge_all();
        if (last > 0) {
            STAT_INC(cluster_sync_gap);
            log_msg(LOG_WARNING,
                    "cluster %s: the members' journals start after this node last ran: the %u "
                    "objects it had are purged",
                    clu_name(c), np);
        } else if (np > 0) {
            log_msg(LOG_INFO,
                    "cluster %s: first start as %s: the %u objects it had before are purged",
                    clu_name(c), clu_self(c), np);
        }
    }
}

/*--------------------------------------------------------------------
 * The cluster thread: retries and upkeep.
 */

static struct obx *
obx_get(const char *name)
{
    for (unsigned i = 0; i < nobx; i++)
        if (strcmp(obx[i].name, name) == 0)
            return (&obx[i]);
    if (nobx == ARRAY_LEN(obx))
        return (NULL);
    snprintf(obx[nobx].name, sizeof obx[nobx].name, "%s", name);
    obx[nobx].next = 0;
    obx[nobx].backoff = 1;
    return (&obx[nobx++]);
}

/* Send member i what it is owed, oldest first, until one fails. */
static void
push(struct clu *c, unsigned i)
{
    const char *name = clu_member_name(c, i);
    char *body[PUSH_BATCH], id[PUSH_BATCH][CLU_ID_LEN + 1], *resp, whybuf[160];
    unsigned nb = 0, sent = 0;
    struct obx *ob;
    size_t rlen;
    struct sb why;
    struct jent *e;

    AZ(pthread_mutex_lock(&jnl_mtx));
    ob = obx_get(name);
    if (ob != NULL && !be_healthy(clu_member_be(c, i))) {
        /* Down: nothing to try until its probe sees it back, then at once. */
        ob->next = 0;
        ob->backoff = 1;
        AZ(pthread_mutex_unlock(&jnl_mtx));
        return;
    }
    if (ob == NULL || ob->next > tim_mono()) {
        AZ(pthread_mutex_unlock(&jnl_mtx));
        return;
    }
    for (e = jhead; e != NULL && nb < PUSH_BATCH; e = e->next) {
        if (!owes(e, name))
            continue;
        char *l = op_line(&e->op);
        size_t bl = strlen(l) + 5;
        body[nb] = malloc(bl);
        AN(body[nb]);
        snprintf(body[nb], bl, "op %s\n", l);
        free(l);
        strcpy(id[nb], e->op.id);
        nb++;
    }
    AZ(pthread_mutex_unlock(&jnl_mtx));
    for (; sent < nb; sent++) {
        sb_init(&why, whybuf, sizeof whybuf);
        if (clu__send(c, i, body[sent], strlen(body[sent]), tim_mono() + par.cluster_timeout, &resp,
                      &rlen, &why) != 0)
            break;
        free(resp);
        STAT_INC(cluster_inval_retried);
        AZ(pthread_mutex_lock(&jnl_mtx));
        if ((e = find(id[sent])) != NULL && owes(e, name)) {
            delivered(e, name);
            record("D %s %s\n", id[sent], name);
        }
        AZ(pthread_mutex_unlock(&jnl_mtx));
    }
    AZ(pthread_mutex_lock(&jnl_mtx));
    if (sent < nb) {
        ob->next = tim_mono() + ob->backoff;
        if (ob->backoff == 1 || sent > 0)
            log_msg(LOG_WARNING,
                    "cluster %s: %s still unreachable (%s): %u invalidations wait, "
                    "next try in %.0fs",
                    clu_name(c), name, whybuf, nb - sent, ob->backoff);
        ob->backoff = SRG_MIN(ob->backoff * 2, BACKOFF_MAX);
    } else {
        if (nb > 0)
            log_msg(LOG_INFO, "cluster %s: %u queued invalidations delivered to %s", clu_name(c),
                    nb, name);
        ob->next = 0;
        ob->backoff = 1;
    }
    AZ(pthread_mutex_unlock(&jnl_mtx));
    for (unsigned k = 0; k < nb; k++)
        free(body[k]);
}

/* Whether member `name` is owed anything. */
static bool
owed_to(const char *name)
{
    bool any = false;

    AZ(pthread_mutex_lock(&jnl_mtx));
    for (struct jent *e = jhead; e != NULL && !any; e = e->next)
        any = owes(e, name);
    AZ(pthread_mutex_unlock(&jnl_mtx));
    return (any);
}

static void *
cluster_thread(void *arg)
{
    struct timespec ts;
    struct clu *c;

    (void)arg;
    stat_thread_enter();
    AZ(pthread_mutex_lock(&jnl_mtx));
    while (!thr_stop) {
        AZ(clock_gettime(CLOCK_REALTIME, &ts));
        ts.tv_sec += 1;
        (void)pthread_cond_timedwait(&jnl_cv, &jnl_mtx, &ts);
        if (thr_stop)
            break;
        expire(tim_real());
        if (jopen && jlines > 2 * jcount + 1024 && rewrite() != 0)
            log_msg(LOG_ERR, "cluster: cannot rewrite %s: %s", JNL_PATH, strerror(errno));
        AZ(pthread_mutex_unlock(&jnl_mtx));
        c = pol_cluster();
        if (c != NULL) {
            alive_write();
            for (unsigned i = 0; i < clu_nmember(c); i++)
                if (i != clu_self_index(c) && owed_to(clu_member_name(c, i)))
                    push(c, i);
            clu_unref(&c);
        }
        AZ(pthread_mutex_lock(&jnl_mtx));
    }
    AZ(pthread_mutex_unlock(&jnl_mtx));
    stat_thread_leave();
    return (NULL);
}

int
clu_start(struct sb *err)
{
    struct clu *c = pol_cluster();
    double last;
    int rv = 0;

    AZ(pthread_mutex_lock(&jnl_mtx));
    if (c != NULL)
        rv = jnl_open(err);
    AZ(pthread_mutex_unlock(&jnl_mtx));
    if (rv != 0) {
        clu_unref(&c);
        return (-1);
    }
    if (c != NULL) {
        last = alive_read();
        sync_with(c, last);
        alive_write();
        clu_unref(&c);
    }
    __atomic_store_n(&ready, true, __ATOMIC_RELEASE);
    thr_stop = false;
    if (pthread_create(&thr, NULL, cluster_thread, NULL) != 0) {
        sb_printf(err, "cluster: cannot start its thread: %s", strerror(errno));
        return (-1);
    }
    thr_running = true;
    return (0);
}

void
clu_stop(void)
{
    if (thr_running) {
        AZ(pthread_mutex_lock(&jnl_mtx));
        thr_stop = true;
        AZ(pthread_cond_signal(&jnl_cv));
        AZ(pthread_mutex_unlock(&jnl_mtx));
        AZ(pthread_join(thr, NULL));
        thr_running = false;
    }
    AZ(pthread_mutex_lock(&jnl_mtx));
    if (jfd >= 0) {
        alive_write();
        (void)close(jfd);
    }
    jfd = -1;
    while (jhead != NULL) {
        struct jent *e = jhead;
        jhead = e->next;
        jent_free(e);
    }
    jtail = NULL;
    jcount = 0;
    memset(jhash, 0, sizeof jhash);
    nobx = 0;
    jopen = false;
    AZ(pthread_mutex_unlock(&jnl_mtx));
}

bool
clu_ready(void)
{
    return (__atomic_load_n(&ready, __ATOMIC_ACQUIRE));
}
