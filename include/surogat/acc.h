/*
 * acc -- listen sockets.
 *
 * Listen addresses are opened at startup (so an unusable -a fails the
 * start with exit code 2) and served from the waiter's set: the worker
 * taking ready sessions accepts a new connection and serves it in the
 * same stretch (TCP_DEFER_ACCEPT means its first bytes are normally
 * there), the waiter thread when no worker takes.
 */
#ifndef SUROGAT_ACC_H
#define SUROGAT_ACC_H

#include <stdbool.h>
#include <sys/types.h>
#include <sys/un.h>

#include "surogat/tls.h"
#include "surogat/wtr.h"

struct sb;

struct lsock {
    unsigned magic;
#define LSOCK_MAGIC 0x91ad03e4
    int fd;
    char *spec;     /* as given to -a */
    char *addr;     /* numeric address actually bound; the path of a Unix socket */
    char port[8];   /* "" for a Unix socket */
    const char *proto;   /* "http" or "https" */
    struct tls_lsn *tls; /* certificates of a tls address, else NULL */
    bool proxy;          /* a PROXY protocol header comes first on each connection */
    bool unix_path;      /* addr is a Unix socket we created; unlinked at exit if still ours */
    dev_t dev;           /* ... identified by its inode */
    ino_t ino;
    bool h2c;            /* cleartext: HTTP/2 with prior knowledge too (",h2c") */
    struct wtr_lsn wl;   /* its entry in the waiter's set, from acc_start() */
};

/* One -a argument, parsed. */
struct acc_spec {
    char host[256]; /* empty for every address */
    char port[32];
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)]; /* a Unix socket; then no host */
    bool tls;
    bool proxy;                      /* "PROXY": the header is required on every connection */
    bool h2c;                        /* cleartext HTTP/2 with prior knowledge besides HTTP/1 */
    bool h1only;                     /* tls: ALPN offers http/1.1 only */
    bool has_mode, has_uid, has_gid; /* Unix socket: mode=, user=, group= given */
    mode_t mode;
    uid_t uid;
    gid_t gid;
    struct tls_conf tls_conf; /* paths made absolute; h2 set from tls and h1only */
};

/*
 * Parse "HOST:PORT", "[V6]:PORT", ":PORT" or an absolute path (a Unix
 * socket), then options separated by commas: "PROXY" (a PROXY protocol
 * header, v1 or v2, must open every connection), "tls" and, for it,
 * "cert=FILE,key=FILE" pairs (the first pair is the default
 * certificate), each optionally followed by "ocsp=FILE"; "h1only" (tls:
 * no HTTP/2 by ALPN) or "h2c" (cleartext: HTTP/2 with prior knowledge as
 * well as HTTP/1); for a Unix socket "mode=OCTAL", "user=NAME|UID" and
 * "group=NAME|GID" (names are looked up now).
 * Relative paths are taken from the directory base (NULL: the current
 * one).  No file is read.  0, or -1 with "-a SPEC: what is wrong" in err;
 * either way release out with acc_spec_clear().
 */
int acc_spec_parse(const char *spec, const char *base, struct acc_spec *out, struct sb *err);
void acc_spec_clear(struct acc_spec *as);
/*
 * Parse and bind one -a argument, loading its certificates (paths from
 * base); -1 and err.  A Unix socket's path is created with its mode and
 * owner: an existing socket file nobody listens on is replaced, anything
 * else there (a live socket, a symbolic link, a file) is an error.
 */
int acc_listen(const char *spec, const char *base, struct sb *err);
/* Serve the listen sockets from the waiter's set (after wtr_init()); 0, or -1 logged. */
int acc_start(void);
/*
 * Take the listen sockets out of the set, wait for accepts in progress,
 * close them (unlinking our Unix ones): from now on the kernel refuses
 * new connections.  Sessions keep their struct lsock until acc_fini().
 */
void acc_stop(void);
/* Free the listen sockets: after acc_stop(), once no worker or waiter runs. */
void acc_fini(void);
/*
 * One line per listen socket: "127.0.0.1:6081", "[::1]:6081", a Unix
 * socket's path; " (tls)" and " (PROXY)" after such listeners.
 */
void acc_dump(struct sb *out);

#endif
