/*
 * sfb -- the static-file backend: answers requests from a directory tree,
 * as nginx would for static content, without going through the cache.
 *
 * Safety comes first.  A request-target is decoded and normalised once
 * (sfb_path_norm) and refused whole when it is ambiguous: a ".." segment,
 * an encoded '/', a backslash, a NUL or control byte, a bad or overlong
 * UTF-8 sequence.  Nothing is "repaired".  Each segment of what is left is
 * matched against a deny list, and the file is opened relative to the
 * root with the kernel refusing any path that leaves it (symlinks
 * included) unless follow_symlinks says otherwise.
 *
 * An sfb is built on the main thread and read-only afterwards, except for
 * its open-file cache, which has its own lock: many workers share it.
 */
#ifndef SUROGAT_SFB_H
#define SUROGAT_SFB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "surogat/http.h"

struct sb;

struct sfb_conf {
    const char *root;         /* an existing directory */
    const char *const *index; /* NULL: {"index.html"} */
    unsigned nindex;
    bool listing;            /* directory listing when no index file */
    bool follow_symlinks;    /* allow symlinks leading outside root */
    const char *const *deny; /* glob patterns; NULL: SFB_DENY_DEFAULT */
    unsigned ndeny;
    const char *mime_file;   /* NULL: /etc/mime.types if readable; "": the built-in table only */
    const char *const *mime; /* overrides "ext=type", winning over the file */
    unsigned nmime;
    /*
     * "type-pattern=seconds" ("text/css=604800", or a glob: "image/" then
     * '*' then "=30d" for every image type): the first pattern matching a
     * file's type gives its Cache-Control max-age and Expires, as
     * mod_expires' ExpiresByType.  Durations as num_duration().
     */
    const char *const *expires;
    unsigned nexpires;
};

/*
 * The default deny list, matched case-insensitively against every segment
 * of a path: server-side source, Apache's .ht files and other dotfiles,
 * editor and backup copies.  A pattern starting with '!' allows what it
 * matches even if another pattern denies it (".well-known", RFC 8615).
 */
#define SFB_DENY_DEFAULT                                                                       \
    "*.php", "*.php?", "*.php.*", "*.phtml", "*.phar", "*.inc", "*.inc.*", ".ht*", ".*", "*~", \
        "*.bak", "*.old", "*.orig", "*.save", "*.swp", "*.swo", "*.tmp", "#*#", "!.well-known"

struct sfb;
/* NULL with a message in err: no such directory, an unreadable mime file, a bad entry. */
struct sfb *sfb_new(const struct sfb_conf *c, struct sb *err);
/* The same with the configuration of the sfb_* parameters (-b /DIR). */
struct sfb *sfb_new_params(const char *root, struct sb *err);
void sfb_free(struct sfb **sfbp); /* *sfbp = NULL; no request may be using it */
/*
 * What a static-file backend answers: a response for the request core to
 * deliver.  fields are field lines ("Name: value\r\n", no framing) in the
 * workspace given to sfb_answer().  With `error`, the status is a refusal
 * the core answers with its own error page (fields: extra lines, such as
 * Allow for a 405).  Otherwise a body of len bytes follows when `body`
 * (not for a 304): from mem, else from the file fd at off.
 */
struct sfb_file;
struct sfb_zcopy;
struct sfb_resp {
    unsigned status;
    bool error;
    struct txt fields;
    bool body;
    uint64_t len;
    const char *mem;
    int fd;
    off_t off;
    struct sfb_file *file;   /* held for the body until sfb_resp_done() */
    struct sfb_file *base;   /* a precompressed sibling's file, held likewise */
    struct sfb_zcopy *zcopy; /* a compressed copy (mem points into it), held likewise */
    char *page;              /* a listing, malloc'd */
};
/*
 * Answer request req from the files: GET and HEAD (else 405), conditional
 * (304), Range (206, 416; several ranges get the whole body), index files,
 * listing, redirects of a directory without its slash.  A file is sent in
 * the coding the client's Accept-Encoding prefers among identity, its
 * precompressed siblings (sfb_precompressed) and, for a compressible
 * file, the codings of compress_formats, compressed once and kept
 * (sfb_compress_cache).  Never blocks on a client; opens files (the
 * open-file cache mostly spares it) and may compress one.
 */
struct ws;
void sfb_answer(struct sfb *sfb, const struct http *req, struct ws *ws, struct sfb_resp *r);
/* The response was sent (or not): release its file and page. */
void sfb_resp_done(struct sfb *sfb, struct sfb_resp *r);
/* The static files as a backend kind ("static", be.h): sfb_answer(), sfb_resp_done(). */
struct be_ops;
extern const struct be_ops sfb_be_ops;

enum sfb_path {
    SFB_PATH_OK,
    SFB_PATH_BAD,       /* 400: bad %-escape, NUL, control byte, backslash, bad UTF-8 */
    SFB_PATH_TRAVERSAL, /* 400: a ".." segment or an encoded '/' */
    SFB_PATH_TOO_LONG,  /* 414: the result does not fit */
};
/*
 * Decode and normalise the path of an origin-form request-target (the
 * query and fragment cut off) into out (cap bytes, NUL-terminated): it
 * starts with '/', has no empty, "." or ".." segment, keeps a trailing
 * '/' (a directory was asked for) and is valid UTF-8.  Never allocates.
 */
enum sfb_path sfb_path_norm(const char *url, size_t len, char *out, size_t cap, size_t *outlen);
/* Whether `s` matches the glob `pat` (* ? [a-z] [!x]), ASCII case-insensitively. */
bool sfb_glob(const char *pat, const char *s);
/* Whether a segment of the normalised path is denied by the sfb's list. */
bool sfb_denied(const struct sfb *sfb, const char *path);
/* The Content-Type of a path, by its extension; application/octet-stream when unknown. */
const char *sfb_mime_type(const struct sfb *sfb, const char *path);
/* The expires seconds for a type (parameters ignored), or -1 when no pattern matches. */
long sfb_expires(const struct sfb *sfb, const char *type);
/* The number of extensions known (tells the unit tests a mime file was read). */
size_t sfb_mime_count(const struct sfb *sfb);

#endif
