/*
 * defs -- assertions and object macros used by every module.
 *
 * Assertions are never compiled out: a broken invariant in a cache may
 * serve one client's object to another, so the only safe reaction is to
 * dump what we know and abort.
 */
#ifndef SUROGAT_DEFS_H
#define SUROGAT_DEFS_H

#include <stddef.h>
#include <stdlib.h>

void srg_panic(const char *file, int line, const char *func, const char *cond)
    __attribute__((noreturn));

#define SRG_ASSERT(e)                                       \
    do {                                                    \
        if (__builtin_expect(!(e), 0))                      \
            srg_panic(__FILE__, __LINE__, __func__, #e);    \
    } while (0)
#define AN(x) SRG_ASSERT((x) != 0)
#define AZ(x) SRG_ASSERT((x) == 0)
#define SRG_WRONG(msg) srg_panic(__FILE__, __LINE__, __func__, msg)

#ifdef SRG_EXPENSIVE_ASSERTS
#define SRG_DIAG(e) SRG_ASSERT(e)
#else
#define SRG_DIAG(e) ((void)0)
#endif

#define OBJ_INIT(p, m)                  \
    do {                                \
        memset((p), 0, sizeof *(p));    \
        (p)->magic = (m);               \
    } while (0)
#define OBJ_NEW(p, m)                   \
    do {                                \
        (p) = calloc(1, sizeof *(p));   \
        AN(p);                          \
        (p)->magic = (m);               \
    } while (0)
#define OBJ_CHECK(p, m) SRG_ASSERT((p) != NULL && (p)->magic == (m))
/* Zero the magic first so a stale pointer trips OBJ_CHECK, not a crash later. */
#define OBJ_FREE(pp)        \
    do {                    \
        (*(pp))->magic = 0; \
        free(*(pp));        \
        *(pp) = NULL;       \
    } while (0)
/* Move ownership out of *pp, leaving NULL behind. */
#define OBJ_TAKE(to, pp, m)         \
    do {                            \
        (to) = *(pp);               \
        *(pp) = NULL;               \
        OBJ_CHECK((to), (m));       \
    } while (0)

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define SRG_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SRG_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif
