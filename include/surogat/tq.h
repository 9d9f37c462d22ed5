/*
 * tq -- the query language of `surogatctl log -q`: which transactions a
 * log stream shows.
 *
 *     ReqURL ~ "^/news" && RespStatus >= 500
 *     (Cache == "MISS" || Cache == "PASS") && !ReqHeader:Cookie
 *     Duration > 0.5 && Backend == "api"
 *
 * A query is tests joined by && and ||, negated by !, grouped by
 * parentheses (! binds tightest, then &&, then ||).  A test is a field --
 * ReqURL, ReqMethod, ReqHeader:NAME, RespStatus, RespHeader:NAME,
 * BerespStatus, Backend, Client, Duration (seconds), Cache (HIT, MISS,
 * PASS ... as tbl/outcomes.h names them, any case), TTL (seconds) --
 * alone (true when the transaction has it), or compared with a literal:
 * == != with a "string" or a number, < <= > >= with a number, ~ !~ with
 * a "string" that is a PCRE2 pattern.  Strings are in double quotes, with
 * \" and \\ escapes.  A field may have several values (a header sent
 * twice, the records of a request and of its backend transaction): a test
 * is true when one of them passes; on a field the transaction does not
 * have, every comparison is false, != and !~ included.
 *
 * Pure: compiling allocates, matching does not (one stream's thread).
 */
#ifndef SUROGAT_TQ_H
#define SUROGAT_TQ_H

#include <stdbool.h>
#include <stddef.h>

struct sb;

enum tq_field {
    TQ_F_REQ_URL,
    TQ_F_REQ_METHOD,
    TQ_F_REQ_HEADER, /* with a name */
    TQ_F_RESP_STATUS,
    TQ_F_RESP_HEADER, /* with a name */
    TQ_F_BERESP_STATUS,
    TQ_F_BACKEND,
    TQ_F_CLIENT,
    TQ_F_DURATION,
    TQ_F_CACHE,
    TQ_F_TTL,
    TQ_F__N
};
const char *tq_field_name(enum tq_field f); /* "ReqURL"; NULL past the list */

struct tq_val {
    const char *p;
    size_t len;
};
/*
 * The values of field f (hname: the header's name, NUL-terminated, for
 * the header fields, else NULL) in subject subj, one per call: the i-th
 * (i = 0, 1 ...) into *v and true, false when there are no more.
 */
typedef bool tq_get_f(void *subj, enum tq_field f, const char *hname, unsigned i, struct tq_val *v);
/*
 * Whether a field may be queried where the query will run: NULL if so,
 * else why not (a stream of log lines lacks most headers).
 */
typedef const char *tq_check_f(enum tq_field f, const char *hname);

struct tq; /* opaque: a compiled query */
/*
 * Compile src (NUL-terminated).  NULL with the reason in err and the
 * offset in src where it was found in *errpos.  check may be NULL.
 */
struct tq *tq_compile(const char *src, tq_check_f *check, struct sb *err, size_t *errpos);
void tq_free(struct tq **qp); /* *qp = NULL; NULL is fine */
/* Whether subj passes q, its fields read through get. */
bool tq_match(struct tq *q, tq_get_f *get, void *subj);

#endif
