/*
 * cfg -- the daemon configuration file (-c FILE, etc/surogat.conf).
 *
 * The format is one `name = value` per line, setting the parameters of
 * tbl/params.h; `#` starts a comment; values may be quoted with "".
 * Errors name the file and line: "surogat.conf:12: unknown parameter".
 * `listen = SPEC` (the -a syntax, repeatable) adds a listen address.
 */
#ifndef SUROGAT_CFG_H
#define SUROGAT_CFG_H

struct sb;

/* 0, or -1 with "file:line: message" in err.  Parameters set before an error stay set. */
int cfg_load(const char *path, struct sb *err);
/*
 * The file without acting on it: fn(name, value, priv) for each
 * `name = value` line in order, `listen` lines included (checked first).
 * fn returns 0, or -1 having written a reason to err, which cfg_parse()
 * then prefixes with "file:line: " and stops.  0, or -1 with
 * "file:line: message" in err.
 */
typedef int cfg_line_f(const char *name, const char *value, struct sb *err, void *priv);
int cfg_parse(const char *path, cfg_line_f *fn, void *priv, struct sb *err);
/* Keep a `listen` value (checked already) for cfg_listen().  0, or -1 past CFG_LISTEN_MAX. */
#define CFG_LISTEN_MAX 32
int cfg_add_listen(const char *value, struct sb *err);
/* The i-th `listen` value loaded, or NULL past the last; valid until cfg_fini(). */
const char *cfg_listen(unsigned i);
void cfg_fini(void);

#endif
