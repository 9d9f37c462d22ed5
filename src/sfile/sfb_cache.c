/*
 * The open-file cache of the static-file backend: open descriptors, with
 * their size, validators, type and (for small files) their bytes, keyed
 * by normalised path, shared by all workers.
 *
 * An entry is trusted for sfb_cache_check seconds; after that the next
 * request for it opens the path again and compares device, inode, size
 * and mtime, so a file replaced (rename) or rewritten is seen within that
 * time, and a stat storm costs one open per file per interval.  The table
 * is bounded by sfb_cache_entries, evicting the least recently used.
 *
 * Locking: one mutex per sfb over the table, the LRU list, refcounts and
 * t_checked.  Disk I/O (open, fstat, read) is never done under it.  An
 * entry leaves the table on eviction or replacement but lives on until
 * the last request using it lets go, so a descriptor is never closed
 * under a sendfile(2).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/sfb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

#include "sfb_priv.h"

/* FNV-1a: keys are short paths. */
static uint32_t
path_hash(const char *p, size_t len)
{
    uint32_t h = 2166136261u;

    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)p[i]) * 16777619u;
    return (h);
}

void
sfb__cache_init(struct sfb *sfb)
{
    unsigned n = 64;

    /* Sized for the parameter at start; a later, larger value only lengthens the chains. */
    while (n < par.sfb_cache_entries && n < (1u << 20))
        n <<= 1;
    sfb->nbucket = n;
    sfb->bucket = calloc(n, sizeof *sfb->bucket);
    AN(sfb->bucket);
    AZ(pthread_mutex_init(&sfb->mtx, NULL));
}

static void
file_free(struct sfb_file *f)
{
    OBJ_CHECK(f, SFB_FILE_MAGIC);
    AZ(f->refcnt);
    if (f->fd >= 0)
        close(f->fd);
    free(f->mem);
    f->magic = 0;
    free(f);
}

/* Unlink f from the table and the LRU list; the table's reference is the caller's now. */
static void
unlink_file(struct sfb *sfb, struct sfb_file *f)
{
    struct sfb_file **pp = &sfb->bucket[f->hash & (sfb->nbucket - 1)];

    while (*pp != f)
        pp = &(*pp)->hnext;
    *pp = f->hnext;
    if (f->lprev != NULL)
        f->lprev->lnext = f->lnext;
    else
        sfb->lru_head = f->lnext;
    if (f->lnext != NULL)
        f->lnext->lprev = f->lprev;
    else
        sfb->lru_tail = f->lprev;
    f->hnext = f->lprev = f->lnext = NULL;
    f->in_table = false;
    sfb->nfile--;
}

static void
lru_front(struct sfb *sfb, struct sfb_file *f)
{
    if (sfb->lru_head == f)
        return;
    if (f->lprev != NULL)
        f->lprev->lnext = f->lnext;
    if (f->lnext != NULL)
        f->lnext->lprev = f->lprev;
    else if (sfb->lru_tail == f)
        sfb->lru_tail = f->lprev;
    f->lprev = NULL;
    f->lnext = sfb->lru_head;
    if (sfb->lru_head != NULL)
        sfb->lru_head->lprev = f;
    sfb->lru_head = f;
    if (sfb->lru_tail == NULL)
        sfb->lru_tail = f;
}

void
sfb__cache_fini(struct sfb *sfb)
{
    struct sfb_file *f;

    while ((f = sfb->lru_head) != NULL) {
        unlink_file(sfb, f);
        f->refcnt--;
        file_free(f); /* asserts nobody else holds it */
    }
    free(sfb->bucket);
    sfb->bucket = NULL;
    AZ(pthread_mutex_destroy(&sfb->mtx));
}

/*
 * Where fd really is, from the kernel: its path below the root ("/a/b"),
 * or NULL when it is outside the root or /proc cannot say.
 */
static const char *
real_below_root(const struct sfb *sfb, int fd, char *where, size_t cap)
{
    size_t rl = strcmp(sfb->rootreal, "/") == 0 ? 0 : strlen(sfb->rootreal);
    char link[64];
    ssize_t n;

    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, where, cap - 1);
    if (n <= 0)
        return (NULL);
    where[n] = '\0';
    if (strncmp(where, sfb->rootreal, rl) != 0 || (where[rl] != '/' && where[rl] != '\0'))
        return (NULL);
    return (where + rl);
}

/*
 * Without openat2(2) (seccomp, old kernels): open normally, then ask the
 * kernel where the descriptor really points and refuse it if that is
 * outside the root.  Checking what was opened, not the path, leaves no
 * window for a symlink swapped in between.
 */
static int
open_checked(const struct sfb *sfb, const char *rel, int flags)
{
    char where[4096];
    int fd = openat(sfb->rootfd, rel, flags);

    if (fd < 0 || sfb->follow || real_below_root(sfb, fd, where, sizeof where) != NULL)
        return (fd);
    close(fd);
    errno = EXDEV;
    return (-1);
}

/*
 * The deny list on the file itself: a symlink "notes.txt" to "x.php", or
 * "docs" to ".git", passes the check on the request path.  Only links
 * make the two differ, and the cost is one readlink(2) per open, not per
 * request.
 */
static bool
target_denied(const struct sfb *sfb, int fd)
{
    char where[4096] = "";
    const char *rel = real_below_root(sfb, fd, where, sizeof where);

    if (rel == NULL) {
        /* Outside the root (follow_symlinks), or no /proc: judge the final name. */
        if (strchr(where, '/') == NULL)
            return (false);
        rel = strrchr(where, '/');
    }
    return (sfb_denied(sfb, rel));
}

int
sfb__openat(const struct sfb *sfb, const char *path, int flags)
{
    static int no_openat2;
    const char *rel = path[1] != '\0' ? path + 1 : ".";
    struct open_how how;
    long fd;

    OBJ_CHECK(sfb, SFB_MAGIC);
    SRG_ASSERT(path[0] == '/');
    flags |= O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK; /* a FIFO must not block us */
    if (sfb->follow || __atomic_load_n(&no_openat2, __ATOMIC_RELAXED))
        return (open_checked(sfb, rel, flags));
    memset(&how, 0, sizeof how);
    how.flags = (uint64_t)flags;
    /* The kernel refuses ".." and any symlink that would take the walk out of the root. */
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    fd = syscall(SYS_openat2, sfb->rootfd, rel, &how, sizeof how);
    if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
        __atomic_store_n(&no_openat2, 1, __ATOMIC_RELAXED);
        return (open_checked(sfb, rel, flags));
    }
    return ((int)fd);
}

static enum sfb__open
open_errno(int e)
{
    switch (e) {
    case ENOENT:
    case ENOTDIR:
    case ENAMETOOLONG:
        return (SFB_O_NOTFOUND);
    case EACCES:
    case EPERM:
    case EXDEV:
    case ELOOP:
        return (SFB_O_FORBIDDEN);
    default:
        return (SFB_O_ERROR);
    }
}

static bool
same_file(const struct sfb_file *f, const struct stat *st)
{
    return (f->dev == st->st_dev && f->ino == st->st_ino && f->size == (uint64_t)st->st_size &&
            f->mtime.tv_sec == st->st_mtim.tv_sec && f->mtime.tv_nsec == st->st_mtim.tv_nsec);
}

/* Read a small file whole; false when it changed meanwhile (then it is sent from disk). */
static bool
read_whole(struct sfb_file *f)
{
    struct stat st;
    size_t got = 0;
    ssize_t n;

    f->mem = malloc(f->size > 0 ? f->size : 1);
    AN(f->mem);
    while (got < f->size) {
        n = pread(f->fd, f->mem + got, f->size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got == f->size && fstat(f->fd, &st) == 0 && same_file(f, &st))
        return (true);
    free(f->mem);
    f->mem = NULL;
    return (false);
}

static struct sfb_file *
file_new(struct sfb *sfb, const char *path, size_t plen, int fd, const struct stat *st)
{
    struct sfb_file *f = calloc(1, sizeof *f + plen + 1);

    AN(f);
    f->magic = SFB_FILE_MAGIC;
    f->fd = fd;
    f->size = (uint64_t)st->st_size;
    f->dev = st->st_dev;
    f->ino = st->st_ino;
    f->mtime = st->st_mtim;
    memcpy(f->path, path, plen);
    f->plen = plen;
    f->hash = path_hash(path, plen);
    f->type = sfb_mime_type(sfb, f->path);
    f->expires = sfb_expires(sfb, f->type);
    /* Not the inode: replicas of one site on several servers must agree. */
    snprintf(f->etag, sizeof f->etag, "\"%llx-%lx-%llx\"", (unsigned long long)st->st_mtim.tv_sec,
             (unsigned long)st->st_mtim.tv_nsec, (unsigned long long)f->size);
    tim_http_date((double)st->st_mtim.tv_sec, f->lm);
    if (f->size <= par.sfb_mem_max)
        (void)read_whole(f);
    return (f);
}

static struct sfb_file *
find(struct sfb *sfb, const char *path, size_t plen, uint32_t h)
{
    for (struct sfb_file *f = sfb->bucket[h & (sfb->nbucket - 1)]; f != NULL; f = f->hnext)
        if (f->hash == h && f->plen == plen && memcmp(f->path, path, plen) == 0)
            return (f);
    return (NULL);
}

/* Drop a reference under the lock; the caller frees what is returned, outside it. */
static struct sfb_file *
deref_locked(struct sfb_file *f)
{
    SRG_ASSERT(f->refcnt > 0);
    return (--f->refcnt == 0 ? f : NULL);
}

enum sfb__open
sfb__file_get(struct sfb *sfb, const char *path, size_t plen, struct sfb_file **fp)
{
    struct sfb_file *f, *nf, *gone[3] = { NULL, NULL, NULL };
    uint32_t h = path_hash(path, plen);
    double now = tim_mono();
    struct stat st;
    int fd;

    OBJ_CHECK(sfb, SFB_MAGIC);
    AZ(pthread_mutex_lock(&sfb->mtx));
    f = find(sfb, path, plen, h);
    if (f != NULL) {
        f->refcnt++;
        lru_front(sfb, f);
        if (now - f->t_checked < par.sfb_cache_check) {
            AZ(pthread_mutex_unlock(&sfb->mtx));
            STAT_INC(sfb_cache_hit);
            *fp = f;
            return (SFB_O_FILE);
        }
    }
    AZ(pthread_mutex_unlock(&sfb->mtx));
    STAT_INC(sfb_cache_miss);
    fd = sfb__openat(sfb, path, 0);
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        enum sfb__open r = fd < 0                ? open_errno(errno)
                           : S_ISDIR(st.st_mode) ? SFB_O_DIR
                                                 : SFB_O_FORBIDDEN;
        if (fd >= 0)
            close(fd);
        if (f != NULL) {
            /* Gone or changed into something else: forget it. */
            AZ(pthread_mutex_lock(&sfb->mtx));
            if (f->in_table) {
                unlink_file(sfb, f);
                gone[0] = deref_locked(f);
            }
            gone[1] = deref_locked(f);
            AZ(pthread_mutex_unlock(&sfb->mtx));
            for (int i = 0; i < 2; i++)
                if (gone[i] != NULL)
                    file_free(gone[i]);
        }
        return (r);
    }
    if (target_denied(sfb, fd)) {
        close(fd);
        if (f != NULL)
            sfb__file_put(sfb, &f);
        return (SFB_O_DENIED);
    }
    if (f != NULL && same_file(f, &st)) {
        close(fd);
        AZ(pthread_mutex_lock(&sfb->mtx));
        f->t_checked = now;
        AZ(pthread_mutex_unlock(&sfb->mtx));
        *fp = f;
        return (SFB_O_FILE);
    }
    nf = file_new(sfb, path, plen, fd, &st);
    nf->t_checked = now;
    nf->refcnt = 2; /* the table's and ours */
    AZ(pthread_mutex_lock(&sfb->mtx));
    if (f != NULL)
        gone[0] = deref_locked(f);
    /* Whatever is in the table under this path now (f, or another worker's) is older. */
    if ((f = find(sfb, path, plen, h)) != NULL) {
        unlink_file(sfb, f);
        gone[1] = deref_locked(f);
    }
    nf->hnext = sfb->bucket[h & (sfb->nbucket - 1)];
    sfb->bucket[h & (sfb->nbucket - 1)] = nf;
    nf->in_table = true;
    sfb->nfile++;
    lru_front(sfb, nf);
    /* One in, at most one out: the table shrinks back slowly if the bound was lowered. */
    if (sfb->nfile > SRG_MAX(par.sfb_cache_entries, 1u) && sfb->lru_tail != nf) {
        f = sfb->lru_tail;
        unlink_file(sfb, f);
        gone[2] = deref_locked(f);
        STAT_INC(sfb_cache_evict);
    }
    AZ(pthread_mutex_unlock(&sfb->mtx));
    for (int i = 0; i < 3; i++)
        if (gone[i] != NULL)
            file_free(gone[i]);
    *fp = nf;
    return (SFB_O_FILE);
}

void
sfb__file_put(struct sfb *sfb, struct sfb_file **fp)
{
    struct sfb_file *f = *fp, *gone;

    *fp = NULL;
    OBJ_CHECK(f, SFB_FILE_MAGIC);
    AZ(pthread_mutex_lock(&sfb->mtx));
    gone = deref_locked(f);
    AZ(pthread_mutex_unlock(&sfb->mtx));
    if (gone != NULL)
        file_free(gone);
}
