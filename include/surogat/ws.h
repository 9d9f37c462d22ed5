/*
 * ws -- the per-request arena.  Allocations are bumped from one block and
 * all released at once by ws_reset() when the request ends, so a request
 * costs no malloc.  Running out is not a bug: ws_alloc() returns NULL and
 * the request is answered 500 (ws_overflow).
 */
#ifndef SUROGAT_WS_H
#define SUROGAT_WS_H

#include <stddef.h>

struct ws {
    unsigned magic;
#define WS_MAGIC 0x35fbe2d1
    char *s; /* start of the block */
    char *f; /* first free byte */
    char *e; /* end of the block */
};

void ws_init(struct ws *ws, void *block, size_t len);
void *ws_alloc(struct ws *ws, size_t len); /* 8-aligned, or NULL when full */
char *ws_strndup(struct ws *ws, const char *s, size_t len); /* NUL-terminated copy or NULL */
void ws_reset(struct ws *ws);
size_t ws_free_bytes(const struct ws *ws);
/*
 * Reserve all remaining space for an in-place build (a response head),
 * then give back what was not used with ws_release().
 */
char *ws_reserve_all(struct ws *ws, size_t *len);
void ws_release(struct ws *ws, size_t used);

#endif
