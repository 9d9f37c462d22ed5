/*
 * The budget of one policy call: VM instructions, wall-clock time and
 * memory (policy_max_instructions, policy_max_time, policy_max_memory).
 *
 * A count hook runs every STEP instructions (fewer at the end, to stop
 * exactly at the limit) and reads the clock.  A few instructions can
 * also start a long run of C code -- a backtracking match, a sort or a
 * copy of megabytes -- so the pattern functions, re.* and the other
 * string, table and utf8 functions read the clock as they go
 * (pol__limit_check()), and so does the allocator on each large
 * allocation.  The clock is CLOCK_MONOTONIC_COARSE: a few nanoseconds a
 * read, a few milliseconds of resolution, enough for a deadline of tens
 * of them (late() says how time spent waiting for a CPU is left out).
 * The deadline starts at the first read, so a hook that never gets to
 * one (most run a few dozen instructions) never reads the clock; what it
 * misses is one step's worth of work.
 *
 * Tripping is sticky.  pcall and xpcall catch any error, a limit's too;
 * so once a limit has tripped the count hook runs before every
 * instruction and raises the error again, until the error has left the
 * call, and the caller takes the call as failed whatever came back.
 * xpcall's message handler does not run for it (pol_env.c: Lua would run
 * it inside the hook, where no hook can stop it).  Coroutines, which
 * would run on other stacks, are not in the sandbox.
 *
 * Runs on the worker that owns the state; nothing here is shared.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <lauxlib.h>

#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/stat.h"

#include "pol_priv.h"

#define STEP      1000u       /* instructions between two count hook calls */
#define ALLOC_BIG (64u << 10) /* an allocation this large reads the clock */

static double
coarse_now(void)
{
    struct timespec ts;

    AZ(clock_gettime(CLOCK_MONOTONIC_COARSE, &ts));
    return ((double)ts.tv_sec + ts.tv_nsec * 1e-9);
}

static double
thread_cpu(void)
{
    struct timespec ts;

    AZ(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts));
    return ((double)ts.tv_sec + ts.tv_nsec * 1e-9);
}

/*
 * Whether the call is past its deadline; the first check starts it.  On
 * a busy host a thread may wait for a CPU for tens of milliseconds, and
 * a hook of a few microseconds must not fail for it: past the deadline
 * on the wall clock, the call is late once it has also run a quarter of
 * the budget more on the thread's CPU clock (a system call, so read only
 * then, and no more often than that quarter could be used up).  A hook
 * that keeps working thus ends at about 1.25 times policy_max_time.
 */
static bool
late(struct pol_limit *lim)
{
    double now = coarse_now(), quarter = par.policy_max_time / 4, used;

    if (lim->deadline == 0) {
        lim->deadline = now + par.policy_max_time;
        return (false);
    }
    if (now <= lim->deadline || now < lim->next_cpu)
        return (false);
    if (lim->cpu0 == 0) {
        lim->cpu0 = thread_cpu();
        lim->next_cpu = now + quarter;
        return (false);
    }
    if ((used = thread_cpu() - lim->cpu0) >= quarter)
        return (true);
    lim->next_cpu = now + (quarter - used);
    return (false);
}

static void count_hook(lua_State *L, lua_Debug *ar);

/* From now on every instruction of the call raises the limit's error. */
static void
trip(struct pol_wrk *pw, enum pol_trip why)
{
    STAT_INC(policy_limit);
    pw->lim.trip = why;
    /* Only sets fields: safe from the allocator, as from a signal handler. */
    lua_sethook(pw->L, count_hook, LUA_MASKCOUNT, 1);
}

static const char *
trip_name(enum pol_trip why)
{
    switch (why) {
    case POL_TRIP_INSNS:
        return ("policy_max_instructions");
    case POL_TRIP_TIME:
        return ("policy_max_time");
    case POL_TRIP_NONE:
        break;
    }
    SRG_WRONG("no limit tripped");
}

/*
 * Raise the tripped limit's error, placed the first time at the line of
 * the innermost Lua function running (a C function such as pcall or
 * string.find may be between).
 */
static int
raise_trip(lua_State *L)
{
    struct pol_wrk *pw = pol__wrk(L);
    char where[300] = "";
    lua_Debug ar;

    for (int level = 0; pw->lim.msg[0] == '\0' && lua_getstack(L, level, &ar); level++) {
        if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0) {
            snprintf(where, sizeof where, "%s:%d: ", ar.short_src, ar.currentline);
            break;
        }
    }
    if (pw->lim.msg[0] == '\0')
        snprintf(pw->lim.msg, sizeof pw->lim.msg, "%s%s exceeded", where, trip_name(pw->lim.trip));
    lua_pushstring(L, pw->lim.msg);
    return (lua_error(L));
}

static void
count_hook(lua_State *L, lua_Debug *ar)
{
    struct pol_wrk *pw = pol__wrk(L);
    struct pol_limit *lim = &pw->lim;
    uint64_t left;

    (void)ar;
    if (lim->trip == POL_TRIP_NONE) {
        lim->insns += lim->step;
        if (lim->insns >= par.policy_max_instructions) {
            trip(pw, POL_TRIP_INSNS);
        } else if (late(lim)) {
            trip(pw, POL_TRIP_TIME);
        } else {
            left = par.policy_max_instructions - lim->insns;
            if (left < lim->step) {
                lim->step = (unsigned)left;
                lua_sethook(L, count_hook, LUA_MASKCOUNT, (int)lim->step);
            }
            return;
        }
    }
    (void)raise_trip(L);
}

void
pol__limit_arm(struct pol_wrk *pw)
{
    struct pol_limit *lim = &pw->lim;

    lim->armed = true;
    lim->trip = POL_TRIP_NONE;
    lim->insns = 0;
    lim->deadline = lim->next_cpu = lim->cpu0 = 0;
    lim->msg[0] = '\0';
    lim->step = par.policy_max_instructions < STEP ? par.policy_max_instructions : STEP;
    lua_sethook(pw->L, count_hook, LUA_MASKCOUNT, (int)lim->step);
}

void
pol__limit_disarm(struct pol_wrk *pw)
{
    lua_sethook(pw->L, NULL, 0, 0);
    pw->lim.armed = false;
}

const char *
pol__limit_tripped(struct pol_wrk *pw)
{
    if (pw->lim.trip == POL_TRIP_NONE)
        return (NULL);
    /* Tripped by the allocator, and no instruction ran afterwards to say where. */
    if (pw->lim.msg[0] == '\0')
        snprintf(pw->lim.msg, sizeof pw->lim.msg, "%s: %s exceeded", pol__prog_path(pw->prog),
                 trip_name(pw->lim.trip));
    return (pw->lim.msg);
}

bool
pol__limit_over(struct pol_wrk *pw)
{
    if (!pw->lim.armed)
        return (false);
    if (pw->lim.trip == POL_TRIP_NONE && late(&pw->lim))
        trip(pw, POL_TRIP_TIME);
    return (pw->lim.trip != POL_TRIP_NONE);
}

void
pol__limit_check(lua_State *L)
{
    struct pol_wrk *pw = pol__wrk(L);

    /* NULL: a state without a budget (the unit tests' plain states). */
    if (pw == NULL || !pol__limit_over(pw))
        return;
    (void)raise_trip(L);
}

void *
pol__limit_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct pol_wrk *pw = ud;
    size_t old = ptr != NULL ? osize : 0;
    void *n;

    if (nsize == 0) {
        free(ptr);
        pw->mem -= old;
        return (NULL);
    }
    if (nsize > old) {
        /* No overflow: what is in use and what Lua asks for are both below 2^63. */
        if (pw->mem + (nsize - old) > par.policy_max_memory)
            return (NULL);
        /* Work in proportion is to follow (a copy, a fill): late already? */
        if (nsize - old >= ALLOC_BIG && pw->lim.armed && pw->lim.trip == POL_TRIP_NONE &&
            late(&pw->lim))
            trip(pw, POL_TRIP_TIME);
    }
    n = realloc(ptr, nsize);
    if (n == NULL)
        return (NULL);
    pw->mem = pw->mem - old + nsize;
    return (n);
}
