/*
 * fsu -- small files that must survive a crash: appended and synced as
 * records come, and replaced whole by a new version that is either all
 * there or not there at all (the bans file, a cluster's journal).
 */
#ifndef SUROGAT_FSU_H
#define SUROGAT_FSU_H

#include <stddef.h>

/* Write all len bytes at p to fd, EINTR retried.  0, or -1 with errno. */
int fsu_write_all(int fd, const void *p, size_t len);

/* Writes a file's new content on fd (with fsu_write_all()): 0, or -1 with errno. */
typedef int fsu_fill_f(int fd, void *priv);
/*
 * Replace path by what fill writes: into path.tmp, synced, renamed over
 * path, the directory synced, so that a crash leaves the old file or the
 * new one, never a mix.  Then *fdp is the new file opened for appending
 * (a descriptor it held before is closed).  0, or -1 with errno, the old
 * file and *fdp as they were.
 */
int fsu_replace(const char *path, fsu_fill_f *fill, void *priv, int *fdp);

#endif
