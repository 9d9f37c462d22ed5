/*
 * alog -- the access log: one line per request in NCSA combined format
 * followed by surogat's fields:
 *
 *   %h - %u [%t] "%r" %s %b "%{Referer}i" "%{User-Agent}i" %D %F %B %C
 *
 * %D the total time in microseconds, %F the time to the first response
 * byte in microseconds, %B the backend name (or "-"), %C the cache status
 * (HIT, MISS, PASS, SYNTH).  Workers buffer their lines and append them
 * with one write(2) when the buffer fills or the worker goes idle, so
 * lines never interleave and a request costs no syscall.
 */
#ifndef SUROGAT_ALOG_H
#define SUROGAT_ALOG_H

#include <stdbool.h>

struct alog_buf;
struct req;

int alog_init(const char *path); /* "" or NULL: off */
void alog_fini(void);
int alog_reopen(void);
bool alog_enabled(void);
struct alog_buf *alog_buf_new(void);
void alog_buf_free(struct alog_buf **abp); /* flushes first */
void alog_req(struct alog_buf *ab, const struct req *req);
void alog_flush(struct alog_buf *ab);

#endif
