/*
 * Inside the storage module: what a store is, and the operations each
 * kind provides.  sto.c dispatches to them and keeps the accounts.
 */
#ifndef SUROGAT_STO_PRIV_H
#define SUROGAT_STO_PRIV_H

#include "surogat/sto.h"

struct stv_ops {
    const char *name;
    bool trim_in_place; /* trim never moves written bytes */
    int (*open)(struct stv *, struct sto_body *, struct sto_meta *);
    int (*append)(struct stv *, struct sto_body *, const void *, size_t);
    void (*trim)(struct stv *, struct sto_body *);
    void (*seal)(struct stv *, struct sto_body *);
    void (*retire)(struct stv *, struct sto_body *);
    void (*free)(struct stv *, struct sto_body *);
    void (*release)(struct stv *, struct sto_body *);
    void (*set_attr)(struct stv *, struct sto_body *, const void *, size_t);
    int (*set_tail)(struct stv *, struct sto_body *, const void *, size_t);
    const void *(*tail)(const struct stv *, const struct sto_body *, size_t *);
    bool (*verify)(struct stv *, struct sto_body *);
    /* sto_seg_file(); NULL: never in a file */
    bool (*seg_file)(struct stv *, struct sto_body *, const struct sto_seg *, int *, off_t *);
    /* sto_sweep() for one store: the bytes it still holds in quarantine; NULL: it holds none */
    uint64_t (*sweep)(struct stv *);
    void (*recover)(struct stv *, sto_recover_f *);
    void (*list)(const struct stv *, struct sb *);
    void (*fini)(struct stv *);
};

struct stv {
    unsigned magic;
#define STV_MAGIC 0x57a0e1b3
    const struct stv_ops *ops;
    uint8_t id;    /* what a body's stv holds: 1 for the first store */
    uint64_t size; /* bytes this store may use */
    uint64_t used; /* atomic: bytes in use */
    void *priv;
};

extern const struct stv_ops sto_malloc_ops;
extern const struct stv_ops sto_file_ops;

/* Set up the store's priv from the text after "kind,"; 0, or -1 with a reason. */
int sto_malloc_new(struct stv *stv, const char *args, struct sb *err);
int sto_file_new(struct stv *stv, const char *args, struct sb *err);

/* Charge n bytes to the store: 0, or -1 if that would go past its size. */
int sto__charge(struct stv *stv, uint64_t n);
void sto__credit(struct stv *stv, uint64_t n);
/* A store quarantined space: the stores' thread sweeps it soon (any thread, never blocks). */
void sto__kick(void);

#endif
