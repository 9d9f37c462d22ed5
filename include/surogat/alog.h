/*
 * alog -- the access log: one line per request, to a file (access_log),
 * to syslog (access_log_syslog) or both, in the format access_log_format:
 *
 *   combined  NCSA combined followed by surogat's fields, the default:
 *             %h %l %u [%t] "%r" %s %b "%{Referer}i" "%{User-Agent}i"
 *             %D %{ttfb}x %{backend}x %{cache}x
 *   json      one JSON object per line (keys in surogatd(8))
 *   else      a format string of literal text and these fields:
 *
 *   %h %a   client address          %l %u   "-" (ident, user)
 *   %t      [22/Nov/2026:10:44:45 +0000], when the request head was complete
 *   %r      request line            %m %U %q %H   method, path, ?query, protocol
 *   %s      status                  %b %B   body bytes ("-" / 0 when none)
 *   %D      total time, us          %T      total time, s; %{ms}T %{us}T %{s}T
 *   %{Name}i  request header, "-" if absent, quotes and controls as \xHH
 *   %{cache}x %{backend}x %{ttfb}x (us) %{port}x %{restarts}x %{retries}x
 *   %{hooks}x (policy hooks run, "recv,hash")      %%  a percent sign
 *   %{esi}x   an ESI page's includes: url:CACHE:status:ms each, "!" before a
 *             failed one, comma-separated; "-" for none
 *
 * Workers buffer their file lines and append them with one write(2) when
 * the buffer fills, is a second old, or the worker goes idle, so lines
 * never interleave and a request costs no syscall.  Syslog lines are sent
 * one datagram each, as they are made.
 */
#ifndef SUROGAT_ALOG_H
#define SUROGAT_ALOG_H

#include <stdbool.h>

struct alog_buf;
struct req;
struct sb;

/*
 * path "" or NULL: no file.  format as above (NULL: combined).  0, or -1
 * with the reason in err: a bad format, or a file that cannot be opened.
 */
int alog_init(const char *path, const char *format, bool to_syslog, struct sb *err);
void alog_fini(void);
int alog_reopen(void);
bool alog_enabled(void);
struct alog_buf *alog_buf_new(void);
void alog_buf_free(struct alog_buf **abp); /* flushes first */
void alog_req(struct alog_buf *ab, const struct req *req);
void alog_flush(struct alog_buf *ab);
/*
 * Between tasks: write the buffered lines unless the last write was under
 * a millisecond ago.  A worker going from one request to the next writes
 * each line at once when requests are apart (the log follows the order
 * clients saw), and at most once a millisecond when they are not.
 */
void alog_flush_soon(struct alog_buf *ab);
/*
 * Format req's line by `format` into sb, without a newline: what
 * alog_req() writes.  0, or -1 with the reason in err for a bad format.
 */
int alog_format_line(const char *format, const struct req *req, struct sb *sb, struct sb *err);

#endif
