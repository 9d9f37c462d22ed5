/*
 * Admin commands that act on other modules' state rather than report it:
 * the policy programs (policy.load, policy.use, policy.list,
 * policy.discard over pol_prog_*) and purge.  cli_cmd.c lists them in
 * its table of built-ins; they run on the CLI thread like the others,
 * one at a time.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/cli.h"
#include "surogat/hsh.h"
#include "surogat/log.h"
#include "surogat/pol.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

#include "cli_priv.h"

/* How many objects hsh_walk() visits per shard lock: lookups wait for at most this many. */
#define PURGE_WALK_STEP 1024

/*--------------------------------------------------------------------
 * policy.*
 */

unsigned
cli__cmd_policy_load(int argc, char *const *argv, struct sb *out, void *priv)
{
    if (pol_prog_load(argv[1], argv[2], out) != 0)
        return (CLI_FAILED);
    sb_printf(out, "Program '%s' loaded from %s.", argv[1], argv[2]);
    return (CLI_OK);
}

unsigned
cli__cmd_policy_use(int argc, char *const *argv, struct sb *out, void *priv)
{
    if (pol_prog_use(argv[1], out) != 0)
        return (CLI_FAILED);
    sb_printf(out, "Program '%s' now in use.", argv[1]);
    return (CLI_OK);
}

unsigned
cli__cmd_policy_discard(int argc, char *const *argv, struct sb *out, void *priv)
{
    if (pol_prog_discard(argv[1], out) != 0)
        return (CLI_FAILED);
    return (CLI_OK);
}

unsigned
cli__cmd_policy_list(int argc, char *const *argv, struct sb *out, void *priv)
{
    pol_prog_list(out);
    return (CLI_OK);
}

/*--------------------------------------------------------------------
 * purge URL [HOST]
 *
 * The key is the built-in one, as an HTTP PURGE without a hash hook
 * computes it: the Host lower-cased, a NUL, the request-target.  Without
 * a host, every cached key whose request-target is URL goes, whatever
 * its host, found by a walk over the index.
 */

struct purge_walk {
    const char *target;
    size_t len;
    unsigned n;
};

/*
 * Under a shard lock.  A hash hook may have appended pieces to the
 * built-in key, each after a NUL: the target still ends at a NUL.
 */
static bool
purge_visit(struct cobj *oc, const char *key, size_t keylen, void *priv)
{
    struct purge_walk *pw = priv;
    const char *t = memchr(key, '\0', keylen);
    size_t rest;

    (void)oc;
    if (t == NULL)
        return (false);
    t++;
    rest = keylen - (size_t)(t - key);
    if (rest < pw->len || memcmp(t, pw->target, pw->len) != 0 ||
        (rest > pw->len && t[pw->len] != '\0'))
        return (false);
    pw->n++;
    return (true);
}

static unsigned
purge_all_hosts(const char *target, size_t len)
{
    struct purge_walk pw = { .target = target, .len = len };
    struct hsh_cursor cur;

    memset(&cur, 0, sizeof cur);
    while (!hsh_walk(&cur, PURGE_WALK_STEP, purge_visit, &pw))
        continue;
    return (pw.n);
}

static unsigned
purge_host(const char *host, size_t hlen, const char *target, size_t tlen)
{
    char *key = malloc(hlen + 1 + tlen);
    unsigned n;

    AN(key);
    for (size_t i = 0; i < hlen; i++) {
        char c = host[i];
        key[i] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
    }
    key[hlen] = '\0';
    memcpy(key + hlen + 1, target, tlen);
    n = hsh_purge_key(key, hlen + 1 + tlen, false);
    free(key);
    return (n);
}

/* What a Host field may hold: visible ASCII, no '/' (hosts are compared as sent). */
static bool
host_ok(const char *host, size_t len)
{
    if (len == 0)
        return (false);
    for (size_t i = 0; i < len; i++)
        if (host[i] <= ' ' || host[i] >= 0x7f || host[i] == '/')
            return (false);
    return (true);
}

unsigned
cli__cmd_purge(int argc, char *const *argv, struct sb *out, void *priv)
{
    const char *url = argv[1], *host = argc > 2 ? argv[2] : NULL, *target = url;
    size_t hlen = host != NULL ? strlen(host) : 0;
    char *abs = NULL;
    unsigned n;

    if (strncasecmp(url, "http://", 7) == 0 || strncasecmp(url, "https://", 8) == 0) {
        const char *a = strchr(url, '/') + 2;
        size_t alen = strcspn(a, "/?#");

        if (host != NULL) {
            sb_cat(out, "Give the host in the URL or as HOST, not both.");
            return (CLI_USAGE);
        }
        if (alen == 0) {
            sb_printf(out, "No host in '%s'.", url);
            return (CLI_BADVAL);
        }
        host = a;
        hlen = alen;
        target = a + alen;
        if (*target != '/') {
            /* "http://h" and "http://h?q" ask for "/" and "/?q", as a client would. */
            AN(asprintf(&abs, "/%s", target) > 0);
            target = abs;
        }
    } else if (url[0] != '/') {
        sb_printf(out, "Bad URL '%.200s': a path starting with '/', or http://HOST/PATH.", url);
        return (CLI_BADVAL);
    }
    if (host != NULL && !host_ok(host, hlen)) {
        sb_printf(out, "Bad host '%.*s'.", (int)SRG_MIN(hlen, 200), host);
        free(abs);
        return (CLI_BADVAL);
    }
    if (target[strcspn(target, "#")] == '#') {
        /* A fragment never reaches a server: no key holds one. */
        sb_printf(out, "Bad URL '%.200s': a fragment (#) is never part of a request.", url);
        free(abs);
        return (CLI_BADVAL);
    }
    if (host != NULL)
        n = purge_host(host, hlen, target, strlen(target));
    else
        n = purge_all_hosts(target, strlen(target));
    STAT_INC(purges);
    STAT_ADD(purge_objects, n);
    log_msg(LOG_NOTICE, "cli: purge %s%s%.*s: %u objects", url, host != NULL ? " host " : "",
            (int)hlen, host != NULL ? host : "", n);
    sb_printf(out, "Purged %u object%s.", n, n == 1 ? "" : "s");
    free(abs);
    return (CLI_OK);
}
