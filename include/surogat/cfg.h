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
/* The i-th `listen` value loaded, or NULL past the last; valid until cfg_fini(). */
const char *cfg_listen(unsigned i);
void cfg_fini(void);

#endif
