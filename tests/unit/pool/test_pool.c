/*
 * pool: worker threads fed by bounded priority queues, and what a worker
 * owns (wrk.h).  Tasks run on a worker with its workspace reset between
 * them; a full queue refuses client requests and background work but
 * never fetches or resumed requests; queued tasks run in priority order;
 * a pool grows to thread_pool_max while tasks wait and shrinks back to
 * thread_pool_min after thread_pool_timeout; pool_busy() counts running
 * and queued tasks; registered slots run on every worker (init, idle,
 * fini in reverse order); a parked request's memory moves from one worker
 * to another (wrk_mem_take/give/free); and overload as a client sees it:
 * a session the full queue refuses gets the canned 503 with Retry-After
 * at once, from the thread that scheduled it, and is closed.
 *
 * A gate holds tasks on their workers, so that the test decides when the
 * pool is busy; every wait is bounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/acc.h"
#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/pool.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

/* Longest a test waits for the pool to do something (a test that went wrong). */
#define WAIT_S 5.0

static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static bool gate_open;   /* under mtx: held tasks go on */
static unsigned held;    /* under mtx: tasks waiting at the gate now */
static unsigned ran;     /* under mtx: tasks that ended */
static unsigned maxheld; /* under mtx: most tasks at the gate at once */
static int order[64];    /* under mtx: the ids of tasks, as they ran */
static unsigned norder;
static bool started;

struct job {
    struct pool_task task;
    int id;
    bool hold; /* wait at the gate */
};

static void
job_run(struct wrk *wrk, void *priv)
{
    struct job *j = priv;
    struct timespec ts;

    OBJ_CHECK(wrk, WRK_MAGIC);
    AZ(pthread_mutex_lock(&mtx));
    if (norder < ARRAY_LEN(order))
        order[norder++] = j->id;
    if (j->hold) {
        held++;
        if (held > maxheld)
            maxheld = held;
        AZ(pthread_cond_broadcast(&cv));
        AZ(clock_gettime(CLOCK_REALTIME, &ts));
        ts.tv_sec += (time_t)WAIT_S * 2;
        while (!gate_open && pthread_cond_timedwait(&cv, &mtx, &ts) == 0)
            continue;
        held--;
    }
    ran++;
    AZ(pthread_cond_broadcast(&cv));
    AZ(pthread_mutex_unlock(&mtx));
}

static void
job_init(struct job *j, int id, bool hold)
{
    memset(j, 0, sizeof *j);
    j->task.func = job_run;
    j->task.priv = j;
    j->id = id;
    j->hold = hold;
}

/* Wait under mtx until *v reaches want, at most WAIT_S: what it is then. */
static unsigned
wait_for(const unsigned *v, unsigned want)
{
    struct timespec ts;
    unsigned got;

    AZ(clock_gettime(CLOCK_REALTIME, &ts));
    ts.tv_sec += (time_t)WAIT_S;
    AZ(pthread_mutex_lock(&mtx));
    while (*v < want && pthread_cond_timedwait(&cv, &mtx, &ts) == 0)
        continue;
    got = *v;
    AZ(pthread_mutex_unlock(&mtx));
    return (got);
}

static void
gate_release(void)
{
    AZ(pthread_mutex_lock(&mtx));
    gate_open = true;
    AZ(pthread_cond_broadcast(&cv));
    AZ(pthread_mutex_unlock(&mtx));
}

/* Poll f() until it returns want, at most WAIT_S; what it returned last. */
static unsigned
poll_for(unsigned (*f)(void), unsigned want)
{
    double end = tim_mono() + WAIT_S;
    unsigned got;

    while ((got = f()) != want && tim_mono() < end)
        usleep(1000);
    return (got);
}

static unsigned
threads(void)
{
    return ((unsigned)stat_get(STAT_threads));
}

static void
setup(void)
{
    par_init();
    AZ(stat_init());
    par.thread_pools = 1;
    par.thread_pool_min = 1;
    par.thread_pool_max = 1;
    gate_open = false;
    held = ran = maxheld = norder = 0;
    started = false;
}

static void
start(void)
{
    ck_assert_int_eq(pool_init(), 0);
    started = true;
    /* Its workers started and went idle: nothing is busy. */
    ck_assert_uint_eq(poll_for(pool_busy, 0), 0);
    ck_assert_uint_eq(poll_for(threads, par.thread_pools * par.thread_pool_min),
                      par.thread_pools * par.thread_pool_min);
}

static void
teardown(void)
{
    gate_release();
    if (started)
        pool_fini();
    stat_fini();
    par_fini();
}

/* ---- tasks ---- */

struct ws_job {
    struct pool_task task;
    size_t free_at_start; /* what the task found free in its workspace */
    struct wrk *wrk;
};

static void
ws_task(struct wrk *wrk, void *priv)
{
    struct ws_job *j = priv;

    AZ(pthread_mutex_lock(&mtx));
    j->wrk = wrk;
    j->free_at_start = ws_free_bytes(&wrk->ws);
    /* Used up by this task: the next one must find it reset. */
    AN(ws_alloc(&wrk->ws, 1000));
    ran++;
    AZ(pthread_cond_broadcast(&cv));
    AZ(pthread_mutex_unlock(&mtx));
}

/* Every task runs, on a worker whose workspace is whole again at the start of each. */
START_TEST(tasks_run)
{
    static struct ws_job j[50];

    par.thread_pool_min = 2;
    par.thread_pool_max = 2;
    start();
    for (unsigned i = 0; i < ARRAY_LEN(j); i++) {
        memset(&j[i], 0, sizeof j[i]);
        j[i].task = (struct pool_task){ .func = ws_task, .priv = &j[i] };
        ck_assert_int_eq(pool_submit(pool_pick(), &j[i].task, POOL_PRIO_REQ), 0);
    }
    ck_assert_uint_eq(wait_for(&ran, ARRAY_LEN(j)), ARRAY_LEN(j));
    for (unsigned i = 0; i < ARRAY_LEN(j); i++) {
        ck_assert_ptr_nonnull(j[i].wrk);
        ck_assert_uint_eq(j[i].free_at_start, j[i].wrk->ws_size);
        ck_assert_uint_eq(j[i].wrk->ws_size, par.workspace_client);
    }
    ck_assert_uint_eq(poll_for(pool_busy, 0), 0);
}
END_TEST

/* ---- the queue's bounds and order ---- */

/* The one worker holds a task at the gate: whatever comes next waits in the queue. */
static void
occupy(struct job *blocker)
{
    job_init(blocker, -1, true);
    ck_assert_int_eq(pool_submit(pool_pick(), &blocker->task, POOL_PRIO_REQ), 0);
    ck_assert_uint_eq(wait_for(&held, 1), 1);
}

/*
 * thread_queue_limit tasks of a priority wait: the next client request
 * is refused, as is background work past its own limit; fetches and
 * resumed requests are admitted whatever waits.  Every admitted task
 * runs once the worker is free.
 */
START_TEST(full_queue_refuses_requests_only)
{
    static struct job blocker, req[4], bg[4], fetch[20], resume[20];
    unsigned admitted = 1;
    struct pool *pp;

    par.thread_queue_limit = 3;
    start();
    pp = pool_pick();
    occupy(&blocker);
    for (unsigned i = 0; i < ARRAY_LEN(req); i++) {
        job_init(&req[i], 100 + (int)i, false);
        ck_assert_int_eq(pool_submit(pp, &req[i].task, POOL_PRIO_REQ), i < 3 ? 0 : -1);
        job_init(&bg[i], 200 + (int)i, false);
        ck_assert_int_eq(pool_submit(pp, &bg[i].task, POOL_PRIO_BG), i < 3 ? 0 : -1);
    }
    admitted += 6;
    for (unsigned i = 0; i < ARRAY_LEN(fetch); i++) {
        job_init(&fetch[i], 300 + (int)i, false);
        ck_assert_int_eq(pool_submit(pp, &fetch[i].task, POOL_PRIO_FETCH), 0);
        job_init(&resume[i], 400 + (int)i, false);
        ck_assert_int_eq(pool_submit(pp, &resume[i].task, POOL_PRIO_RESUME), 0);
    }
    admitted += 40;
    /* Still full for requests: fetches and resumes do not count against them, nor free them. */
    ck_assert_int_eq(pool_submit(pp, &req[3].task, POOL_PRIO_REQ), -1);
    ck_assert_uint_eq(pool_busy(), admitted);
    gate_release();
    ck_assert_uint_eq(wait_for(&ran, admitted), admitted);
    ck_assert_uint_eq(poll_for(pool_busy, 0), 0);
    /* Free again: a request is admitted. */
    ck_assert_int_eq(pool_submit(pp, &req[3].task, POOL_PRIO_REQ), 0);
    ck_assert_uint_eq(wait_for(&ran, admitted + 1), admitted + 1);
}
END_TEST

/* Waiting tasks run fetches first, then resumed requests, then requests, then background work. */
START_TEST(priority_order)
{
    static const enum pool_prio prio[] = { POOL_PRIO_BG,     POOL_PRIO_REQ,  POOL_PRIO_RESUME,
                                           POOL_PRIO_FETCH,  POOL_PRIO_BG,   POOL_PRIO_REQ,
                                           POOL_PRIO_RESUME, POOL_PRIO_FETCH };
    static const int want[] = { -1, 3, 7, 2, 6, 1, 5, 0, 4 };
    static struct job blocker, j[ARRAY_LEN(prio)];
    struct pool *pp;

    start();
    pp = pool_pick();
    occupy(&blocker);
    for (unsigned i = 0; i < ARRAY_LEN(prio); i++) {
        job_init(&j[i], (int)i, false);
        ck_assert_int_eq(pool_submit(pp, &j[i].task, prio[i]), 0);
    }
    gate_release();
    ck_assert_uint_eq(wait_for(&ran, ARRAY_LEN(want)), ARRAY_LEN(want));
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_uint_eq(norder, ARRAY_LEN(want));
    for (unsigned i = 0; i < ARRAY_LEN(want); i++)
        ck_assert_msg(order[i] == want[i], "task %u ran as #%u, expected %d", order[i], i, want[i]);
    AZ(pthread_mutex_unlock(&mtx));
}
END_TEST

/* ---- growing and shrinking ---- */

/* A worker that takes its time to exit (a Lua state closing, a log flushed). */
static void
slow_fini(struct wrk *wrk)
{
    usleep(50000);
}

static const struct wrk_slot slot_slow = { "slow", NULL, slow_fini, NULL };

/*
 * Tasks that block their workers: the pool starts workers for those
 * waiting, up to thread_pool_max and no further (the rest wait in the
 * queue); once idle for thread_pool_timeout the extra ones exit, down to
 * thread_pool_min and no further, though they all go idle at once and
 * take their time to exit.
 */
START_TEST(grows_to_max_shrinks_to_min)
{
    static struct job j[8];
    uint64_t destroyed;
    double t_rel;

    par.thread_pool_min = 2;
    par.thread_pool_max = 5;
    par.thread_pool_timeout = 0.3;
    wrk_slot_register(&slot_slow);
    start();
    destroyed = stat_get(STAT_threads_destroyed);
    for (unsigned i = 0; i < ARRAY_LEN(j); i++) {
        job_init(&j[i], (int)i, true);
        ck_assert_int_eq(pool_submit(pool_pick(), &j[i].task, POOL_PRIO_FETCH), 0);
    }
    ck_assert_uint_eq(wait_for(&held, 5), 5);
    ck_assert_uint_eq(threads(), 5);
    ck_assert_uint_eq(pool_busy(), 8); /* five running, three waiting */
    /* No sixth worker comes for the three that wait. */
    usleep(50000);
    ck_assert_uint_eq(threads(), 5);
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_uint_eq(held, 5);
    AZ(pthread_mutex_unlock(&mtx));
    t_rel = tim_mono(); /* no worker idles before this */
    gate_release();
    ck_assert_uint_eq(wait_for(&ran, 8), 8);
    ck_assert_uint_eq(poll_for(threads, 2), 2);
    ck_assert_double_ge(tim_mono() - t_rel, 0.3);
    /* Two more rounds of thread_pool_timeout: the two stay. */
    usleep(700000);
    ck_assert_uint_eq(threads(), 2);
    ck_assert_uint_eq(stat_get(STAT_threads_destroyed) - destroyed, 3);
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_uint_eq(maxheld, 5);
    AZ(pthread_mutex_unlock(&mtx));
    ck_assert_uint_eq(pool_busy(), 0);
}
END_TEST

/* pool_busy(): tasks running and tasks queued, across the pools. */
START_TEST(busy_counts)
{
    static struct job j[5];

    par.thread_pools = 2;
    par.thread_pool_min = 1;
    par.thread_pool_max = 1;
    start();
    ck_assert_uint_eq(threads(), 2);
    for (unsigned i = 0; i < ARRAY_LEN(j); i++) {
        job_init(&j[i], (int)i, true);
        ck_assert_int_eq(pool_submit(pool_pick(), &j[i].task, POOL_PRIO_REQ), 0);
        ck_assert_uint_eq(pool_busy(), i + 1);
    }
    ck_assert_uint_eq(wait_for(&held, 2), 2);
    ck_assert_uint_eq(pool_busy(), 5);
    gate_release();
    ck_assert_uint_eq(wait_for(&ran, 5), 5);
    ck_assert_uint_eq(poll_for(pool_busy, 0), 0);
}
END_TEST

/* ---- overload, as the client sees it ---- */

/* The session task: the session ran (counted with the jobs) and is closed. */
static void
sess_task(struct wrk *wrk, void *priv)
{
    struct sess *sp = priv;

    OBJ_CHECK(wrk, WRK_MAGIC);
    OBJ_CHECK(sp, SESS_MAGIC);
    AZ(pthread_mutex_lock(&mtx));
    ran++;
    AZ(pthread_cond_broadcast(&cv));
    AZ(pthread_mutex_unlock(&mtx));
    sess_close(&sp);
}

/*
 * The client end of a socket: what arrives within tmo seconds into buf
 * (NUL-terminated), and whether the connection ended by then.
 */
static bool
client_read(int fd, char *buf, size_t size, double tmo)
{
    struct pollfd pfd = { .fd = fd, .events = POLLIN };
    double end = tim_mono() + tmo, left;
    size_t len = 0;
    ssize_t n;

    buf[0] = '\0';
    while ((left = end - tim_mono()) > 0) {
        if (poll(&pfd, 1, (int)(left * 1e3) + 1) <= 0)
            continue;
        n = read(fd, buf + len, size - 1 - len);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN))
            return (true);
        if (n > 0) {
            len += (size_t)n;
            buf[len] = '\0';
        }
    }
    return (false);
}

/*
 * thread_queue_limit sessions wait for the one busy worker; the next one
 * is refused by sess_schedule() itself, which answers the canned 503
 * (Retry-After, Connection: close) before it returns and closes the
 * connection, counted in sess_dropped.  The one that waits hears
 * nothing until the worker is free, then runs.
 */
START_TEST(overload_answers_503_at_once)
{
    static struct lsock ls = { .magic = LSOCK_MAGIC, .fd = -1, .proto = "http" };
    struct sockaddr sa = { .sa_family = AF_UNIX };
    static struct job blocker;
    uint64_t dropped;
    struct sess *sp;
    char buf[512];
    double t0, took;
    int c[2], sv[2];

    par.thread_queue_limit = 1;
    sess_set_task(sess_task, sess_task);
    start();
    occupy(&blocker);
    dropped = stat_get(STAT_sess_dropped);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        ck_assert_int_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
        c[i] = sv[1];
        sp = sess_new(sv[0], &ls, &sa);
        t0 = tim_mono();
        sess_schedule(&sp);
        took = tim_mono() - t0;
        ck_assert_ptr_null(sp);
    }
    /* The refused one: answered and closed by the time sess_schedule() returned. */
    ck_assert_msg(took < 0.1, "refusing took %.3f s", took);
    ck_assert(client_read(c[1], buf, sizeof buf, 1.0));
    ck_assert_msg(strncmp(buf, "HTTP/1.1 503 Service Unavailable\r\n", 34) == 0, "got '%s'", buf);
    ck_assert_ptr_nonnull(strstr(buf, "\r\nRetry-After: 1\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\nConnection: close\r\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\r\n\r\nServer is too busy.\n"));
    ck_assert_uint_eq(stat_get(STAT_sess_dropped) - dropped, 1);
    /* The queued one: nothing yet, then it runs once the worker is free. */
    ck_assert(!client_read(c[0], buf, sizeof buf, 0.05));
    ck_assert_str_eq(buf, "");
    gate_release();
    ck_assert_uint_eq(wait_for(&ran, 2), 2);
    ck_assert(client_read(c[0], buf, sizeof buf, WAIT_S));
    ck_assert_str_eq(buf, "");
    ck_assert_uint_eq(stat_get(STAT_sess_dropped) - dropped, 1);
    close(c[0]);
    close(c[1]);
}
END_TEST

/* ---- per-thread slots ---- */

static char slot_log[1024];  /* under mtx: "A.init B.init ..." */
static struct wrk *slot_wrk; /* under mtx: the worker the slots saw first */
static pthread_t slot_thread;
static unsigned sleeps; /* under mtx: WRK_BEFORE_SLEEP seen */

static void
note(const char *what, struct wrk *wrk)
{
    AZ(pthread_mutex_lock(&mtx));
    if (slot_wrk == NULL) {
        slot_wrk = wrk;
        slot_thread = pthread_self();
    }
    ck_assert_ptr_eq(wrk, slot_wrk);
    ck_assert(pthread_equal(pthread_self(), slot_thread));
    if (strlen(slot_log) + strlen(what) + 2 < sizeof slot_log) {
        strcat(slot_log, what);
        strcat(slot_log, " ");
    }
    AZ(pthread_cond_broadcast(&cv));
    AZ(pthread_mutex_unlock(&mtx));
}

static void
a_init(struct wrk *wrk)
{
    OBJ_CHECK(wrk, WRK_MAGIC);
    ck_assert_ptr_nonnull(wrk->ws_block); /* the buffers are there first */
    note("A.init", wrk);
}

static void
a_fini(struct wrk *wrk)
{
    note("A.fini", wrk);
}

static void
b_init(struct wrk *wrk)
{
    note("B.init", wrk);
}

/* A fini that takes its time (a Lua state closing): pool_fini() must wait for it. */
static void
b_fini(struct wrk *wrk)
{
    usleep(50000);
    note("B.fini", wrk);
}

static void
b_idle(struct wrk *wrk, enum wrk_moment when)
{
    note(when == WRK_BEFORE_SLEEP ? "B.sleep" : "B.between", wrk);
    if (when == WRK_BEFORE_SLEEP) {
        AZ(pthread_mutex_lock(&mtx));
        sleeps++;
        AZ(pthread_cond_broadcast(&cv));
        AZ(pthread_mutex_unlock(&mtx));
    }
}

static const struct wrk_slot slot_a = { "a", a_init, a_fini, NULL };
static const struct wrk_slot slot_b = { "b", b_init, b_fini, b_idle };

/* The idle source: nothing, ever; asked between tasks. */
static unsigned asked;

static struct pool_task *
no_idle_work(double wait)
{
    (void)wait;
    __atomic_add_fetch(&asked, 1, __ATOMIC_SEQ_CST);
    return (NULL);
}

/*
 * Slots run on the worker itself: each init as it starts, in the order
 * registered; idle between tasks and before it sleeps; each fini as it
 * exits, in reverse order, before pool_fini() returns.  A slot registered
 * twice runs once.
 */
START_TEST(slots_run_on_workers)
{
    static struct job j;
    unsigned s0;

    wrk_slot_register(&slot_a);
    wrk_slot_register(&slot_b);
    wrk_slot_register(&slot_a);
    pool_set_idle_source(no_idle_work);
    slot_log[0] = '\0';
    slot_wrk = NULL;
    start();
    ck_assert_uint_eq(wait_for(&sleeps, 1), 1);
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_str_eq(slot_log, "A.init B.init B.between B.sleep ");
    s0 = sleeps;
    AZ(pthread_mutex_unlock(&mtx));
    job_init(&j, 1, false);
    ck_assert_int_eq(pool_submit(pool_pick(), &j.task, POOL_PRIO_REQ), 0);
    ck_assert_uint_eq(wait_for(&ran, 1), 1);
    ck_assert_uint_ge(wait_for(&sleeps, s0 + 1), s0 + 1);
    pool_fini();
    started = false;
    pool_set_idle_source(NULL);
    ck_assert_uint_gt(__atomic_load_n(&asked, __ATOMIC_SEQ_CST), 1);
    /*
     * pool_fini() has returned: every slot's fini has run (its caller
     * tears down what they use next), and the worker is no longer counted.
     */
    ck_assert_uint_eq(threads(), 0);
    AZ(pthread_mutex_lock(&mtx));
    /* After the task: between tasks, the idle source asked (lingering), then sleep; then exit. */
    ck_assert_msg(strstr(slot_log, "B.sleep B.between ") != NULL, "%s", slot_log);
    ck_assert_msg(strlen(slot_log) > 14 &&
                      strcmp(slot_log + strlen(slot_log) - 14, "B.fini A.fini ") == 0,
                  "%s", slot_log);
    ck_assert_ptr_null(strstr(strstr(slot_log, "B.init") + 6, "init")); /* once each */
    AZ(pthread_mutex_unlock(&mtx));
}
END_TEST

/* ---- a request's memory moving between workers ---- */

static bool
all_zero(const char *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != 0)
            return (false);
    return (true);
}

/*
 * wrk_mem_take(): the worker's workspace and receive buffer go to the
 * request, the bytes in use intact and the workspace's state with them,
 * the whole pages past them given back to the kernel (they read as
 * zeros); the worker has new buffers at once.  wrk_mem_give(): another
 * worker takes them over as its own, its workspace going on where the
 * request's stood.  wrk_mem_free(): gone, with the wrk_mem living in them.
 */
START_TEST(mem_moves_between_workers)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), rx_used = 100, used;
    struct wrk w1 = { .magic = WRK_MAGIC }, w2 = { .magic = WRK_MAGIC };
    struct wrk_mem *m, *m2;
    char *block, *rx, *data, *f, *more;
    struct ws before;

    par.workspace_client = 64 * 1024;
    wrk_buffers_fit(&w1);
    wrk_buffers_fit(&w2);
    /* What a request keeps: its state in the workspace, bytes in the receive buffer. */
    m = ws_alloc(&w1.ws, sizeof *m);
    data = ws_alloc(&w1.ws, 3000);
    AN(m);
    AN(data);
    memset(data, 'd', 3000);
    memset(w1.ws.f, 0x5a, (size_t)(w1.ws.e - w1.ws.f)); /* what an earlier request left */
    memset(w1.rx, 'r', rx_used);
    memset(w1.rx + rx_used, 0x5a, w1.rx_size - rx_used);
    block = w1.ws_block;
    rx = w1.rx;
    before = w1.ws;
    used = (size_t)(before.f - block);

    wrk_mem_take(&w1, m, rx_used, false);
    ck_assert_ptr_eq(m->ws_block, block);
    ck_assert_ptr_eq(m->rx, rx);
    ck_assert_ptr_eq(m->ws.s, before.s);
    ck_assert_ptr_eq(m->ws.f, before.f);
    ck_assert_ptr_eq(m->ws.e, before.e);
    ck_assert_uint_eq(m->ws_size, par.workspace_client);
    /* The worker goes on with fresh, empty buffers of the same sizes. */
    ck_assert_ptr_nonnull(w1.ws_block);
    ck_assert_ptr_ne(w1.ws_block, block);
    ck_assert_ptr_ne(w1.rx, rx);
    ck_assert_ptr_eq(w1.ws.f, w1.ws.s);
    ck_assert_uint_eq(ws_free_bytes(&w1.ws), par.workspace_client);
    ck_assert_uint_eq(w1.rx_size, m->rx_size);
    /* In use: intact.  Whole pages past it: back to the kernel, zero when read. */
    for (size_t i = 0; i < 3000; i++)
        ck_assert_int_eq(data[i], 'd');
    for (size_t i = 0; i < rx_used; i++)
        ck_assert_int_eq(rx[i], 'r');
    {
        uintptr_t wa = ((uintptr_t)before.f + page - 1) & ~(uintptr_t)(page - 1);
        uintptr_t we = ((uintptr_t)before.e) & ~(uintptr_t)(page - 1);
        uintptr_t ra = ((uintptr_t)rx + rx_used + page - 1) & ~(uintptr_t)(page - 1);
        uintptr_t re = ((uintptr_t)rx + m->rx_size) & ~(uintptr_t)(page - 1);

        ck_assert_uint_gt(we, wa);
        ck_assert_uint_gt(re, ra);
        ck_assert(all_zero((const char *)wa, we - wa));
        ck_assert(all_zero((const char *)ra, re - ra));
        /* The part page after the bytes in use is not touched. */
        if (wa > (uintptr_t)before.f)
            ck_assert_int_eq(*before.f, 0x5a);
    }

    /* Another worker takes it on: its own buffers go, the request's become its. */
    wrk_mem_give(&w2, m);
    ck_assert_ptr_eq(w2.ws_block, block);
    ck_assert_ptr_eq(w2.rx, rx);
    ck_assert_ptr_eq(w2.ws.s, before.s);
    ck_assert_ptr_eq(w2.ws.f, before.f);
    ck_assert_ptr_eq(w2.ws.e, before.e);
    ck_assert_uint_eq(ws_free_bytes(&w2.ws), (size_t)(before.e - before.f));
    ck_assert_uint_lt(used, 4000);
    more = ws_alloc(&w2.ws, 5000); /* the workspace goes on where it stood */
    ck_assert_ptr_eq(more, before.f);
    memset(more, 'm', 5000);
    for (size_t i = 0; i < 3000; i++)
        ck_assert_int_eq(data[i], 'd');

    /* Parked again, then dropped: freed with the wrk_mem inside it. */
    m2 = ws_alloc(&w2.ws, sizeof *m2);
    AN(m2);
    f = w2.ws.f;
    wrk_mem_take(&w2, m2, 0, false);
    ck_assert_ptr_eq(m2->ws.f, f);
    ck_assert_ptr_eq(m2->ws_block, block);
    wrk_mem_free(m2);
    wrk_buffers_free(&w1);
    wrk_buffers_free(&w2);
    ck_assert_ptr_null(w2.ws_block);
}
END_TEST

/*
 * A brief wait (a pass waiting for its backend's answer): wrk_mem_take()
 * leaves every page as it was.  The buffers a worker lets go when it takes
 * a request on (wrk_mem_give()) are spare, and the next wrk_mem_take() on
 * any worker uses them instead of new ones, so that parking and resuming
 * in turn allocates nothing; at most WRK_SPARE_MAX are kept, and none once
 * a worker goes to sleep with no request parked.
 */
START_TEST(brief_park_keeps_pages_and_reuses_buffers)
{
    struct wrk w1 = { .magic = WRK_MAGIC }, w2 = { .magic = WRK_MAGIC };
    struct wrk_mem *m, *m2, *many[WRK_SPARE_MAX + 2];
    char *block, *rx, *w2block, *w2rx;
    size_t rx_used = 100;

    par.workspace_client = 64 * 1024;
    wrk_buffers_fit(&w1);
    wrk_buffers_fit(&w2);
    m = ws_alloc(&w1.ws, sizeof *m);
    AN(m);
    memset(w1.ws.f, 0x5a, (size_t)(w1.ws.e - w1.ws.f));
    memset(w1.rx, 0x5a, w1.rx_size);
    block = w1.ws_block;
    rx = w1.rx;

    wrk_mem_take(&w1, m, rx_used, true);
    ck_assert_ptr_eq(m->ws_block, block);
    ck_assert_ptr_eq(m->rx, rx);
    /* Nothing went back to the kernel: what was there is there. */
    for (char *p = m->ws.f; p < m->ws.e; p++)
        ck_assert_int_eq(*p, 0x5a);
    for (size_t i = rx_used; i < m->rx_size; i++)
        ck_assert_int_eq(rx[i], 0x5a);
    ck_assert_uint_eq(wrk_spare_count(), 0);

    /* w2 takes the request on: its own buffers become spare. */
    w2block = w2.ws_block;
    w2rx = w2.rx;
    wrk_mem_give(&w2, m);
    ck_assert_ptr_eq(w2.ws_block, block);
    ck_assert_ptr_eq(w2.rx, rx);
    ck_assert_uint_eq(wrk_spare_count(), 1);

    /* The next park, on w1, hands w1 those, whole and empty. */
    m2 = ws_alloc(&w1.ws, sizeof *m2);
    AN(m2);
    wrk_mem_take(&w1, m2, 0, true);
    ck_assert_ptr_eq(w1.ws_block, w2block);
    ck_assert_ptr_eq(w1.rx, w2rx);
    ck_assert_ptr_eq(w1.ws.f, w1.ws.s);
    ck_assert_uint_eq(ws_free_bytes(&w1.ws), par.workspace_client);
    ck_assert_uint_eq(wrk_spare_count(), 0);

    /* A request is parked: a worker going to sleep keeps the spare ones. */
    wrk_mem_give(&w2, m2);
    ck_assert_uint_eq(wrk_spare_count(), 1);
    for (unsigned i = 0; i < WRK_SPARE_MAX + 2; i++) {
        many[i] = ws_alloc(&w1.ws, sizeof *many[i]);
        AN(many[i]);
        wrk_mem_take(&w1, many[i], 0, true);
    }
    ck_assert_uint_eq(wrk_spare_count(), 0);
    /* Resumed in a row: no more than WRK_SPARE_MAX are kept. */
    for (unsigned i = 0; i < WRK_SPARE_MAX + 1; i++)
        wrk_mem_give(&w2, many[i]);
    ck_assert_uint_eq(wrk_spare_count(), WRK_SPARE_MAX);
    wrk_spare_trim();
    ck_assert_uint_eq(wrk_spare_count(), WRK_SPARE_MAX);
    /* The last one parked goes (a pool shutting down): none parked, so trimmed. */
    wrk_mem_free(many[WRK_SPARE_MAX + 1]);
    wrk_spare_trim();
    ck_assert_uint_eq(wrk_spare_count(), 0);

    /* Spare buffers of a size the parameters no longer ask for: refitted when taken. */
    m = ws_alloc(&w1.ws, sizeof *m);
    AN(m);
    wrk_mem_take(&w1, m, 0, true);
    wrk_mem_give(&w1, m);
    ck_assert_uint_eq(wrk_spare_count(), 1);
    par.workspace_client = 128 * 1024;
    m = ws_alloc(&w1.ws, sizeof *m);
    AN(m);
    wrk_mem_take(&w1, m, 0, true);
    ck_assert_uint_eq(w1.ws_size, par.workspace_client);
    ck_assert_uint_eq(ws_free_bytes(&w1.ws), par.workspace_client);
    wrk_mem_free(m);
    wrk_buffers_free(&w1);
    wrk_buffers_free(&w2);
    par.workspace_client = 64 * 1024;
}
END_TEST

Suite *
pool_suite(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = unit_tcase(s, "pool", setup, teardown);

    tcase_add_test(tc, tasks_run);
    tcase_add_test(tc, full_queue_refuses_requests_only);
    tcase_add_test(tc, priority_order);
    tcase_add_test(tc, grows_to_max_shrinks_to_min);
    tcase_add_test(tc, busy_counts);
    tcase_add_test(tc, overload_answers_503_at_once);
    tcase_add_test(tc, slots_run_on_workers);
    tc = unit_tcase(s, "wrk", setup, teardown);
    tcase_add_test(tc, mem_moves_between_workers);
    tcase_add_test(tc, brief_park_keeps_pages_and_reuses_buffers);
    return s;
}
