/*
 * The panic path: report the failed assertion on stderr and abort, so the
 * core dump (or the sanitizer) shows the state.  It must not allocate or
 * take locks: the heap or a lock may be what broke.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "surogat/defs.h"

void
srg_panic(const char *file, int line, const char *func, const char *cond)
{
    char buf[512];
    int n;

    n = snprintf(buf, sizeof buf, "surogat panic: %s:%d %s(): assertion failed: %s\n", file, line,
                 func, cond);
    if (n > 0)
        (void)!write(STDERR_FILENO, buf, (size_t)SRG_MIN(n, (int)sizeof buf - 1));
    abort();
}
