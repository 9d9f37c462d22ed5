/*
 * The malloc store (-s malloc,SIZE): body bytes in a chain of heap
 * segments, each allocated with its descriptor in front.  Nothing
 * survives the process; the meta stays with the caller.
 *
 * Large bodies (sendfile_min_size and up) live in a memory file of their
 * own instead (memfd_create(2), mapped shared), so that a hit goes to the
 * client by sendfile(2) and not by a copy into the socket.  A body with a
 * Content-Length gets one from its first byte, sized exactly; one without
 * from the point it reaches sendfile_min_size on.  The file is closed and
 * unmapped when the body is freed: pages still held by sockets live on
 * until their last reference and are never written again, so nothing a
 * slow client still has to read can change (sto.h).  Each such body holds
 * a descriptor; at most half of RLIMIT_NOFILE go to them, leaving the rest
 * to connections, and past that -- or when the kernel says no -- bodies
 * stay on the heap and go by copy (sto_mfile_fail).
 * A body's tail (sto_set_tail) is one more heap block.  Every heap block
 * is charged at what the heap really spends on it (blk_cost), so SIZE
 * bounds the process, not just the bytes asked for.
 *
 * Segments of up to SLAB_MAX bytes, descriptor and lead included, are
 * slab blocks sized in 64-byte steps (slab.h) wherever that costs less
 * than the heap's size class: a small object's head and body in one
 * block cost what they are, not the next size class.  A
 * segment's block size is always sizeof(struct sto_seg) + its lead (the
 * bytes between the descriptor and data) + cap, so freeing needs no mark.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/num.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/slab.h"
#include "surogat/stat.h"

#include "sto_priv.h"

/* Segments grow with the object: small objects waste little, big ones need few. */
#define SEG_MIN (4 * 1024)
#define SEG_MAX (256 * 1024)
/*
 * A memory file without a Content-Length: address space reserved for it
 * (never backed until used), and its segments' growth.  The rest of a
 * body beyond the reservation goes on the heap.
 */
#define MF_RESERVE ((size_t)1 << 30)
#define MF_SEG_MAX ((size_t)4 << 20)

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U /* Linux 6.3; older kernels refuse it: retried without */
#endif

struct sm_tail;

/* b->priv, for a body with a memory file or a tail. */
struct sm_priv {
    int fd;         /* its memory file; -1: none (not wanted yet, or it could not have one) */
    bool tried;     /* a memory file was asked for: fd says how that went */
    char *base;     /* reserve bytes of address space; the file's [0, size) mapped from base */
    size_t reserve;
    size_t size;
    struct sm_tail *tail;
};

static unsigned mfiles; /* atomic: bodies holding a memory file */

int
sto_malloc_new(struct stv *stv, const char *args, struct sb *err)
{
    uint64_t size;

    if (num_bytes(args, &size) != 0 || size == 0) {
        sb_printf(err, "-s malloc,%s: bad size", args);
        return (-1);
    }
    stv->size = size;
    return (0);
}

static void
seg_link(struct sto_body *b, struct sto_seg *s)
{
    s->next = NULL;
    s->len = 0;
    if (b->last != NULL)
        b->last->next = s;
    else
        b->first = s;
    b->last = s;
}

/* ---- heap blocks: slab blocks when small, the general heap otherwise ---- */

/*
 * Whether a block of n bytes is a slab block: when that costs less than
 * the general heap's class (not when the class fits n exactly, as 3,072
 * bytes do).  A function of n alone, so freeing finds the same answer.
 */
static bool
blk_slab(size_t n)
{
    return (n <= SLAB_MAX && slab_cost(n) < sto_heap_cost(n));
}

size_t
sto_block_cost(size_t n)
{
    return (blk_slab(n) ? slab_cost(n) : sto_heap_cost(n));
}

static size_t
blk_cost(size_t n)
{
    return (sto_block_cost(n));
}

static void *
blk_alloc(size_t n)
{
    void *p;

    if (blk_slab(n))
        return (slab_alloc(n));
    p = malloc(n);
    AN(p);
    return (p);
}

static void
blk_free(void *p, size_t n)
{
    if (blk_slab(n))
        slab_free(p);
    else
        free(p);
}

/* The block a heap segment is (not one in a memory file). */
static size_t
seg_size(const struct sto_seg *s)
{
    return (sizeof *s + (size_t)(s->data - (const char *)(s + 1)) + s->cap);
}

static struct sto_seg *
seg_new(struct sto_body *b, size_t lead, size_t cap)
{
    struct sto_seg *s = blk_alloc(sizeof *s + lead + cap);

    s->data = (char *)(s + 1) + lead;
    s->cap = cap;
    seg_link(b, s);
    b->bytes += blk_cost(sizeof *s + lead + cap);
    return (s);
}

/* ---- memory files ---- */

static size_t
page_round(size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);

    return ((n + pg - 1) & ~(pg - 1));
}

/* Whether a body of announced length hint, or one hint-less already len long, gets one. */
static bool
mfile_wanted(uint64_t hint, uint64_t len)
{
    uint64_t min = par.sendfile_min_size;

    return (min > 0 && (hint > 0 ? hint >= min : len >= min));
}

static bool
mfile_room(void)
{
    struct rlimit rl;
    unsigned n = __atomic_load_n(&mfiles, __ATOMIC_RELAXED);

    return (getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
            (rl.rlim_cur == RLIM_INFINITY || n < rl.rlim_cur / 2));
}

static struct sm_priv *
priv_of(struct sto_body *b)
{
    struct sm_priv *sp = b->priv;

    if (sp == NULL) {
        sp = calloc(1, sizeof *sp);
        AN(sp);
        sp->fd = -1;
        b->priv = sp;
    }
    return (sp);
}

/* The body's memory file, made on first use; NULL when it cannot have one. */
static struct sm_priv *
mfile_of(struct sto_body *b)
{
    struct sm_priv *mf = priv_of(b);
    size_t reserve;
    int fd;

    if (mf->tried)
        return (mf->fd >= 0 ? mf : NULL);
    mf->tried = true;
    reserve = b->size_hint > 0 ? page_round((size_t)b->size_hint) : MF_RESERVE;
    fd = -1;
    if (mfile_room()) {
        fd = memfd_create("surogat-body", MFD_CLOEXEC | MFD_NOEXEC_SEAL);
        if (fd < 0 && errno == EINVAL)
            fd = memfd_create("surogat-body", MFD_CLOEXEC);
    }
    if (fd >= 0) {
        /* PROT_NONE and unbacked: it only keeps the addresses for the file's pages. */
        mf->base = mmap(NULL, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                        -1, 0);
        if (mf->base == MAP_FAILED) {
            mf->base = NULL;
            (void)close(fd);
            fd = -1;
        }
    }
    if (fd < 0) {
        STAT_INC(sto_mfile_fail);
        return (NULL);
    }
    mf->fd = fd;
    mf->reserve = reserve;
    __atomic_add_fetch(&mfiles, 1, __ATOMIC_RELAXED);
    STAT_INC(sto_mfiles);
    return (mf);
}

/*
 * The memory file back to mf->size.  A failure is left alone: the file
 * stays longer than what the store maps, nothing reads past mf->size, and
 * the next growth sets its length again.
 */
static void
mf_shrink(struct sm_priv *mf)
{
    int rv = ftruncate(mf->fd, (off_t)mf->size);

    (void)rv;
}

/*
 * A segment of about cap bytes at the end of the body's memory file,
 * charged; NULL when there is none (no file, no room left in its
 * reservation, the kernel refused): the caller takes a heap segment.
 */
static struct sto_seg *
mseg_new(struct stv *stv, struct sto_body *b)
{
    struct sm_priv *mf = mfile_of(b);
    struct sto_seg *s;
    size_t cap;
    void *p;

    if (mf == NULL)
        return (NULL);
    if (b->size_hint > b->len)
        cap = (size_t)(b->size_hint - b->len); /* exactly the rest: one segment */
    else
        cap = (size_t)SRG_MIN(SRG_MAX(b->len, (uint64_t)SEG_MIN), (uint64_t)MF_SEG_MAX);
    cap = page_round(cap);
    if (cap > mf->reserve - mf->size)
        cap = mf->reserve - mf->size;
    if (cap == 0 || sto__charge(stv, sizeof *s + cap) != 0)
        return (NULL);
    if (ftruncate(mf->fd, (off_t)(mf->size + cap)) != 0 ||
        (p = mmap(mf->base + mf->size, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, mf->fd,
                  (off_t)mf->size)) == MAP_FAILED) {
        mf_shrink(mf);
        sto__credit(stv, sizeof *s + cap);
        return (NULL);
    }
    s = malloc(sizeof *s);
    AN(s);
    s->data = p;
    s->cap = cap;
    seg_link(b, s);
    b->bytes += sizeof *s + cap;
    mf->size += cap;
    return (s);
}

static bool
in_mfile(const struct sm_priv *mf, const struct sto_seg *s)
{
    return (mf != NULL && mf->fd >= 0 && s->data >= mf->base && s->data < mf->base + mf->size);
}

/*
 * The stored head, the Vary values and the index's own entries are heap
 * too: counted against the store, so that the process stays near the
 * configured size however small the bodies are.  A body of announced
 * length that fits one segment gets it now, with the head and Vary
 * values in front: one allocation per object instead of two.
 */
static int
sm_open(struct stv *stv, struct sto_body *b, struct sto_meta *m)
{
    size_t lead = m->head_len + m->vary_len;
    struct sto_seg *s;
    uint64_t n;
    char *p;

    if (b->size_hint == 0 || b->size_hint > SEG_MAX || mfile_wanted(b->size_hint, 0)) {
        /* Head and Vary values stay in the caller's own blocks. */
        n = m->mem + sto_heap_cost(m->head_len) +
            (m->vary_len > 0 ? sto_heap_cost(m->vary_len) : 0);
        if (sto__charge(stv, n) != 0)
            return (-1);
        b->bytes += n;
        return (0);
    }
    if (sto__charge(stv, m->mem + blk_cost(sizeof *s + lead + b->size_hint)) != 0)
        return (-1);
    s = seg_new(b, lead, (size_t)b->size_hint);
    b->bytes += m->mem;
    p = (char *)(s + 1);
    memcpy(p, m->head, m->head_len);
    m->head = p;
    if (m->vary_len > 0)
        memcpy(p + m->head_len, m->vary, m->vary_len);
    m->vary = p + m->head_len;
    b->meta_stored = true;
    return (0);
}

/* The announced length sizes segments exactly; otherwise they double. */
static size_t
seg_cap(const struct sto_body *b, size_t len)
{
    size_t cap;

    if (b->size_hint > b->len)
        cap = b->size_hint - b->len > SEG_MAX ? SEG_MAX : (size_t)(b->size_hint - b->len);
    else
        cap = b->len < SEG_MIN ? SEG_MIN : (b->len > SEG_MAX ? SEG_MAX : (size_t)b->len);
    if (cap < len && cap < SEG_MIN)
        cap = len < SEG_MIN ? len : SEG_MIN;
    return (cap);
}

static int
sm_append(struct stv *stv, struct sto_body *b, const void *p, size_t len)
{
    struct sto_seg *s;
    size_t n, cap;

    while (len > 0) {
        s = b->last;
        if (s == NULL || s->len == s->cap) {
            cap = seg_cap(b, len);
            s = NULL;
            if (mfile_wanted(b->size_hint, b->len))
                s = mseg_new(stv, b);
            if (s == NULL) {
                if (sto__charge(stv, blk_cost(sizeof *s + cap)) != 0)
                    return (-1);
                s = seg_new(b, 0, cap);
            }
        }
        n = s->cap - s->len;
        if (n > len)
            n = len;
        memcpy(s->data + s->len, p, n);
        s->len += n;
        b->len += n;
        p = (const char *)p + n;
        len -= n;
    }
    return (0);
}

/*
 * The last segment is in the memory file: its unused whole pages go, in
 * place.  Their addresses stay reserved (an inaccessible mapping over
 * them), so that nothing else is ever mapped inside the reservation.
 */
static void
mfile_trim(struct stv *stv, struct sto_body *b, struct sto_seg *s)
{
    struct sm_priv *mf = b->priv;
    size_t keep = page_round(s->len > 0 ? s->len : 1), spare;

    if (keep >= s->cap || s->data + s->cap != mf->base + mf->size)
        return;
    spare = s->cap - keep;
    SRG_ASSERT(mmap(s->data + keep, spare, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) != MAP_FAILED);
    mf->size -= spare;
    mf_shrink(mf);
    s->cap = keep;
    b->bytes -= spare;
    sto__credit(stv, spare);
}

static void
sm_trim(struct stv *stv, struct sto_body *b)
{
    struct sto_seg *s = b->last, *t, **pp;
    size_t spare, keep;

    if (s != NULL && in_mfile(b->priv, s)) {
        mfile_trim(stv, b, s);
        return;
    }
    /* A segment with the head in front is sized exactly, and must not move. */
    if (s == NULL || s->len == s->cap || s->data != (char *)(s + 1))
        return;
    keep = s->len > 0 ? s->len : 1;
    spare = blk_cost(sizeof *s + s->cap) - blk_cost(sizeof *s + keep);
    for (pp = &b->first; *pp != s; pp = &(*pp)->next)
        AN(*pp);
    if (spare == 0)
        return; /* the same block size either way: nothing to give back */
    if (!blk_slab(sizeof *s + s->cap) && !blk_slab(sizeof *s + keep)) {
        t = realloc(s, sizeof *t + keep);
        AN(t);
    } else {
        /* A slab block on either side: a new block and a copy, as realloc would. */
        t = blk_alloc(sizeof *t + keep);
        memcpy(t, s, sizeof *t + keep);
        blk_free(s, seg_size(s));
    }
    t->data = (char *)(t + 1);
    t->cap = keep;
    *pp = t;
    b->last = t;
    b->bytes -= spare;
    sto__credit(stv, spare);
}

/* A body's tail: its length, then its bytes. */
struct sm_tail {
    size_t len;
    char data[];
};

static int
sm_set_tail(struct stv *stv, struct sto_body *b, const void *p, size_t len)
{
    struct sm_priv *sp = priv_of(b);
    struct sm_tail *t;

    SRG_ASSERT(sp->tail == NULL);
    if (sto__charge(stv, sto_heap_cost(sizeof *t + len)) != 0)
        return (-1);
    t = malloc(sizeof *t + len);
    AN(t);
    t->len = len;
    memcpy(t->data, p, len);
    b->bytes += sto_heap_cost(sizeof *t + len);
    sp->tail = t;
    return (0);
}

static const void *
sm_tail(const struct stv *stv, const struct sto_body *b, size_t *len)
{
    const struct sm_priv *sp = b->priv;

    (void)stv;
    if (sp == NULL || sp->tail == NULL)
        return (NULL);
    *len = sp->tail->len;
    return (sp->tail->data);
}

/*
 * Heap segments and the descriptors of file segments are each one
 * allocation; the memory file goes whole.  Closing it is what makes its
 * pages die with the last socket that holds them.
 */
static void
sm_free(struct stv *stv, struct sto_body *b)
{
    struct sm_priv *sp = b->priv;
    struct sto_seg *s;

    while ((s = b->first) != NULL) {
        b->first = s->next;
        if (in_mfile(sp, s))
            free(s);
        else
            blk_free(s, seg_size(s));
    }
    if (sp != NULL) {
        if (sp->fd >= 0) {
            AZ(munmap(sp->base, sp->reserve));
            AZ(close(sp->fd));
            __atomic_sub_fetch(&mfiles, 1, __ATOMIC_RELAXED);
            STAT_DEC(sto_mfiles);
        }
        free(sp->tail);
        free(sp);
        b->priv = NULL;
    }
    sto__credit(stv, b->bytes);
}

static bool
sm_seg_file(struct stv *stv, struct sto_body *b, const struct sto_seg *s, int *fd, off_t *off)
{
    const struct sm_priv *mf = b->priv;

    (void)stv;
    if (!in_mfile(mf, s))
        return (false);
    *fd = mf->fd;
    *off = (off_t)(s->data - mf->base);
    return (true);
}

const struct stv_ops sto_malloc_ops = {
    .name = "malloc",
    .open = sm_open,
    .append = sm_append,
    .trim = sm_trim,
    .free = sm_free,
    .release = sm_free,
    .seg_file = sm_seg_file,
    .set_tail = sm_set_tail,
    .tail = sm_tail,
};
