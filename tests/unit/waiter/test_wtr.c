/*
 * wtr: the waiter's deadlines.  Sessions parked with wtr_enter_until()
 * expire in deadline order whatever their parking order, each no earlier
 * than its deadline and at most a sweep (a second) later, answered with a
 * canned 408 and counted; one that turns readable first goes to a worker
 * with its kept bytes and is never expired afterwards; wtr_fini() closes
 * what is still parked.  Also the kept-input contract the transports rely
 * on: kept bytes are read before the socket's, and a session holding some
 * is not parked by wtr_enter() but run at once.  Watches (wtr_watch()):
 * a socket turning readable runs its task, not expired; one that does not
 * runs it at its deadline, expired, to the millisecond and in deadline
 * order; wtr_fini() drops what is still watched.  Takers (on one CPU): a
 * taker that keeps taking keeps its queue, in order, with no other worker
 * running beside it; one stuck in work that never blocks gives way.
 * Sessions stay in the set across parks: an event that comes while a
 * worker owns one is not lost, bytes a read left in the socket are looked
 * at again, an owned session never expires, one closed in the set is
 * never reached by a stale event, and one whose input streams while owned
 * leaves the set.
 *
 * The waiter thread and a real pool run; each session is one end of a
 * socketpair, the test holds the other (the client).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/acc.h"
#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/pool.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/wtr.h"

#define NMAX 1024 /* descriptors the sessions may have */

static struct lsock ls = { .magic = LSOCK_MAGIC, .fd = -1, .proto = "http" };
static bool started;

/* What the pool task saw, per session (the task's priv is the session). */
static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static unsigned ran;          /* under mtx */
static char seen[NMAX][64];   /* under mtx: the bytes each run read, by client index */
static int client_of[NMAX];   /* session descriptor -> index, set before parking */

/*
 * The pool task of a session that turned readable: read what is there
 * (kept bytes first, in small pieces to check the order), note it, close.
 */
static void
task(struct wrk *wrk, void *priv)
{
    struct sess *sp = priv;
    char buf[64], piece[3];
    size_t len = 0;
    ssize_t n;

    (void)wrk;
    OBJ_CHECK(sp, SESS_MAGIC);
    while (len + sizeof piece < sizeof buf) {
        n = sess_read_nb(sp, piece, sizeof piece);
        if (n <= 0)
            break;
        memcpy(buf + len, piece, (size_t)n);
        len += (size_t)n;
    }
    buf[len] = '\0';
    AZ(pthread_mutex_lock(&mtx));
    ran++;
    strcpy(seen[client_of[sp->fd]], buf);
    AZ(pthread_mutex_unlock(&mtx));
    sess_close(&sp);
}

static unsigned
runs(void)
{
    unsigned n;

    AZ(pthread_mutex_lock(&mtx));
    n = ran;
    AZ(pthread_mutex_unlock(&mtx));
    return (n);
}

/*
 * The waiter and a pool of `workers` running fn for each ready session;
 * timeout_linger `linger` seconds, or its default when negative.
 */
static void
start(unsigned workers, double linger, pool_task_f *fn)
{
    par_init();
    ck_assert_int_eq(stat_init(), 0); /* counts for this thread too */
    par.thread_pools = 1;
    par.thread_pool_min = workers;
    par.timeout_idle = 60;
    if (linger >= 0)
        par.timeout_linger = linger;
    ck_assert_int_eq(wtr_init(), 0);
    pool_set_idle_source(wtr_take);
    sess_set_task(fn, fn);
    ck_assert_int_eq(pool_init(), 0);
    started = true;
}

static void release_holds(void);

static void
setup(void)
{
    start(2, -1, task);
}

static void
stop(void)
{
    release_holds();
    if (!started)
        return;
    started = false;
    wtr_fini();
    pool_fini();
}

static void
teardown(void)
{
    stop();
    stat_fini();
    par_fini();
}

/* A session on one end of a socketpair; *client gets the other end. */
static struct sess *
new_sess(int *client, int index)
{
    struct sockaddr sa = { .sa_family = AF_UNIX };
    int sv[2];

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
    ck_assert_int_lt(sv[0], NMAX);
    client_of[sv[0]] = index;
    *client = sv[1];
    return (sess_new(sv[0], &ls, &sa));
}

/*
 * Read the client end until EOF or `tmo` seconds: the bytes into buf
 * (NUL-terminated), the time of the EOF returned (0 if none came).
 */
static double
wait_eof(int fd, char *buf, size_t size, double tmo)
{
    double end = tim_mono() + tmo;
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    size_t len = 0;
    ssize_t n;

    for (;;) {
        double left = end - tim_mono();
        if (left <= 0)
            break;
        if (poll(&pfd, 1, (int)(left * 1e3) + 1) <= 0)
            continue;
        n = read(fd, buf + len, size - 1 - len);
        if (n == 0 || (n < 0 && errno != EINTR)) {
            buf[len] = '\0';
            return (tim_mono());
        }
        if (n > 0)
            len += (size_t)n;
    }
    buf[len] = '\0';
    return (0);
}

START_TEST(deadline_answers_408)
{
    char buf[256];
    struct sess *sp;
    double t0, deadline, t_eof;
    int c;

    sp = new_sess(&c, 0);
    sess_keep_input(sp, "GET / HT", 8);
    ck_assert_uint_eq(stat_get(STAT_sess_kept_bytes), 8);
    t0 = tim_mono();
    deadline = t0 + 0.3;
    wtr_enter_until(&sp, deadline);
    ck_assert_ptr_null(sp);
    ck_assert_uint_eq(stat_get(STAT_sess_idle), 1);
    t_eof = wait_eof(c, buf, sizeof buf, 3);
    ck_assert_msg(t_eof > 0, "not closed within 3 s of a 0.3 s deadline");
    ck_assert_msg(t_eof >= deadline, "closed %.3f s before its deadline", deadline - t_eof);
    ck_assert_msg(t_eof <= deadline + 1.2, "closed %.3f s after its deadline", t_eof - deadline);
    ck_assert_msg(strncmp(buf, "HTTP/1.1 408 Request Timeout\r\n", 30) == 0, "got '%s'", buf);
    ck_assert_ptr_nonnull(strstr(buf, "Connection: close\r\n"));
    ck_assert_uint_eq(stat_get(STAT_sess_timeout_req), 1);
    ck_assert_uint_eq(stat_get(STAT_sess_timeout_idle), 0);
    ck_assert_uint_eq(stat_get(STAT_sess_idle), 0);
    /* freed with the session, just after the 408 and the shutdown the client saw */
    for (int i = 0; i < 100 && stat_get(STAT_sess_kept_bytes) != 0; i++)
        usleep(10000);
    ck_assert_uint_eq(stat_get(STAT_sess_kept_bytes), 0);
    ck_assert_uint_eq(runs(), 0);
    close(c);
}
END_TEST

START_TEST(deadline_order_not_park_order)
{
    /* Parked late-first; an idle session beside them must outlive them all. */
    static const double after[3] = { 2.7, 0.3, 1.5 };
    double t0 = tim_mono(), t_eof[3];
    struct sess *sp;
    char buf[256];
    int c[4];

    for (int i = 0; i < 3; i++) {
        sp = new_sess(&c[i], i);
        wtr_enter_until(&sp, t0 + after[i]);
    }
    sp = new_sess(&c[3], 3);
    wtr_enter(&sp);
    for (int i = 0; i < 3; i++) {
        /* in deadline order: 1, 2, 0 */
        int k = (i + 1) % 3;
        t_eof[k] = wait_eof(c[k], buf, sizeof buf, 5);
        ck_assert_msg(t_eof[k] > 0, "session %d (deadline +%.1f s) never closed", k, after[k]);
        ck_assert_msg(t_eof[k] >= t0 + after[k], "session %d closed %.3f s early", k,
                      t0 + after[k] - t_eof[k]);
        ck_assert_msg(t_eof[k] <= t0 + after[k] + 1.2, "session %d closed %.3f s late", k,
                      t_eof[k] - t0 - after[k]);
        ck_assert_msg(strncmp(buf, "HTTP/1.1 408 ", 13) == 0, "session %d got '%s'", k, buf);
    }
    ck_assert(t_eof[1] < t_eof[2] && t_eof[2] < t_eof[0]);
    ck_assert_uint_eq(stat_get(STAT_sess_timeout_req), 3);
    /* the idle one is on the other list, with timeout_idle's 60 s */
    ck_assert_double_eq(wait_eof(c[3], buf, sizeof buf, 0.2), 0);
    ck_assert_uint_eq(stat_get(STAT_sess_idle), 1);
    for (int i = 0; i < 4; i++)
        close(c[i]);
}
END_TEST

START_TEST(readable_before_deadline)
{
    struct sess *sp;
    char buf[64];
    int c;

    sp = new_sess(&c, 5);
    sess_keep_input(sp, "GET / HT", 8);
    wtr_enter_until(&sp, tim_mono() + 0.5);
    ck_assert_int_eq(write(c, "TP/1.1\r\n", 8), 8);
    for (int i = 0; i < 300 && runs() == 0; i++)
        usleep(10000);
    ck_assert_uint_eq(runs(), 1);
    /* kept bytes first, then the socket's, as one stream */
    ck_assert_str_eq(seen[5], "GET / HTTP/1.1\r\n");
    /* taken off the heap: its deadline passes without a 408 */
    ck_assert_double_ne(wait_eof(c, buf, sizeof buf, 2), 0);
    ck_assert_str_eq(buf, "");
    ck_assert_uint_eq(stat_get(STAT_sess_timeout_req), 0);
    ck_assert_uint_eq(stat_get(STAT_sess_kept_bytes), 0);
    close(c);
}
END_TEST

START_TEST(heap_under_churn)
{
    enum { N = 200 };
    double t0 = tim_mono(), dl[N], t_eof;
    struct sess *sp;
    char buf[256];
    int c[N], expired = 0;

    srand(7);
    for (int i = 0; i < N; i++) {
        dl[i] = t0 + 0.4 + (double)(rand() % 1200) / 1000.0;
        sp = new_sess(&c[i], i);
        wtr_enter_until(&sp, dl[i]);
    }
    /* every other session turns readable before its deadline, in scrambled order */
    for (int i = 0; i < N; i += 2) {
        int k = (i * 37) % N;
        ck_assert_int_eq(write(c[k], "x", 1), 1);
    }
    for (int i = 0; i < N; i++) {
        t_eof = wait_eof(c[i], buf, sizeof buf, 4);
        ck_assert_msg(t_eof > 0, "session %d never closed", i);
        if (i % 2 == 0) {
            ck_assert_str_eq(buf, "");
            continue;
        }
        expired++;
        ck_assert_msg(t_eof >= dl[i], "session %d closed %.3f s early", i, dl[i] - t_eof);
        ck_assert_msg(t_eof <= dl[i] + 1.3, "session %d closed %.3f s late", i, t_eof - dl[i]);
        ck_assert_msg(strncmp(buf, "HTTP/1.1 408 ", 13) == 0, "session %d got '%s'", i, buf);
    }
    ck_assert_int_eq(expired, N / 2);
    ck_assert_uint_eq(runs(), N / 2);
    ck_assert_uint_eq(stat_get(STAT_sess_timeout_req), N / 2);
    ck_assert_uint_eq(stat_get(STAT_sess_idle), 0);
    for (int i = 0; i < N; i++)
        close(c[i]);
}
END_TEST

START_TEST(kept_input_is_ready_at_once)
{
    struct sess *sp;
    int c;

    /* Bytes read ahead of the request (after a PROXY header, say): no socket byte needed. */
    sp = new_sess(&c, 9);
    sess_keep_input(sp, "GET /a HTTP/1.0\r\n\r\n", 19);
    ck_assert(sess_pending(sp));
    wtr_enter(&sp);
    for (int i = 0; i < 300 && runs() == 0; i++)
        usleep(10000);
    ck_assert_uint_eq(runs(), 1);
    ck_assert_str_eq(seen[9], "GET /a HTTP/1.0\r\n\r\n");
    ck_assert_uint_eq(stat_get(STAT_sess_waited), 0);
    close(c);
}
END_TEST

START_TEST(fini_closes_what_waits)
{
    struct sess *sp;
    char buf[64];
    int c[2];

    sp = new_sess(&c[0], 0);
    sess_keep_input(sp, "GET", 3);
    wtr_enter_until(&sp, tim_mono() + 60);
    sp = new_sess(&c[1], 1);
    wtr_enter(&sp);
    ck_assert_uint_eq(stat_get(STAT_sess_idle), 2);
    stop();
    for (int i = 0; i < 2; i++) {
        ck_assert_double_ne(wait_eof(c[i], buf, sizeof buf, 1), 0);
        close(c[i]);
    }
    ck_assert_uint_eq(stat_get(STAT_sess_idle), 0);
    ck_assert_uint_eq(stat_get(STAT_sess_kept_bytes), 0);
    ck_assert_uint_eq(stat_get(STAT_sess_timeout_req), 0);
}
END_TEST

/* Watches: what each task saw, by index. */
#define WMAX 8
static struct wtr_watch watches[WMAX];
static struct pool_task wtasks[WMAX];
static double w_ran_at[WMAX];    /* under mtx */
static bool w_expired[WMAX];     /* under mtx */
static unsigned w_order[WMAX];   /* under mtx: indexes in the order the tasks ran */
static unsigned w_runs, w_drops; /* under mtx */

static void
watch_task(struct wrk *wrk, void *priv)
{
    struct wtr_watch *w = priv;
    unsigned i = (unsigned)(w - watches);

    (void)wrk;
    OBJ_CHECK(w, WTR_WATCH_MAGIC);
    AZ(pthread_mutex_lock(&mtx));
    w_ran_at[i] = tim_mono();
    w_expired[i] = w->expired;
    w_order[w_runs++] = i;
    AZ(pthread_mutex_unlock(&mtx));
}

static void
watch_drop(struct wtr_watch *w)
{
    OBJ_CHECK(w, WTR_WATCH_MAGIC);
    AZ(pthread_mutex_lock(&mtx));
    w_drops++;
    AZ(pthread_mutex_unlock(&mtx));
}

/* Watch fd as watches[i], due `in` seconds from now. */
static void
watch(unsigned i, int fd, double in)
{
    struct wtr_watch *w = &watches[i];

    memset(w, 0, sizeof *w);
    w->magic = WTR_WATCH_MAGIC;
    w->fd = fd;
    w->deadline = tim_mono() + in;
    wtasks[i] = (struct pool_task){ .func = watch_task, .priv = w };
    w->task = &wtasks[i];
    w->drop = watch_drop;
    ck_assert_int_eq(wtr_watch(w), 0);
}

static unsigned
watch_runs(double tmo)
{
    double end = tim_mono() + tmo;
    unsigned n;

    for (;;) {
        AZ(pthread_mutex_lock(&mtx));
        n = w_runs;
        AZ(pthread_mutex_unlock(&mtx));
        if (tim_mono() > end)
            return (n);
        usleep(2000);
    }
}

START_TEST(watch_readable_runs_task)
{
    int sv[2];
    double t0;

    w_runs = w_drops = 0;
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    watch(0, sv[0], 10);
    ck_assert_uint_eq(watch_runs(0.1), 0);
    t0 = tim_mono();
    ck_assert_int_eq(write(sv[1], "x", 1), 1);
    ck_assert_uint_eq(watch_runs(0.2), 1);
    ck_assert(!w_expired[0]);
    ck_assert_double_lt(w_ran_at[0] - t0, 0.1);
    /* Watched again, the same socket: re-armed, and runs again (its byte is still there). */
    watch(0, sv[0], 10);
    ck_assert_uint_eq(watch_runs(0.2), 2);
    ck_assert(!w_expired[0]);
    ck_assert_uint_eq(w_drops, 0);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

START_TEST(watch_deadline_exact_and_in_order)
{
    static const double in[3] = { 0.3, 0.1, 0.2 };
    double due[3];
    int sv[3][2];

    w_runs = w_drops = 0;
    for (unsigned i = 0; i < 3; i++) {
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv[i]), 0);
        watch(i, sv[i][0], in[i]);
        due[i] = watches[i].deadline;
    }
    ck_assert_uint_eq(watch_runs(0.6), 3);
    ck_assert_uint_eq(w_order[0], 1);
    ck_assert_uint_eq(w_order[1], 2);
    ck_assert_uint_eq(w_order[2], 0);
    for (unsigned i = 0; i < 3; i++) {
        ck_assert(w_expired[i]);
        ck_assert_double_ge(w_ran_at[i], due[i]);
        /* The timer, not a sweep of once a second. */
        ck_assert_double_lt(w_ran_at[i], due[i] + 0.05);
        close(sv[i][0]);
        close(sv[i][1]);
    }
    ck_assert_uint_eq(w_drops, 0);
}
END_TEST

START_TEST(watch_fini_drops)
{
    int sv[2];

    w_runs = w_drops = 0;
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    watch(0, sv[0], 60);
    stop();
    ck_assert_uint_eq(w_drops, 1);
    ck_assert_uint_eq(w_runs, 0);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

/*
 * Takers.  The pool and the waiter on one CPU (taker_cap 1): a worker that
 * ran a task lingers in the set and takes what turns ready.  Each session's
 * task spins for its client's spin_ms[] (CPU work that says nothing of
 * blocking: a long policy script), notes which thread ran it, in what
 * order, and how many tasks were running at once, then closes it.
 */
#define NT    12
#define NTMAX 401
static double spin_ms[NTMAX];
static pthread_t ran_on[NTMAX]; /* under mtx */
static double ran_at[NTMAX];    /* under mtx: when each task started */
static unsigned order[NTMAX];   /* under mtx: client indexes in the order they ran */
static unsigned inflight, inflight_max; /* under mtx */
static bool spin_yield; /* the spinning task yields the CPU to any thread waiting for it */

static void
spin_task(struct wrk *wrk, void *priv)
{
    struct sess *sp = priv;
    int i = client_of[sp->fd];
    double end;
    char buf[8];

    (void)wrk;
    AZ(pthread_mutex_lock(&mtx));
    ran_on[i] = pthread_self();
    ran_at[i] = tim_mono();
    order[ran++] = (unsigned)i;
    if (++inflight > inflight_max)
        inflight_max = inflight;
    AZ(pthread_mutex_unlock(&mtx));
    for (end = tim_mono() + spin_ms[i] * 1e-3; tim_mono() < end;)
        if (spin_yield)
            (void)sched_yield();
    (void)sess_read_nb(sp, buf, sizeof buf);
    AZ(pthread_mutex_lock(&mtx));
    inflight--;
    AZ(pthread_mutex_unlock(&mtx));
    sess_close(&sp);
}

static void
setup_one_cpu(void)
{
    cpu_set_t one;
    int cpu = sched_getcpu();

    CPU_ZERO(&one);
    CPU_SET(cpu < 0 ? 0 : cpu, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof one, &one), 0); /* the workers inherit it */
    ran = inflight = inflight_max = 0;
    spin_yield = false;
    start(8, 2, spin_task); /* a 2 s linger: the taker stays one for the whole test */
}

static void
wait_runs(unsigned n, double tmo)
{
    for (double end = tim_mono() + tmo; runs() < n && tim_mono() < end;)
        usleep(1000);
    ck_assert_uint_eq(runs(), n);
}

/*
 * Session 0 makes a taker; then sessions 1 .. n - 1 turn ready, all at
 * once or one every `pace` microseconds.  The taker must serve them all:
 * one task at a time, all on its thread, in the order they turned ready.
 * *looks gets the waiter's looks from the first of them to the last run
 * (and a look due after it), *took the time that took.
 */
static void
one_taker_serves(int n, unsigned pace, uint64_t *looks, double *took)
{
    struct sess *sp[NTMAX];
    int c[NTMAX];
    double t0;

    SRG_ASSERT(n <= NTMAX);
    for (int i = 0; i < n; i++) {
        spin_ms[i] = i == 0 ? 0 : 0.25;
        sp[i] = new_sess(&c[i], i);
        wtr_enter(&sp[i]);
    }
    ck_assert_int_eq(write(c[0], "x", 1), 1);
    wait_runs(1, 2);
    usleep(20000); /* its worker is back in the set, lingering */
    *looks = stat_get(STAT_wtr_looks);
    t0 = tim_mono();
    for (int i = 1; i < n; i++) {
        ck_assert_int_eq(write(c[i], "x", 1), 1);
        if (pace > 0)
            usleep(pace);
    }
    wait_runs((unsigned)n, 5);
    *took = tim_mono() - t0;
    usleep(20000); /* the last look, if one was due */
    *looks = stat_get(STAT_wtr_looks) - *looks;
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_uint_eq(inflight_max, 1);
    for (int i = 1; i < n; i++) {
        ck_assert_msg(pthread_equal(ran_on[i], ran_on[0]), "session %d ran on another worker",
                      i);
        ck_assert_uint_eq(order[i], (unsigned)i);
    }
    AZ(pthread_mutex_unlock(&mtx));
    for (int i = 0; i < n; i++)
        close(c[i]);
}

/*
 * Session 0 makes a taker.  Then NT - 1 sessions turn ready at once,
 * 0.25 ms of work each (a request, not a stuck one): 2.75 ms of queue,
 * more than twice the waiter's deferral (and short of WTR_DEFER_BUSY with
 * the CPU shared ten ways).  The taker keeps taking, so none may go to
 * another worker (it would run beside the taker on the same CPU and slow
 * both): one task at a time, all on the taker's thread, in the order they
 * turned ready.
 */
START_TEST(taker_keeps_its_queue)
{
    uint64_t looks;
    double took;

    one_taker_serves(NT, 0, &looks, &took);
}
END_TEST

/*
 * A taker that keeps taking is looked at less and less often.  NTMAX - 1
 * sessions of 0.25 ms of work each turn ready one after the other, a
 * little slower than the taker serves them (about 200 ms in all, never
 * queued as long as WTR_DEFER_BUSY).  The taker serves them all, in
 * order, alone; and the waiter, whose every look preempts the taker on
 * its CPU, looks once in 8 ms or so, not once in 4 ms as it did with a
 * millisecond's deferral (which the scheduler stretched to that): the
 * assertion is a look in 5.5 ms at most.  The work yields the CPU
 * whenever another thread wants it, so that the looks come when the
 * waiter asks for them, not when the scheduler's slice ends.
 */
START_TEST(keeping_taker_is_looked_at_seldom)
{
    uint64_t looks;
    double took;

    spin_yield = true;
    one_taker_serves(NTMAX, 400, &looks, &took);
    ck_assert_uint_ge(looks, 1);
    ck_assert_msg(looks * 0.0055 <= took, "%u looks in %.1f ms", (unsigned)looks, took * 1e3);
}
END_TEST

/*
 * A taker stuck in 300 ms of work that never blocks takes nothing else:
 * the session that turns ready meanwhile goes to another worker within
 * a few deferrals, not after the 300 ms.
 */
START_TEST(stuck_taker_gives_way)
{
    struct sess *sp[3];
    double t_ready;
    int c[3];

    spin_ms[0] = 0;
    spin_ms[1] = 300;
    spin_ms[2] = 0;
    for (int i = 0; i < 3; i++) {
        sp[i] = new_sess(&c[i], i);
        wtr_enter(&sp[i]);
    }
    ck_assert_int_eq(write(c[0], "x", 1), 1);
    wait_runs(1, 2);
    usleep(20000);
    ck_assert_int_eq(write(c[1], "x", 1), 1);
    wait_runs(2, 2);
    usleep(5000); /* the taker is in session 1's work */
    t_ready = tim_mono();
    ck_assert_int_eq(write(c[2], "x", 1), 1);
    wait_runs(3, 2);
    AZ(pthread_mutex_lock(&mtx));
    ck_assert(pthread_equal(ran_on[1], ran_on[0]));
    ck_assert(!pthread_equal(ran_on[2], ran_on[1]));
    ck_assert_double_lt(ran_at[2] - t_ready, 0.1);
    ck_assert_uint_eq(inflight_max, 2);
    AZ(pthread_mutex_unlock(&mtx));
    for (int i = 0; i < 3; i++)
        close(c[i]);
}
END_TEST

/*
 * Sessions that stay in the set across parks.  The hold task reads what
 * the test asks of it (h_read bytes in one read, or all there is when 0),
 * tells the test what it read, waits until the test lets it go (h_hold),
 * then parks the session again or closes it (h_close).
 */
static pthread_cond_t h_cv = PTHREAD_COND_INITIALIZER;
static size_t h_read;      /* under mtx */
static bool h_hold;        /* under mtx: wait for h_go before handing it back */
static bool h_go;          /* under mtx */
static bool h_close;       /* under mtx: close instead of parking */
static unsigned h_held;    /* under mtx: runs that reached the hold */
static char h_seen[16][8]; /* under mtx: what run i read */

static void
hold_task(struct wrk *wrk, void *priv)
{
    struct sess *sp = priv;
    char buf[8];
    size_t len = 0;
    ssize_t n;
    unsigned run;

    (void)wrk;
    OBJ_CHECK(sp, SESS_MAGIC);
    AZ(pthread_mutex_lock(&mtx));
    if (h_read > 0) {
        n = sess_read_nb(sp, buf, h_read);
        len = n > 0 ? (size_t)n : 0;
    } else {
        while (len < sizeof buf - 1 && (n = sess_read_nb(sp, buf + len, sizeof buf - 1 - len)) > 0)
            len += (size_t)n;
    }
    buf[len] = '\0';
    run = ran++;
    if (run < 16)
        strcpy(h_seen[run], buf);
    h_held++;
    AZ(pthread_cond_broadcast(&h_cv));
    while (h_hold && !h_go)
        AZ(pthread_cond_wait(&h_cv, &mtx));
    h_go = false;
    if (h_close) {
        AZ(pthread_mutex_unlock(&mtx));
        sess_close(&sp);
        return;
    }
    AZ(pthread_mutex_unlock(&mtx));
    sp->t_idle = tim_mono();
    wtr_enter(&sp);
}

static void
hold_setup(size_t read_len, bool hold, bool close_it)
{
    AZ(pthread_mutex_lock(&mtx));
    ran = h_held = 0;
    h_read = read_len;
    h_hold = hold;
    h_go = false;
    h_close = close_it;
    memset(h_seen, 0, sizeof h_seen);
    AZ(pthread_mutex_unlock(&mtx));
    sess_set_task(hold_task, hold_task);
}

/* Wait up to tmo seconds for the hold task to have reached its hold n times. */
static bool
held(unsigned n, double tmo)
{
    double end = tim_mono() + tmo;
    bool ok;

    AZ(pthread_mutex_lock(&mtx));
    while (h_held < n && tim_mono() < end) {
        AZ(pthread_mutex_unlock(&mtx));
        usleep(2000);
        AZ(pthread_mutex_lock(&mtx));
    }
    ok = h_held >= n;
    AZ(pthread_mutex_unlock(&mtx));
    return (ok);
}

/* Teardown: no hold task may keep a worker (pool_fini() waits for them). */
static void
release_holds(void)
{
    AZ(pthread_mutex_lock(&mtx));
    h_hold = false;
    AZ(pthread_cond_broadcast(&h_cv));
    AZ(pthread_mutex_unlock(&mtx));
}

static void
let_go(void)
{
    AZ(pthread_mutex_lock(&mtx));
    h_go = true;
    AZ(pthread_cond_broadcast(&h_cv));
    AZ(pthread_mutex_unlock(&mtx));
}

/* A session parked, woken by the byte "a" and held by its task; the client end returned. */
static int
owned_sess(void)
{
    struct sess *sp;
    int c;

    sp = new_sess(&c, 0);
    wtr_enter(&sp);
    ck_assert_int_eq(write(c, "a", 1), 1);
    ck_assert(held(1, 3));
    return (c);
}

START_TEST(event_while_owned_is_not_lost)
{
    int c;

    hold_setup(0, true, false);
    c = owned_sess();
    /*
     * The session is owned, its socket emptied (the read came back
     * short): this byte's event comes while nobody may claim it.  The
     * owner hands the session back without reading it; the set will
     * report no new edge, so only the noted event can run it again.
     */
    ck_assert_int_eq(write(c, "b", 1), 1);
    usleep(50000);
    let_go();
    ck_assert(held(2, 3));
    ck_assert_str_eq(h_seen[0], "a");
    ck_assert_str_eq(h_seen[1], "b");
    ck_assert_uint_eq(stat_get(STAT_sess_wtr_pending), 1);
    /* Parked again with nothing pending: it waits, and runs at the next byte. */
    let_go();
    usleep(100000);
    ck_assert_uint_eq(runs(), 2);
    ck_assert_int_eq(write(c, "c", 1), 1);
    ck_assert(held(3, 3));
    ck_assert_str_eq(h_seen[2], "c");
    let_go();
    close(c);
}
END_TEST

START_TEST(bytes_left_unread_are_looked_at_again)
{
    struct sess *sp;
    int c;

    /* One byte read of two: the read filled what it asked for, so bytes may be left. */
    hold_setup(1, false, false);
    sp = new_sess(&c, 0);
    wtr_enter(&sp);
    ck_assert_int_eq(write(c, "ab", 2), 2);
    ck_assert(held(2, 3));
    ck_assert_str_eq(h_seen[0], "a");
    ck_assert_str_eq(h_seen[1], "b");
    /* The second read emptied the socket: parked for good until a byte comes. */
    usleep(100000);
    ck_assert_uint_le(runs(), 3); /* at most one more run, which read nothing */
    close(c);
}
END_TEST

START_TEST(owned_session_never_expires)
{
    char buf[64];
    double t_park, t_eof;
    int c;

    par.timeout_idle = 1;
    hold_setup(0, true, false);
    c = owned_sess();
    /* Owned past timeout_idle, through two sweeps or more: the sweep leaves it alone. */
    ck_assert_double_eq(wait_eof(c, buf, sizeof buf, 2.5), 0);
    ck_assert_uint_eq(stat_get(STAT_sess_timeout_idle), 0);
    t_park = tim_mono();
    let_go();
    /* Parked again, it idles from then on and expires timeout_idle later. */
    t_eof = wait_eof(c, buf, sizeof buf, 4);
    ck_assert_double_ne(t_eof, 0);
    ck_assert_double_ge(t_eof - t_park, 0.9);
    ck_assert_double_le(t_eof - t_park, 2.3);
    ck_assert_uint_eq(stat_get(STAT_sess_timeout_idle), 1);
    ck_assert_uint_eq(runs(), 1);
    close(c);
}
END_TEST

START_TEST(closed_while_in_the_set)
{
    enum { N = 300 };
    struct sess *sp;
    char buf[8];
    int c;

    /*
     * Sessions in the set closed by their owner while bytes keep coming:
     * events taken from the set around the close name a slot whose
     * generation moved on (under ASan, one reaching the freed session
     * would fail).  Their descriptors and slots are reused at once.
     */
    hold_setup(0, false, true);
    for (int i = 0; i < N; i++) {
        sp = new_sess(&c, 0);
        wtr_enter(&sp);
        ck_assert_int_eq(write(c, "a", 1), 1);
        (void)send(c, "b", 1, MSG_NOSIGNAL); /* the session may be closed by now */
        (void)send(c, "c", 1, MSG_NOSIGNAL);
        ck_assert_double_ne(wait_eof(c, buf, sizeof buf, 3), 0);
        close(c);
    }
    ck_assert_uint_ge(runs(), N);
    ck_assert_uint_le(runs(), N);
    /*
     * A new session on a reused descriptor and slot starts clean: nothing
     * pending from its predecessor, it waits for its own first byte.
     */
    hold_setup(0, true, true);
    c = owned_sess();
    ck_assert_int_eq(write(c, "b", 1), 1); /* pending on the owned session */
    usleep(50000);
    let_go();                              /* which its owner closes */
    ck_assert_double_ne(wait_eof(c, buf, sizeof buf, 3), 0);
    close(c);
    hold_setup(0, true, false);
    sp = new_sess(&c, 0);
    wtr_enter(&sp);
    usleep(200000);
    ck_assert_uint_eq(runs(), 0);
    ck_assert_uint_eq(stat_get(STAT_sess_idle), 1);
    close(c); /* EOF: runs, reads nothing */
    ck_assert(held(1, 3));
    let_go();
}
END_TEST

START_TEST(stream_while_owned_leaves_the_set)
{
    int c;

    hold_setup(0, true, false);
    c = owned_sess();
    /* Input keeps coming while it is owned (a body, a tunnel): out of the set after a few. */
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(write(c, "x", 1), 1);
        usleep(20000);
    }
    ck_assert_uint_eq(stat_get(STAT_sess_wtr_out), 1);
    let_go(); /* parked: added back, and what is there is reported */
    ck_assert(held(2, 3));
    ck_assert_str_eq(h_seen[1], "xxxxxx");
    let_go();
    usleep(100000);
    ck_assert_int_eq(write(c, "y", 1), 1);
    ck_assert(held(3, 3));
    ck_assert_str_eq(h_seen[2], "y");
    let_go();
    close(c);
}
END_TEST

Suite *
wtr_suite(void)
{
    Suite *s = suite_create("wtr");
    TCase *tc = tcase_create("deadlines");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, deadline_answers_408);
    tcase_add_test(tc, deadline_order_not_park_order);
    tcase_add_test(tc, readable_before_deadline);
    tcase_add_test(tc, heap_under_churn);
    tcase_add_test(tc, kept_input_is_ready_at_once);
    tcase_add_test(tc, fini_closes_what_waits);
    tcase_add_test(tc, watch_readable_runs_task);
    tcase_add_test(tc, watch_deadline_exact_and_in_order);
    tcase_add_test(tc, watch_fini_drops);
    suite_add_tcase(s, tc);
    tc = tcase_create("takers");
    tcase_add_checked_fixture(tc, setup_one_cpu, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, taker_keeps_its_queue);
    tcase_add_test(tc, keeping_taker_is_looked_at_seldom);
    tcase_add_test(tc, stuck_taker_gives_way);
    suite_add_tcase(s, tc);
    tc = tcase_create("registered");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, event_while_owned_is_not_lost);
    tcase_add_test(tc, bytes_left_unread_are_looked_at_again);
    tcase_add_test(tc, owned_session_never_expires);
    tcase_add_test(tc, closed_while_in_the_set);
    tcase_add_test(tc, stream_while_owned_leaves_the_set);
    suite_add_tcase(s, tc);
    return (s);
}
