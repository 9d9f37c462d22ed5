/*
 * sto_file_priv -- shared by the files of the file store: sto_file.c (the
 * file, writing and freeing objects) and sto_file_recover.c (finding them
 * again at startup).  The layout and why it survives a crash are described
 * at the top of sto_file.c.
 */
#ifndef SUROGAT_STO_FILE_PRIV_H
#define SUROGAT_STO_FILE_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "surogat/sto.h"

struct ext_alloc;
struct stv;

#define SF_UNIT    256u
#define SF_DATA    4096u              /* the superblock's room */
#define SF_EXT_MAX (8u * 1024 * 1024) /* the longest extent a body asks for */
#define SF_CHUNK   (16u * 1024)       /* a body of unknown length starts with this */
#define SF_VERSION 1u
#define SF_MAGIC   "surogat-store\n"
/* The aux of a body's tail fragment: after every body fragment in recovery's order. */
#define SF_TAIL_AUX UINT32_MAX

enum sf_magic {
    SF_FREE = 0x5346f4eeu,
    SF_BUSY = 0x5346b057u, /* being written: free space to recovery */
    SF_OBJ = 0x53460b1eu,  /* a sealed object record */
    SF_FRAG = 0x5346f7a9u, /* a fragment of a sealed object's body */
    SF_DEAD = 0x5346deadu, /* a record retired from the index */
};

struct sf_super {
    char magic[16];
    uint32_t version;
    uint32_t unit;
    uint64_t size;
    uint64_t salt;
    uint32_t crc; /* of the fields above */
};

struct sf_hdr {
    uint32_t magic;  /* enum sf_magic; not in hcrc, so it can flip alone */
    uint32_t hcrc;   /* of the salt and the fields below */
    uint32_t units;  /* extent length */
    uint32_t aux;    /* SF_FRAG: index in the body */
    uint64_t serial; /* SF_OBJ, SF_FRAG: the object */
    uint64_t len;    /* SF_FRAG: body bytes; SF_OBJ: bytes before the inline body */
};

struct sf_rec {
    uint32_t rcrc;     /* of this record (rcrc 0) and the attr, key, head and vary after it */
    uint32_t body_crc; /* of the whole body */
    uint32_t key_len;
    uint32_t head_len;
    uint32_t vary_len;
    uint32_t attr_len;
    uint32_t nfrags;
    uint32_t tail_len; /* the body's tail: its own fragment (SF_TAIL_AUX); 0 for none */
    uint64_t body_len;
    uint64_t inline_len; /* body bytes in the record extent */
};

struct sf_store {
    int fd;
    char *path;
    char *map;
    uint64_t size;   /* of the file */
    uint64_t nunits; /* in the data area */
    uint64_t salt;
    uint64_t serial;     /* atomic: the next object's */
    pthread_mutex_t mtx; /* the allocator and the headers of free space */
    struct ext_alloc *ext;
    uint64_t frag_bytes; /* last value added to the sto_frag_bytes gauge */
    bool recovered; /* the allocator knows the free space (recovery ran, or nothing to recover) */
};

/* A body segment: its extent, so it can be sealed and freed. */
struct sf_seg {
    struct sto_seg seg;
    uint64_t start;
    uint32_t units;
    bool in_record; /* the inline part of the record extent */
};

/* b->priv of a file-stored body. */
struct sf_obj {
    uint64_t rec; /* first unit of the record extent */
    uint32_t rec_units;
    uint32_t nfrags;
    uint64_t serial;
    uint32_t crc;      /* the body's: running while written, expected once recovered */
    uint32_t meta_len; /* record extent bytes before the inline body */
    bool sealed;
    /* The tail's extent, its bytes after the header; tail_len 0: none. */
    uint64_t tail_start;
    uint32_t tail_units;
    uint32_t tail_len;
};

static inline char *
unit_ptr(const struct sf_store *st, uint64_t u)
{
    return (st->map + SF_DATA + u * SF_UNIT);
}

static inline struct sf_hdr *
hdr_at(const struct sf_store *st, uint64_t u)
{
    return ((struct sf_hdr *)(void *)unit_ptr(st, u));
}

static inline struct sf_rec *
rec_of(const struct sf_store *st, uint64_t u)
{
    return ((struct sf_rec *)(void *)(unit_ptr(st, u) + sizeof(struct sf_hdr)));
}

/* The header's checksum, keyed with the store's salt. */
uint32_t sf__hdr_crc(const struct sf_store *st, const struct sf_hdr *h);
/* The record's checksum: its fields (rcrc as 0) and the attr, key, head and vary after it. */
uint32_t sf__rec_crc(const struct sf_rec *r);
/* Headers for a free run; a run longer than a header can say gets several. */
void sf__write_free(struct sf_store *st, uint64_t u, uint64_t n);
/* The gauge of free bytes outside the largest free extent, under st->mtx. */
void sf__frag_gauge(struct sf_store *st);
/* A body segment over units units from start, whose bytes are data[0..cap). */
struct sf_seg *sf__seg_new(uint64_t start, uint64_t units, char *data, size_t cap, bool in_record);
void sf__seg_link(struct sto_body *b, struct sf_seg *fs); /* at the end of b's segments */
/* Free an object's extents, the record last, and forget it (the store's free op). */
void sf__free(struct stv *stv, struct sto_body *b);
/* Walk the file, rebuild the free space and hand the sealed objects to cb (the recover op). */
void sf__recover(struct stv *stv, sto_recover_f *cb);

#endif
