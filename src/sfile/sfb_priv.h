/*
 * sfb_priv.h -- what the static-file backend's files share: the sfb
 * itself, the open-file cache and the cache of compressed copies.
 */
#ifndef SUROGAT_SFB_PRIV_H
#define SUROGAT_SFB_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "surogat/gz.h"
#include "surogat/tim.h"

struct sfb_mime {
    char *ext;        /* lower case, without the dot */
    const char *type; /* into sfb->types */
    unsigned rank;    /* later wins: the built-in table, then the file, then overrides */
};

struct sfb_exp {
    char *pat; /* glob over the type without parameters */
    long secs;
};

struct sb;
struct sfb_file;
struct sfb_zcopy;

struct sfb {
    unsigned magic;
#define SFB_MAGIC 0x1f6b3e95
    int rootfd;     /* O_PATH of the root: every open is relative to it */
    char *root;     /* as configured, for messages */
    char *rootreal; /* realpath(root), for the check without openat2(2) */
    char **index;
    unsigned nindex;
    bool listing;
    bool follow; /* follow_symlinks */
    char **deny;
    unsigned ndeny;
    struct sfb_mime *mime; /* sorted by ext, one entry per ext */
    size_t nmime;
    char **types; /* the distinct type strings mime[] points at */
    size_t ntypes;
    struct sfb_exp *exp;
    unsigned nexp;
    /* The open-file cache (sfb_cache.c). */
    pthread_mutex_t mtx;
    struct sfb_file **bucket; /* hash chains, nbucket a power of two */
    unsigned nbucket;
    unsigned nfile;            /* entries in the table, under mtx */
    struct sfb_file *lru_head; /* most recently used first, under mtx */
    struct sfb_file *lru_tail;
    /* The compressed copies (sfb_zcache.c), under zmtx. */
    pthread_mutex_t zmtx;
    struct sfb_zcopy **zbucket;  /* hash chains, SFB_ZBUCKETS */
    struct sfb_zcopy *zlru_head; /* most recently used first */
    struct sfb_zcopy *zlru_tail;
    uint64_t zbytes; /* data of the copies in the table */
};

/*
 * An open regular file with what its responses need, shared by every
 * request serving it.  Immutable once in the table, except t_checked
 * and the links; a file changed on disk gets a new entry.
 */
struct sfb_file {
    unsigned magic;
#define SFB_FILE_MAGIC 0x6c2d9a41
    unsigned refcnt; /* the table's and each request's, under sfb->mtx */
    int fd;
    uint64_t size;
    dev_t dev;
    ino_t ino;
    struct timespec mtime;
    double t_checked; /* tim_mono() of the last stat(2) against the path, under mtx */
    bool in_table;    /* under mtx */
    char *mem;        /* the whole body when size <= sfb_mem_max (read once), else NULL */
    const char *type; /* Content-Type */
    long expires;     /* seconds, -1: none */
    char etag[64];    /* with its quotes */
    /* Precompressed siblings (sfb_zcache.c): looked for at most every sfb_cache_check. */
    double t_sib;      /* tim_mono() of the last look, 0: never; under mtx */
    unsigned sib_mask; /* GZ_SET() of the codings found then; under mtx */
    /*
     * Whether type is in gzip_types (sfb__compressible()): the list's
     * pointer it was judged against, with bit 0 set when it matched, 0:
     * not judged yet.  Atomic, no lock: any worker may judge it again.  A
     * replaced list is never freed while running (par.c), so the pointer
     * says which list it was.
     */
    uintptr_t ztype;
    char lm[TIM_HTTP_DATE_LEN + 1];
    uint32_t hash;
    struct sfb_file *hnext;
    struct sfb_file *lprev;
    struct sfb_file *lnext;
    size_t plen;
    char path[]; /* the normalised path: the key */
};

enum sfb__open {
    SFB_O_FILE,      /* *fp: a regular file, referenced */
    SFB_O_DIR,       /* a directory */
    SFB_O_NOTFOUND,  /* 404 */
    SFB_O_DENIED,    /* 404: a symlink to a name on the deny list */
    SFB_O_FORBIDDEN, /* 403: unreadable, outside the root, not a regular file */
    SFB_O_ERROR,     /* 503: out of descriptors or memory, I/O error */
};

/* Open a normalised path under the root (O_DIRECTORY in flags for a listing); -1 with errno. */
int sfb__openat(const struct sfb *sfb, const char *path, int flags);
void sfb__cache_init(struct sfb *sfb);
void sfb__cache_fini(struct sfb *sfb);
/* The entry for path, from the cache or freshly opened.  Blocks on the disk. */
enum sfb__open sfb__file_get(struct sfb *sfb, const char *path, size_t plen, struct sfb_file **fp);
void sfb__file_put(struct sfb *sfb, struct sfb_file **fp); /* *fp = NULL */
/*
 * A compressed copy of a file's bytes in one coding, kept by the file's
 * identity, shared by the responses sending it.  Immutable once ready.
 */
struct sfb_zcopy {
    unsigned magic;
#define SFB_ZCOPY_MAGIC 0x2f9c6d18
    unsigned refcnt; /* the table's and each response's, under zmtx */
    bool ready;      /* made; before, the maker alone works on it */
    bool useless;    /* made, but no smaller than the file: send the file */
    bool in_table;
    enum gz_coding coding;
    dev_t dev;
    ino_t ino;
    uint64_t size; /* of the file */
    struct timespec mtime;
    char *data; /* malloc'd, len bytes */
    uint64_t len;
    uint32_t hash;
    struct sfb_zcopy *hnext, *lprev, *lnext;
    size_t plen;
    char path[];
};
#define SFB_ZBUCKETS 256

void sfb__zcache_init(struct sfb *sfb);
void sfb__zcache_fini(struct sfb *sfb);
/*
 * The copy of f in coding c, ready (referenced), or NULL when there is
 * none to send: another request is making it, the file is too big for
 * the cache or no smaller compressed, or it changed while read.  Makes it
 * when missing: blocks on the CPU and the disk, never under a lock.
 */
struct sfb_zcopy *sfb__zcopy_get(struct sfb *sfb, const struct sfb_file *f, enum gz_coding c);
void sfb__zcopy_put(struct sfb *sfb, struct sfb_zcopy **zp); /* *zp = NULL */
/* The codings of f's precompressed siblings, regular files not older than f (cached). */
unsigned sfb__siblings(struct sfb *sfb, struct sfb_file *f);
/* The file name suffix of a sibling in coding c: ".br", ".zst", ".gz". */
const char *sfb__sibling_ext(enum gz_coding c);
/* Whether f's type and size make it worth compressing on the fly. */
bool sfb__compressible(struct sfb_file *f);

/* Percent-encode a normalised path for a URL (Location, listing links); NUL-terminated. */
void sfb__url_encode(struct sb *sb, const char *s);

#endif
