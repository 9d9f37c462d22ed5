/*
 * esi_priv.h -- what the ESI module's files share: the program builder,
 * which the parser drives (esi_parse.c) and which writes the serialised
 * program (esi_prog.c).
 *
 * The program, all integers LEB128 varints unless said:
 *
 *   "SGE1"  flags (1 byte: bit 0 gzip)  len (the page's identity length)
 *   items:  'L' gap len [gzip: zgap zlen crc32 (4 bytes, little-endian)]
 *           'I' flags (1 byte: bit 0 continue) hostlen host srclen src altlen alt
 *   'E'     crc32 of every byte before it (4 bytes, little-endian)
 *
 * gap and zgap are from the end of the previous literal (0 at first, and
 * 10 -- the gzip header -- for zgap), so a page's offsets cost a byte or
 * two each.
 */
#ifndef SUROGAT_ESI_PRIV_H
#define SUROGAT_ESI_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "surogat/esi.h"

#define ESI_PROG_MAGIC "SGE1"

struct esi_build {
    unsigned char *buf; /* the program so far, malloc'd */
    size_t len, cap;
    esi_cut_f *cut; /* NULL: identity page */
    void *cut_priv;
    bool failed; /* a cut failed */
    /* The run being extended: [start, end), literal or not. */
    bool lit;
    uint64_t start, end;
    uint64_t lit_end, lit_zend; /* where the previous literal ended, for the gaps */
    unsigned nlit, ninc;
};

void esi__build_init(struct esi_build *b, esi_cut_f *cut, void *priv);
void esi__build_fini(struct esi_build *b);
/* Bytes up to end are literal or not: extend the run, or close it and begin another. */
void esi__build_range(struct esi_build *b, bool literal, uint64_t end);
/* An include at the current end (the run before it is closed). */
void esi__build_include(struct esi_build *b, const char *host, size_t hlen, const char *src,
                        size_t slen, const char *alt, size_t alen, bool cont);
/* Close the last run and the program: *prog malloc'd.  -1 when a cut failed. */
int esi__build_finish(struct esi_build *b, uint64_t len, unsigned char **prog, size_t *plen);

#endif
