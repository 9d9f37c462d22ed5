/*
 * Per-thread counter blocks.  A thread's block is written only by that
 * thread; readers (the CLI) sum every live block plus the total of the
 * threads that have exited, under stat_mtx, which writers never take.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

__thread struct stat_block *stat_tls;

struct stat_node {
    struct stat_block blk; /* first: stat_tls points here */
    struct stat_node *next;
};

static pthread_mutex_t stat_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct stat_node *stat_live;
static struct stat_block stat_retired;

static const char *const stat_names[] = {
#define STAT(name, kind, doc) #name,
#include "surogat/tbl/stats.h"
};

int
stat_init(void)
{
    stat_thread_enter();
    return (0);
}

void
stat_fini(void)
{
    stat_thread_leave();
}

void
stat_thread_enter(void)
{
    struct stat_node *n;

    SRG_ASSERT(stat_tls == NULL);
    n = calloc(1, sizeof *n);
    AN(n);
    AZ(pthread_mutex_lock(&stat_mtx));
    n->next = stat_live;
    stat_live = n;
    AZ(pthread_mutex_unlock(&stat_mtx));
    stat_tls = &n->blk;
}

void
stat_thread_leave(void)
{
    struct stat_node *n = (struct stat_node *)stat_tls, **pp;

    AN(n);
    AZ(pthread_mutex_lock(&stat_mtx));
    for (pp = &stat_live; *pp != n; pp = &(*pp)->next)
        AN(*pp);
    *pp = n->next;
    for (unsigned i = 0; i < STAT__N; i++)
        stat_retired.v[i] += n->blk.v[i];
    AZ(pthread_mutex_unlock(&stat_mtx));
    stat_tls = NULL;
    free(n);
}

void
stat_sum(struct stat_block *out)
{
    AZ(pthread_mutex_lock(&stat_mtx));
    *out = stat_retired;
    for (struct stat_node *n = stat_live; n != NULL; n = n->next)
        for (unsigned i = 0; i < STAT__N; i++)
            out->v[i] += __atomic_load_n(&n->blk.v[i], __ATOMIC_RELAXED);
    AZ(pthread_mutex_unlock(&stat_mtx));
}

uint64_t
stat_get(enum stat_id id)
{
    struct stat_block b;

    SRG_ASSERT(id < STAT__N);
    stat_sum(&b);
    return (b.v[id]);
}

void
stat_dump(struct sb *out)
{
    struct stat_block b;

    stat_sum(&b);
    for (unsigned i = 0; i < STAT__N; i++)
        sb_printf(out, "%s %llu\n", stat_names[i], (unsigned long long)b.v[i]);
}
