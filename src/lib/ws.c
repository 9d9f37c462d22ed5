/*
 * The per-request arena.  Owned by one worker; no locks.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/ws.h"

#define WS_ALIGN 8

void
ws_init(struct ws *ws, void *block, size_t len)
{
    uintptr_t a = ((uintptr_t)block + WS_ALIGN - 1) & ~(uintptr_t)(WS_ALIGN - 1);

    AN(ws);
    AN(block);
    SRG_ASSERT(a - (uintptr_t)block <= len);
    ws->magic = WS_MAGIC;
    ws->s = (char *)a;
    ws->f = ws->s;
    ws->e = (char *)block + len;
}

void *
ws_alloc(struct ws *ws, size_t len)
{
    char *p;
    size_t need;

    OBJ_CHECK(ws, WS_MAGIC);
    need = (len + WS_ALIGN - 1) & ~(size_t)(WS_ALIGN - 1);
    if (need < len || need > (size_t)(ws->e - ws->f))
        return (NULL);
    p = ws->f;
    ws->f += need;
    return (p);
}

char *
ws_strndup(struct ws *ws, const char *s, size_t len)
{
    char *p = ws_alloc(ws, len + 1);

    if (p == NULL)
        return (NULL);
    memcpy(p, s, len);
    p[len] = '\0';
    return (p);
}

void
ws_reset(struct ws *ws)
{
    OBJ_CHECK(ws, WS_MAGIC);
    ws->f = ws->s;
}

size_t
ws_free_bytes(const struct ws *ws)
{
    OBJ_CHECK(ws, WS_MAGIC);
    return ((size_t)(ws->e - ws->f));
}

char *
ws_reserve_all(struct ws *ws, size_t *len)
{
    OBJ_CHECK(ws, WS_MAGIC);
    AN(len);
    *len = (size_t)(ws->e - ws->f);
    return (ws->f);
}

void
ws_release(struct ws *ws, size_t used)
{
    OBJ_CHECK(ws, WS_MAGIC);
    SRG_ASSERT(used <= (size_t)(ws->e - ws->f));
    ws->f += (used + WS_ALIGN - 1) & ~(size_t)(WS_ALIGN - 1);
    if (ws->f > ws->e)
        ws->f = ws->e;
}
