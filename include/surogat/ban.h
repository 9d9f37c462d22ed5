/*
 * ban -- invalidation by expression: "every object in the cache now whose
 * URL matches ^/news" (Varnish's bans).
 *
 * Expressions (ban_expr_parse):
 *
 *     cond [&& cond]...        cond:  FIELD OP ARG
 *
 *     FIELD  req.url           the object's URL (request-target) from its key
 *            req.http.host     the Host it was stored under (lower case);
 *                              compared case-insensitively, since hosts are
 *            obj.status        its status code: OP is one of == != < > <= >=
 *            obj.http.NAME     the first field NAME of its stored head
 *                              (NAME case-insensitive)
 *     OP     == != (strings: exact), ~ !~ (PCRE2 regular expression)
 *     ARG    a word without blanks, or a "double-quoted string" in which
 *            \" and \\ are escapes (any other backslash stays, for regexes)
 *
 * Tokens are separated by blanks.  A missing obj.http field equals
 * nothing: == and ~ are false for it, != and !~ true (as in Varnish).
 * Every field is known from the object alone -- the request fields come
 * from its cache key, "host NUL url" -- so the background sweeper (the
 * lurker) can test objects no request asks for.
 *
 * A ban applies to the objects in the cache when it is added, never to
 * objects stored later.  Each object points at the newest ban it has been
 * tested against (ban_obj_new when it is created); a lookup tests it
 * against the newer ones (ban_check_obj), and the lurker thread walks the
 * index in batches doing the same, so that bans no object still needs are
 * freed.  A match marks the object COBJ_BANNED: lookups skip it and it is
 * unlinked.  A regex that cannot be evaluated counts as a match
 * (bans_regex_errors; logged once per ban).
 *
 * Locks: ban_mtx guards the list and each ban's object count.  It ranks
 * below the shard locks of hsh.c: it may be taken while a shard lock is
 * held (lookups, the lurker's visit callback), never the reverse.
 * Expressions are evaluated with no ban lock held.
 */
#ifndef SUROGAT_BAN_H
#define SUROGAT_BAN_H

#include <stdbool.h>
#include <stddef.h>

struct ban;
struct ban_expr; /* opaque, immutable once parsed */
struct cobj;
struct sb;

/* ---- expressions (ban_expr.c): pure, for tests and fuzzing too ---- */

/*
 * Parse `s`; NULL with a one-line message in err naming the byte
 * position ("ban: at 9: unknown operator '=~' ...").
 */
struct ban_expr *ban_expr_parse(const char *s, struct sb *err);
void ban_expr_free(struct ban_expr **exprp);
/* The expression in canonical form: tokens single-spaced, arguments quoted. */
void ban_expr_print(const struct ban_expr *expr, struct sb *out);
/*
 * Whether an object with cache key `key` ("host NUL url") and oc's status
 * and stored head matches.  oc needs only status, head and head_len.
 * A regex that PCRE2 cannot finish on the value (its match, depth or heap
 * limit -- a pattern that backtracks catastrophically -- or any other
 * matching error) makes its condition true, for ~ and !~ alike: a ban
 * errs on the side of invalidating, never on keeping what was meant to
 * go.  *re_err gets the PCRE2 error code of the first such condition, 0
 * when there was none.
 */
bool ban_expr_match(const struct ban_expr *expr, const char *key, size_t keylen,
                    const struct cobj *oc, int *re_err);
/* PCRE2's message for an error code from ban_expr_match(). */
void ban_expr_re_error(int re_err, struct sb *out);

/* ---- the ban list (ban.c) ---- */

int ban_init(void);  /* before any object exists */
void ban_fini(void); /* after hsh_fini(): no object may point at a ban */
/*
 * Add a ban.  0, or -1 with the parse error in err.  Any thread; counts
 * bans_added.
 */
int ban_add(const char *expr, struct sb *err);
/*
 * A ban for the objects fetched before `before` (tim_real() seconds): it
 * skips those whose age started later (fresh.t_origin >= before), so that
 * a ban made at `before` and applied later -- replayed after a restart,
 * or arriving late from another node of a cluster -- leaves alone what
 * was fetched since.  It shows in ban.list at that time.  before <= 0,
 * or not in the past: ban_add().  0, or -1 with the parse error.
 */
int ban_add_before(const char *expr, double before, struct sb *err);
/*
 * ban.list: "time refs C|- expression" per ban, newest first; the time in
 * ISO 8601, UTC, to the microsecond (2026-11-26T13:36:24.119988Z).
 */
void ban_list(struct sb *out);
unsigned ban_count(void); /* bans on the list, the completed ones included */

/*
 * Persistence, for a store that outlives the process (-s file): from
 * ban_persist_open() on, each ban added is appended to the file at path
 * with its time and the time it may be forgotten (its time plus the
 * ban_persist parameter), and synced before ban_add() returns.  Opening
 * replays the bans of the file not yet forgotten, as ban_add_before()
 * with their own time, so an object recovered from the store is tested
 * against the bans made before the restart that it had not yet been
 * tested against; then the file is rewritten without the forgotten ones.
 * Call after hsh_recover(), before any request.  ban_persist 0: nothing
 * is read or written.  0, or -1 with the reason in err (the file cannot
 * be read or written).  A line that does not parse is skipped and logged.
 */
int ban_persist_open(const char *path, struct sb *err);
void ban_persist_close(void); /* before ban_fini() */

/* Hooks for hsh.c, each called with the object's shard lock held. */
void ban_obj_new(struct cobj *oc);  /* a new (busy) object points at the newest ban */
void ban_obj_free(struct cobj *oc); /* its last reference went: no lock needed */
/*
 * Test a published object against the bans newer than it has seen.
 * True: it matched one and is now COBJ_BANNED (the caller treats it as
 * gone).  Cheap when there is no newer ban: one pointer comparison.
 */
bool ban_check_obj(struct cobj *oc, const char *key, size_t keylen);

/* The lurker thread: start after hsh_init() and ban_init(), stop before hsh_fini(). */
int ban_lurker_start(void);
void ban_lurker_stop(void);

#endif
