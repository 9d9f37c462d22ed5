/*
 * Fuzz the config file parser.  The input is written to a memfd and
 * loaded by its /proc/self/fd path.  On success every parameter must
 * hold a value its own par_set accepts (in range); on failure the error
 * must read "path:LINE: message" with LINE a line of the input.
 */
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "surogat/sb.h"
#include "surogat/par.h"
#include "surogat/cfg.h"

#include "fuzz.h"

static const char *const names[] = {
#define PARAM(name, ...) #name,
#include "surogat/tbl/params.h"
};

static int fd = -1;
static char path[64];

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char ebuf[1024], vbuf[4096], ebuf2[256];
    struct sb err, sb, err2;
    size_t lines = 1, plen;
    int rc;

    if (fd < 0) {
        fd = memfd_create("surogat-fuzz-cfg", 0);
        FUZZ_CHECK(fd >= 0);
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    FUZZ_CHECK(ftruncate(fd, 0) == 0);
    FUZZ_CHECK(pwrite(fd, data, size, 0) == (ssize_t)size);
    for (size_t i = 0; i < size; i++)
        lines += data[i] == '\n';

    par_init();
    sb_init(&err, ebuf, sizeof ebuf);
    rc = cfg_load(path, &err);
    FUZZ_CHECK(rc == 0 || rc == -1);
    if (rc == -1) {
        char *end;
        unsigned long line;

        plen = strlen(path);
        FUZZ_CHECK(err.len > plen + 3);
        FUZZ_CHECK(strncmp(ebuf, path, plen) == 0 && ebuf[plen] == ':');
        line = strtoul(ebuf + plen + 1, &end, 10);
        FUZZ_CHECK(end > ebuf + plen + 1 && end[0] == ':' && end[1] == ' ');
        FUZZ_CHECK(line >= 1 && line <= lines);
        return 0;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        sb_init(&sb, vbuf, sizeof vbuf);
        FUZZ_CHECK(par_get(names[i], &sb) == 0);
        if (!sb_ok(&sb))
            continue; /* a very long string value */
        sb_init(&err2, ebuf2, sizeof ebuf2);
        FUZZ_CHECK(par_set(names[i], vbuf, &err2) == 0);
    }
    return 0;
}
