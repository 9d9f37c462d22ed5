/*
 * Admin commands that act on other modules' state rather than report it:
 * the policy programs (policy.load, policy.use, policy.list,
 * policy.discard over pol_prog_*, and the same by Varnish's names,
 * vcl.load, vcl.inline, vcl.use, vcl.list, vcl.show, vcl.discard, in
 * Varnish's words and columns so that varnishadm and deploy scripts
 * written for Varnish work), backend.list, purge, and reload and
 * log.reopen (rld_*).  cli_cmd.c lists them in its table of built-ins;
 * they run on the CLI thread like the others, one at a time.
 */
#include "config.h"

#include <fnmatch.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "surogat/be.h"
#include "surogat/clu.h"
#include "surogat/defs.h"
#include "surogat/cli.h"
#include "surogat/dir.h"
#include "surogat/hsh.h"
#include "surogat/log.h"
#include "surogat/pol.h"
#include "surogat/rld.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

#include "cli_priv.h"

/*
 * How long `reload` waits for the main thread's outcome.  Compiling a
 * script and loading certificates take milliseconds; every admin
 * connection waits meanwhile, so the bound stays modest.
 */
#define RELOAD_WAIT 30.0

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
 * vcl.*: the same programs, by Varnish's names and in its words.
 */

/*
 * The optional state argument of vcl.load and vcl.inline.  surogat keeps
 * every loaded program compiled with its backends probed: Varnish's
 * "warm", which "auto" also is while a program is in use.
 */
static bool
vcl_state_ok(int argc, char *const *argv, int idx, struct sb *out)
{
    if (argc <= idx || strcmp(argv[idx], "auto") == 0 || strcmp(argv[idx], "warm") == 0)
        return (true);
    if (strcmp(argv[idx], "cold") == 0)
        sb_cat(out, "State 'cold' is not possible: surogat keeps every loaded program warm "
                    "(compiled, its backends probed).");
    else
        sb_printf(out, "State must be auto, cold or warm, not '%.32s'.", argv[idx]);
    return (false);
}

unsigned
cli__cmd_vcl_load(int argc, char *const *argv, struct sb *out, void *priv)
{
    if (!vcl_state_ok(argc, argv, 3, out))
        return (CLI_PARAM);
    if (pol_prog_load(argv[1], argv[2], out) != 0)
        return (CLI_FAILED);
    sb_cat(out, "VCL compiled.");
    return (CLI_OK);
}

unsigned
cli__cmd_vcl_inline(int argc, char *const *argv, struct sb *out, void *priv)
{
    if (!vcl_state_ok(argc, argv, 3, out))
        return (CLI_PARAM);
    if (pol_prog_inline(argv[1], argv[2], strlen(argv[2]), out) != 0)
        return (CLI_FAILED);
    sb_cat(out, "VCL compiled.");
    return (CLI_OK);
}

unsigned
cli__cmd_vcl_use(int argc, char *const *argv, struct sb *out, void *priv)
{
    if (pol_prog_use(argv[1], out) != 0) {
        out->len = 0;
        out->buf[0] = '\0';
        sb_printf(out, "No VCL named %.64s known", argv[1]);
        return (CLI_PARAM);
    }
    sb_printf(out, "VCL '%s' now active", argv[1]);
    return (CLI_OK);
}

/* Varnish's columns, which varnishreload cuts with awk -F ' *|/': $1 status, $5 name. */
static void
vcl_list_one(const struct pol_prog_info *pi, void *priv)
{
    sb_printf(priv, "%-12s%-8s%-4s%10u    %s\n", pi->active ? "active" : "available", "auto",
              "warm", pi->workers, pi->name);
}

unsigned
cli__cmd_vcl_list(int argc, char *const *argv, struct sb *out, void *priv)
{
    (void)pol_prog_foreach(vcl_list_one, out);
    return (CLI_OK);
}

struct vcl_show {
    const char *name; /* NULL: the active program */
    bool verbose, found;
    struct sb *out;
};

static void
vcl_show_one(const struct pol_prog_info *pi, void *priv)
{
    struct vcl_show *vs = priv;
    const char *b;
    size_t blen;

    if (vs->found || (vs->name != NULL ? strcmp(pi->name, vs->name) != 0 : !pi->active))
        return;
    vs->found = true;
    if (!vs->verbose) {
        sb_bcat(vs->out, pi->src, pi->len);
        return;
    }
    /* "// VCL.SHOW N SIZE FILE" before each source, as varnishadm vcl.show -v writes it. */
    b = pol_builtin_source(&blen);
    sb_printf(vs->out, "// VCL.SHOW 0 %zu %s\n", pi->len, pi->path);
    sb_bcat(vs->out, pi->src, pi->len);
    sb_printf(vs->out, "\n// VCL.SHOW 1 %zu <builtin>\n", blen);
    sb_bcat(vs->out, b, blen);
    sb_cat(vs->out, "\n");
}

unsigned
cli__cmd_vcl_show(int argc, char *const *argv, struct sb *out, void *priv)
{
    struct vcl_show vs = { .out = out };

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-v") == 0 && !vs.verbose) {
            vs.verbose = true;
        } else if (vs.name == NULL && argv[i][0] != '-') {
            vs.name = argv[i];
        } else {
            sb_printf(out, "Unexpected '%.64s'.\nUsage: vcl.show [-v] [<name>]", argv[i]);
            return (CLI_USAGE);
        }
    }
    (void)pol_prog_foreach(vcl_show_one, &vs);
    if (vs.found)
        return (CLI_OK);
    if (vs.name != NULL)
        sb_printf(out, "No VCL named '%.64s'.", vs.name);
    else
        sb_cat(out, "No policy program is in use (surogatd runs the built-in policy).");
    return (CLI_PARAM);
}

#define VCL_DISCARD_MAX 64 /* programs one vcl.discard takes away */

struct vcl_match {
    const char *pattern;
    char *names[VCL_DISCARD_MAX];
    unsigned n;
};

static void
vcl_match_one(const struct pol_prog_info *pi, void *priv)
{
    struct vcl_match *vm = priv;

    if (vm->n < VCL_DISCARD_MAX && fnmatch(vm->pattern, pi->name, 0) == 0) {
        vm->names[vm->n] = strdup(pi->name);
        AN(vm->names[vm->n]);
        vm->n++;
    }
}

/* Varnish's vcl.discard: names or glob patterns; each must match a program. */
unsigned
cli__cmd_vcl_discard(int argc, char *const *argv, struct sb *out, void *priv)
{
    struct vcl_match vm;
    unsigned status = CLI_OK;

    for (int i = 1; i < argc && status == CLI_OK; i++) {
        memset(&vm, 0, sizeof vm);
        vm.pattern = argv[i];
        (void)pol_prog_foreach(vcl_match_one, &vm);
        if (vm.n == 0) {
            sb_printf(out, "No VCL named %.64s known", argv[i]);
            status = CLI_PARAM;
        }
        for (unsigned j = 0; j < vm.n; j++) {
            if (status == CLI_OK && pol_prog_discard(vm.names[j], out) != 0)
                status = CLI_FAILED;
            free(vm.names[j]);
        }
    }
    return (status);
}

/*--------------------------------------------------------------------
 * backend.list: with several programs loaded, each backend under the name
 * program.backend, as Varnish's vcl.backend; the -b backend, which
 * belongs to none, under its own name.  Then the directors.
 */

struct be_seen {
    const struct be **be;
    unsigned n, cap;
    struct sb *out;
    unsigned nprog;
    bool dir_head;
};

static void
seen_add(struct be_seen *bs, const struct be *be)
{
    if (bs->n == bs->cap) {
        bs->cap = bs->cap == 0 ? 16 : 2 * bs->cap;
        bs->be = realloc(bs->be, bs->cap * sizeof *bs->be);
        AN(bs->be);
    }
    bs->be[bs->n++] = be;
}

static void
list_prog_backends(const struct pol_prog_info *pi, void *priv)
{
    struct be_seen *bs = priv;

    for (unsigned i = 0; i < pi->nbe; i++) {
        be_list_row(pi->be[i], bs->nprog > 1 ? pi->name : NULL, bs->out);
        seen_add(bs, pi->be[i]);
    }
}

/* Under be_foreach(): the live backends no program declares (-b's). */
static void
list_other_backend(const struct be *be, void *priv)
{
    struct be_seen *bs = priv;

    for (unsigned i = 0; i < bs->n; i++)
        if (bs->be[i] == be)
            return;
    be_list_row(be, NULL, bs->out);
}

static void
list_prog_directors(const struct pol_prog_info *pi, void *priv)
{
    struct be_seen *bs = priv;
    const struct dir *d;
    char name[256];

    for (unsigned i = 0; i < pi->ndir; i++) {
        d = pi->dir[i];
        if (dir_type(d) == DIR_BACKEND)
            continue;
        if (!bs->dir_head)
            sb_printf(bs->out, "\n%-24s %-12s %s\n", "Director", "Type", "Members");
        bs->dir_head = true;
        snprintf(name, sizeof name, "%s%s%s", bs->nprog > 1 ? pi->name : "",
                 bs->nprog > 1 ? "." : "", dir_name(d));
        sb_printf(bs->out, "%-24s %-12s ", name, dir_type_name(dir_type(d)));
        for (unsigned j = 0; j < dir_nmembers(d); j++)
            sb_printf(bs->out, "%s%s", j > 0 ? "," : "", dir_name(dir_member(d, j)));
        sb_cat(bs->out, "\n");
    }
}

static void
count_prog(const struct pol_prog_info *pi, void *priv)
{
    (void)pi;
    (*(unsigned *)priv)++;
}

unsigned
cli__cmd_backend_list(int argc, char *const *argv, struct sb *out, void *priv)
{
    struct be_seen bs = { .out = out };

    (void)pol_prog_foreach(count_prog, &bs.nprog);
    be_list_head(out);
    /* A program loaded or discarded in between shows in the next listing. */
    (void)pol_prog_foreach(list_prog_backends, &bs);
    be_foreach(list_other_backend, &bs);
    (void)pol_prog_foreach(list_prog_directors, &bs);
    free(bs.be);
    return (CLI_OK);
}

/*--------------------------------------------------------------------
 * reload, log.reopen
 */

unsigned
cli__cmd_reload(int argc, char *const *argv, struct sb *out, void *priv)
{
    int rv = rld_request(RELOAD_WAIT, out);

    log_msg(LOG_NOTICE, "cli: reload: %s", rv == 0 ? "done" : "failed");
    return (rv == 0 ? CLI_OK : CLI_FAILED);
}

unsigned
cli__cmd_log_reopen(int argc, char *const *argv, struct sb *out, void *priv)
{
    int rv = rld_reopen_logs(out);

    /* After the reopen, so that the line lands in the new file. */
    log_msg(rv == 0 ? LOG_NOTICE : LOG_ERR, "cli: log.reopen: %s", out->buf);
    return (rv == 0 ? CLI_OK : CLI_FAILED);
}

/*--------------------------------------------------------------------
 * purge URL [HOST]
 *
 * The key is the built-in one, as an HTTP PURGE without a hash hook
 * computes it: the Host lower-cased, a NUL, the request-target.  Without
 * a host, every cached key whose request-target is URL goes, whatever
 * its host, found by a walk over the index (clu_op_apply's CLU_OP_URL).
 * In a cluster, the same op is then sent to every other member
 * (clu_fanout) and the answer has a line per member.
 */

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
    size_t hlen = host != NULL ? strlen(host) : 0, tlen;
    char *abs = NULL, *key = NULL;
    struct clu_op op;
    struct clu *c;
    long n;

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
    tlen = strlen(target);
    if (host != NULL) {
        key = malloc(hlen + 1 + tlen);
        AN(key);
        for (size_t i = 0; i < hlen; i++) {
            char ch = host[i];
            key[i] = (ch >= 'A' && ch <= 'Z') ? (char)(ch + 32) : ch;
        }
        key[hlen] = '\0';
        memcpy(key + hlen + 1, target, tlen);
    }
    c = pol_cluster();
    clu_op_init(&op, c != NULL ? clu_self(c) : "local", host != NULL ? CLU_OP_KEY : CLU_OP_URL,
                false, host != NULL ? key : target, host != NULL ? hlen + 1 + tlen : tlen);
    n = clu_op_apply(&op, out);
    AZ(n < 0); /* only a ban can fail */
    STAT_INC(purges);
    STAT_ADD(purge_objects, n);
    log_msg(LOG_NOTICE, "cli: purge %s%s%.*s: %ld objects", url, host != NULL ? " host " : "",
            (int)hlen, host != NULL ? host : "", n);
    sb_printf(out, "Purged %ld object%s.", n, n == 1 ? "" : "s");
    if (c != NULL) {
        sb_cat(out, "\n");
        (void)clu_fanout(c, &op, n, out);
        clu_unref(&c);
    }
    free(key);
    free(abs);
    return (CLI_OK);
}
