/*
 * sfb_priv.h -- what the static-file backend's files share: the sfb
 * itself and the open-file cache.
 */
#ifndef SUROGAT_SFB_PRIV_H
#define SUROGAT_SFB_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

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
/* Percent-encode a normalised path for a URL (Location, listing links); NUL-terminated. */
void sfb__url_encode(struct sb *sb, const char *s);

#endif
