/*
 * nghttp2's memory, one allocator per connection (mem_user_data is its
 * struct h2c), so that what a session holds can be told apart and, while
 * the connection idles, given back.
 *
 * Blocks below H2_MEM_MAP come from the heap as asked, with no header:
 * nghttp2's long-lived ones are powers of two (its stream map's 4 KiB,
 * the HPACK tables' 1 KiB), which any header would push into the next
 * size class.  Larger ones -- the session's frame buffer, 16 KiB kept for
 * the connection's life, of which an idle connection touched a page or
 * two -- are mapped on their own, listed on the connection: from the heap
 * such a block would be a recycled one, resident whole, and the frame
 * buffer's pages go back to the kernel while the connection idles
 * (h2t__mem_idle()), to be faulted in, zeroed, at its next frame.  A
 * block is known as mapped by that list (a block or two a connection).
 *
 * All under c->mtx, or before or after anyone else can reach c (the
 * session's creation and deletion).
 */
#include "config.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "surogat/defs.h"

#include "h2t_priv.h"

#define H2_MEM_MAP (16 * 1024)

static void *
mem_map(struct h2c *c, size_t size)
{
    struct h2_map *m = malloc(sizeof *m);
    void *p;

    if (m == NULL)
        return (NULL);
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        free(m);
        return (NULL);
    }
    *m = (struct h2_map){ p, size, c->maps };
    c->maps = m;
    return (p);
}

/* The entry before ptr's on c's list of mapped blocks (its link), or NULL: from the heap. */
static struct h2_map **
mapped(struct h2c *c, const void *ptr)
{
    for (struct h2_map **mp = &c->maps; *mp != NULL; mp = &(*mp)->next)
        if ((*mp)->p == ptr)
            return (mp);
    return (NULL);
}

static void
mem_free(void *ptr, void *priv)
{
    struct h2c *c = priv;
    struct h2_map **mp, *m;

    if (ptr == NULL)
        return;
    mp = mapped(c, ptr);
    if (mp == NULL) {
        free(ptr);
        return;
    }
    m = *mp;
    *mp = m->next;
    if (m->p == c->fb)
        c->fb = NULL;
    AZ(munmap(m->p, m->len));
    free(m);
}

static void *
mem_malloc(size_t size, void *priv)
{
    return (size >= H2_MEM_MAP ? mem_map(priv, size) : malloc(size));
}

static void *
mem_calloc(size_t nmemb, size_t size, void *priv)
{
    if (size != 0 && nmemb > SIZE_MAX / size)
        return (NULL);
    if (nmemb * size >= H2_MEM_MAP)
        return (mem_map(priv, nmemb * size)); /* a fresh mapping is zero already */
    return (calloc(nmemb, size));
}

static void *
mem_realloc(void *ptr, size_t size, void *priv)
{
    struct h2c *c = priv;
    struct h2_map **mp;
    size_t old;
    void *p;

    if (ptr == NULL)
        return (mem_malloc(size, priv));
    mp = mapped(c, ptr);
    if (mp == NULL && size < H2_MEM_MAP)
        return (realloc(ptr, size));
    /* Into or out of a mapping, or from one to another. */
    old = mp != NULL ? (*mp)->len : malloc_usable_size(ptr);
    p = mem_malloc(size, priv);
    if (p == NULL)
        return (NULL);
    memcpy(p, ptr, SRG_MIN(old, size));
    mem_free(ptr, priv);
    return (p);
}

void
h2t__mem_init(struct h2c *c, nghttp2_mem *mem)
{
    *mem = (nghttp2_mem){ .mem_user_data = c, .malloc = mem_malloc, .free = mem_free,
                          .calloc = mem_calloc, .realloc = mem_realloc };
}

void
h2t__mem_started(struct h2c *c)
{
    /* The one block a new session maps is its frame buffer (nghttp2 1.52: 16,394 bytes). */
    if (c->maps != NULL && c->maps->next == NULL)
        c->fb = c->maps->p;
}

void
h2t__mem_idle(struct h2c *c)
{
    struct h2_map **mp;

    if (c->fb == NULL || c->dead || nghttp2_session_want_write(c->ngh))
        return; /* the frame buffer may hold a frame on its way out */
    mp = mapped(c, c->fb);
    AN(mp);
    (void)madvise((*mp)->p, (*mp)->len, MADV_DONTNEED);
}

void
h2t__mem_fini(struct h2c *c)
{
    SRG_ASSERT(c->maps == NULL); /* nghttp2_session_del() freed every block */
}
