/*
 * Files that must survive a crash (see fsu.h).  No state: the callers
 * serialise their own writes to a file.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/fsu.h"

int
fsu_write_all(int fd, const void *p, size_t len)
{
    const char *b = p;

    while (len > 0) {
        ssize_t n = write(fd, b, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return (-1);
        b += n;
        len -= (size_t)n;
    }
    return (0);
}

/* The rename is durable once the directory holding the file is synced. */
static void
sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    int dfd;

    if (slash == NULL) {
        dir = strdup(".");
    } else if (slash == path) {
        dir = strdup("/");
    } else {
        dir = strndup(path, (size_t)(slash - path));
    }
    AN(dir);
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    free(dir);
    if (dfd >= 0) {
        (void)fsync(dfd);
        (void)close(dfd);
    }
}

int
fsu_replace(const char *path, fsu_fill_f *fill, void *priv, int *fdp)
{
    size_t tl = strlen(path) + 5;
    char *tmp = malloc(tl);
    int fd, afd, e;

    AN(tmp);
    snprintf(tmp, tl, "%s.tmp", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        goto fail_open;
    if (fill(fd, priv) != 0 || fsync(fd) != 0 || rename(tmp, path) != 0)
        goto fail;
    sync_dir(path);
    AZ(close(fd));
    free(tmp);
    afd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (afd < 0)
        return (-1);
    if (*fdp >= 0)
        (void)close(*fdp);
    *fdp = afd;
    return (0);
fail:
    e = errno;
    (void)close(fd);
    (void)unlink(tmp);
    errno = e;
fail_open:
    free(tmp);
    return (-1);
}
